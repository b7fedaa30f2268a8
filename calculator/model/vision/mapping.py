"""A multimodal config.json's vision_config (and the outer fields the tower needs) to a VisionSpec.

Lenient by design: the text model is what the estimate is built on, so a vision_config the engine cannot read
drops the tower with a warning (as every vision tower was dropped before) instead of refusing the model; a workload
that then asks for images is refused at estimate time (calculator/stages/vision.py).
"""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from calculator.core import bounds as B
from calculator.model.config_read import ConfigError, get_bool, get_float, get_int, get_int_list
from calculator.model.vision.defaults import (
    QWEN2_5_VISION, QWEN2_VISION, GLM4V_VISION, QWEN3_VISION, SIGLIP_VISION, PALIGEMMA_VISION, PALIGEMMA_PROJECTION_DIM,
    LLAMA4_VISION, PIXTRAL_VISION, GEMMA4_VISION, GEMMA4_SOFT_TOKENS, INTERNVL_VISION, INTERNVL_MAX_TILES,
    MISTRAL3_ABSENT_VISION, LARGE4_ABSENT_VISION, QWEN2_5_PIXELS, GLM4V_PIXELS, QWEN3_PIXELS)
from calculator.model.vision.mapping_more import READERS, feature_depth, layers_heads
from calculator.model.vision.spec import VisionSpec
from calculator.model.vision.tensors import vision_parameters

KINDS = {"qwen2_vl": "qwen2_vl", "glm4v": "glm4v", "glm4v_moe": "glm4v", "glm46v": "glm4v", "glmga": "glm4v",
         "qwen2_5_vl": "qwen2_5_vl", "qwen3_vl": "qwen3_vl", "qwen3_vl_moe": "qwen3_vl", "qwen3_5": "qwen3_vl",
         "qwen3_5_moe": "qwen3_vl", "gemma3": "siglip", "paligemma": "paligemma", "llama4": "llama4",
         "mistral3": "pixtral", "gemma4": "gemma4",
         "mistral_large4": "pixtral",  # Mistral-Large-4: Mistral 3's tower and projector
         "internvl": "internvl", "internvl_chat": "internvl", "smolvlm": "smolvlm", "idefics3": "smolvlm",
         "llava": "clip", "llava_next": "clip", "vipllava": "clip", "aya_vision": "aya", "cohere2_vision": "cohere2",
         "llava_onevision": "onevision", "kimi_k25": "kimi"}
VISION_TYPES = frozenset(KINDS)  # outer model types whose tower is mapped
# Outer types whose configuration class writes a hidden_size of its own beside text_config (PaliGemmaConfig: the
# projector's width), so that field does not mean the file is flat
OUTER_HIDDEN_TYPES = frozenset({"paligemma"})


# Outer types whose text model sits under another key than text_config (remote code: InternVLChatConfig's llm_config)
TEXT_KEYS = {"internvl_chat": "llm_config"}


def text_key(cfg: dict) -> str:
    """The key of a multimodal config that holds its text model."""
    outer = cfg.get("model_type")
    return TEXT_KEYS.get(outer, "text_config") if isinstance(outer, str) else "text_config"


def is_nested(cfg: dict) -> bool:
    """Whether a multimodal config holds its text model in text_config (or TEXT_KEYS' key; else it is written flat,
    as Qwen2.5-VL's Hub files are)."""
    outer = cfg.get("model_type")  # any JSON value here: the mapper names a bad one
    return isinstance(cfg.get(text_key(cfg)), dict) and (
        "hidden_size" not in cfg or (isinstance(outer, str) and outer in OUTER_HIDDEN_TYPES))


