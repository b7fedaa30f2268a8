"""FLOPs, bytes moved and host operators of each operation of a step, and its time on a GPU (the roofline model).

An operation takes max(FLOPs / (peak FLOP/s × η), bytes / (bandwidth × η_mem)) on the GPU (Williams, Waterman and
Patterson 2009): its arithmetic intensity FLOPs / bytes against the GPU's ridge point peak / bandwidth says which of
the two bounds it. Eager PyTorch also pays a host cost per operator it dispatches; `host_ops` counts them (each
launches about one kernel), the host-op counts of a Hugging Face block as traced from real `transformers` code
(validation/trace/op_counts.py).

Counting rules, each with its source:
- a matmul of an m×k by k×n matrix is 2·m·k·n FLOPs; a linear layer on T tokens 2·T·in·out (Kaplan et al. 2020
  §2.1; Narayanan et al. 2021 appendix: 24·B·s·h² per layer forward for the 4h MLP, 6·N·tokens for a training step);
- backward = 2 × the forward FLOPs of every matmul (grad of the input and of the weight; Narayanan et al. 2021);
  a frozen weight (LoRA base) needs only the input gradient: 1 × forward;
- attention core: 4·s²·d·heads FLOPs forward for a full s×s score matrix, half of it causal, backward 2.5 × forward
  (Dao 2023, FlashAttention-2 §4.1, the FLOP count of its benchmarks); eager attention computes the whole s×s matrix
  and moves it through memory several times;
- elementwise operators move their inputs and outputs once per kernel: bytes = Σ (reads + writes), counted per
  kernel of the Hugging Face code named at each function.
"""
from __future__ import annotations

from typing import NamedTuple

# Host operators of Hugging Face blocks, forward and backward, as traced from transformers 5 on the meta device with
# PyTorch 2.13 (validation/trace/op_counts.py writes validation/op_counts.json; tests/timing/test_roofline.py holds these to it).
HOST_OPS = {
    "rmsnorm": (8, 16),  # LlamaRMSNorm: to(fp32), pow, mean, add, rsqrt, mul, to(dtype), mul(weight)
    "gemma_rmsnorm": (10, 16),  # Gemma: fp32 weight (1 + w) and a final type_as
    "layernorm": (1, 1),  # native_layer_norm / its backward
    "linear": (1, 2),  # mm / addmm; backward: grad input + grad weight (+ an add per extra linear on one input)
    "rope": (12, 18),  # apply_rotary_pos_emb on q and k: 2 × (mul, mul, neg, cat, add) + 2 casts
    "flash": (2, 3),  # SDPA flash kernel (+ the output's contiguous copy)
    "eager_extra": (9, 7),  # eager instead of SDPA: bmm, scale, mask add, softmax, cast, 2 repeat_kv copies, ...
    "gated_act": (2, 3),  # act(gate) * up
    "gelu_tanh": (8, 12),  # GPT-2's gelu_new written out in elementwise operators
    "residual": (2, 2),
    "dropout": (4, 1),  # empty_like, bernoulli_, div_, mul per dropout site
    "embed_loss": (25, 24),  # embedding, final norm, lm_head, fp32 upcast, cross entropy, label shift
    "moe_router": (8, 16),  # router linear, fp32 softmax, top-k, renormalise, cast
    "moe_expert": (14, 14),  # grouped_mm path: sort, gather, histc, cumsum, gate, weights, un-permute, sum over k
    "mla_extra": (6, 8),  # MLA: split q/k into nope and rope parts, expand k_rot, concatenate
    "lora_adapter": (6, 9),  # PEFT LoRA: fp32 cast of x, A, B, scale, add, cast back
}


