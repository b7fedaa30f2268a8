"""The vision configs of the towers built from CLIP or SigLIP encoders with a LLaVA-style or pixel-shuffle projector
(LLaVA, LLaVA-NeXT, LLaVA-OneVision, Aya Vision, Command A Vision, SmolVLM / Idefics3), read into VisionSpec fields
for calculator/model/vision/mapping.py; and the shared readers of layer counts, feature layers and canvases.

May import: calculator.core, calculator.model.config_read and calculator.model.vision.defaults.
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.config_read import ConfigError, get_bool, get_int
from calculator.model.vision.defaults import (
    AYA_VISION, CLIP_VISION, COHERE2_ALIGNMENT, COHERE2_VISION, INTERNVL_MAX_TILES, KIMI_MAX_PATCHES, KIMI_MAX_SIDE,
    KIMI_PROJECTION, KIMI_VISION, LLAVA_ABSENT_VISION, LLAVA_NEXT_PINPOINTS, ONEVISION_PINPOINTS, ONEVISION_VISION,
    SIGLIP_VISION, SMOLVLM_VISION)


def layers_heads(v: dict) -> dict:
    return dict(hidden_size=get_int(v, "hidden_size", hi=B.MAX_HIDDEN),
                intermediate_size=get_int(v, "intermediate_size", hi=B.MAX_FFN),
                num_layers=get_int(v, "num_hidden_layers", hi=B.MAX_LAYERS),
                num_heads=get_int(v, "num_attention_heads", hi=B.MAX_HEADS),
                patch_size=get_int(v, "patch_size", hi=4096), num_channels=get_int(v, "num_channels", hi=64),
                image_size=get_int(v, "image_size", hi=1 << 16))


def tower_of(v: dict | None, cfg: dict, tower: str, act: str, absent: dict, base: dict) -> dict:
    """The vision config of an outer type whose tower is one transformers model (`tower`, its model_type) run with
    one activation (`act`: the bytes its blocks save depend on it): `absent` when the file has none, else `base`'s
    defaults under its fields; ConfigError naming what is not mapped."""
    if v is not None and v.get("model_type", tower) != tower:
        raise ConfigError(f"vision_config.model_type: a {cfg.get('model_type')} config with a "
                          f"{str(v.get('model_type'))[:40]!r} tower is not mapped ({tower} is)")
    v = dict(absent) if v is None else {**base, **v}
    if v.get("hidden_act", act) != act:
        raise ConfigError(f"hidden_act: a {cfg.get('model_type')} tower with {str(v.get('hidden_act'))[:40]!r} is "
                          f"not mapped ({act} is)")
    return v


def feature_depth(cfg: dict, layers: int, default: int) -> tuple[int, int]:
    """(hidden_states index of the deepest of vision_feature_layer, how many are concatenated)."""
    chosen = cfg.get("vision_feature_layer", default)
    chosen = chosen if isinstance(chosen, list) and chosen else [chosen]
    depth = max((lambda k: layers + 1 + k if k < 0 else k)(
        get_int({"vision_feature_layer": k}, "vision_feature_layer", lo=-layers - 1, hi=layers)) for k in chosen)
    return depth - layers - 1, len(chosen)


def pinpoints(cfg: dict, tile: int) -> tuple[tuple[int, int], ...]:
    """image_grid_pinpoints as (height, width) pairs, the configuration class's default when the file has none; each
    side whole tiles of the tower's image_size (`tile`: the canvases are cut into image_size² crops)."""
    pins = cfg.get("image_grid_pinpoints") or (ONEVISION_PINPOINTS if cfg.get("model_type") == "llava_onevision"
                                               else LLAVA_NEXT_PINPOINTS)
    if not isinstance(pins, list) or not all(isinstance(x, list) and len(x) == 2 for x in pins):
        raise ConfigError("image_grid_pinpoints: must be a list of [height, width] pairs")
    out = tuple((get_int({"pin": a}, "pin", hi=1 << 16), get_int({"pin": b}, "pin", hi=1 << 16)) for a, b in pins)
    if any(a % tile or b % tile for a, b in out):
        raise ConfigError(f"image_grid_pinpoints: each [height, width] must be whole tiles of the tower's image_size "
                          f"({tile})")
    return out


