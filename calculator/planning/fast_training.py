"""The planner's fast byte model for training: estimate()'s per-GPU sum (calculator/stages/estimate.py, training_stage,
_model_states, _overheads) over a whole grid of layouts at once, one numpy row per (layout, pipeline stage), equal
to estimate() byte for byte where it applies (tests/planning/test_planner_fast.py).

The engine's own formula functions do the arithmetic: the training.py functions (weights, master weights,
gradients, optimizer state, the optimizer step's temporaries) and dtypes.nbytes are plain integer arithmetic and
take numpy arrays unchanged; what a decoder layer, the embedding, RoPE and the loss head keep (calculator.impls,
calculator.memory.activations) is priced once per distinct local shape (TP, CP, sequence parallel, micro-batch,
recompute) and multiplied out per stage (layers, in-flight micro-batches) in numpy; the parameter shard of each
stage comes from calculator.memory.parallel.stage_shards once per distinct (TP, PP, uneven stages, EP, expert TP).

Covered: full fine-tuning with the exact activation model, any model implementation, FlashAttention or eager
attention, AdamW / SGD / Lion, the stack each layout runs by default when it is Megatron-LM (TP / PP / CP / EP,
ZeRO 0) or DeepSpeed (ZeRO 1–3); Megatron's distributed optimizer. Not covered (estimate() is used, layout by
layout): the layouts of plain data parallelism or one GPU (DDP / HF Trainer: gradients born in backward), a stack
you chose, FSDP hybrid shard groups, CPU offload, LoRA / QLoRA, the textbook and Fujii activation models,
Adafactor and 8-bit AdamW (per-tensor state), SDPA attention and padded batches (masks per layer), fp32 weights
under autocast (cached bf16 copies).
"""
from __future__ import annotations

import numpy as np

from calculator.memory import activations as act
from calculator.memory import autocast
from calculator import impls
from calculator.model import parameters as params
from calculator.memory import model_states as tr
from calculator.core.dtypes import nbytes
from calculator.core.fit import DEFAULT_CUBLAS_WORKSPACE_BYTES, DEFAULT_CUDA_CONTEXT_BYTES
from calculator.model.spec import LayerKind, ModelSpec
from calculator.planning import fast_stages as stages
from calculator.core.bounded_cache import get_or_build
from calculator.stacks import deepspeed as ds
from calculator.stacks import megatron as megatron_stack
from calculator.core.workload import Parallelism, Workload

RECOMPUTE_INDEX = {"none": 0, "selective": 1, "full": 2}


def covers(m, w: Workload) -> bool:
    p = w.parallel
    if isinstance(m, ModelSpec) and (m.own_swa_heads or m.ffn_widths is not None):
        return False  # sliding layers' own heads (MiMo-V2-Flash), per-layer MLP widths: kinds _Shape does not price
    return (isinstance(m, ModelSpec) and w.mode == "train" and w.engine == "hf" and w.activation_model == "exact"
            and w.finetune == "full" and w.stack is None and p.zero_shard_size is None and not p.offload_optimizer
            and not p.offload_params and w.optimizer not in ("adafactor", "adamw-8bit")
            and w.attention != "sdpa" and not getattr(w, "padded_batch", False) and not autocast.autocast_on(w))


def layout_covered(lay) -> bool:
    """The layout's default stack is DeepSpeed (ZeRO ≥ 1 without PP) or Megatron-LM (TP, PP, CP or EP > 1, ZeRO 0)."""
    if lay.pp > 1 and lay.zero >= 2:  # FSDP2 with pipeline stages (stacks.default_stack): estimate() prices it
        return False
    return lay.zero > 0 or lay.tp > 1 or lay.pp > 1 or lay.cp > 1 or lay.ep > 1


def _states_precision(w: Workload, megatron: bool):
    """The precision the stack holds the states in (Megatron's own rule: calculator/stacks/megatron.py
    states_precision)."""
    return megatron_stack.states_precision(w) if megatron else w.precision