def _qwen(v: dict, outer: str) -> dict:
    qwen3 = KINDS[outer] == "qwen3_vl"
    v = {**(QWEN3_VISION if qwen3 else QWEN2_5_VISION), **v}
    depth = get_int(v, "depth", hi=B.MAX_LAYERS)
    f = dict(hidden_size=get_int(v, "hidden_size", hi=B.MAX_HIDDEN),
             intermediate_size=get_int(v, "intermediate_size", hi=B.MAX_FFN), num_layers=depth,
             num_heads=get_int(v, "num_heads", hi=B.MAX_HEADS), patch_size=get_int(v, "patch_size", hi=4096),
             num_channels=get_int(v, "in_channels", hi=64),
             temporal_patch_size=get_int(v, "temporal_patch_size", hi=64),
             spatial_merge_size=get_int(v, "spatial_merge_size", hi=64),
             out_hidden_size=get_int(v, "out_hidden_size", hi=B.MAX_HIDDEN))
    if qwen3:
        lo, hi = QWEN3_PIXELS
        f["num_position_embeddings"] = get_int(v, "num_position_embeddings", hi=B.MAX_POSITIONS)
        if outer in ("qwen3_vl", "qwen3_vl_moe"):  # Qwen3.5's vision model builds no DeepStack mergers
            f["deepstack_layers"] = tuple(get_int_list(v, "deepstack_visual_indexes", lo=0, hi=depth - 1) or ())
    else:
        lo, hi = QWEN2_5_PIXELS
        f["window_size"] = get_int(v, "window_size", hi=1 << 16)
        f["full_attention_blocks"] = tuple(get_int_list(v, "fullatt_block_indexes", lo=0, hi=depth - 1) or ())
    return dict(f, min_pixels=lo, max_pixels=hi)


def _qwen2(v: dict) -> dict:
    """Qwen2VLVisionConfig: embed_dim is the tower's width, hidden_size the merger's output (the language model's),
    the MLP int(embed_dim · mlp_ratio) wide. Only QuickGELU (what every Qwen2-VL checkpoint sets) is mapped: the
    bytes its blocks save depend on the activation."""
    v = {**QWEN2_VISION, **v}
    if v.get("hidden_act") != "quick_gelu":
        raise ConfigError(f"hidden_act: a Qwen2-VL tower with {str(v.get('hidden_act'))[:40]!r} is not mapped "
                          "(quick_gelu is)")
    width = get_int(v, "embed_dim", hi=B.MAX_HIDDEN)
    lo, hi = QWEN2_5_PIXELS
    return dict(hidden_size=width, intermediate_size=int(width * get_float(v, "mlp_ratio", 4.0, 1e-3, 1024.0)),
                num_layers=get_int(v, "depth", hi=B.MAX_LAYERS), num_heads=get_int(v, "num_heads", hi=B.MAX_HEADS),
                patch_size=get_int(v, "patch_size", hi=4096), num_channels=get_int(v, "in_channels", hi=64),
                temporal_patch_size=get_int(v, "temporal_patch_size", hi=64),
                spatial_merge_size=get_int(v, "spatial_merge_size", hi=64),
                out_hidden_size=get_int(v, "hidden_size", hi=B.MAX_HIDDEN), min_pixels=lo, max_pixels=hi)


