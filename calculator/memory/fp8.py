"""FP8 / FP4 training recipes of Transformer Engine, as Megatron-Core runs them (`--fp8-format hybrid
--fp8-recipe delayed | tensorwise | blockwise | mxfp8`, `--fp4-recipe nvfp4`): what is kept in which format, what is
cached from one micro-batch to the next and what is saved for backward. Sources (key "te-fp8"):
transformer_engine/pytorch/quantization.py (recipes, support checks), module/base.py (`_fp8_workspaces`: a TE
linear quantizes its weight on the first micro-batch of a step and keeps the copy), module/linear.py and
layernorm_linear.py (the GEMM input is saved quantized, column-wise data only where the weight gradient needs it),
tensor/float8_tensor.py, mxfp8_tensor.py, float8_blockwise_tensor.py, nvfp4_tensor.py (storage layouts), at
NVIDIA/TransformerEngine d0067d0d.

What stays in the model dtype: the parameters (unless `--fp8-param-gather` keeps them in FP8), fp32 main grads,
master weights and Adam state, the norms' inputs and statistics, attention's q, k, v and output, the residual
stream and the loss. What becomes FP8/FP4: every TE GEMM's inputs — the weight copy (cached) and the activation
saved for the weight gradient.
"""
from __future__ import annotations

from fractions import Fraction

from calculator.core.errors import InputError

# Compute capability of each NVIDIA GPU of the catalogue (NVIDIA, "CUDA GPUs - Compute Capability",
# https://developer.nvidia.com/cuda-gpus); AMD GPUs have none.
COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "a100-40gb": (8, 0), "a100-80gb": (8, 0), "a10g": (8, 6), "rtx-a6000": (8, 6), "l40s": (8, 9), "l4": (8, 9),
    "rtx-4090": (8, 9), "h100-sxm": (9, 0), "h100-pcie": (9, 0), "h100-nvl": (9, 0), "h200": (9, 0),
    "b200": (10, 0), "gb200": (10, 0), "b300": (10, 3), "gb300": (10, 3), "rtx-5090": (12, 0),
    "rtx-pro-6000-blackwell": (12, 0), "dgx-spark": (12, 1), "v100-16gb": (7, 0), "v100-32gb": (7, 0),
}


def compute_capability(gpu_id: str | None) -> tuple[int, int] | None:
    return COMPUTE_CAPABILITY.get(gpu_id) if gpu_id else None


RECIPES: dict[str, str] = {
    "none": "bf16 / fp16 GEMMs",
    "delayed": "FP8 delayed scaling (per-tensor scale from an amax history; TE DelayedScaling)",
    "current": "FP8 current scaling (per-tensor scale from this tensor's amax; TE Float8CurrentScaling, "
               "Megatron --fp8-recipe tensorwise)",
    "blockwise": "FP8 blockwise scaling (fp32 scale per 128×128 weight block, per 1×128 activation block)",
    "mxfp8": "MXFP8 (E8M0 scale per 32 elements; Blackwell)",
    "nvfp4": "NVFP4 (FP4 E2M1, E4M3 scale per 16 elements + fp32 tensor scale; Blackwell)",
}
AMAX_HISTORY_LEN = 1  # Megatron-LM --fp8-amax-history-len default (megatron/training/arguments.py)
FP8_TENSORS_PER_MODULE = 5  # TE fp8_meta: forward input, weight, output; backward grad output, grad input


def bytes_per_element(recipe: str, weight: bool) -> Fraction:
    """Bytes per element of one quantized copy (one direction, row- or column-wise) with its scales:
    per-tensor FP8 1 B (one fp32 scale per tensor, negligible); blockwise 1 B + an fp32 scale per 128×128 weight
    block or 1×128 activation block; MXFP8 1 B + one E8M0 byte per 32; NVFP4 ½ B + one E4M3 byte per 16."""
    if recipe in ("delayed", "current"):
        return Fraction(1)
    if recipe == "blockwise":
        return 1 + Fraction(4, 128 * 128 if weight else 128)
    if recipe == "mxfp8":
        return 1 + Fraction(1, 32)
    if recipe == "nvfp4":
        return Fraction(1, 2) + Fraction(1, 16)
    raise ValueError(recipe)


