"""The calculator page's Time and cost section (dashboard/views/timing.py) in AppTest: its figures are the engine's
own `estimate_time` on the same inputs, the price and link inputs are in the URL and change them, the roofline
table has one row per operation and a total, and a mode or model without a time estimate says why."""
from __future__ import annotations

import pytest

from calculator.timing.step_time import estimate_time
from calculator.timing.inputs import TimingInputs
from calculator.core.workload import Workload
from dashboard.views.timing import format_seconds, roofline_frame

from tests.app_page import LLAMA, metrics, run


def test_training_step_time_tokens_mfu_and_cost_are_the_engines():
    at = run({"gpu": "h200", "price": "3.5", "mbs": "2", "v": "1"})
    t = estimate_time(LLAMA, Workload(gpu="h200", micro_batch=2), TimingInputs(price_per_gpu_hour=3.5))
    m = metrics(at)
    assert m["Step time"] == format_seconds(t.step_time_s)
    assert m["Tokens/s"] == f"{t.tokens_per_s:,.0f}"
    assert m["MFU"] == f"{t.mfu:.1%}"
    assert m["Cost per million tokens"] == f"${t.cost_per_million_tokens:,.4f}"
    assert at.query_params["price"] == "3.5"


def test_no_price_no_cost_and_a_slower_gemm_is_a_longer_step():
    fast, slow = run({"gpu": "h200", "v": "1"}), run({"gpu": "h200", "mme": "0.4", "v": "1"})
    assert "Cost per million tokens" not in metrics(fast)
    t_fast = estimate_time(LLAMA, Workload(gpu="h200"), TimingInputs())
    t_slow = estimate_time(LLAMA, Workload(gpu="h200"), TimingInputs(matmul_efficiency=0.4))
    assert t_slow.step_time_s > t_fast.step_time_s
    assert metrics(slow)["Step time"] == format_seconds(t_slow.step_time_s)


def test_inference_shows_time_to_first_token_and_per_output_token():
    at = run({"mode": "infer", "seq": "2048", "gen": "256", "gpu": "h100-sxm", "v": "1"})
    t = estimate_time(LLAMA, Workload(mode="infer", seq_len=2048, gen_tokens=256, gpu="h100-sxm"), TimingInputs())
    m = metrics(at)
    assert m["Time to first token"] == format_seconds(t.ttft_s)
    assert m["Per output token"] == f"{t.tpot_s * 1e3:,.2f} ms"


def test_roofline_table_has_every_operation_and_a_total():
    t = estimate_time(LLAMA, Workload(gpu="h100-sxm"), TimingInputs())
    frame = roofline_frame(t)
    assert list(frame["Operation"][:-1]) == [r.name for r in t.roofline] and frame["Operation"].iloc[-1] == "Total"
    assert frame["FLOPs"].iloc[-1] == pytest.approx(sum(r.flops for r in t.roofline))
    assert set(frame["Bound"][:-1]) <= {"compute", "memory", "communication"}


def test_a_price_out_of_range_is_refused_under_its_field():
    at = run({"gpu": "h200", "price": "-1", "v": "1"})
    assert "Cost per million tokens" not in metrics(at)
    assert "price" in " ".join(w.value for w in at.warning).lower()  # the link warning names the key


def test_rl_mode_says_why_it_has_no_time_estimate():
    at = run({"mode": "rl", "gpu": "h100-sxm", "tp": "4", "v": "1"})
    assert any("No time estimate" in c.value for c in at.caption)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_serving_engines_time_says_no_generate_call(engine):
    """Issue 24: under vLLM / SGLang there is no generate() call: the time section names a batch time, and neither
    it, its help nor the time model's notes say "generate()"."""
    query = {"mode": "infer", "eng": engine, "seq": "2048", "gen": "256", "gpu": "h100-sxm", "v": "1"}
    at = run(query)
    w = Workload(mode="infer", engine=engine, seq_len=2048, gen_tokens=256, gpu="h100-sxm")
    t = estimate_time(LLAMA, w, TimingInputs())
    labels = [m.label for m in at.metric]
    assert "Batch time" in labels and "generate() call" not in labels
    assert metrics(at)["Batch time"] == format_seconds(t.step_time_s)
    time_metrics = [m for m in at.metric if m.label in ("Batch time", "Time to first token", "Tokens/s", "MFU")]
    assert not any("generate()" in (m.help or "") for m in time_metrics)
    assert t.notes and not any("generate()" in n for n in t.notes)
    assert any("scheduler" in n and "not modelled" in n for n in t.notes)
    hf = estimate_time(LLAMA, w.model_copy(update={"engine": "hf"}), TimingInputs())
    assert any("generate()" in n for n in hf.notes)  # transformers: it is a generate() call
