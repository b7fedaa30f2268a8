"""The text towers of vision-language models (issue 21): each text model_type, and the multimodal type whose
text_config it is (calculator.model.text_towers reads that text_config), mapped from the transformers 5.23 modeling
file it mirrors (cited per mapper). Only the language model and its head are mapped; the vision tower is priced apart
(calculator.model.vision). tests/model/mappers/test_archs.py builds the real *ForConditionalGeneration on the meta
device at tiny widths and holds each type to its parameter and tensor counts, and validation/architectures
(table.json) to one traced layer's saved activations and the cache.

VLM_SAME_BLOCKS names the text towers whose decoder layer, norms, MLP, attention, head tying and cache are an
already mapped type's own modules, calculator.model.hf_config mapping them with that type's mapper; VLM_TEXT_MAPPERS
holds those that differ, each saying how.

Chameleon (map_chameleon: an early-fusion model, images enter as VQ tokens of its one vocabulary) is mapped here
whole, its VQ tokenizer held idle; tests/model/mappers/test_chameleon.py holds it to the real model.

vlm_ocr (document, OCR and edge VLMs) and vlm_more (more VLMs, and refusals) add text towers in tables of their own,
merged here (VLM_GROUP_TYPES: the types they add).

May import: calculator.core, calculator.model.config_read, variants and the other mappers modules.
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.config_read import (ConfigError, common_fields, get_bool, get_int, get_int_list, get_str,
                                          llama_like_fields, partial_rotary_dim)
from calculator.model.mappers import vlm_more, vlm_ocr
from calculator.model.mappers.dsa import map_glm4_moe
from calculator.model.variants import VariantSpec

# Text towers that are an already mapped type's decoder, read with its mapper (calculator.model.hf_config):
# - Qwen2-VL / Qwen2.5-VL (models/qwen2_vl/modeling_qwen2_vl.py Qwen2VLTextModel, models/qwen2_5_vl
#   Qwen2_5_VLTextModel): Qwen2's layer (biased q/k/v, Qwen2MLP, two RMSNorms); an outer type maps its text_config,
#   or its top level where the Hub writes it flat (Qwen2VLConfig.__post_init__ pops those fields into text_config)
# - Qwen3-VL / Qwen3-VL-MoE (models/qwen3_vl, qwen3_vl_moe *TextModel): Qwen3's and Qwen3-MoE's layers
# - Qwen2.5-Omni's thinker (models/qwen2_5_omni/modeling_qwen2_5_omni.py Qwen2_5OmniThinkerTextModel): Qwen2's layer
#   (Qwen2_5OmniAttention reads head_dim as Qwen2Attention does); its audio and vision towers are left out
# Their multimodal RoPE computes cos / sin once per forward as the text model's do, but from (3, b, s) position ids:
# one table per sequence, not one shared by the batch (not priced: activations.rotary_saved counts one, 2·s·rot·e).
VLM_SAME_BLOCKS = {
    "qwen2_vl_text": "qwen2", "qwen2_vl": "qwen2", "qwen2_5_vl_text": "qwen2", "qwen2_5_vl": "qwen2",
    "qwen3_vl_text": "qwen3", "qwen3_vl": "qwen3", "qwen3_vl_moe_text": "qwen3_moe", "qwen3_vl_moe": "qwen3_moe",
    "qwen2_5_omni_text": "qwen2", "qwen2_5_omni_thinker": "qwen2",
}


def _head_dim(cfg: dict, f: dict) -> int:
    h, heads = f["hidden_size"], f["num_attention_heads"]
    if h % heads:
        raise ConfigError(f"hidden_size: {h} is not a multiple of num_attention_heads ({heads})")
    return h // heads


def map_glm4v_text(cfg: dict) -> dict:
    """GLM-4.1V / GLM-4.6V text tower (models/glm4v/modeling_glm4v.py Glm4vTextModel; Glm46V and Glmga build it
    through AutoModel): GLM-4's layer (glm4 in archs.py: four RMSNorms, the sandwich post_self_attn_layernorm and
    post_mlp_layernorm, one fused gate_up_proj) except that Glm4vTextAttention always biases q/k/v (no
    attention_bias) and sizes its heads hidden_size // num_attention_heads (no head_dim), and its cos / sin are
    computed once per forward already interleaved (Glm4vTextRotaryEmbedding), where GLM-4's apply_rotary_pos_emb
    repeat_interleaves them in every layer; apply_rotary_pos_emb rotates head_dim · partial_rotary_factor channels and
    returns torch.cat([rotated, pass-through]) (rope_concat)."""
    f = common_fields(cfg)
    head_dim = _head_dim(cfg, f)
    given = f.pop("head_dim")
    if given is not None and given != head_dim:
        raise ConfigError(f"head_dim: Glm4vTextAttention sizes its heads hidden_size // num_attention_heads "
                          f"({head_dim}); a head_dim of {given} would only resize its RoPE")
    f.update(qkv_bias=True, o_bias=False, fused_gate_up=True, norms_per_layer=4, rope_concat=True,
             rotary_dim=partial_rotary_dim(cfg, head_dim, 1.0), hidden_act=get_str(cfg, "hidden_act", default="silu"))
    return f


def map_glm_ocr_text(cfg: dict) -> dict:
    """GLM-OCR text tower (models/glm_ocr/modeling_glm_ocr.py GlmOcrTextModel): GLM-4.1V's layer, except that
    GlmOcrTextAttention has no q/k/v biases and reads head_dim (default hidden_size // num_attention_heads)."""
    f = common_fields(cfg)
    head_dim = f["head_dim"] or _head_dim(cfg, f)
    f.update(head_dim=head_dim, qkv_bias=False, o_bias=False, fused_gate_up=True, norms_per_layer=4,
             rope_concat=True, rotary_dim=partial_rotary_dim(cfg, head_dim, 1.0),
             hidden_act=get_str(cfg, "hidden_act", default="silu"))
    return f


def map_glm4v_moe_text(cfg: dict) -> dict:
    """GLM-4.5V text tower (models/glm4v_moe/modeling_glm4v_moe.py Glm4vMoeTextModel): GLM-4.5's layer (glm4_moe,
    dsa.map_glm4_moe: Glm4vMoeTextAttention, TopkRouter, Experts, MoE and MLP are Glm4Moe*'s) without its q/k norms
    (Glm4vMoeTextAttention reads no use_qk_norm), its cos / sin computed once per forward under multimodal RoPE as
    GLM-4.5's are; Glm4vMoeTextConfig has no num_nextn_predict_layers (none unless the config.json gives them).
    Its RoPE is GLM-4.5's: head_dim · partial_rotary_factor channels (Glm4vMoeTextConfig: 0.5), concatenated."""
    return map_glm4_moe({"num_nextn_predict_layers": 0, **cfg, "use_qk_norm": False})


def refuse_qwen3_omni_moe(cfg: dict) -> dict:
    """Qwen3-Omni-MoE's thinker (models/qwen3_omni_moe/modeling_qwen3_omni_moe.py Qwen3OmniMoeThinkerTextModel) has
    Qwen3-MoE's attention and router but its Qwen3OmniMoeThinkerTextExperts is no use_experts_implementation
    module: a Python loop over the experts hit, each gathering its tokens (hidden_states[token_idx]) and running
    F.linear on its slice of gate_up_proj / down_proj before index_add_, which keeps other tensors than the grouped_mm
    experts the engine prices (its one expert loop, VariantSpec.expert_loop, is DBRX's with DBRX's router)."""
    raise ConfigError("model_type: Qwen3-Omni-MoE's thinker cannot be described exactly yet: the calculator has no "
                      "per-expert loop (Qwen3OmniMoeThinkerTextExperts) behind a top-k softmax router; only "
                      "transformers' grouped_mm experts and DBRX's loop")


# ---- Chameleon -----------------------------------------------------------------------------------------------
# models/chameleon/modeling_chameleon.py ChameleonForConditionalGeneration: Meta's early-fusion model, images enter as
# discrete VQ tokens of the one vocabulary (its whole config.json is the text model's; no text_config)
GROUPNORM_GROUPS = 32  # ChameleonVQVAEEncoder's torch.nn.GroupNorm(num_groups=32, ...)


def _conv(cin: int, cout: int, k: int) -> list[tuple[int, ...]]:
    return [(cout, cin, k, k), (cout,)]


def _group_norm(c: int) -> list[tuple[int, ...]]:
    if c % GROUPNORM_GROUPS:
        raise ConfigError(f"vq_config: {c} channels do not split into GroupNorm's {GROUPNORM_GROUPS} groups; "
                          "base_channels × channel_multiplier must be multiples of 32")
    return [(c,), (c,)]


def _resnet(cin: int, cout: int) -> list[tuple[int, ...]]:
    """ChameleonVQVAEEncoderResnetBlock: norm1, conv1, norm2, conv2 and, across a change of width, nin_shortcut."""
    out = _group_norm(cin) + _conv(cin, cout, 3) + _group_norm(cout) + _conv(cout, cout, 3)
    return out + (_conv(cin, cout, 1) if cin != cout else [])


def _attn(c: int) -> list[tuple[int, ...]]:
    """ChameleonVQVAEEncoderAttnBlock: a GroupNorm and four 1×1 convolutions (q, k, v, proj_out)."""
    return _group_norm(c) + 4 * _conv(c, c, 1)


def vq_shapes(vq: dict) -> list[tuple[int, ...]]:
    """ChameleonVQVAE's parameter tensors, in the order ChameleonVQVAEEncoder.__init__ and ChameleonVQVAE.__init__
    build them (ChameleonVQVAEConfig's defaults where vq_config leaves a field out)."""
    if not isinstance(vq, dict):
        raise ConfigError("vq_config: must be an object (ChameleonVQVAEConfig's fields)")
    base = get_int(vq, "base_channels", default=128, hi=1 << 16)
    mult = get_int_list(vq, "channel_multiplier", lo=1, hi=64) or [1, 1, 2, 2, 4]
    if len(mult) > 16:
        raise ConfigError("vq_config.channel_multiplier: at most 16 resolutions")
    blocks = get_int(vq, "num_res_blocks", default=2, hi=64)
    res = get_int(vq, "resolution", default=512, hi=1 << 16)
    attn_res = set(get_int_list(vq, "attn_resolutions", lo=1, hi=1 << 16) or ())
    vanilla = get_str(vq, "attn_type", default="vanilla") == "vanilla"
    latent = get_int(vq, "latent_channels", default=256, hi=1 << 16)
    embed = get_int(vq, "embed_dim", default=256, hi=1 << 16)
    out = 2 * latent if get_bool(vq, "double_latent", False) else latent
    shapes = _conv(get_int(vq, "in_channels", default=3, hi=64), base, 3)
    block_in = base
    for level, m in enumerate(mult):
        block_in = base * ((1,) + tuple(mult))[level]
        for _ in range(blocks):
            shapes += _resnet(block_in, base * m)
            block_in = base * m
            if res in attn_res and vanilla:
                shapes += _attn(block_in)
        if level != len(mult) - 1:
            shapes += _conv(block_in, block_in, 3)  # ChameleonVQVAEEncoderConvDownsample
            res //= 2
    shapes += _resnet(block_in, block_in) + (_attn(block_in) if vanilla else []) + _resnet(block_in, block_in)
    shapes += _group_norm(block_in) + _conv(block_in, out, 3)  # norm_out, conv_out
    codebook = (get_int(vq, "num_embeddings", default=8192, hi=B.MAX_VOCAB), embed)
    return shapes + [codebook] + _conv(latent, embed, 1) + _conv(embed, latent, 1)  # quant_conv, post_quant_conv


def check_vocabulary_map(cfg: dict) -> None:
    """ChameleonModel builds ChameleonImageVocabularyMapping from vocabulary_map (token names to ids, the image
    tokens named IMGIMG…): refused, naming the field, when it is missing or not such a map."""
    vocab = cfg.get("vocabulary_map")
    if vocab is None:
        raise ConfigError("vocabulary_map: ChameleonModel needs it (the token names and ids of the tokenizer, image "
                          "tokens named IMGIMG…); give the checkpoint's config.json")
    if not isinstance(vocab, dict) or not all(isinstance(k, str) and type(v) is int for k, v in vocab.items()):
        raise ConfigError("vocabulary_map: must map token names to integer ids")


def map_chameleon(cfg: dict) -> dict:
    """Chameleon's language model (ChameleonModel): Llama's layer (ChameleonAttention, ChameleonMLP, ChameleonRMSNorm,
    RoPE) but for the q/k norms, ChameleonLayerNorm over (heads, head_dim): F.layer_norm over each head without
    affine, then a weight and a bias of its own per head and channel (VariantSpec.qk_norm_layout "head_affine").
    swin_norm moves the two norms onto the sublayer outputs (ChameleonSwinDecoderLayer): the same tensors and, per
    norm, the same saved copies. ChameleonModel also builds the image tokenizer, ChameleonVQVAE (vqmodel: vq_shapes):
    it loads and counts, no text step runs it and no gradient reaches it (its image tokens are an argmin:
    VariantSpec.idle_tensors). The head sets the image tokens of vocabulary_map to finfo.min in every logit row in
    place: the index_put_ keeps only its index tensor, built from a Python list on the host (torch's
    indexing_tensor_from_data), nothing on the GPU (a traced CPU step keeps the same activations with 16 image tokens
    or none); vocabulary_map is still required, as ChameleonModel requires it. Served, Chameleon runs through vLLM's
    and SGLang's Transformers backend (vLLM dropped its own after 0.28.0), which builds transformers' whole model:
    the VQ tokenizer loads with it (VariantSpec.idle_served)."""
    f = llama_like_fields(cfg)
    h, heads = f["hidden_size"], f["num_attention_heads"]
    if h % heads:
        raise ConfigError(f"hidden_size ({h}) must be divisible by num_attention_heads ({heads}): ChameleonAttention's "
                          "head_dim is hidden_size // num_attention_heads")
    vq = cfg.get("vq_config")
    f.update(head_dim=h // heads, qk_norm=True, tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", False),
             variant=VariantSpec(qk_norm_layout="head_affine", idle_tensors=tuple(vq_shapes({} if vq is None else vq)),
                                 idle_served=True))
    check_vocabulary_map(cfg)
    return f


VLM_TEXT_MAPPERS = {
    "glm4v_text": map_glm4v_text, "glm4v": map_glm4v_text, "glm46v": map_glm4v_text, "glmga": map_glm4v_text,
    "glm_ocr_text": map_glm_ocr_text, "glm_ocr": map_glm_ocr_text,
    "glm4v_moe_text": map_glm4v_moe_text, "glm4v_moe": map_glm4v_moe_text,
    "qwen3_omni_moe_text": refuse_qwen3_omni_moe, "qwen3_omni_moe_thinker": refuse_qwen3_omni_moe,
    "chameleon": map_chameleon,
}
VLM_REFUSED = frozenset({"qwen3_omni_moe_text", "qwen3_omni_moe_thinker"})  # hf_config.REFUSED_MODEL_TYPES
# the text model_type of each multimodal type whose text_config omits it (calculator.model.text_towers)
VLM_TEXT_TYPES = {"qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text", "qwen3_vl": "qwen3_vl_text",
                  "qwen3_vl_moe": "qwen3_vl_moe_text", "glm4v": "glm4v_text", "glm46v": "glm4v_text",
                  "glmga": "glm4v_text", "glm_ocr": "glm_ocr_text", "glm4v_moe": "glm4v_moe_text",
                  "qwen2_5_omni_thinker": "qwen2_5_omni_text", "qwen3_omni_moe_thinker": "qwen3_omni_moe_text",
                  "minimax_m3_vl": "minimax_m3_vl_text"}  # MiniMaxM3VLConfig's text_config (dsa.map_minimax_m3)
# the outer class's tie_word_embeddings default where its text class's differs (Qwen2_5OmniThinkerConfig: False,
# Qwen2_5OmniTextConfig: True): a config.json that leaves the outer one out ties the head by the outer default
OUTER_TIE_DEFAULTS = {"qwen2_5_omni_thinker": False, "qwen3_omni_moe_thinker": False}

_GROUPS = (vlm_ocr, vlm_more)
for _g in _GROUPS:
    VLM_TEXT_MAPPERS.update(_g.MAPPERS)
    VLM_SAME_BLOCKS.update(_g.SAME_BLOCKS)
    VLM_TEXT_TYPES.update(_g.TEXT_TYPES)
    OUTER_TIE_DEFAULTS.update(_g.TIE_DEFAULTS)
VLM_REFUSED = VLM_REFUSED.union(*(_g.REFUSED for _g in _GROUPS))
VLM_GROUP_TYPES = frozenset(t for _g in _GROUPS for t in (*_g.MAPPERS, *_g.SAME_BLOCKS))
