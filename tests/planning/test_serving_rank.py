"""Serving layouts (vLLM / SGLang) rank by output tokens/s per GPU at a target concurrency, under the memory that fits
(issue 23's serving item; calculator/timing/serving_time.py): the running batch is bounded by the KV pool and the
scheduler's cap, a layout whose pool holds more sequences ranks above one faster per token that holds fewer, and
the vectorised decode step equals estimate_time()'s."""
import pytest

from calculator import Workload
from calculator.cli.main import main
from calculator.core.errors import InputError
from calculator.model.presets import get_gpu, load_model
from calculator.planning import fast_infer_time
from calculator.planning.planner import plans_for
from calculator.planning.ranking import serving_by_estimate, serving_timing
from calculator.timing import serving_time as S

H100 = get_gpu("h100-sxm").usable_bytes
QWEN32 = load_model("qwen3-32b").spec
W32K = Workload(mode="infer", engine="vllm", seq_len=32768, gpu="h100-sxm")


@pytest.fixture(scope="module")
def saturated():
    return plans_for(QWEN32, W32K, 8, H100)


def _by(plans, tp, pp, dp):
    return next(p for p in plans if (p.tp, p.pp, p.dp) == (tp, pp, dp))


def test_more_sequences_in_the_pool_beats_a_faster_token(saturated):
    """At 8 GPUs, TP8 holds 60 sequences of 32k tokens; TP2 × DP4's replicas hold 9 each (36 in all) and decode each
    token faster (smaller batch), yet TP8 emits more tokens per GPU and ranks above it."""
    tp8, tp2 = _by(saturated, 8, 1, 1), _by(saturated, 2, 1, 4)
    assert tp8.max_seqs * tp8.dp > tp2.max_seqs * tp2.dp
    assert tp8.tpot_s > tp2.tpot_s  # slower per token ...
    assert tp8.output_tokens_per_s_per_gpu > tp2.output_tokens_per_s_per_gpu  # ... more tokens per GPU
    assert saturated.index(tp8) < saturated.index(tp2)
    # the prefill-only figure (one request's prompt tokens/s per GPU) had the opposite order
    assert tp2.tokens_per_s_per_gpu > tp8.tokens_per_s_per_gpu
    speeds = [p.output_tokens_per_s_per_gpu for p in saturated]
    assert speeds == sorted(speeds, reverse=True)
    assert all(p.ttft_s and p.tpot_s and p.bottleneck for p in saturated)


