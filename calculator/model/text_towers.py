"""The text model inside a multimodal config.json: which text model_type an outer type holds, and the text_config
with the outer fields that apply to it (calculator.model.hf_config maps the result like any decoder config).

May import: calculator.core, calculator.model.config_read, the mappers' tables of text types and
calculator.model.vision.mapping (which configs are multimodal).
"""
from __future__ import annotations

from calculator.model.config_read import get_str
from calculator.model.mappers.gemma_next import GEMMA_NEXT_TEXT_TYPES
from calculator.model.mappers.hybrid import HYBRID_TEXT_TYPES
from calculator.model.mappers.mistral import MISTRAL_TEXT_TYPES
from calculator.model.mappers.vlm_text import OUTER_TIE_DEFAULTS, VLM_TEXT_TYPES
from calculator.model.vision.mapping import is_nested, text_key

# The text model type inside a multimodal config whose text_config omits its own model_type.
TEXT_MODEL_TYPES = {"gemma3": "gemma3_text", "llama4": "llama4_text", "paligemma": "gemma", **VLM_TEXT_TYPES,
                    **HYBRID_TEXT_TYPES, **GEMMA_NEXT_TEXT_TYPES, **MISTRAL_TEXT_TYPES}

# VLMs whose only causal LM is the outer *ForConditionalGeneration: the outer tie_word_embeddings ties its lm_head
# (transformers modeling_utils.PreTrainedModel.get_expanded_tied_weights_keys reads self.config), whatever the
# text_config says (Qwen3VLMoeTextConfig defaults it to True, Qwen3VLMoeConfig to False)
OUTER_TIES_HEAD = frozenset({"mistral3", "mistral_large4", "paligemma", *VLM_TEXT_TYPES})
# ... and those whose configuration class also ties it when the text_config says so (the BC rule of Qwen2VLConfig,
# Glm4vConfig, GlmOcrConfig, Glm4vMoeConfig __post_init__: pre-v5 saves kept tie_word_embeddings in text_config)
TEXT_TIE_FORWARDED = frozenset({"qwen2_vl", "qwen2_5_vl", "glm4v", "glm_ocr", "glm4v_moe",
                                "paddleocr_vl", "hunyuan_vl", "minimax_m3_vl"})  # their configs' __post_init__ too

# fields of the outer config that apply to the text model
OUTER_KEYS = ("tie_word_embeddings", "torch_dtype", "dtype", "quantization_config", "_name_or_path")


def text_config(cfg: dict) -> dict:
    """A multimodal config's text_config with the outer fields that apply to the text model; any other config as
    it is (also a multimodal type written flat, as Qwen2.5-VL's Hub files are)."""
    if not is_nested(cfg):
        return cfg
    outer_type = get_str(cfg, "model_type", default=None)  # the warning: calculator.model.vision.vision_from_config
    text = cfg[text_key(cfg)]
    missing = {"model_type": TEXT_MODEL_TYPES.get(outer_type, outer_type)} if text.get("model_type") is None else {}
    outer = {k: cfg[k] for k in OUTER_KEYS if k in cfg and (k not in text or (k == "_name_or_path" and not text[k]))}
    if outer_type in OUTER_TIES_HEAD and "tie_word_embeddings" in cfg:
        outer["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    elif outer_type in OUTER_TIE_DEFAULTS:
        outer["tie_word_embeddings"] = OUTER_TIE_DEFAULTS[outer_type]
    if outer_type in TEXT_TIE_FORWARDED and text.get("tie_word_embeddings") is True:
        outer["tie_word_embeddings"] = True
    return {**text, **missing, **outer}
