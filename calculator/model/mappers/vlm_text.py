"""The text towers of vision-language models (issue 21): each text model_type, and the multimodal type whose
text_config it is (calculator.model.text_towers reads that text_config), mapped from the transformers 5.23 modeling
file it mirrors (cited per mapper). Only the language model and its head are mapped; the vision tower is priced apart
(calculator.model.vision). tests/model/mappers/test_archs.py builds the real *ForConditionalGeneration on the meta
device at tiny widths and holds each type to its parameter and tensor counts, and validation/architectures
(table.json) to one traced layer's saved activations and the cache.

VLM_SAME_BLOCKS names the text towers whose decoder layer, norms, MLP, attention, head tying and cache are an
already mapped type's own modules, calculator.model.hf_config mapping them with that type's mapper; VLM_TEXT_MAPPERS
holds those that differ, each saying how.

vlm_ocr (document, OCR and edge VLMs) and vlm_more (more VLMs, and refusals) add text towers in tables of their own,
merged here (VLM_GROUP_TYPES: the types they add).

May import: calculator.core, calculator.model.config_read, variants and the other mappers modules.
"""
from __future__ import annotations

from calculator.model.config_read import ConfigError, common_fields, get_str, partial_rotary_dim
from calculator.model.mappers import vlm_more, vlm_ocr
from calculator.model.mappers.dsa import map_glm4_moe

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


VLM_TEXT_MAPPERS = {
    "glm4v_text": map_glm4v_text, "glm4v": map_glm4v_text, "glm46v": map_glm4v_text, "glmga": map_glm4v_text,
    "glm_ocr_text": map_glm_ocr_text, "glm_ocr": map_glm_ocr_text,
    "glm4v_moe_text": map_glm4v_moe_text, "glm4v_moe": map_glm4v_moe_text,
    "qwen3_omni_moe_text": refuse_qwen3_omni_moe, "qwen3_omni_moe_thinker": refuse_qwen3_omni_moe,
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
