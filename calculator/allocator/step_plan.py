"""The plan of a training step's tensors, built from the engine's own terms, and the caching-allocator replay over it
(calculator/allocator/reference.py): reserved − allocated depends on which freed block each new tensor lands in, not only on
the peak sum. The order in which the step allocates and frees them is calculator/allocator/step_order.py.

A layer's saved tensors are its parts (norms, attention, MLP) cut into tensors of the layer's own widths (e·T·h,
e·T·f, eager scores a·b·s·s_kv), the part's remainder as one more tensor.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import chain

from calculator.memory import activations as act
from calculator.memory import lora
from calculator.memory import fp8 as fp8_rules
from calculator import stacks
from calculator.allocator.reference import Replay, reference_replay
from calculator.allocator.fast import CachingAllocator
from calculator.core.dtypes import DTYPE_BITS
from calculator.allocator.native import allocator_type
from calculator.model.parameters import kind_shapes, layer_kinds, norm_shapes
from calculator.allocator.step_order import run_step, scaled_sizes, training_events
from calculator.allocator.tensors import ModelTensors, StepPlan


MAX_REPLAY_LAYERS = 256  # deeper models keep the calibrated shares: the replay grows with the layers (~100 events each)


def split(total: int, unit: int) -> tuple[int, ...]:
    """A part's bytes as tensors of `unit` bytes plus the remainder (as one tensor)."""
    if total <= 0:
        return ()
    if unit <= 0 or unit >= total:
        return (total,)
    n, rest = divmod(total, unit)
    return (unit,) * n + ((rest,) if rest else ())


@lru_cache(maxsize=256)
def replayed(plan: StepPlan, expandable: bool):
    """The caching allocator over the plan's build and two steps, driven tensor by tensor (no event list): the C
    replay where it is built (calculator/native), else calculator/allocator/fast.py; the same rules, the same
    results."""
    native = allocator_type()
    a = native(expandable) if native is not None else CachingAllocator(expandable)
    try:
        run_step(plan, a)
    except OverflowError:  # addresses past 2^64 B (no real job): the block-by-block replay
        return reference_replay(training_events(plan), expandable)
    if native is not None:
        peak, reserved, _ = a.totals()
        return Replay(peak, reserved)
    return a.peaks()


# ---- the plan of one GPU's step, from the engine's terms ----------------------------------------------------

def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


def _bytes_per(dtype: str | None) -> float:
    return DTYPE_BITS[dtype] / 8 if dtype else 0.0


def _state_per_grad(w, grad_dtype: str) -> tuple[float, ...]:
    """Optimizer state tensors created per trainable tensor, as bytes per gradient byte."""
    return _states_per_grad_byte(w.optimizer, w.precision.optimizer_states, grad_dtype)


@lru_cache(maxsize=64)
def _states_per_grad_byte(optimizer: str, states_dtype: str | None, grad_dtype: str) -> tuple[float, ...]:
    g = _bytes_per(grad_dtype)
    b = _bytes_per(states_dtype) / g if g else 0.0
    return {"adamw": (b, b), "adamw-8bit": (1 / g, 1 / g), "sgd-momentum": (b,), "lion": (b,),
            "adafactor": (b / 64,)}.get(optimizer, ())


