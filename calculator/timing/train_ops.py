"""The operations of one training micro-batch on one GPU, grouped so that a pipeline stage's time is a sum:

    stage = Σ over layer groups (layers alike: MoE or dense, sliding window, mixer, feed-forward) n × one layer
            + the embedding and loss head it holds + what depends on its whole shard (QLoRA dequantize, autocast)

Every figure of a stage (GPU seconds, host seconds, forward seconds, attention and GEMM seconds, compute- and
memory-bound seconds, model and hardware FLOPs) is that sum of `stats` vectors, for estimate_time() on one layout
and for the planner's vectorised time model (calculator.planning.fast_time) on a grid alike.
"""
from __future__ import annotations

import numpy as np

from calculator.timing import roofline as R
from calculator.core.dtypes import DTYPE_BITS
from calculator.memory import fp8 as fp8_rules
from calculator.model import architectures
from calculator.model.spec import LayerKind, ModelSpec
from calculator.impls import megatron_recompute as rc
from calculator.memory.megatron_core import applies
from calculator.timing.ops import (attention_core, backward_of, expert_rows, head_backward, head_forward,
                                   layer_forward, lora_backward, lora_forward, norm_kind, recomputed, routed_pairs)
from calculator.timing.fused import FUSED_IMPLS, fuse, routed_activation_bytes
from calculator.timing.roofline import Op, Rates
from calculator.timing import moe_sync as S

STATS = ("gpu", "host", "fwd", "attn", "gemm", "compute", "model_flops", "hw_flops", "seg", "seg_gpu", "seg_host")
GPU, HOST, FWD, ATTN, GEMM, COMPUTE, MODEL_FLOPS, HW_FLOPS, SEG, SEG_GPU, SEG_HOST = range(len(STATS))
# SEG, SEG_GPU, SEG_HOST: Σ max(GPU, host) of the stretches between Megatron-Core's MoE host waits, and their GPU
# and host seconds (calculator.timing.moe_sync)

def _bytes(dtype: str | None) -> float:
    return DTYPE_BITS[dtype] / 8 if dtype else 0.0


def layer_groups(m: ModelSpec, first: int, last: int) -> dict[tuple, int]:
    """Layers of a stage grouped by (MoE, sliding window, mixer kind, feed-forward kind): layers in a group run
    the same operations."""
    groups: dict[tuple, int] = {}
    for i in range(first, last):
        key = layer_key(m, i)
        groups[key] = groups.get(key, 0) + 1
    return groups


def layer_key(m: ModelSpec, i: int) -> tuple:
    kind = m.layer_kind(i)
    return (m.layer_is_moe(i), m.sliding_window if m.layer_is_sliding(i) else None, kind.mixer, kind.ffn,
            kind.slot if m.ffn_widths is not None else -1)  # a dense width of its own (ModelSpec.ffn_of)


def layer_parts(m: ModelSpec, w, d, key: tuple) -> tuple[list[Op], dict[str, list[Op]]]:
    """One layer of a group: (its forward and backward, what each recompute mode replays): with a frozen base the
    LoRA adapters' operations too. The forward does not depend on the recompute mode, so one layer's parts serve
    every mode (the planner's vectorised time model prices them once)."""
    moe, window, mixer, ffn, slot = key
    m = m.ffn_of(LayerKind(mixer, ffn, slot))
    p = w.parallel
    frozen = w.finetune != "full"
    eager = w.attention == "eager"
    fwd = layer_forward(m, d, moe=moe, window=window, eager=eager, e_w=d.e, expert_tp=p.expert_tp, ep=p.ep,
                        mixer=mixer, ffn=ffn)
    if w.impl in FUSED_IMPLS:
        fwd = fuse(fwd, m, d, p.expert_tp)
    bwd = [backward_of(o, frozen and o.kind == "matmul") for o in fwd]
    if frozen:
        adapters = lora_forward(m, d, w.lora_rank, w.lora_targets, moe)
        fwd += adapters
        bwd += [lora_backward(adapters[0], m, d, w.lora_rank, w.lora_targets, moe)]
    replay = recomputed(fwd)
    extra = {"none": [], "full": replay,
             # op: every other matmul and the SDPA kernel are saved, the rest is replayed
             "op": [o.scaled(0.5 if o.kind == "matmul" else 0.0 if o.kind == "attention" else 1.0) for o in replay],
             # op with float8 linears: their GEMMs are aten._scaled_mm, which the save list lacks (op_mode)
             "op_fp8": [o.scaled(0.0 if o.kind == "attention" else 1.0) for o in replay],
             "selective": selective_replay(m, w, d, fwd, mixer, window, eager)}
    return fwd + bwd, extra


