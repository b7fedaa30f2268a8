"""The short-convolution, KDA and lightning-attention hybrids (calculator/model/mappers/linear.py) held to transformers
5.23: every mapper's parameter and tensor counts against the real model built on the meta device, from the config
transformers writes (lfm2_moe: with the layer_types its configuration cannot derive), from the configuration classes'
full-size defaults, from varied configs and from configs shaped like the Hub checkpoints'. LFM3's and Ling's per-head
attention output gates (g_proj) are counted exactly, and the gated attention layers' saved activations are held to
what the real layers save (validation/architectures/measure.py). Inkling is refused.
"""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator import Workload  # noqa: E402
from calculator.memory import activations as act  # noqa: E402
from calculator.model.config_read import ConfigError  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from calculator.model.spec import LayerKind  # noqa: E402
from tests.model.mappers.counts import real_counts  # noqa: E402
from validation.architectures import measure  # noqa: E402
from validation.architectures.sources import source  # noqa: E402

torch.set_num_threads(1)

TOKENS = dict(vocab_size=100, pad_token_id=0, bos_token_id=1, eos_token_id=2)
LFM = dict(TOKENS, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
           num_key_value_heads=2)
MLA = dict(TOKENS, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=5,
           num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16,
           v_head_dim=12, num_experts=4, num_experts_per_tok=2)
SIZES = {
    "lfm2": dict(LFM, layer_types=["conv", "full_attention", "conv", "conv"]),
    "lfm2_moe": dict(LFM, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, num_dense_layers=1,
                     layer_types=["conv", "conv", "full_attention", "conv"]),
    "lfm3": dict(LFM, num_hidden_layers=6, head_dim=16, sliding_window=8),
    "kimi_linear": dict(MLA, linear_num_heads=3, linear_head_dim=16, linear_conv_kernel_dim=3),
    "minimax": dict(LFM, num_local_experts=4, block_size=16),
    "bailing_hybrid": dict(MLA, head_dim=16, short_conv_kernel_size=3, layer_group_size=3, first_k_dense_replace=1,
                           n_group=2, topk_group=1),
}
VARIANTS = [
    ("lfm2", dict(conv_bias=True, conv_L_cache=4)), ("lfm2", dict(layer_types=None, full_attn_idxs=[1, 3])),
    ("lfm2", dict(block_ffn_dim_multiplier=1.5, block_multiple_of=64)),
    ("lfm2", dict(block_ffn_dim_multiplier=2)), ("lfm2", dict(block_auto_adjust_ff_dim=False)),
    ("lfm2", dict(tie_word_embeddings=False)),
    ("lfm2_moe", dict(num_dense_layers=0, conv_bias=True)), ("lfm2_moe", dict(num_dense_layers=9)),
    ("lfm3", dict(use_attention_gate=False, use_sandwich_norm=False, attention_bias=True)),
    ("lfm3", dict(use_attention_gate=False, layer_types=["conv", "sliding_attention", "full_attention", "conv",
                                                         "full_attention", "sliding_attention"])),
    ("kimi_linear", dict(q_lora_rank=20, attention_bias=True)),
    ("kimi_linear", dict(mlp_layer_types=["sparse", "dense", "sparse", "dense", "sparse"], n_shared_experts=2)),
    ("kimi_linear", dict(layer_types=["full_attention"] + ["linear_attention"] * 4, tie_word_embeddings=True)),
    ("minimax", dict(head_dim=24, num_key_value_heads=1, tie_word_embeddings=True)),
    ("minimax", dict(layer_types=["linear_attention"] * 3 + ["full_attention"], num_experts_per_tok=1)),
    ("bailing_hybrid", dict(kda_safe_gate=False, attention_bias=True, n_shared_experts=2)),
    ("bailing_hybrid", dict(mlp_layer_types=["sparse", "dense", "sparse", "sparse", "dense"])),
]


def _quiet():
    logging.getLogger("transformers").setLevel(logging.ERROR)


def written(model_type: str, **kwargs):
    """(config.json as transformers 5 writes it, the config)."""
    _quiet()
    config = transformers.AutoConfig.for_model(model_type, **kwargs)
    return config.to_dict(), config


def assert_counts(written_cfg: dict, config) -> None:
    mapped = spec_from_hf_config(written_cfg)
    counts = count_parameters(mapped.spec)
    assert (counts.total, counts.tensors) == real_counts(config)
    assert not any("g_proj" in w for w in mapped.warnings)


