"""The step plans an estimate replays, for the allocator tests (tests/allocator/test_allocator_fast.py,
tests/allocator/test_allocator_native.py): every plan that reaches step_trace.replayed, and the GPU goldens' training runs."""
from __future__ import annotations

from unittest import mock

from calculator import estimate
from calculator.core.errors import InputError
from calculator.stages import terms as stage_terms
from calculator.allocator import step_plan as step_trace


def plans_of(spec, w, with_replays: bool = False) -> list[tuple]:
    """(StepPlan, expandable) of every replay estimate(spec, w) asks for; with_replays: (StepPlan, expandable,
    Replay) where Replay is step_plan.replayed's own computation for that plan (its uncached body, with whichever
    allocator step_plan.allocator_type gives at the time), which the estimate used: a test comparing that
    computation with another needs not run it again."""
    got = []
    replayed = step_trace.replayed

    def spy(plan, expandable):
        if not with_replays:
            got.append((plan, expandable))
            return replayed(plan, expandable)
        result = replayed.__wrapped__(plan, expandable)
        got.append((plan, expandable, result))
        return result

    # stage_terms caches replays by (model, workload, shard): start empty so every plan reaches replayed()
    with mock.patch.object(step_trace, "replayed", spy), mock.patch.dict(stage_terms._REPLAYS, clear=True):
        try:
            estimate(spec, w, with_fits=False)
        except InputError:  # a workload the engine refuses for this model (LoRA all-linear on PEFT's Mamba types)
            return []
    return got


def golden_training_inputs():
    """(ModelSpec, Workload) of every measured H200 training run the CLI can describe (test_golden_gpu.py lists
    the others)."""
    from validation.gpu.goldens import TRAINING_KINDS, engine_inputs, load_cases
    for r in load_cases():
        if r["status"] != "ok" or r["case"]["kind"] not in TRAINING_KINDS:
            continue
        try:
            yield engine_inputs(r)
        except Exception:  # a run the CLI cannot describe yet
            continue
