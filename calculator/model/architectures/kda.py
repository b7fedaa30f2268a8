"""Kimi Delta Attention (KDA), the linear-attention token mixer of Kimi Linear (Kimi Team, Kimi Linear: An Expressive,
Efficient Attention Architecture, arXiv:2510.26692) and of Ling 3.0's hybrid, as transformers 5.23 builds it:
models/kimi_linear/modeling_kimi_linear.py KimiLinearDeltaAttention and models/bailing_hybrid/
modeling_bailing_hybrid.py BailingHybridDeltaAttention.

Per layer, with P = num_heads × head_dim: q, k and v projections (P each), one depthwise causal convolution of
kernel K over q|k|v (3P channels, no bias), a per-channel forget gate (Kimi: the low-rank f_a (h → head_dim) and f_b
(head_dim → P); Ling: a full-rank f_proj) with dt_bias (P) and A_log (one per head), a write strength b_proj (one
per head), an output gate (Kimi: low-rank g_a / g_b; Ling: full-rank g_proj), a gated RMSNorm of head_dim and o_proj.
The chunked delta rule keeps a head_dim × head_dim state per head.
"""
from __future__ import annotations

from pydantic import ConfigDict, Field

from calculator.core import bounds as B
from calculator.core.hash_once import HashedOnce
from calculator.model.architectures.shapes import Shape, depthwise_conv1d, linear

NAME = "kda"
LABEL = "Kimi Delta Attention"
SOURCE = "kda"

CHUNK = 64  # chunk_kimi_delta_attention's chunk size (and flash-linear-attention's chunk_kda)
# vLLM keeps KDA's recurrent state in fp32 unless mamba_ssm_cache_dtype says otherwise (vLLM 0.33 mamba_utils.py
# MambaStateDtypeCalculator.kda_state_dtype); the conv state in the model dtype
SERVING_RECURRENT_DTYPE = "fp32"


class KDASpec(HashedOnce):
    """The configuration of KDA layers (KimiLinearConfig linear_num_heads / linear_head_dim /
    linear_conv_kernel_dim, or linear_attn_config; BailingHybridConfig's own fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_heads: int = Field(gt=0, le=B.MAX_HEADS, strict=True)
    head_dim: int = Field(gt=0, le=B.MAX_HEAD_DIM, strict=True)
    conv_kernel: int = Field(default=4, ge=1, le=1024, strict=True)
    # Kimi: forget and output gates through a head_dim-wide bottleneck (f_a/f_b, g_a/g_b); Ling: full-rank f/g_proj
    low_rank_gates: bool = True
    # Ling keeps conv1d.weight in fp32 when loaded (_keep_in_fp32_modules_strict), so its PyTorch conv runs in fp32
    fp32_conv: bool = False
    # Ling's bounded forget gate lower_bound·sigmoid(exp(A_log)·x) (kda_safe_gate) instead of −exp(A_log)·softplus(x)
    safe_gate: bool = False

    @property
    def proj_dim(self) -> int:
        """P = num_heads × head_dim: the width of q, k, v and the core's output."""
        return self.num_heads * self.head_dim


def shapes(m) -> list[Shape]:
    """Every parameter tensor of one KDA mixer, in the order transformers registers them."""
    k, h = m.kda, m.hidden_size
    nh, dh, P = k.num_heads, k.head_dim, k.proj_dim
    qkv_conv = 3 * linear(h, P) + depthwise_conv1d(3 * P, k.conv_kernel)
    if k.low_rank_gates:  # f_a, f_b, dt_bias, A_log (1, 1, nh, 1); b_proj; g_a, g_b; o_norm; o_proj
        return (qkv_conv + linear(h, dh) + linear(dh, P) + [(P,), (1, 1, nh, 1)] + linear(h, nh)
                + linear(h, dh) + linear(dh, P) + [(dh,)] + linear(P, h))
    # A_log (nh,), dt_bias, f_proj; b_proj; o_norm; o_proj; g_proj
    return qkv_conv + [(nh,), (P,)] + linear(h, P) + linear(h, nh) + [(dh,)] + linear(P, h) + linear(h, P)


def linears(m) -> list[tuple[str, int, int]]:
    """(module name, in_features, out_features) of its nn.Linear modules."""
    k, h = m.kda, m.hidden_size
    nh, dh, P = k.num_heads, k.head_dim, k.proj_dim
    qkv = [("q_proj", h, P), ("k_proj", h, P), ("v_proj", h, P)]
    if k.low_rank_gates:
        gates = [("forget_gate.f_a_proj", h, dh), ("forget_gate.f_b_proj", dh, P), ("b_proj", h, nh),
                 ("g_a_proj", h, dh), ("g_b_proj", dh, P)]
    else:
        gates = [("forget_gate.f_proj", h, P), ("b_proj", h, nh), ("g_proj", h, P)]
    return qkv + gates + [("o_proj", P, h)]


