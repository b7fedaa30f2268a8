"""The bulk allocator (calculator/allocator/fast.py) is the block-by-block reference_replay, byte for byte: its
fast-forward of repeated layers and its equal-size small runs leave exactly the state (every free block, top,
allocated, reserved, peak) and the handles that one allocation at a time leaves; and the whole step's replay equals
reference_replay over the same events on every GPU golden, every preset model under several workloads, and random
plans."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calculator import Workload
from calculator.allocator import step_plan as step_trace
from calculator.allocator.reference import reference_replay
from calculator.allocator.rules import SMALL_SIZE, Replay
from calculator.allocator.fast import CachingAllocator
from calculator.model.presets import list_models, load_model
from calculator.allocator.step_plan import ModelTensors, StepPlan, training_events
from replay_plans import golden_training_inputs, plans_of

MiB = 2**20


def _state(a: CachingAllocator):
    return (a.free, a.starts, a.ends, a.tops, a.allocated, a.reserved, a.peak)


def _random_state(rng: random.Random, a: CachingAllocator, b: CachingAllocator) -> None:
    """The same random allocations and frees on two allocators (both pools, splits and merges)."""
    live = []
    for _ in range(rng.randint(0, 40)):
        if live and rng.random() < 0.4:
            h = live.pop(rng.randrange(len(live)))
            a.frees((h,))
            b.frees((h,))
        else:
            n = rng.choice([rng.randint(1, 64 << 10), rng.randint(MiB, 12 * MiB), rng.randint(10 * MiB, 60 * MiB)])
            h = a.alloc(n)
            assert b.alloc(n) == h
            live.append(h)


def _block(rng: random.Random) -> list[int]:
    return [rng.choice([0, rng.randint(1, 64 << 10), rng.randint(1, 2 * MiB), rng.randint(MiB, 12 * MiB),
                        rng.randint(10 * MiB, 60 * MiB), 8 * MiB, 20 * MiB]) for _ in range(rng.randint(1, 8))]


def test_repeated_layers_leave_the_state_one_allocation_at_a_time_leaves():
    rng = random.Random(1)
    fast_forwarded = 0
    for _ in range(300):
        fast, slow = CachingAllocator(), CachingAllocator()
        _random_state(rng, fast, slow)
        block, k = _block(rng), rng.randint(0, 12)
        got = fast.allocs_repeated(block, k)
        assert got == [slow.allocs(block) for _ in range(k)]
        assert _state(fast) == _state(slow)
        fast_forwarded += fast.tops[1] > 0 and any(n > SMALL_SIZE for n in block) and k > 2
    assert fast_forwarded > 50


def test_a_layer_whose_leftover_a_later_layer_could_take_is_not_fast_forwarded():
    # 8 MiB in a 20 MiB segment leaves 12 MiB free: the next 8 MiB takes it (4 left), the third needs a new segment
    a = CachingAllocator()
    layers = a.allocs_repeated([8 * MiB], 3)
    assert [h & (2**64 - 1) for (h,) in layers] == [0, 8 * MiB, 20 * MiB + 512]
    assert a.reserved == 40 * MiB and a.free_blocks(1) == [(4 * MiB, 16 * MiB), (12 * MiB, 28 * MiB + 512)]


def test_equal_small_tensors_fill_one_segment_then_the_next():
    a = CachingAllocator()
    handles = a.allocs_small_same(1000, 5000)  # 1024 B each: 2,048 to a 2 MiB segment
    b = CachingAllocator()
    assert handles == b.allocs([1000] * 5000) and _state(a) == _state(b)
    assert a.reserved == 3 * 2 * MiB and a.allocated == 5000 * 1024


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 1 << 20), min_size=0, max_size=6), st.integers(1, 1 << 20), st.integers(0, 3000))
def test_equal_small_runs_are_allocations_one_at_a_time(prefix, n, count):
    a, b = CachingAllocator(), CachingAllocator()
    assert a.allocs(prefix) == b.allocs(prefix)
    a.frees(a.allocs(prefix[::2]))
    b.frees(b.allocs(prefix[::2]))
    assert a.allocs_small_same(n, count) == b.allocs([n] * count)
    assert _state(a) == _state(b)


def test_with_expandable_segments_every_call_is_the_reference():
    """The bulk calls on one expandable allocator against reference_replay over the same events."""
    from calculator.allocator.fast import replay
    rng = random.Random(4)
    for _ in range(200):
        a, events, live, key = CachingAllocator(expandable=True), [], {}, 0
        for _ in range(rng.randint(1, 12)):
            kind = rng.random()
            if live and kind < 0.35:
                for k in rng.sample(sorted(live), rng.randint(1, len(live))):
                    a.free_one(live.pop(k))
                    events.append((k, 0))
                continue
            block, k = _block(rng), rng.randint(1, 4)
            if kind < 0.5:
                a.alloc_free(block[0])
                if block[0] > 0:
                    key += 1
                    events += [(key, block[0]), (key, 0)]
                continue
            for handles in (a.allocs_repeated(block, k) if kind < 0.75 else [a.allocs(block)]):
                for n, h in zip(block, handles):
                    if n > 0:
                        key += 1
                        live[key] = h
                        events.append((key, n))
        assert a.peaks() == reference_replay(events, True) == replay(events, True)


def test_a_transient_leaves_the_free_blocks_as_they_were_or_one_new_segment():
    rng = random.Random(3)
    for _ in range(300):
        fast, slow = CachingAllocator(), CachingAllocator()
        _random_state(rng, fast, slow)
        n = rng.choice([0, rng.randint(1, 1 << 20), rng.randint(MiB, 12 * MiB), rng.randint(10 * MiB, 80 * MiB)])
        fast.alloc_free(n)
        slow.free_one(slow.alloc(n))
        assert _state(fast) == _state(slow)


def test_runs_of_layers_are_allocations_one_at_a_time():
    rng = random.Random(2)
    for _ in range(100):
        layer = tuple(_block(rng))
        sizes = tuple(_block(rng)) + layer * rng.randint(0, 6) + tuple(_block(rng))
        a, b = CachingAllocator(), CachingAllocator()
        a.allocs_runs(sizes, (len(layer), 3))
        b.allocs(sizes)
        assert _state(a) == _state(b)


# ---- the whole step: replayed() against reference_replay over the same events --------------------------------

@pytest.fixture(autouse=True)
def python_replay(monkeypatch):
    """replayed() on this module's allocator even where the C one is built (tests/allocator/test_allocator_native.py holds
    the two equal)."""
    monkeypatch.setattr(step_trace, "allocator_type", lambda: None)

def _exact(plan: StepPlan, expandable: bool = False, fast=None) -> None:
    """The fast replay equals the block-by-block one over the plan's events (with expandable segments: both).
    `fast`: the fast replay of (plan, expandable) when already computed (plans_of(..., with_replays=True), under
    this module's python_replay), not computed twice."""
    events = training_events(plan)
    for e in (False, True) if expandable else (False,):
        got = fast if fast is not None and e == expandable else step_trace.replayed.__wrapped__(plan, e)
        assert got == reference_replay(events, e)


def test_every_gpu_golden_replays_exactly():
    n = 0
    for spec, w in golden_training_inputs():
        for plan, expandable, fast in plans_of(spec, w, with_replays=True):
            _exact(plan, expandable, fast)
            n += 1
    assert n >= 60


WORKLOADS = {
    "lora": dict(seq_len=1024, finetune="lora"),
    "full recompute": dict(seq_len=1024, recompute="full"),
    "eager": dict(seq_len=512, attention="eager", optimizer_impl="foreach"),
    "fsdp2 dp8": dict(seq_len=1024, stack="fsdp2", parallel={"dp": 8}),
    "deepspeed zero-3 dp8": dict(seq_len=1024, stack="deepspeed", parallel={"dp": 8, "zero": 3}),
    "expandable": dict(seq_len=1024, micro_batch=2, expandable_segments=True),
}


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_every_preset_model_replays_exactly(workload):
    w = Workload(**WORKLOADS[workload])
    n = 0
    for preset in list_models():
        spec = load_model(preset.id).spec
        for plan, expandable, fast in plans_of(spec, w, with_replays=True):
            if plan.n_layers > 64:  # the deepest presets: the block-by-block reference takes seconds
                continue
            _exact(plan, expandable, fast)
            n += 1
    assert n >= 20


SIZES = st.one_of(st.integers(1, 64 << 10), st.integers(1, 3 * MiB), st.integers(10 * MiB, 40 * MiB))


@st.composite
def plans(draw) -> StepPlan:
    """A random plan with small sizes: layers of random tensors, both pools, splits and merges everywhere."""
    n_layers = draw(st.integers(0, 6))
    layer = tuple(draw(st.lists(SIZES, min_size=1, max_size=5)))
    grads = tuple(draw(st.lists(SIZES, min_size=0, max_size=3)))
    weights = tuple(draw(st.lists(SIZES, max_size=2))) + layer * n_layers + tuple(draw(st.lists(SIZES, max_size=2)))
    tensors = ModelTensors(
        weights=weights, masters=tuple(2 * n for n in weights) if draw(st.booleans()) else (),
        layer_grads=(grads,) * n_layers, head_grads=tuple(draw(st.lists(SIZES, max_size=2))),
        embedding_grads=tuple(draw(st.lists(SIZES, max_size=1))), model_order=(),
        layer_transient=tuple(draw(st.lists(SIZES, max_size=2))), layer_gather=draw(st.sampled_from([0, 5 * MiB])),
        tied_sum=0, periods=(len(layer),))
    return StepPlan(
        tensors=tensors, persistent=tuple(draw(st.lists(SIZES, max_size=2))), n_layers=n_layers,
        layer_saved=tuple(draw(st.lists(SIZES, min_size=1, max_size=6))),
        layer_grad_work=tuple(draw(st.lists(SIZES, max_size=3))),
        recompute_input=draw(st.sampled_from([0, 0, 3 * MiB])), head_saved=tuple(draw(st.lists(SIZES, max_size=2))),
        logits=draw(st.sampled_from([(0, 0), (12 * MiB, 24 * MiB)])), head_transient=draw(SIZES),
        hidden_grad=draw(SIZES), state_per_grad=draw(st.sampled_from([(), (2.0, 2.0), (1.0,)])),
        foreach_temp=draw(st.sampled_from([0.0, 2.0])), grads_persist=draw(st.booleans()),
        softcap=draw(st.booleans()),
        step_groups=draw(st.sampled_from([(), ((3 * MiB, 6 * MiB, 0), (1 * MiB, 2 * MiB, 2 * MiB))])),
        init_transient=draw(st.sampled_from([0, 7 * MiB])))


@settings(max_examples=300, deadline=None)
@given(plans(), st.booleans())
def test_random_plans_replay_exactly(plan, expandable):
    _exact(plan, expandable)


def test_one_tensor_reserves_its_segment():
    plan = StepPlan(tensors=ModelTensors((3 * MiB,), (), (), (), (), (), (), 0, 0), persistent=(), n_layers=0,
                    layer_saved=(), layer_grad_work=(), recompute_input=0, head_saved=(), logits=(0, 0),
                    head_transient=0, hidden_grad=0, state_per_grad=(), foreach_temp=0.0, grads_persist=False)
    assert step_trace.replayed.__wrapped__(plan, False) == Replay(3 * MiB, 20 * MiB)  # 1–10 MiB: a 20 MiB segment
