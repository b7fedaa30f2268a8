"""What a CPU trace keeps that the same layer on a GPU does not (the engine prices the GPU), counted per decoder layer
from the calls the traced forward makes (tests/model/mappers/test_variants.py names the same terms per type):

- "layernorm_stats": F.layer_norm on a bf16 input: the CPU kernel (aten/src/ATen/native/cpu/layer_norm_kernel.cpp)
  returns mean and rstd in the input dtype, 2 + 2 B per row; CUDA's keeps them in fp32, 4 + 4 B: −4 B per row;
- "rms_norm_upcast": F.rms_norm (nn.RMSNorm, e.g. DiffLlama's group norm) on a bf16 input: the CPU path is the
  composite rms_norm, which saves the fp32 upcast (4 B per element); CUDA's _fused_rms_norm saves the bf16 input
  (2 B): +2 B per element;
- "dropout_noise": F.dropout in training on a bf16 input: the CPU path (_dropout_impl, input · noise) saves a bf16
  noise tensor (2 B per element); CUDA's native_dropout saves a bool mask (1 B): +1 B per element;
- "sdpa_dropout_math": F.scaled_dot_product_attention with dropout_p > 0 and no mask (transformers' sdpa path in
  training with attention dropout: GPT-2, Seed-OSS): the CPU's flash kernel takes no dropout (aten/src/ATen/native/
  transformers/sdp_utils_cpp.cpp, check_for_dropout), so the math path runs (attention.cpp
  _scaled_dot_product_attention_math): it upcasts to fp32 and keeps the scaled q, the (GQA-repeated) k and v, the
  softmax, the dropout noise and the dropped probabilities, 4 B each; CUDA's flash kernel takes the dropout (its
  Philox state regenerates the mask) and keeps q, k and v as given, and an fp32 logsumexp per head and query. The
  term is the first less the second (nothing else keeps the bf16 q, k or v the flash kernel would keep).

The reference the engine is compared with is the traced bytes minus these (negative: the CPU keeps less).
"""
from __future__ import annotations

import math
from collections import defaultdict
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


class _CpuOnly(TorchFunctionMode):
    """Adds each CPU-only term to the decoder layer running (`layer[0]`, set by the layers' hooks); the mode is off
    inside its own calls, so only the outermost functional call (F.layer_norm, not the aten op under it) counts."""

    def __init__(self, layer: list, terms: dict):
        super().__init__()
        self.layer, self.terms = layer, terms

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        x = args[0] if args else None
        if self.layer[0] is not None and isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 and \
                x.requires_grad and torch.is_grad_enabled():  # under no_grad (DSA indexers) nothing is saved
            if func is F.layer_norm:
                shape = args[1] if len(args) > 1 else kwargs["normalized_shape"]
                self.terms[self.layer[0]]["layernorm_stats"] -= 4 * (x.numel() // math.prod(shape))
            elif func is F.rms_norm:
                self.terms[self.layer[0]]["rms_norm_upcast"] += 2 * x.numel()
            elif func is F.dropout:
                p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
                training = args[2] if len(args) > 2 else kwargs.get("training", True)
                if p > 0 and training:
                    self.terms[self.layer[0]]["dropout_noise"] += x.numel()
            elif func is F.scaled_dot_product_attention and x.device.type == "cpu":
                self.terms[self.layer[0]]["sdpa_dropout_math"] += sdpa_dropout_math(*args, **kwargs)
        return func(*args, **kwargs)


def sdpa_dropout_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                      enable_gqa=False) -> int:
    """What the CPU's math path keeps beyond CUDA's flash kernel for one SDPA call with dropout and no mask (0 for
    any other call): fp32 q, repeated k and v, and three fp32 score tensors, less q, k and v as given (each storage
    once) and the fp32 logsumexp."""
    if dropout_p <= 0 or attn_mask is not None:
        return 0
    b, a, s, _ = query.shape
    repeat = a // key.shape[-3] if enable_gqa else 1
    scores = b * a * s * key.shape[-2]
    math = 4 * (query.numel() + repeat * (key.numel() + value.numel())) + 3 * 4 * scores
    given = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in (query, key, value)}
    return math - sum(given.values()) - 4 * b * a * s


@contextmanager
def cpu_only_terms(layers):
    """Yields {layer index: {term: bytes}} filled while the block runs a forward of the model whose decoder layers
    are `layers` (a ModuleList)."""
    terms: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    layer: list = [None]
    hooks = []
    for i, mod in enumerate(layers):
        hooks.append(mod.register_forward_pre_hook(lambda m, a, i=i: layer.__setitem__(0, i)))
        hooks.append(mod.register_forward_hook(lambda m, a, o: layer.__setitem__(0, None)))
    try:
        with _CpuOnly(layer, terms):
            yield terms
    finally:
        for h in hooks:
            h.remove()
