"""Parameter counts the mapper tests compare: the real model's, built by transformers on the meta device, and the
engine's for the config.json transformers writes."""
from __future__ import annotations

import torch
import transformers

from calculator.model.hf_config import spec_from_hf_config
from calculator.model.parameters import count_parameters


def real_counts(config) -> tuple[int, int]:
    """(parameters, tensors) of the causal-LM model transformers builds from `config`."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    params = list(model.parameters())
    return sum(p.numel() for p in params), len(params)


def engine_counts(written: dict) -> tuple[int, int]:
    """(parameters, tensors) the engine counts for a config.json."""
    counts = count_parameters(spec_from_hf_config(written).spec)
    return counts.total, counts.tensors
