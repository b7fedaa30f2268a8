"""A Megatron-Core MoE layer's tokens: how many rows the experts of one GPU receive (dropless, or limited by a
capacity factor, with routing imbalance as an input), what the router, the token dispatcher and the grouped
experts save for backward, and the dispatcher's working set while it runs. Source key "megatron-moe-dispatch":
megatron/core/transformer/moe/token_dispatcher.py, moe_utils.py (permute, get_capacity), router.py, experts.py
(TEGroupedMLP) at NVIDIA/Megatron-LM d98e8a64.

Symbols: T tokens entering the MoE layer on this GPU (its sequence-parallel share), k experts per token, E
experts, g = ep × expert-tp ranks exchanging tokens, R rows the local experts compute, h hidden, f expert width on
this GPU, e bytes per activation element.
"""
from __future__ import annotations

import math

from calculator.core.errors import InputError


def expert_rows(T: int, k: int, E: int, etp: int, imbalance: float, capacity_factor: float | None,
                pad: bool) -> int:
    """Rows the local experts of the most loaded GPU process. Dropless: the T·k rows of its share, times the
    imbalance (max tokens per expert over the mean: the hot experts may all sit on one GPU), gathered over expert
    TP. With a capacity factor each source rank keeps at most C = ceil(T·k/E × factor) rows per expert
    (moe_utils.get_capacity; the router drops the rest) — exactly C each with pad-to-capacity — so the local
    experts receive E · etp · min(mean × imbalance, C) rows."""
    mean = T * k / E
    if capacity_factor is None:
        return math.ceil(T * k * etp * imbalance)
    cap = math.ceil(mean * capacity_factor)
    per = cap if pad else min(math.ceil(mean * imbalance), cap)
    return E * etp * per


def router_saved(T: int, E: int, k: int, h: int, fp32_router: bool) -> int:
    """The router (router.py TopKRouter): fp32 scores over all experts (softmax or sigmoid) 4·T·E, the boolean
    routing map T·E, the fp32 top-k probabilities 4·T·k; with moe_router_dtype fp32 the linear runs on an fp32 copy
    of its input, which it saves (4·T·h)."""
    return 4 * T * E + T * E + 4 * T * k + (4 * T * h if fp32_router else 0)


def experts_saved(R: int, h: int, f: int, gated: bool, e: int, input_bytes: int | None = None) -> int:
    """TEGroupedMLP over R rows: fc1 keeps its input (R·h, in the model dtype or quantized: `input_bytes`), the
    activation keeps fc1's output (R·2f gated, R·f plain) and the fp32 routing probability per row, fc2 keeps the
    activation's output (R·f, or quantized)."""
    fc1_in = input_bytes if input_bytes is not None else e * R * h
    return fc1_in + e * R * (2 * f if gated else f) + 4 * R + e * R * f


def dispatcher_saved(kind: str, T: int, E: int, g: int) -> int:
    """What the dispatcher itself keeps for the combine: the allgather dispatcher gathers the routing map and the
    probabilities of all g ranks (T·g·E bytes + 4·T·g·E); alltoall and flex keep index maps of a few bytes per row
    (negligible)."""
    if kind == "allgather" and g > 1:
        return 5 * T * g * E
    return 0


def dispatch_working_set(kind: str, T: int, k: int, h: int, e: int, R: int, g: int) -> int:
    """Bytes allocated while one MoE layer dispatches, beyond what it saves: alltoall permutes the T·k rows, receives
    R rows and sorts them by local expert (the permuted and received copies are freed after); allgather gathers
    every rank's T tokens (T·g·h) and permutes R rows out of them; flex (DeepEP / HybridEP) receives into its own
    communication buffers (outside PyTorch's allocator) and permutes R rows."""
    if kind == "allgather":
        return e * T * g * h
    if kind == "flex":
        return e * R * h
    return e * (T * k + R) * h


def check(w) -> None:
    if w.moe_capacity_factor is not None and w.moe_capacity_factor <= 0:
        raise InputError("moe_capacity_factor", f"the expert capacity factor must be above 0 (got "
                                                f"{w.moe_capacity_factor:g}): e.g. 1.0, or leave it unset for "
                                                f"dropless routing")
    if w.moe_imbalance < 1:
        raise InputError("moe_imbalance", f"routing imbalance is the most loaded expert's tokens over the mean, "
                                          f"at least 1 (got {w.moe_imbalance:g}): 1 is perfectly balanced")