def selective_replay(m: ModelSpec, w, d, fwd: list[Op], mixer: str, window, eager: bool) -> list[Op]:
    """What selective recompute replays in backward: the attention core; under Megatron-Core's --recompute-modules
    (calculator.impls.megatron_recompute) the listed modules' forward operations — the dense MLP (mlp), the whole
    MoE layer (moe), the shared expert (shared_experts), the routed experts' activation (moe_act)."""
    mods = rc.listed(w) if applies(w) else rc.DEFAULT  # whatever w.recompute: the planner prices every mode
    out = [attention_core(m, d, window, eager).scaled(1, phase="recompute")] \
        if "core_attn" in mods and architectures.with_attention(mixer) else []
    for o in fwd:
        shared = o.name.startswith("Shared expert")
        if ("mlp" in mods and o.name.startswith("MLP ")) or ("shared_experts" in mods and shared) \
                or ("moe" in mods and (shared or o.name in MOE_OPS)):
            out.append(o.scaled(1, phase="recompute"))
        elif "moe_act" in mods and "moe" not in mods and o.name == "Expert dispatch, gate and combine":
            _, real = routed_pairs(m, expert_rows(d.T, d.tp, w.parallel.expert_tp))
            f_e = m.expert_intermediate_size // w.parallel.expert_tp
            act = routed_activation_bytes(m, d.e, real, f_e)
            out.append(R.elementwise("Routed experts' activation", act, 1, "3e·T·k·f gated, 2e plain (fused)",
                                     "transformer-engine", bwd_host_ops=0).scaled(1, phase="recompute"))
    return out


MOE_OPS = frozenset({"Router", "Routed experts (grouped GEMM)", "Expert dispatch, gate and combine"})


FP8_RECIPES = fp8_rules.GEMM_RECIPES  # Workload.fp8 values that run the GEMMs in FP8


def gemm_dtype(w, inputs) -> str:
    """The GEMMs' dtype: TimingInputs.matmul_dtype, else FP8 under a Transformer Engine FP8 recipe
    (Workload.fp8), else the activations' dtype."""
    if inputs is not None and inputs.matmul_dtype != "auto":
        return inputs.matmul_dtype
    return "fp8" if fp8_rules.float8_gemms(w) else w.precision.activations


def op_mode(w, inputs) -> str:
    """The key of layer_parts' replay for w.recompute. torchtitan's selective op AC saves the outputs of the ops
    in its save list — aten.mm (every other one), the SDPA kernels, aten.max, reduce_scatter — and recomputes the
    rest (torchtitan/models/llama3/parallelize_llama.py _save_list at e7c0cae; torchtitan/distributed/
    activation_checkpoint.py _get_default_save_ops later). With float8 linears (torchao Float8Linear) a linear's
    GEMM is aten._scaled_mm, in neither list, so every GEMM of the block is replayed ("op_fp8")."""
    if w.recompute == "op" and gemm_dtype(w, inputs) == "fp8":
        return "op_fp8"
    return w.recompute


def layer_ops(m: ModelSpec, w, d, key: tuple, inputs=None) -> list[Op]:
    """One layer of a group: forward, backward and what w.recompute replays (op_mode)."""
    base, extra = layer_parts(m, w, d, key)
    return base + extra[op_mode(w, inputs)]


def layer_stats(m: ModelSpec, w, d, key: tuple, r: Rates, fp32: float, inputs, parts=None) -> np.ndarray:
    """The STATS of one layer of a group under w.recompute: its forward and backward plus what recompute replays;
    a Megatron-Core MoE layer adds its host work beyond its operators and its segments between host waits
    (moe_columns). `parts`: layer_parts, when the caller has them."""
    base, extra = parts or layer_parts(m, w, d, key)
    out = stats(base, r, fp32, inputs, d) + stats(extra[op_mode(w, inputs)], r, fp32, inputs, d)
    if key[0]:
        out += moe_columns(m, w, d, base, extra[op_mode(w, inputs)], r, fp32, inputs)
    return out