@lru_cache(maxsize=64)
def _layer_tensors(m, tp: int, kind) -> tuple[int, ...]:
    """Elements of each parameter tensor of one kind of decoder layer on one TP rank."""
    return tuple(_numel(s) // (tp if len(s) > 1 else 1) for _, g in kind_shapes(m, kind) for s in g)


@lru_cache(maxsize=256)
def model_tensors(m, shard, finetune: str, lora_rank: int, lora_targets: str, params: str, master: str | None,
                  grad_dtype: str, tp: int, shard_d: int, grad_shard: int, gather_dtype: str | None) -> ModelTensors:
    """The ModelTensors of one GPU's shard (`gather_dtype`: FSDP2's gathered unit dtype, None without FSDP2)."""
    b_param = _bytes_per(params)
    b_grad = _bytes_per(grad_dtype)
    full = finetune == "full"
    layers = range(shard.first_layer, shard.last_layer)
    kinds = {kind: list(_layer_tensors(m, tp, kind)) for kind, _ in layer_kinds(m)}
    layer_moe = [m.layer_kind(i) for i in layers]  # each layer's kind (dense / MoE feed-forward, ...)
    layer_tensors = [kinds[kind] for kind in layer_moe]
    vocab_w = m.vocab_size * m.hidden_size // tp
    emb = [vocab_w] if shard.has_embedding else []
    head_w = ([vocab_w] if shard.has_head and not m.tie_word_embeddings else []) + \
        ([_numel(s) for s in norm_shapes(m.hidden_size, m.norm_type)] if shard.has_head else [])
    if finetune == "qlora":  # 4-bit linears: packed bytes + fp32 absmax per 64, frozen norms/embeddings in bf16
        weights = [int(n * b_param) for n in emb]
        for lt in layer_tensors:
            weights += [n // 2 if n >= 1 << 16 else int(n * b_param) for n in lt]
            weights += [n // 16 for n in lt if n >= 1 << 16]
        weights += [int(n * b_param) for n in head_w]
        periods = tuple(len(v) + sum(n >= 1 << 16 for n in v) for v in kinds.values() if v)
    else:  # each kind of layer's tensors converted once, then repeated layer by layer
        per_kind = {k: [int(n * b_param) // shard_d for n in v] for k, v in kinds.items()}
        weights = [int(n * b_param) // shard_d for n in emb]
        weights += chain.from_iterable(per_kind[moe] for moe in layer_moe)
        weights += [int(n * b_param) // shard_d for n in head_w]
        periods = tuple(len(v) for v in kinds.values() if v)
    if full:
        per_kind = {k: tuple(int(n * b_grad) // grad_shard for n in v) for k, v in kinds.items()}
        layer_grads = tuple(per_kind[moe] for moe in layer_moe)
        head_grads = tuple(int(n * b_grad) // grad_shard for n in (
            head_w if not m.tie_word_embeddings else [vocab_w] + head_w[-1:])
            if shard.has_head)
        emb_grads = tuple(int(n * b_grad) // grad_shard for n in emb) if not (
            m.tie_word_embeddings and shard.has_head) else ()
    else:
        adapters = []
        for i in layers:
            adapters.append(tuple(int(n * b_grad) for n in lora.layer_adapter_tensors(m, lora_rank, lora_targets, i)))
        layer_grads, head_grads, emb_grads = tuple(adapters), (), ()
        weights += [n for lg in adapters for n in lg]
    masters = ()
    if master and full:
        ratio = _bytes_per(master) / b_param
        masters = tuple(scaled_sizes(weights, (ratio,)))  # int(n * ratio) for each, at C speed
    gather = int(max(sum(kinds[moe]) for moe in set(layer_moe)) * _bytes_per(gather_dtype)) if (
        gather_dtype and layer_tensors) else 0
    transient: tuple[int, ...] = ()
    if finetune == "qlora":
        transient = tuple(2 * n for n in layer_tensors[0] if n >= 1 << 16) if layer_tensors else ()
    return ModelTensors(
        weights=tuple(weights), masters=masters, layer_grads=layer_grads, head_grads=head_grads,
        embedding_grads=emb_grads,
        model_order=(emb_grads + head_grads[:1] if m.tie_word_embeddings else emb_grads) +
        tuple(chain.from_iterable(layer_grads)) + (head_grads[1:] if m.tie_word_embeddings else head_grads[::-1]),
        layer_transient=transient, layer_gather=gather,
        tied_sum=head_grads[0] if full and m.tie_word_embeddings and shard.has_head and shard.has_embedding else 0,
        periods=periods)


def training_plan(m, w, ws, shard, d, parts, head, sm, grad_dtype: str) -> StepPlan:
    """The StepPlan of one GPU: `w` as given, `ws` as the stack holds the states, `parts` the engine's
    LayerActivations of one layer (full recompute: what one layer saves when it is recomputed), `head` the
    implementation's Head (None without one), `sm` the stack's StackMemory."""
    p = ws.parallel
    tp = p.tp
    e, T = d.e, d.T
    b_grad = _bytes_per(grad_dtype)
    fsdp2 = stack_name(w) == "fsdp2"
    t = model_tensors(m, shard, w.finetune, w.lora_rank, w.lora_targets, ws.precision.params,
                      ws.precision.master_weights, grad_dtype, tp, p.shard_group if p.zero >= 3 else 1,
                      p.shard_group if p.zero >= 2 else 1, w.precision.params if fsdp2 else None)
    persistent = []
    for x in sm.persistent:
        persistent += split(x.bytes, 25 << 20)
    for x in sm.at_peak:  # FSDP2's root unit: gathered through the step
        persistent.append(x.bytes)
    gather = t.layer_gather
    h = d.h_sp
    hidden = e * T * h
    scores = d.a * d.b * d.s * d.s_kv if (w.attention == "eager" and w.recompute != "selective") else 0
    attn = parts.attention
    attn_tensors: tuple[int, ...] = ()
    if scores and attn > (4 + e) * scores:
        attn_tensors = (4 * scores, e * scores)
        attn -= (4 + e) * scores
    saved = split(parts.norms, hidden) + attn_tensors + split(attn, hidden) + split(parts.mlp, e * T * d.f)
    work = (e * T * d.f, e * T * d.f, hidden) + ((4 * scores, e * scores) if scores else ())
    if gather:  # FSDP2 foreach_reduce: the unit's bf16 gradients and their reduce_dtype copy
        work += (gather, int(gather * b_grad / _bytes_per(w.precision.params)))
    logits = (0, 0)
    head_saved: tuple[int, ...] = ()
    head_transient = 0
    if head is not None:
        v = m.vocab_size // tp
        cap = e * T * v if m.final_logit_softcapping else 0
        hf_loss = any(x.key == "loss" and x.bytes == 4 * T * v + cap for x in head.saved)
        head_saved = tuple(x.bytes for x in head.saved if not (hf_loss and x.key == "loss"))
        if hf_loss:
            logits = (e * T * v, 4 * T * v)
        else:
            head_transient = head.transient
    foreach = 0.0
    if w.optimizer_impl == "foreach" and w.optimizer in ("adamw", "adamw-8bit"):
        foreach = _bytes_per(ws.precision.optimizer_states) / b_grad if b_grad else 0.0
    full = w.finetune == "full"
    step_groups: tuple[tuple[int, int, int], ...] = ()
    if sm.step_chunk and full:
        n_part = -(-shard.total // p.shard_group)
        b_master = _bytes_per(ws.precision.master_weights or "fp32")
        b_state = _bytes_per(ws.precision.optimizer_states)
        step_groups = tuple((int(n * b_grad), int(n * b_master), int(n * b_state) if foreach else 0)
                            for n in split(n_part, sm.step_chunk))
    return StepPlan(
        tensors=t, persistent=tuple(persistent), n_layers=shard.last_layer - shard.first_layer, layer_saved=saved,
        layer_grad_work=work,
        recompute_input=(e * T * h if w.recompute == "full" else
                         act.op_selective_layer(m, d, float8=fp8_rules.float8_gemms(w)) if w.recompute == "op" else 0), head_saved=head_saved,
        logits=logits, head_transient=head_transient, hidden_grad=hidden,
        state_per_grad=_state_per_grad(ws, grad_dtype),
        foreach_temp=foreach, grads_persist=sm.grads_whole_step,
        softcap=bool(m.final_logit_softcapping) and logits[0] > 0, step_groups=step_groups,
        init_transient=sm.init_transient if full else 0)


def stack_name(w) -> str:
    return stacks.resolve(w)
