"""InternVL's vision tower (calculator/model/vision, kind "internvl"): the HF-format checkpoints (model_type internvl)
against transformers 5.23's InternVLVisionModel and InternVLMultiModalProjector built on the meta device and
GotOcr2ImageProcessor's tiles; the remote-code checkpoints (internvl_chat, InternVLChatModel) against the same modules
built for their fields. What the tower saves: tests/model/test_vision_saved.py."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.vision import image_tokens, vision_from_config, vision_parameters  # noqa: E402
from tests.model.test_vision import SIZES, _built, _img, _real_parts  # noqa: E402

T = transformers
@pytest.mark.parametrize("options", [
    dict(use_qk_norm=True, norm_type="rms_norm", use_mean_pooling=False, attention_bias=True),  # InternViT-6B's
    dict(use_mask_token=True, image_size=[448, 448], patch_size=[14, 14]),
    dict(use_absolute_position_embeddings=False, hidden_size=3200, num_attention_heads=25, num_hidden_layers=2)],
    ids=["internvit-6b-style", "mask-token-and-pairs", "no-positions"])
def test_internvl_tower_options_have_the_real_models_parameters(options):
    cfg = T.InternVLConfig(vision_config=options)
    v, warning = vision_from_config(cfg.to_dict(), cfg.text_config.hidden_size)
    assert v is not None, warning
    assert (vision_parameters(v).tower, vision_parameters(v).projector) == _real_parts(_built(cfg))


def test_internvl_tiles_and_tokens_equal_its_image_processor_and_processor():
    """GotOcr2ImageProcessor (InternVL's) with InternVLProcessor's crop_to_patches: the tiles it returns, one
    1,025-token encoder sequence each, and 2 + 256 tokens per tile in the prompt (processing_internvl.py)."""
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil
    v, _ = vision_from_config(T.InternVLConfig().to_dict(), 896)
    proc = GotOcr2ImageProcessorPil(size={"height": 448, "width": 448}, crop_to_patches=True)
    for h, w in SIZES + [(448, 448), (448, 896), (900, 300)]:
        tiles = proc(images=[_img(h, w)], return_tensors="np")["pixel_values"].shape[0]
        got = image_tokens(v, h, w)
        assert tiles == proc.get_number_of_image_patches(h, w, {}) == len(got.sequences)
        assert got.sequences == (1025,) * tiles and (got.merged, got.lm_tokens) == (256 * tiles, 2 + 256 * tiles)


@pytest.mark.parametrize("field, value, why", [
    ("hidden_act", "silu", "hidden_act: an InternVL tower with 'silu' is not mapped (gelu is)"),
    ("image_size", [448, 224], "image_size: must be a whole number"),
    ("norm_type", "batch_norm", "norm_type: must be 'layer_norm' or 'rms_norm'")])
def test_an_internvl_tower_the_engine_cannot_price_is_left_out_naming_the_field(field, value, why):
    raw = T.InternVLConfig().to_dict()
    raw["vision_config"][field] = value
    v, warning = vision_from_config(raw, 896)
    assert v is None and why in warning
    raw = {**T.InternVLConfig().to_dict(), "vision_feature_select_strategy": "full"}
    assert "vision_feature_select_strategy: only 'default'" in vision_from_config(raw, 896)[1]


INTERNVL3_8B = {  # the shape of OpenGVLab/InternVL3-8B's config.json (remote code InternVLChatModel; its LLM Qwen2.5-7B)
    "architectures": ["InternVLChatModel"], "model_type": "internvl_chat", "downsample_ratio": 0.5,
    "force_image_size": 448, "max_dynamic_patch": 12, "min_dynamic_patch": 1, "use_thumbnail": True,
    "dynamic_image_size": True, "select_layer": -1, "ps_version": "v2", "template": "internvl2_5",
    "llm_config": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
                   "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                   "intermediate_size": 18944, "vocab_size": 151674, "tie_word_embeddings": False},
    "vision_config": {"architectures": ["InternVisionModel"], "model_type": "intern_vit_6b", "hidden_size": 1024,
                      "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096, "qkv_bias": True,
                      "qk_normalization": False, "norm_type": "layer_norm", "image_size": 448, "patch_size": 14,
                      "hidden_act": "gelu"}}


@pytest.mark.parametrize("vision", [INTERNVL3_8B["vision_config"],
                                    dict(hidden_size=3200, num_hidden_layers=2, num_attention_heads=25,
                                         intermediate_size=12800, qk_normalization=True)],  # InternViT-6B's fields
                         ids=["internvit-300m", "internvit-6b-defaults"])
def test_internvl_chat_remote_tower_has_the_values_of_the_real_hf_format_modules(vision):
    """InternVLChatModel's InternVisionModel (modeling_intern_vit.py) holds the values transformers' InternVLVisionModel
    holds for the same fields, q, k and v in one linear (3 weight tensors and 3 biases become 1 + 1), no final norm;
    its norm_type defaults to rms_norm (InternVisionConfig). The text model is llm_config's."""
    raw = {**INTERNVL3_8B, "vision_config": vision}
    mapped = spec_from_hf_config(raw)
    v = mapped.spec.vision
    hf = T.InternVLConfig(vision_config=dict(
        hidden_size=vision["hidden_size"], num_hidden_layers=vision["num_hidden_layers"],
        num_attention_heads=vision["num_attention_heads"], intermediate_size=vision["intermediate_size"],
        attention_bias=vision.get("qkv_bias", False), use_qk_norm=vision.get("qk_normalization", False),
        norm_type=vision.get("norm_type", "rms_norm")), text_config=dict(model_type="qwen2", hidden_size=3584))
    real = _built(hf)
    assert (vision_parameters(v).tower, vision_parameters(v).projector) == _real_parts(real)
    merged = (4 if vision.get("qkv_bias") else 2) * vision["num_hidden_layers"]
    real_tensors = len(list(real.model.vision_tower.parameters())) + len(list(real.model.multi_modal_projector.parameters()))
    assert vision_parameters(v).tensors == real_tensors - merged
    assert mapped.spec.model_type == "qwen2" and mapped.spec.architecture == "InternVLChatModel"
    assert "using its llm_config" in mapped.warnings[0] and "remote code (modeling_intern_vit.py)" in mapped.warnings[0]


def test_internvl_chat_tiles_follow_its_dynamic_preprocess_settings():
    v = spec_from_hf_config(INTERNVL3_8B).spec.vision
    assert len(image_tokens(v, 1024, 1024).sequences) == 10  # 3 × 3 and the thumbnail
    assert len(image_tokens(v.model_copy(update={"thumbnail": False}), 1024, 1024).sequences) == 9
    one = spec_from_hf_config({**INTERNVL3_8B, "dynamic_image_size": False}).spec.vision
    assert image_tokens(one, 1024, 1024) == ((1025,), 256, 258)
    six = spec_from_hf_config({**INTERNVL3_8B, "max_dynamic_patch": 6}).spec.vision
    assert len(image_tokens(six, 1024, 1024).sequences) == 5  # 2 × 2 (3 × 3 exceeds 6) and the thumbnail
