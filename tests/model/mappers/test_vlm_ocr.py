"""Document, OCR and edge VLM text towers (calculator/model/mappers/vlm_ocr.py): the config.json transformers
5.23 writes maps, and the engine's parameter and tensor counts equal the real model's, built from that config on the
meta device. SIZES and written_config are read by validation/architectures/sources.py too."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.config_read import ConfigError  # noqa: E402
from calculator.model.hf_config import REFUSED_MODEL_TYPES, SUPPORTED_MODEL_TYPES, spec_from_hf_config  # noqa: E402
from calculator.model.mappers import vlm_ocr  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from tests.model.mappers.counts import engine_counts, real_counts  # noqa: E402

BASE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=96, vocab_size=100)
# multimodal RoPE: sections of head_dim / 2 (8) frequencies
MROPE = dict(rope_type="default", rope_theta=1e4, mrope_section=[2, 3, 3])
# DeepSeek-OCR-2's MoE at DeepSeek-V2's tiny sizes (test_archs.py): three layers, the first dense, so each kind has a
# layer >= 1 (validation/architectures traces one; layer 0 also first-saves the RoPE tables); MHA (its head_dim is
# always hidden_size // heads)
OCR_MOE = dict(BASE, num_hidden_layers=3, num_key_value_heads=4, n_routed_experts=4, n_shared_experts=1,
               num_experts_per_tok=2, moe_intermediate_size=32, mlp_layer_types=["dense", "dense", "sparse"])
SIZES: dict[str, dict] = {
    "granite4_vision_text": BASE, "granite_docling_text": dict(BASE, pad_token_id=None),
    "cosmos3_edge_text": dict(BASE, head_dim=16, rope_parameters=MROPE),
    "paddleocr_vl_text": dict(BASE, head_dim=16, rope_parameters=MROPE),
    "hunyuan_vl_text": dict(BASE, head_dim=16, rope_parameters=dict(rope_type="default", rope_theta=1e4,
                                                                      mrope_section=[2, 2, 2, 2])),
    "deepseek_ocr2_text": OCR_MOE,
    # Unlimited-OCR with full attention on every layer (its default reference sliding attention is refused)
    "unlimited_ocr_text": dict(OCR_MOE, layer_types=["full_attention"] * 3),
}
# each outer type: (its text type, the tiny towers and projector fields of its config)
VIT = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2)
OCR_TOWER = dict(sam_config=dict(hidden_size=32, output_channels=16, num_hidden_layers=1, num_attention_heads=2,
                                 image_size=64, patch_size=16, window_size=2, global_attn_indexes=[0],
                                 downsample_channels=[16, 32]),
                 encoder_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2))
VL: dict[str, tuple[str, dict]] = {
    "granite4_vision": ("granite4_vision_text", dict(
        vision_config=dict(model_type="clip_vision_model", hidden_size=64, intermediate_size=48,
                           num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14),
        qformer_config=dict(intermediate_size=48), downsample_rate="1/2", deepstack_layer_map=[[0, 1]],
        spatial_target_layers=[0, 0, 1, 1])),
    "granite_docling": ("granite_docling_text", dict(
        vision_config=dict(VIT, image_size=32, patch_size=16, out_hidden_size=64, scale_factor=2,
                           deepstack_visual_indexes=[0]), pad_token_id=None)),
    "cosmos3_edge": ("cosmos3_edge_text", dict(vision_config=dict(VIT, num_patches=16), projector_hidden_size=48)),
    "paddleocr_vl": ("paddleocr_vl_text", dict(vision_config=dict(VIT, image_size=28, patch_size=14))),
    "hunyuan_vl": ("hunyuan_vl_text", dict(vision_config=dict(VIT, out_hidden_size=64, text_hidden_size=64))),
    "deepseek_ocr2": ("deepseek_ocr2_text", dict(vision_config=OCR_TOWER)),
    "unlimited_ocr": ("unlimited_ocr_text", dict(vision_config=OCR_TOWER)),
}
VL_TEXT = {text: outer for outer, (text, _) in VL.items()}
SIZES.update({outer: SIZES[text] for outer, (text, _) in VL.items()})  # validation/architectures/sources.py


def _quiet():
    logging.getLogger("transformers").setLevel(logging.ERROR)


def written_config(model_type: str, **overrides):
    """(config.json as transformers 5.23 writes it, the config of the model to build): an outer type's whole config,
    or a text type's text_config as its own config.json (the model built is the outer one holding it)."""
    _quiet()
    if model_type in VL:
        text, towers = VL[model_type]
        config = transformers.AutoConfig.for_model(model_type, text_config={**SIZES[text], **overrides}, **towers)
        return config.to_dict(), config
    outer = VL_TEXT[model_type]
    text = transformers.AutoConfig.for_model(model_type, **{**SIZES[model_type], **overrides})
    tie = text.to_dict().get("tie_word_embeddings", False)
    config = transformers.AutoConfig.for_model(outer, text_config=text.to_dict(), **VL[outer][1],
                                               tie_word_embeddings=tie)
    return text.to_dict(), config


