"""The page's serving-engine section and RL view (dashboard/views/serving.py, dashboard/views/rl.py) in AppTest: the
numbers shown are the engine's for the same inputs, built here from the engine's own API."""
from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from calculator import estimate
from calculator.model.presets import load_model
from calculator.core.units import format_bytes
from calculator.core.workload import Workload
from dashboard.inputs import state
from dashboard.inputs.scenarios import BY_ID
from validation.published import seed002

ROOT = Path(__file__).resolve().parents[2]


def run(values: dict, page: str = "app.py") -> AppTest:
    at = AppTest.from_file(str(ROOT / page), default_timeout=120)
    for k, v in state.to_query(state.reset_values(values)).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_vllm_section_shows_the_pool_tokens_concurrency_and_max_model_len():
    at = run(BY_ID["serve-8b-vllm"].values)
    sv = estimate(load_model("llama-3.1-8b").spec, Workload(mode="infer", engine="vllm", gpu="h100-sxm",
                                                          seq_len=16000), with_fits=False).serving
    m = metrics(at)
    assert m["KV pool"] == format_bytes(sv.kv_pool_bytes, "GB")
    assert m["Tokens in the pool"] == f"{sv.kv_pool_tokens:,}"
    assert m["Concurrent sequences"] == f"{sv.max_concurrent_seqs:.2f}"
    assert m["Largest max_model_len that starts"] == f"{sv.max_model_len:,}"
    assert any(s.value.startswith("Starts with max_model_len 131,072") for s in at.success)
    assert "Serving engine: vLLM 0.33" in [h.value for h in at.subheader]


def test_an_engine_that_cannot_start_says_why():
    at = run({"model": "llama-3.3-70b", "mode": "infer", "eng": "vllm", "gpu": "h100-sxm"})
    assert any("refuses to start" in e.value and "No available memory" in e.value for e in at.error)


def test_sglang_fraction_set_in_the_sidebar_moves_the_pool():
    at = run({"model": "llama-3.1-8b", "mode": "infer", "eng": "sglang", "mfr": 0.6, "gpu": "h100-sxm"})
    sv = estimate(load_model("llama-3.1-8b").spec, Workload(mode="infer", engine="sglang", gpu="h100-sxm",
                                                          serving={"memory_fraction": 0.6}), with_fits=False).serving
    assert metrics(at)["KV pool"] == format_bytes(sv.kv_pool_bytes, "GB")


def test_rl_scenario_is_one_click_and_shows_the_seed_table_beside_ours():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.button(key="_scenario_seed002-rl-8").click().run()
    assert not at.exception
    est = seed002.ours("8-card")
    m = metrics(at)
    assert m["Total per GPU"] == format_bytes(est.total_bytes, "GB")
    assert m["Rollout KV demand per GPU"] == format_bytes(est.rl.kv_demand_bytes, "GB")
    seed = next(d.value for d in at.dataframe if "Published (GB)" in d.value.columns)
    rows = dict(zip(seed["Component"], seed["Published (GB)"]))
    assert rows["KV cache"] == 24.5 and rows["Total"] == 80.0
    ours = dict(zip(seed["Component"], seed["Ours, peak phase (GB)"]))
    assert ours["Total"] == round(est.total_bytes / 1e9, 1)
    assert at.query_params["mode"] == "rl" and at.query_params["rltp"] == "2" and at.query_params["rlf"] == "0.7"
    # every column of the phase table and of the seed's table says its unit (issue 24)
    phases = next(d.value for d in at.dataframe if any("rollout" in str(c) for c in d.value.columns))
    assert phases.index.name == "Per GPU (GB)"
    assert all(str(c).endswith(", GB") for c in phases.columns), list(phases.columns)
    assert all("(GB)" in c for c in seed.columns if c != "Component")


def test_about_page_lists_serving_engines_and_rl_as_modelled():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/about.py").run()
    assert not at.exception
    text = " ".join(md.value for md in at.markdown)
    modelled, not_modelled = text.split("A GPU **fits**")[0].split("RLHF")[0], text
    assert "**Serving engines**" in modelled and "**RL post-training**" in modelled
    assert "RLHF rollouts" not in not_modelled and "Serving-engine memory policies" not in not_modelled
