"""LongCat-Flash's MoE with zero-computation experts (transformers models/longcat_flash/modeling_longcat_flash.py,
5.23): what its router and its experts save for backward. Pure arithmetic; nothing here imports the rest of the
engine (calculator.model.variants.moe_saved calls it for a VariantSpec with zero_experts).

The router (LongcatFlashTopkRouter) scores n routed + z zero experts; the experts (LongcatFlashExperts.forward) loop
over the experts hit. A routed pair sent to one of the n real experts runs SwiGLU on its gathered token; one sent to
a zero expert (an identity) is only scaled by its routing weight. Which experts a token picks is decided by the data;
LongCat-Flash trains its expert-bias controller (e_score_correction_bias) towards equal load on all n + z experts, so
the engine takes that balance: of the S = T·k pairs, S·n / (n + z) reach real experts (k·n / (n + z) real experts per
token: 8 of LongCat-Flash's top-12 over 512 + 256). A traced tiny model with random weights routes some other share;
tests/model/mappers/test_longcat.py holds the per-pair terms to the trace at the share it routed.
"""
from __future__ import annotations


def router_saved(T: int, k: int, experts: int, h: int) -> int:
    """LongcatFlashTopkRouter.forward: F.linear(x.float(), weight.float()) keeps the fp32 input copy 4·T·h and the
    fp32 copy of the model-dtype classifier weight 4·(n + z)·h; softmax keeps its fp32 output 4·T·(n + z); gather
    keeps topk's int64 indices 8·T·k (get_topk_indices runs under no_grad; the scaling by routed_scaling_factor keeps
    nothing)."""
    return 4 * T * h + 4 * experts * h + 4 * T * experts + 8 * T * k


def pair_saved(h: int, e: int) -> int:
    """What every routed pair keeps, whichever expert it reaches: its gathered token (hidden_states[token_idx], kept
    by the expert's first op: the linear, or the identity's product with its weight) e·h, the weighted output cast
    back to the model dtype (kept by index_add_) e·h, its fp32 routing weight (top_k_weights[token_idx,
    selection_idx]) 4 and torch.where's (selection_idx, token_idx), two int64 columns of one [n, 2] tensor, 16."""
    return 2 * e * h + 4 + 16


def real_pair_saved(f: int, h: int, e: int) -> int:
    """What a pair reaching a real expert keeps beyond pair_saved: the gate_up output (SiLU keeps the gate, a view of
    it) e·2f, SiLU's output and the product (down_proj's input) e·f each, down_proj's output (kept by the product with
    the fp32 weight, whose output is fp32) e·h."""
    return e * (4 * f + h)


def moe_saved(T: int, k: int, n: int, z: int, f: int, h: int, e: int) -> int:
    """The router, every pair, and the real pairs' expert work under balanced routing (module docstring): S·n / (n +
    z) of the S = T·k pairs (rounded down)."""
    S = T * k
    return router_saved(T, k, n + z, h) + S * pair_saved(h, e) + S * n * real_pair_saved(f, h, e) // (n + z)


def active_routed_params(k: int, n: int, z: int, f: int, h: int) -> int:
    """Routed-expert parameters a token passes through under balanced routing: k·n / (n + z) real experts, each its
    2f rows of gate_up_proj and its down_proj, 3·f·h (the identities hold none; gate_up_proj's z rows beyond the real
    experts, which transformers allocates, are never read)."""
    return k * n * 3 * f * h // (n + z)


def real_pairs(T: int, k: int, n: int, z: int) -> float:
    """Routed pairs reaching a real expert under balanced routing, S·n / (n + z)."""
    return T * k * n / (n + z)
