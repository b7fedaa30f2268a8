"""LLaVA's CLIP tower (calculator/model/vision, kind "clip": model_type llava with a clip_vision_model tower, LLaVA-1.5)
against transformers 5.23: the tower's and LlavaMultiModalProjector's parameters built on the meta device, the
tokens LlavaProcessor writes after CLIPImageProcessor's resize and crop, and which encoder blocks backward reaches.
What the tower saves: tests/model/test_vision_saved.py."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.vision import image_tokens, vision_from_config  # noqa: E402
from tests.model.test_vision import assert_real_tower  # noqa: E402

T = transformers


@pytest.mark.parametrize("kw", [{}, dict(vision_feature_layer=[-2, -5, -8], multimodal_projector_bias=False),
                                dict(vision_config=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                                                        num_attention_heads=16, patch_size=14, image_size=224))],
                         ids=["llava-1.5", "three-feature-layers", "clip-l-224"])
def test_the_tower_and_projector_have_the_real_models_parameters(kw):
    assert_real_tower(T.LlavaConfig(**kw), T.LlavaForConditionalGeneration, "clip")


def test_backward_reaches_the_blocks_up_to_the_feature_layer():
    """hidden_states[-2] (LLaVA-1.5's) is the output of the 23rd of 24 blocks: the 24th runs, no gradient reaches it."""
    v, _ = vision_from_config(T.LlavaConfig().to_dict(), 4096)
    assert (v.num_layers, v.trained_layers) == (24, 23)
    deep = vision_from_config(T.LlavaConfig(vision_feature_layer=[-1, -12]).to_dict(), 4096)[0]
    assert deep.trained_layers == 24 and deep.feature_layers == 2


@pytest.mark.parametrize("strategy, cls", [("default", 0), ("full", 1)])
def test_tokens_equal_the_processors(strategy, cls):
    """CLIPImageProcessor resizes the shortest side to 336 and crops the centre: 24 × 24 patches; LlavaProcessor writes
    (h / P)·(w / P) + num_additional_image_tokens (1: the CLS) − 1 under "default"."""
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    v, _ = vision_from_config(T.LlavaConfig(vision_feature_select_strategy=strategy).to_dict(), 4096)
    proc = CLIPImageProcessorPil(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336})
    for h, w in [(224, 224), (480, 640), (1080, 1920), (50, 3000)]:
        x = proc(images=[np.zeros((h, w, 3), np.uint8)], return_tensors="np")["pixel_values"]
        hh, ww = x.shape[-2:]
        tokens = (hh // 14) * (ww // 14) + 1 - (strategy == "default")
        assert image_tokens(v, h, w) == ((577,), tokens, tokens) and tokens == 576 + cls


def test_other_towers_in_a_llava_config_are_left_out_naming_them():
    raw = {**T.LlavaConfig().to_dict(), "vision_config": {"model_type": "dinov2", "hidden_size": 1024}}
    v, warning = vision_from_config(raw, 4096)
    assert v is None and "vision_config.model_type: a llava config with a 'dinov2' tower" in warning
    assert spec_from_hf_config(raw).spec.vision is None


# ---- LLaVA-NeXT (llava_next): the same tower and projector over its anyres tiles ------------------------------------
@pytest.mark.parametrize("kw", [{}, dict(image_grid_pinpoints=[[336, 336], [336, 672]], vision_feature_layer=-1)],
                         ids=["llava-v1.6", "two-canvases"])
def test_llava_next_tower_projector_and_newline_have_the_real_models_parameters(kw):
    v = assert_real_tower(T.LlavaNextConfig(**kw), T.LlavaNextForConditionalGeneration, "clip")
    assert v.grid_pinpoints


def test_llava_next_tiles_and_tokens_equal_its_image_processor_and_processor():
    """LlavaNextImageProcessor's tiles (the base image and the best canvas's crops) and LlavaNextProcessor's count of
    an image's tokens (num_additional_image_tokens 1, the llava-hf processors', less the CLS under "default")."""
    from functools import partial
    from types import SimpleNamespace

    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil
    from transformers.models.llava_next.processing_llava_next import LlavaNextProcessor
    cfg = T.LlavaNextConfig()
    v, _ = vision_from_config(cfg.to_dict(), 4096)
    proc = LlavaNextImageProcessorPil(image_grid_pinpoints=cfg.image_grid_pinpoints, size={"shortest_edge": 336},
                                      crop_size={"height": 336, "width": 336})
    ns = SimpleNamespace(image_processor=proc, patch_size=14, num_additional_image_tokens=1)
    ns._get_unpadded_features = partial(LlavaNextProcessor._get_unpadded_features, ns)
    for h, w in [(224, 224), (480, 640), (1080, 1920), (1024, 1024), (2000, 500), (100, 3000), (337, 1000)]:
        tiles = proc(images=[np.zeros((h, w, 3), np.uint8)], return_tensors="np")["pixel_values"].shape[1]
        tokens = LlavaNextProcessor._get_number_of_features(ns, h, w, 336, 336) - 1
        got = image_tokens(v, h, w)
        assert got.sequences == (577,) * tiles and got.merged == 576 * tiles and got.lm_tokens == tokens


# ---- LLaVA-OneVision (llava_onevision): a SigLIP tower over anyres tiles, the grid shrunk to anyres_max_N ---------
def test_llava_onevision_tower_projector_and_newline_have_the_real_models_parameters():
    v = assert_real_tower(T.LlavaOnevisionConfig(), T.LlavaOnevisionForConditionalGeneration, "onevision")
    assert len(v.grid_pinpoints) == 36


def test_llava_onevision_tiles_and_tokens_equal_its_image_processor_and_processor():
    from functools import partial
    from types import SimpleNamespace

    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil)
    from transformers.models.llava_onevision.processing_llava_onevision import LlavaOnevisionProcessor
    cfg = T.LlavaOnevisionConfig()
    v, _ = vision_from_config(cfg.to_dict(), 3584)
    proc = LlavaOnevisionImageProcessorPil(image_grid_pinpoints=cfg.image_grid_pinpoints)
    ns = SimpleNamespace(image_processor=proc, num_image_tokens=729, vision_aspect_ratio="anyres_max_9")
    ns._get_unpadded_features = partial(LlavaOnevisionProcessor._get_unpadded_features, ns)
    for h, w in [(224, 224), (480, 640), (1080, 1920), (1024, 1024), (2000, 500), (100, 3000), (4000, 3000)]:
        tiles = proc(images=[np.zeros((h, w, 3), np.uint8)], return_tensors="np")["pixel_values"].shape[1]
        tokens = LlavaOnevisionProcessor._get_number_of_features(ns, h, w, 384, 384)
        got = image_tokens(v, h, w)
        assert got.sequences == (729,) * tiles and got.lm_tokens == tokens


