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
"""
from __future__ import annotations

from bisect import bisect_left, insort
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


class _Block:
    __slots__ = ("addr", "size", "segment", "free", "prev", "next")

    def __init__(self, addr: int, size: int, segment: int, free: bool = True, prev=None, next=None):
        self.addr, self.size, self.segment, self.free, self.prev, self.next = addr, size, segment, free, prev, next


class _Pool:
    __slots__ = ("small", "expandable", "free", "blocks", "tail", "top")

    def __init__(self, small: bool, expandable: bool):
        self.small, self.expandable = small, expandable
        self.free: list[tuple[int, int]] = []  # (size, addr) sorted: best fit, lowest address first
        self.blocks: dict[int, _Block] = {}  # free blocks by address
        self.tail: _Block | None = None  # expandable: the block at the mapped end
        self.top = 0  # next address

    def _add_free(self, b: _Block) -> None:
        b.free = True
        self.blocks[b.addr] = b
        insort(self.free, (b.size, b.addr))

    def _take_free(self, b: _Block) -> None:
        del self.free[bisect_left(self.free, (b.size, b.addr))]
        del self.blocks[b.addr]
        b.free = False

    def _split(self, b: _Block, size: int) -> _Block:
        rest = b.size - size
        if rest >= MIN_BLOCK if self.small else rest > SMALL_SIZE:
            r = _Block(b.addr + size, rest, b.segment, True, b, b.next)
            if b.next is not None:
                b.next.prev = r
            b.next, b.size = r, size
            if self.tail is b:
                self.tail = r
            self._add_free(r)
        return b

    def malloc(self, size: int) -> tuple[_Block, int]:
        """The block for a rounded request, and the bytes newly reserved for it."""
        free = self.free
        i = bisect_left(free, (size, -1))
        if i < len(free):
            _, addr = free.pop(i)
            b = self.blocks.pop(addr)
            b.free = False
            return self._split(b, size), 0
        if self.expandable:
            page = SMALL_BUFFER if self.small else LARGE_BUFFER
            t = self.tail
            if t is not None and t.free:
                grow = -(-(size - t.size) // page) * page
                self._take_free(t)
                t.size += grow
            else:
                grow = -(-size // page) * page
                t = _Block(self.top, grow, 0, False, self.tail, None)
                if self.tail is not None:
                    self.tail.next = t
            self.top += grow
            self.tail = t
            return self._split(t, size), grow
        seg = allocation_size(size)
        b = _Block(self.top, seg, self.top, False)
        self.top += seg
        return self._split(b, size), seg

    def release(self, b: _Block) -> None:
        """Free a block and merge it with free neighbours of its segment."""
        prev, nxt = b.prev, b.next
        if nxt is not None and nxt.free and nxt.segment == b.segment:
            self._take_free(nxt)
            b.size += nxt.size
            b.next = nxt.next
            if nxt.next is not None:
                nxt.next.prev = b
            if self.tail is nxt:
                self.tail = b
        if prev is not None and prev.free and prev.segment == b.segment:
            self._take_free(prev)
            prev.size += b.size
            prev.next = b.next
            if b.next is not None:
                b.next.prev = prev
            if self.tail is b:
                self.tail = prev
            b = prev
        self._add_free(b)


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


def replay(events, expandable: bool = False) -> Replay:
    """Run the caching allocator over `events` ((id, bytes) allocates, (id, 0) frees) from an empty cache."""
    from calculator.allocator_fast import CachingAllocator  # it imports this module's constants
    a = CachingAllocator(expandable)
    live: dict[int, int] = {}
    try:
        for key, n in events:
            if n:
                live[key] = a.alloc(n)
            else:
                a.free_one(live.pop(key))
    except OverflowError:  # addresses past 2^64 B (no real job)
        return reference_replay(events, expandable)
    return a.peaks()


def reference_replay(events, expandable: bool = False) -> Replay:
    """The replay block by block (_Pool, _Block): the rules as written above; replay() runs the same rules faster
    (calculator/allocator_fast.py; tests/test_allocator.py and tests/test_allocator_fast.py hold the two equal)."""
    pools = (_Pool(True, expandable), _Pool(False, expandable))
    live: dict[int, tuple[_Pool, _Block]] = {}
    allocated = reserved = peak_a = peak_r = 0
    for key, n in events:
        if n:
            size = round_size(n)
            pool = pools[0] if size <= SMALL_SIZE else pools[1]
            b, grown = pool.malloc(size)
            live[key] = (pool, b)
            allocated += b.size
            reserved += grown
            peak_a = max(peak_a, allocated)
            peak_r = max(peak_r, reserved)
        else:
            pool, b = live.pop(key)
            allocated -= b.size
            pool.release(b)
    return Replay(peak_a, peak_r)
