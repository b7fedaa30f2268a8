"""What every implementation module shares: the implementations' names and sources, and the head's result types
(HeadTerm, Head) each module's head() returns."""
from __future__ import annotations

from typing import NamedTuple

IMPLS: dict[str, str] = {
    "hf": "Hugging Face transformers (eager modules)",
    "liger": "transformers + Liger kernels (fused RMSNorm, SwiGLU, RoPE, linear cross-entropy)",
    "compile": "transformers, decoder blocks compiled (torch.compile)",
    "megatron-te": "Megatron-Core + Transformer Engine fused kernels",
}

# source key (calculator.core.sources) of each implementation's layer formulas
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
    substituted: str | tuple  # a str, or (template, *values) formatted when read (calculator.core.result.Term)
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