def conv_state_elements(m) -> int:
    """Per sequence: the convolution's last K inputs of q|k|v, 3P × K (transformers keeps all K columns)."""
    return 3 * m.kda.proj_dim * m.kda.conv_kernel


def recurrent_state_elements(m) -> int:
    """Per sequence: one head_dim × head_dim state per head."""
    return m.kda.num_heads * m.kda.head_dim ** 2


def state_bytes(m, batch: int, model_dtype_bytes: float) -> int:
    """What generate() keeps per layer for `batch` sequences, whatever their length (transformers cache_utils
    LinearAttentionLayer; KimiLinearDeltaAttention.forward): the conv state [b, 3P, K] in the model dtype (also for
    Ling, whose conv weight is fp32) and the recurrent state [b, nh, dh, dh] in fp32 (`.to(torch.float32)`)."""
    return int(batch * (conv_state_elements(m) * model_dtype_bytes + 4 * recurrent_state_elements(m)))


def serving_state(m, tp: int) -> tuple[int, int]:
    """(conv elements, recurrent elements) per sequence on one TP rank as vLLM keeps them (vLLM 0.33
    mamba_utils.py MambaStateShapeCalculator.kda_state_shape: conv (K − 1) × 3P / TP, recurrent (nh / TP) × dh × dh;
    the recurrent state in SERVING_RECURRENT_DTYPE)."""
    k = m.kda
    return (k.conv_kernel - 1) * 3 * k.proj_dim // tp, (k.num_heads // tp) * k.head_dim ** 2


