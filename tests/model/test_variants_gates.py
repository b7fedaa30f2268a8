"""calculator/model/variants.py: the per-head attention output gates (LFM3's model-dtype sigmoid, Ling 3.0's fp32 one,
on MLA too), Kolibri-1's gather-then-sigmoid router and fp32 RoPE tables, against their formulas. The mapped types are
held to the real layers' saved bytes in tests/model/mappers/test_linear.py and test_variants.py."""
from __future__ import annotations

import pytest

from calculator import Workload
from calculator.memory import activations as act
from calculator.model import variants
from calculator.model.parameters import count_parameters
from calculator.model.spec import ModelSpec
from calculator.model.variants import VariantSpec

T, A, E_BYTES = 32, 4, 2


@pytest.mark.parametrize("gate,expected", [
    ("none", 0), ("sigmoid_head", E_BYTES * T * A + E_BYTES * T * 48),
    ("sigmoid_head_fp32", 4 * T * A + E_BYTES * T * A + E_BYTES * T * 48),
    ("softplus_head", 4 * T * A + E_BYTES * T * A + E_BYTES * T * 48), ("sigmoid", 2 * E_BYTES * T * 48),
    ("softplus_element", (4 + 2 * E_BYTES) * T * 48)])
def test_output_gate_saved(gate, expected):
    assert variants.output_gate_saved(VariantSpec(attention_gate=gate), T, A, 48, E_BYTES) == expected


def _spec(**more) -> ModelSpec:
    base = dict(name="t", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                head_dim=16, intermediate_size=96, vocab_size=100, qk_norm=True)
    return ModelSpec(**{**base, **more})


def _mla(**more) -> ModelSpec:
    return _spec(num_key_value_heads=4, head_dim=None, family="deepseek", kv_lora_rank=24, qk_rope_head_dim=8,
                 qk_nope_head_dim=16, v_head_dim=12, qk_norm=False, **more)


GATE = dict(attention_tensors=((4, 64),))


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("build,gate,width", [(_spec, "sigmoid_head", 4 * 16), (_mla, "sigmoid_head_fp32", 4 * 12)])
def test_the_gate_is_part_of_the_attention(build, gate, width, attention):
    """Parameters: g_proj (heads × hidden) per attention layer, MLA's too; saved: output_gate_saved of the o_proj
    input's width (a·head_dim, MLA's a·v_head_dim)."""
    plain, gated = build(), build(variant=VariantSpec(attention_gate=gate, **GATE))
    assert count_parameters(gated).total - count_parameters(plain).total == 2 * 4 * 64
    assert count_parameters(gated).tensors - count_parameters(plain).tensors == 2
    w = Workload(seq_len=16, micro_batch=2, attention=attention)
    d = act.dims(plain, w)
    extra = act.softmax_attention_saved(gated, w, d) - act.softmax_attention_saved(plain, w, d)
    per_head = (4 if gate.endswith("fp32") else 0) + E_BYTES
    assert extra == per_head * T * A + E_BYTES * T * width


def test_fp32_rope_tables():
    w = Workload(seq_len=16, micro_batch=2)
    plain, fp32 = _spec(), _spec(variant=VariantSpec(fp32_rope_tables=True))
    assert act.rotary_saved(plain, act.dims(plain, w)) == 2 * 16 * 16 * E_BYTES
    assert act.rotary_saved(fp32, act.dims(fp32, w)) == 2 * 16 * 16 * 4


@pytest.mark.parametrize("renorm", [False, True])
def test_gather_sigmoid_router(renorm):
    """Kolibri1TopKRouter: the softmax router's fp32 logits (kept by gather) and int64 indices, then the fp32 sigmoid
    of the k gathered logits (4·T·k) and, renormalised, only the row sum (4·T): the division keeps that sigmoid."""
    k, E, f, h = 2, 8, 40, 64
    router = dict(router_fp32_input=True, router_fp32_weight_copy=True, router_renorm=renorm)
    gathered = variants.moe_saved(VariantSpec(router="gather_sigmoid", **router), T, k, E, f, h, E_BYTES)
    experts = T * k * (4 * E_BYTES * f + 2 * E_BYTES * h) + 24 * T * k + 4 * T * k + 4 * E
    assert gathered == experts + 4 * T * E + 8 * T * k + 4 * T * k + (4 * T if renorm else 0) + 4 * T * h + 4 * E * h