MAPPED = sorted(SIZES)
REFUSED = {"unlimited_ocr": "reference sliding-window attention",
           "unlimited_ocr_text": "reference sliding-window attention"}
REFUSED_LAYER = "reference_sliding_attention"

VARIANTS = [
    ("granite4_vision_text", {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True}),
    ("granite_docling_text", {"tie_word_embeddings": False, "num_key_value_heads": 4}),
    ("cosmos3_edge_text", {"attention_bias": True, "mlp_bias": True}),
    ("cosmos3_edge_text", {"head_dim": 32, "rope_parameters": dict(MROPE, mrope_section=[4, 6, 6])}),
    ("paddleocr_vl_text", {"use_bias": True, "tie_word_embeddings": False}),
    ("hunyuan_vl_text", {"attention_bias": True, "tie_word_embeddings": False}),
    ("deepseek_ocr2_text", {"n_shared_experts": 2, "mlp_layer_types": ["dense", "sparse", "sparse"]}),
    ("deepseek_ocr2_text", {"n_group": 2, "topk_group": 1, "topk_method": "group_limited_greedy"}),
    ("deepseek_ocr2_text", {"mlp_layer_types": ["dense"] * 3, "attention_bias": True, "mlp_bias": True}),
    ("unlimited_ocr_text", {"mlp_layer_types": None, "first_k_dense_replace": 2}),
]


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
    assert vlm_ocr.REFUSED == frozenset() and not set(REFUSED) & REFUSED_MODEL_TYPES
    assert set(vlm_ocr.TEXT_TYPES) == set(VL) and set(vlm_ocr.TEXT_TYPES.values()) == set(VL_TEXT)


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_unlimited_ocr_reference_sliding_layers_are_refused(model_type):
    """UnlimitedOcrTextConfig's default layer_types: reference_sliding_attention on every layer, whose cache keeps
    every prefill token plus a window of decoded ones; the engine has no such attention."""
    _quiet()
    config = transformers.AutoConfig.for_model("unlimited_ocr")
    written = config.to_dict() if model_type == "unlimited_ocr" else config.text_config.to_dict()
    with pytest.raises(ConfigError, match=f"^model_type: .*{REFUSED[model_type]}"):
        spec_from_hf_config(written)
    one, _ = written_config("unlimited_ocr_text", layer_types=["full_attention", REFUSED_LAYER, "full_attention"])
    with pytest.raises(ConfigError, match="UnlimitedOcrDynamicReferenceSlidingWindowLayer"):
        spec_from_hf_config(one)


def test_unlimited_ocr_without_mlp_layer_types_reads_first_k_dense_replace():
    """UnlimitedOcrTextConfig.__post_init__ derives mlp_layer_types from first_k_dense_replace (default 1) when a
    config.json (as the Hub's language_config) leaves it out."""
    written, config = written_config("unlimited_ocr_text", mlp_layer_types=None, first_k_dense_replace=2)
    assert config.text_config.mlp_layer_types == ["dense", "dense", "sparse"]
    legacy = {k: v for k, v in written.items() if k != "mlp_layer_types"}
    assert spec_from_hf_config(dict(legacy, first_k_dense_replace=2)).spec.ffn_types == ("dense", "dense", "moe")
    assert spec_from_hf_config(legacy).spec.ffn_types == ("dense", "moe", "moe")


