"""Parameter counts the mapper tests compare: the real model's, built by transformers on the meta device, and the
engine's for the config.json transformers writes."""
from __future__ import annotations

import torch

from calculator.model.hf_config import spec_from_hf_config
from calculator.model.parameters import count_parameters
from validation.architectures.causal_lm import causal_lm, text_parameters


def real_counts(config) -> tuple[int, int]:
    """(parameters, tensors) of the causal-LM model transformers builds from `config` (a vision-language model's
    text model and head: validation/architectures/causal_lm.py)."""
    with torch.device("meta"):
        model = causal_lm(config)
    params = text_parameters(model)
    return sum(p.numel() for p in params), len(params)


def engine_counts(written: dict) -> tuple[int, int]:
    """(parameters, tensors) the engine counts for a config.json."""
    counts = count_parameters(spec_from_hf_config(written).spec)
    return counts.total, counts.tensors
