"""The architecture registry: a decoder layer is a token mixer plus a feed-forward (ModelSpec.layer_kind), each of a
kind, and each kind of token mixer other than softmax attention is one module here, read side by side with the
transformers module it mirrors (cited in each). A mixer module says:

    NAME, LABEL, SOURCE                      its kind, how the page names it, the source key of its formulas
    shapes(m) -> list[Shape]                 its parameter tensors
    linears(m) -> list[(name, in, out)]      its nn.Linear modules (LoRA targets, the time model)
    state_bytes(m, b, tp, dtype) -> int      what generate() keeps per sequence instead of a KV cache
    saved(m, d, w) -> int                    what one layer's mixer saves for backward

Softmax attention (full, sliding, MLA) and the dense / MoE feed-forwards are the engine's original layer
(calculator/model/parameters.py, calculator/memory/activations.py); a model is a list of layers by kind
(ModelSpec.layer_types), and a new architecture is a mapper (calculator/model/hf_archs.py) plus, at most, one new
kind here.

May import: calculator.model.spec and mixer_specs, calculator.core.
"""
from __future__ import annotations

from types import ModuleType

from calculator.model.architectures import gated_deltanet

MIXERS: dict[str, ModuleType] = {m.NAME: m for m in (gated_deltanet,)}
_LABELS = {"attention": "attention", "mla": "MLA", "none": "none"}


def mixer(name: str) -> ModuleType:
    """The module of a token-mixer kind (not softmax attention)."""
    return MIXERS[name]


def label(name: str) -> str:
    """How the page and the formulas name a kind of token mixer."""
    return _LABELS.get(name) or MIXERS[name].LABEL


def describe_mixers(m) -> str:
    """The model's kinds of token mixer, e.g. 'Gated DeltaNet and attention'."""
    kinds = sorted({m.layer_kind(i).mixer for i in range(m.num_hidden_layers)} - {"none"}, key=label)
    return " and ".join(label(k) for k in kinds)
