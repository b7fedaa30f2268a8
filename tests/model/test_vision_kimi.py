"""Kimi-K2.5's vision tower (calculator/model/vision, kind "kimi": MoonViT and Kimi_K25MultimodalProjection) against
transformers 5.23: parameters built on the meta device, the padded patch grid of its image processor's navit_resize
(executed from the installed file: the processor needs torchvision) and its prompt count, and what a trained tower
saves against a trace of the real Kimi_K25Model.get_image_features."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.vision import block_saved_bytes, image_tokens, vision_from_config, vision_parameters  # noqa
from calculator.model.vision.saved import outside_saved_bytes  # noqa: E402
from tests.model.test_vision_saved import CPU_LN_STATS, E, TEXT, _block, _trace  # noqa: E402
from tests.model.test_vision import assert_real_tower  # noqa: E402

T = transformers


def _navit_resize():
    path = Path(T.__file__).parent / "models" / "kimi_k25" / "image_processing_kimi_k25.py"
    ns = {"math": math}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name == "navit_resize":
            exec(compile(ast.Module([node], []), str(path), "exec"), ns)
    return ns["navit_resize"]


def test_the_tower_and_projector_have_the_real_models_parameters():
    assert_real_tower(T.Kimi_K25Config(), T.Kimi_K25ForConditionalGeneration, "kimi")


def test_patches_and_tokens_follow_navit_resize_and_the_processors_count():
    """Kimi_K25ImageProcessor's defaults (patch 14, merge 2, 16,384 patches, 512 a side) and
    Kimi_K25Processor.replace_image_token: one <|media_pad|> per merged token."""
    navit = _navit_resize()
    v, _ = vision_from_config(T.Kimi_K25Config().to_dict(), 7168)
    for h, w in [(224, 224), (480, 640), (1080, 1920), (1024, 1024), (2000, 500), (100, 3000), (4000, 3000), (30, 20)]:
        _, (ph, pw) = navit(h, w, patch_size=14, merge_kernel_size=2, max_patches=16384, max_size_per_side=512)
        n = (ph // 14) * (pw // 14)
        assert image_tokens(v, h, w) == ((n,), n // 4, n // 4)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("grids", [[[1, 4, 6]], [[1, 4, 4], [1, 2, 6]]], ids=["one", "two"])
def test_a_trained_tower_saves_what_its_real_get_image_features_saves(grids, impl):
    cfg = T.Kimi_K25Config(vision_config=dict(hidden_size=48, intermediate_size=104, num_hidden_layers=3,
                                              num_attention_heads=4, patch_size=4, pos_emb_height=8,
                                              pos_emb_width=8),
                           text_config=dict(TEXT, model_type="deepseek_v3"), projection_hidden_size=48)
    v, warning = vision_from_config(cfg.to_dict(), 40)
    assert v is not None, warning
    grid = torch.tensor(grids)
    n = int(grid.prod(-1).sum())
    pixels = torch.randn(n, 3, 4, 4)
    by = _trace({"model": T.Kimi_K25Model(cfg)},
                lambda t: sum(f.float().sum() for f in t["model"].get_image_features(
                    pixel_values=pixels.bfloat16(), image_grid_thw=grid).pooler_output), impl)
    groups = tuple(int(g[1] * g[2]) for g in grids)
    block = block_saved_bytes(v, groups, E, impl, CPU_LN_STATS)
    assert _block(by, "tower.model.vision_tower.layers.", 1) == block
    outside = outside_saved_bytes(v, 1, groups, n // 4, E, impl, CPU_LN_STATS)
    assert sum(by.values()) == v.trained_layers * block + outside, by


def test_the_hubs_own_field_names_are_read():
    """moonshotai/Kimi-K2.5's config.json (its remote-code class) names the tower's sizes vt_*: a smaller tower
    written that way maps to the same VisionSpec as transformers' names."""
    hub = {"vt_hidden_size": 48, "vt_num_hidden_layers": 3, "vt_intermediate_size": 104, "vt_num_attention_heads": 4,
           "init_pos_emb_height": 8, "init_pos_emb_width": 8, "mm_hidden_size": 48, "patch_size": 4,
           "merge_kernel_size": [2, 2]}
    named = dict(hidden_size=48, num_hidden_layers=3, intermediate_size=104, num_attention_heads=4, pos_emb_height=8,
                 pos_emb_width=8, patch_size=4, merge_kernel_size=[2, 2])
    a = vision_from_config({"model_type": "kimi_k25", "text_config": {"hidden_size": 40}, "vision_config": hub}, 40)[0]
    b = vision_from_config({"model_type": "kimi_k25", "text_config": {"hidden_size": 40}, "vision_config": named,
                            "projection_hidden_size": 48}, 40)[0]
    assert a is not None and a == b and vision_parameters(a).tower == vision_parameters(b).tower
