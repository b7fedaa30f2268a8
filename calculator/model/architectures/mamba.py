"""Mamba-2 and Mamba-1, the selective state-space token mixers, as transformers 5.23 builds them.

Mamba-2 (Dao & Gu, Transformers are SSMs, ICML 2024, arXiv:2405.21060): models/mamba2/modeling_mamba2.py
Mamba2Mixer and its copies in nemotron_h, granitemoehybrid, bamba, falcon_h1 (FalconH1Mixer) and zamba2. One in_proj
computes [z (d) | x (d) | B (G·N) | C (G·N) | dt (h)], a depthwise causal convolution of kernel K runs over x, B and C
(conv_dim = d + 2·G·N), the chunked SSD scan keeps one p × N state per head (d = h·p), a gated RMSNorm of d in G
groups (Falcon-H1: only with mamba_rms_norm), then out_proj; dt_bias, A_log and D one per head.

Mamba-1 (Gu & Dao 2023, arXiv:2312.00752): models/mamba/modeling_mamba.py MambaMixer (falcon_mamba, jamba the same
tensors): in_proj to x and z (2·d), the convolution over x (d channels), x_proj to dt (rank R), B and C (N each),
dt_proj back to d, A_log (d × N), D (d), out_proj. Falcon-Mamba normalises dt, B and C with weightless RMSNorms,
Jamba with weighted ones (dt_layernorm, b_layernorm, c_layernorm).

Saved activations: "torch" is transformers' PyTorch path (mamba2_chunk_scan, mamba_selective_scan, the conv1d
fallback), measured on the CPU in bf16 (tests/model/test_mamba.py); "fused" is the mamba_ssm / causal-conv1d kernel
path, DERIVED FROM SOURCE (not measured: no GPU run yet), state-spaces/mamba snapshot e9594ce1 (2026-07-23):
mamba_ssm/ops/triton/ssd_combined.py MambaSplitConv1dScanCombinedFn, mamba_ssm/ops/selective_scan_interface.py
MambaInnerFn and SelectiveScanFn; Dao-AILab/causal-conv1d snapshot 0d2252d causal_conv1d_interface.py CausalConv1dFn.
"""
from __future__ import annotations

from math import ceil
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from calculator.core import bounds as B
from calculator.core.hash_once import HashedOnce
from calculator.model.architectures.shapes import Shape, depthwise_conv1d, linear

NAME = "mamba"
LABEL = "Mamba"
SOURCE = "mamba"
F32 = 4
SCAN_CHUNK = 2048  # selective_scan_cuda keeps a chunk state every 2048 tokens (csrc/selective_scan/selective_scan.cpp)

_dim = dict(gt=0, le=B.MAX_HIDDEN, strict=True)


