"""The caching-allocator replay follows c10/cuda/CUDACachingAllocator.cpp's rules, each checked on a small sequence
whose reserved memory can be worked out by hand; and on the H200 it reproduces reserved − allocated."""
from __future__ import annotations

from calculator.allocator.fast import replay
from calculator.allocator.rules import LARGE_BUFFER, MIN_BLOCK, SMALL_BUFFER, allocation_size, round_size

MiB = 2**20


def test_requests_round_to_512_bytes():
    assert round_size(1) == MIN_BLOCK == 512
    assert round_size(512) == 512 and round_size(513) == 1024


def test_segment_sizes_by_request():
    assert allocation_size(1 * MiB) == SMALL_BUFFER == 2 * MiB  # small pool
    assert allocation_size(1 * MiB + 512) == LARGE_BUFFER == 20 * MiB  # 1–10 MiB share a 20 MiB segment
    assert allocation_size(10 * MiB) == 10 * MiB and allocation_size(10 * MiB + 1) == 12 * MiB  # 2 MiB multiples


def test_a_freed_block_is_reused_and_split():
    r = replay(((1, 100 * MiB), (1, 0), (2, 40 * MiB), (3, 40 * MiB)))
    assert r.peak_reserved == 100 * MiB and r.peak_allocated == 100 * MiB  # both 40s fit in the freed 100
    r = replay(((1, 100 * MiB), (1, 0), (2, 40 * MiB), (3, 70 * MiB)))
    assert r.peak_reserved == 170 * MiB and r.slack == 60 * MiB  # 60 MiB left over cannot hold 70


def test_best_fit_takes_the_smallest_block_that_holds_the_request():
    # two free blocks, 30 and 50 MiB: a 25 MiB request takes the 30, so a 50 MiB request still fits
    ev = ((1, 30 * MiB), (2, 50 * MiB), (1, 0), (2, 0), (3, 25 * MiB), (4, 50 * MiB))
    assert replay(ev).peak_reserved == 80 * MiB


def test_free_neighbours_merge_within_a_segment_only():
    # one 100 MiB segment split in two and freed: merged, it holds 100 again
    ev = ((1, 100 * MiB), (1, 0), (2, 50 * MiB), (3, 50 * MiB), (2, 0), (3, 0), (4, 100 * MiB))
    assert replay(ev).peak_reserved == 100 * MiB
    # two segments of 50 never merge: a 100 MiB request needs a third
    ev = ((1, 50 * MiB), (2, 50 * MiB), (1, 0), (2, 0), (3, 100 * MiB))
    assert replay(ev).peak_reserved == 200 * MiB


def test_expandable_segments_grow_the_free_tail_instead_of_a_new_segment():
    ev = ((1, 60 * MiB), (2, 40 * MiB), (2, 0), (3, 100 * MiB))
    assert replay(ev).peak_reserved == 200 * MiB  # the freed 40 cannot hold 100: new segment
    # expandable: the 40 MiB tail is free, 60 more (three 20 MiB pages) are mapped behind it
    assert replay(ev, expandable=True).peak_reserved == 160 * MiB


def test_on_the_h200_the_replay_reproduces_reserved_minus_allocated():
    from calculator import estimate
    from validation.gpu.goldens import engine_inputs, load_cases, measured
    wanted = {"train_llama-3.1-8b_b4_s4096_recompute-full", "train_llama-3.1-8b_b4_s4096_recompute-full_expandable",
              "train_llama-3.2-1b_b4_s4096", "train_qwen3-0.6b_b4_s2048_persistent-grads"}
    for r in (r for r in load_cases() if r["id"] in wanted):
        meas = measured(r)
        stage = estimate(*engine_inputs(r), with_fits=False).stages[0]
        replayed = sum(t.bytes for t in stage.terms if t.component == "fragmentation")
        slack = meas["peak_reserved"] - meas["peak_allocated"]
        assert abs(replayed - slack) <= 0.1 * slack + 0.1e9, (r["id"], replayed, slack)


def test_the_fast_replay_equals_the_block_by_block_one():
    """replay() runs the rules on ints and dicts (fixed or expandable segments); the block-by-block reference_replay
    is the rules as written."""
    import random
    from calculator.allocator.reference import reference_replay
    rng = random.Random(0)
    for _ in range(400):
        ev, live, k = [], [], 0
        for _ in range(rng.randint(1, 60)):
            if live and rng.random() < 0.45:
                ev.append((live.pop(rng.randrange(len(live))), 0))
            else:
                k += 1
                ev.append((k, rng.choice([rng.randint(1, 4096), rng.randint(1, 2 * MiB), rng.randint(MiB, 12 * MiB),
                                          rng.randint(1, 200 * MiB), rng.choice([MiB, 10 * MiB, 20 * MiB])])))
                live.append(k)
        assert replay(tuple(ev)) == reference_replay(tuple(ev)), ev
        assert replay(tuple(ev), True) == reference_replay(tuple(ev), True), ev
