"""Activations saved for the backward pass, per decoder layer and for the embedding / loss head.

Three models: "exact" (default), the tensors a `transformers` block really saves, term by term, measured by tracing
real model code (validation/): fp32 norm upcasts, unexpanded GQA q/k/v under FlashAttention, eager s² scores in fp32
and model dtype, SwiGLU's four f-wide tensors, MoE's top-k copies, fused projections kept whole; "textbook",
Korthikanti et al. 2022, s·b·h·(34 + 5·a·s/h) per layer; "fujii", Fujii et al. 2024, s·b·h·(12 + 4k/a + 8f/h).
Symbols: T tokens on this GPU (b·s/cp), e bytes per activation element, h hidden, qd/kvd query/key width on this
TP rank, f MLP width on this rank, a heads on this rank, V vocabulary.
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from calculator.memory import autocast, sdpa
from calculator.model import architectures, latent_moe, variants
from calculator.model.architectures import ffn_widths
from calculator.core.dtypes import nbytes
from calculator.memory.lora_layer import lora_layer_delta
from calculator.memory.textbook import fujii_layer, textbook_layer  # noqa: F401 - act.textbook_layer, act.fujii_layer
from calculator.model.spec import ModelSpec
from calculator.memory.parallel import kv_heads_per_rank
from calculator.core.workload import Workload

class Dims(NamedTuple):
    """The shapes one GPU sees for one micro-batch."""

    b: int
    s: int  # local sequence (s / cp)
    s_kv: int  # keys each query attends over in the score matrix (full s under CP)
    T: int  # local tokens b·s/cp
    e: int  # bytes per activation element
    h: int
    h_sp: int  # h-wide tensors per rank: h / tp with sequence parallelism, else h
    qd: int
    kvd: int
    a: int
    kv: int
    f: int  # dense MLP width per rank
    tp: int


def dims(m: ModelSpec, w: Workload) -> Dims:
    """Local shapes for one micro-batch on one GPU (TP splits heads and f; SP splits h-wide; CP splits s)."""
    p = w.parallel
    s_local = w.seq_len // p.cp
    return _new_dims(Dims, (w.micro_batch, s_local, w.seq_len, w.micro_batch * s_local)
                     + _rank_widths(m, p, w.precision.activations))


_new_dims = tuple.__new__  # Dims(...) from a tuple, without the NamedTuple constructor's keyword binding


@lru_cache(maxsize=256)
def _rank_widths(m: ModelSpec, p, activations: str) -> tuple[int, ...]:
    """The Dims fields after T, which no batch or sequence changes: (e, h, h_sp, qd, kvd, a, kv, f, tp)."""
    kv = kv_heads_per_rank(m, p.tp)
    a = m.num_attention_heads // p.tp
    sp = p.sequence_parallel and p.tp > 1
    return (nbytes(1, activations), m.hidden_size, m.hidden_size // p.tp if sp else m.hidden_size, a * m.head_size,
            kv * m.head_size, a, kv, m.intermediate_size // p.tp, p.tp)


# ---- exact model: building blocks ---------------------------------------------------------------------------

def rmsnorm_saved(T: int, width: int, e: int) -> int:
    """HF RMSNorm (LlamaRMSNorm): fp32 upcast of x (4 B), the normalised x in model dtype (e B), fp32 rsqrt per
    row (measured-facts: 4·T·h + e·T·h + 4·T)."""
    return 4 * T * width + e * T * width + 4 * T


def gemma_rmsnorm_saved(T: int, width: int) -> int:
    """Gemma / GPT-OSS RMSNorm: fp32 input and normalised output, 8·T·h + 4·T (Gemma's 1 + w.float(): norm_saved)."""
    return 8 * T * width + 4 * T


def layernorm_saved(T: int, width: int, e: int) -> int:
    """nn.LayerNorm keeps its input and fp32 mean and rstd per row: e·T·h + 8·T."""
    return e * T * width + 8 * T


def zero_centered_rmsnorm_saved(T: int, width: int) -> int:
    """Qwen3-Next / Qwen3.5 RMSNorm ((1 + w) in fp32): fp32 input, rsqrt, normalised input and the fp32 (1 + w),
    8·T·h + 4·T + 4·h (traced on the CPU: tests/model/test_gated_deltanet.py)."""
    return 8 * T * width + 4 * T + 4 * width


def norm_saved(m: ModelSpec, T: int, width: int, e: int) -> int:
    """Saved copies of one norm (without its output): HF RMSNorm, the fp32 Gemma / GPT-OSS one, or LayerNorm."""
    if m.gemma_next is not None:  # hook: Gemma 3n / 4's norm keeps 8 B per row and its fp32 weight (gemma_next_saved)
        return architectures.gemma_next_saved.norm_saved(T, width) + 4 * width
    if m.variant is not None:  # hook (issue 21): a variant's norm kind (fp32-weight RMSNorm, fp32 LayerNorm)
        saved = variants.norm_saved(m.variant, T, width)
        if saved is not None:
            return saved
    if m.zero_centered_norm:
        return zero_centered_rmsnorm_saved(T, width)
    if m.family in ("gemma", "gpt_oss"):  # both multiply the weight in fp32; Gemma's 1 + w.float() is a new tensor
        return gemma_rmsnorm_saved(T, width) + (4 * width if m.family == "gemma" else 0)
    if m.norm_type == "layernorm":
        return layernorm_saved(T, width, e)
    return rmsnorm_saved(T, width, e)


def attention_scores_saved(d: Dims, m: ModelSpec, softmax_fp32: bool) -> int:
    """Eager attention score tensors: fp32 softmax (4 B) and its cast (e B) per score, 2 B more with logit
    soft-capping (Gemma-2's tanh output), plus a 1-byte dropout mask and dropout output when attention dropout
    is on (GPT-2, XGLM, BioGPT; the cast to the model dtype then is not kept: dropout keeps only its mask), plus
    XGLM's clamp of the masked scores (e B each and an fp32 scalar). Scores: a·b·s·s_kv."""
    scores = d.a * d.b * d.s * d.s_kv
    drop = variants.attention_dropout(m.variant, m.dropout)
    # softmax in fp32 is saved; its cast back to the model dtype is a second tensor unless the model is fp32
    per_score = (4 + (d.e if d.e != 4 and not drop else 0)) if softmax_fp32 else d.e
    if m.attn_logit_softcapping:
        per_score += d.e
    if drop:
        per_score += 1 + d.e
    v = m.variant  # score_clamp: XGLM; eager_softmax "max": the row max's int64 indices (MiMo-V2-Flash)
    clamp, row_max = v is not None and v.score_clamp, v is not None and v.eager_softmax == "max"
    return (per_score + (d.e if clamp else 0)) * scores + (4 if clamp else 0) + (8 * scores // d.s_kv if row_max else 0)


def sink_softmax_saved(d: Dims) -> int:
    """GPT-OSS eager attention: the softmax runs in the model dtype over [scores | sink] (e·a·b·s·(s + 1)), and
    the row max keeps int64 indices (8·a·b·s); no fp32 copy (traced: tests/golden)."""
    return d.e * d.a * d.b * d.s * (d.s_kv + 1) + 8 * d.a * d.b * d.s


def qkv_saved(d: Dims, m: ModelSpec, expanded: bool) -> int:
    """q, k and v as the attention core saves them. Separate projections: q + k + v (GQA unexpanded under flash,
    repeat_kv-expanded under eager). Fused qkv: under flash the rotary q and k and the whole fused output (v is a
    view; GPT-2: only it); under eager torch.matmul copies each 4-D view (a view only at b = 1: the fused output)."""
    e, T, rotary, gqa, k_width = d.e, d.T, m.family != "gpt2", d.kvd != d.qd, d.qd if expanded else d.kvd
    if not m.fused_qkv or (m.variant is not None and not m.variant.fused_qkv_views):
        return e * T * (d.qd + 2 * k_width)
    if expanded:  # new: rotary q, repeat_kv copies (GQA) or rotary k; views: the rest
        views = [w for w, view in ((d.qd, not rotary), (d.kvd, not (rotary or gqa)), (d.kvd, not gqa)) if view]
        new = e * T * ((d.qd if rotary else 0) + (d.qd if gqa else d.kvd if rotary else 0) + (d.qd if gqa else 0))
        return new + ((e * T * (d.qd + 2 * d.kvd) if d.b == 1 else e * T * sum(views)) if views else 0)
    return e * T * (d.qd + 2 * d.kvd) + (0 if m.family == "gpt2" else e * T * (d.qd + k_width))


def qk_norm_saved(d: Dims, m: ModelSpec, expanded: bool = False) -> int:
    """Qwen3 / Gemma-3 per-head q and k norms keep their own fp32 copies."""
    if not m.qk_norm:
        return 0
    if m.zero_centered_norm:  # rows of one head: fp32 copies of q and k per head, and (1 + w) of head_dim, twice
        return zero_centered_rmsnorm_saved(d.T * d.a, m.head_size) + zero_centered_rmsnorm_saved(d.T * d.kv,
                                                                                                  m.head_size)
    if m.variant is not None:  # hook (issue 21): norms over the whole projection, fp32-weight ones, on fused views
        return variants.qk_norm_saved(m.variant, d.T, d.qd, d.kvd, d.a, d.kv, d.e, not expanded or d.b == 1)
    if m.family == "gemma":  # Gemma3RMSNorm per head: fp32 copies, rsqrt, and (1 + w).float() of head_dim, twice
        return 8 * d.T * (d.qd + d.kvd) + 4 * d.T * (d.a + d.kv) + 8 * m.head_size
    return (4 + d.e) * d.T * (d.qd + d.kvd) + 4 * d.T * (d.a + d.kv)


def clamped_swiglu_saved(T: int, f: int, e: int) -> int:
    """GPT-OSS's clamped SwiGLU (hidden_act "swiglu_oai": transformers models/gpt_oss/modeling_gpt_oss.py
    GptOssExperts._apply_gate; MiniMax-M3's MiniMaxM3VLDenseMLP.forward and MiniMaxM3VLExperts._apply_gate, which
    chunk instead of interleaving): gate.clamp(max) and up.clamp keep their inputs, views of the gate_up output
    (2f); the clamped gate (kept by gate · sigmoid), the sigmoid's output, glu and up + 1 (kept by the product) and
    the product (down_proj's input), f each: 7·e·T·f."""
    return 7 * e * T * f


def mlp_saved(d: Dims, m: ModelSpec, f: int) -> int:
    """MLP: gated (SwiGLU/GeGLU) keeps gate, up, act and product: 4·e·T·f (clamped SwiGLU-OAI: 7·e·T·f); plain GELU
    keeps fc1 out and act out: 2·e·T·f; GPT-2's Python gelu_new keeps four f-wide intermediates plus its output."""
    if m.variant is not None:  # hook (issue 21): a variant's activation (Apertus' xIELU)
        saved = variants.mlp_saved(m.variant, d.T, f, d.e)
        if saved is not None:
            return saved
    if m.gated_mlp and m.hidden_act == "swiglu_oai":
        return clamped_swiglu_saved(d.T, f, d.e)
    if m.gated_mlp:
        return 4 * d.e * d.T * f
    if m.hidden_act == "gelu_new":
        return 5 * d.e * d.T * f
    if m.hidden_act == "relu":  # ReLU keeps its output (threshold_backward), the same tensor fc2 keeps (OPT)
        return d.e * d.T * f
    return 2 * d.e * d.T * f


def moe_saved(d: Dims, m: ModelSpec, etp: int, ep: int = 1) -> int:
    """Routed experts (HF grouped_mm): each token is copied to its top-k experts, S = T·k. Gathered input and
    expert output e·S·2h, gate_up/act/product e·S·4f, fp32 routing weights 4·S, int64 indices 24·S, fp32 router
    softmax 4·T·E, top-k values and indices 12·T·k, top-k sum 4·T, int32 offsets 4·E/ep (E/ep local experts)."""
    k, T, E = m.num_experts_per_tok, d.T, m.num_experts
    S = T * k
    f = m.expert_intermediate_size // etp
    if m.variant is not None:  # hook (issue 21): a variant's router bookkeeping, a norm after the block (A.X-K1)
        post = norm_saved(m, T, d.h_sp, d.e) if m.variant.moe_post_norm else 0
        return variants.moe_saved(m.variant, T, k, E, f, d.h, d.e, ep) + post + latent_moe.saved_change(m, S, d)
    clamped = m.hidden_act == "swiglu_oai" or m.family == "gpt_oss"
    glu = clamped_swiglu_saved(S, f, d.e) if clamped else 4 * d.e * S * f
    if m.family == "gpt_oss":  # the softmax is over the top-k only
        return glu + 2 * d.e * S * d.h + 44 * S + 4 * (E // ep)
    routed = glu + 2 * d.e * S * d.h + 28 * S + 4 * T * E + 12 * T * k + 4 * T + 4 * (E // ep)
    if m.family == "deepseek":  # the router computes in fp32: fp32 copies of its input and of its weight
        routed += 4 * T * d.h + 4 * E * d.h
    return routed + latent_moe.saved_change(m, S, d)  # a latent MoE's experts at its width


def shared_expert_saved(d: Dims, m: ModelSpec) -> int:
    """Always-on shared expert(s): a gated MLP of their total width."""
    if not (m.num_shared_experts or m.shared_expert_intermediate_size):
        return 0
    width = m.shared_expert_intermediate_size or m.num_shared_experts * m.expert_intermediate_size
    # Qwen2-MoE / Qwen3-Next's sigmoid(shared_expert_gate(x)) * shared_expert(x) (models/qwen2_moe
    # modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock): the multiply keeps the sigmoid's output and the shared output
    gate = d.e * d.T * (d.h + 1) if m.shared_expert_gate else 0
    return mlp_saved(d, m, width // d.tp) + gate


def mla_attention_saved(d: Dims, m: ModelSpec, attention: str) -> int:
    """DeepSeek MLA (transformers modeling_deepseek_v3, traced): the q_a / kv_a norms' copies and outputs, the whole
    kv_b_proj output (v is a view of it; under eager only at micro-batch 1), the concatenated q and k (nope + rope),
    the output, and the core: fp32 logsumexp under flash, fp32 softmax and its cast under eager (SDPA's flash
    kernel's output beside o_proj's copy: calculator.memory.sdpa.mla_output_copy)."""
    e, T, a = d.e, d.T, d.a
    ql, kvl = m.q_lora_rank or 0, m.kv_lora_rank or 0
    qk, vd = m.head_size, m.v_head_size
    low_rank = (rmsnorm_saved(T, ql, e) + e * T * ql if ql else 0) + rmsnorm_saved(T, kvl, e) + e * T * kvl
    kv_b_out = e * T * a * (m.qk_nope_head_dim + vd)
    if attention == "eager" and d.b > 1:
        # eager_attention_forward's torch.matmul(attn_weights, value_states) folds v, the transposed split view of
        # kv_b_proj's output, into (b·a, s, v) with .reshape (aten/src/ATen/native/LinearAlgebra.cpp _matmul_impl):
        # a view only when the micro-batch is 1, else a contiguous copy of v alone is what bmm keeps
        kv_b_out = e * T * a * vd
    q_k = e * T * a * qk * 2
    out = e * T * a * vd
    core = 4 * a * T if attention != "eager" else (4 + e) * a * d.b * d.s * d.s_kv
    return low_rank + kv_b_out + q_k + out + core


class LayerActivations(NamedTuple):
    """Bytes one decoder layer saves for one micro-batch, by part."""

    norms: int
    attention: int
    mlp: int

    @property
    def total(self) -> int:
        return self.norms + self.attention + self.mlp


def softmax_attention_saved(m: ModelSpec, w: Workload, d: Dims) -> int:
    """What one layer's softmax attention (MHA/GQA/MQA, MLA) saves beyond its input, exact model, no recompute."""
    e, T = d.e, d.T
    selective = w.recompute == "selective"
    eager = w.attention == "eager" and not selective
    if m.is_mla:
        attention = mla_attention_saved(d, m, w.attention)
        if selective:
            attention -= (4 * d.a * T if w.attention != "eager" else (4 + e) * d.a * d.b * d.s * d.s_kv)
        attention += sdpa.mla_output_copy(d, m, w)  # SDPA's flash output laid out like MLA's concatenated q
        if m.variant is not None:  # hook (issue 21): Ling 3.0's output gate, Mistral-4's query scale (mla_extra)
            attention += variants.mla_extra(m.variant, T, d.s, d.a, m.head_size, m.v_head_size, e)
    else:
        attention = qkv_saved(d, m, expanded=eager) + qk_norm_saved(d, m, eager) + e * T * d.qd  # + o_proj input
        attention -= sdpa.narrow_v(d, m, eager)  # MiMo-V2-Flash: v heads (and o_proj's input) narrower than q/k's
        if w.attention != "eager" and not selective:  # flash, or SDPA's flash / efficient kernel
            attention += 4 * d.a * T + sdpa.output_copy(d, m, w)  # FlashAttention-2 fp32 logsumexp per head, token
        elif eager and m.attention_sinks:  # hook (issue 21): Flint's fp32 sinks, Granite-SWA's logsumexp scale
            sinks = variants.eager_sink_saved(m.variant, d.a * d.b * d.s, d.s_kv, T, d.qd, e)
            attention += sink_softmax_saved(d) if sinks is None else sinks
        elif eager:
            attention += attention_scores_saved(d, m, variants.softmax_fp32(m.variant, m.family != "gpt2"))
        if m.attention_output_gate:  # sigmoid(gate) and the gated output (o_proj's input); the core's output kept
            attention += 2 * e * T * d.qd
        if m.variant is not None:  # hook (issue 21): a variant's output gate, fp32 RoPE, sub-norm, differential core
            attention += variants.attention_extra(m.variant, T, d.s, d.qd, d.a, e, m.head_size, d.kvd, attention,
                                                  eager)
    return attention


def exact_layer(m: ModelSpec, w: Workload, d: Dims, kind) -> LayerActivations:
    """Saved activations of one kind of decoder layer (a LayerKind), exact model, no recompute (or selective)."""
    if m.gemma_next is not None or m.compressed is not None:  # hook: Gemma 3n / 4 (gemma_next_saved.py, LoRA:
        return LayerActivations(*architectures.layer_saved(m, w, d, kind))  # gemma_next_lora), DeepSeek-V4's layers
    m, d = ffn_widths.layer_view(m, d, kind)  # a kind's own MLP width (Nemotron-NAS)
    e, T = d.e, d.T
    moe = kind.ffn == "moe"
    # Norms: each keeps its upcast copies; pre-norm outputs are the saved inputs of the next linear.
    n_norms = m.norms_per_layer
    norms = n_norms * norm_saved(m, T, d.h_sp, e)
    if m.parallel_residual:
        norms -= e * T * d.h_sp  # GPT-NeoX: both LayerNorms read the same residual, saved once
    norms += 2 * e * T * d.h_sp  # the two pre-norm outputs (inputs of q/k/v and of the MLP)
    if moe and m.variant is not None and not variants.moe_input_kept(
            m.variant, bool(m.num_shared_experts or m.shared_expert_intermediate_size)):
        norms -= e * T * d.h_sp  # hook (issue 21): only an fp32 copy of the MLP norm's output is read (fp32 router)
    if m.dropout > 0:  # residual dropout masks after attention and MLP (1 B on CUDA: GPT-2, OPT, XGLM, BioGPT)
        norms += 2 * T * d.h_sp

    if kind.mixer == "none" or kind.ffn == "none":  # a block of one mixer or one feed-forward: one norm, one output
        norms = norm_saved(m, T, d.h_sp, e) + e * T * d.h_sp
    selective = w.recompute == "selective"
    eager = w.attention == "eager" and not selective
    if kind.mixer in ("attention", "mla"):  # a layer type's own head layout (MiMo-V2-Flash): ModelSpec.attention_of
        view = m.attention_of(kind)
        attention = softmax_attention_saved(view, w, d if view is m else dims(view, w))
    elif kind.mixer == "none":
        attention = 0
    else:  # a kind of the registry (calculator/model/architectures/), beside the attention when it says so
        attention = architectures.mixer(kind.mixer).saved(m, d, w) + (
            softmax_attention_saved(m, w, d) if architectures.with_attention(kind.mixer) else 0)
    if moe:
        mlp = moe_saved(d, m, w.parallel.expert_tp, w.parallel.ep) + shared_expert_saved(d, m)
    elif kind.ffn == "dense":
        mlp = mlp_saved(d, m, d.f)
    else:
        mlp = 0
    if w.finetune == "full" and autocast.applies(w):  # fp32 residual stream, one bf16 input copy per linear
        norms += autocast.layer_extra(m, T, d.h_sp, e)
    if w.finetune != "full":
        dn, dm, adapters = lora_layer_delta(m, w.lora_targets, moe, T, e, w.lora_rank, d.h_sp, m.intermediate_size,
                                            d.tp, eager=eager, fp32_adapters=w.lora_adapter_dtype == "fp32",
                                            base_keeps_inputs=w.finetune == "qlora" and w.qlora_keeps_inputs,
                                            kind=kind, d=d, w=w)
        norms, mlp, attention = norms + dn, mlp + dm, attention + adapters
    return LayerActivations(norms, attention, mlp)


def matmul_output_widths(m: ModelSpec, d: Dims, moe: bool) -> list[int]:
    """Widths of the aten.mm outputs of one decoder layer in call order (q, k, v or fused qkv; o; gate, up or
    fused gate_up, down; MoE: the router, the routed experts run grouped matmuls, not aten.mm)."""
    attn = [d.qd + 2 * d.kvd] if m.fused_qkv else [d.qd, d.kvd, d.kvd]
    attn.append(d.h_sp)
    if moe:
        return attn + [m.num_experts]
    if m.gated_mlp:
        mlp = [2 * d.f] if m.fused_gate_up else [d.f, d.f]
    else:
        mlp = [d.f]
    return attn + mlp + [d.h_sp]


def op_selective_layer(m: ModelSpec, d: Dims, moe: bool = False, float8: bool = False) -> int:
    """torchtitan's op-level selective AC (llama3/parallelize_llama.py `_save_list`, `_custom_policy` at e7c0cae):
    per block the SDPA outputs (output + fp32 logsumexp) and every other aten.mm output (1st, 3rd, …) are saved, the
    rest recomputed; the block input is the checkpoint's: e·T·(h + Σ kept mm widths + qd) + 4·a·T. float8 linears
    (fp8.float8_gemms) run aten._scaled_mm, not listed: no GEMM output kept (train_ops.op_mode); amaxes unpriced."""
    kept = 0 if float8 else sum(matmul_output_widths(m, d, moe)[0::2])
    return d.e * d.T * (d.h_sp + kept + d.qd) + 4 * d.a * d.T


def full_recompute_layer(d: Dims) -> int:
    """Full recompute keeps each layer's input: e·T·h (HF non-reentrant checkpoint; h/t per rank under SP)."""
    return d.e * d.T * d.h_sp


# ---- outside the layers ---------------------------------------------------------------------------------------

def embedding_saved(m: ModelSpec, d: Dims, output_requires_grad: bool, w: Workload | None = None) -> int:
    """The embedding backward reads the input ids (the batch itself, not counted); GPT-2 keeps an embedding-dropout
    mask (1 B × T·h) when the embedding output requires grad (not under LoRA without input grads)."""
    if m.gemma_next is not None:  # hook: Gemma 3n / 4's per-layer inputs and AltUp projections (gemma_next_saved)
        return architectures.gemma_next_lora.embedding_saved(m, d, output_requires_grad, w)
    dropped = m.dropout > 0 and (m.variant is None or m.variant.embedding_dropout)  # OPT's decoder: none
    return d.T * d.h_sp if output_requires_grad and dropped else 0


def final_norm_saved(m: ModelSpec, d: Dims) -> int:
    """The final norm's saved copies plus its output, the LM head's input (e·T·h)."""
    return norm_saved(m, d.T, d.h_sp, d.e) + d.e * d.T * d.h_sp


def loss_saved(m: ModelSpec, d: Dims, vocab: int) -> int:
    """Causal-LM loss (HF ForCausalLMLoss): logits upcast to fp32 and the fp32 log_softmax saved, 4·T·V/t;
    final logit soft-capping (Gemma-2) also keeps its tanh output, e·T·V/t."""
    v = vocab // d.tp
    return 4 * d.T * v + (d.e * d.T * v if m.final_logit_softcapping else 0)


def loss_transient(d: Dims, vocab: int) -> int:
    """Live at the loss backward, beyond what is saved: the model-dtype logits returned to the caller (e·T·V),
    the fp32 gradient of the log_softmax (4·T·V) and its cast back to the model dtype (e·T·V), per TP rank
    (traced: validation/, tests/golden)."""
    v = vocab // d.tp
    return (2 * d.e + 4) * d.T * v if d.e != 4 else 8 * d.T * v


def rotary_saved(m: ModelSpec, d: Dims) -> int:
    """RoPE cos and sin tables (s × head_dim each, model dtype, shared by the batch), computed once and saved by
    every layer's q/k multiply; none for learned positions (GPT-2); fp32 ones for a variant's fp32_rope_tables."""
    if m.gemma_next is not None:  # hook: Gemma 3n / 4: one table per attention type, of its head_dim
        return architectures.gemma_next_saved.rotary_saved(m, d)
    if m.learned_position_embeddings or m.compressed or (m.variant and (m.variant.fp32_rope or m.variant.interleaved_rope)):
        return 0  # hook (issue 21): every layer keeps its own copies (variants.attention_extra; compressed_saved)
    rope = m.qk_rope_head_dim if m.is_mla else variants.shared_rope_width(m.variant, m.rotary_dim or m.head_size)
    fp32 = m.variant is not None and m.variant.fp32_rope_tables  # hook (issue 21): LFM3's tables stay fp32
    types = len(set(m.layer_types)) if m.swa_num_key_value_heads and m.layer_types else 1  # per type (MiMo-V2)
    return types * 2 * d.s * rope * (4 if fp32 else d.e)


def eager_mask_saved(d: Dims) -> int:
    """Recompute with eager attention: the 4-D causal mask (b × s × s_kv, model dtype), saved once for all calls."""
    return d.e * d.b * d.s * d.s_kv