class MambaSpec(HashedOnce):
    """One Mamba mixer's configuration (the same in every Mamba layer of a model)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1, 2] = 2
    d_inner: int = Field(**_dim)  # d: Mamba-2 num_heads × head_dim; Mamba-1 expand × hidden_size
    d_state: int = Field(**_dim)  # N
    conv_kernel: int = Field(default=4, gt=0, le=1024, strict=True)  # K
    num_heads: int = Field(default=1, gt=0, le=B.MAX_HEADS, strict=True)  # h (Mamba-2)
    n_groups: int = Field(default=1, gt=0, le=B.MAX_HEADS, strict=True)  # G: B and C groups (Mamba-2)
    chunk_size: int = Field(default=256, gt=0, le=1 << 20, strict=True)  # Q: the SSD scan's chunk (Mamba-2)
    dt_rank: int = Field(default=0, ge=0, le=B.MAX_HIDDEN, strict=True)  # R: x_proj's dt width (Mamba-1)
    in_proj_bias: bool = False
    out_proj_bias: bool = False
    conv_bias: bool = True
    gated_norm: bool = True  # Mamba-2's gated RMSNorm (weight of d); Falcon-H1 without mamba_rms_norm: silu(z) only
    # Mamba-1's RMSNorms on dt, B and C: none (Mamba), weightless (Falcon-Mamba), weighted (Jamba, whose mixer also
    # calls the conv and scan kernels one by one instead of mamba_inner_fn)
    dt_bc_norm: Literal["none", "weightless", "weighted"] = "none"

    @model_validator(mode="after")
    def _check(self) -> "MambaSpec":
        if self.version == 2:
            if self.d_inner % self.num_heads:
                raise ValueError(f"d_inner ({self.d_inner}) must be num_heads ({self.num_heads}) × head_dim")
            if self.num_heads % self.n_groups:
                raise ValueError(f"n_groups ({self.n_groups}) must divide num_heads ({self.num_heads})")
        elif self.dt_rank < 1:
            raise ValueError("a Mamba-1 mixer needs dt_rank (time_step_rank) of at least 1")
        return self

    @property
    def head_dim(self) -> int:
        return self.d_inner // self.num_heads

    @property
    def conv_dim(self) -> int:
        """Channels of the causal convolution: x, B and C (Mamba-2), x (Mamba-1)."""
        return self.d_inner + 2 * self.n_groups * self.d_state if self.version == 2 else self.d_inner

    @property
    def in_proj_dim(self) -> int:
        """in_proj's output: z, x, B, C and dt (Mamba-2: 2·d + 2·G·N + h), x and z (Mamba-1: 2·d)."""
        return self.d_inner + self.conv_dim + self.num_heads if self.version == 2 else 2 * self.d_inner


# ---- parameters ------------------------------------------------------------------------------------------------

def shapes(m) -> list[Shape]:
    """Every parameter tensor of one Mamba mixer, in the order transformers registers them (Mamba2Mixer.__init__:
    conv1d, in_proj, dt_bias, A_log, norm, D, out_proj; MambaMixer.__init__: conv1d, in_proj, x_proj, dt_proj,
    A_log, D, out_proj; JambaMambaMixer adds dt_layernorm, b_layernorm, c_layernorm)."""
    mb, h = m.mamba, m.hidden_size
    d, N = mb.d_inner, mb.d_state
    conv = depthwise_conv1d(mb.conv_dim, mb.conv_kernel, mb.conv_bias)
    out = linear(d, h, mb.out_proj_bias)
    if mb.version == 2:
        norm = [(d,)] if mb.gated_norm else []
        return conv + linear(h, mb.in_proj_dim, mb.in_proj_bias) + [(mb.num_heads,)] * 2 + norm + \
            [(mb.num_heads,)] + out
    norms = [(mb.dt_rank,), (N,), (N,)] if mb.dt_bc_norm == "weighted" else []  # Falcon-Mamba's are buffers
    return conv + linear(h, 2 * d, mb.in_proj_bias) + linear(d, mb.dt_rank + 2 * N) + \
        linear(mb.dt_rank, d, bias=True) + [(d, N), (d,)] + out + norms


def linears(m) -> list[tuple[str, int, int]]:
    """(module name, in_features, out_features) of its nn.Linear modules, out_proj last."""
    mb, h = m.mamba, m.hidden_size
    d = mb.d_inner
    if mb.version == 2:
        return [("in_proj", h, mb.in_proj_dim), ("out_proj", d, h)]
    return [("in_proj", h, 2 * d), ("x_proj", d, mb.dt_rank + 2 * mb.d_state), ("dt_proj", mb.dt_rank, d),
            ("out_proj", d, h)]


# ---- inference state ---------------------------------------------------------------------------------------------

def conv_state_elements(m) -> int:
    """Per sequence: the convolution's last K inputs of its conv_dim channels (transformers cache_utils
    LinearAttentionLayer.lazy_initialization keeps all K columns)."""
    return m.mamba.conv_dim * m.mamba.conv_kernel


