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


@pytest.mark.parametrize("written, width", [(dict(rotary_dim=64), 64), (dict(partial_rotary_factor=0.25), 32),
                                            (dict(rope_parameters=dict(rope_theta=1e6, partial_rotary_factor=0.5)), 64),
                                            ({}, 128)])
def test_minimax_m2_shared_tables_are_rotary_dim_wide(written, width):
    """MiniMaxM2RotaryEmbedding's cos / sin are head_dim · partial_rotary_factor wide (MiniMaxM2Config derives the
    factor from the released checkpoints' legacy rotary_dim): 2 · s · rotary_dim · e bytes, kept once."""
    from calculator.model.hf_config import spec_from_hf_config
    m = spec_from_hf_config(dict(model_type="minimax_m2", hidden_size=256, intermediate_size=64,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=128, num_hidden_layers=2,
                                 vocab_size=101, num_local_experts=4, num_experts_per_tok=2, **written)).spec
    w = Workload(seq_len=16, micro_batch=2)
    assert act.rotary_saved(m, act.dims(m, w)) == 2 * 16 * width * 2


@pytest.mark.parametrize("extra", [dict(rotary_dim=8), {}])
def test_minimax_m2_traced_tables(extra):
    """The tiny model's layer 0 keeps the shared tables beside what layer 1 keeps (head_dim 16; rotary_dim 8: half)."""
    transformers = pytest.importorskip("transformers")
    import torch
    from validation.architectures import measure as M
    from validation.architectures.blocks import layers_of
    from validation.architectures.sources import source
    from validation.trace.saved_by_module import KeepStorages, saved_bytes_by_module
    from calculator.model.hf_config import spec_from_hf_config
    M.quiet()
    torch.set_num_threads(1)
    kw = {k: v for k, v in source("minimax_m2").written.items()
          if k not in ("rope_parameters", "model_type", "architectures", "transformers_version")}
    config = transformers.AutoConfig.for_model("minimax_m2", **kw, **extra)
    spec = spec_from_hf_config(config.to_dict()).spec
    model = M.tiny_bf16(config, "sdpa")
    ids = torch.randint(3, 100, (M.B, M.S), generator=torch.Generator().manual_seed(0))
    layers = layers_of(spec.model_type, lambda n: M.decoder_layers(model, n), spec.num_hidden_layers)
    with KeepStorages():
        by = saved_bytes_by_module(model, ids)
    first, second = (sum(v for k, v in by.items() if layers.owns(i, k)) for i in (0, 1))
    w = Workload(seq_len=M.S, micro_batch=M.B, attention="sdpa", mixer_kernels="torch")
    assert first - second == act.rotary_saved(spec, act.dims(spec, w))


@pytest.mark.parametrize("model_type, factor", [("gpt_neox", 0.25), ("phi", 0.5), ("stablelm", 0.25),
                                                ("qwen3_next", 0.25), ("qwen3_5_text", 0.25)])
def test_partial_rotary_tables_are_rotary_dim_wide(model_type, factor):
    """ModelSpec.rotary_dim = head_dim · partial_rotary_factor (rope_parameters, else the top-level field or
    GPT-NeoX's rotary_pct, else the configuration's default): the shared tables are 2 · s · rotary_dim · e."""
    from validation.architectures import measure as M
    from validation.architectures.sources import source
    from calculator.model.config_read import partial_rotary_dim
    spec, _ = M.spec_of(source(model_type))
    assert spec.rotary_dim == int(spec.head_size * factor)
    w = Workload(seq_len=16, micro_batch=2)
    assert act.rotary_saved(spec, act.dims(spec, w)) == 2 * 16 * spec.rotary_dim * 2
    assert partial_rotary_dim(dict(rotary_pct=0.5), 64, 0.25) == 32
    assert partial_rotary_dim(dict(partial_rotary_factor=1.0, rope_parameters={}), 64, 0.25) == 64
    assert partial_rotary_dim({}, 64, 0.25) == 16


@pytest.mark.parametrize("model_type", ["gpt_neox", "phi", "stablelm", "qwen3_next"])
def test_the_first_attention_layer_also_keeps_the_shared_tables(model_type):
    """The layer that first multiplies by cos / sin saves them: the traced layer less the engine's layer is the
    engine's rotary_saved (layer 0; Qwen3-Next: layer 3, its first attention layer, whose table row shows them)."""
    pytest.importorskip("transformers")
    from validation.architectures import measure as M
    from validation.architectures.sources import source
    M.quiet()
    src = source(model_type)
    spec, _ = M.spec_of(src)
    first = next(i for i in range(spec.num_hidden_layers) if spec.layer_kind(i).mixer == "attention")
    w = Workload(seq_len=M.S, micro_batch=M.B, attention="eager", mixer_kernels="torch")
    d = act.dims(spec, w)
    ((_, at_first),) = [(k, r) for k, r in _layer_rows(M, src, spec, first).items()]
    # Qwen3-Next's bf16 routing weights (router_top_value.to(router_logits.dtype)) are priced: model/routers.py
    assert at_first["reference"] - act.exact_layer(spec, w, d, spec.layer_kind(first)).total \
        == act.rotary_saved(spec, d)


def _layer_rows(M, src, spec, layer: int) -> dict:
    """M.activations for one chosen layer (it measures the first layer ≥ 1 of each kind)."""
    original = M.layer_per_kind
    M.layer_per_kind = lambda s: {str(s.layer_kind(layer)): layer}
    try:
        return M.activations(src, spec, "eager")
    finally:
        M.layer_per_kind = original
