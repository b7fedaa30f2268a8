"""The caches every session of the server shares, each bounded by entries AND by bytes.

They are ours, not st.cache_data / st.cache_resource, on purpose: Streamlit 1.67 answers a client's `clear_cache`
message (streamlit/runtime/app_session.py, _handle_clear_cache_request; no setting turns it off) by clearing
st.cache_data and st.cache_resource for every session of the server, and any visitor can send it, toolbar hidden
or not. That message reaches nothing here: it clears only the sender's own session state.

- LRU: values that are never mutated, shared by reference (figures, HTML tables, advice): get_or_build.
- Shared: values that a caller may mutate (a fetched config, a planner result): kept pickled, a fresh copy per
  hit (what st.cache_data did), their size exact; an optional time to live.
clear_all() empties every one of them (tests; a restart does the same).
"""
from __future__ import annotations

import pickle
import sys
import threading
import time
from collections import OrderedDict
from typing import Any, Callable

_ALL: list = []  # every cache made here, for clear_all() and stats()


def deep_size(obj: Any, limit: int = 200_000) -> int:
    """Bytes held by `obj` and what it references (containers, instances' __dict__ / __slots__), each object once:
    an estimate for bounding caches, at most `limit` objects visited."""
    seen: set[int] = set()
    stack, total = [obj], 0
    while stack and len(seen) < limit:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o, 64)
        if isinstance(o, (str, bytes, bytearray, int, float, bool)) or o is None:
            continue
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        d = getattr(o, "__dict__", None)
        if isinstance(d, dict):
            stack.append(d)
        for slot in getattr(type(o), "__slots__", ()):
            if isinstance(slot, str) and hasattr(o, slot):
                stack.append(getattr(o, slot))
    return total


class LRU:
    """A thread-safe least-recently-used cache of shared (never mutated) values: get_or_build(key, build).
    Holds at most `maxsize` entries and about `max_bytes` bytes (each value's size from `sizeof`)."""

    def __init__(self, maxsize: int = 256, max_bytes: int = 32 * 2**20, sizeof: Callable[[Any], int] = deep_size):
        self.maxsize, self.max_bytes, self.sizeof = maxsize, max_bytes, sizeof
        self._data: OrderedDict = OrderedDict()  # key -> (value, bytes)
        self._bytes = 0
        self._lock = threading.Lock()
        _ALL.append(self)

    def get_or_build(self, key, build: Callable[[], Any]):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key][0]
        value = build()
        self._put(key, value, self.sizeof(value))
        return value

    def _put(self, key, value, size: int) -> None:
        with self._lock:
            if key in self._data:
                self._bytes -= self._data.pop(key)[1]
            if size > self.max_bytes:
                return  # larger than the whole cache: used once, never kept
            self._data[key] = (value, size)
            self._bytes += size
            while len(self._data) > self.maxsize or self._bytes > self.max_bytes:
                self._bytes -= self._data.popitem(last=False)[1][1]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._bytes = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._data)


class Shared(LRU):
    """An LRU of pickled values: each hit returns a fresh copy, sizes are exact (the pickle's length), and
    entries older than `ttl` seconds are built again. A build that raises caches nothing."""

    def __init__(self, maxsize: int = 64, max_bytes: int = 32 * 2**20, ttl: float | None = None):
        super().__init__(maxsize, max_bytes, sizeof=len)
        self.ttl = ttl

    def get(self, key, build: Callable[[], Any], on_miss: Callable[[], Any] | None = None):
        """The cached value for `key`, else build() (inside the context manager on_miss() returns, e.g. a
        spinner: only a miss shows it)."""
        now = time.monotonic()
        with self._lock:
            hit = self._data.get(key)
            if hit is not None and (self.ttl is None or now - hit[0][0] < self.ttl):
                self._data.move_to_end(key)
                blob = hit[0][1]
            else:
                blob = None
        if blob is not None:
            return pickle.loads(blob)
        if on_miss is None:
            value = build()
        else:
            with on_miss():
                value = build()
        blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self._put(key, (now, blob), len(blob))
        return value


def clear_all() -> None:
    """Empty every shared cache of this process."""
    for cache in _ALL:
        cache.clear()


def stats() -> list[tuple[int, int]]:
    """(entries, bytes) of every shared cache of this process."""
    return [(len(c), c.nbytes) for c in _ALL]