class Op(NamedTuple):
    """One operation of a step on one GPU, summed over the layers and micro-batches it runs for."""

    name: str  # e.g. "QKV projection"
    phase: str  # forward | backward | recompute | optimizer | prefill | decode | communication
    kind: str  # matmul | attention | elementwise | optimizer | communication
    flops: float
    bytes: float
    host_ops: int  # PyTorch operators dispatched (kernel launches in eager mode)
    formula: str
    source: str  # key of calculator.core.sources.SOURCES
    serial: bool = False  # the host waits for the GPU here (a .nonzero()/.item() sync): no overlap
    seconds: float = 0.0  # communication: the time from the link model (calculator.timing.comm)
    bwd_host_ops: int | None = None  # operators its backward dispatches (None: the rule of step_ops.backward_of)
    exps: float = 0.0  # softmax exponentials on the special function units (attention kernels; Rates.exp_rate)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte moved (Williams et al. 2009); 0 for an operation that does no work
        on the GPU (an optimizer step offloaded to the CPU)."""
        if not self.bytes:
            return 0.0 if not self.flops else float("inf")
        return self.flops / self.bytes

    def scaled(self, n: float, phase: str | None = None, name: str | None = None) -> "Op":
        """The same operation repeated n times (layers, micro-batches), optionally renamed or re-phased."""
        bwd = None if self.bwd_host_ops is None else int(round(self.bwd_host_ops * n))
        return self._replace(flops=self.flops * n, bytes=self.bytes * n, host_ops=int(round(self.host_ops * n)),
                             exps=self.exps * n,
                             seconds=self.seconds * n, phase=phase or self.phase, name=name or self.name,
                             bwd_host_ops=bwd)


class Rates(NamedTuple):
    """What one GPU achieves: peaks × efficiencies."""

    peak_flops: float  # dense FLOP/s of the matmul dtype (datasheet)
    bandwidth: float  # DRAM bytes/s (datasheet)
    matmul_eff: float
    attention_eff: float
    memory_eff: float
    kernel_gap_s: float = 0.0  # GPU idle time between dependent kernels (launch latency)
    attention_peak: float = 0.0  # the attention kernel's dense peak when it differs (FP8 GEMMs, BF16 attention)
    exp_rate: float = 0.0  # softmax exponentials/s of the SFUs (calculator.timing.efficiency.exp_rate; 0: no term)

    @property
    def ridge(self) -> float:
        """FLOPs per byte above which an operation is compute-bound at the datasheet peaks."""
        return self.peak_flops / self.bandwidth


def bound(op: Op, r: Rates) -> str:
    """compute / memory by the roofline's ridge point; communication for collectives."""
    if op.kind == "communication":
        return "communication"
    return "compute" if op.intensity >= r.ridge else "memory"


def gpu_seconds(op: Op, r: Rates) -> float:
    """Time the GPU spends on an operation: the slower of its compute and its memory traffic (roofline), plus the
    idle gap before each of its kernels."""
    if op.kind == "communication":
        return op.seconds
    if op.kind == "attention":
        peak, eff = r.attention_peak or r.peak_flops, r.attention_eff
    else:
        peak, eff = r.peak_flops, r.matmul_eff
    return op.host_ops * r.kernel_gap_s + max(op.flops / (peak * eff) + softmax_seconds(op, r),
                                              op.bytes / (r.bandwidth * r.memory_eff))


def softmax_seconds(op: Op, r: Rates) -> float:
    """The SFU time of an attention kernel's softmax exponentials, beside its GEMMs' FLOPs / (peak × η):
    exps / Rates.exp_rate (calculator.timing.efficiency.exp_rate); none where the rate is not given."""
    return op.exps / r.exp_rate if (r.exp_rate > 0 and op.kind == "attention") else 0.0


# ---- matmuls ----------------------------------------------------------------------------------------------------

def linear_flops(tokens: float, n_in: int, n_out: int) -> float:
    """2·T·in·out (one multiply and one add per weight per token; Kaplan et al. 2020)."""
    return 2.0 * tokens * n_in * n_out


def linear_bytes(tokens: float, n_in: int, n_out: int, e_act: float, e_weight: float) -> float:
    """Read the input and the weight, write the output: e·T·(in + out) + e_w·in·out."""
    return e_act * tokens * (n_in + n_out) + e_weight * n_in * n_out


def linear(name: str, tokens: float, n_in: int, n_out: int, e: float, e_w: float, count: int = 1) -> Op:
    """`count` linear layers of the same shape, forward."""
    return Op(name, "forward", "matmul", count * linear_flops(tokens, n_in, n_out),
              count * linear_bytes(tokens, n_in, n_out, e, e_w), count * HOST_OPS["linear"][0],
              "2·T·in·out", "kaplan-scaling", bwd_host_ops=count * HOST_OPS["linear"][1])


def grouped_linear(name: str, tokens: float, shapes: list[tuple[int, int]], e: float, e_w: float) -> Op:
    """Several linears applied to the same T tokens (q, k, v), forward."""
    flops = sum(linear_flops(tokens, i, o) for i, o in shapes)
    nbytes = sum(linear_bytes(tokens, i, o, e, e_w) for i, o in shapes)
    k = len(shapes)  # backward: grad input and weight of each, k − 1 adds to sum the input gradients
    return Op(name, "forward", "matmul", flops, nbytes, k * HOST_OPS["linear"][0], "Σ 2·T·in·out",
              "kaplan-scaling", bwd_host_ops=k * HOST_OPS["linear"][1] + k - 1)


# ---- attention core ---------------------------------------------------------------------------------------------

def causal_pairs(s: int, window: int | None = None) -> float:
    """(query, key) pairs a causal attention of s tokens scores: s·(s+1)/2, or Σ min(i+1, w) in a sliding window."""
    if window is None or window >= s:
        return s * (s + 1) / 2
    return window * (window + 1) / 2 + (s - window) * window