def test_canvases_that_are_not_whole_tiles_leave_the_tower_out_naming_the_field():
    """(found by a seeded fuzz of the new towers' configs: [[1, 2]] divided by zero in the token count)"""
    raw = T.LlavaNextConfig(image_grid_pinpoints=[[1, 2]]).to_dict()
    v, warning = vision_from_config(raw, 4096)
    assert v is None and "image_grid_pinpoints: each [height, width] must be whole tiles of the tower's image_size " \
                         "(336)" in warning


# ---- VipLLaVA (vipllava): five layers' hidden states, projector_layernorm first ------------------------------------
def test_vipllava_tower_and_projector_have_the_real_models_parameters():
    v = assert_real_tower(T.VipLlavaConfig(), T.VipLlavaForConditionalGeneration, "clip")
    assert v.projector_norm and v.feature_layers == 5 and v.trained_layers == 23
    assert image_tokens(v, 640, 480) == ((577,), 576, 576)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_vipllava_saves_what_its_real_get_image_features_saves(impl):
    from tests.model.test_vision_saved import CPU_LN_STATS, E, TEXT, _block, _trace
    from calculator.model.vision.saved import tower_saved_bytes
    cfg = T.VipLlavaConfig(vision_config=dict(hidden_size=48, intermediate_size=104, num_hidden_layers=4,
                                              num_attention_heads=4, image_size=32, patch_size=4),
                           text_config=dict(TEXT, model_type="llama"), vision_feature_layer=[-2, -3, 1])
    v, _ = vision_from_config(cfg.to_dict(), 40)
    pixels = torch.randn(2, 3, 32, 32)
    by = _trace({"model": T.VipLlavaModel(cfg)},
                lambda t: t["model"].get_image_features(pixel_values=pixels.bfloat16()).pooler_output.float().sum(),
                impl)
    blocks, outside = tower_saved_bytes(v, 2, 32, E, impl, CPU_LN_STATS)
    assert _block(by, "tower.model.vision_tower.encoder.layers.", 1) * v.trained_layers == blocks
    assert sum(by.values()) == blocks + outside


