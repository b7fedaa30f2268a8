"""Gated DeltaNet, the linear-attention token mixer of Qwen3-Next, Qwen3.5 and OLMo-Hybrid (Yang, Kautz, Hatamizadeh,
Gated Delta Networks: Improving Mamba2 with Delta Rule, ICLR 2025), as transformers builds it:
models/qwen3_next/modeling_qwen3_next.py Qwen3NextGatedDeltaNet (fused in_proj_qkvz and in_proj_ba),
models/qwen3_5/modeling_qwen3_5.py Qwen3_5GatedDeltaNet (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a) and
models/olmo_hybrid/modeling_olmo_hybrid.py OlmoHybridGatedDeltaNet (q_proj, k_proj, v_proj, a_proj, b_proj, g_proj,
o_proj: Qwen3.5's forward with the q/k/v projection split in three, the same tensors saved; its beta = 2·sigmoid(b)
with linear_allow_neg_eigval, a multiply by a constant that saves nothing).

Per layer: the input projected to q, k (num_key_heads × key_head_dim each), v and the output gate z (num_value_heads ×
value_head_dim each), and per value head a decay input a and a write strength b; a depthwise causal convolution of
kernel K over q, k and v; the chunked delta rule keeps a recurrent state of value_head_dim × key_head_dim per value
head; a gated RMSNorm of value_head_dim (weight only), then out_proj. dt_bias and A_log: one per value head.
"""
from __future__ import annotations

from calculator.model.architectures.shapes import Shape, depthwise_conv1d, linear

NAME = "gated_deltanet"
LABEL = "Gated DeltaNet"
SOURCE = "gated-deltanet"


def shapes(m) -> list[Shape]:
    """Every parameter tensor of one Gated DeltaNet mixer, in the order transformers registers them."""
    la, h = m.linear_attention, m.hidden_size
    nv, k, v = la.num_value_heads, la.key_dim, la.value_dim
    conv = depthwise_conv1d(la.conv_dim, la.conv_kernel) if la.conv_kernel else []
    tail = [(nv,), (nv,), (la.value_head_dim,)] + linear(v, h)  # dt_bias, A_log, the gated norm, out_proj
    if la.projections == "qkvz_ba":
        return conv + linear(h, 2 * k + 2 * v) + linear(h, 2 * nv) + tail
    if la.projections == "q_k_v_a_b_g":  # OLMo-Hybrid: q, k, v, a, b, g, o_proj, conv1d, A_log, dt_bias, o_norm
        return (linear(h, k) * 2 + linear(h, v) + linear(h, nv) * 2 + linear(h, v) + linear(v, h) + conv
                + [(nv,), (nv,), (la.value_head_dim,)])
    return conv + tail + linear(h, 2 * k + v) + linear(h, v) + linear(h, nv) + linear(h, nv)


def linears(m) -> list[tuple[str, int, int]]:
    """(module name, in_features, out_features) of its nn.Linear modules."""
    la, h = m.linear_attention, m.hidden_size
    nv, k, v = la.num_value_heads, la.key_dim, la.value_dim
    if la.projections == "qkvz_ba":
        proj = [("in_proj_qkvz", h, 2 * k + 2 * v), ("in_proj_ba", h, 2 * nv)]
    elif la.projections == "q_k_v_a_b_g":
        return [("q_proj", h, k), ("k_proj", h, k), ("v_proj", h, v), ("a_proj", h, nv), ("b_proj", h, nv),
                ("g_proj", h, v), ("o_proj", v, h)]
    else:
        proj = [("in_proj_qkv", h, 2 * k + v), ("in_proj_z", h, v), ("in_proj_b", h, nv), ("in_proj_a", h, nv)]
    return proj + [("out_proj", v, h)]


def conv_state_elements(m) -> int:
    """Per sequence: the causal convolution's last K inputs of q, k and v, (2·key_dim + value_dim) × K (transformers
    cache_utils.LinearAttentionLayer keeps all K columns; vLLM K − 1)."""
    la = m.linear_attention
    return la.conv_dim * la.conv_kernel


def recurrent_state_elements(m) -> int:
    """Per sequence: one value_head_dim × key_head_dim state per value head."""
    la = m.linear_attention
    return la.num_value_heads * la.key_head_dim * la.value_head_dim


