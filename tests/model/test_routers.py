"""calculator/model/routers.py: the MoE routers whose bookkeeping a model type's modeling file and config decide
(transformers 5.23). Their options read from the config, the bytes variants.moe_saved prices for each by hand, and
one traced MoE layer per type equal to what its tiny bf16 model saves on the CPU (validation/architectures'
sources and trace, eager attention)."""
from __future__ import annotations

import copy

import pytest

from calculator.model import routers, variants
from calculator.model.hf_config import spec_from_hf_config
from calculator.model.variants import VariantSpec

T, K, E, F, H, EB = 32, 2, 4, 40, 64, 2  # tokens, top-k, experts, expert width, hidden, bf16 bytes
S = T * K


def _moe(**options) -> int:
    return variants.moe_saved(VariantSpec(**options), T, K, E, F, H, EB)


EXPERTS = S * (4 * EB * F + 2 * EB * H) + 24 * S + 4 * E  # gate_up / act / product, input and output, indices, offs


def test_options_read_from_the_config():
    assert routers.router_options("qwen3_moe", {}) == dict(router_renorm=False, fp32_routing_weights=False)
    assert routers.router_options("qwen3_moe", {"norm_topk_prob": True})["router_renorm"]
    assert not routers.router_options("qwen2_moe", {})["router_renorm"]
    assert routers.router_options("qwen3_next", {})["router_renorm"]  # Qwen3NextConfig's default
    assert routers.router_options("qwen3_vl_moe_text", {"norm_topk_prob": False})["router_renorm"]  # never read
    assert routers.router_options("qwen3_5_moe", {"norm_topk_prob": False})["router_renorm"]
    assert not routers.router_options("jamba", {"norm_topk_prob": True})["router_renorm"]
    assert routers.router_options("olmoe", {})["qk_norm_layout"] == "full_width"
    assert routers.router_options("granitemoe", {})["router"] == "topk_softmax"
    assert routers.router_options("aria_text", {})["router"] == "topk_model_softmax"
    assert routers.router_options("nemotron_h", {"norm_topk_prob": False}) == dict(
        router_renorm=False, router_fp32_input=True, router_fp32_weight_copy=True, gated_experts=False)
    assert routers.router_options("llama", {}) is None and routers.router_options("mixtral", {}) is None


def test_softmax_router_bytes_by_hand():
    """fp32 scores 4·T·E and int64 indices 8·T·k; renormalised: the fp32 top-k values and their row sum; routing
    weights fp32 (Mixtral: no cast) or bf16 (the Qwen-MoE routers' `.to(router_logits.dtype)`)."""
    router = 4 * T * E + 8 * T * K
    assert _moe() == EXPERTS + 4 * S + router + 4 * T * K + 4 * T
    assert _moe(router_renorm=False, fp32_routing_weights=False) == EXPERTS + EB * S + router
    assert _moe() - _moe(router_renorm=False, fp32_routing_weights=False) == 384 + 128  # the traced rows' 512 B


def test_top_k_first_routers_by_hand():
    """Granite-MoE: topk of the fp32 logits, an fp32 softmax over k (4·T·k), bf16 weights; Aria: the softmax over k
    in the model dtype (e·T·k), nothing to renormalise."""
    assert _moe(router="topk_softmax", fp32_routing_weights=False) == EXPERTS + EB * S + 8 * T * K + 4 * T * K
    assert _moe(router="topk_model_softmax", router_renorm=False, fp32_routing_weights=False) == (
        EXPERTS + EB * S + 8 * T * K + EB * T * K)


def test_nemotron_h_experts_and_router_by_hand():
    """relu² experts without a gate keep relu's and the square's outputs (2·e·S·f, not 4); the router's fp32 copies
    of its input (4·T·h) and weight (4·E·h)."""
    options = dict(router_fp32_input=True, router_fp32_weight_copy=True)
    assert _moe(gated_experts=False, **options) - _moe(**options) == -2 * EB * S * F
    assert _moe(**options) - _moe() == 4 * T * H + 4 * E * H


def test_the_spec_gets_the_router_and_keeps_its_other_variant_fields():
    spec = spec_from_hf_config(dict(model_type="qwen3_moe", hidden_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
                                    moe_intermediate_size=40, num_experts=4, num_experts_per_tok=2,
                                    vocab_size=101)).spec
    assert spec.variant is not None and not spec.variant.router_renorm and not spec.variant.fp32_routing_weights
    dense = spec_from_hf_config(dict(model_type="qwen3_moe", hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
                                     num_experts=0, vocab_size=101)).spec
    assert dense.variant is None  # no experts: no router
    fields = routers.with_router("jamba", {}, dict(num_experts=4, variant=VariantSpec(fp32_rope=True)))
    assert fields["variant"].fp32_rope and not fields["variant"].router_renorm


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from validation.architectures import measure as M  # noqa: E402
from validation.architectures.sources import Source, source  # noqa: E402

# the MoE layer kinds each type's row measures (Qwen3-Next / Qwen3.5-MoE: the Gated DeltaNet layer; their
# attention layers' MoE part is exact too, their attention is not, outside the router)
TRACED = {"qwen3_moe": "attention+moe", "qwen2_moe": "attention+moe", "olmoe": "attention+moe",
          "jamba": "attention+moe", "qwen3_vl_moe": "attention+moe", "qwen3_next": "gated_deltanet+moe",
          "qwen3_5_moe_text": "gated_deltanet+moe", "granitemoe": "attention+moe", "aria_text": "attention+moe",
          "nemotron_h": "none+moe"}


@pytest.mark.parametrize("model_type", sorted(TRACED))
def test_one_traced_moe_layer_per_type(model_type):
    M.quiet()
    src = source(model_type)
    spec, _ = M.spec_of(src)
    result = M.activations(src, spec, "eager")[TRACED[model_type]]
    assert result["engine"] == result["reference"], result


def test_qwen3_moe_renormalised_when_the_config_says_so():
    """norm_topk_prob=True: the division's fp32 top-k values and row sum are saved, and priced."""
    M.quiet()
    config = copy.deepcopy(source("qwen3_moe").config)
    config.norm_topk_prob = True
    src = Source("qwen3_moe", config.to_dict(), config, "norm_topk_prob")
    spec, _ = M.spec_of(src)
    assert spec.variant.router_renorm
    result = M.activations(src, spec, "eager")["attention+moe"]
    assert result["engine"] == result["reference"], result
