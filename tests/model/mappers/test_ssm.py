"""State-space models and hybrids (calculator/model/mappers/ssm.py): the config.json transformers 5.23 writes for each
model_type, and variants of the switches that change tensors, map to the real model's parameter count and tensor
count (built on the meta device); Zamba2's shared blocks are refused with what is missing."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.config_read import ConfigError, parse_config_json  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.mappers.ssm import SSM_MAPPERS  # noqa: E402
from calculator.model.spec import LayerKind  # noqa: E402
from tests.model.mappers.counts import engine_counts, real_counts  # noqa: E402

ATTN = dict(num_attention_heads=4, num_key_value_heads=2)
MAMBA2 = dict(mamba_n_heads=8, mamba_n_groups=2, mamba_d_state=16, mamba_chunk_size=16)
SIZES = {
    "mamba2": dict(hidden_size=64, num_heads=8, head_dim=16, state_size=16, n_groups=2, num_hidden_layers=2,
                   vocab_size=100, chunk_size=16),
    "mamba": dict(hidden_size=64, state_size=8, num_hidden_layers=2, vocab_size=100),
    "falcon_mamba": dict(hidden_size=64, state_size=8, num_hidden_layers=2, vocab_size=100),
    "nemotron_h": dict(**ATTN, hidden_size=64, head_dim=16, intermediate_size=96, mamba_num_heads=8, mamba_head_dim=16,
                       layers_block_type=["linear_attention", "mlp", "full_attention", "moe", "linear_attention"],
                       ssm_state_size=16, n_groups=2, n_routed_experts=4, num_experts_per_tok=2,
                       moe_intermediate_size=32, moe_shared_expert_intermediate_size=48, vocab_size=100,
                       chunk_size=16),
    "granitemoehybrid": dict(**ATTN, **MAMBA2, hidden_size=64, num_hidden_layers=4, intermediate_size=48,
                             layer_types=["mamba", "attention", "mamba", "mamba"], shared_intermediate_size=32,
                             num_local_experts=4, num_experts_per_tok=2, vocab_size=100),
    "bamba": dict(**ATTN, **MAMBA2, hidden_size=64, num_hidden_layers=3, attn_layer_indices=[1], intermediate_size=96,
                  vocab_size=100),
    "falcon_h1": dict(**ATTN, **MAMBA2, hidden_size=64, num_hidden_layers=2, intermediate_size=96, mamba_d_ssm=None,
                      vocab_size=100),
    "jamba": dict(**ATTN, hidden_size=64, num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=1,
                  expert_layer_period=2, expert_layer_offset=1, num_experts=4, intermediate_size=96, mamba_d_state=8,
                  vocab_size=100),
}
VARIANTS = [
    ("mamba2", dict(hidden_size=96, expand=1, num_heads=6, n_groups=3, state_size=8, use_bias=True,
                    use_conv_bias=False, conv_kernel=3, tie_word_embeddings=True)),
    ("mamba", dict(hidden_size=96, state_size=4, expand=3, time_step_rank=5, conv_kernel=3, use_bias=True,
                   use_conv_bias=False, tie_word_embeddings=False)),
    ("falcon_mamba", dict(time_step_rank=7, use_bias=True, tie_word_embeddings=False)),
    ("nemotron_h", dict(layers_block_type=None, hybrid_override_pattern="M-*EM", mlp_bias=True, use_bias=True,
                        use_conv_bias=False, conv_kernel=3, tie_word_embeddings=True, n_groups=1)),
    ("nemotron_h", dict(layers_block_type=["mamba", "attention", "mlp"])),
    ("nemotron_h", dict(moe_latent_size=24)),  # Nemotron-3 Super's latent MoE
    ("nemotron_h", dict(moe_latent_size=24, mlp_bias=True)),
    ("granitemoehybrid", dict(num_local_experts=0, attention_bias=True, mamba_proj_bias=True, mamba_conv_bias=False,
                              position_embedding_type="rope")),
    ("granitemoehybrid", dict(layer_types=None, mamba_expand=1, mamba_n_heads=4, tie_word_embeddings=True)),
    ("bamba", dict(attn_layer_indices=None, mamba_proj_bias=True, attention_bias=True, mlp_bias=True,
                   mamba_d_conv=3)),
    ("falcon_h1", dict(mamba_rms_norm=True, projectors_bias=True, mamba_proj_bias=True, attention_bias=True,
                       head_dim=24, mamba_d_ssm=96, mamba_n_heads=12, mamba_d_head="auto")),
    ("falcon_h1", dict(mamba_rms_norm=True, mamba_conv_bias=False, mlp_bias=True)),
    ("jamba", dict(num_experts=1, mamba_dt_rank=5, mamba_proj_bias=True, mamba_conv_bias=False)),
    ("jamba", dict(attn_layer_period=4, attn_layer_offset=0, expert_layer_period=1, expert_layer_offset=0,
                   tie_word_embeddings=True)),
]


def written_config(model_type: str, **overrides) -> tuple[dict, object]:
    """(config.json as transformers writes it, the config to build the real model from)."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    config = transformers.AutoConfig.for_model(model_type, **{**SIZES[model_type], **overrides})
    return config.to_dict(), config


