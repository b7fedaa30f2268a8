"""The answer a page or the CLI shows: the estimate (calculator.stages.estimate) with fit cards whose "GPUs needed"
is the planner's search for the fewest GPUs of each kind that a real layout of the job fits on. The estimate prices
a workload; this module, one level up, adds the search.
"""
from __future__ import annotations

from calculator.core.result import Estimate
from calculator.model.spec import GenericModel, ModelSpec
from calculator.planning.planner import card_bound, gpus_needed, layout_free
from calculator.stages.estimate import estimate


def planned_gpus(m: ModelSpec, w, gpu):
    """(plan, bound): the planner's fewest GPUs of this kind for the job and that layout
    (calculator.planning.planner.gpus_needed; None when no layout of up to `bound` GPUs fits), for the fit cards;
    (None, None) when the search for the card would be too large (calculator.planning.planner.CARD_LAYOUT_BUDGET)."""
    bound = card_bound(m, layout_free(w, gpu.id))
    plan = gpus_needed(m, w, gpu.id, getattr(gpu, "usable_bytes", gpu.memory_bytes), bound)
    return (None, None) if isinstance(plan, str) else (plan, bound)  # OVER_BUDGET: the sharding estimate stands


def estimate_with_plans(model: ModelSpec | GenericModel, workload, *, with_fits: bool = True) -> Estimate:
    """estimate(model, workload) whose fit cards carry the planner's fewest GPUs and layout for each GPU kind
    (computed on first use of Estimate.fits / fits_on). Raises InputError on bad input."""
    return estimate(model, workload, with_fits=with_fits, needed=planned_gpus)
