"""A large-pool request keeps a cached block's rest of at most 1 MiB (calculator/impls/unsplit_block.py,
CUDACachingAllocator.cpp should_split)."""
from calculator.impls.unsplit_block import kept_rest

MiB = 1 << 20


def test_a_rest_of_at_most_one_mib_stays_with_a_large_request():
    assert kept_rest(3 * MiB, 4 * MiB) == MiB  # the fused qkv output of the CI model at TP 4 in a 4 MiB block
    assert kept_rest(3 * MiB + 100, 4 * MiB) == MiB - 512  # the request is rounded to 512 B first


def test_a_larger_rest_is_split_off_and_small_or_unfitting_requests_keep_nothing():
    assert kept_rest(6 * MiB, 8 * MiB) == 0  # rest 2 MiB > kSmallSize: split
    assert kept_rest(MiB, 2 * MiB) == 0  # small pool: split at 512 B
    assert kept_rest(12 * MiB, 4 * MiB) == 0  # does not fit: a new block
    assert kept_rest(4 * MiB, 4 * MiB) == 0