def map_llava(v: dict | None, cfg: dict, text_hidden: int) -> dict:
    """LLaVA (LlavaForConditionalGeneration) and LLaVA-NeXT (its anyres tiles, image_grid_pinpoints) with a CLIP tower
    (vision_config clip_vision_model, LLaVA-1.5's and 1.6's): the
    projector reads hidden_states[vision_feature_layer] (or the concatenation of a list of them), the CLS token
    dropped under the "default" selection. Other towers in a llava config (SigLIP, Pixtral) are not mapped. VipLLaVA
    (vipllava): its five layers (vision_feature_layers) always without their CLS, projector_layernorm first."""
    v = tower_of(v, cfg, "clip_vision_model", "quick_gelu", LLAVA_ABSENT_VISION, CLIP_VISION)
    vip = cfg.get("model_type") == "vipllava"
    select = "default" if vip else cfg.get("vision_feature_select_strategy", "default")
    if select not in ("default", "full") or cfg.get("projector_hidden_act", "gelu") != "gelu":
        raise ConfigError("vision_feature_select_strategy must be 'default' or 'full', projector_hidden_act 'gelu'")
    f = layers_heads(v)
    key = "vision_feature_layers" if vip and "vision_feature_layer" not in cfg else "vision_feature_layer"
    layer, count = feature_depth({"vision_feature_layer": cfg.get(key, [-2, -5, -8, -11, 6] if vip else -2)},
                                 f["num_layers"], -2)
    f.update(out_hidden_size=text_hidden, feature_layers=count, feature_layer=layer, keeps_cls=select == "full",
             projector_bias=vip or get_bool(cfg, "multimodal_projector_bias", True), projector_norm=vip)
    if cfg.get("model_type") == "llava_next":
        f["grid_pinpoints"] = pinpoints(cfg, f["image_size"])
    return f


def map_onevision(v: dict | None, cfg: dict, text_hidden: int) -> dict:
    """LLaVA-OneVision: a SigLIP tower (hidden_states[vision_feature_layer], before post_layernorm; only the "full"
    selection: SigLIP has no CLS), LLaVA's projector and image_newline, the anyres tiles of image_grid_pinpoints, and
    vision_aspect_ratio "anyres_max_N" shrinking the unpadded grid to N tiles' worth of tokens. A llava config with a
    SigLIP tower (LLaVA-Interleave) is the same without the tiles and the newline: one image_size² image."""
    v = tower_of(v, cfg, "siglip_vision_model", "gelu_pytorch_tanh", ONEVISION_VISION, SIGLIP_VISION)
    anyres = cfg.get("model_type") == "llava_onevision"
    aspect = cfg.get("vision_aspect_ratio", "anyres_max_9") if anyres else "anyres_max_1"
    if cfg.get("vision_feature_select_strategy", "full") != "full" or not (
            isinstance(aspect, str) and aspect.startswith("anyres_max_") and aspect[11:].isdigit() and
            0 < int(aspect[11:]) <= 1024):
        raise ConfigError("vision_feature_select_strategy 'full' and vision_aspect_ratio 'anyres_max_<N>' are what a "
                          "SigLIP tower in a LLaVA-style model is mapped with")
    f = layers_heads(v)
    layer, count = feature_depth(cfg, f["num_layers"], -1)
    f.update(out_hidden_size=text_hidden, feature_layers=count, feature_layer=layer,
             grid_pinpoints=pinpoints(cfg, f["image_size"]) if anyres else (),
             projector_bias=get_bool(cfg, "multimodal_projector_bias", True), max_tiles=int(aspect[11:]),
             use_head=get_bool(v, "vision_use_head", False))
    return f


def map_aya(v: dict | None, cfg: dict, text_hidden: int) -> dict:
    """Aya Vision: a SigLIP tower (siglip_vision_model; no CLS, so only the "full" selection runs) and
    AyaVisionMultiModalProjector: pixel shuffle by downsample_factor, LayerNorm, linear_1 to
    alignment_intermediate_size (default: the text width), SwiGLU on its halves, linear_2. Tiles as InternVL's
    (GotOcr2ImageProcessor with crop_to_patches, at most 12, and a thumbnail)."""
    v = tower_of(v, cfg, "siglip_vision_model", "gelu_pytorch_tanh", AYA_VISION, SIGLIP_VISION)
    if cfg.get("vision_feature_select_strategy", "full") != "full":
        raise ConfigError("vision_feature_select_strategy: only 'full' runs an Aya Vision tower (SigLIP has no CLS)")
    f = layers_heads(v)
    layer, count = feature_depth(cfg, f["num_layers"], -1)
    f.update(out_hidden_size=text_hidden, use_head=get_bool(v, "vision_use_head", False), feature_layer=layer,
             feature_layers=count, spatial_merge_size=get_int(cfg, "downsample_factor", default=2, hi=64),
             merger_intermediate_size=get_int(cfg, "alignment_intermediate_size", default=text_hidden,
                                              hi=B.MAX_FFN), max_tiles=INTERNVL_MAX_TILES)
    return f


