"""OLMo-Hybrid (models/olmo_hybrid/modeling_olmo_hybrid.py, transformers 5.23; calculator/model/mappers/hybrid.py
map_olmo_hybrid): OLMo-3's post-norm attention layers beside pre-norm Gated DeltaNet layers with separate q/k/v/a/b/g
projections (LinearAttentionSpec.projections "q_k_v_a_b_g"). The engine's parameter and tensor counts equal the real
model's on the meta device (the config transformers writes, its switches, the full-size defaults); each layer kind's
saved activations equal what a tiny bf16 model saves on the CPU (validation/architectures/measure.py), with the
released checkpoints' NoPE (rope_theta null) and with RoPE (its fp32 tables, counted once outside the layers); the
cache after a prefill holds the attention layers' K/V and each Gated DeltaNet's conv and fp32 recurrent state.
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
from calculator.model.spec import LayerKind  # noqa: E402
from tests.model.mappers.counts import engine_counts, real_counts  # noqa: E402
from validation.architectures import measure  # noqa: E402
from validation.architectures.sources import Source  # noqa: E402

torch.set_num_threads(1)

TOKENS = dict(vocab_size=100, pad_token_id=0, bos_token_id=1, eos_token_id=2)
NOPE = dict(rope_parameters=dict(rope_type="default", rope_theta=None))  # the released checkpoints' rope_theta null
# the config the validation table measures (validation/architectures/sources.py reads SIZES)
SIZES: dict[str, dict] = {
    "olmo_hybrid": dict(TOKENS, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=2, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                        linear_value_head_dim=8, **NOPE),
}
ROPE = dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0))
# the switches that add or remove tensors, or change a shape
VARIANTS = [dict(attention_bias=True), dict(tie_word_embeddings=True), dict(linear_conv_kernel_dim=2),
            dict(num_hidden_layers=2),
            dict(num_hidden_layers=6, layer_types=["full_attention", "linear_attention"] * 3),
            dict(linear_num_key_heads=None, linear_num_value_heads=None, linear_key_head_dim=None,
                 linear_value_head_dim=None), dict(head_dim=8), ROPE]


def written_config(model_type: str = "olmo_hybrid", **overrides) -> tuple[dict, object]:
    """(config.json as transformers 5 writes it, the config of the causal-LM model to build)."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    kwargs = {k: v for k, v in {**SIZES[model_type], **overrides}.items() if v is not None}
    config = transformers.AutoConfig.for_model(model_type, **kwargs)
    return config.to_dict(), config


@pytest.mark.parametrize("overrides", [{}] + VARIANTS, ids=str)
def test_the_engine_counts_the_real_parameters_and_tensors(overrides):
    written, config = written_config(**overrides)
    assert engine_counts(written) == real_counts(config)


def test_the_full_size_defaults():
    """OlmoHybridConfig's own defaults (Olmo-Hybrid-7B's sizes: 32 layers, 24 Gated DeltaNet, 8 attention)."""
    config = transformers.AutoConfig.for_model("olmo_hybrid")
    assert engine_counts(config.to_dict()) == real_counts(config) == (7_430_870_688, 475)


def test_layer_kinds_and_the_deltanet_shapes():
    m = spec_from_hf_config(written_config()[0]).spec
    assert m.layer_types == ("linear_attention",) * 3 + ("full_attention",)
    assert [m.layer_kind(i) for i in (0, 3)] == [LayerKind("gated_deltanet", "dense"), LayerKind("attention", "dense")]
    la = m.linear_attention
    assert (la.num_key_heads, la.num_value_heads, la.key_head_dim, la.value_head_dim, la.conv_kernel) == (
        2, 4, 16, 8, 4)
    assert (la.projections, m.qk_norm, m.variant.qk_norm_layout, m.variant.norm) == (
        "q_k_v_a_b_g", True, "full_width", "fp32_weight")
    # the defaults OlmoHybridConfig derives: key heads = value heads = num_attention_heads, key_head_dim =
    # int(0.75·hidden / key heads), value_head_dim twice that; a full-attention layer every 4th (the last at least)
    d = spec_from_hf_config(written_config(num_hidden_layers=3, linear_num_key_heads=None, linear_num_value_heads=None,
                                           linear_key_head_dim=None, linear_value_head_dim=None)[0]).spec
    assert (d.linear_attention.num_value_heads, d.linear_attention.key_head_dim, d.linear_attention.value_head_dim,
            d.layer_types) == (4, 12, 24, ("linear_attention", "linear_attention", "full_attention"))


