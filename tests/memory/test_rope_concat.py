"""RoPE built with torch.cat (ModelSpec.rope_concat): the partial-rotary apply_rotary_pos_emb of GPT-NeoX, MiniMax-M2,
Qwen3-Next and Qwen3.5 (`torch.cat([q_embed, q_pass], dim=-1)`), and Phi's / StableLM's attention forward
(`torch.cat((query_rot, query_pass), dim=-1)`), transformers 5.23. q reaches SDPA contiguous in (b, heads, s, d),
the flash kernel's output is laid out like q, and `attn_output.transpose(1, 2).contiguous()` is a copy that o_proj
(or the output gate's multiply) keeps beside the kernel's output: e·T·qd more under SDPA / flash, none under eager
(calculator.memory.sdpa.output_copy)."""
from __future__ import annotations

import pytest

from calculator import Workload
from calculator.memory import activations as act
from calculator.memory import sdpa

TYPES = ["gpt_neox", "minimax_m2", "phi", "stablelm", "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
         "qwen3_5_moe_text"]


def _traced(model_type: str, attention: str) -> dict:
    pytest.importorskip("transformers")
    from validation.architectures import measure as M
    from validation.architectures.sources import source
    M.quiet()
    src = source(model_type)
    spec, _ = M.spec_of(src)
    return spec, M.activations(src, spec, attention)


@pytest.mark.parametrize("model_type", TYPES)
def test_the_mapper_says_rope_concat_and_sdpa_keeps_one_more_output(model_type):
    """T = 32 tokens (b = 2, s = 16), bf16: e·T·qd under SDPA, nothing under eager or selective recompute."""
    from validation.architectures import measure as M
    from validation.architectures.sources import source
    spec, _ = M.spec_of(source(model_type))
    assert spec.rope_concat
    w = Workload(seq_len=16, micro_batch=2, attention="sdpa", mixer_kernels="torch")
    d = act.dims(spec, w)
    assert sdpa.output_copy(d, spec, w) == 2 * 32 * spec.num_attention_heads * spec.head_size
    for other in (dict(attention="eager"), dict(recompute="selective")):
        w2 = w.model_copy(update=other)
        assert sdpa.output_copy(act.dims(spec, w2), spec, w2) == 0


@pytest.mark.parametrize("model_type", TYPES)
def test_sdpa_rows_err_as_the_eager_ones(model_type):
    """The traced SDPA layer (PyTorch's CPU flash kernel) differs from the engine by what the eager layer does (0 for
    MiniMax-M2, Phi, StableLM; the Qwen3-Next / Qwen3.5 attention layers' own eager residual otherwise)."""
    _, eager = _traced(model_type, "eager")
    _, flash = _traced(model_type, "sdpa")
    for kind in eager:
        assert flash[kind]["engine"] - flash[kind]["reference"] == eager[kind]["engine"] - eager[kind]["reference"]
