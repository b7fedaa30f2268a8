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


def python_boundaries(m: ModelSpec, lay) -> tuple[int, ...]:
    """boundaries() without numpy."""
    return layer_bounds(m.num_hidden_layers, lay.pp, lay.pp_first, lay.pp_last)


@lru_cache(maxsize=1024)
def layer_bounds(layers: int, pp: int, first: int | None, last: int | None) -> tuple[int, ...]:
    """The first layer of every stage and the layer count (a split's bounds depend on these four integers only)."""
    sizes = stage_layer_counts(layers, SimpleNamespace(pp=pp, pp_first_stage_layers=first,
                                                       pp_last_stage_layers=last))
    return (0, *accumulate(sizes))


@lru_cache(maxsize=256)
def uniform_from(m: ModelSpec, tp: int, ep: int, etp: int | None) -> int:
    """The first layer (≥ 1) from which every decoder layer but the last has the same row and the same layer kind
    (calculator.timing.train_ops.layer_key): middle stages that start there and hold as many layers are alike."""
    from calculator.timing.train_ops import layer_key
    prefix, last_mid = python_prefix(m, tp, ep, etp), m.num_hidden_layers - 2

    def row(i: int) -> tuple:
        return tuple(b - a for a, b in zip(prefix[i], prefix[i + 1])), layer_key(m, i)
    if last_mid < 1:
        return m.num_hidden_layers
    start, tail = last_mid, row(last_mid)
    while start > 1 and row(start - 1) == tail:
        start -= 1
    return start


def stage_runs(pp: int, bounds, start: int) -> list[tuple[int, int]]:
    """(stage, how many stages it stands for) of a split with layer bounds `bounds`: the first stage, the middle
    stages that begin before layer `start` (uniform_from) one by one, then one for the equal middle stages from
    there on (when they hold as many layers each), and the last."""
    last = pp - 1
    if last == 0:
        return [(0, 1)]
    out, s = [(0, 1)], 1
    while s < last and bounds[s] < start:
        out.append((s, 1))
        s += 1
    if s < last:
        sizes = {bounds[i + 1] - bounds[i] for i in range(s, last)} if last - s > 1 else ()
        out.extend([(s, last - s)] if len(sizes) <= 1 else [(i, 1) for i in range(s, last)])
    return out + [(last, 1)]
