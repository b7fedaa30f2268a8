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
from calculator.memory import lora_layer
from calculator.model import architectures
from calculator.model.spec import LayerKind, ModelSpec

ATTENTION_MIXERS = ("attention", "mla")


def is_hybrid(kinds: tuple[tuple[LayerKind, int], ...]) -> bool:
    """Whether a stage's layers need this module: a mixer other than softmax attention, a block without one, or
    attention whose head layout changes with the layer type (slot ≥ 0: MiMo-V2-Flash, ModelSpec.attention_of)."""
    return any(k.mixer not in ATTENTION_MIXERS or k.ffn == "none" or k.slot >= 0 for k, _ in kinds)


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
        per, shared_in = act.full_recompute_layer(d), 0
        formula, subst = "m_inflight × L_stage × e·T·h", ("{:g} × {} × {} × {:,} × {:,}", flight, n_layers, d.e, d.T,
                                                           d.h_sp)
        if m.compressed is not None:  # DeepSeek-V4: the hc_mult streams (compressed_saved.checkpointed_input)
            per = architectures.compressed_saved.checkpointed_input(m, d.T, d.e)
            shared_in = architectures.compressed_saved.checkpointed_shared(m, d.s, d.e)
            formula, subst = ("m_inflight × (L_stage × e·T·hc_mult·h + RoPE tables and position_ids)",
                              ("{:g} × ({} × {:,} + {:,}) B", flight, n_layers, per, shared_in))
        t.add("activations.layers", "activations", "Layer inputs (full recompute)",
              int(flight * (n_layers * per + shared_in)),
              formula, subst, sources["full"])
        return max(x.total for _, _, x in per_kind)
    discount, note = _first_layers_discount(m, w, d, shared, flight, first_discount, n_layers)
    mixers = " + ".join(sorted({architectures.label(k.mixer) for k, _ in kinds if k.mixer != "none"}))
    parts = (("norms", "activations.norms", "Activations: norms", sources["norms"]),
             ("attention", "activations.attention", f"Activations: token mixers ({mixers})", sources["mixer"]),
             ("mlp", "activations.mlp", "Activations: feed-forward", sources["ffn"]))
    for i, (name, key, label, source) in enumerate(parts):
        total = int(flight * sum(n * x[i] for _, n, x in per_kind)) - discount[i]
        template = "{:g} × (" + " + ".join(["{} × {:,}"] * len(per_kind)) + ") B"
        values = [v for _, n, x in per_kind for v in (n, x[i])]
        kinds_text = ", ".join(f"{architectures.label(k.mixer)} + {k.ffn}" for k, _, _ in per_kind)
        formula = f"m_inflight × Σ_kinds L_kind × A_{name}(T={d.T:,})" + (" − " + note if discount[i] else "")
        t.add(key, "activations", label, total, formula, (template, flight, *values), source,
              f"layer kinds: {kinds_text}")
    if m.compressed is not None:  # DeepSeek-V4: what each CSA layer's indexer leaves allocated for the step
        per = {k.mixer: architectures.compressed_saved.indexer_retained(m, k.mixer, d.b, d.s, d.e) for k, _ in kinds}
        n_csa = sum(n for k, n in kinds if per[k.mixer])
        if n_csa:
            retained = max(per.values())
            t.add("activations.indexer", "activations", "CSA indexers' scoring graphs (never reached by backward)",
                  int(flight * n_csa * retained), "m_inflight × L_CSA × indexer_retained",
                  ("{:g} × {} × {:,} B", flight, n_csa, retained), "compressed-attention",
                  "DeepseekV4Indexer's top-k indices carry no gradient; its graph stays allocated through the step")
    return 0


def _first_layers_discount(m: ModelSpec, w, d, shared, flight: float, first_discount: int,
                           n_layers: int) -> tuple[tuple[int, int, int], str]:
    """What the stage's layers do not save because the frozen embedding's output needs no gradient (LoRA without
    checkpointing; first_discount, the first norm's copies, non-zero only then), by part (norms, mixers,
    feed-forwards): the layers before the first adapted one save nothing and the first adapted one saves less
    (calculator.memory.lora_layer.first_adapted_layer, first_adapted_extra; measured with PEFT 0.21,
    validation/trace/lora_hybrid.py)."""
    if not first_discount or w.finetune == "full":
        return (first_discount, 0, 0), "first layer's input norm (no input grads)"
    first = lora_layer.first_adapted_layer(m, w.lora_targets, w)
    before = [shared.layer(m.layer_kind(i)) for i in range(min(first, n_layers))]
    parts = [int(flight * sum(x[i] for x in before)) for i in range(3)]
    if first < n_layers:
        parts[0] += first_discount
        parts[1] += int(flight * lora_layer.first_adapted_extra(m, w, d, m.layer_kind(first)))
    if not before:
        return tuple(parts), "the first layer's input without grads"
    return tuple(parts), f"layers 0–{len(before) - 1}, before the first adapted one (no input grads: nothing saved)"
