"""The planner: which parallel layouts of a job fit a GPU, for a given number of GPUs or the fewest that work.

It enumerates TP within a node (a divisor of the attention heads, at most `max_tp`), PP over divisors of the layers,
DP filling the rest, ZeRO stage 0–3 and recompute none / selective / full, estimates each layout with the same
engine, keeps those whose most loaded GPU stays within the 80% safe band (Fujii et al. 2024), and ranks them by
`rank`: "memory" — least recompute, then lowest ZeRO stage, PP, TP and per-GPU memory; "time" — highest tokens/s
(calculator.timing: recompute, ZeRO-3 and TP cost time); "cost" — lowest cost per million tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from calculator.errors import InputError
from calculator.estimate import estimate
from calculator.hardware import SAFE_FRACTION
from calculator.model import ModelSpec
from calculator.parallel import divisors
from calculator.workload import Parallelism, Workload

RECOMPUTE_COST = {"none": 0, "selective": 1, "full": 2}  # rank: prefer less recomputation
RANKS = ("memory", "time", "cost")


@dataclass(frozen=True)
class Plan:
    gpus: int
    tp: int
    pp: int
    dp: int
    zero: int
    recompute: str
    total_bytes: int  # most loaded GPU, nvidia-smi
    peak_allocated_bytes: int
    utilization: float
    step_time_s: float | None = None  # calculator.timing on the workload's GPU (None without one)
    tokens_per_s: float | None = None
    cost_per_million_tokens: float | None = None

    @property
    def label(self) -> str:
        return f"{self.gpus} GPUs: TP{self.tp} × PP{self.pp} × DP{self.dp}, ZeRO-{self.zero}, recompute {self.recompute}"


def _layouts(m: ModelSpec, gpus: int, max_tp: int, train: bool):
    for tp in (d for d in divisors(m.num_attention_heads) if d <= max_tp and gpus % d == 0):
        for pp in (d for d in divisors(m.num_hidden_layers) if (gpus // tp) % d == 0):
            dp = gpus // (tp * pp)
            for zero in ((0, 1, 2, 3) if train and dp > 1 else (0,)):
                for recompute in (("none", "selective", "full") if train else ("none",)):
                    yield tp, pp, dp, zero, recompute


def _timed(m: ModelSpec, w: Workload, plan: Plan, timing) -> Plan:
    """The plan with its step time, tokens/s and cost on the workload's GPU."""
    from calculator.timing import estimate_time
    try:
        t = estimate_time(m, w, timing)
    except InputError:  # the catalogue has no speed figures for this GPU
        return plan
    return replace(plan, step_time_s=t.step_time_s, tokens_per_s=t.tokens_per_s,
                   cost_per_million_tokens=t.cost_per_million_tokens)


def _rank_key(rank: str):
    if rank == "time":
        return lambda p: (-(p.tokens_per_s or 0.0), RECOMPUTE_COST[p.recompute], p.total_bytes)
    if rank == "cost":
        return lambda p: (p.cost_per_million_tokens if p.cost_per_million_tokens is not None else float("inf"),
                          -(p.tokens_per_s or 0.0), p.total_bytes)
    return lambda p: (RECOMPUTE_COST[p.recompute], p.zero, p.pp, p.tp, p.total_bytes)


def plans_for(m: ModelSpec, w: Workload, gpus: int, capacity_bytes: int, max_tp: int = 8,
              limit: int = 20, rank: str = "memory", timing=None) -> list[Plan]:
    """Layouts of exactly `gpus` GPUs that fit `capacity_bytes` within the safe band, best first by `rank`
    (memory / time / cost). With a GPU in the workload every plan carries its step time and tokens/s; `timing`:
    calculator.timing_inputs.TimingInputs (price, efficiencies, links)."""
    if gpus < 1:
        raise InputError("gpus", "the number of GPUs must be at least 1")
    if rank not in RANKS:
        raise InputError("rank", f"rank by one of {', '.join(RANKS)}, not {rank!r}")
    if rank != "memory" and not w.gpu:
        raise InputError("gpu", f"ranking by {rank} needs a GPU for the time estimate")
    if rank == "cost" and (timing is None or timing.price_per_gpu_hour is None):
        raise InputError("price_per_gpu_hour", "ranking by cost needs a price per GPU-hour")
    budget = SAFE_FRACTION * capacity_bytes
    out = []
    for tp, pp, dp, zero, recompute in _layouts(m, gpus, max_tp, w.mode == "train"):
        par = w.parallel.model_copy(update={"tp": tp, "pp": pp, "dp": dp, "zero": zero, "cp": 1, "ep": 1,
                                            "num_microbatches": max(pp, w.parallel.num_microbatches or 1),
                                            "sequence_parallel": tp > 1})
        layout = w.model_copy(update={"parallel": Parallelism(**par.model_dump()), "recompute": recompute})
        try:
            est = estimate(m, layout, with_fits=False)
        except InputError:
            continue
        if est.total_bytes <= budget:
            plan = Plan(gpus, tp, pp, dp, zero, recompute, est.total_bytes, est.peak_allocated_bytes,
                        est.total_bytes / capacity_bytes)
            out.append(_timed(m, layout, plan, timing) if w.gpu else plan)
    out.sort(key=_rank_key(rank))
    return out[:limit]


def fewest_gpus(m: ModelSpec, w: Workload, capacity_bytes: int, max_gpus: int = 4096, max_tp: int = 8,
                limit: int = 10, rank: str = "memory", timing=None) -> list[Plan]:
    """The layouts at the smallest power-of-two GPU count (1, 2, 4, …) where any layout fits."""
    n = 1
    while n <= max_gpus:
        found = plans_for(m, w, n, capacity_bytes, max_tp, limit, rank, timing)
        if found:
            return found
        n *= 2
    return []