# ---- LLaVA-Interleave (llava with a siglip_vision_model tower) --------------------------------------------------
INTERLEAVE = dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304, num_hidden_layers=26,
                  num_attention_heads=16, image_size=384, patch_size=14, vision_use_head=False)


def test_a_siglip_tower_in_a_llava_config_has_the_real_models_parameters_and_one_image_of_tokens():
    cfg = T.LlavaConfig(vision_config=INTERLEAVE, vision_feature_select_strategy="full", vision_feature_layer=-1)
    v = assert_real_tower(cfg, T.LlavaForConditionalGeneration, "onevision")
    assert not v.grid_pinpoints
    assert image_tokens(v, 480, 640) == ((729,), 729, 729) and v.trained_layers == 26


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_a_siglip_tower_in_a_llava_config_saves_what_its_real_get_image_features_saves(impl):
    from tests.model.test_vision_saved import CPU_LN_STATS, E, TEXT, _block, _trace
    from calculator.model.vision.saved import tower_saved_bytes
    cfg = T.LlavaConfig(vision_config=dict(INTERLEAVE, hidden_size=48, intermediate_size=104, num_hidden_layers=3,
                                           num_attention_heads=4, image_size=32, patch_size=4),
                        text_config=dict(TEXT, model_type="llama"), vision_feature_select_strategy="full",
                        vision_feature_layer=-1)
    v, _ = vision_from_config(cfg.to_dict(), 40)
    pixels = torch.randn(2, 3, 32, 32)
    by = _trace({"model": T.LlavaModel(cfg)},
                lambda t: sum(f.float().sum() for f in t["model"].get_image_features(
                    pixel_values=pixels.bfloat16()).pooler_output), impl)
    blocks, outside = tower_saved_bytes(v, 2, 32, E, impl, CPU_LN_STATS)
    assert _block(by, "tower.model.vision_tower.encoder.layers.", 1) * v.trained_layers == blocks
    assert sum(by.values()) == blocks + outside


# ---- Pixtral-12B (llava with a pixtral tower): LLaVA's projector, no patch merger ---------------------------------
PIXTRAL_12B = dict(model_type="pixtral", hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                   num_attention_heads=16, head_dim=64, image_size=1024, patch_size=16)


def test_a_pixtral_tower_in_a_llava_config_has_the_real_models_parameters_and_tokens():
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil
    cfg = T.LlavaConfig(vision_config=PIXTRAL_12B, vision_feature_select_strategy="full", vision_feature_layer=-1)
    v = assert_real_tower(cfg, T.LlavaForConditionalGeneration, "pixtral")
    assert v.llava_projector and v.spatial_merge_size == 1
    proc = PixtralImageProcessorPil(patch_size={"height": 16, "width": 16}, size={"longest_edge": 1024})
    for h, w in [(224, 224), (480, 640), (1080, 1920), (2000, 500)]:
        hh, ww = (int(x) for x in proc(images=[np.zeros((h, w, 3), np.uint8)], return_tensors="np")["image_sizes"][0])
        got = image_tokens(v, h, w)
        assert (got.patches, got.merged, got.lm_tokens) == ((hh // 16) * (ww // 16),) * 2 + (
            (hh // 16) * (ww // 16 + 1),)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_a_pixtral_tower_in_a_llava_config_saves_what_its_real_get_image_features_saves(impl):
    from tests.model.test_vision_saved import CPU_LN_STATS, E, TEXT, _block, _trace
    from calculator.model.vision.saved import tower_saved_bytes
    cfg = T.LlavaConfig(vision_config=dict(PIXTRAL_12B, hidden_size=48, intermediate_size=104, num_hidden_layers=3,
                                           num_attention_heads=4, head_dim=12, image_size=64, patch_size=8),
                        text_config=dict(TEXT, model_type="llama"), vision_feature_select_strategy="full",
                        vision_feature_layer=-1)
    v, _ = vision_from_config(cfg.to_dict(), 40)
    pixels, sizes = torch.randn(2, 3, 64, 64), torch.tensor([(64, 64)] * 2)
    by = _trace({"model": T.LlavaModel(cfg)},
                lambda t: sum(f.float().sum() for f in t["model"].get_image_features(
                    pixel_values=pixels.bfloat16(), image_sizes=sizes).pooler_output), impl)
    blocks, outside = tower_saved_bytes(v, 2, 64, E, impl, CPU_LN_STATS)
    assert _block(by, "tower.model.vision_tower.transformer.layers.", 1) * v.trained_layers == blocks
    assert sum(by.values()) == blocks + outside