def moe_columns(m: ModelSpec, w, d, base: list[Op], replay: list[Op], r: Rates, fp32: float, inputs) -> np.ndarray:
    """What a MoE layer adds to its operations' STATS under Megatron-Core (moe_sync): to HOST the per-expert GEMM
    launches (moe_sync.expert_launch_host_s) and, in the forward (its wait's segment), the fitted host work of
    the layer (moe_sync.moe_layer_host_s); to SEG, SEG_GPU, SEG_HOST the segments of its forward — and of its backward
    with the replay when the recompute replays the dispatcher (moe_sync.segment_columns)."""
    out = np.zeros(len(STATS))
    launch_f, launch_b = S.expert_launch_host_s(w, inputs, S.local_experts(m, w))
    launch_f += S.moe_layer_host_s(w, inputs, base)  # the layer's host work beyond its operators: forward
    out[HOST] = launch_f + launch_b
    if S.syncs(w, inputs):
        fwd = [o for o in base if o.phase == "forward"]
        f, b = stats_many([fwd, [o for o in base if o.phase != "forward"] + replay], r, fp32, inputs, d)
        out[SEG:] = S.segment_columns((f[GPU], f[HOST] + launch_f), (b[GPU], b[HOST] + launch_b),
                                      S.replays_wait(replay), inputs.ep_comm_overlap)
    return out


def head_ops(m: ModelSpec, w, d, embedding: bool, head: bool) -> list[Op]:
    """The embedding (first stage) and the final norm, LM head and loss (last stage), forward and backward."""
    frozen = w.finetune != "full"
    vocab = m.vocab_size // w.parallel.tp

    def held(o: Op) -> bool:
        return embedding if o.name == "Embedding" else head
    fwd = head_forward(m, d, d.e, vocab, d.T, with_loss=True)
    bwd = head_backward(m, d, d.e, vocab, frozen, _bytes(w.precision.grads))
    if w.impl in FUSED_IMPLS:  # the final norm as one kernel
        fwd = fuse(fwd, m, d, w.parallel.expert_tp)
        norm = next(o for o in fwd if o.name == "Final norm")
        bwd = [backward_of(norm) if o.name == "Final norm" else o for o in bwd]
    return [o for o in fwd if held(o)] + [o for o in bwd if held(o)]


def linears_per_stage(m: ModelSpec, layers: int) -> int:
    per_layer = (2 if m.fused_qkv else 4) + (2 if m.fused_gate_up or not m.gated_mlp else 3)
    return per_layer * layers


def shard_ops(m: ModelSpec, w, d, shard) -> list[Op]:
    """What depends on the stage's whole shard: QLoRA's NF4 dequantize, autocast's weight casts."""
    frozen = w.finetune != "full"
    n_linear = shard.layer_linear
    layers = shard.last_layer - shard.first_layer
    ops: list[Op] = []
    if frozen and w.finetune == "qlora":
        per_pass = 2.5 * n_linear  # bitsandbytes dequantize_4bit: read 0.5 B (+ absmax), write 2 B per weight
        ops.append(Op("NF4 dequantize", "forward", "elementwise", 0.0, per_pass, 2 * linears_per_stage(m, layers),
                      "2.5 B per base weight per pass", "quantization"))
        ops.append(ops[-1]._replace(phase="backward"))
    if _bytes(w.precision.params) > d.e and not frozen:  # autocast: fp32 weights cast to the compute dtype
        cast = (_bytes(w.precision.params) + d.e) * n_linear
        passes = 2 if w.recompute == "full" else 1
        ops.append(Op("Weight casts (autocast)", "forward", "elementwise", 0.0, passes * cast,
                      passes * linears_per_stage(m, layers), "(4 + e) B per weight per forward", "mixed-precision"))
        ops.append(ops[-1]._replace(phase="backward", bytes=cast, host_ops=linears_per_stage(m, layers)))
    return ops


def causal_share(op: Op, s: int, s_kv: int) -> float:
    """FLOPs of an operation a model needs: eager attention computes the whole square, causal needs half."""
    return op.flops * (R.causal_pairs(s) / (s * s_kv)) if op.name == "Attention core (eager)" else op.flops


def stats(ops: list[Op], r: Rates, fp32: float, inputs, d) -> np.ndarray:
    """The STATS vector of a list of operations (see the module docstring)."""
    return stats_many([ops], r, fp32, inputs, d)[0]


