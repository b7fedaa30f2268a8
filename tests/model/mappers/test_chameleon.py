"""Chameleon (calculator/model/mappers/vlm_text.py map_chameleon): the config.json transformers 5.23 writes maps, and the engine's
parameter and tensor counts equal ChameleonForConditionalGeneration's built on the meta device — its VQ tokenizer
(ChameleonVQVAE) included, held idle. SIZES and written_config are read by validation/architectures/sources.py too,
which traces one layer's saved activations and the head against the real model on the CPU."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator import Workload, estimate  # noqa: E402
from calculator.model.config_read import ConfigError  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.mappers.vlm_text import vq_shapes  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from calculator.model.presets import load_model  # noqa: E402
from tests.model.mappers.counts import engine_counts, real_counts  # noqa: E402

# the tokenizer's names: "<image>" and 16 image tokens IMGIMG<two letters>Z (ChameleonImageVocabularyMapping reads
# the letters A-J as digits)
VOCABULARY = {"<image>": 3, **{f"IMGIMG{chr(65 + i // 10)}{chr(65 + i % 10)}Z": 80 + i for i in range(16)}}
TINY_VQ = dict(embed_dim=8, num_embeddings=16, latent_channels=8, resolution=32, base_channels=32,
               channel_multiplier=[1, 2], num_res_blocks=1, attn_resolutions=[16])
SIZES = {"chameleon": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           intermediate_size=96, vocab_size=100, vocabulary_map=VOCABULARY, vq_config=TINY_VQ)}


def written_config(model_type: str = "chameleon", **overrides):
    """(config.json as transformers 5.23 writes it, the config ChameleonForConditionalGeneration is built from)."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    config = transformers.AutoConfig.for_model(model_type, **{**SIZES[model_type], **overrides})
    return config.to_dict(), config


@pytest.mark.parametrize("overrides", [
    {}, {"swin_norm": True}, {"attention_bias": True, "mlp_bias": True}, {"tie_word_embeddings": True},
    {"num_key_value_heads": 4}, {"vq_config": dict(TINY_VQ, double_latent=True, attn_type="none")},
    {"vq_config": dict(TINY_VQ, channel_multiplier=[1, 1, 2], num_res_blocks=2, attn_resolutions=[32, 8])},
], ids=str)
def test_the_config_transformers_writes_maps_to_the_real_parameter_count(overrides):
    written, config = written_config(**overrides)
    assert engine_counts(written) == real_counts(config)


def test_the_default_vq_tokenizer_is_counted_whole():
    """ChameleonVQVAEConfig's defaults (Chameleon-7B / 30B's vq_config): the engine's shapes equal the real
    ChameleonVQVAE's, 67,400,704 parameters in 135 tensors."""
    from transformers.models.chameleon.modeling_chameleon import ChameleonVQVAE
    from transformers.models.chameleon.configuration_chameleon import ChameleonVQVAEConfig
    with torch.device("meta"):
        real = ChameleonVQVAE(ChameleonVQVAEConfig())
    shapes = vq_shapes({})
    assert [tuple(p.shape) for p in real.parameters()] == shapes
    assert sum(torch.Size(s).numel() for s in shapes) == sum(p.numel() for p in real.parameters())


def test_the_tokenizer_is_held_but_never_trained():
    """The VQ model loads and counts, but gets no gradient and no AdamW state under HF Trainer (its image tokens are
    an argmin). The head's image-token mask keeps a host-side index tensor only: a traced CPU step
    (validation/trace/accounting.measure_train) keeps the same activations with 16 image tokens or none."""
    written, _ = written_config()
    spec = spec_from_hf_config(written).spec
    counts = count_parameters(spec)
    assert counts.idle == sum(torch.Size(s).numel() for s in vq_shapes(SIZES["chameleon"]["vq_config"])) == 273_272
    assert spec.variant.qk_norm_layout == "head_affine"
    est = estimate(spec, Workload(micro_batch=2, seq_len=32), with_fits=False)  # bf16 weights, fp32 AdamW
    assert est.components["weights"] == 2 * counts.total == 2 * 348_216
    # AdamW's two fp32 moments and a 4-B step per tensor, for the 29 language-model tensors only
    assert est.components["optimizer_states"] == 8 * (counts.total - counts.idle) + 4 * 29 == 8 * 74_944 + 116


@pytest.mark.parametrize("field,value,match", [
    ("vocabulary_map", None, "vocabulary_map: ChameleonModel needs it"),
    ("vocabulary_map", ["IMGIMGAAZ"], "vocabulary_map: must map token names to integer ids"),
    ("vq_config", dict(TINY_VQ, base_channels=24), "GroupNorm's 32 groups"),
    ("vq_config", "big", "vq_config: must be an object"),
])
def test_malformed_fields_are_named(field, value, match):
    written, _ = written_config()
    with pytest.raises(ConfigError, match=match):
        spec_from_hf_config({**written, field: value})


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_served_through_the_transformers_backend_with_the_tokenizer_loaded(engine):
    """vLLM 0.33 and SGLang 0.5.23 have no Chameleon of their own (vLLM dropped it after 0.28.0): their Transformers
    backend builds transformers' whole ChameleonForConditionalGeneration, so the VQ tokenizer's weights load too."""
    written, _ = written_config(architectures=["ChameleonForConditionalGeneration"])
    spec = spec_from_hf_config(written).spec
    w = Workload(mode="infer", seq_len=64, gen_tokens=16, engine=engine, gpu="h100-sxm")
    est = estimate(spec, w, with_fits=False)
    assert any("Transformers backend" in n for n in est.warnings + est.assumptions)
    skipping = spec.model_copy(update={"variant": spec.variant.model_copy(update={"idle_served": False})})
    loaded = est.components["weights"] - estimate(skipping, w, with_fits=False).components["weights"]
    assert loaded == 2 * count_parameters(spec).idle == 2 * 273_272
