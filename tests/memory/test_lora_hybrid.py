"""calculator/memory/lora.py, lora_layer.py, lora_moe.py, the kinds' `frozen_saved` on hybrid and MoE layers and
calculator/model/architectures/gemma_next_lora.py on Gemma 3n / Gemma 4 layers (AltUp, LAuReL, PLE, KV sharing, K = V,
the MoE block beside the MLP), held
to PEFT 0.21.2 on transformers 5.23 traced on the CPU (tests/golden_lora_hybrid/, written by
validation/trace/lora_hybrid.py; protocol: validation/trace/lora_hybrid.py): per decoder layer, the
adapters' trainable parameters exactly, and the bytes saved for backward relative to full fine-tuning exactly
(LoRA layer − full layer, measured against the engine: the engine's full fine-tuning numbers are held elsewhere), the
layers before the first adapted one saving nothing. Two stated exceptions, each asserted to its byte:
- CPU_ROUTER: on the CPU PEFT's Linear.get_delta_weight casts bf16 factors to fp32 before B·A (`cast_to_fp32 =
  device.type == "cpu"`, peft/tuners/lora/layer.py), so an adapted router keeps 4·r·(h + E) more than on a GPU,
  which the engine models;
- a KDA or Gated DeltaNet layer that is the first adapted one with only some of its projections adapted (Kimi, and
  OLMo-Hybrid whose q_proj / v_proj are the DeltaNet's too, under qv / attention): its gates need no gradient there
  and the chunked delta rule saves less; not modelled (the engine counts it as a layer whose input requires grad: an
  overestimate, asserted to be one).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calculator.core.errors import InputError
from calculator.core.workload import Workload
from calculator.memory import activations as act
from calculator.memory import lora, lora_layer, lora_moe
from calculator.model.hf_config import spec_from_hf_config
from calculator.stages import estimate as stages_estimate

GOLDEN = Path(__file__).resolve().parents[1] / "golden_lora_hybrid"
FILES = sorted(GOLDEN.glob("*.json"))
TARGETS = ("qv", "attention", "all-linear")


def _load(path: Path) -> dict:
    doc = json.loads(path.read_text())
    doc["spec"] = spec_from_hf_config(doc["config"]).spec
    return doc


DOCS = {p.stem: _load(p) for p in FILES}


def _workload(doc: dict, targets: str) -> Workload:
    lora_fields = {} if targets == "full" else dict(finetune="lora", lora_rank=doc["rank"], lora_targets=targets,
                                                     lora_adapter_dtype="params")
    return Workload(mode="train", micro_batch=doc["micro_batch"], seq_len=doc["seq_len"], attention="eager",
                    mixer_kernels="torch", **lora_fields)


def engine_layers(doc: dict, targets: str) -> list[int]:
    """The engine's bytes saved per decoder layer: exact_layer by kind; under LoRA nothing before the first adapted
    layer and that layer less its first norm's copies and first_adapted_extra."""
    m = doc["spec"]
    w = _workload(doc, targets)
    d = act.dims(m, w)
    per = [act.exact_layer(m, w, d, m.layer_kind(i)).total for i in range(m.num_hidden_layers)]
    if targets == "full":
        return per
    first = lora_layer.first_adapted_layer(m, targets, w)
    per = [0 if i < first else x for i, x in enumerate(per)]
    if first < len(per):
        per[first] -= lora.first_layer_without_input_grad(m, d.T, d.h_sp) + lora_layer.first_adapted_extra(
            m, w, d, m.layer_kind(first))
    return per


def cpu_router(doc: dict, targets: str, i: int) -> int:
    """The CPU-only fp32 copies of an adapted router's bf16 factors (module docstring)."""
    m = doc["spec"]
    if m.layer_kind(i).ffn == "moe" and lora_moe.experts_adapted(m, targets):
        return 4 * doc["rank"] * (m.hidden_size + m.num_experts)
    return 0


def partial_kda_first(doc: dict, targets: str, i: int) -> bool:
    m = doc["spec"]
    w = _workload(doc, targets)
    return (m.layer_kind(i).mixer in ("kda", "gated_deltanet") and targets != "all-linear"
            and i == lora_layer.first_adapted_layer(m, targets, w))


CASES = [(name, t) for name, doc in DOCS.items() for t in TARGETS]


