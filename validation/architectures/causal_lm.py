"""The real causal LM transformers builds for a config: AutoModelForCausalLM, or, for the vision-language types
whose only causal LM is their *ForConditionalGeneration (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE, GLM-4.1V /
4.5V / 4.6V, GLM-OCR, Qwen2.5-Omni's thinker: transformers 5.23 registers no *ForCausalLM for their text models),
that model, driven by input_ids alone (its towers idle). Its text parameters are the model's without the towers
(`model.visual`, TOWER_PREFIXES), which the engine prices apart or leaves out."""
from __future__ import annotations

import torch
import transformers

IMAGE_TEXT_ONLY = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "mistral3", "mistral_large4",
                             "glm4v", "glm46v", "glmga", "glm_ocr", "glm4v_moe", "qwen2_5_omni_thinker"})
# a Mistral-3-style model's vision tower and projector (models/mistral_large4 MistralLarge4Model)
TOWER_PREFIXES = frozenset({"vision_tower", "multi_modal_projector", "audio_tower"})  # Qwen2.5-Omni's audio tower
TOWER_PREFIXES |= {"projector", "vision_model", "image_newline", "view_separator",  # mappers/vlm_ocr.py's VLMs
                   "layerwise_projectors", "spatial_projectors", "density_router"}
TOWER_PREFIXES |= {"vision_adapter", "vision_projection"}  # Muse-Glimmer (vlm_more)
# causal LMs transformers 5.23 leaves out of AutoModelForCausalLM's table (models/auto/modeling_auto.py)
UNLISTED_CAUSAL_LM = {"mistral4": "Mistral4ForCausalLM"}


def causal_lm(config, **kwargs):
    """The model transformers builds for `config` (kwargs: from_config's, e.g. dtype, attn_implementation)."""
    if config.model_type in IMAGE_TEXT_ONLY or _image_text_only(config.model_type):
        return transformers.AutoModelForImageTextToText.from_config(config, **kwargs)
    if config.model_type in UNLISTED_CAUSAL_LM:
        return getattr(transformers, UNLISTED_CAUSAL_LM[config.model_type])._from_config(config, **kwargs)
    return transformers.AutoModelForCausalLM.from_config(config, **kwargs)


def _image_text_only(model_type: str) -> bool:
    """A multimodal type transformers 5.23 registers for image-text-to-text and not as a causal LM."""
    from transformers.models.auto import modeling_auto as auto
    return (model_type in auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
            and model_type not in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def text_parameters(model) -> list[torch.nn.Parameter]:
    """The parameters of the language model and its head: a vision-language model's tower left out."""
    return [p for name, p in model.named_parameters() if not (name.startswith("visual.") or ".visual." in name
                                                              or TOWER_PREFIXES.intersection(name.split(".")))]


def mimo_causal_lm(cfg: dict):
    """MiMoForCausalLM as the remote code builds it (modeling_mimo.py of huggingface.co/XiaomiMiMo/MiMo-7B-Base;
    transformers 5.23 ships no `mimo` type): transformers' Qwen2ForCausalLM (MiMoModel subclasses Qwen2Model and
    keeps its forward) with model.mtp_layers, one MiMoMTPLayers per num_nextn_predict_layers: token_layernorm,
    hidden_layernorm, input_layernorm, post_attention_layernorm, final_layernorm (Qwen2RMSNorm), input_proj =
    Linear(2h, h, bias=False), self_attn = Qwen2Attention(config, layer_idx=0), mlp = Qwen2MLP(config). Built on
    whatever device the caller sets (meta for counting)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention, Qwen2MLP, Qwen2RMSNorm
    config = Qwen2Config(**mimo_qwen2_fields(cfg))
    h, nn = config.hidden_size, torch.nn
    model = Qwen2ForCausalLM(config)
    model.model.mtp_layers = nn.ModuleList(nn.ModuleDict(dict(
        input_layernorm=Qwen2RMSNorm(h), post_attention_layernorm=Qwen2RMSNorm(h), token_layernorm=Qwen2RMSNorm(h),
        hidden_layernorm=Qwen2RMSNorm(h), final_layernorm=Qwen2RMSNorm(h), input_proj=nn.Linear(2 * h, h, bias=False),
        self_attn=Qwen2Attention(config, layer_idx=0), mlp=Qwen2MLP(config)))
        for _ in range(cfg.get("num_nextn_predict_layers", 0)))
    return model


def mimo_qwen2_fields(cfg: dict) -> dict:
    """A MiMo config.json's fields as the Qwen2Config MiMoConfig extends (without num_nextn_predict_layers)."""
    return {k: v for k, v in cfg.items() if k not in ("_name_or_path", "architectures", "model_type", "auto_map",
                                                      "num_nextn_predict_layers")}

