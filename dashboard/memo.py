"""A small thread-safe LRU shared by every session of the server (for values that are never mutated)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable


class LRU:
    """A small thread-safe least-recently-used cache: get_or_build(key, build)."""

    def __init__(self, maxsize: int = 256):
        self.maxsize = maxsize
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get_or_build(self, key, build: Callable[[], Any]):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = build()
        with self._lock:
            self._data[key] = value
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._data)