def recurrent_state_elements(m) -> int:
    """Per sequence: the SSM state, h × p × N (Mamba-2) or d × N (Mamba-1), both d·N elements."""
    return m.mamba.d_inner * m.mamba.d_state


def state_bytes(m, batch: int, model_dtype_bytes: float) -> int:
    """What generate() keeps per layer for `batch` sequences, whatever their length (transformers 5.23
    cache_utils.LinearAttentionLayer; Mamba2Mixer / MambaMixer.forward): the conv state (b, conv_dim, K) in the
    model dtype (the in_proj output's) and the SSM state in fp32 (torch.zeros_like of the scan's fp32 final state)."""
    return int(batch * (conv_state_elements(m) * model_dtype_bytes + F32 * recurrent_state_elements(m)))


def _groups_on_rank(mb, tp: int) -> int:
    """B/C groups one TP rank holds: G / tp, or one replicated group when tp does not divide G (vLLM
    mamba_mixer2.py extra_groups_for_head_shards pads G to tp; Megatron requires tp | G)."""
    return mb.n_groups // tp if mb.n_groups % tp == 0 else 1


def serving_state(m, tp: int) -> tuple[int, int]:
    """(conv elements, recurrent elements) per sequence on one TP rank as vLLM 0.33 keeps them
    (model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator: mamba2_state_shape conv (K − 1,
    (d + 2·G'·N)/tp), SSM (h/tp, p, N); mamba1_state_shape conv (K − 1, d/tp), SSM (d/tp, N))."""
    mb = m.mamba
    if mb.version == 2:
        d_local = mb.num_heads // tp * mb.head_dim
        conv = (mb.conv_kernel - 1) * (d_local + 2 * _groups_on_rank(mb, tp) * mb.d_state)
        return conv, d_local * mb.d_state
    return (mb.conv_kernel - 1) * (mb.d_inner // tp), mb.d_inner // tp * mb.d_state


# ---- saved for backward --------------------------------------------------------------------------------------------

def _rank_widths(mb, tp: int) -> tuple[int, int, int]:
    """(heads, d, groups) on one TP rank: heads and d split, groups split or replicated (Megatron-LM
    megatron/core/ssm/mamba_mixer.py; Mamba-1: d split, dt_rank and N whole)."""
    if mb.version == 1:
        return 1, mb.d_inner // tp, 1
    h = mb.num_heads // tp
    return h, h * mb.head_dim, _groups_on_rank(mb, tp)


def mamba2_saved_torch(mb, b: int, s: int, e: int, tp: int = 1) -> int:
    """Bytes one Mamba-2 mixer saves for backward on transformers' PyTorch path beyond its input, measured
    (tests/model/test_mamba.py): models/mamba2/modeling_mamba2.py Mamba2Mixer.forward, mamba2_chunk_scan and
    MambaRMSNormGated. With T = b·s, the scan padded to P = ⌈s/Q⌉·Q (n_c = P/Q chunks, T_p = b·P):
    the in_proj output e·T·(2d + 2GN + h) (the conv reads a transposed view: kept whole), the padded conv output
    e·b·(s + K − 1)·conv_dim; dt's softplus and clamp inputs 2e·T·h and two fp32 copies 8·T·h; fp32 x 4·T·d;
    in fp32 over T_p: five d-wide tensors, B and C repeated to the h heads five times (5·h·N), the Q × Q segment
    sums, scores and masked scores (3·h·Q), two decays (2·h); chunk states 4·b·h·p·N·(2·n_c + 1), decay_chunk
    4·b·h·(n_c + 1)², two bool tril masks per segment_sum 2·Q² + 2·(n_c + 1)², A twice 8·h; the gated RMSNorm
    4·T·(4d + G) and out_proj's input e·T·d, or (Falcon-H1 without it) silu(z) and out_proj's input 2e·T·d."""
    h, d, G = _rank_widths(mb, tp)
    N, K, Q, p = mb.d_state, mb.conv_kernel, mb.chunk_size, mb.head_dim
    T, nc = b * s, ceil(s / Q)
    Tp = b * nc * Q
    proj, cd = 2 * d + 2 * G * N + h, d + 2 * G * N
    conv = e * T * proj + e * b * (s + K - 1) * cd
    dt = 2 * e * T * h + 2 * F32 * T * h
    scan = F32 * (T * d + 5 * Tp * d + 5 * Tp * h * N + 3 * Tp * h * Q + 2 * Tp * h
                  + b * h * p * N * (2 * nc + 1) + b * h * (nc + 1) ** 2 + 2 * h) + 2 * Q * Q + 2 * (nc + 1) ** 2
    tail = F32 * T * (4 * d + G) + e * T * d if mb.gated_norm else 2 * e * T * d
    return conv + dt + scan + tail


def mamba2_saved_fused(mb, b: int, s: int, e: int, tp: int = 1) -> int:
    """Bytes one Mamba-2 mixer saves beyond its input with mamba_ssm installed, derived from source (unmeasured):
    transformers calls mamba_split_conv1d_scan_combined while training without a cache, and
    MambaSplitConv1dScanCombinedFn.forward (mamba_ssm/ops/triton/ssd_combined.py, snapshot e9594ce1) runs the conv,
    the scan, the gated norm and out_proj in one autograd Function that saves only the in_proj output zxbcdt
    e·T·(2d + 2GN + h), the scan output before the gate out_x (b, s, h, p) in the model dtype e·T·d and, with the
    gated norm, its fp32 rstd 4·T·G; everything else is recomputed in backward. Outside it A = −exp(A_log.float())
    keeps the exp output and A: 8·h."""
    h, d, G = _rank_widths(mb, tp)
    T = b * s
    proj = 2 * d + 2 * G * mb.d_state + h
    return e * T * (proj + d) + (F32 * T * G if mb.gated_norm else 0) + 2 * F32 * h


def _dt_bc_norm_torch(mb, T: int, e: int) -> int:
    """What Mamba-1's dt/B/C handling saves on the PyTorch path: Mamba's x_proj output e·T·(R + 2N); Falcon-Mamba's
    weightless RMSNorms (fp32 copies and rsqrt, 4·T·(R + 2N) + 12·T) with the normed dt and C e·T·(R + N); Jamba's
    weighted ones also keep their normalised inputs e·T·(R + 2N) (measured)."""
    R, N = mb.dt_rank, mb.d_state
    if mb.dt_bc_norm == "none":
        return e * T * (R + 2 * N)
    norms = F32 * T * (R + 2 * N) + 3 * F32 * T + e * T * (R + N)
    return norms + (e * T * (R + 2 * N) if mb.dt_bc_norm == "weighted" else 0)


def mamba1_saved_torch(mb, b: int, s: int, e: int, tp: int = 1) -> int:
    """Bytes one Mamba-1 mixer saves beyond its input on transformers' PyTorch path (models/mamba/modeling_mamba.py
    MambaMixer.forward and mamba_selective_scan's sequential loop; use_mambapy off, not compiled), measured
    (tests/model/test_mamba.py): the in_proj output 2e·T·d, A = −exp(A_log.float()) twice 8·d·N, the padded conv
    output e·b·(s + K − 1)·d, the SiLU output, softplus input and output 3e·T·d, x_proj's input e·T·d more when
    b > 1 (a copy of the transposed conv output; at b = 1 the reshape is a view of the SiLU output), the fp32
    discretised A and B 8·T·d·N, fp32 B and x 4·T·(N + d), the loop's s − 1 fp32 states and s + 1 model-dtype
    copies b·d·N·(4·(s − 1) + e·(s + 1)), fp32 D 4·d, silu(z) and the fp32 scan output (e + 4)·T·d, out_proj's input
    e·T·d, and the dt/B/C handling of the variant (_dt_bc_norm_torch)."""
    _, d, _ = _rank_widths(mb, tp)
    N, K, T = mb.d_state, mb.conv_kernel, b * s
    conv = 2 * e * T * d + e * b * (s + K - 1) * d + (3 + (b > 1)) * e * T * d
    scan = (2 * F32 * d * N + 2 * F32 * T * d * N + F32 * T * (N + d) + b * d * N * (F32 * (s - 1) + e * (s + 1))
            + F32 * d)
    return conv + scan + (e + F32) * T * d + e * T * d + _dt_bc_norm_torch(mb, T, e)


def _scan_states(b: int, s: int, d: int, N: int) -> int:
    """selective_scan_cuda.fwd's fp32 chunk states x, (b, d, ⌈s/2048⌉, 2N), saved for backward."""
    return F32 * b * d * ceil(s / SCAN_CHUNK) * 2 * N


def mamba1_saved_fused(mb, b: int, s: int, e: int, tp: int = 1) -> int:
    """Bytes one Mamba-1 mixer saves beyond its input with mamba_ssm and causal-conv1d installed, derived from source
    (unmeasured). Mamba and Falcon-Mamba call mamba_inner_fn: MambaInnerFn.forward (selective_scan_interface.py,
    snapshot e9594ce1, checkpoint_lvl 1: the conv output and delta recomputed) saves a contiguous copy of the
    transposed in_proj output 2e·T·d, x_dbl e·T·(R + 2N), contiguous B and C 2e·T·N, the fp32 scan chunk states and
    the pre-gate output e·T·d; out_proj runs inside. Jamba (JambaMambaMixer.forward) calls causal_conv1d_fn and
    selective_scan_fn one by one: CausalConv1dFn saves its channel-last input (the in_proj output, 2e·T·d),
    SelectiveScanFn u (the conv output) e·T·d and x_proj a copy of it when b > 1 (as on the PyTorch path), the torch
    RMSNorms on dt/B/C 4·T·(R + 2N) + 12·T + e·T·(R + 2N), dt_proj's input e·T·R, delta e·T·d, contiguous B and C
    2e·T·N and z (a strided view of in_proj's output) e·T·d, the chunk states, the pre-gate output e·T·d and
    out_proj's input copy e·T·d. Both: A and −A 8·d·N, fp32 D and delta_bias 8·d."""
    _, d, _ = _rank_widths(mb, tp)
    R, N, T = mb.dt_rank, mb.d_state, b * s
    params = 2 * F32 * d * N + 2 * F32 * d
    if mb.dt_bc_norm != "weighted":
        return 3 * e * T * d + e * T * (R + 2 * N) + 2 * e * T * N + _scan_states(b, s, d, N) + params
    norms = F32 * T * (R + 2 * N) + 3 * F32 * T + e * T * (R + 2 * N)
    return (7 + (b > 1)) * e * T * d + norms + e * T * R + 2 * e * T * N + _scan_states(b, s, d, N) + params


def saved(m, d, w) -> int:
    """What one Mamba mixer saves for backward beyond its input, for the local shapes `d`
    (calculator.memory.activations.Dims: micro-batch b, local sequence s, element size e, TP degree): the kernel
    path (Workload.mixer_kernels "fused", the default) or transformers' PyTorch fallback ("torch")."""
    mb = m.mamba
    if mb.version == 2:
        path = mamba2_saved_torch if w.mixer_kernels == "torch" else mamba2_saved_fused
    else:
        path = mamba1_saved_torch if w.mixer_kernels == "torch" else mamba1_saved_fused
    return path(mb, d.b, d.s, d.e, d.tp)


# ---- time model ----------------------------------------------------------------------------------------------------

def linear_flops_per_token(m) -> float:
    """Forward FLOPs per token of one Mamba mixer beyond its nn.Linear projections: the depthwise convolution
    2·K·conv_dim and the scan. Mamba-2's SSD chunked algorithm (Dao & Gu 2024 §6, as mamba_ssm computes it, scores
    per group): intra-chunk scores 2·G·Q·N, scores × x 2·Q·d, chunk states 2·N·d, output from states 2·N·d.
    Mamba-1's selective scan (Gu & Dao 2023 §3.3): ≈ 9·d·N (discretise, state update, C·h)."""
    mb = m.mamba
    conv = 2 * mb.conv_kernel * mb.conv_dim
    d, N = mb.d_inner, mb.d_state
    if mb.version == 2:
        return conv + 2 * mb.n_groups * mb.chunk_size * N + 2 * mb.chunk_size * d + 4 * N * d
    return conv + 9 * d * N


# ---- LoRA: what the frozen mixer no longer saves -------------------------------------------------------------------

READS_INPUT = frozenset({"in_proj"})  # the linears that read the layer's normalised input


def bypassed_adapters(m, w) -> frozenset[str]:
    """Linears whose LoRA adapters the forward never runs (they train nothing and save nothing): the fused Mamba-2
    path passes out_proj.weight to mamba_split_conv1d_scan_combined; Mamba-1 reads dt_proj.weight directly (Jamba
    on both paths: `self.dt_proj.weight @ time_step`; Mamba / Falcon-Mamba inside mamba_inner_fn) and, fused, passes
    out_proj.weight to mamba_inner_fn (not Jamba, whose out_proj is called as a module)."""
    mb, fused = m.mamba, w.mixer_kernels != "torch"
    if mb.version == 2:
        return frozenset({"out_proj"}) if fused else frozenset()
    if mb.dt_bc_norm == "weighted" or fused:
        return frozenset({"dt_proj"}) | (frozenset({"out_proj"}) if fused and mb.dt_bc_norm != "weighted" else
                                         frozenset())
    return frozenset()


def frozen_saved(m, d, w, adapted: frozenset[str]) -> int:
    """Bytes saved() no longer keeps when the mixer's parameters are frozen and only the `adapted` linears carry LoRA
    adapters, its input requiring grad. PyTorch path, measured with PEFT 0.21 on the CPU
    (validation/trace/lora_hybrid.py): Mamba-2 (Mamba2Mixer.torch_forward and its copies) the fp32 x that D·x keeps
    for D's gradient 4·T·d, the fp32 softplus(dt + dt_bias) and exp(A_log) 4·T·h + 4·h, the gated RMSNorm's fp32
    normalised copy 4·T·d, out_proj's input unless adapted e·T·d; Mamba-1 (Jamba's slow path) x_proj's and out_proj's
    inputs unless adapted e·T·d each, the weighted dt/B/C RMSNorms' normalised copies e·T·(R + 2N), and e·T·d + 4·d·N
    + 4·d inside the scan (what only dt_proj's bias, A_log and D read). Fused kernels (derived from source, not
    measured): their autograd Functions save the same tensors whether the weights are frozen or not, so only the
    torch ops around them change: exp(A_log.float()) 4·h (Mamba-2) or 4·d·N (Mamba-1); Jamba's torch RMSNorms and
    dt_proj.weight @ time_step's input e·T·R, and its x_proj / out_proj inputs as on the PyTorch path."""
    mb, e, T = m.mamba, d.e, d.T
    h, dl, _ = _rank_widths(mb, d.tp)
    fused = w.mixer_kernels != "torch"
    if mb.version == 2:
        if fused:
            return F32 * h
        out = F32 * T * dl + F32 * T * h + F32 * h + (F32 * T * dl if mb.gated_norm else 0)
        return out + (0 if "out_proj" in adapted else e * T * dl)
    R, N = mb.dt_rank, mb.d_state
    inputs = sum(e * T * dl for name in ("x_proj", "out_proj") if name not in adapted)
    norms = e * T * (R + 2 * N) if mb.dt_bc_norm == "weighted" else 0
    if fused:
        return F32 * dl * N + (norms + e * T * R + inputs if mb.dt_bc_norm == "weighted" else 0)
    return inputs + norms + e * T * dl + F32 * dl * N + F32 * dl