def state_bytes(m, batch: int, model_dtype_bytes: float) -> int:
    """What generate() keeps per layer for `batch` sequences, whatever their length (transformers cache_utils
    LinearAttentionLayer; Qwen3NextGatedDeltaNet.forward): the conv state in the model dtype and the recurrent state
    in fp32 (the chunked delta rule computes in fp32 and keeps its final state)."""
    return int(batch * (conv_state_elements(m) * model_dtype_bytes + 4 * recurrent_state_elements(m)))


CHUNK = 64  # torch_chunk_gated_delta_rule's chunk_size (and flash-linear-attention's)


def saved_torch(m, b: int, s: int, e: int, tp: int = 1) -> int:
    """Bytes one layer's Gated DeltaNet saves for backward on transformers' PyTorch path (torch_chunk_gated_delta_rule
    and the causal_conv1d fallback, what runs without flash-linear-attention), beyond its input (the norm output,
    counted with the norms): measured on CPU with real transformers code (tests/model/test_gated_deltanet.py).

    conv: its input and its padded output, e·(T + b·(s + K − 1))·(2·key_dim + value_dim); gates: sigmoid(b) in e, the
    fp32 decay softplus(a + dt_bias) and its input, fp32 −exp(A_log); the chunked delta rule in fp32 over the sequence
    padded to a multiple of 64 (P = ⌈s/64⌉·64, N = P/64 chunks, keys repeated to the value heads, m = [N ≥ 2]):
    4·(2·T·nv·dk + 2·T·nv + (3 + m)·b·P·nv + 3·b·P·nv·dv + (4 + 2m)·b·P·nv·dk + 5·b·P·nv·64 + N·b·nv·dk·dv
    + m·b·nv·N) + 64²; the gated RMSNorm (12 + 2e)·T·value_dim + 4·T·nv; out_proj's input e·T·value_dim.
    The scan's last state update is dropped with the final state (output_final_state=False), and with it what only
    it keeps: with one chunk the decayed key, its exp((cum_decay[-1] − cum_decay)) factor and chunk_decay (the
    decayed query is read only against a state that needs grad, from chunk 2 on: the other m·b·P·nv·dk).
    Heads are split by tensor parallelism."""
    la = m.linear_attention
    nv, nk = la.num_value_heads // tp, max(la.num_key_heads // tp, 1)
    dk, dv, K = la.key_head_dim, la.value_head_dim, la.conv_kernel
    cd, vd = 2 * nk * dk + nv * dv, nv * dv
    T, C = b * s, CHUNK
    P = -(-s // C) * C
    N, Tp = P // C, b * P
    conv = (T * cd * e + b * cd * (s + K - 1) * e) if K else 0
    gates = T * nv * e + 8 * T * nv + 8 * nv
    many = int(N >= 2)  # torch_chunk_gated_delta_rule (models/qwen3_next/modeling_qwen3_next.py): the loop's last
    # `last_recurrent_state * chunk_decay + key.T @ v_new` is discarded, so with one chunk the decayed key, its decay
    # factor and chunk_decay are saved by nothing else; query · exp(cum_decay) is saved by `query @ state` only once
    # the state requires grad (chunk ≥ 2)
    core = 4 * (2 * T * nv * dk + 2 * T * nv + (3 + many) * Tp * nv + 3 * Tp * nv * dv + (4 + 2 * many) * Tp * nv * dk
                + 5 * Tp * nv * C + N * b * nv * dk * dv + many * b * nv * N) + C * C
    norm = (12 + 2 * e) * T * vd + 4 * T * nv
    return conv + gates + core + norm + T * vd * e


def saved_fused(m, b: int, s: int, e: int, tp: int = 1) -> int:
    """Bytes one layer's Gated DeltaNet saves for backward beyond its input with the GPU kernels transformers calls
    when they are installed (read from source, not measured here): causal-conv1d's CausalConv1dFn saves only its input
    (causal_conv1d/causal_conv1d_interface.py, snapshot 0d2252d) e·T·conv_dim; flash-linear-attention's
    ChunkGatedDeltaRuleFunction.forward (fla/ops/gated_delta_rule/chunk.py, snapshot bc3b101, 2026-08-22) saves the
    L2-normalised q and k with their fp32 rstd (nk heads: 2·e·T·nk·dk + 8·T·nk), a contiguous copy of v (e·T·vd),
    the fp32 chunk-local decay cumsum (4·T·nv) and the per-chunk inverse A (e·64·T·nv), and recomputes the chunk
    states in backward; the gates (sigmoid(b) e·T·nv, fp32 softplus 8·T·nv + 8·nv), the gated RMSNorm and
    out_proj's input stay in torch as on the PyTorch path. The kernel saves its beta too: the sigmoid's own output,
    but with OLMo-Hybrid's allow_neg_eigval the doubled beta, e·T·nv more (the PyTorch path keeps only its fp32
    copy, counted in `core`)."""
    la = m.linear_attention
    nv, nk = la.num_value_heads // tp, max(la.num_key_heads // tp, 1)
    dk, vd = la.key_head_dim, nv * la.value_head_dim
    cd = 2 * nk * dk + vd
    T = b * s
    conv = T * cd * e if la.conv_kernel else 0
    gates = T * nv * e * (2 if la.allow_neg_eigval else 1) + 8 * T * nv + 8 * nv
    fla = 2 * T * nk * dk * e + 8 * T * nk + T * vd * e + 4 * T * nv + CHUNK * T * nv * e
    norm = (12 + 2 * e) * T * vd + 4 * T * nv
    return conv + gates + fla + norm + T * vd * e


def saved(m, d, w) -> int:
    """What one Gated DeltaNet saves for backward beyond its input, for the local shapes `d` (calculator.memory
    .activations.Dims: micro-batch b, local sequence s, element size e, TP degree): the GPU kernels'
    (Workload.mixer_kernels "fused", the default) or transformers' PyTorch fallback ("torch")."""
    path = saved_torch if w.mixer_kernels == "torch" else saved_fused
    return path(m, d.b, d.s, d.e, d.tp)


def serving_state(m, tp: int) -> tuple[int, int]:
    """(conv elements, recurrent elements) per sequence on one TP rank as vLLM keeps them (vLLM 0.33
    model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator.gated_delta_net_state_shape: the conv keeps
    K − 1 columns of the q, k, v channels, heads split by TP)."""
    la = m.linear_attention
    conv = (la.conv_kernel - 1) * la.conv_dim // tp if la.conv_kernel else 0
    return conv, recurrent_state_elements(m) // tp


def linear_flops_per_token(m) -> float:
    """FLOPs per token of one Gated DeltaNet's chunked delta rule beyond its projections (forward), per value head:
    6·dk·dv + 2·C·(3·dk + 2·dv) + 2·C²/3 with C = 64 (the chunkwise algorithm of Yang et al. 2025 §3.3)."""
    la, C = m.linear_attention, CHUNK
    dk, dv = la.key_head_dim, la.value_head_dim
    return la.num_value_heads * (6 * dk * dv + 2 * C * (3 * dk + 2 * dv) + 2 * C * C / 3)


# ---- LoRA: what the frozen mixer no longer saves -------------------------------------------------------------------

# its nn.Linear modules that read the layer's normalised input (a LoRA adapter on one keeps that input alive)
READS_INPUT = frozenset({"in_proj_qkvz", "in_proj_ba", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
                         "q_proj", "k_proj", "v_proj", "a_proj", "b_proj", "g_proj"})  # OLMo-Hybrid's split ones


def frozen_saved(m, d, w, adapted: frozenset[str]) -> int:
    """Bytes saved() no longer keeps when the mixer's parameters are frozen and only the `adapted` linears carry LoRA
    adapters, its input requiring grad (transformers 5.23 Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet.forward;
    measured with PEFT 0.21 on the CPU, validation/trace/lora_hybrid.py): the fp32 softplus(a + dt_bias) and
    exp(A_log) that only A_log's gradient reads, 4·T·nv + 4·nv; the gated RMSNorm's normalised copy (its weight
    frozen), e·T·value_dim; out_proj's input unless out_proj is adapted, e·T·value_dim. The same with the fused
    kernels: the gates, the gated norm and out_proj run in torch there too (saved_fused)."""
    la = m.linear_attention
    nv = la.num_value_heads // d.tp
    vd = nv * la.value_head_dim
    out = linears(m)[-1][0]  # out_proj (OLMo-Hybrid: o_proj)
    return 4 * d.T * nv + 4 * nv + d.e * d.T * vd + (0 if out in adapted else d.e * d.T * vd)