def chunk_fallback_saved(b: int, s: int, nh: int, dh: int) -> int:
    """Bytes transformers' PyTorch chunk_kimi_delta_attention saves for backward, all in fp32 (C = 64 tokens a chunk,
    the sequence padded to s_p = ⌈s/C⌉·C, N = s_p/C chunks, T_p = b·s_p, P = nh·dh), traced on the CPU with
    transformers 5.23 (models/kimi_linear/modeling_kimi_linear.py; tests/model/test_linear_mixers.py):
    8·T·P + 8·T·nh (the l2-normalised q and k: fp32 copies and norms) + 36·T_p·P (padded k, v, k·β, v·β, e^g,
    k·β·e^g, scaled q, e^{g_i}, v_new) + 12·C·T_p·P (the per-channel decay mask and the two per-channel products of
    k·β with k and of q with k) + 4·T_p·nh·(1 + 2C) (padded β, the chunk's attention and its intra part)
    + 4·b·nh·N·(C(C − 1)/2 + (C − 1)C(2C − 1)/6) (the clones of the triangular forward substitution)
    + 4·N·b·nh·dh² (the state entering each chunk) + (N − 1)·b·(12·C·P + 4·P) + [N ≥ 2]·4·T_p·P (the state updates
    of all chunks but the last, whose state is dropped) + 3·C² (boolean masks)."""
    C = CHUNK
    sp = -(-s // C) * C
    N, T, Tp, P = sp // C, b * s, b * sp, nh * dh
    substitution = C * (C - 1) // 2 + (C - 1) * C * (2 * C - 1) // 6
    return (8 * T * P + 8 * T * nh + 36 * Tp * P + 12 * C * Tp * P + 4 * Tp * nh * (1 + 2 * C)
            + 4 * b * nh * N * substitution + 4 * N * b * nh * dh * dh + (N - 1) * b * (12 * C * P + 4 * P)
            + (4 * Tp * P if N >= 2 else 0) + 3 * C * C)


def chunk_kernel_saved(b: int, s: int, nh: int, dh: int, e: int, gate_bytes: int) -> int:
    """Bytes flash-linear-attention's ChunkKDAFunction saves for backward (fla/ops/kda/chunk.py and chunk_fwd.py,
    snapshot bc3b101, 2026-08-22; derived from source, not measured): the l2-normalised q and k (2·e·T·P) with their
    fp32 rstd (8·T·nh), v (e·T·P), the fp32 chunk-local cumsum of the gate (4·T·P), the gate as passed (T·P·gate_bytes)
    and the intra-chunk Aqk and Akk (2·e·T·nh·64); β is the tensor sigmoid already saved, the states are recomputed."""
    T, P = b * s, nh * dh
    return 2 * e * T * P + 8 * T * nh + e * T * P + 4 * T * P + gate_bytes * T * P + 2 * e * T * nh * CHUNK


def conv_saved_torch(b: int, s: int, P: int, K: int, conv_bytes: int) -> int:
    """The depthwise convolution on the PyTorch path (causal_conv1d_fn's F.conv1d + SiLU): its input q|k|v (3·T·P)
    and its padded output, which SiLU saves (3·b·P·(s + K − 1)), in the conv weight's dtype (Ling: fp32 copies)."""
    return conv_bytes * (3 * b * s * P + 3 * b * P * (s + K - 1))


def forget_gate_saved(k, T: int, P: int, nh: int) -> int:
    """The forget gate's saved tensors (KimiLinearForgetGate / BailingHybridForgetGate.forward). Kimi, in fp32:
    exp(g), 1 + exp(g) (log's input), the where mask (1 B), softplus and −exp(A_log): 13·T·P + 8·nh, plus f_b's input
    e·T·dh (counted with the output gate's g_b input). Ling: the fp32 f_proj output and sigmoid's output, 8·T·P, and
    exp(A_log) (4·nh; the softplus form keeps 4·nh more)."""
    if k.low_rank_gates:
        return 13 * T * P + 8 * nh
    return 8 * T * P + (4 if k.safe_gate else 8) * nh


def saved(m, d, w) -> int:
    """What one KDA mixer saves for backward beyond its input (the norm output), for the local shapes `d` (heads split
    by TP): β = sigmoid(b_proj) e·T·nh, o_proj's input e·T·P, the low-rank gates' bottleneck inputs 2·e·T·dh (Kimi),
    the forget gate (forget_gate_saved), the gated RMSNorm in fp32 (16·T·P + 4·T·nh + 4·dh: fp32 input, normalised,
    weighted, sigmoid(gate), rsqrt and the fp32 weight), and the convolution and chunked delta rule:
    "torch" (Workload.mixer_kernels) transformers' PyTorch fallback, measured on the CPU (conv_saved_torch,
    chunk_fallback_saved); "fused" causal-conv1d (saves its bf16 input only: e·3·T·P) and flash-linear-attention
    (chunk_kernel_saved), derived from their source, not measured (no GPU was lent to this work)."""
    k, b, s, e = m.kda, d.b, d.s, d.e
    nh = max(k.num_heads // d.tp, 1)
    dh, T = k.head_dim, b * s
    P = nh * dh
    common = e * T * nh + e * T * P + (2 * e * T * dh if k.low_rank_gates else 0) + forget_gate_saved(k, T, P, nh)
    common += 16 * T * P + 4 * T * nh + 4 * dh
    if w.mixer_kernels == "torch":
        conv_bytes = 4 if k.fp32_conv else e
        return common + conv_saved_torch(b, s, P, k.conv_kernel, conv_bytes) + chunk_fallback_saved(b, s, nh, dh)
    gate_bytes = 4 if k.low_rank_gates else e  # Kimi passes its fp32 gate; Ling casts it to the model dtype
    return common + 3 * e * T * P + chunk_kernel_saved(b, s, nh, dh, e, gate_bytes)


def linear_flops_per_token(m) -> float:
    """FLOPs per token of one KDA mixer beyond its projections (forward): the depthwise convolution 2·3P·K and the
    chunkwise delta rule per head, 6·dh² (v_new = u − w·S, the state update, the inter-chunk output)
    + 2·C·(3·dh + 2·dh) (Aqk, Akk, w, u, Aqk·v_new) + 2·C²/3 (the triangular inverse), C = 64 (fla
    fla/ops/kda/chunk_fwd.py chunk_kda_fwd; dense blocks, the kernels skip the upper triangles)."""
    k, C = m.kda, CHUNK
    dh = k.head_dim
    core = k.num_heads * (6 * dh * dh + 2 * C * 5 * dh + 2 * C * C / 3)
    return core + 6 * k.proj_dim * k.conv_kernel


# ---- LoRA: what the frozen mixer no longer saves -------------------------------------------------------------------

# the linears that read the layer's normalised input (a LoRA adapter on one keeps that input alive)
READS_INPUT = frozenset({"q_proj", "k_proj", "v_proj", "f_a_proj", "b_proj", "g_a_proj", "f_proj", "g_proj"})


def frozen_saved(m, d, w, adapted: frozenset[str]) -> int:
    """Bytes saved() no longer keeps when the mixer's parameters are frozen and only the `adapted` linears carry LoRA
    adapters, its input requiring grad (KimiLinearDeltaAttention.forward; measured with PEFT 0.21 on the CPU,
    validation/trace/lora_hybrid.py): the forget gate's fp32 softplus (or Ling's gate input) and exp(A_log) that
    only A_log's and dt_bias's gradients read, 4·T·P + 4·nh; the low-rank gates' second halves' inputs unless
    adapted, e·T·dh each (f_b_proj, g_b_proj); the fp32 gated RMSNorm's normalised copy, 4·T·P; o_proj's input
    unless adapted, e·T·P. The same with the fused kernels (the gates, the norm and o_proj run in torch)."""
    k, e, T = m.kda, d.e, d.T
    nh = max(k.num_heads // d.tp, 1)
    P = nh * k.head_dim
    out = 4 * T * P + 4 * nh + 4 * T * P + (0 if "o_proj" in adapted else e * T * P)
    if k.low_rank_gates:
        out += sum(e * T * k.head_dim for name in ("f_b_proj", "g_b_proj") if name not in adapted)
    return out
