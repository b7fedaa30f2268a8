"""The share of a GPU's datasheet peak its GEMMs reach, per GPU generation and GEMM dtype.

TimingInputs.matmul_efficiency (0.80) is the Hopper BF16 figure fitted on measured H200 training steps
(validation/CALIBRATION.md, "Step time"); the other generations and dtypes are named constants fitted on published
multi-GPU runs of Megatron-Bridge's performance tables (validation/published/throughput/ --fit: the fit rows and
the held-out rows are listed there), each a share of that dtype's own dense peak. A user's matmul_efficiency scales
them all by matmul_efficiency / 0.80.

Why per dtype: an FP8 GEMM reaches a smaller share of its (twice as high) peak than a BF16 one, and the FP8 recipe
adds the casts of its inputs (Transformer Engine casts each GEMM input and keeps a transposed copy for the
backward: NVIDIA's FP8 primer, "Transformer Engine ... FP8 ... casting overhead"); why per generation: Blackwell's
5th-generation tensor cores reach a different share of a peak 2.3× Hopper's (Megatron-Bridge's own tables: the
same Llama-3 70B layout at 2.3–2.6× the TFLOP/s of H100, not 2.3× the MFU).

The fused attention kernel's softmax exponentials run on the special function units, whose rate did not grow with
the tensor cores from Hopper to Blackwell and doubled on Blackwell Ultra (exp_rate): priced apart, so the same
attention efficiency serves B200 and B300 / GB300.
"""
from __future__ import annotations

REFERENCE = 0.80  # TimingInputs.matmul_efficiency's default: Hopper BF16 (the H200 fit)

GENERATION = {"h100-sxm": "hopper", "h100-pcie": "hopper", "h100-nvl": "hopper", "h200": "hopper",
              "b200": "blackwell", "gb200": "blackwell", "b300": "blackwell", "gb300": "blackwell"}

# share of the dense peak of the GEMM dtype (fitted: validation/published/throughput/ --fit)
GEMM_EFFICIENCY = {
    ("hopper", "bf16"): 0.80,
    ("hopper", "fp8"): 0.558,
    ("blackwell", "bf16"): 0.356,  # its rows are all MoE: refit with the MoE host time (--fit-moe, moe_sync)
    ("blackwell", "fp8"): 0.555,
}


def matmul_efficiency(gpu_id: str | None, dtype: str, user: float) -> float:
    """The GEMM efficiency on this GPU and dtype: the generation's constant × user / REFERENCE (the user's
    matmul_efficiency at its default leaves the constants as fitted); GPUs of other generations: `user`."""
    gen = GENERATION.get(gpu_id or "")
    base = GEMM_EFFICIENCY.get((gen, "fp8" if dtype == "fp8" else "bf16")) if gen else None
    if base is None:
        return user
    return base if user == REFERENCE else min(1.0, base * user / REFERENCE)


# Share of the BF16 peak Transformer Engine's fused attention (cuDNN's flash attention: FlashAttention-3-class
# kernels on Hopper, the Blackwell cuDNN kernels) reaches, per generation, for Megatron-Core's layers (impl
# megatron-te); transformers' SDPA / FlashAttention-2 keeps TimingInputs.attention_efficiency (the H200 fit).
# Fitted with the GEMM efficiencies (validation/published/throughput/ --fit), with the softmax's exponentials priced
# apart at the SFUs' rate (exp_rate below): the share is that of the kernel's tensor-core work alone.
FUSED_ATTENTION_EFFICIENCY = {"hopper": 0.35, "blackwell": 0.609}
REFERENCE_ATTENTION = 0.485  # TimingInputs.attention_efficiency's default


def attention_efficiency(gpu_id: str | None, impl: str, user: float) -> float:
    """The attention kernel's efficiency: the generation's fused-attention constant for Megatron-Core + TE (× user
    / REFERENCE_ATTENTION), else `user`."""
    gen = GENERATION.get(gpu_id or "")
    if impl != "megatron-te" or gen not in FUSED_ATTENTION_EFFICIENCY:
        return user
    base = FUSED_ATTENTION_EFFICIENCY[gen]
    return base if user == REFERENCE_ATTENTION else min(1.0, base * user / REFERENCE_ATTENTION)


# The softmax's exponentials run on the SMs' special function units (MUFU.EX2), not on the tensor cores: MUFU
# throughput per SM per clock against the dense BF16 tensor-core FLOPs per SM per clock. Hopper: 16 exponentials
# and 4,096 FLOPs (H100 SXM: 989.4 TFLOP/s = 4,096 × 132 SMs × 1.83 GHz); Blackwell (B200): 16 and 8,192 — the
# tensor cores doubled, the MUFU did not (Zadouri et al. 2026, FlashAttention-4, arXiv 2603.05451, §2 "asymmetric
# hardware scaling": 8,192 ops/clk/SM MMA, 16 ops/clk/SM MUFU); Blackwell Ultra (B300, GB300) doubles the SFU
# throughput (NVIDIA technical blog, "Making Softmax More Efficient with NVIDIA Blackwell Ultra", and "Inside NVIDIA
# Blackwell Ultra": 2× attention-layer acceleration). Exponentials per second = dense BF16 FLOP/s × this ratio.
SFU_EXP_PER_TENSOR_FLOP = {"hopper": 16 / 4096, "blackwell": 16 / 8192, "blackwell-ultra": 32 / 8192}
BLACKWELL_ULTRA = frozenset({"b300", "gb300"})


def exp_rate(gpu_id: str | None, impl: str, dense_bf16_flops: float | None) -> float:
    """Softmax exponentials per second the attention kernel's SFUs issue on this GPU (dense BF16 FLOP/s ×
    SFU_EXP_PER_TENSOR_FLOP), for Megatron-Core + TE's fused attention (impl megatron-te: the kernels whose
    efficiency FUSED_ATTENTION_EFFICIENCY is fitted together with this term); 0.0 (no separate term) otherwise.
    The exponentials do not overlap the kernel's two GEMMs: the second GEMM (P·V) of a tile waits for that tile's
    softmax (the Blackwell Ultra softmax blog: "the Tensor Cores ... idle while waiting for the SFU"), so an
    attention kernel takes FLOPs / (peak × η) + exponentials / exp_rate (calculator.timing.roofline.gpu_seconds)."""
    gen = GENERATION.get(gpu_id or "")
    if impl != "megatron-te" or gen is None or not dense_bf16_flops:
        return 0.0
    key = "blackwell-ultra" if gpu_id in BLACKWELL_ULTRA else gen
    return dense_bf16_flops * SFU_EXP_PER_TENSOR_FLOP[key]
