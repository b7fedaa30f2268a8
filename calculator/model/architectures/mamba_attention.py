"""Falcon-H1's layer: a Mamba-2 mixer and the model's softmax attention side by side on the same normed input
(transformers models/falcon_h1/modeling_falcon_h1.py FalconH1DecoderLayer.forward: ssm_out_multiplier ·
mamba(x) + attention_out_multiplier · attention(x · attention_in_multiplier), then the residual add).

The attention's tensors, saved activations and KV cache are the engine's (WITH_ATTENTION); this module adds the
Mamba-2 half (calculator/model/architectures/mamba.py, FalconH1Mixer: out_proj bias from projectors_bias, the gated
RMSNorm only with mamba_rms_norm) and what the parallel layout changes: each half multiplies the norm output by its
own scalar first, so each keeps its own copy of its input and the norm output itself is not saved.
"""
from __future__ import annotations

from calculator.model.architectures import mamba
from calculator.model.architectures.shapes import Shape

NAME = "mamba_attention"
LABEL = "Mamba-2 ∥ attention"
SOURCE = "mamba"
WITH_ATTENTION = True


def shapes(m) -> list[Shape]:
    """The Mamba-2 mixer's tensors (the attention's are added by the engine)."""
    return mamba.shapes(m)


def linears(m) -> list[tuple[str, int, int]]:
    """The Mamba-2 mixer's nn.Linear modules, out_proj last (the attention's q/k/v/o are the engine's)."""
    return mamba.linears(m)


def state_bytes(m, batch: int, model_dtype_bytes: float) -> int:
    """The Mamba-2 conv and SSM states generate() keeps beside the layer's K/V (transformers cache_utils
    LinearAttentionAndFullAttentionLayer)."""
    return mamba.state_bytes(m, batch, model_dtype_bytes)


def serving_state(m, tp: int) -> tuple[int, int]:
    """(conv elements, recurrent elements) per sequence on one TP rank, as vLLM keeps them beside the KV cache."""
    return mamba.serving_state(m, tp)


def input_copies_saved(d) -> int:
    """Beyond the one norm output the engine counts per mixer: the two input copies x · ssm_in_multiplier (saved by
    in_proj) and x · attention_in_multiplier (saved by q/k/v) replace it, one e·T·h more (measured:
    tests/model/test_mamba.py)."""
    return d.e * d.T * d.h_sp


def saved(m, d, w) -> int:
    """What the Mamba-2 half saves beyond the attention's, for the local shapes `d`: the mixer's own tensors per
    w.mixer_kernels (mamba.saved; the in_proj output is scaled by the mup_vector buffer first, a same-sized tensor)
    plus the second input copy."""
    return mamba.saved(m, d, w) + input_copies_saved(d)


def linear_flops_per_token(m) -> float:
    """The Mamba-2 half's core FLOPs per token (the attention's are the engine's)."""
    return mamba.linear_flops_per_token(m)


# ---- LoRA: what the frozen Mamba-2 half no longer saves ---------------------------------------------------------

# in_proj reads its own scaled copy of the normalised input (input_copies_saved), not the norm output the attention's
# q/k/v read: the reads-input rule is the attention's
READS_INPUT: frozenset[str] = frozenset()


def frozen_saved(m, d, w, adapted: frozenset[str]) -> int:
    """Bytes saved() no longer keeps when the Mamba-2 half is frozen and only the `adapted` linears carry LoRA
    adapters, its input requiring grad (FalconH1DecoderLayer / FalconH1Mixer; measured with PEFT 0.21 on the CPU,
    validation/trace/lora_hybrid.py): the Mamba-2 mixer's (mamba.frozen_saved) and in_proj's scaled input copy unless
    in_proj is adapted, e·T·h."""
    return mamba.frozen_saved(m, d, w, adapted) + (0 if "in_proj" in adapted else d.e * d.T * d.h_sp)


def bypassed_adapters(m, w) -> frozenset[str]:
    """The Mamba-2 half's linears whose adapters the forward never runs (mamba.bypassed_adapters)."""
    return mamba.bypassed_adapters(m, w)
