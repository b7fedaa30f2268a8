"""Model construction for validation/trace/accounting.py: a transformers model from a config dict (never from downloaded
weights), normally on the ``meta`` device, its decoder layers and final norm, and the hooks that label each
allocation with the phase (layer, final norm, head) it happened in.
"""
from __future__ import annotations

import torch

from validation.trace.emulation import attn_implementation_name, register_attention_functions
from validation.trace.tracker import MemoryTracker

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def make_config(model_cfg: dict, num_hidden_layers: int | None = None):
    from transformers import AutoConfig

    fields = {k: v for k, v in model_cfg.items() if k not in ("model_type", "architectures", "torch_dtype", "dtype")}
    if num_hidden_layers is not None:
        fields["num_hidden_layers"] = num_hidden_layers
        if "n_layer" in fields:
            fields["n_layer"] = num_hidden_layers
        if "layer_types" in fields:
            fields["layer_types"] = fields["layer_types"][:num_hidden_layers]
    return AutoConfig.for_model(model_cfg["model_type"], **fields)


def build_model(model_cfg: dict, dtype: str, attention: str, recompute: str = "none", device: str = "meta",
                num_hidden_layers: int | None = None, seed: int = 0):
    from transformers import AutoModelForCausalLM

    register_attention_functions()
    cfg = make_config(model_cfg, num_hidden_layers)
    torch.manual_seed(seed)
    kwargs = {}
    if _is_moe(cfg):
        kwargs["experts_implementation"] = "grouped_mm"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            cfg, dtype=DTYPES[dtype], attn_implementation=attn_implementation_name(attention, recompute), **kwargs
        )
    return model


def _is_moe(cfg) -> bool:
    return any(getattr(cfg, n, None) for n in ("num_local_experts", "num_experts"))


def decoder_layers(model) -> torch.nn.ModuleList:
    n = model.config.num_hidden_layers
    for m in model.modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) == n:
            return m
    raise RuntimeError("decoder layer list not found")


def final_norm(model):
    base = model.base_model
    for name in ("norm", "ln_f", "final_layernorm"):
        if hasattr(base, name):
            return getattr(base, name)
    raise RuntimeError("final norm not found")


def install_phase_hooks(model, tracker: MemoryTracker):
    handles = []

    def setter(label):
        def hook(module, args, kwargs=None):
            if tracker.phase not in ("backward", "step"):
                tracker.phase = label

        return hook

    for i, layer in enumerate(decoder_layers(model)):
        handles.append(layer.register_forward_pre_hook(setter(f"layer.{i}")))
    handles.append(final_norm(model).register_forward_pre_hook(setter("final_norm")))
    handles.append(model.get_output_embeddings().register_forward_pre_hook(setter("head")))
    return handles


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once
