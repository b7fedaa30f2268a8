"""Short causal convolutions, the token mixer of LFM2, LFM2-MoE and LFM3 (Liquid AI), as transformers 5.23 builds it:
models/lfm2/modeling_lfm2.py Lfm2ShortConv (the same module in lfm2_moe and lfm3).

Per layer: in_proj maps the input to three hidden-wide streams B, C and x; the depthwise causal convolution of kernel
K (config conv_L_cache) runs over B·x; its output is gated by C and projected back by out_proj. Every tensor is
hidden_size wide; conv_bias adds a bias to all three modules. No recurrent state: generate() keeps the last K inputs
of the convolution per sequence.
"""
from __future__ import annotations

from pydantic import ConfigDict, Field

from calculator.core.hash_once import HashedOnce
from calculator.model.architectures.shapes import Shape, depthwise_conv1d, linear

NAME = "short_conv"
LABEL = "short causal convolutions (LFM2)"
SOURCE = "short-conv"

# causal-conv1d's CausalConv1dFn takes kernel widths 2 to 4 (csrc/causal_conv1d.cpp); a wider kernel (LFM3's 7) runs
# transformers' PyTorch fallback even when the package is installed (models/lfm3/modeling_lfm3.py says so)
FUSED_MAX_KERNEL = 4


class ShortConvSpec(HashedOnce):
    """The configuration of LFM2's short-convolution layers (Lfm2Config conv_L_cache and conv_bias)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    conv_kernel: int = Field(default=3, ge=1, le=1024, strict=True)  # conv_L_cache
    bias: bool = False  # conv_bias: in_proj, conv and out_proj each get a bias


def shapes(m) -> list[Shape]:
    """Every parameter tensor of one Lfm2ShortConv, in registration order: conv, in_proj, out_proj."""
    h, sc = m.hidden_size, m.short_conv
    return depthwise_conv1d(h, sc.conv_kernel, sc.bias) + linear(h, 3 * h, sc.bias) + linear(h, h, sc.bias)


def linears(m) -> list[tuple[str, int, int]]:
    """(module name, in_features, out_features) of its nn.Linear modules."""
    h = m.hidden_size
    return [("in_proj", h, 3 * h), ("out_proj", h, h)]


def state_bytes(m, batch: int, model_dtype_bytes: float) -> int:
    """What generate() keeps per layer for `batch` sequences (transformers cache_utils, the conv layer of
    DynamicCache(config)): conv_states [b, hidden_size, K] in the model dtype, all K columns (zero-padded on the left
    while fewer than K tokens were seen), whatever the length."""
    return int(batch * m.hidden_size * m.short_conv.conv_kernel * model_dtype_bytes)


def serving_state(m, tp: int) -> tuple[int, int]:
    """(conv elements, recurrent elements) per sequence on one TP rank as vLLM keeps them (vLLM 0.33
    model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator.short_conv_state_shape: (K − 1) × C / TP with
    C = hidden_size for LFM2 and LFM2-MoE; no recurrent state)."""
    return (m.short_conv.conv_kernel - 1) * m.hidden_size // tp, 0


def saved_torch(m, b: int, s: int, e: int, tp: int = 1) -> int:
    """Bytes one short-convolution mixer saves for backward on transformers' PyTorch path (causal_conv1d_fn's
    F.conv1d fallback), beyond its input: in_proj's output B|C|x (3·T·c, kept whole: B·x and C·y save views of it),
    the convolution's input B·x (T·c), its output before the causal slice, b·c·(s + K − 1) (C·y saves the slice, a
    view of it), and out_proj's input (T·c); c = hidden_size / TP, all in the model dtype.
    5·e·T·c + e·b·c·(s + K − 1). Measured on the CPU with real transformers code (tests/model/test_linear_mixers.py)."""
    c, K, T = m.hidden_size // tp, m.short_conv.conv_kernel, b * s
    return 5 * e * T * c + e * b * c * (s + K - 1)


def saved_fused(m, b: int, s: int, e: int, tp: int = 1) -> int:
    """The same with the GPU kernel transformers calls when causal-conv1d is installed (derived from source, not
    measured): CausalConv1dFn.forward saves only its input x and recomputes the output in backward
    (Dao-AILab/causal-conv1d causal_conv1d/causal_conv1d_interface.py, snapshot 0d2252d), so C·y keeps the unpadded
    output: 6·e·T·c. Kernels wider than 4 (LFM3) fall back to the PyTorch path."""
    if m.short_conv.conv_kernel > FUSED_MAX_KERNEL:
        return saved_torch(m, b, s, e, tp)
    return 6 * e * b * s * (m.hidden_size // tp)


def saved(m, d, w) -> int:
    """What one short-convolution mixer saves for backward beyond its input, for the local shapes `d`
    (calculator.memory.activations.Dims): the GPU kernel's (Workload.mixer_kernels "fused") or the PyTorch
    fallback's ("torch")."""
    path = saved_torch if w.mixer_kernels == "torch" else saved_fused
    return path(m, d.b, d.s, d.e, d.tp)


def linear_flops_per_token(m) -> float:
    """FLOPs per token of one short-convolution mixer beyond its projections (forward): B·x and C·y (h each) and the
    depthwise causal convolution (2·h·K), 2·h·K + 2·h (Lfm2ShortConv.forward)."""
    h, K = m.hidden_size, m.short_conv.conv_kernel
    return 2 * h * K + 2 * h


# ---- LoRA: what the frozen mixer no longer saves -------------------------------------------------------------------

READS_INPUT = frozenset({"in_proj"})  # the linears that read the layer's normalised input


def frozen_saved(m, d, w, adapted: frozenset[str]) -> int:
    """Bytes saved() no longer keeps when the mixer is frozen and only the `adapted` linears carry LoRA adapters,
    its input requiring grad (Lfm2ShortConv.forward; measured with PEFT 0.21 on the CPU,
    validation/trace/lora_hybrid.py): out_proj's input unless out_proj is adapted, e·T·c; the convolution keeps its
    input either way (F.conv1d and CausalConv1dFn save it for the input gradient)."""
    return 0 if "out_proj" in adapted else d.e * d.T * (m.hidden_size // d.tp)
