"""Model states of training — weights, master weights, gradients, optimizer state — and the optimizer step's
transient working set. Each function computes one formula and cites it.
"""
from __future__ import annotations

from calculator.core.dtypes import nbytes
from calculator.core.workload import Workload


def weight_bytes(n_params: int, dtype: str) -> int:
    """Weights: N × bytes(dtype) (Transformer Math 101, 'Model parameters')."""
    return nbytes(n_params, dtype)


def master_weight_bytes(n_params: int, dtype: str | None) -> int:
    """fp32 master copy of the weights in mixed precision: N × 4 (Micikevicius et al. 2017 §3.1)."""
    return nbytes(n_params, dtype) if dtype else 0


def gradient_bytes(n_params: int, dtype: str) -> int:
    """Gradients: one per parameter, N × bytes(grad dtype) (Transformer Math 101, 'Gradients')."""
    return nbytes(n_params, dtype)


# Optimizer state elements per parameter (excluding AdamW's per-tensor step counter).
STATE_TENSORS: dict[str, int] = {"adamw": 2, "adamw-8bit": 2, "sgd": 0, "sgd-momentum": 1, "lion": 1,
                                 "adafactor": 0, "none": 0}
BNB_BLOCKSIZE = 256  # bitsandbytes blockwise 8-bit optimizer state: one fp32 absmax per 256 elements


def optimizer_state_bytes(n_params: int, n_tensors: int, optimizer: str, dtype: str,
                          factored_fraction: float = 1.0) -> int:
    """Optimizer state. AdamW: m and v (2 × N × bytes) + a 4-byte step per parameter tensor (torch/optim/adamw.py);
    8-bit AdamW: 2 × N × 1 B + one fp32 absmax per 256-element block per state (Dettmers et al. 2021);
    SGD-momentum and Lion: one buffer; Adafactor: row + column factors of each matrix (Shazeer & Stern 2018)."""
    if optimizer == "adamw":
        return 2 * nbytes(n_params, dtype) + 4 * n_tensors
    if optimizer == "adamw-8bit":
        return 2 * (n_params + 4 * -(-n_params // BNB_BLOCKSIZE)) + 4 * n_tensors
    if optimizer in ("sgd-momentum", "lion"):
        return nbytes(n_params, dtype)
    if optimizer == "adafactor":
        return nbytes(int(n_params * factored_fraction), dtype) + 4 * n_tensors
    return 0


BNB_MIN_8BIT_SIZE = 4096  # bitsandbytes keeps the state of smaller tensors in fp32 (min_8bit_size)
BNB_QMAP_BYTES = 2 * 256 * 4  # the signed and unsigned dynamic quantization maps, fp32, shared by all tensors


def bnb_adamw8bit_state_bytes(shapes: list[tuple[int, ...]]) -> int:
    """bitsandbytes AdamW8bit's exact state (bitsandbytes/optim/optimizer.py Optimizer8bit.init_state): per tensor
    two uint8 states and one fp32 absmax per 256-element block each (2·n + 8·⌈n/256⌉), or two fp32 states for a
    tensor under 4096 elements (8·n); plus the two 256-entry quantization maps; the step is a Python int.
    Measured (H200, Llama-3.2-1B): 2,510,833,664 B after step 1, 180 KB above this (the allocator's 512 B rounding)."""
    total = BNB_QMAP_BYTES
    for shape in shapes:
        n = 1
        for dim in shape:
            n *= dim
        total += 8 * n if n < BNB_MIN_8BIT_SIZE else 2 * n + 8 * -(-n // BNB_BLOCKSIZE)
    return total


def adafactor_factored_fraction(shapes: list[tuple[int, ...]]) -> float:
    """Elements Adafactor keeps per parameter: a matrix (…, r, c) keeps (…)·(r + c), a vector keeps itself
    (torch.optim.Adafactor row_var/col_var)."""
    kept = total = 0
    for shape in shapes:
        n = 1
        for d in shape:
            n *= d
        total += n
        if len(shape) >= 2:
            lead = n // (shape[-1] * shape[-2])
            kept += lead * (shape[-1] + shape[-2])
        else:
            kept += n
    return kept / total if total else 0.0


def optimizer_step_transient(n_params: int, largest_tensor: int, w: Workload, upcast_grads: bool = True,
                             cast_source: int = 0) -> int:
    """Temporaries of one optimizer step over `n_params` elements. foreach AdamW allocates a full-size
    sqrt(exp_avg_sq) list (torch/optim/adam.py _multi_tensor_adam); the for-loop path one tensor's worth; fused
    kernels none. With fp32 master weights the low-precision gradients are upcast to the master dtype before the
    step (not when the trained tensors have no master copy: `upcast_grads=False`). `cast_source`: a copy the cast
    reads from, freed before the optimizer runs (DeepSpeed ZeRO-3 flattens a sub-group's gradients first,
    stage3.py _prepare_fp32_grad_for_sub_group), so it and the optimizer's temporaries are never alive together."""
    p = w.precision
    state_dtype = "fp32" if w.optimizer == "adamw-8bit" else p.optimizer_states
    if w.optimizer in ("adamw", "adamw-8bit", "adafactor"):
        per_step = {"foreach": n_params, "for-loop": 2 * largest_tensor, "fused": 0}[w.optimizer_impl]
        sqrt_temp = nbytes(per_step, state_dtype)
    elif w.optimizer == "lion":
        per_step = {"foreach": n_params, "for-loop": largest_tensor, "fused": 0}[w.optimizer_impl]
        sqrt_temp = nbytes(per_step, state_dtype)
    else:
        sqrt_temp = 0
    upcast = 0
    if upcast_grads and p.master_weights and p.grads != p.master_weights and w.optimizer != "none":
        upcast = nbytes(n_params, p.master_weights)
    return upcast + (sqrt_temp + cast_source + abs(sqrt_temp - cast_source)) // 2  # the larger (ints or arrays)
