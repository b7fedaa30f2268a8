"""A training stage's decoder-layer activations when its layers are of several kinds: hybrid models whose token
mixers are not all softmax attention (Gated DeltaNet, Mamba, short convolutions, ...) or whose blocks hold a mixer
or a feed-forward alone (Nemotron-H). Each kind of layer saves what its modules save
(calculator.memory.activations.exact_layer, which asks calculator/model/architectures/ for the mixers); the stage
holds m_inflight × Σ_kinds n_kind × A_kind of each part. Models of attention layers only (dense and MoE) keep the
training stage's own terms (calculator/stages/training.py), whose formulas name the dense and MoE layers.
"""
from __future__ import annotations

from calculator.core.errors import InputError
from calculator.memory import activations as act
from calculator.model import architectures
from calculator.model.spec import LayerKind, ModelSpec

ATTENTION_MIXERS = ("attention", "mla")


def is_hybrid(kinds: tuple[tuple[LayerKind, int], ...]) -> bool:
    """Whether a stage's layers need this module: a mixer other than softmax attention, or a block without one."""
    return any(k.mixer not in ATTENTION_MIXERS or k.ffn == "none" for k, _ in kinds)


def check(m: ModelSpec, w) -> None:
    """What the hybrid path does not model, refused with the field to change."""
    if w.activation_model != "exact":
        raise InputError("activation_model", f"the {w.activation_model} activation model describes attention "
                                             f"layers only; {m.name} has {architectures.describe_mixers(m)} layers: "
                                             f"use the exact model")
    if w.recompute == "op":
        raise InputError("recompute", "op-level selective recompute (torchtitan) is modelled for attention layers "
                                      "only: use none, selective or full")


def layer_terms(t, m: ModelSpec, w, d, shared, kinds, flight: float, first_discount: int,
                sources: dict[str, str]) -> int:
    """Add the stage's decoder-layer activation terms (norms, token mixers, feed-forwards); return the working set
    of one layer recomputed in backward (full recompute), 0 otherwise. first_discount: what the first layer's
    norm does not save when its input needs no gradient (LoRA without checkpointing)."""
    per_kind = [(k, n, shared.layer(k)) for k, n in kinds]
    n_layers = sum(n for _, n in kinds)
    if w.recompute == "full":
        per = act.full_recompute_layer(d)
        t.add("activations.layers", "activations", "Layer inputs (full recompute)", int(flight * n_layers * per),
              "m_inflight × L_stage × e·T·h", ("{:g} × {} × {} × {:,} × {:,}", flight, n_layers, d.e, d.T, d.h_sp),
              sources["full"])
        return max(x.total for _, _, x in per_kind)
    mixers = " + ".join(sorted({architectures.label(k.mixer) for k, _ in kinds if k.mixer != "none"}))
    parts = (("norms", "activations.norms", "Activations: norms", sources["norms"]),
             ("attention", "activations.attention", f"Activations: token mixers ({mixers})", sources["mixer"]),
             ("mlp", "activations.mlp", "Activations: feed-forward", sources["ffn"]))
    for i, (name, key, label, source) in enumerate(parts):
        total = int(flight * sum(n * x[i] for _, n, x in per_kind)) - (first_discount if i == 0 else 0)
        template = "{:g} × (" + " + ".join(["{} × {:,}"] * len(per_kind)) + ") B"
        values = [v for _, n, x in per_kind for v in (n, x[i])]
        kinds_text = ", ".join(f"{architectures.label(k.mixer)} + {k.ffn}" for k, _, _ in per_kind)
        t.add(key, "activations", label, total, f"m_inflight × Σ_kinds L_kind × A_{name}(T={d.T:,})",
              (template, flight, *values), source, f"layer kinds: {kinds_text}")
    return 0
