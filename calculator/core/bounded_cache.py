"""A dict used as a cache that stays bounded on a server that sees many models and workloads."""
from __future__ import annotations

from typing import Callable, Hashable, TypeVar

V = TypeVar("V")


def get_or_build(cache: dict, key: Hashable, build: Callable[[], V], limit: int) -> V:
    """cache[key], built by build() on a miss; when `limit` entries are held the oldest goes first. Safe when two
    sessions' threads share the cache: at worst a value is built twice or the eviction skips a turn."""
    value = cache.get(key)
    if value is None:
        value = build()
        if len(cache) >= limit:
            try:
                del cache[next(iter(cache))]
            except (StopIteration, RuntimeError, KeyError):  # emptied or changed by another thread meanwhile
                pass
        cache[key] = value
    return value
