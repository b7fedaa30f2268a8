"""calculator/allocator/reference.py's caching allocator on plain ints, driven in bulk, with an exact fast-forward of a
repeated allocation-only block (a model's layers being built, the first forward).

The rules are reference_replay's (c10/cuda/CUDACachingAllocator.cpp): 512 B rounding (`round_size`), the small pool
for requests of at most 1 MiB in 2 MiB segments, the large pool in 20 MiB segments below 10 MiB and the request
rounded to 2 MiB above (`get_allocation_size`), best fit — the smallest free block that holds the request, the
lowest address on ties (`get_free_block`: `pool.blocks.lower_bound` over blocks ordered by size, then address) —,
a split when the rest is at least 512 B (small pool) or more than 1 MiB (large pool) (`should_split`), a freed block
merged with the free neighbours of its own segment (`try_merge_blocks`); reserved memory never shrinks (no
`empty_cache()`), so its peak is its final value. With expandable segments (`ExpandableSegment`) each pool is one
segment whose mapped end grows in pages (2 MiB small, 20 MiB large): a request no free block holds maps what the
free block at the mapped end lacks, or a new block there. tests/allocator/test_allocator_fast.py holds the results equal.

Representation. A pool's free blocks are grouped by size: a sorted list of the sizes that have free blocks and, per
size, the sorted list of their addresses (best fit: the first size >= the request, its lowest address), and two dicts
for the merges (address -> size, end -> address). Grouping by size keeps the lists short and their items small ints
(one list of size << 64 | address keys, as before, cost ~20% more per request). A handle is one int,
`size << 64 | address` of the granted block; its pool follows from its size (a small-pool block is at most 1 MiB: it
is split unless the rest is 0; a large-pool one is more). Each pool has its own address space, new segments placed
at its top in creation order with a 512 B gap so blocks of two segments never touch (expandable: no gap, one
segment), as in reference_replay, whose pools have an address space each too.

Fast-forward (`allocs_repeated`, the proof). A block of requests is allocated k times in a row, nothing freed in
between. Let m be its smallest large-pool request (rounded). Suppose every free large-pool block is smaller than m
when a repetition starts. Then (1) no large request of the repetition can take one of those blocks (best fit needs
size ≥ request ≥ m), and nothing is freed, so none of them changes: the large pool's evolution during the
repetition involves only the segments the repetition creates at the top, and is the evolution of the same requests
in an empty large pool (`_LargeRun`), every address shifted by the top: the same handles, the same free blocks left
in those segments, the same reserved, allocated and top deltas. (2) If every free block left by that run is smaller
than m too, the next repetition starts in the same condition, so by induction every later repetition is the first
shifted by its top. The small pool's requests are allocated one by one (they share 2 MiB segments across
repetitions, so they do not repeat); the pools share nothing but the totals, and with nothing freed allocated only
grows, so its peak is its value at the end of each repetition whatever the order between the pools. With expandable
segments a request no block holds grows the free block at the mapped end, one of the old blocks: no fast-forward.
"""
from __future__ import annotations

from bisect import bisect_left, insort

from calculator.allocator.reference import reference_replay
from calculator.allocator.rules import (LARGE_BUFFER, MIN_BLOCK, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE,
                                        Replay)

GAP = MIN_BLOCK  # address gap between segments: blocks that touch belong to one segment (merge never crosses)
SHIFT = 64  # a handle is size << 64 | address
MASK = (1 << SHIFT) - 1


def _file(pool, addr: int, block: int) -> None:
    """Add the free block [addr, addr + block) to a pool (sizes, by_size, start, end); its neighbours are not free."""
    sizes, by_size, start, end = pool
    start[addr] = block
    end[addr + block] = addr
    same = by_size.get(block)
    if same is None:
        by_size[block] = [addr]
        insort(sizes, block)
    else:
        insort(same, addr)


def _take_best_fit(pool, i: int) -> tuple[int, int]:
    """Take the best fit out of a pool: the lowest address among its free blocks of the i-th smallest size.
    Returns (address, size)."""
    sizes, by_size, start, end = pool
    block = sizes[i]
    same = by_size[block]
    addr = same.pop(0)
    if not same:
        del by_size[block], sizes[i]
    del start[addr], end[addr + block]
    return addr, block


def _unfile(sizes: list[int], by_size: dict[int, list[int]], addr: int, block: int) -> None:
    """Remove the free block at addr of `block` bytes from its size's list (the caller updates start / end)."""
    same = by_size[block]
    if len(same) == 1:
        del by_size[block], sizes[bisect_left(sizes, block)]
    else:
        del same[bisect_left(same, addr)]


