"""A frozen pydantic model hashed once per instance.

Pydantic hashes a frozen model by hashing the tuple of all its fields at every call: ~1.7 µs for a ModelSpec
(45 fields), ~3.9 µs for a Workload with its nested models. estimate() keys its per-model and per-shard caches on
them about ten times a call, so the hashing alone was ~12 µs of a ~56 µs estimate.

A frozen model cannot change after construction (model_copy(update=...) makes a new instance), so its hash is
computed once and kept here, keyed by the instance's id. The entry holds the instance itself: while it is held no
other object can have that id, so an id found here is always the same instance. Nothing is stored on the instance,
so copies, pickles and model_dump see the model unchanged.

Bounded: when full the memo starts over (instances in use are simply hashed again). Not
calculator/bounded_cache.get_or_build: its oldest-first eviction scans past the dict's deleted slots, ~4 µs per
miss at this size (measured), and the fit cards and the planner hash thousands of fresh copies.
"""
from __future__ import annotations

from pydantic import BaseModel

_HASHES: dict[int, tuple[object, int]] = {}  # id(instance) -> (instance, hash)
_MAX_HASHES = 1024


class HashedOnce(BaseModel):
    """Base of the engine's frozen input models: the hash of the field values (as pydantic's), computed once."""

    def __hash__(self) -> int:
        held = _HASHES.get(id(self))
        if held is not None:
            return held[1]
        fields = self.__dict__
        memo = hash(tuple([fields[name] for name in type(self).__pydantic_fields__]))
        if len(_HASHES) >= _MAX_HASHES:
            _HASHES.clear()  # another session's thread may clear or add meanwhile: at worst a hash is computed twice
        _HASHES[id(self)] = (self, memo)
        return memo
