"""The caching allocator's rules (calculator/allocator/rules.py), block by block: a free list per pool of _Block
objects, the rules as written, slow but plain. calculator/allocator/fast.py runs the same rules on plain ints (and
calculator/allocator/native in C); tests hold the three equal."""
from __future__ import annotations

from bisect import bisect_left, insort

from calculator.allocator.rules import (LARGE_BUFFER, MIN_BLOCK, SMALL_BUFFER, SMALL_SIZE, Replay, allocation_size,
                                        round_size)


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


def reference_replay(events, expandable: bool = False) -> Replay:
    """The replay block by block (_Pool, _Block): the rules as written above; replay() runs the same rules faster
    (calculator/allocator/fast.py; tests/allocator/test_allocator.py and tests/allocator/test_allocator_fast.py hold the two equal)."""
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