@pytest.mark.parametrize("concurrency", [None, 1, 32, 10_000])
def test_the_running_batch_never_exceeds_what_the_engine_runs(concurrency):
    w = W32K.model_copy(update={"serving": W32K.serving.model_copy(update={"max_num_seqs": 16})})
    plans = plans_for(QWEN32, w, 8, H100, concurrency=concurrency)
    assert plans
    for p in plans:
        assert 1 <= p.running_batch <= min(int(p.max_seqs), p.seq_cap, 16)
        if concurrency is not None:
            assert p.running_batch <= -(-concurrency // p.dp)
        assert p.output_tokens_per_s_per_gpu == pytest.approx(p.dp * p.running_batch / p.tpot_s / p.gpus)
    if concurrency == 1:
        assert {p.running_batch for p in plans} == {1}


def test_running_batch_formula():
    assert S.running_batch(None, 60.8, 1024) == 60
    assert S.running_batch(8, 60.8, 1024) == 8
    assert S.running_batch(100, 60.8, 16) == 16
    assert S.running_batch(None, 0.4, 1024) == 0
    assert S.per_replica(10, 4) == 3 and S.per_replica(None, 4) is None
    assert S.pp_step_batch(60, 4) == 15 and S.pp_step_batch(0, 4) == 0
    assert S.output_tokens_per_s(10, 0.05, 2) == pytest.approx(400.0)
    assert S.cost_per_million_output(3.6, 8, 400.0) == pytest.approx(3.6 * 8 / 3600 / 400 * 1e6)


def test_sglang_caps_the_batch_at_max_running_requests():
    w = W32K.model_copy(update={"engine": "sglang"})
    plans = plans_for(QWEN32, w, 8, H100, concurrency=10_000)
    assert plans and all(p.running_batch <= min(int(p.max_seqs), p.seq_cap) for p in plans)


def test_vectorised_serving_times_equal_estimate_time(saturated):
    w = W32K.model_copy(update={"gen_tokens": 512})
    timing = serving_timing(w, None)
    plans = saturated[:4]
    steps = [S.pp_step_batch(p.running_batch, p.pp) for p in plans]
    fast = fast_infer_time.serving(QWEN32, w, [p.layout for p in plans], steps, timing)
    ttft, tpot, necks = serving_by_estimate(QWEN32, w, plans, steps, timing)
    assert fast["ttft_s"].tolist() == pytest.approx(ttft, rel=1e-9)
    assert fast["tpot_s"].tolist() == pytest.approx(tpot, rel=1e-9)


def test_concurrency_is_checked_and_printed(capsys):
    args = ["plan", "--model", "qwen3-32b", "--mode", "infer", "--engine", "vllm", "--seq", "32768", "--gpu",
            "h100-sxm", "--gpus", "8", "--limit", "3"]
    assert main(args + ["--concurrency", "16"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "output tokens/s per GPU" in out[0] and "16 requests in flight" in out[0]
    assert all("out tok/s/GPU" in line and "TPOT" in line and "TTFT" in line for line in out[1:4])
    assert main(args + ["--concurrency", "0"]) == 2
    assert "concurrency" in capsys.readouterr().err
    with pytest.raises(InputError, match="concurrency"):
        plans_for(QWEN32, W32K, 8, H100, concurrency=0)



def test_a_length_the_engine_refuses_is_refused_once_not_as_no_fit(capsys):
    """Qwen3-32B's 40,960 positions: a longer --max-model-len is the input's fault, not the GPUs' (the planner
    would otherwise try every layout and say none fits)."""
    args = ["plan", "--model", "qwen3-32b", "--mode", "infer", "--engine", "sglang", "--max-model-len", "65536",
            "--gpu", "h100-sxm", "--gpus", "8"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "serving.max_model_len" in err and "40,960 or less" in err and "fits" not in err
    w = W32K.model_copy(update={"serving": W32K.serving.model_copy(update={"max_model_len": 65536})})
    with pytest.raises(InputError, match="serving.max_model_len"):
        plans_for(QWEN32, w, 8, H100)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("name, gpus", [("qwen3-32b", 16), ("deepseek-v3", 16), ("qwen3-next-80b-a3b", 8)])
def test_serving_grid_in_two_passes_equals_estimate_time(engine, name, gpus):
    """fast_infer_time.serving prices a grid in one times() pass at batch 1 and one decode-only pass over every
    running batch at once (shapes keyed by their batch): each plan's TTFT, TPOT and decode bottleneck equal
    estimate_time()'s (serving_by_estimate), dense, MoE and hybrid (Qwen3-Next), vLLM and SGLang."""
    from calculator.timing.inference_time import INFERENCE_BOTTLENECKS
    m = load_model(name).spec
    w = Workload(mode="infer", engine=engine, seq_len=8192, gen_tokens=256, gpu="h200")
    plans = plans_for(m, w, gpus, get_gpu("h200").usable_bytes, concurrency=64)
    sample = [p for p in plans if p.running_batch][::max(1, len(plans) // 10)]
    assert len({p.running_batch for p in sample}) > 1  # several batches priced in the same pass
    timing = serving_timing(w, None)
    steps = [S.pp_step_batch(p.running_batch, p.pp) for p in sample]
    fast = fast_infer_time.serving(m, w, [p.layout for p in sample], steps, timing)
    ttft, tpot, necks = serving_by_estimate(m, w, sample, steps, timing)
    assert fast["ttft_s"].tolist() == pytest.approx(ttft, rel=1e-9)
    assert fast["tpot_s"].tolist() == pytest.approx(tpot, rel=1e-9)
    assert [INFERENCE_BOTTLENECKS[k] for k in fast["bottleneck"]] == necks


@pytest.mark.parametrize("engine, name", [("vllm", "qwen3-next-80b-a3b"), ("sglang", "deepseek-v3")])
def test_serving_engines_fall_back_to_estimate_for_their_bytes(engine, name):
    """The fast byte model does not cover a serving engine (a fit is the engine starting and holding the batch):
    evaluate() estimates each replica shape, and every plan carries estimate()'s bytes and KV-pool sequences."""
    import random

    from calculator.planning import fast as planner_fast
    from calculator.planning.grid import layouts_of, workload_of
    from calculator.planning.planner import evaluate
    from calculator.stages.estimate import estimate
    m = load_model(name).spec
    w = Workload(mode="infer", engine=engine, seq_len=8192, gpu="h200")
    layouts = list(layouts_of(m, w, 16))
    assert planner_fast.totals(m, w, layouts) is None
    plans = evaluate(m, w, layouts, get_gpu("h200").usable_bytes, include_unfit=True)
    for p in random.Random(name).sample(plans, min(8, len(plans))):
        est = estimate(m, workload_of(w, p.layout), with_fits=False)
        assert (p.total_bytes, p.peak_allocated_bytes) == (est.total_bytes, est.peak_allocated_bytes)
        assert p.max_seqs == est.serving.max_concurrent_seqs
