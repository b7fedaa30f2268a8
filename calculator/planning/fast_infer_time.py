"""The planner's vectorised time model for serving layouts: estimate_time()'s generate() call
(calculator/timing/inference_time.py) over a whole grid of TP × PP × EP × DP layouts at once, equal to it on every
layout (tests/planning/test_planner_fast_time.py).

A stage's forward pass is a sum (inference_time._stage): n × one layer of each layer group + its dequantize + its
embedding / head, for the prefill and for the mean decode step. One layer of each group and the head parts are
priced once per local shape (TP, EP, expert TP), and an operation list once per grid where shapes share it (only
an expert layer group reads EP and expert TP): all the new lists in one train_ops.stats_many pass. Every distinct
stage row (its layer counts, embedding / head, linear weights) is their layer counts times those vectors, counted
as often as a split holds it (the even middle stages of a split are one row); a pass is the sum over the stages of
the slower of each stage's GPU and host; the communication of each distinct (TP, PP, EP, DP) is forward_comm's.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from calculator.core.bounded_cache import get_or_build
from calculator.core.errors import InputError
from calculator.memory.activations import dims
from calculator.memory.inference import serving_weight_dtypes, with_kv_dtype
from calculator.model.spec import ModelSpec
from calculator.planning import fast_stages as stages
from calculator.planning.fast_time import group_index
from calculator.planning.grid import Layout, workload_of
from calculator.timing import inference_time as I
from calculator.timing import train_ops as T
from calculator.core.dtypes import DTYPE_BITS
from calculator.timing.inputs import TimingInputs
from calculator.timing.ops import weight_bytes_per_element
from calculator.timing.step_time import rates_for

_SHAPES: dict = {}
# A job's priced operation lists (_list_key -> STATS row), shared by the planner's calls on it: the generate() call,
# serving's batch-1 pass and its running batches (ranking.time_plans) differ only in the batch and the tokens
# generated, which a list reads through its key's dims and cache length; so a list is built and priced once a run.
_ROWS: dict = {}


class _Shape:
    """Per layer group: the prefill and decode stats of one layer; the head parts; the dequantize per layer and per
    linear weight. The operation lists are shared through `ops_of` (one grid's lists, by what they depend on:
    _list_key; those in `priced`, the job's rows of earlier calls, are not built again) and priced by _price."""

    def __init__(self, m: ModelSpec, lw, ops_of: dict, prefill: bool = True, priced: dict | None = None):
        d = dims(m, lw)
        d_dec, cache = I.decode_dims(d, lw)
        e_w = weight_bytes_per_element(serving_weight_dtypes(m, lw)[0])
        groups, _ = group_index(m)
        phases = ((("prefill", d, None),) if prefill else ()) + (
            (("decode", d_dec, cache),) if lw.gen_tokens > 1 else ())
        self.keys, self.per_layer, self.parts = {}, {}, {}
        for phase, dd, cached in phases:
            ends = _ends(m, lw, dd, phase)
            builds = [(g, lambda g=g: I.layer_ops(m, lw, dd, g, e_w, cached, phase)) for g in groups] + [
                ("embedding", lambda: ends()[0]), ("head", lambda: ends()[1]),
                ("dequantize per layer", lambda: I.dequantize_op(lw, 1, 0, phase)),
                ("dequantize per weight", lambda: I.dequantize_op(lw, 0, 1, phase))]
            self.keys[phase] = [_list_key(lw, phase, dd, cached, part) for part, _ in builds]
            for key, (_, build) in zip(self.keys[phase], builds):
                if key not in ops_of and (priced is None or key not in priced):
                    ops_of[key] = build()
        self.tokens = (d.T, d.b)


def _ends(m: ModelSpec, lw, dd, phase: str):
    """(embedding, head) operation lists from one inference_time.head_ops call with both (it splits them by the
    embedding's name), built when first asked for."""
    made: list = []

    def build() -> tuple[list, list]:
        if not made:
            both = I.head_ops(m, lw, dd, True, True, phase)
            made.append(([o for o in both if o.name == "Embedding"], [o for o in both if o.name != "Embedding"]))
        return made[0]
    return build


def _list_key(lw, phase: str, dd, cached, part) -> tuple:
    """What one operation list of a shape depends on besides the job: the phase, the local dims (TP, batch,
    sequence), the cache length, and for an expert layer group (ops.layer_forward's _moe_forward, the only reader of
    EP and expert TP) the expert layout."""
    experts = isinstance(part, tuple) and (part[3] or ("moe" if part[0] else "dense")) == "moe"
    p = lw.parallel
    return (phase, dd, cached, part) + ((p.ep, p.expert_tp) if experts else ())


def _price(shapes: list[_Shape], ops_of: dict, n_groups: int, r, fp32, inputs: TimingInputs,
           row_of: dict) -> None:
    """Every distinct list of the new shapes not in `row_of` (the job's rows priced by earlier calls, which this
    adds to) priced in one train_ops.stats_many pass per phase and sequence (each list's row is its own:
    stats_many prices operation by operation and sums per list)."""
    batches: dict = {}
    for key in ops_of:
        phase, dd = key[0], key[1]
        batches.setdefault((phase, dd.s, dd.s_kv), []).append(key)
    for keys in batches.values():
        got = T.stats_many([ops_of[k] for k in keys], r, fp32, inputs, keys[0][1])
        row_of.update(zip(keys, got))
    for sh in shapes:
        for phase, keys in sh.keys.items():
            rows = [row_of[k] for k in keys]
            sh.per_layer[phase], sh.parts[phase] = np.array(rows[:n_groups]), tuple(rows[n_groups:])
        sh.keys = None  # priced: the operations are not kept in the cache


def _shapes(m, w, layouts, r, fp32, inputs, prefill: bool = True) -> tuple[list[_Shape], list[int]]:
    """(the local shapes of the layouts, each layout's index into them): one per (TP, EP, expert TP, batch), from
    the cache or built and priced together."""
    base = (m, w.model_copy(update={"gpu": None}), w.gpu, inputs)
    # the job's rows whatever its batch and generated tokens (the lists read those through their keys: _ROWS)
    job = (base[0], w.model_copy(update={"gpu": None, "micro_batch": 1, "gen_tokens": 0}), w.gpu, inputs, r, fp32)
    priced = get_or_build(_ROWS, job, dict, 16)
    if len(priced) > 100_000:  # bounded: a job priced at very many batches starts over (a new dict: another
        priced = _ROWS[job] = {}  # thread may be between building its shapes and reading their rows from the old)
    shape_of: dict = {}
    shapes: list[_Shape | None] = []
    new: dict[int, _Shape] = {}
    ops_of: dict = {}
    lay_shape = []
    jobs: dict = {}  # (TP, EP, expert TP) -> the job at that layout: the shapes of its batches differ in micro_batch
    for lay in layouts:
        key = (lay.tp, lay.ep, lay.etp, lay.micro_batch, prefill)
        k = shape_of.get(key)
        if k is None:
            k = shape_of[key] = len(shapes)
            shapes.append(_SHAPES.get(base + (key,)))
            if shapes[k] is None:
                shapes[k] = new[k] = _Shape(m, _job_at(w, lay, jobs), ops_of, prefill, priced)
        lay_shape.append(k)
    if new:
        _price(list(new.values()), ops_of, len(group_index(m)[0]), r, fp32, inputs, priced)
        for key, k in shape_of.items():
            if k in new:
                get_or_build(_SHAPES, base + (key,), lambda k=k: new[k], 1024)
    return shapes, lay_shape


def _job_at(w, lay: Layout, jobs: dict):
    """grid.workload_of(w, lay): built once per (TP, EP, expert TP) and copied with each batch (workload_of sets
    the micro-batch last, on a serving job's parallel layout that no batch changes)."""
    job = jobs.get((lay.tp, lay.ep, lay.etp))
    if job is None:
        job = jobs[(lay.tp, lay.ep, lay.etp)] = workload_of(w, lay)
    return job if job.micro_batch == lay.micro_batch else job.model_copy(update={"micro_batch": lay.micro_batch})


def _stage_rows(m, layouts, lay_shape) -> tuple[np.ndarray, list, list[int], int]:
    """(each distinct stage row: shape, first stage, last stage, layers, linear weights, then its layer count per
    group), (split, row, how many of the split's stages have that row) triples, each layout's split, the number of
    splits. Layouts that differ only in DP replicas share a split."""
    split_of: dict = {}
    row_of: dict = {}
    pairs: list = []
    lay_split = []
    for lay, k in zip(layouts, lay_shape):
        split = (k, lay.pp, lay.pp_first, lay.pp_last)
        j = split_of.get(split)
        if j is None:
            j = split_of[split] = len(split_of)
            for row, times_seen in _split_rows(m, lay.tp, lay.ep, lay.etp, lay.pp, lay.pp_first, lay.pp_last):
                u = row_of.get((k,) + row)
                if u is None:
                    u = row_of[(k,) + row] = len(row_of)
                pairs.append((j, u, times_seen))
        lay_split.append(j)
    return np.array(list(row_of), dtype=np.float64), pairs, lay_split, len(split_of)


@lru_cache(maxsize=4096)
def _split_rows(m: ModelSpec, tp: int, ep: int, etp: int | None, pp: int, first: int | None,
                last: int | None) -> tuple:
    """((first stage, last stage, layers, linear weights, layer count per group), how many of the split's stages
    have that row) of each distinct stage of a split; equal stages (the even middle: fast_stages.stage_runs) one
    row. What the model's layers give, whatever the workload, so kept between grids like the prefix sums."""
    counts_of = group_index(m)[1].tolist()
    bounds = stages.layer_bounds(m.num_hidden_layers, pp, first, last) if pp > 1 else (0, m.num_hidden_layers)
    linear = stages.python_prefix(m, tp, ep, etp)
    here: dict = {}
    for s, times_seen in stages.stage_runs(pp, bounds, stages.uniform_from(m, tp, ep, etp)):
        a, b = bounds[s], bounds[s + 1]
        row = (s == 0, s == pp - 1, b - a, linear[b][stages.LINEAR] - linear[a][stages.LINEAR],
               *(y - x for x, y in zip(counts_of[a], counts_of[b])))
        here[row] = here.get(row, 0) + times_seen
    return tuple(here.items())


def times(m, w, layouts, timing: TimingInputs | None = None, decode_only: bool = False) -> dict | None:
    """Per layout (grid.Layout, or a planner.Plan: it reads as its layout; numpy arrays), as
    calculator.planning.fast_time.times: step_time_s (the generate() call),
    tokens_per_s (all DP replicas), tokens_per_s_per_gpu, mfu, cost_per_million_tokens, bottleneck (index into
    inference_time.INFERENCE_BOTTLENECKS); None where not covered (hybrid mixers priced by their own kinds only).
    decode_only: the decode step alone is priced (serving's running batches): only tpot_s and decode_bottleneck
    hold, the other figures leave the prefill out."""
    w = with_kv_dtype(m, w)  # kv_dtype "auto" as the runtime picks it (memory.inference.kv_cache_dtype)
    if w.mode != "infer" or not w.gpu or not layouts or not isinstance(m, ModelSpec):
        return None
    from calculator.model.presets import get_gpu
    inputs = timing or TimingInputs()
    gpu = get_gpu(w.gpu)
    try:
        r, fp32 = rates_for(gpu, w, inputs)
    except InputError:
        return None
    gen = w.gen_tokens
    shapes, lay_shape = _shapes(m, w, layouts, r, fp32, inputs, not decode_only)
    R, pairs, lay_split, n = _stage_rows(m, layouts, lay_shape)
    lay_split = np.array(lay_split, dtype=np.int64)
    P = np.array(pairs, dtype=np.int64)
    owner, rows, times_seen = P[:, 0], P[:, 1], P[:, 2].astype(np.float64)[:, None]
    shape, counts = R[:, 0].astype(np.int64), R[:, 5:]

    def phase_stats(phase: str) -> np.ndarray:
        per_layer = np.stack([s.per_layer[phase] for s in shapes])
        emb, head, per_layer_dq, per_weight_dq = (np.stack([s.parts[phase][j] for s in shapes])[shape]
                                                  for j in range(4))
        st = np.einsum("rg,rgs->rs", counts, per_layer[shape]) + R[:, 3:4] * per_layer_dq + R[:, 4:5] * per_weight_dq
        return st + R[:, 1:2] * emb + R[:, 2:3] * head

    def per_split(st: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(Σ stats over each split's stages, Σ of each stage's slower of GPU and host)."""
        total, slower = np.zeros((n, len(T.STATS))), np.zeros(n)
        np.add.at(total, owner, times_seen * st[rows])
        np.add.at(slower, owner, times_seen[:, 0] * np.maximum(st[rows, T.GPU], st[rows, T.HOST]))
        return total, slower
    both, pass_pre = (np.zeros((n, len(T.STATS))), np.zeros(n)) if decode_only else per_split(phase_stats("prefill"))
    pass_dec = np.zeros(n)
    dec_both = np.zeros((n, len(T.STATS)))
    if gen > 1:
        dec_both, pass_dec = per_split(phase_stats("decode"))
        both += (gen - 1) * dec_both
    both, dec_both, pass_pre, pass_dec = both[lay_split], dec_both[lay_split], pass_pre[lay_split], pass_dec[lay_split]
    lay = np.array([(l.tp, l.pp, l.dp, l.ep, l.etp or l.tp, l.micro_batch) for l in layouts], dtype=np.float64)
    cols = {"tp": lay[:, 0], "pp": lay[:, 1], "dp": lay[:, 2], "ep": lay[:, 3], "etp": lay[:, 4]}
    e = DTYPE_BITS[w.precision.activations] / 8
    tokens = np.array([s.tokens for s in shapes], dtype=np.float64)[np.array(lay_shape, dtype=np.int64)]
    pre_c = I.comm_arrays(m, cols, e, tokens[:, 0], gpu, inputs, "prefill")
    dec_c = I.comm_arrays(m, cols, e, tokens[:, 1], gpu, inputs, "decode")
    steps = max(0, gen - 1)
    total, ttft, tpot = I.call_seconds(pass_pre, pass_dec, sum(pre_c), sum(dec_c), gen,
                                 inputs.decode_step_overhead_ms * 1e-3)
    c_parts = tuple(a + steps * b for a, b in zip(pre_c, dec_c)) if gen > 1 else pre_c
    tokens = (gen if gen else w.seq_len) * lay[:, 5] * lay[:, 2]  # each layout's batch (grid.workload_of)
    lay = lay[:, :3]
    world = lay.prod(axis=1)
    parts = np.vstack(np.broadcast_arrays(*I.inference_parts(both.T, total, c_parts)))
    price = inputs.price_per_gpu_hour
    return {"step_time_s": total, "tokens_per_s": tokens / total, "tokens_per_s_per_gpu": tokens / total / world,
            "mfu": both[:, T.HW_FLOPS] / (r.peak_flops * lay[:, 1] * total),
            "cost_per_million_tokens": None if price is None else price * world * total / 3600 / tokens * 1e6,
            "bottleneck": np.argmax(parts, axis=0), "ttft_s": ttft, "tpot_s": tpot,
            "decode_bottleneck": None if tpot is None else np.argmax(np.vstack(np.broadcast_arrays(
                *I.inference_parts(dec_both.T, tpot, dec_c))), axis=0)}


def serving(m, w, layouts, batches, timing: TimingInputs | None = None) -> dict | None:
    """Per layout (numpy arrays) of a serving engine: ttft_s (the prefill of one request), tpot_s (a decode step of
    batches[i] sequences at the mean cache length; NaN where the batch is 0) and bottleneck (of that decode step,
    index into inference_time.INFERENCE_BOTTLENECKS); calculator.timing.serving_time turns them into output
    tokens/s. times() over every layout at batch 1, and its decode step once more over the layouts at their running
    batch where that is above 1 (a layout carries its batch: grid.workload_of). None where times() does not
    cover."""
    dec_w = w.model_copy(update={"gen_tokens": max(w.gen_tokens, 2), "micro_batch": 1})  # gen < 2: one decode step
    n = len(layouts)
    sizes = [int(b) for b in batches]
    larger = [i for i, b in enumerate(sizes) if b > 1]
    one = times(m, dec_w, [lay if lay.micro_batch == 1 else _at_batch(lay, 1) for lay in layouts], timing)
    if one is None:
        return None
    tpot, neck = np.full(n, np.nan), np.zeros(n, dtype=np.int64)
    ones = [i for i, b in enumerate(sizes) if b == 1]
    tpot[ones], neck[ones] = one["tpot_s"][ones], one["decode_bottleneck"][ones]
    if larger:
        got = times(m, dec_w, [_at_batch(layouts[i], sizes[i]) for i in larger], timing, decode_only=True)
        tpot[larger], neck[larger] = got["tpot_s"], got["decode_bottleneck"]
    return {"ttft_s": one["ttft_s"], "tpot_s": tpot, "bottleneck": neck}


def _at_batch(lay: Layout, batch: int) -> Layout:
    """The layout at another batch (dataclasses.replace without its field introspection)."""
    return Layout(lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.etp, lay.zero, lay.recompute, batch, lay.pp_first,
                  lay.pp_last)


def clear_cache() -> None:
    _SHAPES.clear()
    _ROWS.clear()
