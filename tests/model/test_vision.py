"""Vision towers (calculator/model/vision, issue 21): the tower's and the projector's parameters equal the real
transformers 5.23 modules' (built on the meta device) for the default config of every mapped type and for the real
presets; an image's patches and tokens equal the real image processors' output (PIL backends; Llama 4's needs
torchvision, so its own best-fit code is executed from the installed file); a config the engine cannot read keeps
its text model and says why the tower is left out. What the encoder saves: tests/model/test_vision_saved.py."""
from __future__ import annotations

import ast
import json
import logging
import re
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
logging.getLogger("transformers").setLevel(logging.ERROR)

from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from calculator.model.presets import MODELS_DIR  # noqa: E402
from calculator.model.vision import image_tokens, vision_from_config, vision_parameters  # noqa: E402
from calculator.model.vision.tokens import llama4_canvas  # noqa: E402

T = transformers


def _raw(name: str) -> dict:
    return json.loads((MODELS_DIR / f"{name}.json").read_text())


def _count(*modules) -> int:
    seen, n = set(), 0
    for mod in modules:
        for p in mod.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
    return n


def _real_parts(model) -> tuple[int, int]:
    """(tower, projector) parameters of a ForConditionalGeneration model: Qwen's merger (and DeepStack mergers) are
    the projector inside `visual`; Gemma 4's projector is embed_vision; the others have a vision_tower (SmolVLM's
    vision_model) and a multi_modal_projector (Kimi-K2.5's mm_projector, SmolVLM's connector), LLaVA-NeXT's and
    -OneVision's image_newline with the projector."""
    inner = model.model
    if hasattr(inner, "embed_vision"):
        return _count(inner.vision_tower), _count(inner.embed_vision)
    if hasattr(inner, "visual"):
        proj = [inner.visual.merger] + list(getattr(inner.visual, "deepstack_merger_list", []))
        return _count(inner.visual) - _count(*proj), _count(*proj)
    tower = next(getattr(inner, n) for n in ("vision_tower", "vision_model") if hasattr(inner, n))
    proj = next(getattr(inner, n) for n in ("multi_modal_projector", "mm_projector", "connector") if hasattr(inner, n))
    newline = inner.image_newline.numel() if hasattr(inner, "image_newline") else 0
    return _count(tower), _count(proj) + newline


def assert_real_tower(cfg, model_class, kind: str):
    """`cfg`'s tower maps to a VisionSpec of `kind` whose tower and projector have the parameters of
    model_class(cfg) built on the meta device; returns it."""
    v, warning = vision_from_config(cfg.to_dict(), cfg.text_config.hidden_size)
    assert v is not None and v.kind == kind, warning
    with torch.device("meta"):
        real = model_class(cfg)
    assert (vision_parameters(v).tower, vision_parameters(v).projector) == _real_parts(real)
    return v


def _built(cfg):
    with torch.device("meta"):
        return T.AutoModelForImageTextToText.from_config(cfg)


DEFAULTS = [T.Qwen2VLConfig, T.Glm4vConfig, T.Glm4vMoeConfig, T.Glm46VConfig, T.GlmgaConfig, T.Qwen2_5_VLConfig,
            T.Qwen3VLConfig, T.Qwen3VLMoeConfig, T.Qwen3_5Config, T.Qwen3_5MoeConfig, T.Gemma3Config, T.Mistral3Config,
            T.PaliGemmaConfig, T.InternVLConfig]


@pytest.mark.parametrize("config_class", DEFAULTS, ids=lambda c: c.model_type)
def test_the_default_config_of_every_mapped_type_has_the_real_towers_parameters(config_class):
    cfg = config_class()
    v, _ = vision_from_config(cfg.to_dict(), cfg.text_config.hidden_size)
    got = vision_parameters(v)
    assert (got.tower, got.projector) == _real_parts(_built(cfg))


@pytest.mark.parametrize("name", ["qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b",
                                  "qwen3.6-35b-a3b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b"])
