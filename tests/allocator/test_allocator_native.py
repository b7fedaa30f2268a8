"""The C replay (calculator/allocator/native/allocator.c) is calculator/allocator/fast.py's CachingAllocator, block for block:
after the same calls both hold the same free blocks at the same addresses in both pools and the same peak
allocated, reserved and allocated bytes, with and without expandable segments; over every GPU golden's and every
preset's training step too. It refuses what the Python one refuses (addresses past 2^64 B), and a build is found
only for its own source.

The module is compiled here from the current source into a temporary folder (tests never load a stale build)."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from calculator import Workload
from calculator.allocator import native
from calculator.allocator import step_plan as step_trace
from calculator.allocator.reference import reference_replay
from calculator.allocator.rules import Replay
from calculator.allocator.fast import CachingAllocator
from calculator.model.presets import list_models, load_model
from calculator.allocator.step_order import run_step, training_events
from replay_plans import golden_training_inputs, plans_of

MiB = 2**20
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def Native(tmp_path_factory):
    try:
        path = native.build(tmp_path_factory.mktemp("native"))
    except RuntimeError as exc:
        if str(exc).startswith("cannot build here"):  # no compiler, or no Python headers, on this machine
            pytest.skip(str(exc))
        raise  # the source does not compile: a failure
    return native.load_from(path)


def _state(a):
    totals = a.totals() if hasattr(a, "totals") else (a.peak, a.reserved, a.allocated)
    return totals, a.free_blocks(0), a.free_blocks(1)


def _size(rng: random.Random) -> int:
    return rng.choice([0, -3, 1, 512, 513, rng.randint(1, 64 << 10), rng.randint(1, 2 * MiB), MiB, MiB + 1,
                       rng.randint(MiB, 12 * MiB), rng.randint(10 * MiB, 200 * MiB), 8 * MiB, 20 * MiB, 32 * MiB])


def _drive(rng: random.Random, allocators) -> None:
    """The same random calls on every allocator: single and bulk allocations, frees, transients, repeated blocks."""
    live: list[list[int]] = []  # per allocator, the same tensors' handles in the same places
    for _ in range(rng.randint(1, 120)):
        kind = rng.random()
        if live and kind < 0.35:
            picks = rng.sample(range(len(live)), rng.randint(1, min(len(live), 6)))
            for j, a in enumerate(allocators):
                a.frees([live[i][j] for i in picks])
            live = [h for i, h in enumerate(live) if i not in picks]
        elif kind < 0.45:
            n = _size(rng)
            for a in allocators:
                a.alloc_free(n)
        elif kind < 0.55:
            block, k = [_size(rng) for _ in range(rng.randint(1, 5))], rng.randint(0, 5)
            got = [a.allocs_repeated(block, k) for a in allocators]
            live += [list(hs) for rep in zip(*got) for hs in zip(*rep)]
        else:
            sizes = [_size(rng) for _ in range(rng.randint(1, 6))]
            got = [a.allocs(sizes) for a in allocators]
            live += [list(hs) for hs in zip(*got)]


@pytest.mark.parametrize("expandable", [False, True])
def test_random_calls_leave_the_python_allocators_state(Native, expandable):
    rng = random.Random(7 + expandable)
    for _ in range(400):
        py, c = CachingAllocator(expandable), Native(expandable)
        _drive(rng, (py, c))
        assert _state(c) == _state(py)


def test_a_layers_leftover_is_taken_by_the_next_layer_as_in_python(Native):
    # 8 MiB in a 20 MiB segment leaves 12 MiB free: the next 8 MiB takes it (4 left), the third needs a new segment
    a = Native()
    a.allocs_repeated([8 * MiB], 3)
    assert a.totals() == (24 * MiB, 40 * MiB, 24 * MiB)
    assert a.free_blocks(1) == [(4 * MiB, 16 * MiB), (12 * MiB, 28 * MiB + 512)]


def test_a_freed_block_merges_with_its_free_neighbours_only_inside_its_segment(Native):
    a = Native()
    x, y, z = a.allocs([4 * MiB, 4 * MiB, 4 * MiB])  # one 20 MiB segment: 12 MiB used, 8 MiB free behind
    a.frees([x, z])
    assert a.free_blocks(1) == [(4 * MiB, 0), (12 * MiB, 8 * MiB)]
    a.free_one(y)
    assert a.free_blocks(1) == [(20 * MiB, 0)]
    big = a.alloc(30 * MiB)  # no free block holds it: a second segment, 512 B above the first
    assert a.free_blocks(1) == [(20 * MiB, 0)] and a.totals() == (30 * MiB, 50 * MiB, 30 * MiB)
    a.free_one(big)
    assert a.free_blocks(1) == [(20 * MiB, 0), (30 * MiB, 20 * MiB + 512)]  # not merged across segments


def test_past_two_to_the_64_bytes_it_refuses_as_the_python_one_does(Native):
    for n in (2**64, 2**70):
        with pytest.raises(OverflowError):
            CachingAllocator().alloc(n)
        with pytest.raises(OverflowError):
            Native().alloc(n)
    py, c = CachingAllocator(), Native()
    for _ in range(3):  # three segments of 2^62 B fit under 2^64, the fourth does not
        py.alloc(2**62)
        c.alloc(2**62)
    for a in (py, c):
        with pytest.raises(OverflowError):
            a.alloc(2**62)


def test_a_handle_that_is_not_live_is_refused_not_followed(Native):
    a = Native()
    h = a.alloc(4 * MiB)
    a.free_one(h)
    for bad in (h, 10**6, -1):
        with pytest.raises(ValueError):
            a.free_one(bad)
    a.free_one(0)  # no tensor
    assert a.totals() == (4 * MiB, 20 * MiB, 0)


# ---- the whole training step ---------------------------------------------------------------------------------

def _same_step(Native, plan, expandable) -> None:
    py, c = CachingAllocator(expandable), Native(expandable)
    run_step(plan, py)
    run_step(plan, c)
    assert _state(c) == _state(py)


def test_every_gpu_golden_step_replays_as_in_python(Native):
    n = 0
    for spec, w in golden_training_inputs():
        for plan, expandable in plans_of(spec, w):
            _same_step(Native, plan, expandable)
            _same_step(Native, plan, not expandable)
            n += 1
    assert n >= 60


@pytest.mark.parametrize("workload", [dict(seq_len=1024), dict(seq_len=1024, finetune="lora"),
                                      dict(seq_len=512, attention="eager", optimizer_impl="foreach"),
                                      dict(seq_len=1024, stack="deepspeed", parallel={"dp": 8, "zero": 3}),
                                      dict(seq_len=2048, recompute="full", expandable_segments=True)])
def test_every_preset_step_replays_as_in_python(Native, workload):
    n = 0
    for preset in list_models():
        for plan, expandable in plans_of(load_model(preset.id).spec, Workload(**workload)):
            _same_step(Native, plan, expandable)
            n += 1
    assert n >= 20


def test_replayed_runs_the_built_module_with_the_reference_result(Native):
    spec, w = load_model("llama-3.2-1b").spec, Workload(seq_len=2048, micro_batch=2)
    (plan, expandable), *_ = plans_of(spec, w)
    with mock.patch.object(step_trace, "allocator_type", lambda: Native):
        got = step_trace.replayed.__wrapped__(plan, expandable)
    assert isinstance(got, Replay) and got == reference_replay(training_events(plan), expandable)


# ---- building and finding it ---------------------------------------------------------------------------------

def test_a_build_is_named_for_its_source_and_the_interpreter(tmp_path, monkeypatch):
    name = native.built_name()
    assert name.startswith("_allocator.") and name.endswith(native.sysconfig.get_config_var("EXT_SUFFIX"))
    for part in ("SOURCE", "HEADER"):  # an edit to either file never loads the old build
        edited = tmp_path / getattr(native, part).name
        edited.write_bytes(getattr(native, part).read_bytes() + b"\n/* edited */\n")
        with monkeypatch.context() as m:
            m.setattr(native, part, edited)
            assert native.built_name() != name
    assert native.built_name() == name


def test_without_a_build_or_when_switched_off_the_python_replay_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_MEM_NATIVE_DIR", str(tmp_path))  # an empty folder: nothing built
    assert native.allocator_type.__wrapped__() is None
    monkeypatch.setenv("LLM_MEM_NATIVE", "0")
    monkeypatch.delenv("LLM_MEM_NATIVE_DIR")
    assert native.allocator_type.__wrapped__() is None


def test_a_compiler_that_fails_or_is_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "compile_command", lambda out: [sys.executable, "-c", "import sys; "
                                                                "sys.exit('allocator.c:1: error: boom')"])
    with pytest.raises(RuntimeError, match="the C compiler failed:\nallocator.c:1: error: boom"):
        native.build(tmp_path)
    monkeypatch.setattr(native, "compile_command", lambda out: [str(tmp_path / "no-such-cc")])
    with pytest.raises(RuntimeError, match="cannot build here: cannot run the C compiler"):
        native.build(tmp_path)
    assert list(tmp_path.iterdir()) == []  # no half-written module left behind


def test_without_python_headers_it_says_so_before_calling_the_compiler(tmp_path, monkeypatch):
    monkeypatch.setattr(native.sysconfig, "get_paths", lambda: {"include": str(tmp_path / "no-include")})
    with pytest.raises(RuntimeError, match=r"cannot build here: no Python headers \(Python.h\)"):
        native.build(tmp_path / "out")


def test_the_command_builds_into_the_folder_it_is_given_and_drops_older_builds(tmp_path, Native):
    stale = tmp_path / f"_allocator.0123456789abcdef{native.sysconfig.get_config_var('EXT_SUFFIX')}"
    stale.write_bytes(b"an earlier source's build")
    env = {**os.environ, "LLM_MEM_NATIVE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "calculator.allocator.native"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == tmp_path / native.built_name() and (tmp_path / native.built_name()).exists()
    assert not stale.exists()