@pytest.mark.parametrize("name,targets", CASES)
def test_trainable_parameters_per_layer_are_peft_s(name, targets):
    doc = DOCS[name]
    case, m = doc["cases"][targets], doc["spec"]
    if "refused" in case:
        pytest.skip("PEFT refuses the case (test_peft_refusals)")
    ours = [lora.layer_adapter_params(m, doc["rank"], targets, i) for i in range(m.num_hidden_layers)]
    assert ours == case["trainable"]
    if "trainable_total" in doc:  # every adapter of the model (Gemma 3n / 4 all-linear: some outside the layers)
        outer = lora.outer_adapter_params(m, doc["rank"], targets)[0]
        assert sum(ours) + outer == doc["trainable_total"][targets]


@pytest.mark.parametrize("name,targets", CASES)
def test_saved_bytes_per_layer_are_peft_s(name, targets):
    doc = DOCS[name]
    case = doc["cases"][targets]
    if "refused" in case:
        pytest.skip("PEFT refuses the case (test_peft_refusals)")
    full, lora_saved = doc["cases"]["full"]["saved"], case["saved"]
    ours_full, ours = engine_layers(doc, "full"), engine_layers(doc, targets)
    for i, (measured, mine) in enumerate(zip(lora_saved, ours)):
        if mine == 0:  # before the first adapted layer: nothing saved
            assert measured == 0, (name, targets, i)
            continue
        measured_delta = measured - full[i] - cpu_router(doc, targets, i)
        if partial_kda_first(doc, targets, i):
            assert mine - ours_full[i] > measured_delta, (name, targets, i)
            continue
        assert mine - ours_full[i] == measured_delta, (name, targets, i)


@pytest.mark.parametrize("name", [n for n, doc in DOCS.items() if "refused" in doc["cases"]["all-linear"]])
def test_peft_refusals(name):
    doc = DOCS[name]
    assert "out_proj" in doc["cases"]["all-linear"]["refused"]
    with pytest.raises(InputError, match="lora_targets"):
        lora.check_targets(doc["spec"], "all-linear")
    lora.check_targets(doc["spec"], "qv")


def test_peft_moe_types_are_the_installed_tables():
    table = {t for doc in DOCS.values() for t in doc["peft_moe_types"]}
    assert lora_moe.PEFT_MOE_TYPES == table
    pytest.importorskip("peft")
    from validation.trace.lora_hybrid import peft_moe_types
    assert lora_moe.PEFT_MOE_TYPES == peft_moe_types()


def test_the_training_stage_sums_the_layers():
    """estimate()'s hybrid activation terms are Σ of the per-layer numbers above (layers before the first adapted one
    included at zero)."""
    for name, targets in (("qwen3_5", "qv"), ("falcon_h1", "qv"), ("qwen3_next", "all-linear"), ("lfm2", "qv"),
                          ("gemma3n", "qv"), ("gemma3n", "all-linear"), ("gemma4", "attention"),
                          ("gemma4_moe", "all-linear")):
        doc = DOCS[name]
        w = _workload(doc, targets)
        est = stages_estimate.estimate(doc["spec"], w, with_fits=False)
        layers = sum(t.bytes for t in est.terms if t.key in ("activations.norms", "activations.attention",
                                                              "activations.mlp"))
        assert layers == sum(engine_layers(doc, targets)), (name, targets)


@pytest.mark.parametrize("name,targets", [(n, t) for n, doc in DOCS.items() if "outside" in doc
                                          for t in ("full",) + TARGETS])
def test_outside_the_layers_is_the_trace(name, targets):
    """Gemma 3n / 4: everything saved outside the layers' own storages — the per-layer inputs, AltUp's projections
    and magnitudes, the RoPE tables, the final norm, the loss (calculator.model.architectures.gemma_next_lora.
    embedding_side_saved; frozen head lora.frozen_head_saved) — plus the batch's ids (8·T; the embedding's copy only
    when its table trains) and the loss's int64 targets and count (8·T + 4), which the engine leaves out."""
    from calculator.impls import hf
    doc = DOCS[name]
    m, w = doc["spec"], _workload(doc, targets)
    d = act.dims(m, w)
    full = targets == "full"
    head = sum(x.bytes for x in hf.head(m, w, d).saved)
    engine = act.embedding_saved(m, d, full, w) + act.rotary_saved(m, d) + head
    assert engine + 8 * d.T * (2 if full else 1) + 4 == doc["outside"][targets]
