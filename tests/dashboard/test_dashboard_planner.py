"""The planner page (pages/planner.py, logic in dashboard/planner.py): the layouts table is
calculator.planning.planner's ranking for the same inputs, the 'what fits' metrics are calculator.planning.solvers' answers,
a layout's link opens the calculator on exactly that layout, and a job that fits nowhere says so.

Expected values are built from the engine's own API (ModelSpec / Workload / presets), not through
dashboard.inputs.state, so a wrong mapping from the link to the engine fails these tests.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from streamlit.testing.v1 import AppTest

from calculator import estimate
from calculator.planning.planner import fewest_gpus, plans_for
from calculator.model.presets import get_gpu, load_model
from calculator.planning.solvers import max_micro_batch, max_seq_len
from calculator.core.units import format_bytes
from calculator.core.workload import Parallelism, Workload
from dashboard import planner
from dashboard.inputs import state
from dashboard.safe_text import plain
from tests.html_read import fit_cards

APP = Path(__file__).resolve().parents[2] / "app.py"
PAGE = "pages/planner.py"
QWEN = load_model("qwen2.5-7b").spec
H100 = get_gpu("h100-sxm").usable_bytes  # what the page plans against: PyTorch's capacity
A100_40 = get_gpu("a100-40gb").usable_bytes


def open_planner(query: dict) -> AppTest:
    """The planner opened from a shared link (a fresh session whose URL is /planner?…)."""
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.switch_page(PAGE)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


def table(at: AppTest) -> list[dict]:
    assert len(at.dataframe) == 1
    return at.dataframe[0].value.to_dict("records")


def metric_values(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def expected_rows(plans, unit="GB"):
    plans = plans[:planner.PAGE_ROWS]  # the first page
    return [(p.gpus, p.tp, p.pp, p.dp, p.zero, p.recompute, format_bytes(p.total_bytes, unit),
             pytest.approx(p.utilization)) for p in plans]


def row_tuples(rows):
    return [(r["GPUs"], r["TP"], r["PP"], r["DP"], r["ZeRO"], r["Recompute"], r["Per GPU"], r["Of capacity"])
            for r in rows]


def test_fewest_gpus_table_is_the_engines_ranking():
    at = open_planner({"model": "qwen2.5-7b", "seq": "8192", "v": "1"})
    w = Workload(seq_len=8192, gpu="h100-sxm")
    expected = fewest_gpus(QWEN, w, H100, limit=planner.LIMIT)
    assert expected
    assert row_tuples(table(at)) == expected_rows(expected)
    assert "open in calculator" in str(at.dataframe[0].proto.columns)  # the link column's display text


def test_gpu_count_and_max_tp_are_the_engines_inputs():
    at = open_planner({"model": "qwen2.5-7b", "gpu": "a100-40gb", "rc": "selective", "pgpus": "8", "pmaxtp": "2"})
    assert at.number_input(key="pgpus").value == 8 and at.number_input(key="pmaxtp").value == 2
    w = Workload(recompute="selective", gpu="a100-40gb")
    expected = plans_for(QWEN, w, 8, A100_40, max_tp=2)
    assert expected and all(p.tp <= 2 for p in expected)
    assert row_tuples(table(at)) == expected_rows(expected)
    # changing the GPU count in the page replans
    at.number_input(key="pgpus").set_value(16).run()
    assert row_tuples(table(at)) == expected_rows(plans_for(QWEN, w, 16, A100_40, max_tp=2))


def test_every_row_shows_its_time_and_the_ranking_key_is_an_input():
    """Issue 23: each row has step time, tokens/s per GPU, MFU and the bottleneck; prank reorders; pgb sets the
    global batch (the same tokens per step for every layout)."""
    at = open_planner({"model": "qwen2.5-7b", "seq": "8192", "pgpus": "8"})
    rows = table(at)
    assert all(r["Step time"] != "—" and r["Tokens/s/GPU"] and r["MFU"] and r["Bottleneck"] != "—" for r in rows)
    speeds = [r["Tokens/s/GPU"] for r in rows]
    assert speeds == sorted(speeds, reverse=True)
    at = open_planner({"model": "qwen2.5-7b", "seq": "8192", "pgpus": "8", "prank": "most-headroom"})
    assert at.selectbox(key="prank").value == "most-headroom"
    used = [r["Of capacity"] for r in table(at)]
    assert used == sorted(used)
    at = open_planner({"model": "qwen2.5-7b", "seq": "8192", "pgpus": "8", "pgb": "32"})
    assert all(r["Micro-batch"] * r["Micro-batches"] * r["DP"] == 32 for r in table(at))


def test_each_layout_link_opens_the_calculator_on_that_layout():
    at = open_planner({"model": "qwen2.5-7b", "seq": "8192", "mbs": "2", "pgpus": "8"})
    rows = table(at)
    w = Workload(seq_len=8192, micro_batch=2, gpu="h100-sxm")
    plans = plans_for(QWEN, w, 8, H100)
    assert len(plans) > planner.PAGE_ROWS and len(rows) == planner.PAGE_ROWS  # the first page of 50
    assert [r["Rank"] for r in rows] == list(range(1, planner.PAGE_ROWS + 1))
    for row, p in list(zip(rows, plans))[::7]:
        url = urlsplit(row["Open"])
        assert url.path == "/"  # the calculator is the app's root page
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        assert query["model"] == "qwen2.5-7b" and query["seq"] == "8192"
        assert int(query.get("mbs", 1)) == p.micro_batch and int(query.get("cp", 1)) == p.cp
        assert int(query.get("tp", 1)) == p.tp and int(query.get("pp", 1)) == p.pp
        assert int(query.get("dp", 1)) == p.dp and query.get("zero", "0") == str(p.zero)
        assert query.get("rc", "none") == p.recompute
        assert query.get("sp", "false") == ("true" if p.tp > 1 and (8192 // p.cp) % p.tp == 0 else "false")
        # the calculator, given that link, shows the planner's number
        link = state.check_query_params(query)
        assert not link.ignored
        assert state.compute({**state.DEFAULTS, **link.values}).estimate.total_bytes == p.total_bytes
    assert at.get("link_button")[0].proto.url == rows[0]["Open"]


def test_the_table_is_paginated_and_page_two_continues_the_ranking():
    at = open_planner({"model": "qwen2.5-7b", "seq": "8192", "mbs": "2", "pgpus": "8", "ppage": "2"})
    rows = table(at)
    plans = plans_for(QWEN, Workload(seq_len=8192, micro_batch=2, gpu="h100-sxm"), 8, H100)
    assert rows[0]["Rank"] == planner.PAGE_ROWS + 1
    assert row_tuples(rows) == expected_rows(plans[planner.PAGE_ROWS:])
    assert any("Ranked by fits, then highest tokens/s per GPU" in c.value for c in at.caption)


def test_an_uneven_pipeline_layout_opens_in_the_calculator():
    from calculator.planning.planner import Plan
    plan = Plan(8, 4, 2, 1, 0, "none", 0, 0, 0.0, pp_first_stage_layers=15, pp_last_stage_layers=13)
    values = planner.layout_values({**state.DEFAULTS, "model": "qwen2.5-7b"}, plan)  # 28 layers
    link = state.check_query_params(dict(parse_qsl(urlsplit(planner.calculator_url("http://x/", values)).query)))
    est = state.compute({**state.DEFAULTS, **link.values}).estimate
    assert [s.layers for s in est.stages] == [(0, 15), (15, 28)]


def test_calculator_link_opens_the_calculator_with_the_layout():
    plan = plans_for(QWEN, Workload(gpu="h100-sxm"), 8, H100)[0]
    url = planner.calculator_url("http://x/", planner.layout_values({**state.DEFAULTS, "model": "qwen2.5-7b"}, plan))
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in parse_qsl(urlsplit(url).query):
        at.query_params[k] = v
    at.run()
    assert not at.exception
    assert at.number_input(key="tp").value == plan.tp and at.number_input(key="dp").value == plan.dp
    assert {m.label: m.value for m in at.metric}["Total per GPU"] == format_bytes(plan.total_bytes)


def test_what_fits_is_the_solvers_answer():
    at = open_planner({"model": "qwen2.5-7b", "tp": "4", "sp": "true", "zero": "1", "dp": "2", "seq": "2048",
                       "unit": "GiB"})
    w = Workload(seq_len=2048, parallel=Parallelism(tp=4, sequence_parallel=True, dp=2, zero=1), gpu="h100-sxm")
    m = metric_values(at)
    for label, sol in (("Largest micro-batch (80%)", max_micro_batch(QWEN, w, H100, safe=True)),
                       ("Largest micro-batch (100%)", max_micro_batch(QWEN, w, H100, safe=False)),
                       ("Longest sequence (80%)", max_seq_len(QWEN, w, H100, safe=True)),
                       ("Longest sequence (100%)", max_seq_len(QWEN, w, H100, safe=False))):
        assert sol.value > 0
        assert m[label] == f"{sol.value:,}", label
    assert not at.warning


def test_inference_solvers_name_the_batch():
    at = open_planner({"model": "qwen2.5-7b", "mode": "infer", "seq": "1024", "gen": "1024"})
    w = Workload(mode="infer", seq_len=1024, gen_tokens=1024, gpu="h100-sxm")
    m = metric_values(at)
    assert m["Largest batch (80%)"] == f"{max_micro_batch(QWEN, w, H100).value:,}"
    assert row_tuples(table(at)) == expected_rows(fewest_gpus(QWEN, w, H100, limit=planner.LIMIT))


def test_nothing_fits_is_said_clearly():
    at = open_planner({"model": "qwen2.5-7b", "gpu": "a100-40gb", "pgpus": "1"})
    assert not at.dataframe and not at.get("link_button")
    assert any("No layout of 1 GPUs" in w.value for w in at.warning)
    assert metric_values(at)["Largest micro-batch (80%)"] == "none"
    assert any("Nothing fits at the calculator's layout" in w.value for w in at.warning)


def test_generic_model_has_no_layouts_but_still_solves():
    at = open_planner({"model": "generic", "gparams": "1000000000"})
    assert not at.dataframe
    assert any("generic network" in w.value for w in at.warning)
    assert metric_values(at)["Largest micro-batch (80%)"] != "none"


def test_inputs_the_engine_refuses_show_an_error_not_numbers():
    at = open_planner({"model": "qwen2.5-7b", "tp": "3"})
    assert not at.metric and not at.dataframe
    assert any("Nothing to plan" in e.value for e in at.error)


def test_bad_link_values_are_reported():
    at = open_planner({"model": "qwen2.5-7b", "tp": "abc", "pgpus": "8"})
    assert any("Tensor parallel (TP) (tp=abc): not a number" in plain(w.value) for w in at.warning)
    assert len(table(at)) > 0


def test_switching_from_the_calculator_carries_its_inputs():
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["model"] = "qwen2.5-7b"
    at.query_params["seq"] = "8192"
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception
    assert at.query_params["model"] == "qwen2.5-7b" and at.query_params["seq"] == "8192"  # now in this page's link
    assert row_tuples(table(at)) == expected_rows(fewest_gpus(QWEN, Workload(seq_len=8192, gpu="h100-sxm"), H100, limit=planner.LIMIT))
    at.number_input(key="pgpus").set_value(8).run()  # the next run reads them from its own link
    assert row_tuples(table(at)) == expected_rows(plans_for(QWEN, Workload(seq_len=8192, gpu="h100-sxm"), 8, H100))


def test_planner_result_is_cached_per_input():
    at = open_planner({"model": "qwen2.5-7b", "pgpus": "8"})
    calls = []
    real = planner.plan

    def counting(*a, **kw):
        calls.append(a)
        return real(*a, **kw)
    planner.plan = counting
    try:
        at.number_input(key="pmaxtp").set_value(4).run()
        at.number_input(key="pmaxtp").set_value(8).run()  # seen before: from the cache
    finally:
        planner.plan = real
    assert len(calls) <= 1


# ---- dashboard.planner directly -------------------------------------------------------------------------------
def test_app_root_strips_the_page():
    assert planner.app_root("http://h:8501/planner?x=1", "planner") == "http://h:8501/"
    assert planner.app_root("https://h/base/planner", "planner") == "https://h/base/"
    assert planner.app_root("http://h:8501/", "planner") == "http://h:8501/"
    assert planner.app_root(None, "planner") == "http://localhost:8501/"


def test_view_prefers_the_link_then_the_calculator_session_then_defaults():
    v = planner.view_from({"tp": "2", "pgpus": "4", "v": "1"}, {"tp": 4}, planner.PLANNER_KEYS)
    assert v.source == "link" and v.values["tp"] == 2 and not v.ignored
    v = planner.view_from({"pgpus": "4"}, {"tp": 4, "model": "qwen2.5-7b"}, planner.PLANNER_KEYS)
    assert v.source == "calculator" and v.values["tp"] == 4 and v.values["model"] == "qwen2.5-7b"
    v = planner.view_from({}, {planner.CALC_VIEW: {"tp": 8}})
    assert v.source == "calculator" and v.values["tp"] == 8
    assert planner.view_from({}, {}).values == state.DEFAULTS


def test_url_format_doc_lists_the_planner_and_compare_keys():
    import re
    doc = (APP.parent / "docs" / "url-format.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z0-9]+)` \| `?([^`|]*)`? \|", doc, re.M)}
    for p in planner.PLANNER_PARAMS:
        assert rows[p.key] == str(p.default), p.key
    assert rows["cmp"] == "none"


@pytest.mark.parametrize("query, key", [
    ({"pgpus": "inf"}, "pgpus"),
    ({"pgpus": "1e400"}, "pgpus"),
    ({"pgpus": "9" * 500}, "pgpus"),
    ({"pmaxtp": "-1e400"}, "pmaxtp"),
    ({"pgpus": "abc"}, "pgpus"),
    ({"pgpus": "5000"}, "pgpus"),
])
def test_unreadable_planner_values_are_named_and_the_page_keeps_working(query, key):
    # Streamlit's bound number_input raised OverflowError on inf / 1e400 / a 500-digit number (a crash page)
    at = open_planner({"model": "qwen2.5-7b", **query})
    p = next(p for p in planner.PLANNER_PARAMS if p.key == key)
    notes = [plain(w.value) for w in at.warning if "ignored" in w.value]
    assert len(notes) == 1 and f"{key}=" in notes[0] and f"the default ({p.default}) is used" in notes[0], notes
    assert at.number_input(key=key).value == p.default
    assert len(table(at)) > 0  # the layouts of the default planner inputs
    at.number_input(key="pgpus").set_value(8).run()  # and the widgets still work
    assert not at.exception and {r["GPUs"] for r in table(at)} == {8}


def test_planner_key_checks_mirror_the_calculators():
    own = planner.check_own_keys({"pgpus": "inf", "pmaxtp": "4", "tp": "abc"})
    assert own.drop == ("pgpus",) and set(own.notes) == {"pgpus"}
    assert planner.check_own_keys({"pgpus": "8", "pmaxtp": "2.5"}).notes == {
        "pmaxtp": "pmaxtp=2.5: not a whole number: read as 2"}
    assert planner.check_own_keys({"pgpus": ["1", "1e999"]}).drop == ("pgpus",)  # the last of a repeated key


def test_inference_fit_card_names_the_planners_layout_with_a_link():
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in {"model": "llama-3.1-70b", "mode": "infer", "seq": "131072", "gen": "1024", "gpu": "a100-40gb"}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception
    card = fit_cards(at)["a100-40gb"]
    assert "needs 16 GPUs" in card["text"] and "167" not in card["text"]
    [(layout, url)] = card["links"]
    assert layout == "TP8 × PP2"
    query = dict(parse_qsl(urlsplit(url).query))
    assert query["tp"] == "8" and query["pp"] == "2" and query.get("zero", "0") == "0"


def test_uneven_stages_round_trip_through_the_links_of_remedies():
    from calculator.exports import page_link as links
    w = Workload(parallel={"pp": 16, "pp_first_stage_layers": 3, "pp_last_stage_layers": 2, "tp": 8, "ep": 8,
                           "etp": 1})
    values = {**state.DEFAULTS, "model": "deepseek-v3", **links.workload_values(w)}
    assert (values["ppf"], values["ppl"]) == (3, 2) and state.build_workload(values).parallel == w.parallel


def test_training_fit_card_names_the_planners_layout_with_a_link_that_fits():
    """Llama-3.1-70B full training at 4k: the H100 card names the planner's fewest GPUs and its layout; the link
    opens the calculator on that layout, where the H100 card says it fits."""
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in {"model": "llama-3.1-70b", "mode": "train", "seq": "4096", "gpu": "h100-sxm"}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception
    fit = estimate(load_model("llama-3.1-70b").spec, Workload(seq_len=4096, gpu="h100-sxm")).fits_on(["h100-sxm"])[0]
    card = fit_cards(at)["h100-sxm"]
    assert f"needs {fit.gpus_needed} GPUs" in card["text"] and "≈" not in card["text"]
    [(layout, url)] = card["links"]
    assert layout == fit.layout
    query = dict(parse_qsl(urlsplit(url).query))
    par = fit.layout_parallel
    assert [int(query.get(k, 1)) for k in ("tp", "pp", "dp", "cp")] == [par[k] for k in ("tp", "pp", "dp", "cp")]
    assert query.get("zero", "0") == str(par["zero"])
    opened = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in query.items():
        opened.query_params[k] = v
    opened.run()
    assert not opened.exception
    there = fit_cards(opened)["h100-sxm"]["text"]
    assert "fits" in there and "does not fit" not in there


def test_capacity_bars_are_green_for_layouts_that_fit():
    """Issue 24: the "Of capacity" bars were Streamlit's primary red for every layout, even those that fit; they take
    the verdict's colour of the fullest layout shown (every layout listed fits the 80% band: green)."""
    import json
    at = open_planner({"model": "qwen2.5-7b", "seq": "8192", "pgpus": "8"})
    config = json.loads(at.dataframe[0].proto.columns)["Of capacity"]["type_config"]
    assert all(0 < r["Of capacity"] <= 0.8 for r in table(at))
    assert config["color"] == "green"

    class P:  # a layout's share of capacity
        def __init__(self, u):
            self.utilization = u
    assert planner.capacity_bar_color([P(0.5), P(0.8)]) == "green"
    assert planner.capacity_bar_color([P(0.5), P(0.9)]) == "orange"
    assert planner.capacity_bar_color([P(1.2)]) == "red"


