"""Model implementations: what a decoder layer and the loss head keep for backward depends on the code that runs
the model, not only on its shapes. One module per implementation, each with the same two functions:

    layer(m, w, d, moe) -> LayerActivations   saved tensors of one decoder layer (no / selective recompute)
    head(m, w, d) -> Head                      what the final norm and the loss keep, and the working set
                                               beyond it at the loss (forward or backward, whichever is larger)

- "hf": Hugging Face transformers eager modules (today's exact model, traced; calculator.activations).
- "liger": transformers + Liger kernels (liger-kernel 0.8.5 `_apply_liger_kernel_to_instance`): fused RMSNorm,
  SwiGLU/GeGLU, RoPE and the fused linear cross-entropy that never materialises the logits.
- "compile": every decoder block compiled (`layer.compile()`, torchtitan's way); the loss head stays eager.
- "megatron-te": Megatron-Core with Transformer Engine's fused LayerNormLinear / LayerNormMLP and Megatron's
  vocab-parallel cross-entropy.
"""
from __future__ import annotations

from functools import lru_cache
from types import ModuleType
from typing import NamedTuple

IMPLS: dict[str, str] = {
    "hf": "Hugging Face transformers (eager modules)",
    "liger": "transformers + Liger kernels (fused RMSNorm, SwiGLU, RoPE, linear cross-entropy)",
    "compile": "transformers, decoder blocks compiled (torch.compile)",
    "megatron-te": "Megatron-Core + Transformer Engine fused kernels",
}

# source key (calculator.sources) of each implementation's layer formulas
SOURCES: dict[str, str] = {"hf": "hf-llama", "liger": "liger-kernel", "compile": "torch-compile",
                           "megatron-te": "transformer-engine"}
FUSED_NOTES: dict[str, str] = {
    "norms": "fused RMSNorm: its input and an fp32 rstd per token (e·T·h + 4·T), not transformers' fp32 copies",
    "mlp": "fused SwiGLU/GeGLU: gate, up and the product (3·e·T·f); the activation output is recomputed",
}


class HeadTerm(NamedTuple):
    """One saved tensor group of the head: final norm, LM-head input, loss state."""

    key: str  # suffix of the term key, e.g. "final_norm" -> "logits.final_norm"
    label: str
    bytes: int
    formula: str
    substituted: str | tuple  # a str, or (template, *values) formatted when read (calculator.result.Term)
    source: str


class Head(NamedTuple):
    """The final norm and the loss: what they keep for backward and the largest working set around them."""

    saved: tuple[HeadTerm, ...]
    transient: int  # live at the head's peak beyond the saved tensors
    transient_label: str
    transient_formula: str
    transient_substituted: str | tuple
    transient_source: str
    # The first backward peak on its own (live beyond the saved tensors) and the parameters whose gradients a loop
    # that frees them after each step (zero_grad(set_to_none=True)) already holds there: none at transformers' loss
    # backward; Liger's is in the last layer's down projection, after the final norm's and that projection's.
    backward: int = 0
    grads_at_backward: int = 0


@lru_cache(maxsize=8)
def module(impl: str) -> ModuleType:
    """The module that models `impl` (imported lazily: one file per implementation)."""
    if impl == "hf":
        from calculator.impls import hf as mod
    elif impl == "liger":
        from calculator.impls import liger as mod
    elif impl == "compile":
        from calculator.impls import compiled as mod
    elif impl == "megatron-te":
        from calculator.impls import megatron_te as mod
    else:
        raise ValueError(f"unknown model implementation {impl!r}")
    return mod


def warnings(m, w) -> list[str]:
    """What the chosen implementation's estimate does not cover for this model and run."""
    out = []
    if w.impl == "liger":
        from calculator.impls.liger import patched
        if not patched(m):
            out.append(f"Liger kernels have no patch for model_type {m.model_type!r} (liger-kernel 0.8.5): "
                       "it runs as transformers wrote it, and so does this estimate")
    if w.impl == "megatron-te":
        out.append("Megatron-Core + Transformer Engine: term by term from TE's and Megatron's sources; not measured "
                   "on a GPU here")
    if m.is_moe or m.is_mla:
        out.append(f"{IMPLS[w.impl]}: MoE experts and MLA attention are counted as transformers keeps them "
                   "(only the dense layers' fused norms and activation are measured)")
    if w.finetune != "full":
        out.append(f"{IMPLS[w.impl]} with LoRA: the frozen base's fused norms and activation, PEFT's adapters; not "
                   "measured on a GPU")
    return out
