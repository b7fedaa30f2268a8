"""A.X-K1 (calculator/model/mappers/dsa.py map_axk1) and the Qwen4-Exp refusal
(calculator/model/mappers/vlm_more.py): the config.json transformers 5.23 writes maps, and the engine's parameter
and tensor counts equal the real model's, built from that config on the meta device; each refusal names what the
engine lacks. SIZES and written_config are read by validation/architectures/sources.py too."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.config_read import ConfigError  # noqa: E402
from calculator.model.hf_config import REFUSED_MODEL_TYPES, SUPPORTED_MODEL_TYPES, spec_from_hf_config  # noqa: E402
from calculator.model.mappers import vlm_more  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from tests.model.mappers.counts import engine_counts, real_counts  # noqa: E402

# A.X-K1 at DeepSeek-V3's tiny sizes (test_archs.py): three layers, the first two dense, so each kind has a layer
# >= 1 (validation/architectures traces one); four experts in two groups (AXK1Config's n_group 8 cannot split 4)
SIZES: dict[str, dict] = {
    "axk1": dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                 intermediate_size=96, vocab_size=100, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
                 qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                 moe_intermediate_size=32, n_group=2, topk_group=1, mlp_layer_types=["dense", "dense", "sparse"]),
}
MAPPED = sorted(SIZES)
REFUSED = {"qwen4_exp": "gated-residual hyper-connections", "qwen4_exp_text": "gated-residual hyper-connections"}

VARIANTS = [
    ("axk1", {"mlp_layer_types": ["dense", "sparse", "sparse"], "n_shared_experts": 2}),
    ("axk1", {"mlp_layer_types": ["dense", "dense", "dense"]}),
    ("axk1", {"attention_bias": True, "tie_word_embeddings": True}),
    ("axk1", {"norm_topk_prob": False, "n_group": 1, "topk_group": 1}),
]


def _quiet():
    logging.getLogger("transformers").setLevel(logging.ERROR)


def written_config(model_type: str, **overrides):
    """(config.json as transformers 5.23 writes it, the config of the model to build)."""
    _quiet()
    config = transformers.AutoConfig.for_model(model_type, **{**SIZES.get(model_type, {}), **overrides})
    return config.to_dict(), config


@pytest.mark.parametrize("model_type", MAPPED)
def test_the_config_transformers_writes_maps_to_the_real_parameter_count(model_type):
    written, config = written_config(model_type)
    assert engine_counts(written) == real_counts(config)


@pytest.mark.parametrize("model_type,overrides", VARIANTS, ids=lambda v: str(v))
def test_switches_that_change_tensors(model_type, overrides):
    written, config = written_config(model_type, **overrides)
    assert engine_counts(written) == real_counts(config)


def test_the_group_is_registered_as_the_engine_sees_it():
    assert set(MAPPED) <= set(SUPPORTED_MODEL_TYPES)
    assert set(REFUSED) <= vlm_more.REFUSED and set(REFUSED) <= REFUSED_MODEL_TYPES


def test_axk1_adds_one_norm_per_moe_layer_to_deepseek_v3():
    """AXK1MoE's post_mlp_layernorm: hidden_size parameters in each sparse layer, none in the dense ones (the
    checkpoints' dense-layer copies are ignored on load)."""
    written, _ = written_config("axk1")
    axk1 = count_parameters(spec_from_hf_config(written).spec).total
    v3 = transformers.AutoConfig.for_model("deepseek_v3", **{k: v for k, v in SIZES["axk1"].items()
                                                             if k != "mlp_layer_types"}, first_k_dense_replace=2)
    assert axk1 - real_counts(v3)[0] == 64


def test_axk1_without_mlp_layer_types_reads_the_legacy_fields():
    """AXK1Config.__post_init__ derives mlp_layer_types from first_k_dense_replace and moe_layer_freq when a
    config.json (as the Hub's) leaves it out: sparse where i >= first_k_dense_replace and i % moe_layer_freq == 0."""
    sizes = {k: v for k, v in SIZES["axk1"].items() if k != "mlp_layer_types"}
    config = transformers.AXK1Config(**dict(sizes, num_hidden_layers=4), first_k_dense_replace=1, moe_layer_freq=2)
    assert config.mlp_layer_types == ["dense", "dense", "sparse", "dense"]
    written = dict(config.to_dict(), first_k_dense_replace=1, moe_layer_freq=2)
    del written["mlp_layer_types"]
    spec = spec_from_hf_config(written).spec
    assert spec.ffn_types == ("dense", "dense", "moe", "dense")
    counts = count_parameters(spec)
    assert (counts.total, counts.tensors) == real_counts(config)
    default = dict(config.to_dict())
    del default["mlp_layer_types"]  # AXK1Config's own default: the first layer dense
    assert spec_from_hf_config(default).spec.ffn_types == ("dense", "moe", "moe", "moe")


def test_axk1_moe_layer_saves_its_post_mlp_norm_as_traced():
    """AXK1MoE's post_mlp_layernorm keeps its fp32 input, normalised copy and rsqrt (4·T·h + e·T·h + 4·T per MoE
    layer, VariantSpec.moe_post_norm): one traced MoE layer of the real model on the CPU equals the engine's, eager
    and SDPA, and without the norm the engine would be that much low (T = 32, h = 64: 12,416 B)."""
    from validation.architectures import measure as M
    from validation.architectures.sources import Source
    written, config = written_config("axk1")
    src = Source("axk1", written, config, "test_axk1_and_refusals")
    spec, _ = M.spec_of(src)
    assert spec.variant.moe_post_norm and spec_from_hf_config(written).warnings == ()
    without = spec.model_copy(update={"variant": spec.variant.model_copy(update={"moe_post_norm": False})})
    for attention in ("eager", "sdpa"):
        rows = M.activations(src, spec, attention)
        assert all(r["engine"] == r["measured"] for r in rows.values()), attention
        assert M.activations(src, without, attention)["mla+moe"]["engine"] == rows["mla+moe"]["measured"] - 12_416


def test_axk1_without_a_q_lora_rank_is_refused():
    written, _ = written_config("axk1")
    with pytest.raises(ConfigError, match="q_lora_rank: A.X-K1 always builds the q-LoRA path"):
        spec_from_hf_config(dict(written, q_lora_rank=None))


def _default_written(model_type: str) -> dict:
    _quiet()
    if model_type == "step3p5":  # the text config of step3p7 (no AutoConfig entry of its own)
        return transformers.AutoConfig.for_model("step3p7").text_config.to_dict()
    return transformers.AutoConfig.for_model(model_type).to_dict()


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_refused_types_name_what_the_engine_lacks(model_type):
    written = _default_written(model_type)
    with pytest.raises(ConfigError, match=f"^model_type: .*{REFUSED[model_type]}"):
        spec_from_hf_config(written)


def test_step3p7_text_config_without_its_model_type_is_step3p5():
    """Step3p7Config.__post_init__ pops the text_config's model_type (the Hub's is a remote-code one): the outer type
    says which text model it holds (Step-3.5's, served only: calculator/model/mappers/vlm_more.py map_step3p5)."""
    written = _default_written("step3p7")
    written["text_config"].pop("model_type", None)
    assert spec_from_hf_config(written).spec == spec_from_hf_config(_default_written("step3p7")).spec
    assert "Step3p7Experts" in spec_from_hf_config(written).spec.served_only
