"""The pipeline stages the planner's fast byte model prices: a layout's stage shards read from prefix sums (so
thousands of stage splits cost microseconds), and only the stages that can be the most loaded one.

calculator.memory.parallel.stage_shards of one layer per stage gives every layer's shard with the embedding on the first
and the final norm + LM head on the last (its own copy when tied, as at any pp > 1); the shard of any stage of any
pp > 1 split is then the sum (and, for the largest unit, the maximum) over its layers, equal to stage_shards of
that layout. With pp = 1 the head is not copied: stage_shards is asked directly.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import accumulate
from types import SimpleNamespace

import numpy as np

from calculator.model.spec import ModelSpec
from calculator.memory.parallel import StageShard, stage_layer_counts, stage_shards
from calculator.core.workload import Parallelism

# columns of the per-layer table
DENSE, EXPERTS, TENSORS, MOE, LINEAR, SLIDING = range(6)


@lru_cache(maxsize=256)
def _per_layer(m: ModelSpec, tp: int, ep: int, etp: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(prefix sums over the layers of dense, experts, tensors, MoE layers, linear, sliding layers; each layer's
    largest unit)."""
    shards = stage_shards(m, Parallelism(tp=tp, ep=ep, etp=etp, pp=m.num_hidden_layers))
    rows = np.array([(s.dense, s.experts, s.tensors, s.moe_layers, s.layer_linear,
                      m.layer_is_sliding(s.first_layer)) for s in shards], dtype=np.int64)
    prefix = np.vstack([np.zeros((1, rows.shape[1]), dtype=np.int64), np.cumsum(rows, axis=0)])
    return prefix, np.array([s.largest_unit for s in shards], dtype=np.int64)


def boundaries(m: ModelSpec, lay) -> list[int]:
    sizes = stage_layer_counts(m.num_hidden_layers, SimpleNamespace(
        pp=lay.pp, pp_first_stage_layers=lay.pp_first, pp_last_stage_layers=lay.pp_last))
    return [0] + np.cumsum(sizes).tolist()


def shard(m: ModelSpec, lay, stage: int, bounds: list[int]) -> StageShard:
    """stage_shards(m, layout)[stage], from the prefix sums."""
    if lay.pp == 1:
        return stage_shards(m, Parallelism(tp=lay.tp, ep=lay.ep, etp=lay.etp))[0]
    prefix, largest = _per_layer(m, lay.tp, lay.ep, lay.etp)
    first, last = bounds[stage], bounds[stage + 1]
    dense, experts, tensors, moe, linear, _ = (int(v) for v in prefix[last] - prefix[first])
    return StageShard(stage, first, last, dense, experts, tensors, int(largest[first:last].max()), stage == 0,
                      stage == lay.pp - 1, moe, linear)


def content(m: ModelSpec, lay, stage: int, bounds: list[int]) -> tuple:
    """What a stage's memory depends on besides its position: layers, MoE layers, sliding-window layers and
    parameter counts (two stages with the same content hold the same bytes, but for the micro-batches in flight)."""
    if lay.pp == 1:
        return ("whole",)
    prefix, _ = _per_layer(m, lay.tp, lay.ep, lay.etp)
    first, last = bounds[stage], bounds[stage + 1]
    return (last - first, stage == 0, stage == lay.pp - 1) + tuple((prefix[last] - prefix[first]).tolist())


def candidate_stages(m: ModelSpec, lay, bounds: list[int]) -> list[int]:
    """The stages that can be the most loaded: the first, the last, and of the middle stages the first of each
    content (a later one with the same content holds fewer micro-batches in flight, p − r, and so no more)."""
    if lay.pp == 1:
        return [0]
    seen, out = set(), [0]
    for s in range(1, lay.pp - 1):
        c = content(m, lay, s, bounds)
        if c not in seen:
            seen.add(c)
            out.append(s)
    return out + [lay.pp - 1]


@lru_cache(maxsize=256)
def python_prefix(m: ModelSpec, tp: int, ep: int, etp: int | None) -> list[tuple[int, ...]]:
    """_per_layer's prefix sums as Python ints (a stage's content in a few integer subtractions)."""
    return [tuple(row) for row in _per_layer(m, tp, ep, etp)[0].tolist()]


def python_boundaries(m: ModelSpec, lay) -> list[int]:
    """boundaries() without numpy."""
    sizes = stage_layer_counts(m.num_hidden_layers, SimpleNamespace(
        pp=lay.pp, pp_first_stage_layers=lay.pp_first, pp_last_stage_layers=lay.pp_last))
    return [0, *accumulate(sizes)]


@lru_cache(maxsize=256)
def uniform_middle(m: ModelSpec, tp: int, ep: int, etp: int | None) -> bool:
    """Whether every decoder layer but the first (with the embedding) and the last (with the head) has the same
    row: then every middle stage of a split holds the same content (the middle stages are even)."""
    prefix = python_prefix(m, tp, ep, etp)
    rows = {tuple(b - a for a, b in zip(prefix[i], prefix[i + 1])) for i in range(1, len(prefix) - 2)}
    return len(rows) <= 1