def test_the_presets_towers_have_the_real_models_parameters(name):
    raw = _raw(name)
    mapped = spec_from_hf_config(raw)
    cfg = T.CONFIG_MAPPING[raw["model_type"]](**{k: v for k, v in raw.items() if k != "model_type"})
    got = vision_parameters(mapped.spec.vision)
    assert (got.tower, got.projector) == _real_parts(_built(cfg))
    assert "vision tower" in mapped.warnings[0] and "not in the model's count" in mapped.warnings[0]


def test_llama4_tower_and_projector_default_and_scout():
    from transformers.models.llama4.modeling_llama4 import Llama4MultiModalProjector, Llama4VisionModel
    scout = _raw("llama-4-scout")
    # the preset's text_config fails 5.23's strict validation (attn_temperature_tuning: 4); the projector only
    # needs the text hidden size
    for raw, cfg in [(T.Llama4Config().to_dict(), T.Llama4Config()),
                     (scout, T.Llama4Config(vision_config=scout["vision_config"],
                                            text_config={"hidden_size": scout["text_config"]["hidden_size"]}))]:
        v, _ = vision_from_config(raw, cfg.text_config.hidden_size)
        with torch.device("meta"):
            real = (_count(Llama4VisionModel(cfg.vision_config)), _count(Llama4MultiModalProjector(cfg)))
        assert (vision_parameters(v).tower, vision_parameters(v).projector) == real
    assert vision_parameters(spec_from_hf_config(scout).spec.vision).total == 850_960_896 + 20_971_520


def test_gemma4_default_and_preset_towers_have_the_real_models_parameters():
    cfg = T.Gemma4Config(vision_config=T.Gemma4VisionConfig().to_dict())  # the class's own default has no tower
    v, _ = vision_from_config(cfg.to_dict(), cfg.text_config.hidden_size)
    assert (vision_parameters(v).tower, vision_parameters(v).projector) == _real_parts(_built(cfg))
    raw = _raw("gemma-4-26b-a4b")
    mapped = spec_from_hf_config(raw)
    cfg = T.Gemma4Config(**{k: v for k, v in raw.items() if k != "model_type"})
    got = vision_parameters(mapped.spec.vision)
    assert (got.tower, got.projector) == _real_parts(_built(cfg)) == (569_548_080, 3_244_032)
    assert "gemma4: 569,548,080 + projector 3,244,032" in mapped.warnings[0]
    # no vision_config: transformers builds no tower
    assert vision_from_config(T.Gemma4Config().to_dict(), 1536) == (
        None, "multimodal 'gemma4' config: using its text_config; no vision tower (vision_config is null)")


def test_qwen2_5_vl_checkpoint_sized_tower_and_mistral3_projector_options():
    cfg = T.Qwen2_5_VLConfig(vision_config=dict(hidden_size=1280, intermediate_size=3420, out_hidden_size=3584))
    v, _ = vision_from_config(cfg.to_dict(), 3584)
    assert (vision_parameters(v).tower, vision_parameters(v).projector) == _real_parts(_built(cfg))
    cfg = T.Mistral3Config(multimodal_projector_bias=True, vision_feature_layer=[-1, -2])
    v, _ = vision_from_config(cfg.to_dict(), cfg.text_config.hidden_size)
    assert (vision_parameters(v).tower, vision_parameters(v).projector) == _real_parts(_built(cfg))


# ---- image → patches → tokens ------------------------------------------------------------------------------
SIZES = [(224, 224), (480, 640), (1080, 1920), (1024, 1024), (2000, 500), (100, 3000), (3024, 4032), (50, 60),
         (4096, 4096), (6000, 6000)]