class _Shape:
    """What one local shape (TP, CP, SP, micro-batch, recompute, EP) keeps, priced by the engine's functions."""

    def __init__(self, m: ModelSpec, lw: Workload):
        d = act.dims(m, lw)
        code = impls.module(lw.impl)
        full = lw.recompute == "full"
        has_dense = any(not m.layer_is_moe(i) for i in range(m.num_hidden_layers))
        mixer = "mla" if m.is_mla else "attention"  # the fast model covers softmax-attention models only
        dense = code.layer(m, lw, d, LayerKind(mixer, "dense")) if has_dense else None
        moe = code.layer(m, lw, d, LayerKind(mixer, "moe")) if m.is_moe else None
        self.full = full
        self.per_full = act.full_recompute_layer(d) if full else 0
        self.dense = tuple(dense) if dense is not None else (0, 0, 0)
        self.moe = tuple(moe) if moe is not None else (0, 0, 0)
        if full and lw.attention == "eager":
            extra = (8 - d.e) * d.a * d.b * d.s * d.s_kv
            self.rws_dense = (dense.norms + dense.attention + extra) if dense is not None else 0
            self.rws_moe = (moe.norms + moe.attention + extra) if moe is not None else 0
        elif full:
            self.rws_dense = dense.total if dense is not None else 0
            self.rws_moe = moe.total if moe is not None else 0
        else:
            self.rws_dense = self.rws_moe = 0
        self.embedding = act.embedding_saved(m, d, True)
        self.rotary = act.rotary_saved(m, d)
        self.mask = act.eager_mask_saved(d) if (lw.attention == "eager" and lw.recompute != "none"
                                                and not m.is_mla) else 0
        head = code.head(m, lw, d)
        self.logits = sum(h.bytes for h in head.saved)
        self.loss_ws = head.transient


