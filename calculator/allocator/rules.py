"""PyTorch's CUDA caching allocator, replayed: what `torch.cuda.max_memory_reserved()` reaches for a sequence of
tensor allocations and frees (nvidia-smi = reserved + the memory outside PyTorch).

The rules are those of c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x, read at v2.11):
- every request is rounded up to 512 B (`round_size`, kMinBlockSize);
- requests of at most 1 MiB (kSmallSize) come from the small pool, whose segments are 2 MiB (kSmallBuffer);
  larger ones from the large pool, whose new segments are 20 MiB (kLargeBuffer) below 10 MiB (kMinLargeAlloc) and
  the request rounded up to 2 MiB (kRoundLarge) above (`get_allocation_size`);
- a request takes the smallest cached free block that holds it, lowest address first on ties (`get_free_block`:
  `pool.blocks.lower_bound`, blocks ordered by size then address); only when none does is a new segment
  cudaMalloc'ed (`alloc_block`) — reserved memory grows and, without empty_cache(), never shrinks;
- a block larger than the request is split when the rest is at least 512 B (small pool) or more than 1 MiB
  (large pool) (`should_split`); a freed block merges with free neighbours of its own segment
  (`try_merge_blocks`), never across segments;
- `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`: one segment per pool whose mapped end grows in pages
  (2 MiB small pool, 20 MiB large pool; `ExpandableSegment`); a request that no free block holds maps only what
  the free block at the mapped end lacks, so a freed tail is reused instead of left behind (free blocks inside
  the segment stay mapped).

A replay is a tuple of events: (tensor id, bytes) allocates, (tensor id, 0) frees. Pure Python, no torch.
The rules run block by block in reference.py, on plain ints in fast.py and in C in native/.
"""
from __future__ import annotations

from dataclasses import dataclass

MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = 1 << 20  # kSmallSize: largest request served by the small pool
SMALL_BUFFER = 2 << 20  # kSmallBuffer: small-pool segment
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
LARGE_BUFFER = 20 << 20  # kLargeBuffer: segment for requests between 1 and 10 MiB; expandable page (large pool)
ROUND_LARGE = 2 << 20  # kRoundLarge


def round_size(n: int) -> int:
    """`round_size`: every request in multiples of 512 B."""
    return MIN_BLOCK if n < MIN_BLOCK else -(-n // MIN_BLOCK) * MIN_BLOCK


def allocation_size(n: int) -> int:
    """`get_allocation_size`: the segment cudaMalloc'ed for a request no cached block holds."""
    if n <= SMALL_SIZE:
        return SMALL_BUFFER
    if n < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-n // ROUND_LARGE) * ROUND_LARGE


@dataclass(frozen=True)
class Replay:
    """What the allocator reached over a replay: the peaks of allocated and of reserved bytes, and the reserved
    bytes at the moment allocated peaked."""

    peak_allocated: int
    peak_reserved: int

    @property
    def slack(self) -> int:
        """reserved − allocated at the peaks (torch.cuda.max_memory_reserved − max_memory_allocated)."""
        return self.peak_reserved - self.peak_allocated
