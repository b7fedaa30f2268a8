"""dashboard.inputs.state: the URL format (keys, defaults, checks), and widget values -> the engine's inputs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from calculator import Workload, estimate
from calculator.model.spec import GenericModel, ModelSpec
from calculator.core.workload import RECIPES, Overheads, Parallelism, Precision
from dashboard.inputs import state
from dashboard.inputs.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]


def test_keys_are_short_unique_lowercase():
    keys = [p.key for p in state.PARAMS]
    assert len(keys) == len(set(keys))
    assert state.VERSION_KEY not in keys
    for k in keys:
        assert re.fullmatch(r"[a-z][a-z0-9]{0,7}", k), k


def test_defaults_are_accepted_by_their_own_check():
    for p in state.PARAMS:
        if p.default is None or p.kind == "text":
            continue
        raw = state.to_query({p.key: p.default})
        assert p.key not in raw  # defaults never go in the URL
        assert state.parse_value(p, state.format_default(p)) == p.default, p.key


def test_url_format_doc_lists_every_key_with_its_default():
    doc = (ROOT / "docs" / "url-format.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z0-9]+)` \|.*\| `([^`]*)` \|$", doc, re.M)}
    for p in state.PARAMS:
        assert p.key in rows, f"docs/url-format.md has no row for {p.key}"
        assert rows[p.key] == state.format_default(p), p.key
    assert set(rows) == {p.key for p in state.PARAMS}


def test_valid_link_is_read_as_typed_values():
    link = state.check_query_params({"tp": "4", "sp": "true", "zero": "3", "frag": "7.5", "mode": "infer",
                                     "model": "llama-3.1-70b", "gpu": "h200", "ctx": "", "v": "1"})
    assert link.ignored == ()
    assert link.values == {"tp": 4, "sp": True, "zero": "3", "frag": 7.5, "mode": "infer",
                           "model": "llama-3.1-70b", "gpu": "h200", "ctx": None}
    assert link.version == "1"


@pytest.mark.parametrize("query, key, reason", [
    ({"tp": "0"}, "tp", "outside"),
    ({"tp": "99999"}, "tp", "outside"),
    ({"tp": "inf"}, "tp", "finite"),
    ({"tp": "-1e400"}, "tp", "finite"),
    ({"tp": "0.5"}, "tp", "outside"),  # truncated to 0, as Streamlit does
    ({"tp": "two"}, "tp", "not a number"),
    ({"frag": "nan"}, "frag", "not a number"),
    ({"sp": "yes"}, "sp", "true or false"),
    ({"opt": "adam9"}, "opt", "not one of"),
    ({"model": "no-such-model"}, "model", "not one of"),
    ({"gpu": "h900"}, "gpu", "not one of"),
    ({"zero": "4"}, "zero", "not one of"),
    ({"mbs": "1000"}, "mbs", "outside"),
    ({"colour": "red"}, "colour", "unknown parameter"),
])
def test_invalid_values_are_reported(query, key, reason):
    link = state.check_query_params(query)
    assert key not in link.values
    assert len(link.ignored) == 1
    named = f"{state.BY_KEY[key].label} ({key}=" if key in state.BY_KEY else f"{key}="  # the field, then the value
    assert link.ignored[0].startswith(named) and reason in link.ignored[0]
    if key in state.BY_KEY:  # removed from the URL: the widget shows the value used, not the rejected one
        assert key in link.drop_keys and "is used and shown" in link.ignored[0]


def test_values_are_read_the_way_the_bound_widget_reads_them():
    link = state.check_query_params({"tp": "2.5", "pp": " 3", "dp": "+4", "seq": "1_000", "cp": ["2", "4"]})
    assert link.values == {"tp": 2, "pp": 3, "dp": 4, "seq": 1000, "cp": 4}
    assert any(n.startswith("Tensor parallel (TP) (tp=2.5):") and "read as 2" in n for n in link.ignored)
    assert any(n.startswith("cp given 2 times") for n in link.ignored)
    assert link.drop_keys == ()


def test_values_the_widget_cannot_read_are_dropped_from_the_url():
    link = state.check_query_params({"tp": "inf", "ctx": "-inf", "colour": "red", "pp": "2"})
    assert set(link.drop_keys) == {"tp", "ctx", "colour"} and link.values == {"pp": 2}


def test_unknown_keys_and_other_versions_are_reported():
    link = state.check_query_params({"v": "2", "foo": "1", "tp": "2"})
    assert link.values == {"tp": 2}
    assert link.unknown_keys == ("foo",)
    assert any("v=2" in line for line in link.ignored)


def test_to_query_round_trips_through_the_check():
    values = {**state.DEFAULTS, "tp": 8, "pp": 2, "sched": "interleaved", "vpp": 2, "frag": 12.5, "sp": True,
              "ft": "lora", "lr": 8,
              "comm": False, "ctx": 700, "mode": "infer", "gen": 512, "model": "custom", "h": 5120,
              "cfg": '{"model_type": "llama"}'}
    query = state.to_query(values)
    assert query["v"] == "1" and query["tp"] == "8" and query["sp"] == "true" and query["frag"] == "12.5"
    assert "dp" not in query  # default
    back = state.check_query_params(query)
    assert back.ignored == ()
    assert {**state.DEFAULTS, **back.values} == values


def test_every_choice_default_is_a_valid_option():
    for p in state.PARAMS:
        if p.kind == "choice":
            assert p.default in state.options(p.key), p.key


def test_scenarios_are_valid_links():
    for sc in SCENARIOS:
        link = state.check_query_params(state.to_query(state.reset_values(sc.values)))
        assert link.ignored == (), sc.id
        result = state.compute(state.reset_values(sc.values))
        assert result.estimate.total_bytes > 0


def test_every_scenario_fits_or_says_it_is_an_oom_example():
    """Issue 24: an example fits its GPU per the engine (the peak within what PyTorch can allocate; vLLM / SGLang: the
    engine starts; RL: the peak phase), or its title says it is an OOM example, and then it really does not fit."""
    from calculator.core.fit import verdict
    from calculator.model.presets import get_gpu
    for sc in SCENARIOS:
        values = state.reset_values(sc.values)
        est = state.compute(values).estimate
        cap = get_gpu(values["gpu"]).usable_bytes
        if est.serving is not None:
            fits = est.serving.starts
        else:
            peak = max(p.total_bytes for p in est.rl.phases) if est.rl is not None else est.total_bytes
            fits = verdict(peak, cap) != "does not fit"
        assert fits != sc.oom, (sc.id, fits)
        assert ("OOM example" in sc.title) == sc.oom and ("out-of-memory example" in sc.summary) == sc.oom, sc.id


def test_workload_mapping_is_field_by_field():
    values = {**state.DEFAULTS, "mode": "infer", "mbs": 3, "seq": 2048, "gen": 100, "recipe": "custom",
              "pdt": "fp16", "gdt": "fp32", "mdt": "none", "odt": "bf16", "adt": "fp16", "opt": "lion",
              "oimpl": "fused", "rc": "full", "attn": "eager", "act": "fujii", "kvdt": "fp8", "wdt": "int4",
              "qgs": 64, "tp": 2, "pp": 2, "dp": 3, "cp": 2, "ep": 2, "etp": 1, "sp": True, "zero": "2",
              "zsh": 3, "dopt": True, "sched": "interleaved", "vpp": 2, "mb": 6, "frag": 7.5, "ctx": 600,
              "nccl": 250, "comm": False, "tbo": 12.0, "gpu": "a100-80gb", "ft": "qlora", "lr": 64, "lt": "qv",
              "lad": "params", "qm": "gptq", "fst": 3.0, "fwk": 20.0}
    expected = Workload(
        mode="infer", micro_batch=3, seq_len=2048, gen_tokens=100,
        precision=Precision(params="fp16", grads="fp32", master_weights=None, optimizer_states="bf16",
                            activations="fp16"),
        optimizer="lion", optimizer_impl="fused", recompute="full", attention="eager", activation_model="fujii",
        kv_dtype="fp8", weight_dtype="int4", quant_group_size=64, quant_method="gptq",
        finetune="qlora", lora_rank=64, lora_targets="qv", lora_adapter_dtype="params",
        parallel=Parallelism(tp=2, pp=2, dp=3, cp=2, ep=2, etp=1, sequence_parallel=True, zero=2,
                             zero_shard_size=3, distributed_optimizer=True, schedule="interleaved",
                             virtual_stages=2, num_microbatches=6),
        overheads=Overheads(cuda_context_bytes=600_000_000, fragmentation_pct=7.5, fragmentation_states_pct=3.0,
                            fragmentation_working_pct=20.0, nccl_bytes_per_group=250_000_000,
                            include_comm_buffers=False, textbook_overhead_pct=12.0),
        gpu="a100-80gb")
    assert state.build_workload(values) == expected


def test_page_defaults_are_the_engine_defaults():
    # The page's defaults are frozen for link format v1 (an omitted key means its default). If the engine
    # changes one of its defaults, this fails: keep the page's (old links keep their meaning) and adjust this
    # test, or start link format v2.
    assert state.build_workload(state.DEFAULTS) == Workload(gpu="h100-sxm")
    w = state.build_workload(state.DEFAULTS)
    assert w.precision == RECIPES["mixed-bf16"][1]
    assert w.parallel == Parallelism()
    assert w.weight_dtype is None and w.overheads.cuda_context_bytes is None


def test_named_recipe_wins_over_per_tensor_keys():
    w = state.build_workload({"recipe": "megatron", "gdt": "bf16"})
    assert w.precision == RECIPES["megatron"][1]


def test_custom_and_generic_models():
    spec, notes = state.build_model({"model": "custom", "h": 2048, "layers": 16, "heads": 16, "kvh": 4,
                                     "ffn": 8192, "vocab": 32000, "tie": True})
    assert isinstance(spec, ModelSpec) and spec.hidden_size == 2048 and spec.num_key_value_heads == 4
    assert spec.tie_word_embeddings and spec.head_dim is None and spec.sliding_window is None
    gen, _ = state.build_model({"model": "generic", "gparams": 20_000_000, "gact": 1_000_000})
    assert gen == GenericModel(total_params=20_000_000, activation_elements_per_sample=1_000_000)


def test_pasted_config_is_mapped_by_the_engine():
    cfg = ('{"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, '
           '"intermediate_size": 4096, "vocab_size": 1000}')
    spec, _ = state.build_model({"model": "config", "cfg": cfg})
    assert spec.hidden_size == 1024 and spec.num_hidden_layers == 4


@pytest.mark.parametrize("values, key, words", [
    ({"model": "config", "cfg": ""}, "cfg", "Paste"),
    ({"model": "config", "cfg": "{not json"}, "cfg", "not valid JSON"),
    ({"model": "config", "cfg": '{"hidden_size": 8}'}, "cfg", "model_type"),
    ({"model": "custom", "h": 4001, "heads": 32, "hd": 0}, "h", "divisible"),
    ({"model": "custom", "heads": 32, "kvh": 5}, "heads", "multiple"),
    ({"model": "custom", "experts": 8, "topk": 0}, "topk", "num_experts_per_tok"),
    ({"sched": "interleaved", "vpp": 1, "pp": 2}, "vpp", "virtual_stages"),
    ({"model": "custom", "tp": 3}, "tp", ""),
])
def test_problems_name_the_widget(values, key, words):
    with pytest.raises(state.InputProblems) as exc:
        state.compute(values)
    keys = [p.key for p in exc.value.problems]
    assert key in keys, exc.value.problems
    assert words in " ".join(p.message for p in exc.value.problems)


def test_compute_is_the_engine():
    values = {"model": "custom", "tp": 2, "mbs": 2, "rc": "selective", "gpu": "h100-sxm"}
    result = state.compute(values)
    direct = estimate(state.build_model(values)[0], state.build_workload(values))
    assert result.estimate == direct


def test_key_for_field():
    assert state.key_for_field("parallel.tp") == "tp"
    assert state.key_for_field("tp") == "tp"
    assert state.key_for_field("workload.parallel.pp") == "pp"
    assert state.key_for_field("num_attention_heads") == "heads"
    assert state.key_for_field(None, "parallel.virtual_stages must be at least 2") == "vpp"
    assert state.key_for_field("nonsense", "nothing known", ("mode",)) == "mode"


def test_current_values_prefers_widget_state_then_link_then_default():
    got = state.current_values({"tp": 4}, {"tp": 8, "pp": 2})
    assert got["tp"] == 4 and got["pp"] == 2 and got["dp"] == 1
    assert set(got) == set(state.DEFAULTS)


def test_spec_to_arch_reproduces_the_preset():
    mapped = state.load_preset("llama-3.1-8b")
    arch = state.spec_to_arch(mapped.spec)
    spec, _ = state.build_model({"model": "custom", **arch})
    w = Workload()
    assert estimate(spec, w).total_bytes == estimate(mapped.spec, w).total_bytes


def test_every_engine_input_has_a_widget():
    # A new Workload input in the engine must get a widget and a URL key: this fails until it does.
    from calculator.core.workload import Overheads, Parallelism, Precision
    covered = {f for p in state.PARAMS for f in p.fields}
    engine = set(Workload.model_fields) - {"precision", "parallel", "overheads"}
    engine |= {f"parallel.{f}" for f in Parallelism.model_fields}
    engine |= {f"overheads.{f}" for f in Overheads.model_fields}
    engine |= {f"precision.{f}" for f in Precision.model_fields}
    assert engine - covered == set()
    assert set(GenericModel.model_fields) - {"name"} <= covered


# ---- any link: values the widgets take, a round trip, and a figure or named problems (hypothesis) -------------
import math  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _url_value(p: state.Param):
    hostile = st.sampled_from(["inf", "-inf", "nan", "1e400", "-1e400", "9" * 500, "", "`", "![x](http://e.invalid)",
                               "</div>", "true", "0", "-1", "1.5"])
    if p.kind == "bool":
        plausible = st.sampled_from(["true", "false"])
    elif p.kind == "choice":
        plausible = st.sampled_from(state.options(p.key) or ("x",))
    elif p.kind == "text":
        plausible = st.sampled_from(["", '{"model_type": "llama"}'])
    else:
        lo, hi = p.lo if p.lo is not None else 0, p.hi if p.hi is not None else 1e6
        plausible = (st.integers(int(lo), int(hi)).map(str) if p.kind == "int"
                     else st.floats(lo, hi, allow_nan=False).map(lambda x: f"{x:.4g}"))
    return st.one_of(plausible, plausible, plausible, hostile)


LINK_PARAMS = [p for p in state.PARAMS if p.key != "hf"]  # a Hub id is fetched by the page (tests/dashboard/test_dashboard_hub.py)
queries = st.lists(st.sampled_from(LINK_PARAMS), max_size=8, unique_by=lambda p: p.key).flatmap(
    lambda ps: st.fixed_dictionaries({p.key: _url_value(p) for p in ps}))


@settings(max_examples=150, deadline=None)
@given(queries)
def test_any_link_round_trips_and_computes_or_names_its_problems(query):
    """URL -> values -> URL -> the same values; compute() gives bounded figures or InputProblems, nothing else."""
    link = state.check_query_params(query)
    values = {**state.DEFAULTS, **link.values}
    back = state.check_query_params(state.to_query(values))
    assert back.ignored == () and {**state.DEFAULTS, **back.values} == values
    try:
        result = state.compute(values)
    except state.InputProblems as exc:
        assert exc.problems and all(p.key in state.BY_KEY for p in exc.problems)
        return
    e = result.estimate
    assert 0 < e.peak_allocated_bytes <= e.total_bytes <= 10**18
    assert all(math.isfinite(f.utilization) for f in e.fits)


# ---- a huge pasted config is refused before any work -----------------------------------------------------------
import json as _json  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

from calculator.model.presets import load_model  # noqa: E402

HUGE = [{"num_hidden_layers": 1_000_000_000}, {"num_hidden_layers": 2**31}, {"hidden_size": 10**12},
        {"vocab_size": 10**15}, {"num_local_experts": 10**9, "model_type": "mixtral", "num_experts_per_tok": 2}]


def link(**fields) -> dict[str, str]:
    return {"model": "config", "cfg": _json.dumps({**load_model("llama-3.1-8b").raw, **fields})}


@pytest.mark.parametrize("fields", HUGE, ids=lambda f: next(iter(f)))
def test_a_huge_config_in_a_link_is_refused_at_once_without_memory(fields):
    """Issue 12: a link pasting a config with 10^9 layers grew the server to 4 GB; every huge size is refused by
    the config bounds before per-layer work (the served page: tests/deploy/test_exhaustion.py)."""
    query = link(**fields)
    tracemalloc.start()
    start = time.perf_counter()
    values = {**state.DEFAULTS, **state.check_query_params(query).values}
    with pytest.raises(state.InputProblems) as refused:
        state.compute(values)
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert seconds < 1 and peak < 10 * 2**20, (seconds, peak)
    problem = refused.value.problems[0]
    assert problem.key == "cfg" and problem.message.startswith(tuple(fields))