@pytest.mark.parametrize("rope_fields", [dict(rope_theta=None), dict(rope_parameters=None),
                                         dict(rope_parameters=dict(rope_type="default", rope_theta=None)),
                                         dict(rope_theta=5e5), {}], ids=str)
def test_rope_is_built_as_the_real_model_builds_it(rope_fields):
    """Released checkpoints write rope_theta null (no rotary embedding: NoPE) or rope_parameters null (transformers
    fills rope_theta 10000: RoPE); the engine's VariantSpec.rope follows what OlmoHybridModel builds."""
    raw = {k: v for k, v in SIZES["olmo_hybrid"].items() if k != "rope_parameters"}
    raw.update(rope_fields, model_type="olmo_hybrid")
    config = transformers.AutoConfig.for_model("olmo_hybrid", **{k: v for k, v in raw.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    spec = spec_from_hf_config(raw).spec
    assert spec.variant.rope == (model.model.rotary_emb is not None)
    d = act.dims(spec, Workload(seq_len=16, micro_batch=2))
    assert act.rotary_saved(spec, d) == (2 * 16 * 16 * 4 if spec.variant.rope else 0)  # fp32 cos and sin


def test_the_doubled_beta_is_saved_apart_only_by_the_fused_kernel():
    """linear_allow_neg_eigval (every checkpoint): beta = 2·sigmoid(b). flash-linear-attention's
    ChunkGatedDeltaRuleFunction saves the beta it is given, here a tensor apart from the sigmoid's saved output
    (e·T·nv more); the PyTorch path keeps only its fp32 copy (the traced layers are exact either way)."""
    on, off = (spec_from_hf_config(written_config(linear_allow_neg_eigval=x)[0]).spec for x in (True, False))
    assert (on.linear_attention.allow_neg_eigval, off.linear_attention.allow_neg_eigval) == (True, False)
    kind = LayerKind("gated_deltanet", "dense")
    for kernels, extra in (("fused", 2 * 2 * 512 * 4), ("torch", 0)):
        w = Workload(seq_len=512, micro_batch=2, mixer_kernels=kernels)
        on_b, off_b = (act.exact_layer(m, w, act.dims(m, w), kind).total for m in (on, off))
        assert on_b - off_b == extra


def _source(**overrides) -> Source:
    written, config = written_config(**overrides)
    return Source("olmo_hybrid", written, config, "tests/model/mappers/test_olmo_hybrid.py")


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("rope", [False, True], ids=["nope", "rope"])
def test_each_layer_kind_saves_what_the_real_layer_saves(attention, rope):
    """One layer of each kind traced on the CPU (a tiny bf16 model, transformers' PyTorch Gated DeltaNet path): the
    engine's layer is exact, but for the shared fp32 RoPE cos and sin, which the first attention layer saves first
    and the engine counts once outside the layers (rotary_saved; none under NoPE)."""
    measure.quiet()
    src = _source(**(ROPE if rope else {}))
    spec = measure.spec_of(src)[0]
    rows = measure.activations(src, spec, attention)
    assert set(rows) == {"gated_deltanet+dense", "attention+dense"}
    d = act.dims(spec, Workload(seq_len=measure.S, micro_batch=measure.B, attention=attention))
    for kind, row in rows.items():
        tables = act.rotary_saved(spec, d) if kind == "attention+dense" else 0
        assert (kind, row["reference"] - row["engine"]) == (kind, tables)
    assert (act.rotary_saved(spec, d) > 0) == rope


def test_the_cache_after_a_prefill():
    """K/V of the attention layer and, per Gated DeltaNet layer, the conv state (all K columns of q, k, v in bf16) and
    the fp32 recurrent state."""
    measure.quiet()
    src = _source()
    row = measure.cache(src, measure.spec_of(src)[0])
    assert row["exact"], row


@pytest.mark.parametrize("overrides,field", [
    (dict(layer_types=["linear_attention"] * 4), "layer_types"),
    (dict(layer_types=["full_attention"] * 3), "layer_types"),
    (dict(linear_conv_kernel_dim=0), "linear_conv_kernel_dim"),
])
def test_refusals_name_the_field(overrides, field):
    raw = dict(SIZES["olmo_hybrid"], model_type="olmo_hybrid", **overrides)
    with pytest.raises(ConfigError, match=field):
        spec_from_hf_config(raw)
