"""The planner's serving-engine path (calculator.planning.fast.serving_figures: one estimate() per replica, broadcast
to every layout of that replica) gives the plans estimate() gives layout by layout: fits, bytes, the sequences the KV
pool holds, the scheduler's cap, and then the same step time, TTFT / TPOT, output tokens/s and ranking order, on
every layout of a grid of vLLM and SGLang jobs (dense, MoE with EP, hybrid linear-attention / Mamba models,
DeepSeek-V4's compressed caches)."""
import pytest

from calculator import Workload, estimate
from calculator.core.errors import InputError
from calculator.model.presets import get_gpu, load_model
from calculator.planning.grid import Layout, layouts_of, replica_key, workload_of
from calculator.planning.planner import _plan, evaluate
from calculator.planning.ranking import rank_key, time_plans
from calculator.timing.serving_time import scheduler_cap

COUNTS = (1, 2, 4, 8, 16, 24, 32)
JOBS = [
    ("qwen3-32b", "vllm", {"seq_len": 32768, "gpu": "h100-sxm"}),  # dense, uneven stages
    ("qwen3-32b", "sglang", {"seq_len": 32768, "gpu": "h100-sxm"}),
    ("qwen3-30b-a3b", "vllm", {"seq_len": 8192, "micro_batch": 4, "gpu": "h100-sxm"}),  # MoE: EP across replicas
    ("qwen3-30b-a3b", "sglang", {"seq_len": 8192, "gpu": "a100-80gb"}),
    ("deepseek-v2-lite", "vllm", {"seq_len": 16384, "gen_tokens": 512, "gpu": "l40s"}),  # MLA + MoE
    ("qwen3-next-80b-a3b", "vllm", {"seq_len": 16384, "gpu": "h200"}),  # Gated DeltaNet + attention + MoE
    ("qwen3-next-80b-a3b", "sglang", {"seq_len": 16384, "gpu": "h200"}),
    ("nemotron-h-56b", "sglang", {"seq_len": 8000, "gpu": "h100-sxm"}),  # Mamba-2 + attention, below its 8,192
    ("nemotron-h-56b", "vllm", {"seq_len": 8192, "gen_tokens": 128, "gpu": "h100-sxm"}),
    ("gemma-3-27b", "vllm", {"seq_len": 8192, "gpu": "a100-80gb"}),  # sliding-window layers
    ("deepseek-v4-flash", "vllm", {"seq_len": 8192, "gpu": "b200"}),  # compressed caches; TP > 1 refused
    ("deepseek-v4-flash", "sglang", {"seq_len": 8192, "gpu": "b200"}),  # attention-DP ranks = the EP group
]


def by_estimate(m, w: Workload, layouts: list[Layout], capacity: int) -> list:
    """The plans of every layout, each from its own estimate() (layouts the engine refuses left out)."""
    out = []
    for lay in layouts:
        try:
            est = estimate(m, workload_of(w, lay), with_fits=False)
        except InputError:
            continue
        sv = est.serving
        plan = _plan(w, lay, est.total_bytes, est.peak_allocated_bytes, capacity,
                     sv.starts and sv.max_concurrent_seqs >= w.micro_batch)
        plan.max_seqs, plan.seq_cap = sv.max_concurrent_seqs, scheduler_cap(sv, w)
        out.append(plan)
    return out


@pytest.mark.parametrize("name, engine, job", JOBS, ids=[f"{j[0]}-{j[1]}" for j in JOBS])
def test_serving_plans_equal_estimate_on_every_layout(name, engine, job):
    m = load_model(name).spec
    w = Workload(mode="infer", engine=engine, **job)
    capacity = get_gpu(w.gpu).usable_bytes
    layouts = [lay for n in COUNTS for lay in layouts_of(m, w, n)]
    assert len({replica_key(w, lay) for lay in layouts}) < len(layouts)  # replicas are shared
    fast = evaluate(m, w, layouts, capacity, include_unfit=True)
    slow = by_estimate(m, w, layouts, capacity)
    assert fast == slow
    assert any(p.fits for p in fast)
    for concurrency in (None, 48):
        for plans in (fast, slow):
            time_plans(m, w, plans, concurrency=concurrency)
            plans.sort(key=rank_key("fastest"))
        assert fast == slow
        assert all(p.tpot_s is not None or not p.running_batch for p in fast)


def test_a_layout_whose_experts_do_not_divide_its_replicas_is_refused_apart():
    """EP × expert TP must divide DP × CP × TP (memory.parallel.check_divisibility): two layouts of one replica
    shape on either side of that rule get their own estimate, the refused one no plan."""
    m = load_model("qwen3-30b-a3b").spec
    w = Workload(mode="infer", engine="vllm", seq_len=8192, gpu="h100-sxm")
    capacity = get_gpu(w.gpu).usable_bytes
    layouts = [Layout(1, 1, 2, ep=4, etp=1), Layout(1, 1, 4, ep=4, etp=1), Layout(1, 1, 8, ep=4, etp=1)]
    plans = evaluate(m, w, layouts, capacity, include_unfit=True)
    assert [p.dp for p in plans] == [4, 8]
    assert plans == by_estimate(m, w, layouts, capacity)
