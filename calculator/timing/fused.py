"""The elementwise operations of a layer as fused kernels run them (Megatron-Core + Transformer Engine, Liger
kernels, torch.compile): each reads its inputs and writes its outputs once, in one launch, instead of the chain of
eager PyTorch kernels calculator.timing.ops counts for transformers' code.

Kernel by kernel (bytes per element, e = activation bytes):
- RMSNorm / LayerNorm: one kernel reading x and writing the normalised x, 2e (TE's LayerNormLinear fuses the norm
  into the GEMM's input: transformer_engine/pytorch/module/layernorm_linear.py; Liger's LigerRMSNorm);
- RoPE: TE's fused rotary embedding reads and writes q and k once, 2e (transformer_engine/pytorch/attention/rope.py,
  FusedRoPEFunc), not the 10e of rotate_half's five kernels;
- the gated activation: one SwiGLU kernel reading gate and up, writing the product, 3e·T·f (TE's `swiglu`,
  Liger's LigerSiLUMulFunction); GELU 2e;
- dropout fuses into Megatron's bias-dropout-add (megatron/core/fusions/fused_bias_dropout.py): no traffic of its own;
- MoE: the token permutation and un-permutation with the routing weights as one gather / scatter each (TE
  moe_permute / moe_unpermute, used by Megatron's alltoall dispatcher): e·(T·h + T·k·h) each way, and the experts'
  fused gated activation 3e·T·k·f.
"""
from __future__ import annotations

from calculator.model.spec import ModelSpec
from calculator.timing.ops import routed_pairs
from calculator.timing.roofline import Op

FUSED_IMPLS = ("megatron-te", "liger", "compile")
NORMS = ("Norms", "Q/K norms", "Latent norms", "Final norm")


def fused_bytes(op: Op, m: ModelSpec, d, expert_tp: int) -> Op | None:
    """The forward `op` as a fused kernel (None: dropped, fused into a neighbour); unchanged when not elementwise
    work a fusion removes."""
    e = d.e
    if op.name in NORMS:
        elements = op.flops / 4  # R.norms counts 4 FLOPs per element
        return op._replace(bytes=2 * e * elements, host_ops=min(op.host_ops, 1) if op.host_ops else 0,
                           bwd_host_ops=1 if op.host_ops else 0, formula="2e per element (one fused kernel)",
                           source="transformer-engine")
    if op.name == "RoPE":
        return op._replace(bytes=op.bytes / 5, host_ops=1, bwd_host_ops=1, formula="2e per element of q and k (fused)",
                           source="transformer-engine")
    if op.name.endswith("activation"):  # gated 5e·T·f → 3e; GPT-2's gelu_new 20e·T·f → 2e; plain 2e stays
        share = 3 / 5 if m.gated_mlp else (1 / 10 if m.hidden_act == "gelu_new" else 1.0)
        return op._replace(bytes=op.bytes * share, host_ops=1, bwd_host_ops=1,
                           formula=("3e" if m.gated_mlp else "2e") + "·T·f (fused)", source="transformer-engine")
    if op.name == "Dropout":
        return None
    if op.name == "Expert dispatch, gate and combine":
        pairs, real = routed_pairs(m, d.T)  # LongCat-Flash: only the real experts' picks are gated
        f_e = m.expert_intermediate_size // expert_tp
        nbytes = 2 * e * (d.T * d.h + pairs * d.h) + routed_activation_bytes(m, e, real, f_e)
        return op._replace(bytes=nbytes, host_ops=4, bwd_host_ops=4,
                           formula="permute + unpermute e·(T·h + T·k·h) each, fused activation 3e·T·k·f",
                           source="transformer-engine")
    return op


def routed_activation_bytes(m: ModelSpec, e: float, rows: float, f_e: int) -> float:
    """The routed experts' fused (probability-weighted) activation over `rows` (token, expert) pairs: read and
    write, 3e·rows·f gated (gate and up read, one written), 2e plain."""
    return (3 if m.gated_mlp else 2) * e * rows * f_e


def fuse(ops: list[Op], m: ModelSpec, d, expert_tp: int) -> list[Op]:
    """A layer's forward operations with their elementwise work as fused kernels run it."""
    out = []
    for op in ops:
        got = fused_bytes(op, m, d, expert_tp)
        if got is not None:
            out.append(got)
    return out
