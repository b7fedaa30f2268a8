"""Element sizes of the number formats the calculator knows, and the one rounding rule for bytes.

Sizes are kept in bits so that 4-bit formats stay exact: bytes are always integers, rounded up per tensor
group (a 4-bit tensor of 3 elements takes 2 bytes).
"""
from __future__ import annotations

from typing import Literal

Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "nf4", "fp4", "nvfp4"]

DTYPE_BITS: dict[str, int] = {
    "fp32": 32,
    "bf16": 16,
    "fp16": 16,
    "fp8": 8,
    "int8": 8,
    "int4": 4,
    "nf4": 4,
    "fp4": 4,
    "nvfp4": 4,
}

DTYPE_LABELS: dict[str, str] = {
    "fp32": "FP32 (4 B)",
    "bf16": "BF16 (2 B)",
    "fp16": "FP16 (2 B)",
    "fp8": "FP8 (1 B)",
    "int8": "INT8 (1 B)",
    "int4": "INT4 (0.5 B)",
    "nf4": "NF4 (0.5 B)",
    "fp4": "FP4 (0.5 B)",
    "nvfp4": "NVFP4 (0.5 B + FP8 scale / 16)",
}

# Aliases accepted from Hugging Face configs (`torch_dtype`/`dtype`) and from users.
DTYPE_ALIASES: dict[str, str] = {
    "float32": "fp32", "float": "fp32", "f32": "fp32",
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "f16": "fp16",
    "float8": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "e4m3": "fp8",
}


def bytes_per_element(dtype: str) -> float:
    """Bytes one element of `dtype` occupies (display only; use `nbytes` for sizes)."""
    return DTYPE_BITS[dtype] / 8


def nbytes(numel: int, dtype: str) -> int:
    """Bytes of `numel` elements of `dtype`, rounded up to a whole byte."""
    return -(-numel * DTYPE_BITS[dtype] // 8)


def normalize_dtype(name: str) -> str:
    """Map 'bfloat16', 'BF16', 'float32' ... to the calculator's dtype keys; raise ValueError if unknown."""
    key = str(name).strip().lower()
    key = DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BITS:
        raise ValueError(f"unknown dtype {name!r}; use one of {', '.join(DTYPE_BITS)}")
    return key
