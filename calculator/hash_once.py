"""A frozen pydantic model hashed once per instance.

Pydantic hashes a frozen model by hashing the tuple of all its fields at every call: ~1.7 µs for a ModelSpec
(45 fields), ~3.9 µs for a Workload with its nested models. estimate() keys its per-model and per-shard caches on
them about ten times a call, so the hashing alone was ~12 µs of a ~56 µs estimate.

A frozen model cannot change after construction (model_copy(update=...) makes a new instance), so its hash is
computed once and kept here, keyed by the instance's id. The entry holds the instance itself: while it is held no
other object can have that id, so an id found here is always the same instance. Bounded (the oldest entries go
first, calculator/bounded_cache.get_or_build); an evicted instance is simply hashed again. Nothing is stored on the
instance, so copies, pickles and `model_dump` see the model unchanged.
"""
from __future__ import annotations

import operator

from calculator.bounded_cache import get_or_build

_HASHES: dict[int, tuple[object, int]] = {}  # id(instance) -> (instance, hash)
_MAX_HASHES = 4096


def hash_once(cls):
    """Class decorator: `cls.__hash__` hashes the field values (as pydantic does) once per instance."""
    fields = tuple(cls.model_fields)
    values = operator.itemgetter(*fields) if len(fields) > 1 else (lambda d: (d[fields[0]],))

    def __hash__(self) -> int:
        try:
            return _HASHES[id(self)][1]
        except KeyError:
            return get_or_build(_HASHES, id(self), lambda: (self, hash(values(self.__dict__))), _MAX_HASHES)[1]

    cls.__hash__ = __hash__
    return cls
