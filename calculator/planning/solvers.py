"""What fits: the largest micro-batch and the longest sequence whose estimate stays within a GPU's capacity
(or its 80% safe band). Memory only grows with batch and sequence, so a doubling search then a bisection finds
the exact boundary with a few dozen estimates."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from calculator.core.bounds import MAX_BATCH, MAX_TOKENS
from calculator.core.errors import InputError
from calculator.stages.estimate import estimate
from calculator.core.fit import SAFE_FRACTION
from calculator.model.spec import GenericModel, ModelSpec
from calculator.core.workload import Workload


@dataclass(frozen=True)
class Solution:
    field: str  # "micro_batch" or "seq_len"
    value: int  # largest value that fits; 0 if even the smallest does not
    used_bytes: int  # nvidia-smi total at that value
    budget_bytes: int


def _largest(fits: Callable[[int], tuple[bool, int]], lo: int, step: int, limit: int) -> tuple[int, int]:
    """Largest multiple of `step` in [lo, limit] with fits(x) true (fits is monotone), and its usage."""
    ok, used = fits(lo)
    if not ok:
        return 0, used
    good, good_used, x = lo, used, lo
    while True:  # double until it no longer fits
        nxt = min(x * 2, limit)
        if nxt == x:
            return good, good_used
        ok, used = fits(nxt)
        if not ok:
            bad = nxt
            break
        good, good_used, x = nxt, used, nxt
    while bad - good > step:  # bisect on multiples of step
        mid = (good + bad) // 2 // step * step
        if mid <= good:
            break
        ok, used = fits(mid)
        if ok:
            good, good_used = mid, used
        else:
            bad = mid
    return good, good_used


def _budget(capacity_bytes: int, safe: bool) -> int:
    return int(capacity_bytes * SAFE_FRACTION) if safe else capacity_bytes


def max_micro_batch(model: ModelSpec | GenericModel, workload: Workload, capacity_bytes: int, safe: bool = True,
                    limit: int = 65536) -> Solution:
    """Largest micro-batch whose per-GPU total fits within the capacity (or 80% of it when `safe`)."""
    budget = _budget(capacity_bytes, safe)

    estimate(model, workload.model_copy(update={"micro_batch": 1}), with_fits=False)  # refusals are errors

    def fits(b: int) -> tuple[bool, int]:
        try:
            used = estimate(model, workload.model_copy(update={"micro_batch": b}), with_fits=False).total_bytes
        except InputError:  # past the physical bound on results: does not fit
            return False, 0
        return used <= budget, used

    value, used = _largest(fits, 1, 1, min(limit, MAX_BATCH))
    return Solution("micro_batch", value, used, budget)


def max_seq_len(model: ModelSpec | GenericModel, workload: Workload, capacity_bytes: int, safe: bool = True,
                limit: int = 4 * 1024 * 1024) -> Solution:
    """Longest sequence (a multiple of 2·cp·tp, so every parallel split stays valid) that fits."""
    p = workload.parallel
    step = 2 * p.cp * (p.tp if p.sequence_parallel else 1)
    budget = _budget(capacity_bytes, safe)

    start = step * max(1, 128 // step)
    # the smallest sequence must be computable: a layout the engine refuses (tp not dividing the heads...) is an
    # error, never "0 fits"; beyond it a refusal means the sequence is past the physical bound, so it does not fit
    estimate(model, workload.model_copy(update={"seq_len": start}), with_fits=False)

    def fits(s: int) -> tuple[bool, int]:
        try:
            used = estimate(model, workload.model_copy(update={"seq_len": s}), with_fits=False).total_bytes
        except InputError:
            return False, 0
        return used <= budget, used

    value, used = _largest(fits, start, step, min(limit, MAX_TOKENS))
    return Solution("seq_len", value, used, budget)
