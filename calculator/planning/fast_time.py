"""The planner's vectorised time model: estimate_time()'s training step (calculator/timing/step_time.py) over a whole
grid of layouts at once, equal to it on every layout (tests/planning/test_planner_fast_time.py holds samples to it).

A stage's micro-batch is a sum (calculator.timing.train_ops): n × one layer of each layer group + its embedding
and head. One layer of each group, the embedding and the head are priced once per local shape (TP, CP, sequence
parallel, micro-batch, recompute, EP, expert TP) with the engine's own operations; each (layout, stage) row is then
their layer counts times those vectors (numpy), the critical stage is the first with the most compute (as
estimate_time picks it), and the communication, bubble, optimizer and step come from the same array functions
estimate_time calls (calculator.timing.comm_time, calculator.timing.step_time.step_seconds).

Covered: full-fine-tuning training jobs on a GPU with speed figures, any stack, optimizer, attention kernel and
model implementation (`covers`); `times` returns None otherwise (LoRA / QLoRA, CPU offload, hybrid-shard groups,
fp32 weights under autocast) and the planner times each plan with estimate_time().
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from calculator.core.bounded_cache import get_or_build
from calculator.core.dtypes import DTYPE_BITS
from calculator.core.errors import InputError
from calculator.memory.activations import dims
from calculator.model.spec import ModelSpec
from calculator.planning import fast_stages as stages
from calculator.planning import fast_training
from calculator.planning.grid import microbatches_of, workload_of
from calculator.timing import train_ops as T
from calculator.timing.comm_time import training_comm
from calculator.timing.inputs import TimingInputs
from calculator.timing.step_time import (bottleneck_parts, comm_choices, compute_seconds, expert_dp, optimizer_params,
                                         rates_for, routing_columns, step_seconds)

_SHAPES: dict = {}
_CACHE_ENTRIES = 4096


@lru_cache(maxsize=64)
def group_index(m: ModelSpec) -> tuple[tuple, np.ndarray]:
    """(the layer groups of the model in order of first appearance, prefix counts of each over the layers)."""
    keys = [T.layer_key(m, i) for i in range(m.num_hidden_layers)]
    groups = tuple(dict.fromkeys(keys))
    onehot = np.zeros((len(keys), len(groups)), dtype=np.int64)
    for i, k in enumerate(keys):
        onehot[i, groups.index(k)] = 1
    return groups, np.vstack([np.zeros((1, len(groups)), dtype=np.int64), np.cumsum(onehot, axis=0)])


class _Shape:
    """One local shape's stats (TP, CP, micro-batch, EP, expert TP): per recompute mode and layer group, the
    embedding, the head, the whole model's FLOPs, the communication sizes."""

    def __init__(self, m: ModelSpec, lw, r, fp32, inputs: TimingInputs):
        d = dims(m, lw)
        groups, prefix = group_index(m)
        parts = [T.layer_parts(m, lw, d, g) for g in groups]
        self._args = (m, lw, d, groups, parts, r, fp32, inputs)
        # every list priced in one pass (train_ops.stats_many): each group's forward + backward, what each
        # recompute mode replays, the embedding, the head
        modes = ("none", "selective", "full")
        lists = [base for base, _ in parts] + [extra[rc] for rc in modes for _, extra in parts] + [
            T.head_ops(m, lw, d, True, False), T.head_ops(m, lw, d, False, True)]
        got = T.stats_many(lists, r, fp32, inputs, d)
        g = len(groups)
        self._layer: dict[str, np.ndarray] = {}
        self._mtp: dict[str, np.ndarray] = {}
        for j, rc in enumerate(modes):
            layer = got[:g] + got[g * (j + 1):g * (j + 2)]
            for i, (key, (base, extra)) in enumerate(zip(groups, parts)):
                if key[0]:  # a MoE layer's host time and segments between waits (train_ops.moe_columns)
                    layer[i] += T.moe_columns(m, lw, d, base, extra[rc], r, fp32, inputs)
            self._layer[rc] = layer
        self.emb, self.head = got[-2], got[-1]
        whole = prefix[-1] @ self.layer("none") + self.emb + self.head + self.mtp("none")
        self.model_flops = whole[T.MODEL_FLOPS]
        e = d.e
        self.cols = (e * d.T * d.h, e * d.T * d.kvd, e * d.T * (d.qd + 2 * d.kvd), e * d.T * d.qd,
                     e * d.T * m.num_experts_per_tok * d.h if m.is_moe else 0.0, e * d.T * d.h_sp)


    def mtp(self, recompute: str) -> np.ndarray:
        """The MTP block's stats on the last stage under `recompute` (train_ops.mtp_stats)."""
        got = self._mtp.get(recompute)
        if got is None:
            m, lw, d, _, _, r, fp32, inputs = self._args
            got = self._mtp[recompute] = T.mtp_stats(m, lw.model_copy(update={"recompute": recompute}), d, r, fp32,
                                                     inputs)
        return got

    def layer(self, recompute: str) -> np.ndarray:
        """groups × STATS of one layer of each group under `recompute` (priced on first use)."""
        got = self._layer.get(recompute)
        if got is None:
            m, lw, d, groups, parts, r, fp32, inputs = self._args
            w = lw.model_copy(update={"recompute": recompute})
            got = self._layer[recompute] = np.array([T.layer_stats(m, w, d, g, r, fp32, inputs, part)
                                                     for g, part in zip(groups, parts)])
        return got


