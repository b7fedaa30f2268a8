"""The planner: which parallel layouts of a job fit a GPU, for a given number of GPUs or the fewest that work.

It enumerates TP within a node (a divisor of the attention heads, at most `max_tp`), PP over divisors of the layers,
DP filling the rest, ZeRO stage 0–3 and recompute none / selective / full, estimates each layout with the same
engine, keeps those whose most loaded GPU stays within the 80% safe band (Fujii et al. 2024), and ranks them:
fewest GPUs first, then least recompute, then lowest per-GPU memory. Memory only; it says nothing of speed.
"""
from __future__ import annotations

from dataclasses import dataclass

from calculator.errors import InputError
from calculator.estimate import estimate
from calculator.hardware import SAFE_FRACTION
from calculator.model import ModelSpec
from calculator.parallel import divisors
from calculator.workload import Parallelism, Workload

RECOMPUTE_COST = {"none": 0, "selective": 1, "full": 2}  # rank: prefer less recomputation


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


def plans_for(m: ModelSpec, w: Workload, gpus: int, capacity_bytes: int, max_tp: int = 8,
              limit: int = 20) -> list[Plan]:
    """Layouts of exactly `gpus` GPUs that fit `capacity_bytes` within the safe band, best first."""
    if gpus < 1:
        raise InputError("gpus", "the number of GPUs must be at least 1")
    budget = SAFE_FRACTION * capacity_bytes
    out = []
    for tp, pp, dp, zero, recompute in _layouts(m, gpus, max_tp, w.mode == "train"):
        par = w.parallel.model_copy(update={"tp": tp, "pp": pp, "dp": dp, "zero": zero, "cp": 1, "ep": 1,
                                            "num_microbatches": max(pp, w.parallel.num_microbatches or 1),
                                            "sequence_parallel": tp > 1})
        try:
            est = estimate(m, w.model_copy(update={"parallel": Parallelism(**par.model_dump()),
                                                   "recompute": recompute}), with_fits=False)
        except InputError:
            continue
        if est.total_bytes <= budget:
            out.append(Plan(gpus, tp, pp, dp, zero, recompute, est.total_bytes, est.peak_allocated_bytes,
                            est.total_bytes / capacity_bytes))
    out.sort(key=lambda p: (RECOMPUTE_COST[p.recompute], p.zero, p.pp, p.tp, p.total_bytes))
    return out[:limit]


def fewest_gpus(m: ModelSpec, w: Workload, capacity_bytes: int, max_gpus: int = 4096, max_tp: int = 8,
                limit: int = 10) -> list[Plan]:
    """The layouts at the smallest power-of-two GPU count (1, 2, 4, …) where any layout fits."""
    n = 1
    while n <= max_gpus:
        found = plans_for(m, w, n, capacity_bytes, max_tp, limit)
        if found:
            return found
        n *= 2
    return []