def context_parallel_pairs(s_local: int, s: int, window: int | None = None) -> float:
    """(query, key) pairs one context-parallel rank scores: its s_local = s/cp queries attend to their whole causal
    prefix, not to their own chunk only. Megatron-Core splits the sequence into 2·cp chunks and gives rank r chunks
    r and 2cp−1−r (the load-balanced "zigzag" split: megatron/core/utils.py get_batch_on_this_cp_rank; Liu et al.
    2023, Ring Attention), so every rank scores the same share s_local/s of the s·(s+1)/2 causal pairs:
    s_local·(s+1)/2 without a window (= causal_pairs(s) at cp = 1)."""
    if s_local >= s:
        return causal_pairs(s, window)
    return causal_pairs(s, window) * s_local / s


def attention_core_flops(batch: int, heads: int, pairs: float, d_qk: int, d_v: int) -> float:
    """Forward FLOPs of softmax(QKᵀ)V over `pairs` scored (query, key) pairs: 2·pairs·(d_qk + d_v) per head
    (FlashAttention-2 §4.1: 4·s²·d·heads for the full square, halved when causal)."""
    return 2.0 * batch * heads * pairs * (d_qk + d_v)


# Eager attention (transformers eager_attention_forward) moves each score through memory in these kernels, bytes
# per score for an e-byte dtype: QKᵀ writes e; × scaling reads e writes e; + mask reads e writes e; softmax in fp32
# reads e writes 4; .to(dtype) reads 4 writes e; the PV matmul reads e.
def eager_score_bytes_forward(e: float) -> float:
    return e + 2 * e + 2 * e + (e + 4) + (4 + e) + e


# Backward: dP written (e) and P read for dV (e); dP to fp32 (e + 4); softmax backward reads grad and output, writes
# (12); back to the dtype (4 + e); the scaling's backward (2e); the two QKᵀ backward matmuls read dS (2e).
def eager_score_bytes_backward(e: float) -> float:
    return 2 * e + (e + 4) + 12 + (4 + e) + 2 * e + 2 * e


def flash_attention(batch: int, s: int, heads: int, kv_heads: int, d_qk: int, d_v: int, e: float,
                    window: int | None = None, s_kv: int | None = None, s_full: int | None = None) -> Op:
    """FlashAttention (the SDPA flash kernel), causal, forward: reads q, k, v once, writes o and the fp32 logsumexp.
    s_kv: a decode step's cached keys (no mask); s_full: the whole sequence when s is one context-parallel rank's
    share of it (context_parallel_pairs)."""
    if s_kv is not None:
        pairs = s * s_kv  # queries attend to a cache, no mask
    elif s_full is not None and s_full > s:
        pairs = context_parallel_pairs(s, s_full, window)
    else:
        pairs = causal_pairs(s, window)
    flops = attention_core_flops(batch, heads, pairs, d_qk, d_v)
    # a decode step reads every cached key and value of its sequence (s_kv of them, the new one included): the
    # memory-bound part of decoding that grows with the batch and the context (flash-decoding, vLLM paged attention)
    kv_read = s_kv if s_kv is not None else s
    nbytes = e * batch * (s * heads * (d_qk + d_v) + kv_read * kv_heads * (d_qk + d_v)) + 4 * batch * heads * s
    # one exponential per scored pair and head: softmax(QKᵀ) (FlashAttention-2 Algorithm 1, P = exp(S − m))
    return Op("Attention core (FlashAttention)", "forward", "attention", flops, nbytes, HOST_OPS["flash"][0],
              "2·b·heads·pairs·(d_qk + d_v), pairs = s(s+1)/2 causal", "flash-attention-2",
              bwd_host_ops=HOST_OPS["flash"][1], exps=float(batch * heads * pairs))


def eager_attention(batch: int, s: int, s_kv: int, heads: int, kv_heads: int, d_qk: int, d_v: int, e: float) -> Op:
    """Eager attention, forward: the whole b·heads·s·s_kv score matrix (the causal mask is added, not skipped)."""
    scores = batch * heads * s * s_kv
    flops = attention_core_flops(batch, heads, s * s_kv, d_qk, d_v)
    qkv = e * batch * s * (heads * d_qk + 2 * heads * d_qk + heads * d_v)  # k, v expanded by repeat_kv (copies)
    nbytes = scores * eager_score_bytes_forward(e) + qkv + e * batch * s * kv_heads * (d_qk + d_v) * 2
    return Op("Attention core (eager)", "forward", "elementwise", flops, nbytes,
              HOST_OPS["flash"][0] + HOST_OPS["eager_extra"][0],
              "2·b·heads·s·s_kv·(d_qk + d_v); (8e + 8) B per score", "hf-eager-attention",
              bwd_host_ops=HOST_OPS["flash"][1] + HOST_OPS["eager_extra"][1])


# ---- elementwise ------------------------------------------------------------------------------------------------

