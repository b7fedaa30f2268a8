"""Dense feed-forwards whose width changes layer by layer: Nemotron-NAS (DeciLM: Llama-3.3-Nemotron-Super-49B,
Llama-3.1-Nemotron-Ultra-253B), whose block_configs give each layer its own ffn_mult.

The layer is still the engine's dense SwiGLU MLP (transformers' LlamaMLP with a per-layer intermediate_size, as
modeling_decilm.py of huggingface.co/nvidia/Llama-3_3-Nemotron-Super-49B-v1 and vLLM's
model_executor/models/nemotron_nas.py DeciLMDecoderLayer build it); only its width differs. ModelSpec.ffn_widths
holds each layer's width and ModelSpec.intermediate_size the widest, which is what a peak over layers reads (the
engines' profile run, generate()'s working set). Each distinct width is a kind of its own (LayerKind.slot: its
index among the distinct widths, narrowest first) and ModelSpec.ffn_of(kind) is the model as that layer computes:
its intermediate_size the layer's width. Whatever sums over layers (parameters, saved activations, LoRA adapters,
FLOPs) reads the width through that view.

May import: calculator.core.
"""
from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=256)
def distinct(widths: tuple[int, ...]) -> tuple[int, ...]:
    """The distinct widths, narrowest first: a layer's slot is its width's index here."""
    return tuple(sorted(set(widths)))


def slot(m, i: int) -> int:
    """The kind slot of layer i: its width's index among the model's distinct widths."""
    return distinct(m.ffn_widths).index(m.ffn_widths[i])


@lru_cache(maxsize=256)
def view(m, index: int):
    """The model as a layer of the slot-`index` width computes: intermediate_size that width, no per-layer table."""
    return m.model_copy(update={"intermediate_size": distinct(m.ffn_widths)[index], "ffn_widths": None})


def layer_view(m, d, kind):
    """(the model, the local dims) as a layer of `kind` computes: for a per-layer width, ModelSpec.ffn_of's view and
    the dims' f (that width over TP); else both as they are. `d`: calculator.memory.activations.Dims."""
    view = m.ffn_of(kind)
    return (m, d) if view is m else (view, d._replace(f=view.intermediate_size // d.tp))


def check(m) -> None:
    """A table of one width per layer whose widest is intermediate_size (ValueError otherwise); not beside per-layer
    heads (swa_num_* fields) or Gemma 3n / 4's own per-layer table, whose kinds use the slot for themselves."""
    if len(m.ffn_widths) != m.num_hidden_layers:
        raise ValueError(f"ffn_widths has {len(m.ffn_widths)} entries but num_hidden_layers is {m.num_hidden_layers}")
    if any(f < 1 for f in m.ffn_widths) or max(m.ffn_widths) != m.intermediate_size:
        raise ValueError(f"ffn_widths must be positive with the widest equal to intermediate_size "
                         f"({m.intermediate_size})")
    if m.own_swa_heads or m.gemma_next is not None or m.is_moe:
        raise ValueError("ffn_widths (per-layer dense widths) cannot be combined with per-layer-type heads, "
                         "Gemma 3n / 4 layers or routed experts")
