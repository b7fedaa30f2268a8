"""What a trained vision tower saves for backward (calculator/model/vision/saved.py), byte for byte against the real
transformers 5.23 modules: tiny bf16 models on the CPU, traced with validation/trace/saved_by_module.py (storages
alive at the end of the forward, parameters and buffers never), eager and SDPA attention. One encoder block (block 1:
block 0 also owns the rotary tables every block shares) and the whole tower with its projector, for one and two
images. The CPU keeps nn.LayerNorm's mean and rstd in the model dtype (2e bytes per row; CUDA: fp32, 8)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.vision import attention_groups, block_saved_bytes, image_tokens, vision_from_config  # noqa: E402
from calculator.model.vision.saved import tower_saved_bytes  # noqa: E402
from validation.trace.saved_by_module import saved_bytes_by_module  # noqa: E402

T = transformers
E, CPU_LN_STATS = 2, 4
TEXT = dict(hidden_size=40, num_hidden_layers=1, vocab_size=16, intermediate_size=8, num_attention_heads=2,
            num_key_value_heads=1, head_dim=8)
ROOMY = dict(min_pixels=0, max_pixels=1 << 40)  # tiny images: no resize to the checkpoints' pixel bounds


class _Run(torch.nn.Module):
    """The tower (and projector) as saved_bytes_by_module calls a model: forward(input_ids, labels)."""

    def __init__(self, parts: dict, run):
        super().__init__()
        self.tower = torch.nn.ModuleDict(parts)
        self.run = run

    def forward(self, input_ids=None, labels=None, **_):
        return self.run(self.tower)


def _trace(parts: dict, run, impl: str) -> dict[str, int]:
    torch.manual_seed(0)
    model = _Run(parts, run)
    for sub in model.modules():
        if hasattr(sub, "config") and hasattr(sub.config, "_attn_implementation"):
            sub.config._attn_implementation = impl
    model = model.to(torch.bfloat16).train()
    return saved_bytes_by_module(model, torch.zeros(1, 1, dtype=torch.long))


def _block(by: dict[str, int], prefix: str, i: int) -> int:
    return sum(b for k, b in by.items() if k.startswith(f"{prefix}{i}."))


def _check(v, by, prefix, images, px, impl, groups):
    blocks, outside = tower_saved_bytes(v, images, px, E, impl, CPU_LN_STATS)
    assert _block(by, prefix, 1) == block_saved_bytes(v, groups, E, impl, CPU_LN_STATS)
    assert sum(by.values()) == blocks + outside


IMPLS = ("eager", "sdpa")
# the small CLIP / SigLIP-style tower the tests below build (each adds its image and patch size)
SMALL_TOWER = dict(hidden_size=48, intermediate_size=104, num_hidden_layers=3, num_attention_heads=4)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("outer", ["qwen3_5", "qwen3_vl"])
@pytest.mark.parametrize("images, px", [(1, 32), (2, 32), (1, 48)])
def test_qwen3_vision_blocks_and_tower(outer, images, px, impl):
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel
    kw = dict(hidden_size=48, intermediate_size=104, depth=3, num_heads=4, patch_size=4, out_hidden_size=40,
              num_position_embeddings=64)
    if outer == "qwen3_vl":
        cfg, cls = T.Qwen3VLVisionConfig(**kw, deepstack_visual_indexes=[1]), Qwen3VLVisionModel
    else:
        cfg, cls = T.Qwen3_5VisionConfig(**kw), Qwen3_5VisionModel
    v = vision_from_config({"model_type": outer, "vision_config": cfg.to_dict()}, 40)[0].model_copy(update=ROOMY)
    g = px // 4
    pixels, grid = torch.randn(images * g * g, 3 * 2 * 16), torch.tensor([[1, g, g]] * images)

    def run(t):
        out = t["visual"](pixels.bfloat16(), grid_thw=grid)
        return out.pooler_output.sum() + sum(x.sum() for x in (getattr(out, "deepstack_features", None) or []))
    by = _trace({"visual": cls._from_config(cfg)}, run, impl)
    # (qwen3_vl: block 1's output feeds a DeepStack merger, which saves it before block 2's norm does)
    assert _block(by, "tower.visual.blocks.", 1) == block_saved_bytes(v, (g * g,) * images, E, impl, CPU_LN_STATS)
    assert sum(by.values()) == sum(tower_saved_bytes(v, images, px, E, impl, CPU_LN_STATS))


def _check_grid_tower(outer, cfg, cls, images, px, impl):
    """A tower fed a Qwen-style grid (patches of 3 × 2 × 4 × 4 values, one t × h × w row per image): every block
    attends over its image; block 1 and the whole tower with its projector against the trace."""
    v = vision_from_config({"model_type": outer, "vision_config": cfg.to_dict()}, 40)[0].model_copy(update=ROOMY)
    g = px // 4
    pixels, grid = torch.randn(images * g * g, 3 * 2 * 16), torch.tensor([[1, g, g]] * images)
    by = _trace({"visual": cls._from_config(cfg)},
                lambda t: t["visual"](pixels.bfloat16(), grid_thw=grid).pooler_output.sum(), impl)
    _check(v, by, "tower.visual.blocks.", images, px, impl, (g * g,) * images)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("images, px", [(1, 32), (2, 32), (1, 48)])
def test_qwen2_vl_blocks_and_tower(images, px, impl):
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel
    cfg = T.Qwen2VLVisionConfig(embed_dim=48, mlp_ratio=2, depth=3, num_heads=4, patch_size=4, hidden_size=40)
    _check_grid_tower("qwen2_vl", cfg, Qwen2VisionTransformerPretrainedModel, images, px, impl)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("outer", ["glm4v", "glm4v_moe"])
@pytest.mark.parametrize("images, px", [(1, 32), (2, 32), (1, 48)])
def test_glm4v_blocks_and_tower_with_downsample_and_merger(outer, images, px, impl):
    from transformers.models.glm4v.modeling_glm4v import Glm4vVisionModel
    from transformers.models.glm4v_moe.modeling_glm4v_moe import Glm4vMoeVisionModel
    kw = dict(hidden_size=48, depth=3, num_heads=4, patch_size=4, image_size=32, out_hidden_size=40,
              intermediate_size=56, attention_bias=True)
    cfg, cls = ((T.Glm4vVisionConfig(**kw), Glm4vVisionModel) if outer == "glm4v"
                else (T.Glm4vMoeVisionConfig(**kw), Glm4vMoeVisionModel))
    _check_grid_tower(outer, cfg, cls, images, px, impl)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("images, px", [(1, 32), (2, 32), (1, 48)])
def test_qwen2_5_vl_windowed_and_full_blocks_and_tower(images, px, impl):
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel
    cfg = T.Qwen2_5_VLVisionConfig(hidden_size=48, intermediate_size=104, depth=3, num_heads=4, patch_size=4,
                                   window_size=16, fullatt_block_indexes=[1], out_hidden_size=40)
    v = vision_from_config({"model_type": "qwen2_5_vl", "vision_config": cfg.to_dict()}, 40)[0].model_copy(
        update=ROOMY)
    g = px // 4
    pixels, grid = torch.randn(images * g * g, 3 * 2 * 16), torch.tensor([[1, g, g]] * images)
    by = _trace({"visual": Qwen2_5_VisionTransformerPretrainedModel._from_config(cfg)},
                lambda t: t["visual"](pixels.bfloat16(), grid_thw=grid).pooler_output.sum(), impl)
    sequences = (g * g,) * images
    for i in (1, 2):  # block 1 attends over each image, block 2 within windows of 4 × 4 patches
        groups = attention_groups(v, ((g, g),) * images, sequences, i, impl)
        assert _block(by, "tower.visual.blocks.", i) == block_saved_bytes(v, groups, E, impl, CPU_LN_STATS)
    assert attention_groups(v, ((g, g),) * images, sequences, 2, impl) != sequences
    assert sum(by.values()) == sum(tower_saved_bytes(v, images, px, E, impl, CPU_LN_STATS))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("images, side, tokens", [(1, 64, 16), (2, 64, 16), (1, 96, 36)])
def test_gemma3_siglip_blocks_and_tower_with_projector(images, side, tokens, impl):
    from transformers.models.gemma3.modeling_gemma3 import Gemma3MultiModalProjector
    cfg = T.Gemma3Config(vision_config=dict(SMALL_TOWER, image_size=side, patch_size=8,
                                            vision_use_head=False), text_config=TEXT, mm_tokens_per_image=tokens)
    v, _ = vision_from_config(cfg.to_dict(), 40)
    pixels = torch.randn(images, 3, side, side)
    by = _trace({"vision": T.SiglipVisionModel._from_config(cfg.vision_config),
                 "projector": Gemma3MultiModalProjector(cfg)},
                lambda t: t["projector"](t["vision"](pixel_values=pixels.bfloat16()).last_hidden_state).float().sum(),
                impl)
    _check(v, by, "tower.vision.encoder.layers.", images, side, impl, ((side // 8) ** 2,) * images)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("images, side", [(1, 64), (2, 64), (1, 96)])
def test_paligemma_siglip_blocks_and_tower_with_its_linear_projector(images, side, impl):
    from transformers.models.paligemma.modeling_paligemma import PaliGemmaMultiModalProjector
    cfg = T.PaliGemmaConfig(vision_config=dict(SMALL_TOWER, image_size=side, patch_size=8),
                            text_config=dict(TEXT, model_type="gemma"), projection_dim=40, hidden_size=40)
    v, _ = vision_from_config(cfg.to_dict(), 40)
    assert (v.kind, v.image_block_mask, v.tokens_per_image) == ("paligemma", "all", (side // 8) ** 2)
    pixels = torch.randn(images, 3, side, side)
    by = _trace({"vision": T.SiglipVisionModel._from_config(cfg.vision_config),
                 "projector": PaliGemmaMultiModalProjector(cfg)},
                lambda t: t["projector"](t["vision"](pixel_values=pixels.bfloat16()).last_hidden_state).float().sum(),
                impl)
    _check(v, by, "tower.vision.encoder.layers.", images, side, impl, ((side // 8) ** 2,) * images)


@pytest.mark.filterwarnings("ignore:Casting complex values")  # .to(bfloat16) of its complex rotary buffer
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("tile, px", [(64, 64), (64, 128), (96, 96)])
def test_llama4_blocks_and_tower_with_adapter_and_projector(tile, px, impl):
    from transformers.models.llama4.modeling_llama4 import Llama4MultiModalProjector, Llama4VisionModel
    cfg = T.Llama4Config(vision_config=dict(hidden_size=48, intermediate_size=192, num_hidden_layers=3,
                                            num_attention_heads=4, image_size=tile, patch_size=8,
                                            projector_input_dim=40, projector_output_dim=40, vision_output_dim=40),
                         text_config={"hidden_size": 40})
    v, _ = vision_from_config(cfg.to_dict(), 40)
    tiles = len(image_tokens(v, px, px).sequences)  # 1, or a 2 × 2 canvas and the global tile
    pixels = torch.randn(tiles, 3, tile, tile)
    by = _trace({"vision": Llama4VisionModel._from_config(cfg.vision_config), "projector": Llama4MultiModalProjector(cfg)},
                lambda t: t["projector"](t["vision"](pixel_values=pixels.bfloat16()).last_hidden_state).float().sum(),
                impl)
    _check(v, by, "tower.vision.model.layers.", 1, px, impl, ((tile // 8) ** 2 + 1,) * tiles)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("images, px", [(1, 64), (2, 64), (1, 80)])
def test_pixtral_blocks_and_tower_with_the_mistral3_projector(images, px, impl):
    from transformers.models.mistral3.modeling_mistral3 import Mistral3MultiModalProjector
    cfg = T.Mistral3Config(vision_config=dict(SMALL_TOWER, head_dim=12, image_size=96, patch_size=8),
                           text_config=TEXT)
    v, _ = vision_from_config(cfg.to_dict(), 40)
    pixels, sizes = torch.randn(images, 3, px, px), torch.tensor([(px, px)] * images)

    def run(t):
        out = t["vision"](pixels.bfloat16(), image_sizes=sizes, output_hidden_states=True, return_dict=True)
        return t["projector"](out.hidden_states[-1].squeeze(0), sizes).float().sum()
    by = _trace({"vision": T.PixtralVisionModel._from_config(cfg.vision_config),
                 "projector": Mistral3MultiModalProjector(cfg)}, run, impl)
    # eager / SDPA: every image of the call is one sequence under a block-diagonal mask
    _check(v, by, "tower.vision.transformer.layers.", images, px, impl, ((px // 8) ** 2 * images,))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("sizes", [[(40, 56)], [(40, 56), (64, 24)], [(48, 48)], [(30, 30)] * 2], ids=str)
def test_gemma4_blocks_and_tower_with_embed_vision(sizes, impl):
    """Gemma 4 at a small width (patch 4, pooling kernel 2, 70 soft tokens: a 280-patch budget), its inputs made by
    the real image processor: every image padded to the budget, which the encoder runs (the padding masked)."""
    import numpy as np
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil
    from transformers.models.gemma4.modeling_gemma4 import Gemma4MultimodalEmbedder, Gemma4VisionModel
    cfg = T.Gemma4Config(vision_config=dict(SMALL_TOWER, num_key_value_heads=4, head_dim=12, patch_size=4,
                                            pooling_kernel_size=2, position_embedding_size=64, standardize=True),
                         text_config=TEXT)
    raw = {**cfg.to_dict(), "vision_soft_tokens_per_image": 70}
    v, _ = vision_from_config(raw, 40)
    proc = Gemma4ImageProcessorPil(patch_size=4, max_soft_tokens=70, pooling_kernel_size=2)
    x = proc(images=[np.zeros((h, w, 3), np.uint8) for h, w in sizes], return_tensors="pt")
    assert x["pixel_values"].shape[1] == 280 == image_tokens(v, *sizes[0]).patches
    assert list(x["num_soft_tokens_per_image"]) == [image_tokens(v, h, w).merged for h, w in sizes]

    def run(t):
        h = t["vision"](pixel_values=x["pixel_values"], pixel_position_ids=x["image_position_ids"])
        return t["embed"](h.last_hidden_state).float().sum()
    by = _trace({"vision": Gemma4VisionModel._from_config(cfg.vision_config),
                 "embed": Gemma4MultimodalEmbedder(cfg.vision_config, cfg.text_config)}, run, impl)
    groups = (280,) * len(sizes)
    assert _block(by, "tower.vision.encoder.layers.", 1) == block_saved_bytes(v, groups, E, impl, CPU_LN_STATS)
    if all(h == w == sizes[0][0] for h, w in sizes):  # tower_saved_bytes prices equal square images
        assert sum(by.values()) == sum(tower_saved_bytes(v, len(sizes), sizes[0][0], E, impl, CPU_LN_STATS))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("options", [{}, dict(use_qk_norm=True, norm_type="rms_norm", use_mean_pooling=False)],
                         ids=["internvl3", "internvit-6b-style"])
@pytest.mark.parametrize("px", [32, 64])
def test_internvl_blocks_and_tower_with_its_projector(px, options, impl):
    """InternVL at a small width (32² tiles of 4² patches): one 65-token sequence per tile (CLS included), the pixel
    shuffle and InternVLMultiModalProjector, as InternVLModel.get_image_features runs them."""
    from transformers.models.internvl.modeling_internvl import InternVLModel, InternVLMultiModalProjector
    cfg = T.InternVLConfig(vision_config=dict(SMALL_TOWER, image_size=32, patch_size=4, **options),
                           text_config=TEXT)
    v, _ = vision_from_config(cfg.to_dict(), 40)
    tiles = len(image_tokens(v, px, px).sequences)  # 1, or a 2 × 2 canvas and the thumbnail
    pixels = torch.randn(tiles, 3, 32, 32)

    def run(t):
        features = t["vision"](pixel_values=pixels.bfloat16()).last_hidden_state[:, 1:, :]
        grid = features.reshape(tiles, 8, 8, -1)
        shuffled = InternVLModel.pixel_shuffle(None, grid, scale_factor=0.5).reshape(tiles, -1, 4 * 48)
        return t["projector"](shuffled).float().sum()
    by = _trace({"vision": T.InternVLVisionModel._from_config(cfg.vision_config),
                 "projector": InternVLMultiModalProjector(cfg)}, run, impl)
    # the layer-scale products are the block's own calls (InternVLVisionLayer.forward), not a submodule's
    block = _block(by, "tower.vision.encoder.layer.", 1) + by.get("tower.vision.encoder.layer.1", 0)
    assert block == block_saved_bytes(v, (65,) * tiles, E, impl, CPU_LN_STATS)
    assert sum(by.values()) == sum(tower_saved_bytes(v, 1, px, E, impl, CPU_LN_STATS))


def test_flash_attention_keeps_no_scores_and_pixtral_attends_per_image():
    v, _ = vision_from_config(T.Mistral3Config().to_dict(), 5120)
    per_image = (5476, 5476)
    assert attention_groups(v, (), per_image, 0, "flash") == per_image
    assert attention_groups(v, (), per_image, 0, "sdpa") == (10952,)
    eager = block_saved_bytes(v, (10952,), 2, "eager")
    flash = block_saved_bytes(v, per_image, 2, "flash")
    assert eager - flash == 6 * 16 * 10952 ** 2 - 4 * 16 * 10952
    # the same tensors; SDPA's mask is counted once, outside the blocks
    assert block_saved_bytes(v, (10952,), 2, "sdpa") == flash


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("px", [36, 80])
def test_smolvlm_blocks_and_tower_with_its_connector(px, impl):
    """SmolVLM at a small width (36² tiles of 4² patches, the pixel shuffle by 3): the 17 tiles of one square image
    (its longest side rescaled to 4 tiles: 4 × 4 and the global one) through SmolVLMVisionTransformer and
    SmolVLMConnector, as get_image_features runs them with no padded tile."""
    from transformers.models.smolvlm.modeling_smolvlm import SmolVLMConnector, SmolVLMVisionTransformer
    cfg = T.SmolVLMConfig(vision_config=dict(SMALL_TOWER, image_size=36, patch_size=4),
                          text_config=dict(TEXT, model_type="llama"), scale_factor=3)
    v, _ = vision_from_config(cfg.to_dict(), 40)
    tiles = len(image_tokens(v, px, px).sequences)
    pixels = torch.randn(tiles, 3, 36, 36)
    by = _trace({"vision": SmolVLMVisionTransformer._from_config(cfg.vision_config), "connector": SmolVLMConnector(cfg)},
                lambda t: t["connector"](t["vision"](pixel_values=pixels.bfloat16()).last_hidden_state).float().sum(),
                impl)
    _check(v, by, "tower.vision.encoder.layers.", 1, px, impl, (81,) * tiles)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("layers", [-2, -1, [-2, -3]], ids=str)
def test_llava_clip_blocks_and_tower_with_its_projector(layers, impl):
    """LLaVA's CLIP tower at a small width (32² images of 4² patches) as LlavaModel.get_image_features runs it: the
    hidden state of vision_feature_layer (its CLS sliced off) into LlavaMultiModalProjector; the blocks past the
    deepest feature layer run but keep nothing once the call returns."""
    from transformers.models.llava.modeling_llava import LlavaMultiModalProjector
    cfg = T.LlavaConfig(vision_config=dict(SMALL_TOWER, image_size=32, patch_size=4),
                        text_config=dict(TEXT, model_type="llama"), vision_feature_layer=layers)
    v, _ = vision_from_config(cfg.to_dict(), 40)
    pixels = torch.randn(2, 3, 32, 32)

    def run(t):
        hidden = t["vision"](pixel_values=pixels.bfloat16(), output_hidden_states=True).hidden_states
        chosen = [hidden[k][:, 1:] for k in (layers if isinstance(layers, list) else [layers])]
        return t["projector"](chosen[0] if len(chosen) == 1 else torch.cat(chosen, dim=-1)).float().sum()
    by = _trace({"vision": T.CLIPVisionModel._from_config(cfg.vision_config),
                 "projector": LlavaMultiModalProjector(cfg)}, run, impl)
    _check(v, by, "tower.vision.encoder.layers.", 2, 32, impl, (65, 65))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("px", [32, 64])
def test_aya_vision_blocks_and_tower_with_its_projector(px, impl):
    """Aya Vision at a small width (32² tiles of 4² patches, the pixel shuffle by 2): SiglipVisionModel's
    hidden_states[-1] (before post_layernorm) into AyaVisionMultiModalProjector, as get_image_features runs them."""
    from transformers.models.aya_vision.modeling_aya_vision import AyaVisionMultiModalProjector
    cfg = T.AyaVisionConfig(vision_config=dict(SMALL_TOWER, image_size=32, patch_size=4),
                            text_config=dict(TEXT, model_type="cohere2"), alignment_intermediate_size=56)
    v, _ = vision_from_config(cfg.to_dict(), 40)
    tiles = len(image_tokens(v, px, px).sequences)
    pixels = torch.randn(tiles, 3, 32, 32)
    by = _trace({"vision": T.SiglipVisionModel._from_config(cfg.vision_config),
                 "projector": AyaVisionMultiModalProjector(cfg)},
                lambda t: t["projector"](t["vision"](pixel_values=pixels.bfloat16(), output_hidden_states=True)
                                         .hidden_states[-1]).float().sum(), impl)
    _check(v, by, "tower.vision.encoder.layers.", 1, px, impl, (64,) * tiles)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("px", [32, 80])
def test_command_a_vision_blocks_and_tower_with_its_projector(px, impl):
    """Command A Vision at a small width: SiglipVisionModel's last_hidden_state (after post_layernorm) into
    Cohere2VisionMultiModalProjector, as get_image_features runs them."""
    from transformers.models.cohere2_vision.modeling_cohere2_vision import Cohere2VisionMultiModalProjector
    cfg = T.Cohere2VisionConfig(vision_config=dict(SMALL_TOWER, image_size=32, patch_size=4,
                                                   vision_use_head=False),
                                text_config=dict(TEXT, model_type="cohere2"), alignment_intermediate_size=56)
    v, _ = vision_from_config(cfg.to_dict(), 40)
    tiles = len(image_tokens(v, px, px).sequences)
    pixels = torch.randn(tiles, 3, 32, 32)
    by = _trace({"vision": T.SiglipVisionModel._from_config(cfg.vision_config),
                 "projector": Cohere2VisionMultiModalProjector(cfg)},
                lambda t: t["projector"](t["vision"](pixel_values=pixels.bfloat16()).last_hidden_state).float().sum(),
                impl)
    _check(v, by, "tower.vision.encoder.layers.", 1, px, impl, (64,) * tiles)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", [(32, 32), (32, 64)], ids=str)
def test_llava_next_blocks_and_tower_through_its_get_image_features(size, impl):
    """LLaVA-NeXT's real LlavaNextModel.get_image_features at a small width (32² tiles of 4² patches, canvases 32² and
    32 × 64): the base image and the canvas's tiles through the CLIP tower, the projector, and pack_image_features
    (unpadding, the image_newline: nothing more saved)."""
    cfg = T.LlavaNextConfig(vision_config=dict(SMALL_TOWER, image_size=32, patch_size=4),
                            text_config=dict(TEXT, model_type="llama"), image_grid_pinpoints=[[32, 32], [32, 64]])
    v, _ = vision_from_config(cfg.to_dict(), 40)
    tiles = len(image_tokens(v, *size).sequences)
    pixels, sizes = torch.randn(1, tiles, 3, 32, 32), torch.tensor([size])
    by = _trace({"model": T.LlavaNextModel(cfg)},
                lambda t: sum(f.float().sum() for f in t["model"].get_image_features(
                    pixel_values=pixels.bfloat16(), image_sizes=sizes).pooler_output), impl)
    from calculator.model.vision.saved import outside_saved_bytes
    it = image_tokens(v, *size)
    block = block_saved_bytes(v, (65,) * tiles, E, impl, CPU_LN_STATS)
    assert _block(by, "tower.model.vision_tower.encoder.layers.", 1) == block
    assert sum(by.values()) == v.trained_layers * block + outside_saved_bytes(v, 1, it.sequences, it.merged, E, impl,
                                                                               CPU_LN_STATS)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", [(32, 32), (32, 96)], ids=str)
def test_llava_onevision_blocks_and_tower_through_its_get_image_features(size, impl):
    """LLaVA-OneVision's real LlavaOnevisionModel.get_image_features at a small width (a SigLIP tower, 32² tiles of 4²
    patches; canvases up to 32 × 96 with anyres_max_1, so the wide image's grid is shrunk by interpolation)."""
    from calculator.model.vision.saved import outside_saved_bytes
    cfg = T.LlavaOnevisionConfig(vision_config=dict(SMALL_TOWER, image_size=32, patch_size=4),
                                 text_config=dict(TEXT, model_type="qwen2"), vision_aspect_ratio="anyres_max_1",
                                 image_grid_pinpoints=[[32, 32], [32, 64], [32, 96]])
    v, _ = vision_from_config(cfg.to_dict(), 40)
    it = image_tokens(v, *size)
    tiles = len(it.sequences)
    pixels, sizes = torch.randn(1, tiles, 3, 32, 32), torch.tensor([size])
    by = _trace({"model": T.LlavaOnevisionModel(cfg)},
                lambda t: sum(f.float().sum() for f in t["model"].get_image_features(
                    pixel_values=pixels.bfloat16(), image_sizes=sizes).pooler_output), impl)
    block = block_saved_bytes(v, (64,) * tiles, E, impl, CPU_LN_STATS)
    assert _block(by, "tower.model.vision_tower.encoder.layers.", 1) == block
    assert sum(by.values()) == v.trained_layers * block + outside_saved_bytes(v, 1, it.sequences, it.merged, E, impl,
                                                                               CPU_LN_STATS)