def test_every_mapper_is_tested_here():
    assert set(SSM_MAPPERS) == set(SIZES) | {"zamba2"}


@pytest.mark.parametrize("model_type", sorted(SIZES))
def test_the_config_transformers_writes_maps_to_the_real_counts(model_type):
    written, config = written_config(model_type)
    assert engine_counts(written) == real_counts(config)


@pytest.mark.parametrize("model_type,overrides", VARIANTS, ids=lambda v: str(v)[:60])
def test_switches_that_change_tensors(model_type, overrides):
    written, config = written_config(model_type, **overrides)
    assert engine_counts(written) == real_counts(config)


def test_the_json_text_transformers_saves_maps_too():
    """save_pretrained writes time_step_limit's infinity as a tagged string; the mapper never reads it."""
    _, config = written_config("nemotron_h")
    spec = spec_from_hf_config(parse_config_json(config.to_json_string())).spec
    assert spec.num_hidden_layers == 5 and spec.mamba.d_inner == 128


def test_nemotron_h_blocks_are_one_mixer_or_one_feed_forward():
    spec = spec_from_hf_config(written_config("nemotron_h")[0]).spec
    assert [spec.layer_kind(i) for i in range(5)] == [
        LayerKind("mamba", "none"), LayerKind("none", "dense"), LayerKind("attention", "none"),
        LayerKind("none", "moe"), LayerKind("mamba", "none")]
    assert (spec.gated_mlp, spec.hidden_act, spec.num_experts, spec.shared_expert_intermediate_size) == \
        (False, "relu2", 4, 48)


def test_nemotron_h_never_ties_its_head_and_says_so():
    mapped = spec_from_hf_config(written_config("nemotron_h", tie_word_embeddings=True)[0])
    assert not mapped.spec.tie_word_embeddings and any("never ties" in w for w in mapped.warnings)


def test_nemotron_h_latent_moe_runs_its_experts_at_the_latent_width():
    """NemotronHMoE: fc1_latent_proj (h → latent) before the experts, fc2_latent_proj after; the experts' up and
    down projections read and write moe_latent_size (Nemotron-3 Super / Ultra)."""
    spec = spec_from_hf_config(written_config("nemotron_h", moe_latent_size=24)[0]).spec
    assert (spec.moe_latent_size, spec.expert_hidden_size, spec.hidden_size) == (24, 24, 64)
    plain = spec_from_hf_config(written_config("nemotron_h")[0]).spec
    assert plain.moe_latent_size is None and plain.expert_hidden_size == 64


def test_jamba_layer_pattern_by_period_and_offset():
    spec = spec_from_hf_config(written_config("jamba")[0]).spec
    assert spec.layer_types == ("mamba", "full_attention", "mamba", "full_attention")
    assert spec.ffn_types == ("dense", "moe", "dense", "moe") and spec.mamba.dt_bc_norm == "weighted"


def test_falcon_h1_layers_run_mamba_beside_attention():
    spec = spec_from_hf_config(written_config("falcon_h1")[0]).spec
    assert set(spec.layer_types) == {"parallel_mamba_attention"} and not spec.mamba.gated_norm


def test_zamba2_is_refused_with_what_the_engine_lacks():
    logging.getLogger("transformers").setLevel(logging.ERROR)
    written = transformers.AutoConfig.for_model("zamba2").to_dict()
    with pytest.raises(ConfigError, match="shared"):
        spec_from_hf_config(written)


def test_inconsistent_mamba_widths_are_refused_naming_the_field():
    written, _ = written_config("bamba")
    with pytest.raises(ConfigError, match="mamba_d_head"):
        spec_from_hf_config({**written, "mamba_d_head": 7})
