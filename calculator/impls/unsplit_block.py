"""A tensor that PyTorch's caching allocator serves from a cached block without splitting it holds the whole block:
c10/cuda/CUDACachingAllocator.cpp (key "caching-allocator" in calculator/core/sources.py) rounds every request to
512 B (`round_size`), serves requests above 1 MiB (kSmallSize) from the large pool, and splits a larger cached
block there only when the rest is more than 1 MiB (`should_split`); `allocated_bytes` — what
torch.cuda.max_memory_allocated reports — counts the block's size, not the request's.

The allocator replay (calculator/allocator/) prices what this does to reserved memory over a whole step; this module
is the one case that moves peak allocated in a Megatron-Core layer: the fused qkv output lands in a freed block of
the residual stream.
"""
from __future__ import annotations

MIN_BLOCK = 512  # kMinBlockSize: requests are rounded up to it
SMALL_SIZE = 1 << 20  # kSmallSize: the largest request the small pool serves; a large-pool rest must exceed it


def kept_rest(request: int, block: int) -> int:
    """Bytes a `request` holds beyond its own (rounded) size when the best-fitting cached block is `block`: the rest
    block − request when the request is a large-pool one (> 1 MiB) that fits and the rest is too small to split off
    (≤ 1 MiB); 0 otherwise (the rest is split off and stays free, or the request does not fit)."""
    rounded = -(-request // MIN_BLOCK) * MIN_BLOCK
    rest = block - rounded
    if rounded <= SMALL_SIZE or rest <= 0 or rest > SMALL_SIZE:
        return 0
    return rest
