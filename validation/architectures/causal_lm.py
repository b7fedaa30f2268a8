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
TOWER_PREFIXES |= {"mm_projector"}  # Kimi-K2.5's Kimi_K25MultimodalProjection
TOWER_PREFIXES |= {"resampler_model"}  # ERNIE-4.5-VL's Ernie4_5_VLMoeVariableResolutionResamplerModel
# causal LMs transformers 5.23 leaves out of AutoModelForCausalLM's table (models/auto/modeling_auto.py)
UNLISTED_CAUSAL_LM = {"mistral4": "Mistral4ForCausalLM"}


def causal_lm(config, **kwargs):
    """The model transformers builds for `config` (kwargs: from_config's, e.g. dtype, attn_implementation)."""
    if getattr(config, "block_configs", None) is not None:  # Nemotron-NAS's remote code (decilm_causal_lm)
        return decilm_causal_lm(config, **kwargs)
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



def decilm_config(cfg: dict):
    """The LlamaConfig DeciLMConfig extends (configuration_decilm.py), carrying block_configs for decilm_causal_lm;
    num_key_value_heads and intermediate_size (null in the checkpoint) from the first attention / MLP block."""
    from transformers import LlamaConfig
    blocks = cfg["block_configs"]
    group = next(b["attention"]["n_heads_in_group"] for b in blocks if not b["attention"].get("no_op"))
    fields = {k: v for k, v in cfg.items() if k not in ("_name_or_path", "architectures", "model_type", "auto_map")}
    fields.update(num_key_value_heads=cfg["num_attention_heads"] // group, intermediate_size=cfg["hidden_size"])
    return LlamaConfig(**fields)


class DeciLMLayer(torch.nn.Module):
    """modeling_decilm.py DeciLMDecoderLayer.forward: the attention block (input_layernorm, self_attn, residual) unless
    attention.no_op, then the MLP block (post_attention_layernorm, mlp, residual) unless ffn.no_op."""

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False,
                position_embeddings=None, **kwargs):
        if hasattr(self, "self_attn"):
            attended, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states),
                                         attention_mask=attention_mask, position_ids=position_ids,
                                         past_key_values=past_key_values, use_cache=use_cache,
                                         position_embeddings=position_embeddings, **kwargs)
            hidden_states = hidden_states + attended
        if hasattr(self, "mlp"):
            hidden_states = hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states


def decilm_causal_lm(config, **kwargs):
    """DeciLMForCausalLM as the remote code builds it (modeling_decilm.py of huggingface.co/nvidia/
    Llama-3_3-Nemotron-Super-49B-v1; transformers 5.23 ships no `nemotron-nas` type), from transformers' own Llama
    classes: LlamaForCausalLM's embedding, RoPE, final norm and head, and per layer i of block_configs a DeciLMLayer
    holding input_layernorm + LlamaAttention (num_attention_heads / n_heads_in_group key/value heads) unless
    attention.no_op and post_attention_layernorm + LlamaMLP (its ffn_mult width: calculator's nas_ffn_width rule,
    int(2·ffn_mult·h / 3) rounded up to 256) unless ffn.no_op. `config`: decilm_config's."""
    import copy

    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm
    dtype = kwargs.get("dtype")
    model = LlamaForCausalLM._from_config(config, **kwargs)
    h = config.hidden_size
    layers = torch.nn.ModuleList()
    for i, block in enumerate(config.block_configs):
        att, ffn, layer = block["attention"], block["ffn"], DeciLMLayer()
        own = copy.copy(model.config)
        if not att.get("no_op"):
            own.num_key_value_heads = config.num_attention_heads // att["n_heads_in_group"]
            layer.input_layernorm = LlamaRMSNorm(h, eps=config.rms_norm_eps)
            layer.self_attn = LlamaAttention(own, layer_idx=i)
        if not ffn.get("no_op"):
            width = int(2 * ffn["ffn_mult"] * h / 3)
            own.intermediate_size = -(-width // 256) * 256
            layer.post_attention_layernorm = LlamaRMSNorm(h, eps=config.rms_norm_eps)
            layer.mlp = LlamaMLP(own)
        layers.append(layer)
    model.model.layers = layers
    return model.to(dtype) if dtype is not None else model