def test_serving_layouts_show_the_serving_columns_and_rank_by_output_tokens():
    """Issue 23, serving: a vLLM job's layouts show the running batch, what the KV pool holds, output tokens/s per
    GPU, TPOT and TTFT, ranked by output tokens/s per GPU; `pconc` is the target concurrency."""
    query = {"model": "qwen2.5-7b", "mode": "infer", "eng": "vllm", "seq": "32768", "pgpus": "4"}
    at = open_planner(query)
    rows = table(at)
    assert rows and all(c in rows[0] for c in planner.SERVING_COLUMNS)
    w = Workload(mode="infer", engine="vllm", seq_len=32768, gpu="h100-sxm")
    expected = plans_for(QWEN, w, 4, H100)
    assert [r["Out tok/s/GPU"] for r in rows] == [round(p.output_tokens_per_s_per_gpu, 1) for p in expected]
    assert [r["Running batch"] for r in rows] == [p.running_batch for p in expected]
    speeds = [r["Out tok/s/GPU"] for r in rows]
    assert speeds == sorted(speeds, reverse=True)
    assert all(r["TPOT"] != "—" and r["TTFT"] != "—" for r in rows)
    at = open_planner({**query, "pconc": "2"})
    assert at.number_input(key="pconc").value == 2
    assert all(r["Running batch"] <= -(-2 // r["DP"]) for r in table(at))


def test_the_cost_column_shows_only_with_a_price():
    """No price per GPU-hour: no layout has a cost, so no "$/M tokens" column of empty cells; with a price, every
    row's cost per million tokens (price / 3600 / tokens/s per GPU × 10⁶)."""
    rows = table(open_planner({"model": "qwen2.5-7b", "seq": "8192", "pgpus": "8"}))
    assert rows and all("$/M tokens" not in r for r in rows)
    rows = table(open_planner({"model": "qwen2.5-7b", "seq": "8192", "pgpus": "8", "price": "2.5"}))
    assert all(r["$/M tokens"] == pytest.approx(2.5 / 3600 / r["Tokens/s/GPU"] * 1e6, rel=0.01) for r in rows)