@pytest.mark.parametrize("model_type", list(SIZES))
def test_the_config_transformers_writes_maps_to_the_real_counts(model_type):
    assert_counts(*written(model_type, **SIZES[model_type]))


@pytest.mark.parametrize("model_type,overrides", VARIANTS, ids=lambda v: str(v))
def test_switches_that_change_tensors(model_type, overrides):
    assert_counts(*written(model_type, **{**SIZES[model_type], **overrides}))


@pytest.mark.parametrize("model_type", ["lfm2", "lfm3", "kimi_linear", "minimax", "bailing_hybrid"])
def test_the_full_size_defaults(model_type):
    """The configuration classes' own defaults (LFM2: every layer attention; Kimi Linear 48B-A3B's sizes)."""
    assert_counts(*written(model_type))


def test_lfm2_moe_default_sizes_with_layer_types():
    types = ["conv", "conv", "full_attention", "conv"] * 8
    assert_counts(*written("lfm2_moe", layer_types=types))


def test_lfm2_checkpoint_fields():
    """LFM2 checkpoints write block_ff_dim, tie_embedding and full_attn_idxs (Lfm2Config pops the first two)."""
    raw = dict(LFM, model_type="lfm2", block_ff_dim=300, tie_embedding=False, full_attn_idxs=[0, 2],
               block_multiple_of=32, conv_L_cache=3)
    raw.pop("intermediate_size")
    config = transformers.AutoConfig.for_model("lfm2", **{k: v for k, v in raw.items() if k != "model_type"})
    assert_counts(raw, config)
    spec = spec_from_hf_config(raw).spec
    assert (spec.layer_types, spec.intermediate_size, spec.tie_word_embeddings) == (
        ("full_attention", "conv", "full_attention", "conv"), 224, False)


def test_kimi_linear_checkpoint_linear_attn_config():
    """Kimi-Linear's checkpoint keeps its KDA sizes and 1-based layer lists in linear_attn_config, and writes
    num_experts / num_experts_per_token / model_max_length."""
    lac = dict(num_heads=2, head_dim=24, short_conv_kernel_size=4, kda_layers=[1, 2, 4, 5], full_attn_layers=[3])
    raw = dict(MLA, model_type="kimi_linear", linear_attn_config=lac, num_experts_per_token=2, first_k_dense_replace=2,
               model_max_length=4096, head_dim=72)
    raw.pop("num_experts_per_tok")
    config = transformers.AutoConfig.for_model("kimi_linear", **{k: v for k, v in raw.items() if k != "model_type"})
    assert_counts(raw, config)
    spec = spec_from_hf_config(raw).spec
    assert spec.layer_types == ("kda", "kda", "full_attention", "kda", "kda")
    assert spec.ffn_types == ("dense", "dense", "moe", "moe", "moe")
    assert (spec.kda.num_heads, spec.kda.head_dim, spec.kda.conv_kernel) == (2, 24, 4)
    assert (spec.max_position_embeddings, spec.tie_word_embeddings, spec.is_mla) == (4096, False, True)


def test_bailing_checkpoint_head_dim_is_the_kda_head_dim():
    """Ling's checkpoint gives head_dim = the KDA head size; BailingHybridConfig writes it as linear_head_dim and
    overwrites head_dim with qk_rope_head_dim, and the written config maps the same."""
    raw = dict(SIZES["bailing_hybrid"], model_type="bailing_hybrid", head_dim=20, num_nextn_predict_layers=1)
    config = transformers.AutoConfig.for_model("bailing_hybrid", **{k: v for k, v in raw.items() if k != "model_type"})
    assert_counts(raw, config)
    first, again = spec_from_hf_config(raw).spec, spec_from_hf_config(config.to_dict()).spec
    assert (first.kda, first.layer_types, first.ffn_types) == (again.kda, again.layer_types, again.ffn_types)
    assert (first.kda.head_dim, first.kda.fp32_conv, first.kda.low_rank_gates, first.mtp_layers) == (20, True, False, 1)


def test_layer_kinds():
    spec = spec_from_hf_config(written("minimax", **SIZES["minimax"])[0]).spec
    assert spec.layer_types == ("full_attention", "lightning_attention") * 2
    assert [spec.layer_kind(i) for i in range(2)] == [LayerKind("attention", "moe"), LayerKind("lightning", "moe")]
    lfm3 = spec_from_hf_config(written("lfm3", **SIZES["lfm3"])[0]).spec
    assert lfm3.layer_types == ("conv", "conv", "full_attention", "conv", "sliding_attention", "conv")
    assert (lfm3.sliding_window, lfm3.norms_per_layer, lfm3.short_conv.conv_kernel) == (8, 4, 7)
    kimi = spec_from_hf_config(written("kimi_linear", **SIZES["kimi_linear"])[0]).spec
    assert [kimi.layer_kind(i) for i in (0, 1, 4)] == [LayerKind("kda", "dense"), LayerKind("kda", "moe"),
                                                          LayerKind("mla", "moe")]


