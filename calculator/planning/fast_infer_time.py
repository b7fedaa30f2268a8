"""The planner's vectorised time model for serving layouts: estimate_time()'s generate() call
(calculator/timing/inference_time.py) over a whole grid of TP × PP × EP × DP layouts at once, equal to it on every
layout (tests/planning/test_planner_fast_time.py).

A stage's forward pass is a sum (inference_time._stage): n × one layer of each layer group + its dequantize + its
embedding / head, for the prefill and for the mean decode step. One layer of each group and the head parts are
priced once per local shape (TP, EP, expert TP); every (layout, stage) row is their layer counts times those
vectors; a pass is the sum over the stages of the slower of each stage's GPU and host; the communication of each
distinct (TP, PP, EP, DP) is forward_comm's.
"""
from __future__ import annotations

import numpy as np

from calculator.core.bounded_cache import get_or_build
from calculator.core.errors import InputError
from calculator.memory.activations import dims
from calculator.model.spec import ModelSpec
from calculator.planning import fast_stages as stages
from calculator.planning.fast_time import group_index
from calculator.planning.grid import workload_of
from calculator.timing import inference_time as I
from calculator.timing import train_ops as T
from calculator.core.dtypes import DTYPE_BITS
from calculator.timing.inputs import TimingInputs
from calculator.timing.ops import weight_bytes_per_element
from calculator.timing.step_time import rates_for

_SHAPES: dict = {}


class _Shape:
    """Per layer group: the prefill and decode stats of one layer; the head parts; the dequantize per layer and per
    linear weight."""

    def __init__(self, m: ModelSpec, lw, r, fp32, inputs: TimingInputs):
        d = dims(m, lw)
        d_dec, cache = I.decode_dims(d, lw)
        e_w = weight_bytes_per_element(lw.weight_dtype or lw.precision.params)
        groups, _ = group_index(m)
        phases = (("prefill", d, None),) + ((("decode", d_dec, cache),) if lw.gen_tokens > 1 else ())
        self.per_layer, self.parts = {}, {}
        for phase, dd, cached in phases:  # every list of a phase priced in one pass (train_ops.stats_many)
            lists = [I.layer_ops(m, lw, dd, g, e_w, cached, phase) for g in groups] + [
                I.head_ops(m, lw, dd, True, False, phase), I.head_ops(m, lw, dd, False, True, phase),
                I.dequantize_op(lw, 1, 0, phase), I.dequantize_op(lw, 0, 1, phase)]
            got = T.stats_many(lists, r, fp32, inputs, dd)
            self.per_layer[phase] = got[:len(groups)]
            self.parts[phase] = tuple(got[len(groups):])
        self.tokens = (d.T, d.b)


