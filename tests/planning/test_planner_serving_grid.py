"""The planner's serving grids take estimate()'s figures without building an Estimate per replica
(calculator.stages.estimate.engine_figures -> calculator.engines.figures: each distinct stage budget's terms summed
once), and share the time model's priced operation lists between the calls of one planner run
(calculator.planning.fast_infer_time). Both are held equal here to the per-replica estimate() and to a cold time
model, field by field, over whole grids of vLLM and SGLang jobs on dense, MoE (EP across replicas), hybrid (Gated
DeltaNet) and MLA models, layouts that do not fit included; refusals stay refusals with the same message."""
import pytest

from calculator import Workload, estimate
from calculator.core.errors import InputError
from calculator.model.presets import get_gpu, load_model
from calculator.planning import fast_infer_time
from calculator.planning.grid import layouts_of, workload_of
from calculator.planning.planner import evaluate
from calculator.planning.ranking import rank_key, time_plans
from calculator.stages.estimate import engine_figures

JOBS = [
    ("qwen3-32b", "vllm", {"seq_len": 32768, "gpu": "h100-sxm"}, (1, 2, 4, 8, 16, 24, 64)),
    ("qwen3-32b", "sglang", {"seq_len": 32768, "gpu": "h100-sxm"}, (1, 2, 4, 8, 16, 24, 64)),
    ("qwen3-30b-a3b", "vllm", {"seq_len": 32768, "micro_batch": 16, "gpu": "h100-sxm"}, (1, 2, 8, 16, 48)),
    ("qwen3-30b-a3b", "sglang", {"seq_len": 8192, "micro_batch": 8, "gpu": "a100-80gb"}, (1, 4, 8, 32)),
    ("qwen3-next-80b-a3b", "vllm", {"seq_len": 16384, "gpu": "h200"}, (1, 2, 4, 8, 24)),
    ("qwen3-next-80b-a3b", "sglang", {"seq_len": 16384, "gpu": "h200"}, (1, 2, 4, 8, 24)),
    ("deepseek-v3", "vllm", {"seq_len": 8192, "gen_tokens": 256, "gpu": "h200"}, (8, 16, 32)),
    ("deepseek-v3", "sglang", {"seq_len": 8192, "gpu": "h200"}, (8, 16, 32)),
]
IDS = [f"{j[0]}-{j[1]}" for j in JOBS]


def _grid(name, engine, job, counts):
    m = load_model(name).spec
    w = Workload(mode="infer", engine=engine, **job)
    return m, w, [lay for n in counts for lay in layouts_of(m, w, n)]


@pytest.mark.parametrize("name, engine, job, counts", JOBS, ids=IDS)
def test_engine_figures_equal_estimate_on_every_layout(name, engine, job, counts):
    """Total, peak allocated and every Serving field but the notes (a text) equal estimate()'s; a refused layout
    raises the same InputError."""
    m, w, layouts = _grid(name, engine, job, counts)
    seen = {"fits": 0, "unfit": 0, "refused": 0}
    for lay in layouts:
        wl = workload_of(w, lay)
        try:
            est = estimate(m, wl, with_fits=False)
        except InputError as e:
            with pytest.raises(InputError) as got:
                engine_figures(m, wl)
            assert (got.value.field, str(got.value)) == (e.field, str(e))
            seen["refused"] += 1
            continue
        total, peak, sv = engine_figures(m, wl)
        assert (total, peak) == (est.total_bytes, est.peak_allocated_bytes)
        assert total == max(s.total_bytes for s in est.stages)
        assert sv.to_dict() | {"notes": []} == est.serving.to_dict() | {"notes": []}
        seen["fits" if sv.starts and sv.max_concurrent_seqs >= w.micro_batch else "unfit"] += 1
    assert seen["fits"] and seen["unfit"], seen  # both sides of the fit line are held


TIMED = (0, 1, 2, 4, 6)  # a dense, a MoE, a hybrid and an MLA job


@pytest.mark.parametrize("name, engine, job, counts", [JOBS[i] for i in TIMED], ids=[IDS[i] for i in TIMED])
def test_time_model_with_shared_lists_equals_a_cold_one(name, engine, job, counts):
    """Every plan's step time, TTFT, TPOT, output tokens/s, bottleneck and order are those of a time model whose
    shape caches start empty before each of its calls."""
    m, w, layouts = _grid(name, engine, job, counts)
    capacity = get_gpu(w.gpu).usable_bytes
    warm = evaluate(m, w, layouts, capacity, include_unfit=True)
    cold = evaluate(m, w, layouts, capacity, include_unfit=True)
    assert warm == cold
    fast_infer_time.clear_cache()
    time_plans(m, w, warm, concurrency=64)
    times = fast_infer_time.times

    def cold_times(*args, **kwargs):
        fast_infer_time.clear_cache()
        return times(*args, **kwargs)
    fast_infer_time.times = cold_times
    try:
        time_plans(m, w, cold, concurrency=64)
    finally:
        fast_infer_time.times = times
    for plans in (warm, cold):
        plans.sort(key=rank_key("fastest"))
    assert warm == cold
    assert any(p.tpot_s for p in warm) and any(not p.fits for p in warm)


@pytest.mark.parametrize("engine, update", [
    ("vllm", {"gpu": None}),  # the budget is a fraction of a GPU's memory
    ("vllm", {"parallel": {"tp": 2, "dp": 2, "ep": 8, "etp": 1}}),  # EP × expert TP does not divide DP × TP
    ("sglang", {"parallel": {"tp": 3}}),  # TP does not divide the heads
    ("vllm", {"serving": {"attention_dp": 2}, "parallel": {"tp": 2}}),  # DP attention is SGLang's
], ids=["no-gpu", "ep-does-not-divide", "tp-does-not-divide", "vllm-attention-dp"])
def test_engine_figures_refuse_what_estimate_refuses_with_its_message(engine, update):
    m = load_model("qwen3-30b-a3b").spec
    w = Workload(mode="infer", engine=engine, seq_len=8192, gpu="h100-sxm").model_copy(update={"gpu": None}) \
        if "gpu" in update else Workload(mode="infer", engine=engine, seq_len=8192, gpu="h100-sxm", **update)
    with pytest.raises(InputError) as slow:
        estimate(m, w, with_fits=False)
    with pytest.raises(InputError) as fast:
        engine_figures(m, w)
    assert (fast.value.field, str(fast.value)) == (slow.value.field, str(slow.value))