def test_cosmos3_edge_never_ties_its_head():
    """Cosmos3EdgeForConditionalGeneration._tied_weights_keys is empty: tie_word_embeddings true still builds an
    lm_head of its own (vocab × hidden more than a tied model)."""
    written, config = written_config("cosmos3_edge", tie_word_embeddings=True)
    written = dict(written, tie_word_embeddings=True)
    config = transformers.AutoConfig.for_model(**{k: v for k, v in written.items() if k != "_name_or_path"})
    spec = spec_from_hf_config(written).spec
    assert config.tie_word_embeddings and not spec.tie_word_embeddings
    counts = count_parameters(spec)
    assert (counts.total, counts.tensors) == real_counts(config)
    assert counts.total - count_parameters(spec.model_copy(update=dict(tie_word_embeddings=True))).total == 100 * 64


def test_paddleocr_and_hunyuan_vl_rope_precision_against_their_bases():
    """PaddleOCR-VL's attention rotates in the model dtype (Qwen2-VL's tables), not in fp32 as ERNIE-4.5 does;
    HunYuan-VL's apply_rotary_pos_emb rotates in fp32, where HunYuan-V1 dense's does not: same tensors each."""
    paddle, _ = written_config("paddleocr_vl_text")
    ernie = spec_from_hf_config(dict(paddle, model_type="ernie4_5")).spec
    spec = spec_from_hf_config(paddle).spec
    assert spec.variant is None and ernie.variant.fp32_rope
    assert count_parameters(spec).total == count_parameters(ernie).total
    hunyuan, _ = written_config("hunyuan_vl_text")
    dense = spec_from_hf_config(dict(hunyuan, model_type="hunyuan_v1_dense")).spec
    spec = spec_from_hf_config(hunyuan).spec
    assert spec.variant.fp32_rope and dense.variant is None
    assert count_parameters(spec).total == count_parameters(dense).total


def test_deepseek_ocr2_is_mha_with_deepseek_v2_experts():
    """Llama's attention (no MLA latent, heads of hidden_size // heads) and DeepSeek-V2's MoE from mlp_layer_types."""
    written, _ = written_config("deepseek_ocr2_text", head_dim=99)
    spec = spec_from_hf_config(written).spec
    assert not spec.is_mla and spec.head_size == 16 and spec.ffn_types == ("dense", "dense", "moe")
    assert (spec.num_experts, spec.num_experts_per_tok, spec.num_shared_experts) == (4, 2, 1)
    assert spec.variant.router_fp32_input and not spec.variant.router_renorm


def test_deepseek_ocr2_without_mlp_layer_types_is_refused():
    """DeepseekOcr2TextConfig derives no mlp_layer_types (its default config cannot build a model)."""
    written, _ = written_config("deepseek_ocr2_text")
    with pytest.raises(ConfigError, match="mlp_layer_types: DeepseekOcr2TextDecoderLayer"):
        spec_from_hf_config(dict(written, mlp_layer_types=None))


@pytest.mark.parametrize("outer", ["paddleocr_vl", "hunyuan_vl"])
def test_a_text_config_that_ties_the_head_ties_it_though_the_outer_one_says_false(outer):
    """PaddleOCRVLConfig and HunYuanVLConfig tie the head when text_config says tie_word_embeddings, whatever the
    outer config says (calculator.model.text_towers.TEXT_TIE_FORWARDED): the real model's counts."""
    written, config = written_config(outer)
    raw = dict(written, tie_word_embeddings=False, text_config=dict(written["text_config"], tie_word_embeddings=True))
    real = type(config)(**{k: v for k, v in raw.items() if k not in ("model_type", "transformers_version")})
    counts = count_parameters(spec_from_hf_config(raw).spec)
    assert (counts.total, counts.tensors) == real_counts(real)