def stats_many(lists: list[list[Op]], r: Rates, fp32: float, inputs, d) -> np.ndarray:
    """len(lists) × STATS: each list's operations priced in one pass over all of them — each operation's GPU time
    by the roofline (calculator.timing.rows.op_seconds on arrays), its host time by its phase's cost per operator."""
    out = np.zeros((len(lists), len(STATS)))
    ops = [o for group in lists for o in group]
    if not ops:
        return out
    seg = np.repeat(np.arange(len(lists)), [len(group) for group in lists])
    flops = np.array([o.flops for o in ops])
    nbytes = np.array([o.bytes for o in ops])
    host = np.array([o.host_ops for o in ops], dtype=np.float64)
    kind = [o.kind for o in ops]
    attention = np.array([k == "attention" for k in kind])
    fp32_mm = np.array([k == "matmul_fp32" for k in kind])
    matmul = fp32_mm | np.array([k == "matmul" for k in kind])
    phase = [o.phase for o in ops]
    forward = np.array([ph == "forward" for ph in phase])
    peak = np.where(attention, r.attention_peak or r.peak_flops, np.where(fp32_mm, fp32, r.peak_flops))
    eff = np.where(attention, r.attention_eff, r.matmul_eff)
    exps = np.array([o.exps for o in ops]) if r.exp_rate > 0 else np.zeros(len(ops))
    softmax = np.where(attention, exps / (r.exp_rate or 1.0), 0.0)  # the SFU's exponentials (roofline.softmax_seconds)
    times = host * r.kernel_gap_s + np.maximum(flops / (peak * eff) + softmax, nbytes / (r.bandwidth * r.memory_eff))
    compute = np.where(nbytes > 0, flops >= r.ridge * nbytes, flops > 0)  # roofline.bound: intensity ≥ ridge
    host_us = np.array([getattr(inputs, _HOST_US.get(ph, "host_op_us")) for ph in phase]) * graph_host_share(inputs)
    model = np.array([causal_share(o, d.s, d.s_kv) if ph in ("forward", "backward") else 0.0
                      for o, ph in zip(ops, phase)])
    n = len(lists)
    for col, values in ((GPU, times), (HOST, host * host_us * 1e-6), (FWD, times * forward),
                        (ATTN, times * attention), (GEMM, times * matmul), (COMPUTE, times * compute),
                        (MODEL_FLOPS, model), (HW_FLOPS, flops)):
        out[:, col] = np.bincount(seg, weights=values, minlength=n)
    return out


_HOST_US = {"backward": "host_backward_op_us", "prefill": "host_inference_op_us", "decode": "host_inference_op_us"}


def graph_host_share(inputs) -> float:
    """Share of the per-operator host time a step still pays: none when the whole forward-backward is one CUDA
    graph (Megatron-Core's --cuda-graph-impl full_iteration: the iteration is captured once and replayed with one
    launch, megatron/core/full_cuda_graph.py; MoE dispatch made sync-free by a fixed expert capacity,
    --moe-expert-rank-capacity-factor), else all of it."""
    return 0.0 if inputs.full_iteration_cuda_graph else 1.0


def optimizer_bytes_per_param(w) -> float | None:
    """Bytes one optimizer step moves per parameter (None: no optimizer)."""
    prec, impl = w.precision, w.optimizer_impl
    b_p, b_g, b_s = _bytes(prec.params), _bytes(prec.grads), _bytes(prec.optimizer_states)
    b_m = _bytes(prec.master_weights)
    if w.finetune != "full":  # PEFT's fp32 adapters are their own master copy
        b_p = b_g = b_s = 4.0
        b_m = 0.0
    o = w.optimizer
    if o == "adamw":
        return R.adamw_bytes_per_param(b_p, b_g, b_s, b_m, impl)
    if o == "adamw-8bit":
        return 2 * (b_m or b_p) + b_g + 4 + (b_p if b_m else 0)
    if o in ("sgd-momentum", "lion"):
        return 2 * (b_m or b_p) + b_g + 2 * b_s + (b_p if b_m else 0)
    if o == "adafactor":
        return 2 * (b_m or b_p) + 4 * b_g + (b_p if b_m else 0)
    if o == "sgd":
        return 2 * (b_m or b_p) + b_g
    return None