def map_cohere2(v: dict | None, cfg: dict, text_hidden: int) -> dict:
    """Command A Vision (Cohere2VisionForConditionalGeneration): a SigLIP tower whose last_hidden_state (after
    post_layernorm) Cohere2VisionMultiModalProjector reads: pixel shuffle by downsample_factor, linear_1 to
    alignment_intermediate_size, SwiGLU on its halves, linear_2; tiles of Cohere2VisionImageProcessor (at most 12
    of image_size², and a thumbnail)."""
    v = tower_of(v, cfg, "siglip_vision_model", "gelu_pytorch_tanh", COHERE2_VISION, SIGLIP_VISION)
    f = layers_heads(v)
    f.update(out_hidden_size=text_hidden, use_head=get_bool(v, "vision_use_head", True),
             spatial_merge_size=get_int(cfg, "downsample_factor", default=2, hi=64), max_tiles=INTERNVL_MAX_TILES,
             merger_intermediate_size=get_int(cfg, "alignment_intermediate_size", default=COHERE2_ALIGNMENT,
                                              hi=B.MAX_FFN))
    return f


def map_smolvlm(v: dict | None, cfg: dict, text_hidden: int) -> dict:
    """SmolVLM / Idefics3: SmolVLMVisionTransformer (SigLIP's blocks) and SmolVLMConnector (pixel shuffle by
    scale_factor, Linear(hv·s², text hidden, bias=False)). Only gelu_pytorch_tanh (every checkpoint's) is mapped."""
    v = tower_of(v, cfg, (v or {}).get("model_type", "smolvlm_vision"), "gelu_pytorch_tanh", SMOLVLM_VISION,
                 SMOLVLM_VISION)
    f = layers_heads(v)
    f.update(out_hidden_size=text_hidden, spatial_merge_size=get_int(cfg, "scale_factor", default=2, hi=64))
    return f


def map_kimi(v: dict | None, cfg: dict, text_hidden: int) -> dict:
    """Kimi-K2.5 (Kimi_K25ForConditionalGeneration): MoonViT (packed images, a pos_emb_height × pos_emb_width learned
    table resampled bicubically, 2-D RoPE, a final LayerNorm, the 2 × 2 merge) and Kimi_K25MultimodalProjection
    (pre_norm over projection_hidden_size, which must be the tower's width, in_proj and out_proj). The Hub's own
    config (moonshotai/Kimi-K2.5, its remote-code class) names them vt_hidden_size, vt_num_hidden_layers,
    vt_intermediate_size, vt_num_attention_heads, init_pos_emb_height / width and mm_hidden_size: read as aliases."""
    if isinstance(v, dict):
        aliases = {"vt_hidden_size": "hidden_size", "vt_num_hidden_layers": "num_hidden_layers",
                   "vt_intermediate_size": "intermediate_size", "vt_num_attention_heads": "num_attention_heads",
                   "init_pos_emb_height": "pos_emb_height", "init_pos_emb_width": "pos_emb_width"}
        v = {**v, **{new: v[old] for old, new in aliases.items() if old in v and new not in v}}
        cfg = {**cfg, "projection_hidden_size": cfg.get("projection_hidden_size", v.get("mm_hidden_size"))}
    v = tower_of(v, cfg, v.get("model_type", "kimi_k25_vision") if v else "kimi_k25_vision", "gelu_pytorch_tanh",
                 KIMI_VISION, KIMI_VISION)
    merge = v.get("merge_kernel_size", [2, 2])
    if not (isinstance(merge, list) and len(merge) == 2 and merge[0] == merge[1]):
        raise ConfigError("merge_kernel_size: a square [k, k] kernel is what a Kimi-K2.5 tower is mapped with")
    f = layers_heads({**v, "num_channels": 3, "image_size": v.get("patch_size")})
    f["image_size"] = 0  # native resolution (tokens.py kimi_size)
    if get_int(cfg, "projection_hidden_size", default=KIMI_PROJECTION, hi=B.MAX_HIDDEN) != f["hidden_size"]:
        raise ConfigError("projection_hidden_size: must equal the tower's hidden_size (its pre_norm reads its rows)")
    f.update(out_hidden_size=text_hidden, spatial_merge_size=get_int({"k": merge[0]}, "k", hi=64),
             num_position_embeddings=get_int(v, "pos_emb_height", hi=4096) * get_int(v, "pos_emb_width", hi=4096),
             max_patches=KIMI_MAX_PATCHES, max_side_patches=KIMI_MAX_SIDE)
    return f


# tower kind -> its reader (the vision config or None, the outer config, the text model's width)
READERS = {"clip": map_llava, "onevision": map_onevision, "aya": map_aya, "cohere2": map_cohere2, "kimi": map_kimi,
           "smolvlm": map_smolvlm}