def totals(m, w: Workload, layouts) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(total, peak allocated, covered) per layout as numpy arrays; None when the job is not covered at all.
    Rows with covered False hold zeros: the caller estimates those layouts with estimate()."""
    if not covers(m, w) or not layouts:
        return None
    from calculator.stages.terms import gpu_of
    from calculator.planning.grid import workload_of
    gpu = gpu_of(w.gpu)
    n = len(layouts)
    covered = np.fromiter((layout_covered(l) for l in layouts), dtype=bool, count=n)
    job = w.model_copy(update={"gpu": None})  # what a local shape depends on: the fit cards ask once per GPU kind
    shard_keys: dict[tuple, int] = {}
    shard_rows: list[list] = []  # per stage: dense, experts, tensors, n_layers, n_moe, has_emb, has_head, total, pos
    shape_keys: dict[tuple, int] = {}
    shapes: list[_Shape] = []
    lay_shard = np.zeros(n, dtype=np.int64)
    lay_shape = np.zeros(n, dtype=np.int64)
    for i, lay in enumerate(layouts):
        if not covered[i]:
            continue
        skey = (lay.tp, lay.pp, lay.ep, lay.etp, lay.pp_first, lay.pp_last)
        k = shard_keys.get(skey)
        if k is None:
            k = shard_keys[skey] = len(shard_rows)
            shard_rows.append(get_or_build(_SHARD_ROWS, (m, skey), lambda: _shard_rows(m, lay), _CACHE_ENTRIES))
        lay_shard[i] = k
        # EP too: a MoE layer keeps grouped_mm's int32 offsets of its E/ep local experts (activations.moe_saved)
        akey = (lay.tp, lay.cp, lay.micro_batch, lay.recompute, lay.etp, lay.ep if m.is_moe else 1)
        a = shape_keys.get(akey)
        if a is None:
            a = shape_keys[akey] = len(shapes)
            shapes.append(get_or_build(_SHAPES, (m, job, akey), lambda: _Shape(m, workload_of(w, lay)),
                                       _CACHE_ENTRIES))
        lay_shape[i] = a
    idx = np.nonzero(covered)[0]
    total = np.zeros(n, dtype=np.int64)
    peak = np.zeros(n, dtype=np.int64)
    if len(idx):
        t, p = _rows(m, w, layouts, idx, lay_shard[idx], lay_shape[idx], shard_rows, shapes, gpu)
        total[idx], peak[idx] = t, p
    return total, peak, covered


# Shards and local shapes outlive one call: the fit cards search the same job on every GPU kind, count by count.
_SHARD_ROWS: dict = {}
_SHAPES: dict = {}
_CACHE_ENTRIES = 4096  # each: bounded, a server sees many models


def shard_rows(m: ModelSpec, lay) -> list[tuple]:
    """_shard_rows of a layout, cached by its (TP, PP, EP, expert TP, uneven stages) for every caller."""
    skey = (lay.tp, lay.pp, lay.ep, lay.etp, lay.pp_first, lay.pp_last)
    return get_or_build(_SHARD_ROWS, (m, skey), lambda: _shard_rows(m, lay), _CACHE_ENTRIES)


def _shard_rows(m: ModelSpec, lay) -> list[tuple]:
    """The stages of a layout that can be the most loaded (calculator.planning.fast_stages.candidate_stages), each as
    (stage, dense, experts, tensors, layers, MoE layers, has embedding, has head, total) of its shard."""
    bounds = stages.boundaries(m, lay) if lay.pp > 1 else [0, m.num_hidden_layers]
    rows = []
    for s in stages.candidate_stages(m, lay, bounds):
        sh = stages.shard(m, lay, s, bounds)
        rows.append((s, sh.dense, sh.experts, sh.tensors, sh.last_layer - sh.first_layer, sh.moe_layers,
                     sh.has_embedding, sh.has_head, sh.total))
    return rows


def _col(values, dtype=np.int64):
    return np.array(values, dtype=dtype)


def _rows(m: ModelSpec, w: Workload, layouts, idx, lay_shard, lay_shape, shard_rows, shapes, gpu):
    """The per-GPU sum of every (layout, stage) row; the max over each layout's stages."""
    lay = [layouts[i] for i in idx]
    cols = np.array([(l.tp, l.pp, l.dp, l.cp, l.ep, l.etp or l.tp, l.zero, l.recompute == "full") for l in lay],
                    dtype=np.int64).reshape(-1, 8)
    # Rows: the stages of each layout that can be the most loaded (planning.fast_stages.candidate_stages); the maximum
    # over them is the maximum over every stage.
    counts = np.array([len(r) for r in shard_rows], dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    rows = counts[lay_shard]
    owner = np.repeat(np.arange(len(lay)), rows)
    pos = np.arange(len(owner)) - np.repeat(np.cumsum(rows) - rows, rows)
    table = np.array([row for rows_ in shard_rows for row in rows_], dtype=np.int64)
    srow = table[offsets[lay_shard][owner] + pos]
    stage, dense, experts, tensors, n_layers, n_moe, has_emb, has_head, shard_total = (srow[:, c] for c in range(9))
    n_dense = n_layers - n_moe

    tp, ppr, dp, cp, ep, etp, zero, rc_full = (cols[owner, c] for c in range(8))
    rc_full = rc_full.astype(bool)
    p0 = w.parallel
    microbatches = np.maximum(ppr, p0.num_microbatches or 1)
    flight = np.where(ppr == 1, 1.0, np.minimum(ppr - stage, microbatches).astype(np.float64))

    # ---- model states (stages.held._model_states, with the stack's precision) ----
    megatron = zero == 0  # covered layouts: ZeRO 0 runs Megatron-LM, ZeRO 1-3 DeepSpeed
    dense_group = dp * cp
    expert_group = np.maximum(1, (dp * cp * tp) // (ep * etp))
    single = (dense_group == 1) & (expert_group == 1)
    sharded_n = -(-dense // dense_group) + -(-experts // expert_group)

    def sharded(stage_min: int, opt: bool):
        on = (zero >= stage_min) | (opt and p0.distributed_optimizer)
        return np.where(on & ~single, sharded_n, shard_total)
    n_w, n_o, n_g = sharded(3, False), sharded(1, True), sharded(2, False)
    out = {}
    largest = params.largest_tensor(m) // tp
    for name, is_megatron in (("megatron", True), ("deepspeed", False)):
        prec = _states_precision(w, is_megatron)
        ws = w.model_copy(update={"precision": prec})
        out[name] = (tr.weight_bytes(n_w, prec.params) + tr.master_weight_bytes(n_o, prec.master_weights)
                     + tr.gradient_bytes(n_g, prec.grads)
                     + tr.optimizer_state_bytes(n_o, tensors, w.optimizer, prec.optimizer_states),
                     tr.optimizer_step_transient(n_o, largest, ws, upcast_grads=True), prec)
    states = np.where(megatron, out["megatron"][0], out["deepspeed"][0])
    step = np.where(megatron, out["megatron"][1], out["deepspeed"][1])
    # ZeRO-3 steps one sub-group at a time (stacks/deepspeed.py): one sub-group's fp32 gradients, beside the larger of
    # its flattened bf16 copy and the optimizer's temporaries
    ds_prec = out["deepspeed"][2]
    sub_group = np.minimum(n_o, ds.SUB_GROUP_SIZE)
    z3_step = tr.optimizer_step_transient(sub_group, largest, w.model_copy(update={"precision": ds_prec}),
                                          upcast_grads=True, cast_source=nbytes(sub_group, ds_prec.grads))
    step = np.where(zero >= 3, z3_step, step)

    # ---- the stack's buffers (calculator/stacks/deepspeed.py; Megatron has none beyond its gradient buffer) ----
    prec = out["deepspeed"][2]
    g = prec.grads
    module = -(-params.count_parameters(m).largest_module // tp)
    ahead = np.maximum(0, np.minimum(ds.MAX_LIVE_PARAMETERS, module + ds.prefetch_bucket_size(m, w)) - module)
    z3_persistent = nbytes(ds.reduce_bucket_size(m, w), g)
    z3_at_peak = 2 * nbytes(module, prec.params) + nbytes(ahead, prec.params)
    z12_at_peak = (2 if ds.OVERLAP_COMM_STAGE_1_2 else 1) * nbytes(ds.reduce_bucket_size(m, w), g)
    states = states + np.where(zero >= 3, z3_persistent, 0)
    at_peak = np.where(zero >= 3, z3_at_peak, np.where(zero >= 1, z12_at_peak, 0))
    o = w.overheads
    cublas = o.cublas_workspace_bytes if o.cublas_workspace_bytes is not None else (
        gpu.cublas_workspace_bytes if gpu is not None else DEFAULT_CUBLAS_WORKSPACE_BYTES)
    states = states + 2 * cublas

    # ---- activations, loss head and the backward's transient (stages.training.training_stage, exact model) ----
    shape = lay_shape[owner]

    def of_shape(get, dtype=np.int64):
        return _col([get(s) for s in shapes], dtype)[shape]
    acts = np.where(rc_full, (flight * n_layers * of_shape(lambda s: s.per_full)).astype(np.int64), 0)
    for part in range(3):  # norms, attention, MLP: each term truncated on its own, as estimate() does
        acts = acts + np.where(rc_full, 0, (flight * (n_dense * of_shape(lambda s: s.dense[part])
                                                      + n_moe * of_shape(lambda s: s.moe[part]))).astype(np.int64))
    acts = acts + np.where(has_emb == 1, (flight * of_shape(lambda s: s.embedding)).astype(np.int64), 0)
    acts = acts + (flight * of_shape(lambda s: s.rotary)).astype(np.int64)
    acts = acts + (flight * of_shape(lambda s: s.mask)).astype(np.int64)
    logits = np.where(has_head == 1, of_shape(lambda s: s.logits), 0)
    loss_ws = np.where(has_head == 1, of_shape(lambda s: s.loss_ws), 0)
    rws = np.maximum(np.where(n_dense > 0, of_shape(lambda s: s.rws_dense), 0),
                     np.where(n_moe > 0, of_shape(lambda s: s.rws_moe), 0))
    backward = np.where((rws > 0) & (rws - logits > loss_ws), rws - logits, loss_ws)
    fwd_bwd = acts + logits + backward + at_peak
    peak = states + np.maximum(fwd_bwd, step)

    # ---- overheads (stages.terms._overheads) ----
    if o.fragmentation_pct is not None:
        frag = (peak * o.fragmentation_pct / 100).astype(np.int64)
    else:
        a, b = o.fragmentation_states_pct / 100, o.fragmentation_working_pct / 100
        reserved = np.maximum(states + fwd_bwd + a * states + b * (states + fwd_bwd - states),
                              states + step + a * states + b * (states + step - states))
        frag = np.maximum(0, reserved.astype(np.int64) - peak)
    groups = (tp > 1).astype(np.int64) + (ppr > 1) + (dp * cp > 1) + (cp > 1) + (ep > 1)
    comm = groups * o.nccl_bytes_per_group if o.include_comm_buffers else 0
    ctx = o.cuda_context_bytes if o.cuda_context_bytes is not None else (
        gpu.cuda_context_bytes if gpu is not None else DEFAULT_CUDA_CONTEXT_BYTES)
    row_total = peak + frag + comm + ctx
    total = np.full(len(lay), np.iinfo(np.int64).min)
    top = np.full(len(lay), np.iinfo(np.int64).min)
    np.maximum.at(total, owner, row_total)
    np.maximum.at(top, owner, peak)
    return total, top
