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


def router_saved(T: int, E: int, k: int) -> int:
    """The router (router.py TopKRouter): fp32 scores over all experts (softmax or sigmoid) 4·T·E, the boolean
    routing map T·E, the fp32 top-k probabilities 4·T·k. The gating linear (moe_utils.py
    RouterGatingLinearFunction) saves its model-dtype input — the pre-MLP norm's output, already counted — and no
    fp32 copy of it even with moe_router_dtype fp32 ("avoiding saving the intermediate high precision tensors")."""
    return 4 * T * E + T * E + 4 * T * k


def experts_saved(R: int, h: int, f: int, gated: bool, e: int, input_bytes: int | None = None) -> int:
    """TEGroupedMLP over R rows: fc1 keeps its input (R·h, in the model dtype or quantized: `input_bytes`), the
    activation keeps fc1's output (R·2f gated, R·f plain) and the fp32 routing probability per row, fc2 keeps the
    activation's output (R·f, or quantized)."""
    fc1_in = input_bytes if input_bytes is not None else e * R * h
    return fc1_in + e * R * (2 * f if gated else f) + 4 * R + e * R * f


def weighted_activation_saved(R: int, f: int, gated: bool, e: int) -> int:
    """The routing probability multiplies the activation's output (megatron/core/transformer/mlp.py MLP.forward
    with per_token_scale, SequentialMLP's experts; experts.py TEGroupedMLP.forward bias_act_func): after an unfused
    activation (GELU, squared ReLU: `intermediate_parallel * permuted_probs`) autograd's multiply keeps its other
    operand, the activation's R × f output, beside the product that fc2 keeps; the gated SwiGLU takes the fused
    weighted_bias_swiglu_impl (fusions/fused_bias_swiglu.py WeightedSwiGLUFunction), which keeps only its input and
    the probabilities. e·R·f for a plain activation, 0 gated."""
    return 0 if gated else e * R * f


def unpermute_saved(kind: str, deterministic: bool, rows_back: int, R: int, h: int, e: int) -> int:
    """moe_utils.py unpermute, unfused: under torch.use_deterministic_algorithms (Megatron --deterministic-mode) it
    sums the expert rows back into their tokens with `output_tokens.index_add_(0, sorted_indices, permuted_tokens)`,
    and index_add's backward formula reads its source tensor (torch derivatives.yaml: `expand_as(source)`), so
    autograd keeps the rows it unpermutes: allgather (combine_preprocess) the R rows of the local experts' output,
    alltoall (combine_postprocess) the `rows_back` rows the combine all-to-all returns (T·k dropless). The
    non-deterministic scatter_add_ keeps only the indices; flex unpermutes inside its fused kernels."""
    if not deterministic or kind == "flex":
        return 0
    return e * (R if kind == "allgather" else rows_back) * h


def rows_returned(T: int, k: int, E: int, capacity_factor: float | None, pad: bool) -> int:
    """Rows the alltoall dispatcher permutes out of and returns to this rank (num_out_tokens, token_dispatcher.py
    preprocess): T·k dropless; with a capacity factor at most E·C (moe_utils.get_capacity), exactly E·C padded."""
    if capacity_factor is None:
        return T * k
    cap = E * math.ceil(T * k / E * capacity_factor)
    return cap if pad else min(T * k, cap)


def dispatcher_saved(kind: str, T: int, E: int, g: int, ep: int = 1) -> int:
    """What the dispatcher itself keeps for the combine: the allgather dispatcher (MoEAllGatherTokenDispatcher
    dispatch_postprocess) keeps the gathered routing map's local columns (`self.local_map`, T·g × E/ep booleans)
    and masked_select keeps its transposed copy as the mask (the gathered probabilities are freed); alltoall and
    flex keep index maps of a few bytes per row (negligible)."""
    if kind == "allgather" and g > 1:
        return 2 * T * g * (E // max(ep, 1))
    return 0


def allgather_buffer(kind: str, T: int, g: int, h: int, e: int) -> int:
    """The allgather dispatcher gathers the T × h tokens of the g = expert-TP × EP ranks with use_global_buffer=True
    (token_dispatcher.py token_dispatch → tensor_parallel/mappings.py _gather_along_first_dim): into Megatron's
    global memory buffer "mpu" (megatron/core/utils.py GlobalMemoryBuffer.get_tensor), allocated once at its
    largest request and kept for the run: e·T·g·h."""
    return e * T * g * h if kind == "allgather" and g > 1 else 0


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