def needs_transpose(recipe: str, gpu_id: str | None) -> bool:
    """Whether a weight needs a column-wise (transposed) copy beside the row-wise one for the backward GEMMs:
    per-tensor FP8 on Hopper and Ada runs only TN GEMMs, so TE keeps the transpose; Blackwell takes any layout.
    Block-scaled recipes always keep both directions (their scales run along one axis)."""
    if recipe in ("blockwise", "mxfp8", "nvfp4"):
        return True
    cc = compute_capability(gpu_id)
    return cc is None or cc[0] < 10


def weight_cache_bytes(recipe: str, n_linear: int, gpu_id: str | None, param_gather: bool) -> int:
    """TE's cached quantized weights (module/base.py `_fp8_workspaces`, filled on the first micro-batch of a step and
    kept): row-wise + column-wise copies of every TE linear weight on this GPU. With `--fp8-param-gather` the
    parameter itself is the row-wise FP8 copy (counted with the weights), so only the column-wise one is extra."""
    if recipe == "none":
        return 0
    per = bytes_per_element(recipe, weight=True)
    copies = (0 if param_gather else 1) + (1 if needs_transpose(recipe, gpu_id) else 0)
    return int(n_linear * per * copies)


def param_bytes(recipe: str, n_linear: int) -> int:
    """`--fp8-param-gather`: the TE linear weights are stored quantized (row-wise), not in bf16."""
    return int(n_linear * bytes_per_element(recipe, weight=True))


def scaling_state_bytes(recipe: str, te_modules: int) -> int:
    """Per TE module: delayed scaling keeps an fp32 amax history [history_len, 5] and scale / scale_inv [5]
    (module/base.py init_fp8_meta_tensors); current scaling keeps only the scales. Block-scaled recipes keep
    their scales with each tensor (counted there)."""
    if recipe == "delayed":
        return te_modules * 4 * FP8_TENSORS_PER_MODULE * (AMAX_HISTORY_LEN + 2)
    if recipe == "current":
        return te_modules * 4 * FP8_TENSORS_PER_MODULE * 2
    return 0


def saved_input_bytes(recipe: str, elements: int) -> int:
    """One GEMM input saved for the weight gradient as a quantized tensor (column-wise data and its scales)."""
    return int(elements * bytes_per_element(recipe, weight=False))


def check(w) -> None:
    """Refuse a recipe the chosen GPU cannot run (transformer_engine/pytorch/quantization.py check_*_support):
    MXFP8 needs compute capability 10.x (Blackwell data-center parts; not 12.x), NVFP4 10.0 or higher, blockwise
    FP8 9.0+, per-tensor FP8 8.9+. AMD GPUs run none of TE's recipes here."""
    if w.fp8_param_gather and w.fp8 == "none":
        raise InputError("fp8_param_gather", "fp8_param_gather keeps the parameters in FP8: choose an fp8 recipe "
                                             "too, or turn it off")
    if w.fp8 == "none" or not w.gpu:
        return
    cc = compute_capability(w.gpu)
    need = {"delayed": (8, 9), "current": (8, 9), "blockwise": (9, 0), "mxfp8": (10, 0), "nvfp4": (10, 0)}[w.fp8]
    blackwell = w.fp8 in ("mxfp8", "nvfp4")
    ok = cc is not None and cc >= need and not (w.fp8 == "mxfp8" and cc[0] >= 12)
    if not ok:
        what = (f"{w.fp8} needs a Blackwell data-center GPU (compute capability 10.x{'' if w.fp8 == 'mxfp8' else '+'})"
                if blackwell else f"fp8 {w.fp8} needs compute capability {need[0]}.{need[1]} or higher")
        has = f"{w.gpu} has {cc[0]}.{cc[1]}" if cc else f"{w.gpu} is not an NVIDIA GPU Transformer Engine runs on"
        alt = "choose b200 / gb200 / b300 / gb300, or fp8 'current' / 'blockwise'" if blackwell else "choose another GPU or fp8 'none'"
        raise InputError("fp8", f"{what}; {has}: {alt}")


GEMM_RECIPES = ("delayed", "current", "blockwise", "mxfp8")  # Workload.fp8 values that run the linears' GEMMs in FP8


def float8_gemms(w) -> bool:
    """Whether the linears' GEMMs run in FP8 (Workload.fp8 one of GEMM_RECIPES): TE's recipes, or torchao's
    Float8Linear (tensorwise = current) under torchtitan, whose GEMM is aten._scaled_mm."""
    return getattr(w, "fp8", "none") in GEMM_RECIPES
