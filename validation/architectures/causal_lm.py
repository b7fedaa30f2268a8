"""The real causal LM transformers builds for a config: AutoModelForCausalLM, or, for the vision-language types
whose only causal LM is their *ForConditionalGeneration (Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE: transformers 5.23
registers no *ForCausalLM for their text models), that model, driven by input_ids alone (its vision tower idle).
Its text parameters are the model's without the tower (`model.visual`), which the engine prices apart."""
from __future__ import annotations

import torch
import transformers

IMAGE_TEXT_ONLY = frozenset({"qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"})


def causal_lm(config, **kwargs):
    """The model transformers builds for `config` (kwargs: from_config's, e.g. dtype, attn_implementation)."""
    if config.model_type in IMAGE_TEXT_ONLY:
        return transformers.AutoModelForImageTextToText.from_config(config, **kwargs)
    return transformers.AutoModelForCausalLM.from_config(config, **kwargs)


def text_parameters(model) -> list[torch.nn.Parameter]:
    """The parameters of the language model and its head: a vision-language model's tower left out."""
    return [p for name, p in model.named_parameters() if not (name.startswith("visual.") or ".visual." in name)]