def test_minimax_warns_about_its_window_and_buffers():
    mapped = spec_from_hf_config(written("minimax", **SIZES["minimax"], sliding_window=8)[0])
    assert mapped.spec.sliding_window is None
    assert any("sliding_window" in w for w in mapped.warnings)
    assert any(f"2 × {4 * (1 + 32 + 256):,} elements" in w for w in mapped.warnings)


@pytest.mark.parametrize("cfg,field", [
    (dict(model_type="lfm2_moe", **LFM), "layer_types"),
    (dict(model_type="inkling_text", **LFM), "relative-position"),
    (dict(model_type="inkling2_text", **LFM), "block attention residuals"),
    (dict(model_type="kimi_linear", linear_attn_config=[1, 2]), "linear_attn_config"),
    (dict(model_type="kimi_linear", num_hidden_layers=3, linear_attn_config=dict(kda_layers=[1], full_attn_layers=[3])),
     "layer 2"),
    (dict(model_type="kimi_linear", linear_attn_config=dict(head_dim="big")), "linear_attn_config.head_dim"),
    (dict(model_type="lfm3", layer_types=["mamba"] * 24), r"layer_types\[0\]"),
    (dict(model_type="bailing_hybrid", num_hidden_layers=2, mlp_layer_types=["dense"]), "mlp_layer_types"),
    (dict(model_type="lfm2", **LFM, block_ffn_dim_multiplier=True), "block_ffn_dim_multiplier"),
])
def test_refusals_name_the_field(cfg, field):
    with pytest.raises(ConfigError, match=field):
        spec_from_hf_config(cfg)


def test_the_head_gates_are_an_option_of_the_attention():
    """LFM3: sigmoid(g_proj(x)) in the model dtype, its fp32 RoPE tables; Ling: sigmoid(g_proj(x).float()) on MLA,
    DeepSeek-V3's fp32 router; use_attention_gate=false builds no g_proj."""
    lfm3 = spec_from_hf_config(written("lfm3", **SIZES["lfm3"])[0]).spec
    assert (lfm3.variant.attention_gate, lfm3.variant.attention_tensors, lfm3.variant.fp32_rope_tables) == (
        "sigmoid_head", ((4, 64),), True)
    ungated = spec_from_hf_config(written("lfm3", **SIZES["lfm3"], use_attention_gate=False)[0]).spec
    assert (ungated.variant.attention_gate, ungated.variant.attention_tensors) == ("none", ())
    ling = spec_from_hf_config(written("bailing_hybrid", **SIZES["bailing_hybrid"])[0]).spec.variant
    assert (ling.attention_gate, ling.attention_tensors) == ("sigmoid_head_fp32", ((4, 64),))
    assert (ling.router, ling.router_renorm, ling.router_fp32_input, ling.router_fp32_weight_copy) == (
        "softmax", True, True, True)


@pytest.mark.parametrize("model_type,attention", [("lfm3", "eager"), ("lfm3", "sdpa"), ("bailing_hybrid", "eager")])
def test_each_layer_kind_saves_what_the_real_layer_saves(model_type, attention):
    """One layer of each kind traced on the CPU (validation/architectures/measure.py, a tiny bf16 model): the engine's
    layer is exact, but for the shared RoPE cos and sin tables, which the first attention layer saves first and the
    engine counts once outside the layers (rotary_saved: fp32 ones for LFM3). Ling under SDPA is not compared: the
    CPU flash kernel needs one head size for q, k and v, and MLA's v_head_dim differs, so the CPU runs the fp32 math
    fallback, which no GPU kernel does."""
    measure.quiet()
    src = source(model_type)
    spec = measure.spec_of(src)[0]
    rows = measure.activations(src, spec, attention)
    d = act.dims(spec, Workload(seq_len=measure.S, micro_batch=measure.B, attention=attention))
    first_attention = min(i for i in range(spec.num_hidden_layers) if spec.layer_kind(i).mixer in ("attention", "mla"))
    for kind, row in rows.items():
        tables = act.rotary_saved(spec, d) if row["layer"] == first_attention else 0
        assert (kind, row["reference"] - row["engine"]) == (kind, tables)
