"""Vision towers of vision-language models (issue 21): the encoder and projector a multimodal config.json describes
(VisionSpec, read by mapping.vision_from_config into ModelSpec.vision), their parameters tensor by tensor
(tensors), an image's patches and language-model tokens (tokens), and what the encoder saves for backward or holds
while it runs (saved). The stage terms that price them are calculator/stages/vision.py.

May import: calculator.core and calculator.model.config_read (never calculator.model.spec: spec imports this).
"""
from __future__ import annotations

from calculator.model.vision.mapping import VISION_TYPES, vision_from_config
from calculator.model.vision.saved import attention_groups, block_saved_bytes
from calculator.model.vision.spec import VisionSpec
from calculator.model.vision.tensors import VisionParams, adapted_linears, vision_parameters, vision_tensors
from calculator.model.vision.tokens import ImageTokens, image_tokens

__all__ = ["VISION_TYPES", "ImageTokens", "VisionParams", "VisionSpec", "adapted_linears", "attention_groups",
           "block_saved_bytes", "image_tokens", "vision_from_config", "vision_parameters", "vision_tensors"]
