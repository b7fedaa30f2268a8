"""Aya Vision's tower (calculator/model/vision, kind "aya": a SigLIP encoder and AyaVisionMultiModalProjector)
against transformers 5.23: parameters built on the meta device, the tiles GotOcr2ImageProcessor cuts and the tokens
AyaVisionProcessor writes. What the tower saves: tests/model/test_vision_saved.py."""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.vision import image_tokens, vision_from_config  # noqa: E402
from tests.model.test_vision import assert_real_tower  # noqa: E402

T = transformers
AYA_8B = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16, patch_size=14,
              image_size=364)  # CohereLabs/aya-vision-8b's tower: SigLIP-so400m/14 at 364²


@pytest.mark.parametrize("kw", [dict(vision_config=AYA_8B, alignment_intermediate_size=28672),
                                dict(vision_config=dict(num_attention_heads=16), downsample_factor=4)],
                         ids=["aya-vision-8b", "downsample-4"])
def test_the_tower_and_projector_have_the_real_models_parameters(kw):
    assert_real_tower(T.AyaVisionConfig(**kw), T.AyaVisionForConditionalGeneration, "aya")


def test_tiles_and_tokens_equal_its_image_processor_and_processor():
    from transformers.models.aya_vision.processing_aya_vision import AyaVisionProcessor
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil
    v, _ = vision_from_config(T.AyaVisionConfig(vision_config=AYA_8B).to_dict(), 4096)
    proc = GotOcr2ImageProcessorPil(size={"height": 364, "width": 364}, crop_to_patches=True)
    markers = SimpleNamespace(img_size=364, patch_size=28, start_of_img_token="<|START_OF_IMG|>",
                              end_of_img_token="<|END_OF_IMG|>", img_patch_token="<|IMG_PATCH|>", tile_token="TILE",
                              tile_global_token="TILE_GLOBAL")
    for h, w in [(224, 224), (480, 640), (1080, 1920), (1024, 1024), (2000, 500), (100, 3000), (364, 364)]:
        x = proc(images=[np.zeros((h, w, 3), np.uint8)], return_tensors="np")
        tiles = x["pixel_values"].shape[0]
        prompt = AyaVisionProcessor.replace_image_token(markers, {"num_patches": [tiles]}, 0)
        got = image_tokens(v, h, w)
        assert got.sequences == (676,) * tiles and got.merged == 169 * tiles
        assert got.lm_tokens == len(re.findall(r"<\|[A-Z_]+\|>|TILE_GLOBAL|TILE_\d+", prompt))


def test_a_tower_it_cannot_run_is_left_out_naming_why():
    raw = T.AyaVisionConfig(vision_config=AYA_8B, vision_feature_select_strategy="default").to_dict()
    v, warning = vision_from_config(raw, 4096)
    assert v is None and "vision_feature_select_strategy: only 'full' runs an Aya Vision tower" in warning
    # the configuration class's own default tower (1,152 wide, 14 heads) cannot be built by transformers either
    v, warning = vision_from_config(T.AyaVisionConfig().to_dict(), 8192)
    assert v is None and "vision tower ignored (vision_config: hidden_size (1152) must be a multiple of num_heads (14))" \
        in warning


# ---- Command A Vision (cohere2_vision): the same projector without its norm, its own canvas ----------------------
COMMAND_A = dict(hidden_size=1152, intermediate_size=3072, image_size=512, num_hidden_layers=27, num_attention_heads=12,
                 patch_size=16, vision_use_head=False)


@pytest.mark.parametrize("vision", [None, COMMAND_A], ids=["default", "command-a-vision"])
def test_command_a_vision_tower_and_projector_have_the_real_models_parameters(vision):
    assert_real_tower(T.Cohere2VisionConfig(vision_config=vision, alignment_intermediate_size=512),
                      T.Cohere2VisionForConditionalGeneration, "cohere2")


def _cohere2_canvas():
    """get_all_supported_aspect_ratios and get_optimal_tiled_canvas executed from the installed
    image_processing_cohere2_vision.py (its image processor needs torchvision, which is not installed)."""
    import ast
    from pathlib import Path
    path = Path(T.__file__).parent / "models" / "cohere2_vision" / "image_processing_cohere2_vision.py"
    from functools import lru_cache
    ns = {"np": np, "lru_cache": lru_cache}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name in ("get_all_supported_aspect_ratios",
                                                               "get_optimal_tiled_canvas"):
            exec(compile(ast.Module([node], []), str(path), "exec"), ns)
    return ns["get_optimal_tiled_canvas"]


def test_command_a_vision_tiles_follow_its_canvas_and_tokens_its_prompt():
    from transformers.models.cohere2_vision.processing_cohere2_vision import Cohere2VisionProcessor
    canvas = _cohere2_canvas()
    v, _ = vision_from_config(T.Cohere2VisionConfig(vision_config=COMMAND_A).to_dict(), 12288)
    markers = SimpleNamespace(patch_size=16, boi_token="<boi>", eoi_token="<eoi>", image_token="<img>",
                              img_line_break_token="<br>")
    for h, w in [(224, 224), (480, 640), (1080, 1920), (1024, 1024), (2000, 500), (100, 3000), (512, 512), (7000, 700)]:
        c, r = canvas((h, w), (512, 512), 1, 12)
        tiles = c * r + (1 if c * r > 1 else 0)
        prompt = Cohere2VisionProcessor.replace_image_token(markers, {"num_patches": [tiles]}, 0)
        got = image_tokens(v, h, w)
        assert got.sequences == (1024,) * tiles and got.merged == 256 * tiles
        assert got.lm_tokens == len(re.findall(r"<[a-z]+>", prompt))