def rmsnorm_bytes(elements: float, e: float, gemma: bool = False) -> float:
    """HF LlamaRMSNorm forward, kernel by kernel: to(fp32) e+4, pow 8, mean 4, x·rsqrt 8, to(dtype) 4+e, ·weight 2e
    = 28 + 4e B per element; Gemma's (fp32 throughout, (1 + w) in fp32, type_as at the end) 36 + 2e."""
    per = (36 + 2 * e) if gemma else (28 + 4 * e)
    return per * elements


def layernorm_bytes(elements: float, e: float) -> float:
    """nn.LayerNorm is one fused kernel: read the input, write the output."""
    return 2 * e * elements


def norms(name: str, elements: float, e: float, kind: str, count: int) -> Op:
    """`count` norms over `elements` values each, forward."""
    if kind == "layernorm":
        per, formula = layernorm_bytes(elements, e), "2e per element (fused)"
    else:
        per = rmsnorm_bytes(elements, e, kind == "gemma_rmsnorm")
        formula = "(36 + 2e) B per element (fp32 Gemma)" if kind == "gemma_rmsnorm" else "(28 + 4e) B per element"
    return Op(name, "forward", "elementwise", 4.0 * elements * count, count * per, count * HOST_OPS[kind][0],
              formula, "hf-llama", bwd_host_ops=count * HOST_OPS[kind][1])


def rope_bytes(tokens: float, q_width: int, k_width: int, e: float) -> float:
    """apply_rotary_pos_emb: x·cos (2e), rotate_half's neg on half (e) and cat (2e), ·sin (2e), add (3e): 10e per
    element of q and k (transformers models/llama/modeling_llama.py)."""
    return 10 * e * tokens * (q_width + k_width)


def elementwise(name: str, nbytes: float, host_ops: int, formula: str, source: str = "hf-llama",
                flops: float = 0.0, bwd_host_ops: int | None = None) -> Op:
    return Op(name, "forward", "elementwise", flops, nbytes, host_ops, formula, source, bwd_host_ops=bwd_host_ops)


def gated_activation_bytes(tokens: float, f: int, e: float) -> float:
    """act(gate) (read e, write e) then × up (read 2e, write e): 5e per f-wide element."""
    return 5 * e * tokens * f


def residual_bytes(tokens: float, h: int, e: float, count: int = 2) -> float:
    """x + f(x): read two, write one, per residual connection."""
    return count * 3 * e * tokens * h


# ---- loss head and optimizer ------------------------------------------------------------------------------------

def loss_bytes_forward(tokens: float, vocab: int, e: float) -> float:
    """Logits in the dtype (write e), .float() (read e, write 4), log_softmax (read 4, write 4): (2e + 12)·T·V
    (transformers loss/loss_utils.py ForCausalLMLoss: logits.float() then cross_entropy)."""
    return (2 * e + 12) * tokens * vocab


def loss_bytes_backward(tokens: float, vocab: int, e: float) -> float:
    """nll backward fills a zero fp32 gradient (4), log_softmax backward reads 8 writes 4, the cast back reads 4
    writes e, the head's two backward matmuls read the e-byte gradient twice: (20 + 3e)·T·V."""
    return (20 + 3 * e) * tokens * vocab


def adamw_bytes_per_param(b_param: float, b_grad: float, b_state: float, b_master: float, impl: str) -> float:
    """Bytes one AdamW step moves per parameter.
    fused (torch._fused_adamw_): read p, g, m, v, write p, m, v: 2·b_p + b_g + 4·b_s;
    foreach (_multi_tensor_adamw, torch/optim/adam.py): mul_(p) 2b_p, lerp_(m, g) 2b_s + b_g, mul_(v) 2b_s,
    addcmul_(v, g, g) 2b_s + b_g, sqrt(v) 2b_s, div_ 2b_s, add_(eps) 2b_s, addcdiv_(p, m, √v) 2b_p + 2b_s:
    4·b_p + 2·b_g + 14·b_s; for-loop: the same per tensor.
    A separate master copy (b_master > 0) is what the step updates; the params are then written once more (b_p)."""
    target = b_master or b_param
    if impl == "fused":
        per = 2 * target + b_grad + 4 * b_state
    else:
        per = 4 * target + 2 * b_grad + 14 * b_state
    return per + (b_param if b_master else 0)


def multi_tensor_launches(n_params: float, n_tensors: int, max_tensors: int = 36) -> int:
    """Kernel launches of one multi-tensor (foreach / fused) operator: chunks of 65,536 elements, at most 320 blocks
    and `max_tensors` tensors per launch (PyTorch aten/src/ATen/native/cuda/MultiTensorApply.cuh)."""
    by_chunks = -(-int(n_params) // (65536 * 320))
    by_tensors = -(-n_tensors // max_tensors)
    return max(1, by_chunks, by_tensors)