def _img(h, w):
    return np.zeros((h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize("qwen", ["qwen3_5", "qwen2_5_vl", "qwen2_vl"])
def test_qwen_patches_and_tokens_equal_the_image_processors(qwen):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    if qwen == "qwen3_5":  # Qwen/Qwen3.5-*'s preprocessor_config.json
        v = spec_from_hf_config(_raw("qwen3.5-27b")).spec.vision
        proc = Qwen2VLImageProcessorPil(patch_size=16, merge_size=2,
                                        size={"shortest_edge": 65536, "longest_edge": 16777216})
    else:  # Qwen/Qwen2.5-VL-*-Instruct's and Qwen/Qwen2-VL-*-Instruct's
        config = T.Qwen2_5_VLConfig() if qwen == "qwen2_5_vl" else T.Qwen2VLConfig()
        v, _ = vision_from_config(config.to_dict(), 8192)
        proc = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056)
    for h, w in SIZES:
        t, gh, gw = (int(x) for x in proc(images=[_img(h, w)], return_tensors="np")["image_grid_thw"][0])
        got = image_tokens(v, h, w)
        assert (got.patches, got.merged, got.lm_tokens) == (t * gh * gw, t * gh * gw // 4, t * gh * gw // 4 + 2)


def test_gemma3_resizes_every_image_to_896_and_pools_to_256_tokens():
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
    from transformers.models.gemma3.processing_gemma3 import Gemma3Processor
    v = spec_from_hf_config(_raw("gemma-3-27b")).spec.vision
    proc = Gemma3ImageProcessorPil(size={"height": 896, "width": 896})  # the Hub's preprocessor size
    for h, w in SIZES[:4]:
        px = proc(images=[_img(h, w)], return_tensors="np")["pixel_values"]
        assert image_tokens(v, h, w).patches == (px.shape[-1] // 14) * (px.shape[-2] // 14) == 4096
    assert image_tokens(v, 1024, 1024).merged == 256 and image_tokens(v, 1024, 1024).lm_tokens == 260
    source = Path(Gemma3Processor.__init__.__code__.co_filename).read_text()  # 256 soft tokens, boi, eoi, 2 × "\n\n"
    assert r'f"\n\n{tokenizer.boi_token}{image_tokens_expanded}{tokenizer.eoi_token}\n\n"' in source


def test_paligemma_2_at_448_px_has_the_real_tower_projector_and_tokens():
    """A PaliGemma 2 (Gemma 2 text, 448 px) config: the real model's tower and projector, and (448 / 14)² = 1,024
    patches, each one <image> token, as the SigLIP image processor resizes any image to image_size²."""
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil
    cfg = T.PaliGemmaConfig(vision_config=dict(image_size=448, patch_size=14),
                            text_config=dict(model_type="gemma2", hidden_size=2304, num_hidden_layers=2,
                                             intermediate_size=9216, num_attention_heads=8, num_key_value_heads=4,
                                             head_dim=256, vocab_size=257216), projection_dim=2304, hidden_size=2304)
    raw = cfg.to_dict()
    spec = spec_from_hf_config(raw).spec
    v = spec.vision
    assert (spec.hidden_size, spec.num_hidden_layers, v.out_hidden_size) == (2304, 2, 2304)
    got, real = vision_parameters(v), _built(cfg)
    assert (got.tower, got.projector) == _real_parts(real)
    assert count_parameters(spec).total == _count(real) - got.tower - got.projector  # the text model, head tied
    proc = SiglipImageProcessorPil(size={"height": 448, "width": 448})
    for h, w in SIZES[:4]:
        px = proc(images=[_img(h, w)], return_tensors="np")["pixel_values"]
        assert image_tokens(v, h, w).patches == (px.shape[-1] // 14) * (px.shape[-2] // 14) == 1024
    assert image_tokens(v, 300, 500).lm_tokens == image_tokens(v, 300, 500).merged == 1024


def test_mistral3_patches_and_tokens_equal_the_pixtral_processors():
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil
    v, _ = vision_from_config(T.Mistral3Config().to_dict(), 5120)  # patch 14, merge 2, longest edge 1540
    proc = PixtralImageProcessorPil(patch_size={"height": 28, "width": 28}, size={"longest_edge": 1540})
    for h, w in SIZES:
        hh, ww = (int(x) for x in proc(images=[_img(h, w)], return_tensors="np")["image_sizes"][0])
        got = image_tokens(v, h, w)
        assert (got.patches, got.merged, got.lm_tokens) == ((hh // 14) * (ww // 14), (hh // 28) * (ww // 28),
                                                            (hh // 28) * (ww // 28 + 1))


def test_gemma4_patches_and_tokens_equal_its_image_processor_and_processor():
    from types import SimpleNamespace

    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil
    from transformers.models.gemma4.processing_gemma4 import Gemma4Processor
    v = spec_from_hf_config(_raw("gemma-4-26b-a4b")).spec.vision
    proc = Gemma4ImageProcessorPil()  # the class defaults: patch 16, max_soft_tokens 280, pooling kernel 3
    markers = SimpleNamespace(boi_token="<boi>", eoi_token="<eoi>", image_token="<img>")
    for h, w in SIZES + [(20, 3000), (3000, 20), (672, 960)]:
        x = proc(images=[_img(h, w)], return_tensors="np")
        soft = int(x["num_soft_tokens_per_image"][0])
        prompt = Gemma4Processor.replace_image_token(markers, x, 0)
        got = image_tokens(v, h, w)
        assert got.sequences == (x["pixel_values"].shape[1],) == (2520,)  # padded to the budget: the encoder runs all
        assert (got.merged, got.lm_tokens) == (soft, len(re.findall(r"<[a-z]+>", prompt)))
        assert soft == int((x["image_position_ids"][0] != -1).all(-1).sum()) // 9
    assert v.default_image_px == 1024 and image_tokens(v, 1024, 1024)[1:] == (256, 258)


class _Size(NamedTuple):
    height: int
    width: int


@lru_cache(maxsize=1)
def _llama4_best_fit():
    """get_factors, find_supported_resolutions and get_best_fit executed from the installed
    image_processing_llama4.py (the module imports torchvision, which is not installed)."""
    path = Path(T.__file__).parent / "models" / "llama4" / "image_processing_llama4.py"
    ns = {"torch": torch, "defaultdict": defaultdict, "lru_cache": lru_cache, "SizeDict": _Size, "math": __import__("math")}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name in ("get_factors", "find_supported_resolutions",
                                                               "get_best_fit"):
            exec(compile(ast.Module([node], []), str(path), "exec"), ns)
    return ns


def test_llama4_tiles_follow_its_best_fit_and_tokens_its_prompt_layout():
    from transformers.models.llama4.processing_llama4 import Llama4Processor
    ns = _llama4_best_fit()
    res = torch.tensor(ns["find_supported_resolutions"](16, _Size(336, 336)))
    v = spec_from_hf_config(_raw("llama-4-scout")).spec.vision
    for h, w in SIZES:
        th, tw = ns["get_best_fit"]((h, w), res, resize_to_max_canvas=False).tolist()
        assert llama4_canvas(h, w, 336, 16) == (th // 336, tw // 336)
        a, b = th // 336, tw // 336
        prompt = Llama4Processor._prompt_split_image(None, (a, b), 144)
        got = image_tokens(v, h, w)
        assert got.lm_tokens == len(re.findall(r"<\|[a-z_]+\|>", prompt))
        assert got.sequences == (577,) * (a * b + (a * b > 1))


# ---- what the mapping keeps and what it leaves out ---------------------------------------------------------
def test_a_text_only_config_has_no_tower_and_an_unmapped_multimodal_one_says_so():
    assert spec_from_hf_config(_raw("gemma-3-1b")).spec.vision is None
    raw = {"model_type": "lfm2_vl", "text_config": {**_raw("gemma-3-1b")}, "vision_config": {"hidden_size": 8}}
    _, warning = vision_from_config(raw, 1152)
    assert warning == "multimodal 'lfm2_vl' config: using its text_config; vision tower ignored"


def test_an_unreadable_vision_config_keeps_the_text_model_and_says_why():
    raw = _raw("qwen3.5-27b")
    raw["vision_config"] = {**raw["vision_config"], "hidden_size": "wide"}
    mapped = spec_from_hf_config(raw)
    assert mapped.spec.vision is None and mapped.spec.hidden_size == 5120
    assert "vision tower ignored (hidden_size: must be a whole number" in mapped.warnings[0]


def test_glm4v_patches_and_tokens_equal_its_image_processor():
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil
    v, _ = vision_from_config(T.Glm4vConfig().to_dict(), 4096)
    proc = Glm4vImageProcessorPil(size={"shortest_edge": 12544, "longest_edge": 9633792})  # zai-org's checkpoints
    for h, w in SIZES:
        t, gh, gw = (int(x) for x in proc(images=[_img(h, w)], return_tensors="np")["image_grid_thw"][0])
        got = image_tokens(v, h, w)
        assert (got.patches, got.merged, got.lm_tokens) == (t * gh * gw, t * gh * gw // 4, t * gh * gw // 4 + 2)
    assert image_tokens(v, 6000, 6000).merged == 6084 <= 6144  # the 9,633,792-pixel bound: ≤ 6,144 tokens


@pytest.mark.parametrize("config_class, name, mapped", [(T.Qwen2VLConfig, "Qwen2-VL", "quick_gelu"),
                                                         (T.Glm4vConfig, "GLM-4V", "silu")])
def test_a_tower_with_another_activation_is_left_out_naming_it(config_class, name, mapped):
    raw = config_class(vision_config=dict(hidden_act="gelu")).to_dict()
    v, warning = vision_from_config(raw, 3584)
    assert v is None
    assert warning.endswith(f"vision tower ignored (hidden_act: a {name} tower with 'gelu' is not mapped "
                            f"({mapped} is))")


def test_the_language_models_parameter_count_leaves_the_tower_out():
    from calculator.model.parameters import count_parameters
    with_tower = spec_from_hf_config(_raw("gemma-3-4b")).spec
    assert count_parameters(with_tower).total == count_parameters(with_tower.model_copy(update={"vision": None})).total


def test_gemma4_lora_all_linear_adapts_the_linears_inside_its_clippable_wrappers():
    """PEFT 0.21's all-linear adapts every nn.Linear: in Gemma 4's tower the `.linear` in each Gemma4ClippableLinear,
    the patch embedder's and embed_vision's (adapted_linears); a name list hitting the wrapper (q_proj) is refused,
    and PEFT's own gemma4 default targets only the language model."""
    peft = pytest.importorskip("peft")
    from calculator.model.vision import adapted_linears
    cfg = T.Gemma4Config(vision_config=dict(hidden_size=48, intermediate_size=104, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=4, head_dim=12, patch_size=4,
                                            pooling_kernel_size=2, position_embedding_size=64),
                         text_config=dict(hidden_size=40, num_hidden_layers=1, vocab_size=16, intermediate_size=8,
                                          num_attention_heads=2, num_key_value_heads=1, head_dim=8))
    v, _ = vision_from_config(cfg.to_dict(), 40)

    def adapted(targets):
        model = peft.get_peft_model(T.Gemma4ForConditionalGeneration(cfg), peft.LoraConfig(r=2, **targets))
        return [n for n, _ in model.named_modules() if n.endswith(".lora_A")]
    tower = [n for n in adapted({"target_modules": "all-linear"}) if "vision_tower." in n or "embed_vision." in n]
    assert len(tower) == len(adapted_linears(v, "all-linear")) == 2 * 7 + 2
    assert not any("vision" in n for n in adapted({}))
    with pytest.raises(ValueError, match="Gemma4ClippableLinear"):
        adapted({"target_modules": ["q_proj", "v_proj"]})