def times(m, w, layouts, timing: TimingInputs | None = None) -> dict | None:
    """Per layout (numpy arrays), as calculator.planning.fast_time.times: step_time_s (the generate() call),
    tokens_per_s (all DP replicas), tokens_per_s_per_gpu, mfu, cost_per_million_tokens, bottleneck (index into
    inference_time.INFERENCE_BOTTLENECKS); None where not covered (hybrid mixers priced by their own kinds only)."""
    if w.mode != "infer" or not w.gpu or not layouts or not isinstance(m, ModelSpec):
        return None
    from calculator.model.presets import get_gpu
    inputs = timing or TimingInputs()
    gpu = get_gpu(w.gpu)
    try:
        r, fp32 = rates_for(gpu, w, inputs)
    except InputError:
        return None
    groups, prefix = group_index(m)
    gen = w.gen_tokens
    shape_of: dict = {}
    shapes: list[_Shape] = []
    # the layouts that differ only in DP replicas run the same stages: one row per stage of each distinct
    # (shape, pipeline split), shared by its layouts (the DP size only changes the communication below)
    split_of: dict = {}
    rows, lay_shape, lay_split = [], np.empty(len(layouts), dtype=np.int64), np.empty(len(layouts), dtype=np.int64)
    for i, lay in enumerate(layouts):
        key = (lay.tp, lay.ep, lay.etp)
        k = shape_of.get(key)
        if k is None:
            k = shape_of[key] = len(shapes)
            shapes.append(get_or_build(_SHAPES, (m, w.model_copy(update={"gpu": None}), w.gpu, inputs, key),
                                       lambda: _Shape(m, workload_of(w, lay), r, fp32, inputs), 1024))
        lay_shape[i] = k
        split = (k, lay.pp, lay.pp_first, lay.pp_last)
        j = split_of.get(split)
        if j is None:
            j = split_of[split] = len(split_of)
            bounds = stages.python_boundaries(m, lay) if lay.pp > 1 else [0, m.num_hidden_layers]
            linear = stages.python_prefix(m, lay.tp, lay.ep, lay.etp)
            for s in range(lay.pp):
                a, b = bounds[s], bounds[s + 1]
                rows.append((j, k, a, b, s == 0, s == lay.pp - 1, b - a,
                             linear[b][stages.LINEAR] - linear[a][stages.LINEAR]))
        lay_split[i] = j
    R = np.array(rows, dtype=np.float64)
    owner, shape = R[:, 0].astype(np.int64), R[:, 1].astype(np.int64)
    counts = prefix[R[:, 3].astype(np.int64)] - prefix[R[:, 2].astype(np.int64)]
    n = len(split_of)

    def phase_stats(per_layer: np.ndarray, phase: str) -> np.ndarray:
        emb, head, per_layer_dq, per_weight_dq = (np.stack([s.parts[phase][j] for s in shapes])[shape]
                                                  for j in range(4))
        st = np.einsum("rg,rgs->rs", counts, per_layer[shape]) + R[:, 6:7] * per_layer_dq + R[:, 7:8] * per_weight_dq
        return st + R[:, 4:5] * emb + R[:, 5:6] * head
    pre = phase_stats(np.stack([s.per_layer["prefill"] for s in shapes]), "prefill")
    both = np.zeros((n, len(T.STATS)))
    np.add.at(both, owner, pre)
    pass_pre = np.zeros(n)
    np.add.at(pass_pre, owner, np.maximum(pre[:, T.GPU], pre[:, T.HOST]))
    pass_dec = np.zeros(n)
    dec_both = np.zeros((n, len(T.STATS)))
    if gen > 1:
        dec = phase_stats(np.stack([s.per_layer["decode"] for s in shapes]), "decode")
        np.add.at(dec_both, owner, dec)
        both += (gen - 1) * dec_both
        np.add.at(pass_dec, owner, np.maximum(dec[:, T.GPU], dec[:, T.HOST]))
    both, dec_both, pass_pre, pass_dec = both[lay_split], dec_both[lay_split], pass_pre[lay_split], pass_dec[lay_split]
    lay = np.array([(l.tp, l.pp, l.dp, l.ep, l.etp or l.tp) for l in layouts], dtype=np.float64)
    cols = {"tp": lay[:, 0], "pp": lay[:, 1], "dp": lay[:, 2], "ep": lay[:, 3], "etp": lay[:, 4]}
    e = DTYPE_BITS[w.precision.activations] / 8
    tokens = np.array([s.tokens for s in shapes], dtype=np.float64)[lay_shape]
    pre_c = I.comm_arrays(m, cols, e, tokens[:, 0], gpu, inputs, "prefill")
    dec_c = I.comm_arrays(m, cols, e, tokens[:, 1], gpu, inputs, "decode")
    steps = max(0, gen - 1)
    total, ttft, tpot = I.call_seconds(pass_pre, pass_dec, sum(pre_c), sum(dec_c), gen,
                                 inputs.decode_step_overhead_ms * 1e-3)
    c_parts = tuple(a + steps * b for a, b in zip(pre_c, dec_c)) if gen > 1 else pre_c
    lay = lay[:, :3]
    tokens = w.micro_batch * (gen if gen else w.seq_len) * lay[:, 2]
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
    tokens/s. times() once at batch 1 and once per distinct running batch. None where times() does not cover."""
    from dataclasses import replace
    dec_w = w.model_copy(update={"gen_tokens": max(w.gen_tokens, 2)})  # gen < 2: one decode step at the prompt

    def at(b: int, lays):  # a layout carries its batch (grid.workload_of)
        return times(m, dec_w.model_copy(update={"micro_batch": b}), [replace(lay, micro_batch=b) for lay in lays],
                     timing)
    one = at(1, layouts)
    if one is None:
        return None
    n = len(layouts)
    tpot, neck = np.full(n, np.nan), np.zeros(n, dtype=np.int64)
    by_batch: dict[int, list[int]] = {}
    for i, b in enumerate(batches):
        by_batch.setdefault(int(b), []).append(i)
    for b, idx in by_batch.items():
        if b < 1:
            continue
        got = one if b == 1 else at(b, [layouts[i] for i in idx])
        pick = idx if b == 1 else slice(None)
        tpot[idx], neck[idx] = got["tpot_s"][pick], got["decode_bottleneck"][pick]
    return {"ttft_s": one["ttft_s"], "tpot_s": tpot, "bottleneck": neck}


def clear_cache() -> None:
    _SHAPES.clear()