def covers(m, w) -> bool:
    """Training on a GPU, full fine-tuning (LoRA's adapters and QLoRA's dequantize depend on the shard), no CPU
    offload (the step runs on the host), no hybrid-shard group, no fp32 weights cast under autocast."""
    from calculator.memory.autocast import autocast_on
    p = w.parallel
    return (isinstance(m, ModelSpec) and w.mode == "train" and bool(w.gpu) and w.finetune == "full"
            and not p.offload_optimizer and not p.offload_params and p.zero_shard_size is None
            and not autocast_on(w))


def times(m, w, layouts, timing: TimingInputs | None = None, global_batch: int | None = None) -> dict | None:
    """Per layout (numpy arrays): step_time_s, tokens_per_s, tokens_per_s_per_gpu, mfu, cost_per_million_tokens
    (None without a price) and bottleneck (index into BOTTLENECKS); None where the model does not cover the job."""
    if not covers(m, w) or not layouts:
        return None
    from calculator.model.presets import get_gpu
    inputs = timing or TimingInputs()
    gpu = get_gpu(w.gpu)
    try:
        r, fp32 = rates_for(gpu, w, inputs)
    except InputError:
        return None
    groups, prefix = group_index(m)
    shape_of: dict[tuple, int] = {}
    shapes: list[tuple] = []  # (_Shape, recompute)
    split_of: dict[tuple, list] = {}
    job = (m, w.model_copy(update={"gpu": None}), w.gpu, inputs)
    # rows: (layout, shape, first layer, last layer, dense, experts, tensors, MoE layers, has emb, has head, total)
    rows: list[tuple] = []
    lay_shape = np.empty(len(layouts), dtype=np.int64)
    for i, lay in enumerate(layouts):
        key = (lay.tp, lay.cp, lay.micro_batch, lay.recompute, lay.ep, lay.etp)
        k = shape_of.get(key)
        if k is None:
            k = shape_of[key] = len(shapes)
            shapes.append((get_or_build(_SHAPES, job + (key[:3] + key[4:],),
                                        lambda: _Shape(m, workload_of(w, lay), r, fp32, inputs), _CACHE_ENTRIES),
                           lay.recompute))
        lay_shape[i] = k
        skey = (lay.tp, lay.pp, lay.ep, lay.etp, lay.pp_first, lay.pp_last)
        split = split_of.get(skey)
        if split is None:
            bounds = stages.boundaries(m, lay) if lay.pp > 1 else [0, m.num_hidden_layers]
            split = split_of[skey] = [(bounds[s], bounds[s + 1], dense, experts, tensors, n_moe, emb, head, total)
                                      for s, dense, experts, tensors, _, n_moe, emb, head, total
                                      in fast_training.shard_rows(m, lay)]
        rows += [(i, k) + row for row in split]
    R = np.array(rows, dtype=np.float64)
    owner, shape = R[:, 0].astype(np.int64), R[:, 1].astype(np.int64)
    first, last = R[:, 2].astype(np.int64), R[:, 3].astype(np.int64)
    counts = prefix[last] - prefix[first]
    layer_stats = np.stack([s.layer(rc) for s, rc in shapes])  # shapes × groups × stats
    emb_stats = np.stack([s.emb for s, _ in shapes])
    head_stats = np.stack([s.head + s.mtp(rc) for s, rc in shapes])
    st = (np.einsum("rg,rgs->rs", counts, layer_stats[shape]) + R[:, 8:9] * emb_stats[shape]
          + R[:, 9:10] * head_stats[shape]).T  # stats × rows
    comp = compute_seconds(st)
    n = len(layouts)
    lay_cols = np.array([(l.tp, l.pp, l.dp, l.cp, l.ep, l.etp or l.tp, l.zero, l.micro_batch,
                          microbatches_of(w, l, global_batch)) for l in layouts], dtype=np.float64)
    tp, pp, dp, cp, ep, etp, zero, mbs, mb = lay_cols.T
    p0 = w.parallel
    # calculator.timing.overlap's defaults by each layout's stack (calculator.stacks.default_stack, or the job's)
    if w.stack is None:
        megatron = (zero == 0) & ((tp > 1) | (pp > 1) | (cp > 1) | (ep > 1) | p0.distributed_optimizer)
        deepspeed = (zero > 0) & ~((pp > 1) & (zero >= 2))
    else:
        megatron, deepspeed = np.full(n, w.stack == "megatron"), np.full(n, w.stack == "deepspeed")
    stack_overlap = np.where(megatron, False, np.where(deepspeed, zero >= 3, True))
    grad_ov = stack_overlap if inputs.overlap_grad_reduce is None else np.full(n, inputs.overlap_grad_reduce)
    param_ov = stack_overlap if inputs.overlap_param_gather is None else np.full(n, inputs.overlap_param_gather)
    b = (lambda dt: DTYPE_BITS[dt] / 8)
    mtp = T.mtp_layer_counts(m, w)  # the MTP block's layer on the last stage (step_time.comm_columns)
    full = np.array([l.recompute == "full" for l in layouts], dtype=np.float64)

    def columns(rows_at, lay):
        """comm_time's columns of the stage rows `rows_at` (their layouts `lay`): step_time.comm_columns."""
        s_st, sizes = st[:, rows_at], np.array([s.cols for s, _ in shapes])[shape[rows_at]].T
        sp = ((tp[lay] > 1) & ((w.seq_len // cp[lay]) % tp[lay] == 0)).astype(np.float64)
        return {"tp": tp[lay], "pp": pp[lay], "dp": dp[lay], "cp": cp[lay], "ep": ep[lay], "etp": etp[lay],
                "v": np.ones(len(lay)), "zero": zero[lay],
                "plain_dp": ((zero[lay] == 0) & (not p0.distributed_optimizer)).astype(np.float64), "sp": sp,
                "full": full[lay], "mb": mb[lay], "layers": (last - first)[rows_at] + mtp[0] * R[rows_at, 9],
                "moe_layers": R[rows_at, 7] + mtp[1] * R[rows_at, 9], "n_dense": R[rows_at, 4],
                "n_experts": R[rows_at, 5], "b_g": b(w.precision.grads), "b_p": b(w.precision.params),
                "gather_dense": R[rows_at, 4] * b(w.precision.params),
                "gather_experts": R[rows_at, 5] * b(w.precision.params), "act": sizes[0], "kv": sizes[1],
                "qkv_bytes": sizes[2], "q_bytes": sizes[3], "ep_bytes": sizes[4], **routing_columns(m),
                "pp_bytes": sizes[5], "fwd_t": s_st[T.FWD], "bwd_t": s_st[T.GPU] - s_st[T.FWD],
                "attn_t": s_st[T.ATTN], "gemm_t": s_st[T.GEMM], **comm_choices(w),
                "tp_overlap": inputs.tp_comm_overlap, "ep_overlap": inputs.ep_comm_overlap,
                "grad_overlap": grad_ov[lay], "param_overlap": param_ov[lay]}
    # the critical row of each layout: the first with the longest micro-batch, compute + exposed TP, EP, PP and CP
    # communication (estimate_time's max over the stages)
    per_row, _, _ = training_comm(columns(np.arange(len(owner)), owner), gpu, inputs)
    t_row = comp + per_row["tp"] + per_row["ep"] + per_row["pp"] + per_row["cp"]
    order = np.lexsort((np.arange(len(owner)), -t_row, owner))
    first_of = np.ones(len(order), dtype=bool)
    first_of[1:] = owner[order][1:] != owner[order][:-1]
    crit = order[first_of]
    c_stats = st[:, crit]
    exposed, _, _ = training_comm(columns(crit, np.arange(n)), gpu, inputs)
    sharded = (zero >= 1) | p0.distributed_optimizer
    n_opt = optimizer_params(R[crit, 4], R[crit, 5], dp * cp, expert_dp(dp, cp, tp, ep, etp), sharded)
    opt_t = T.optimizer_seconds(w, n_opt, R[crit, 6], r, inputs.host_op_us * 1e-6)
    step, t_mb, bubble = step_seconds(compute_seconds(c_stats), exposed, mb, pp, 1.0, opt_t,
                                      inputs.step_overhead_ms * 1e-3)
    parts = np.vstack(np.broadcast_arrays(*bottleneck_parts(c_stats, exposed, mb, t_mb, bubble, opt_t)))
    tokens = mbs * w.seq_len * mb * dp
    model_flops = np.array([s.model_flops for s, _ in shapes])[lay_shape] * mb
    world = tp * pp * dp * cp
    price = inputs.price_per_gpu_hour
    return {"step_time_s": step, "tokens_per_s": tokens / step, "tokens_per_s_per_gpu": tokens / step / world,
            "mfu": model_flops / (r.peak_flops * pp * step),
            "cost_per_million_tokens": None if price is None else price * world * step / 3600 / tokens * 1e6,
            "bottleneck": np.argmax(parts, axis=0)}


def clear_cache() -> None:
    _SHAPES.clear()
