"""SmolVLM's and Idefics3's vision tower (calculator/model/vision, kind "smolvlm") against transformers 5.23: the
tower's and connector's parameters built on the meta device, the tiles SmolVLMImageProcessor cuts and the tokens its
processor writes. What the tower saves: tests/model/test_vision_saved.py."""
from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.vision import image_tokens, vision_from_config  # noqa: E402
from tests.model.test_vision import assert_real_tower  # noqa: E402

T = transformers
SMOLVLM2_2B = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                   image_size=384, patch_size=14)  # HuggingFaceTB/SmolVLM2-2.2B-Instruct's tower
SIZES = [(224, 224), (480, 640), (1080, 1920), (1024, 1024), (2000, 500), (100, 3000), (3024, 4032), (50, 60),
         (384, 384), (383, 385), (6000, 6000)]


@pytest.mark.parametrize("config_class, vision, scale", [
    (T.SmolVLMConfig, {}, 2), (T.SmolVLMConfig, SMOLVLM2_2B, 3), (T.Idefics3Config, {}, 2),
    (T.Idefics3Config, dict(image_size=364, patch_size=14), 2)], ids=["smolvlm", "smolvlm2-2.2b", "idefics3",
                                                                       "idefics3-8b"])
def test_the_tower_and_connector_have_the_real_models_parameters(config_class, vision, scale):
    assert_real_tower(config_class(vision_config=vision, scale_factor=scale), T.AutoModelForImageTextToText.from_config,
                      "smolvlm")


def test_tiles_and_tokens_equal_its_image_processor_and_processor():
    """SmolVLMImageProcessor with the checkpoints' sizes (longest edge 4 × the tile, max_image_size the tile): the
    tiles it returns, and the processor's prompt (<row_r_col_c> and <global-img> are single tokens, a "\\n\\n" too)."""
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil
    from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string
    cfg = T.SmolVLMConfig(vision_config=SMOLVLM2_2B, scale_factor=3)
    v, _ = vision_from_config(cfg.to_dict(), 2048)
    proc = SmolVLMImageProcessorPil(size={"longest_edge": 1536}, max_image_size={"longest_edge": 384})
    for h, w in SIZES:
        x = proc(images=[np.zeros((h, w, 3), np.uint8)], return_tensors="np", return_row_col_info=True)
        tiles, rows, cols = x["pixel_values"].shape[1], x["rows"][0][0], x["cols"][0][0]
        prompt = get_image_prompt_string(rows, cols, 81, "<fake>", "<image>", "<global-img>")
        got = image_tokens(v, h, w)
        assert got.sequences == (729,) * tiles and got.merged == 81 * tiles
        assert got.lm_tokens == len(re.findall(r"<[a-z_0-9-]+>|\n\n|\n", prompt))


def test_another_activation_is_left_out_naming_it():
    raw = T.SmolVLMConfig(vision_config=dict(hidden_act="gelu")).to_dict()
    v, warning = vision_from_config(raw, 2048)
    assert v is None and "hidden_act: a smolvlm tower with 'gelu' is not mapped (gelu_pytorch_tanh is)" in warning
