"""The norms term's note states the coefficient its value has (issue 24: the note said ~12·s·b·h while the value is
16·s·h per layer in bf16: two HF RMSNorms of (4 + e)·T·h each, and the two pre-norm outputs of e·T·h)."""
from __future__ import annotations

import re

import pytest

from calculator import estimate
from calculator.core.workload import RECIPES, Workload
from calculator.model.presets import load_model


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen2.5-7b", "qwen3-8b", "mistral-7b-v0.1"])
@pytest.mark.parametrize("precision", ["mixed-bf16", "fp32"])
def test_the_norms_note_states_the_terms_coefficient(name, precision):
    m = load_model(name).spec
    w = Workload(gpu="h100-sxm", seq_len=1024, micro_batch=2, precision=RECIPES[precision][1])
    term = next(t for t in estimate(m, w, with_fits=False).peak.terms if t.key == "activations.norms")
    coefficient = int(re.search(r"= (\d+)·s·b·h per layer", term.note).group(1))
    per_layer_element = term.bytes / (m.num_hidden_layers * 1024 * 2 * m.hidden_size)
    assert coefficient == round(per_layer_element), (term.note, per_layer_element)  # + 4·T per norm: rounding
    assert "12·s·b·h" not in term.note


@pytest.mark.parametrize("name, kw", [("gemma-2-2b", {}), ("gpt2", {}), ("llama-3.1-8b", {"finetune": "lora"}),
                                      ("llama-3.1-8b", {"precision": RECIPES["amp-fp32"][1]})])
def test_other_norms_get_no_coefficient_they_do_not_have(name, kw):
    """Other norms (fp32 Gemma, LayerNorm), adapters on a frozen base, autocast: the note names no coefficient."""
    term = next(t for t in estimate(load_model(name).spec, Workload(gpu="h100-sxm", seq_len=1024, **kw),
                                    with_fits=False).peak.terms if t.key == "activations.norms")
    assert "·s·b·h per layer" not in term.note and "pre-norm outputs" in term.note
