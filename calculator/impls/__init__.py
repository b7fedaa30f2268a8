"""Model implementations: what a decoder layer and the loss head keep for backward depends on the code that runs
the model, not only on its shapes. One module per implementation, each with the same two functions:

    layer(m, w, d, kind) -> LayerActivations  saved tensors of one kind of decoder layer (a LayerKind: its mixer
                                               and feed-forward; no / selective recompute)
    head(m, w, d) -> Head                      what the final norm and the loss keep, and the working set
                                               beyond it at the loss (forward or backward, whichever is larger)

- "hf": Hugging Face transformers eager modules (today's exact model, traced; calculator.memory.activations).
- "liger": transformers + Liger kernels (liger-kernel 0.8.5 `_apply_liger_kernel_to_instance`): fused RMSNorm,
  SwiGLU/GeGLU, RoPE and the fused linear cross-entropy that never materialises the logits.
- "compile": every decoder block compiled (`layer.compile()`, torchtitan's way); the loss head stays eager.
- "megatron-te": Megatron-Core with Transformer Engine's fused LayerNormLinear / LayerNormMLP and Megatron's
  vocab-parallel cross-entropy; te_attention.py (which q, k, v TE's attention keeps, its backend) and
  unsplit_block.py (the caching allocator's unsplit rest under the kept qkv output) serve it.

May import: calculator.memory, calculator.model, calculator.core.
"""
from __future__ import annotations

from functools import lru_cache
from types import ModuleType

from calculator.impls.common import FUSED_NOTES, IMPLS, SOURCES, Head, HeadTerm  # noqa: F401 (re-exported)


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
        out.append("Megatron-Core + Transformer Engine: term by term from TE's and Megatron's sources, held to "
                   "Megatron-LM's own CI peaks (docs/validation.md); not measured on a GPU here")
        if w.offload_modules:
            from calculator.impls.megatron_offload import UNDER_NOTE
            out.append(f"fine-grained activation offloading: {UNDER_NOTE}")
    elif m.is_moe or m.is_mla:  # the fused kernels of liger / compile cover the dense layers only
        out.append(f"{IMPLS[w.impl]}: MoE experts and MLA attention are counted as transformers keeps them "
                   "(only the dense layers' fused norms and activation are measured)")
    if w.finetune != "full":
        out.append(f"{IMPLS[w.impl]} with LoRA: the frozen base's fused norms and activation, PEFT's adapters; not "
                   "measured on a GPU")
    return out