def optimizer_host_ops(w, n_params, n_tensors):
    """Kernel launches of the step: fused one multi-tensor kernel (+2), foreach 12 operators per launch, the
    for-loop 12 per tensor, bitsandbytes' 8-bit AdamW 2 per tensor (works on numbers or numpy arrays)."""
    by_chunks = np.ceil(np.asarray(n_params, dtype=np.float64) / (65536 * 320))
    launches = np.maximum(1, np.maximum(by_chunks, np.ceil(np.asarray(n_tensors, dtype=np.float64) / 36)))
    if w.optimizer == "adamw-8bit":
        return 2 * np.asarray(n_tensors)
    if w.optimizer_impl == "fused":
        return 2 + launches
    if w.optimizer_impl == "foreach":
        return 12 * launches
    return 12 * np.asarray(n_tensors)


def optimizer_op(w, n_params: int, n_tensors: int) -> Op:
    """One optimizer step over the parameters this GPU updates (a roofline row)."""
    per = optimizer_bytes_per_param(w)
    if per is None:
        return Op("Optimizer step", "optimizer", "elementwise", 0.0, 0.0, 0, "no optimizer", "torch-adamw")
    host = int(optimizer_host_ops(w, n_params, n_tensors))
    return Op("Optimizer step", "optimizer", "elementwise", 12.0 * n_params, per * n_params, host,
              f"{per:g} B per parameter ({w.optimizer}, {w.optimizer_impl})", "torch-adamw")


def optimizer_seconds(w, n_params, n_tensors, r: Rates, host_op_s: float):
    """max(GPU time, host time) of the step (roofline.gpu_seconds of optimizer_op, on numbers or arrays)."""
    per = optimizer_bytes_per_param(w)
    if per is None:
        return np.zeros_like(np.asarray(n_params, dtype=np.float64))
    n = np.asarray(n_params, dtype=np.float64)
    host = optimizer_host_ops(w, n_params, n_tensors)
    gpu = host * r.kernel_gap_s + np.maximum(12.0 * n / (r.peak_flops * r.matmul_eff),
                                             per * n / (r.bandwidth * r.memory_eff))
    return np.maximum(gpu, host * host_op_s)


def mtp_ops(m: ModelSpec, w, d, inputs=None) -> list[Op]:
    """Megatron-Core's multi-token prediction block on the last stage (Workload.mtp_layers under Megatron-Core:
    megatron/core/transformer/multi_token_prediction.py MultiTokenPredictionLayer.forward): per MTP layer the
    enorm and hnorm of the shifted embedding and the hidden state, eh_proj (a column-parallel linear 2h → h on their
    concatenation), one transformer layer of the decoder's last kind (DeepSeek-V3: a MoE layer), then the shared
    final norm, output layer and loss again (GPTModel._postprocess, one loss per MTP depth). The shifted tokens'
    embedding lookup is left out (a gather of T·h)."""
    from calculator.memory import megatron_core
    if not (w.mtp_layers and megatron_core.applies(w)):
        return []
    T_, e = d.T, d.e
    norms = R.norms("MTP enorm / hnorm", T_ * d.h_sp, e, norm_kind(m), 2)
    proj = R.linear("MTP eh_proj", T_, 2 * d.h, d.h // d.tp, e, e)
    one = [o._replace(source="megatron-mtp") for o in (norms, proj, backward_of(norms), backward_of(proj))]
    layer = layer_ops(m, w, d, layer_key(m, m.num_hidden_layers - 1), inputs)
    return [o.scaled(w.mtp_layers) for o in one + layer + head_ops(m, w, d, False, True)]


def mtp_stats(m: ModelSpec, w, d, r: Rates, fp32: float, inputs) -> np.ndarray:
    """STATS of the MTP block (mtp_ops), with what its MoE layer adds under Megatron-Core (moe_columns)."""
    ops = mtp_ops(m, w, d, inputs)
    out = stats(ops, r, fp32, inputs, d) if ops else np.zeros(len(STATS))
    key = layer_key(m, m.num_hidden_layers - 1)
    if ops and key[0]:
        base, extra = layer_parts(m, w, d, key)
        out += w.mtp_layers * moe_columns(m, w, d, base, extra[op_mode(w, inputs)], r, fp32, inputs)
    return out


def mtp_layer_counts(m: ModelSpec, w) -> tuple[int, int]:
    """(layers, MoE layers) the MTP block adds to the last stage's communication (its transformer layer runs the
    TP and EP collectives of a decoder layer of the last kind: mtp_ops)."""
    from calculator.memory import megatron_core
    n = w.mtp_layers if megatron_core.applies(w) else 0
    return n, n * int(bool(layer_key(m, m.num_hidden_layers - 1)[0]))