class CachingAllocator:
    """The allocator's state (free blocks of both pools, their tops, allocated, reserved, peak allocated) and its
    calls: alloc / allocs / allocs_repeated grant handles, free / frees return them, peaks() -> Replay. A call
    raises OverflowError when a pool's addresses pass 2^64 B (no real job; the caller falls back to the reference)."""

    __slots__ = ("expandable", "free", "starts", "ends", "pools", "tops", "allocated", "reserved", "peak", "runs")

    def __init__(self, expandable: bool = False) -> None:
        self.expandable = expandable  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
        # small pool, large pool: the sorted sizes of free blocks, and each size's sorted addresses
        self.free: tuple[tuple[list[int], dict[int, list[int]]], ...] = (([], {}), ([], {}))
        self.starts: tuple[dict[int, int], dict[int, int]] = ({}, {})  # free block address -> size
        self.ends: tuple[dict[int, int], dict[int, int]] = ({}, {})  # free block end -> address
        self.pools = tuple((f[0], f[1], st, en) for f, st, en in zip(self.free, self.starts, self.ends))
        self.tops = [0, 0]
        self.allocated = self.reserved = self.peak = 0
        self.runs: dict[tuple[int, ...], _LargeRun | None] = {}  # allocs_repeated's blocks, replayed once

    def free_blocks(self, pool: int) -> list[tuple[int, int]]:
        """A pool's free blocks (0 small, 1 large) as (size, address), in best-fit order."""
        sizes, by_size = self.free[pool]
        return [(n, a) for n in sizes for a in by_size[n]]

    def peaks(self) -> Replay:
        return Replay(self.peak, self.reserved)

    def alloc(self, n: int) -> int:
        """One tensor of n bytes (0 or less: none, handle 0)."""
        return self.allocs((n,))[0] if n > 0 else 0

    def free_one(self, h: int) -> None:
        if h:
            self.frees((h,))

    def alloc_free(self, n: int) -> None:
        """A tensor of n bytes allocated and freed at once (a transient): exactly free_one(alloc(n)). The best fit b
        is carved at its start and its rest (if split) stays free next to it; freeing the carve merges it back, and
        b's neighbours are not free (free blocks that touch are merged), so b is as before: only the peak moves.
        With no fit, the new segment is left as one free block."""
        if n <= 0:
            return
        if self.expandable:  # a new block may grow the free one at the mapped end
            self.frees(self.allocs((n,)))
            return
        size = MIN_BLOCK if n < MIN_BLOCK else -(-n // MIN_BLOCK) * MIN_BLOCK
        pool = size > SMALL_SIZE
        sizes = self.pools[pool][0]
        i = bisect_left(sizes, size)
        if i < len(sizes):
            block = sizes[i]
        else:
            block = SMALL_BUFFER if not pool else (LARGE_BUFFER if size < MIN_LARGE_ALLOC else
                                                   -(-size // ROUND_LARGE) * ROUND_LARGE)
            addr = self.tops[pool]
            if addr + block > MASK:
                raise OverflowError("allocator addresses past 2^64 B")
            self.tops[pool] = addr + block + GAP
            self.reserved += block
            _file(self.pools[pool], addr, block)
        rest = block - size
        granted = size if (rest > SMALL_SIZE if pool else rest >= MIN_BLOCK) else block
        if self.allocated + granted > self.peak:
            self.peak = self.allocated + granted

    def allocs(self, sizes) -> list[int]:
        """Tensors of `sizes` bytes allocated in order (0 or less: none, handle 0); their handles."""
        out: list[int] = []
        push = out.append
        pools, tops, expandable = self.pools, self.tops, self.expandable
        allocated, peak, reserved = self.allocated, self.peak, self.reserved
        for n in sizes:
            if n <= 0:
                push(0)
                continue
            size = MIN_BLOCK if n < MIN_BLOCK else -(-n // MIN_BLOCK) * MIN_BLOCK
            pool = size > SMALL_SIZE
            here = pools[pool]
            free, by_size, start, end = here
            i = bisect_left(free, size)
            if i < len(free):  # best fit: the smallest size that holds it, its lowest address
                addr, block = _take_best_fit(here, i)
            elif expandable:  # map pages behind the free block at the mapped end (or a new block there)
                top = tops[pool]
                page = LARGE_BUFFER if pool else SMALL_BUFFER
                addr = end.pop(top, top)
                block = top - addr
                if block:
                    _unfile(free, by_size, addr, block)
                    del start[addr]
                grow = -(-(size - block) // page) * page
                if top + grow > MASK:
                    raise OverflowError("allocator addresses past 2^64 B")
                block += grow
                tops[pool] = top + grow
                reserved += grow
            else:  # cudaMalloc a new segment
                block = SMALL_BUFFER if not pool else (LARGE_BUFFER if size < MIN_LARGE_ALLOC else
                                                       -(-size // ROUND_LARGE) * ROUND_LARGE)
                addr = tops[pool]
                if addr + block > MASK:
                    raise OverflowError("allocator addresses past 2^64 B")
                tops[pool] = addr + block + GAP
                reserved += block
            rest = block - size
            if rest > SMALL_SIZE if pool else rest >= MIN_BLOCK:  # should_split: the rest stays free
                _file(here, addr + size, rest)
                block = size
            allocated += block
            if allocated > peak:
                peak = allocated
            push(block << SHIFT | addr)
        self.allocated, self.peak, self.reserved = allocated, peak, reserved
        return out

    def frees(self, handles) -> None:
        """Free each handle (0: none), merging it with the free neighbours of its segment."""
        pools = self.pools
        allocated = self.allocated
        for h in handles:
            if not h:
                continue
            block, addr = h >> SHIFT, h & MASK
            allocated -= block
            here = pools[block > SMALL_SIZE]
            free, by_size, start, end = here
            nxt = start.pop(addr + block, None)
            if nxt is not None:  # the next block of the segment is free: merge
                _unfile(free, by_size, addr + block, nxt)
                del end[addr + block + nxt]
                block += nxt
            prev = end.pop(addr, None)
            if prev is not None:  # the previous one too
                _unfile(free, by_size, prev, addr - prev)
                del start[prev]
                block += addr - prev
                addr = prev
            _file(here, addr, block)
        self.allocated = allocated

    def allocs_repeated(self, block, k: int, keep: bool = True) -> list[list[int]]:
        """`block` (tensor sizes) allocated k times in a row, nothing freed: each repetition's handles (none unless
        `keep`). Exactly allocs(block) k times; the large pool's part fast-forwarded once every free large block is
        smaller than the block's smallest large request (the proof in the module docstring)."""
        block = tuple(block)
        out: list[list[int]] = []
        large = self.free[1][0]  # the large pool's sizes of free blocks
        smallest = 0 if self.expandable else min((-(-n // MIN_BLOCK) * MIN_BLOCK for n in block if n > SMALL_SIZE),
                                                 default=0)
        run: _LargeRun | None = None
        done = 0
        while done < k:
            if smallest and not (large and large[-1] >= smallest):  # no free large block can serve it
                if block not in self.runs:
                    self.runs[block] = _LargeRun.of(block)
                run = self.runs[block]
                if run is not None:
                    break
            got = self.allocs(block)  # allocate one by one
            if keep:
                out.append(got)
            done += 1
        reps = k - done
        if not reps:
            return out
        assert run is not None
        top = self.tops[1]
        if top + reps * run.top > MASK:
            raise OverflowError("allocator addresses past 2^64 B")
        tops = range(top, top + reps * run.top, run.top)  # each repetition's large-pool top
        # the small pool's requests of every repetition, in their order (the pools share nothing; the peak of an
        # allocation-only stretch is its end)
        small_sizes = run.small_sizes
        if small_sizes and small_sizes.count(small_sizes[0]) == len(small_sizes):
            small = self.allocs_small_same(small_sizes[0], len(small_sizes) * reps, keep)
        else:
            small = self.allocs(small_sizes * reps) if small_sizes else []
        if keep:
            n_small, small_at = len(run.small_sizes), run.small_at
            for r, t in enumerate(tops):
                handles = [h + t if h else 0 for h in run.handles]  # the run's blocks, shifted by the top
                for j, i in enumerate(small_at):
                    handles[i] = small[r * n_small + j]
                out.append(handles)
        # the free blocks each repetition leaves in its own segments: above every free block, so each size's
        # addresses stay sorted when appended repetition by repetition (run.left is sorted by address)
        self.starts[1].update({a + t: n for t in tops for a, n in run.left})
        self.ends[1].update({a + n + t: a + t for t in tops for a, n in run.left})
        by_size = self.free[1][1]
        for n, addrs in run.left_by_size:
            same = by_size.get(n)
            if same is None:
                by_size[n] = same = []
                insort(large, n)
            same += [a + t for t in tops for a in addrs]
        self.tops[1] = top + reps * run.top
        self.allocated += reps * run.allocated
        self.reserved += reps * run.reserved
        if self.allocated > self.peak:
            self.peak = self.allocated
        return out

    def allocs_small_same(self, n: int, count: int, keep: bool = True) -> list[int]:
        """`count` small-pool tensors of n bytes in a row, nothing freed: exactly allocs([n] * count), a block at a
        time. The best fit b of size B takes the first; its remainder B − size is smaller than b and than every
        other free block that holds the request (b was the smallest), so while it holds one it takes the next: b
        serves q = min(count, B // size) requests at consecutive addresses and B − q·size stays free (any nonzero
        rest is split off in the small pool: it is a multiple of 512 B, `should_split`). Handles only if `keep`."""
        if self.expandable:
            got = self.allocs([n] * count)
            return got if keep else []
        size = MIN_BLOCK if n < MIN_BLOCK else -(-n // MIN_BLOCK) * MIN_BLOCK
        assert 0 < size <= SMALL_SIZE
        pool, tops = self.pools[0], self.tops
        free, by_size, start, end = pool
        out: list[int] = []
        while count:
            i = bisect_left(free, size)
            if i < len(free):
                addr, block = _take_best_fit(pool, i)
            else:
                block, addr = SMALL_BUFFER, tops[0]
                if addr + block > MASK:
                    raise OverflowError("allocator addresses past 2^64 B")
                tops[0] = addr + block + GAP
                self.reserved += block
            q = min(count, block // size)
            if keep:
                out += range(size << SHIFT | addr, size << SHIFT | addr + q * size, size)
            rest = block - q * size
            if rest >= MIN_BLOCK:
                _file(pool, addr + q * size, rest)
            self.allocated += q * size
            count -= q
        if self.allocated > self.peak:
            self.peak = self.allocated
        return out

    def allocs_runs(self, sizes: tuple[int, ...], periods: tuple[int, ...]) -> None:
        """Allocate `sizes` in order (handles not kept); a block of one of `periods` sizes repeated back to back
        goes through allocs_repeated."""
        i, n, done = 0, len(sizes), 0
        while i < n:
            for p in periods:
                chunk = sizes[i:i + p]
                j = i
                while p > 0 and j + 2 * p <= n and sizes[j + p:j + 2 * p] == chunk:
                    j += p
                if j > i:
                    self.allocs(sizes[done:i])
                    self.allocs_repeated(chunk, (j - i) // p + 1, keep=False)
                    i = done = j + p
                    break
            else:
                i += 1
        self.allocs(sizes[done:])


class _LargeRun:
    """One repetition of a block's large-pool requests in an empty large pool: its handles by position (0 where the
    request is small or none), the free blocks it leaves (address, size), its top, reserved and allocated deltas; the
    block's small requests and their positions. None (of) when the block has no large request or leaves a free
    block that a later repetition could take (one at least its smallest large request)."""

    __slots__ = ("handles", "left", "left_by_size", "top", "reserved", "allocated", "smallest", "small_sizes",
                 "small_at")

    @staticmethod
    def of(block: tuple[int, ...]) -> _LargeRun | None:
        large = [n for n in block if n > SMALL_SIZE]  # a request of more than 1 MiB rounds to the large pool
        if not large:
            return None
        scratch = CachingAllocator()
        got = scratch.allocs([n if n > SMALL_SIZE else 0 for n in block])
        smallest = min(-(-n // MIN_BLOCK) * MIN_BLOCK for n in large)
        sizes, by_size = scratch.free[1]
        if sizes and sizes[-1] >= smallest:
            return None
        run = _LargeRun()
        run.handles, run.top = got, scratch.tops[1]
        run.left = sorted((a, n) for n, a in scratch.free_blocks(1))  # (address, size), by address
        run.left_by_size = [(n, by_size[n]) for n in sizes]  # each size's addresses, sorted
        run.reserved, run.allocated, run.smallest = scratch.reserved, scratch.allocated, smallest
        run.small_at = [i for i, n in enumerate(block) if 0 < n <= SMALL_SIZE]
        run.small_sizes = [block[i] for i in run.small_at]
        return run


def replay(events, expandable: bool = False) -> Replay:
    """Run the caching allocator over `events` ((id, bytes) allocates, (id, 0) frees) from an empty cache."""
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
