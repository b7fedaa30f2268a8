"""transformers with every decoder block compiled (`for layer in model.model.layers: layer.compile()`, the way
torchtitan applies torch.compile per TransformerBlock). AOTAutograd traces forward and backward of a block together
and the min-cut partitioner (torch/_functorch/partitioners.py, min_cut_rematerialization_partition) saves the
cheapest set of tensors, recomputing pointwise ops in the backward: the RMSNorm upcasts and the SiLU output are
recomputed, leaving exactly the fused layer of calculator.impls.fused — measured on an H200 to the byte per layer
(Llama-3.2-1B and Qwen3-0.6B, tests/golden_gpu impl-compile cases). The embedding, the final norm and the loss run
outside the compiled blocks, so the head is transformers' own (calculator.impls.hf).
"""
from __future__ import annotations

from calculator.impls import hf
from calculator.impls.fused import fused_layer, fused_rmsnorm_saved


def layer(m, w, d, kind):
    """One compiled decoder block: fused norms and gated activation (calculator.impls.fused)."""
    return fused_layer(m, w, d, kind)


def head(m, w, d):
    """The final norm and the loss are not compiled: transformers' head."""
    return hf.head(m, w, d)


def first_layer_without_input_grad(m, d) -> int:
    """PEFT without checkpointing: a compiled first block whose input needs no gradient saves nothing for its first
    norm (input + rstd)."""
    return fused_rmsnorm_saved(d.T, d.h_sp, d.e) if m.norm_type == "rmsnorm" else 0
