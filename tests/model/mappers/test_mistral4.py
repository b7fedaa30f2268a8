"""Mistral-Small-4 ("mistral4") and Mistral-Large-4's text tower ("mistral_large4_text"; the multimodal
"mistral_large4") (calculator/model/mappers/mistral.py) held to transformers 5.23: parameter and tensor counts against
the real model on the meta device, one traced layer per kind against a tiny bf16 CPU training forward
(validation/architectures/measure.py), and the cache after a prefill."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.config_read import ConfigError  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.vision import vision_from_config, vision_parameters  # noqa: E402
from validation.architectures import measure, sources  # noqa: E402
from tests.model.mappers.counts import engine_counts, real_counts  # noqa: E402

MLA = dict(vocab_size=101, hidden_size=64, intermediate_size=96, moe_intermediate_size=24, num_hidden_layers=4,
           num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, n_shared_experts=1,
           num_experts_per_tok=2, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=24)
# Mistral-Large-4's text model: every layer roped and owning its latent KV (NoPE layers and KV sharing are refused),
# the last layer a "shared" indexer layer (plain MLA), two dense layers: each kind has a layer >= 1
LARGE4 = dict(MLA, index_n_heads=2, index_head_dim=16, index_topk=4, no_rope_layers=[1] * 4,
              indexer_types=["full", "full", "full", "shared"], mlp_layer_types=["dense", "dense", "sparse", "sparse"])
# the vision-language wrapper's Pixtral tower, tiny (priced apart: calculator/model/vision)
TOWER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, head_dim=16,
             image_size=56, patch_size=14)
SIZES: dict[str, dict] = {
    "mistral4": dict(MLA, q_lora_rank=32, first_k_dense_replace=2, n_group=2, topk_group=1),
    "mistral_large4_text": LARGE4, "mistral_large4": LARGE4,
}


def written_config(model_type: str, **overrides) -> tuple[dict, object]:
    """(config.json as transformers 5 writes it, the config of the causal-LM model to build)."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    if model_type.startswith("mistral_large4"):  # no causal LM but the vision-language one (its tower idle)
        config = transformers.AutoConfig.for_model("mistral_large4", vision_config=TOWER,
                                                   text_config={**SIZES[model_type], **overrides})
        return (config.text_config.to_dict() if model_type.endswith("_text") else config.to_dict()), config
    config = transformers.AutoConfig.for_model(model_type, **{**SIZES[model_type], **overrides})
    return config.to_dict(), config


@pytest.mark.parametrize("model_type", sorted(SIZES))
def test_the_config_transformers_writes_counts_exactly(model_type):
    written, config = written_config(model_type)
    assert engine_counts(written) == real_counts(config)


# switches that add or remove tensors: no q-LoRA, biases, tied embeddings, two shared experts, groups
VARIANTS = [
    ("mistral4", dict(q_lora_rank=None, attention_bias=True, tie_word_embeddings=True, norm_topk_prob=False)),
    ("mistral4", dict(n_shared_experts=2, first_k_dense_replace=0, n_group=4, topk_group=2)),
    ("mistral_large4_text", dict(attention_bias=True, n_shared_experts=2, indexer_types=["full", "shared"] * 2)),
    ("mistral_large4", dict(mlp_layer_types=["sparse"] * 4, first_k_dense_replace=0)),
]


@pytest.mark.parametrize("model_type,overrides", VARIANTS, ids=str)
def test_switches_that_change_tensors(model_type, overrides):
    written, config = written_config(model_type, **overrides)
    assert engine_counts(written) == real_counts(config)


def test_the_released_layouts_that_the_engine_lacks_are_refused():
    """MistralLarge4TextConfig's default makes every 4th layer NoPE (no_rope_layer_interval); kv_source_layers shares
    one latent cache across layers: both change the MLA's shape layer by layer."""
    for overrides in (dict(no_rope_layers=[1, 1, 1, 0]), dict(kv_source_layers=[0, 0, 2, 2])):
        written, _ = written_config("mistral_large4_text", **overrides)
        with pytest.raises(ConfigError, match="cannot be described exactly yet: the calculator has no MLA layers"):
            spec_from_hf_config(written)


def test_the_vision_language_config_maps_its_text_tower_and_prices_its_pixtral_tower():
    """MistralLarge4Model's vision tower is PixtralVisionModel and its projector Mistral 3's (patch merger, two
    linears): the engine's "pixtral" tower, parameter for parameter, also from the class's default tower."""
    written, config = written_config("mistral_large4")
    mapped = spec_from_hf_config(written)
    assert mapped.spec.model_type == "mistral_large4_text" and mapped.spec.vision.kind == "pixtral"
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(config)
    inner = model.model
    for cfg in (written, {k: v for k, v in transformers.MistralLarge4Config().to_dict().items()
                          if k != "vision_config"}):
        v = vision_from_config(cfg, mapped.spec.hidden_size if cfg is written else 6144)[0]
        if cfg is not written:
            with torch.device("meta"):
                inner = transformers.AutoModelForImageTextToText.from_config(
                    transformers.MistralLarge4Config()).model
        real = (sum(p.numel() for p in inner.vision_tower.parameters()),
                sum(p.numel() for p in inner.multi_modal_projector.parameters()))
        assert (vision_parameters(v).tower, vision_parameters(v).projector) == real


@pytest.mark.parametrize("model_type", sorted(SIZES))
def test_one_layer_per_kind_saves_what_the_real_layer_saves_and_the_cache_is_exact(model_type):
    """Eager: exactly the traced bytes of each kind's layer (validation/architectures/measure.py: the CPU trace less
    its CPU-only terms); SDPA within 1% (the DSA layers' dense mask, which CPU SDPA keeps, is not priced). The cache
    after an eager prefill: MLA's latent and rotary key, the indexer's keys."""
    src = sources.source(model_type)
    spec, _ = measure.spec_of(src)
    eager = measure.activations(src, spec, "eager")
    assert {k: (r["engine"], r["error_pct"]) for k, r in eager.items()} == {
        k: (r["reference"], 0.0) for k, r in eager.items()}
    assert set(eager) == set(KINDS[model_type])
    sdpa = measure.activations(src, spec, "sdpa")
    assert all(abs(r["error_pct"]) < 1.0 for r in sdpa.values())
    assert measure.cache(src, spec)["exact"]


KINDS = {"mistral4": ("mla+dense", "mla+moe"), "mistral_large4_text": ("dsa+dense", "dsa+moe", "mla+moe"),
         "mistral_large4": ("dsa+dense", "dsa+moe", "mla+moe")}


@pytest.mark.parametrize("tie", [False, True])
def test_mistral_small_4_as_published_a_mistral3_wrapper_maps_its_mistral4_text_model(tie):
    """Mistral-Small-4-119B ships as Mistral3ForConditionalGeneration around a mistral4 text_config (a Pixtral
    tower): the text model and head count exactly, the outer tie_word_embeddings tying the head (Mistral3Config
    defaults it to True; the 119B checkpoint's 118,972,826,624 text parameters are Mistral4Config's untied)."""
    text = transformers.AutoConfig.for_model("mistral4", **SIZES["mistral4"]).to_dict()
    config = transformers.AutoConfig.for_model("mistral3", text_config=text, vision_config=TOWER,
                                               tie_word_embeddings=tie)
    written = config.to_dict()
    mapped = spec_from_hf_config(written)
    assert mapped.spec.model_type == "mistral4" and mapped.spec.vision.kind == "pixtral"
    assert mapped.spec.tie_word_embeddings is tie
    assert engine_counts(written) == real_counts(config)