def _glm4v(v: dict) -> dict:
    """Glm4vVisionConfig: the blocks' SwiGLU is out_hidden_size wide (Glm4VisionMlp), intermediate_size is the
    merger's; the learned position table is (image_size / P)² rows. Only SiLU (every GLM-4.xV checkpoint's) is
    mapped."""
    v = {**GLM4V_VISION, **v}
    if v.get("hidden_act") != "silu":
        raise ConfigError(f"hidden_act: a GLM-4V tower with {str(v.get('hidden_act'))[:40]!r} is not mapped (silu is)")
    f = layers_heads({**v, "num_hidden_layers": v.get("depth"), "num_attention_heads": v.get("num_heads"),
                       "num_channels": v.get("in_channels"), "intermediate_size": v.get("out_hidden_size")})
    out = get_int(v, "out_hidden_size", hi=B.MAX_HIDDEN)
    lo, hi = GLM4V_PIXELS
    f.update(num_position_embeddings=(f.pop("image_size") // f["patch_size"]) ** 2, out_hidden_size=out,
             temporal_patch_size=get_int(v, "temporal_patch_size", hi=64),
             spatial_merge_size=get_int(v, "spatial_merge_size", hi=64),
             merger_intermediate_size=get_int(v, "intermediate_size", hi=B.MAX_FFN),
             attention_bias=get_bool(v, "attention_bias", False), min_pixels=lo, max_pixels=hi)
    return f


def _siglip(v: dict, cfg: dict, text_hidden: int) -> dict:
    v = {**SIGLIP_VISION, **v}
    f = layers_heads(v)
    f.update(use_head=get_bool(v, "vision_use_head", True), out_hidden_size=text_hidden,
             tokens_per_image=get_int(cfg, "mm_tokens_per_image", default=256, hi=1 << 24),
             image_block_mask="all")  # Gemma3Model: create_masks_for_vision_model (full and sliding: OR blocks)
    return f


def _paligemma(v: dict, cfg: dict) -> dict:
    """PaliGemma 1 / 2: a SigLIP tower without its head and PaliGemmaMultiModalProjector, Linear(hv, projection_dim)
    with a bias; (image_size / P)² tokens per image (PaliGemmaConfig: text_config.num_image_tokens); every layer of
    the language model gets the prefix mask (PaliGemmaModel.forward: block_sequence_ids from token_type_ids, the
    image and prefix tokens attending to each other, the suffix causally)."""
    v = {**PALIGEMMA_VISION, **v}
    f = layers_heads(v)
    f.update(use_head=get_bool(v, "vision_use_head", False),
             out_hidden_size=get_int(cfg, "projection_dim", default=PALIGEMMA_PROJECTION_DIM, hi=B.MAX_HIDDEN),
             tokens_per_image=(f["image_size"] // f["patch_size"]) ** 2, image_block_mask="all")
    return f


def _llama4(v: dict, text_hidden: int) -> dict:
    v = {**LLAMA4_VISION, **v}
    f = layers_heads(v)
    f.update(out_hidden_size=text_hidden, vision_output_dim=get_int(v, "vision_output_dim", hi=B.MAX_HIDDEN),
             projector_input_dim=get_int(v, "projector_input_dim", hi=B.MAX_HIDDEN),
             projector_output_dim=get_int(v, "projector_output_dim", hi=B.MAX_HIDDEN),
             pixel_shuffle_ratio=get_float(v, "pixel_shuffle_ratio", 0.5, 1e-3, 1.0))
    return f


def _pixtral(v: dict | None, cfg: dict, text_hidden: int) -> dict:
    absent = LARGE4_ABSENT_VISION if cfg.get("model_type") == "mistral_large4" else MISTRAL3_ABSENT_VISION
    v = dict(absent) if v is None else {**PIXTRAL_VISION, **v}
    f = layers_heads(v)
    head_dim = get_int(v, "head_dim", default=f["hidden_size"] // f["num_heads"], hi=B.MAX_HEAD_DIM)
    if head_dim * f["num_heads"] != f["hidden_size"]:
        raise ConfigError("head_dim × num_attention_heads must equal hidden_size in a Pixtral vision tower")
    layer, count = feature_depth(cfg, f["num_layers"], -1)  # Mistral3Model / LlavaModel: hidden_states[layer]
    f.update(out_hidden_size=text_hidden, spatial_merge_size=get_int(cfg, "spatial_merge_size", default=2, hi=64),
             feature_layers=count, feature_layer=layer, projector_bias=get_bool(cfg, "multimodal_projector_bias", False))
    return f


def _gemma4(v: dict, cfg: dict, text_hidden: int) -> dict:
    """Gemma4VisionModel + embed_vision. Gemma4VisionAttention's q/k/v are num_heads·head_dim wide (k, v:
    num_key_value_heads·head_dim): the engine maps the checkpoints' shape, head_dim·heads = hidden_size, no GQA.
    max_soft_tokens: the config's vision_soft_tokens_per_image (what google/gemma-4-* write, = the processor's
    max_soft_tokens and image_seq_length), else vision_config.default_output_length, else the processor's 280."""
    v = {**GEMMA4_VISION, **v}
    f = layers_heads({**v, "num_channels": 3, "image_size": 1})  # Gemma4VisionPatchEmbedder: Linear(3·P² → hv)
    f["image_size"] = 0  # no fixed size: every image is rescaled to the patch budget (tokens.py)
    heads = f["num_heads"]
    if get_int(v, "head_dim", hi=B.MAX_HEAD_DIM) * heads != f["hidden_size"] or \
            get_int(v, "num_key_value_heads", hi=B.MAX_HEADS) != heads:
        raise ConfigError("a Gemma 4 vision tower with head_dim × num_attention_heads ≠ hidden_size or "
                          "num_key_value_heads ≠ num_attention_heads is not mapped")
    soft = get_int(cfg, "vision_soft_tokens_per_image", default=get_int(v, "default_output_length", default=280,
                                                                          hi=1 << 16), hi=1 << 16)
    if soft not in GEMMA4_SOFT_TOKENS:
        raise ConfigError(f"max soft tokens per image ({soft}) must be one of {GEMMA4_SOFT_TOKENS}")
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    f.update(out_hidden_size=text_hidden, spatial_merge_size=get_int(v, "pooling_kernel_size", hi=64),
             num_position_embeddings=get_int(v, "position_embedding_size", hi=B.MAX_POSITIONS), tokens_per_image=soft,
             # Gemma4Model: with use_bidirectional_attention "vision", create_masks_for_vision_model ORs the image
             # blocks into the sliding layers' mask only
             image_block_mask="sliding" if text.get("use_bidirectional_attention") == "vision" else "none")
    return f


def _square(v: dict, key: str) -> int:
    """An InternVL size written as an int or as [h, w] (InternVLVisionConfig keeps pairs): the side of a square."""
    value = v.get(key)
    if isinstance(value, list) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    return get_int({key: value}, key, hi=1 << 16)


def _internvl(v: dict, cfg: dict, text_hidden: int) -> dict:
    """InternVL (HF format, InternVLForConditionalGeneration): InternVLVisionModel and InternVLMultiModalProjector.
    Its blocks' bytes depend on the activations, so only GELU ones (every InternVL checkpoint's) are mapped, and
    the default feature selection (the CLS token dropped before the pixel shuffle)."""
    v = {**INTERNVL_VISION, **v}
    for field, where in (("hidden_act", v), ("projector_hidden_act", cfg)):
        if where.get(field, "gelu") != "gelu":
            raise ConfigError(f"{field}: an InternVL tower with {str(where.get(field))[:40]!r} is not mapped "
                              "(gelu is)")
    if cfg.get("vision_feature_select_strategy", "default") != "default":
        raise ConfigError("vision_feature_select_strategy: only 'default' (the CLS token dropped) is mapped")
    if v.get("norm_type") not in ("layer_norm", "rms_norm"):
        raise ConfigError("norm_type: must be 'layer_norm' or 'rms_norm'")
    f = layers_heads({**v, "image_size": _square(v, "image_size"), "patch_size": _square(v, "patch_size")})
    ratio = get_float(cfg, "downsample_ratio", 0.5, 1e-3, 1.0)
    f.update(out_hidden_size=text_hidden, spatial_merge_size=int(1 / ratio), max_tiles=INTERNVL_MAX_TILES,
             attention_bias=get_bool(v, "attention_bias", False), rms_norm=v["norm_type"] == "rms_norm",
             qk_norm=get_bool(v, "use_qk_norm", False), final_norm=not get_bool(v, "use_mean_pooling", True),
             mask_token=get_bool(v, "use_mask_token", False),
             positions=get_bool(v, "use_absolute_position_embeddings", True))
    return f


def _internvl_chat(v: dict, cfg: dict, text_hidden: int) -> dict:
    """InternVL's remote code (InternVLChatModel, model_type internvl_chat: modeling_intern_vit.py InternVisionModel
    and InternVLChatModel.mlp1 of huggingface.co/OpenGVLab/InternVL3-8B; vLLM's model_executor/models/internvl.py and
    intern_vit.py build the same): InternViT's own field names (qkv_bias, qk_normalization, norm_type, which its
    InternVisionConfig defaults to rms_norm) with q, k and v in one linear and no final norm; the tiles of
    dynamic_preprocess (the rule GotOcr2ImageProcessor was adapted from) up to max_dynamic_patch, a thumbnail per
    use_thumbnail, one tile when dynamic_image_size is false."""
    v = {**INTERNVL_VISION, "norm_type": "rms_norm", **v}
    hf = {**v, "attention_bias": v.get("qkv_bias", False), "use_qk_norm": v.get("qk_normalization", False)}
    if isinstance(cfg.get("force_image_size"), int):
        hf["image_size"] = cfg["force_image_size"]
    outer = {"downsample_ratio": cfg.get("downsample_ratio"),
             "vision_feature_select_strategy": "default", "projector_hidden_act": "gelu"}
    f = _internvl(hf, outer, text_hidden)
    dynamic = get_bool(cfg, "dynamic_image_size", True)
    f.update(fused_qkv=True, final_norm=False, mask_token=False, positions=True,
             thumbnail=get_bool(cfg, "use_thumbnail", True),
             max_tiles=get_int(cfg, "max_dynamic_patch", default=INTERNVL_MAX_TILES, hi=1024) if dynamic else 1)
    return f


def _is_multimodal(cfg: dict) -> bool:
    return isinstance(cfg.get("vision_config"), dict) or is_nested(cfg)


def vision_from_config(cfg: Any, text_hidden: int) -> tuple[VisionSpec | None, str | None]:
    """(VisionSpec or None, a warning or None) of a raw config.json: the tower of a mapped multimodal type
    (VISION_TYPES); None with the warning "vision tower ignored" for any other multimodal config, or when the
    vision config cannot be read."""
    if not isinstance(cfg, dict) or not _is_multimodal(cfg):
        return None, None
    outer = cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None
    nested = is_nested(cfg)
    head = f"multimodal {outer[:60]!r} config: " + (f"using its {text_key(cfg)}; " if nested else "") \
        if outer else "multimodal config: "
    if outer not in VISION_TYPES:
        return None, head + "vision tower ignored" + ("" if nested else " (not a mapped vision-language type)")
    v = cfg.get("vision_config")
    if v is None and outer == "gemma4":  # Gemma4Model builds no vision_tower without a vision_config
        return None, head + "no vision tower (vision_config is null)"
    try:
        if v is not None and not isinstance(v, dict):
            raise ConfigError("vision_config: must be an object")
        kind = KINDS[outer]
        if outer == "llava" and isinstance(v, dict) and v.get("model_type") == "siglip_vision_model":
            kind = "onevision"  # LLaVA-Interleave: a SigLIP tower, one image_size² image (mapping_more.map_onevision)
        if outer == "llava" and isinstance(v, dict) and v.get("model_type") == "pixtral":  # Pixtral-12B
            if cfg.get("vision_feature_select_strategy") != "full":
                raise ConfigError("vision_feature_select_strategy: a Pixtral tower has no CLS; only 'full' is mapped")
            kind, cfg = "pixtral", {**cfg, "spatial_merge_size": 1, "multimodal_projector_bias": get_bool(
                cfg, "multimodal_projector_bias", True)}
        if kind in ("qwen2_5_vl", "qwen3_vl"):
            f = _qwen(v or {}, outer)
        elif kind == "qwen2_vl":
            f = _qwen2(v or {})
        elif kind == "glm4v":
            f = _glm4v(v or {})
        elif kind == "siglip":
            f = _siglip(v or {}, cfg, text_hidden)
        elif kind == "paligemma":
            f = _paligemma(v or {}, cfg)
        elif kind == "llama4":
            f = _llama4(v or {}, text_hidden)
        elif kind == "gemma4":
            f = _gemma4(v, cfg, text_hidden)
        elif kind in READERS:  # the CLIP / SigLIP / pixel-shuffle families (mapping_more.py)
            f = READERS[kind](v, cfg, text_hidden)
        elif outer == "internvl_chat":
            f = _internvl_chat(v or {}, cfg, text_hidden)
        elif kind == "internvl":
            f = _internvl(v or {}, cfg, text_hidden)
        else:
            f = dict(_pixtral(v, cfg, text_hidden), llava_projector=outer == "llava")
        spec = VisionSpec(kind=kind, model_type=outer, **f)
    except ValidationError as exc:  # the field and what is wrong with it, not pydantic's headline
        where, msg = B.describe(exc, VisionSpec, "vision_config.")
        return None, head + f"vision tower ignored ({where}: {msg[:200]})"
    except (ConfigError, TypeError, ValueError) as exc:
        return None, head + f"vision tower ignored ({str(exc).splitlines()[0][:200]})"
    n = vision_parameters(spec)
    remote = ("; remote code (modeling_intern_vit.py): what a trained tower saves is transformers' "
              "InternVLVisionModel's, its fused qkv and flash-attn path not traced" if outer == "internvl_chat" else "")
    return spec, head + (f"its vision tower ({kind}: {n.tower:,} + projector {n.projector:,} parameters, not in "
                         f"the model's count) is priced when the workload has images, and whenever vLLM or SGLang "
                         f"serve it (both load it)" + remote)
