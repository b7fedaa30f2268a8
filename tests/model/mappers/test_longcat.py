"""LongCat-Flash (models/longcat_flash/modeling_longcat_flash.py, transformers 5.23) as two engine layers per block
(calculator/model/mappers/longcat.py): [MLA + routed experts beside a dense MLP] and [MLA + dense MLP]. The engine's
parameter and tensor counts equal the real model's on the meta device (with each switch that adds or removes
tensors); each layer kind's saved activations equal what a tiny bf16 model saves on the CPU
(validation/architectures/measure.py), the MoE's at the share of routed pairs the traced router sent to real experts
(the engine takes balanced routing: calculator/model/zero_experts.py); the cache after a prefill holds 2 × num_layers
MLA latents."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model import zero_experts  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from validation.architectures import measure as M  # noqa: E402
from validation.architectures.sources import Source  # noqa: E402
from tests.model.mappers.counts import engine_counts, real_counts  # noqa: E402

# the config the validation table measures (validation/architectures/sources.py reads SIZES)
SIZES: dict[str, dict] = {
    "longcat_flash": dict(hidden_size=64, num_attention_heads=4, vocab_size=101, num_layers=2, q_lora_rank=32,
                          kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, head_dim=8,
                          ffn_hidden_size=96, expert_ffn_hidden_size=40, n_routed_experts=8, zero_expert_num=4,
                          moe_topk=2),
}
BASE = SIZES["longcat_flash"]
# the switches that add or remove tensors
VARIANTS = [dict(attention_bias=True), dict(router_bias=True), dict(zero_expert_num=0), dict(zero_expert_num=16),
            dict(num_layers=3, tie_word_embeddings=True), dict(moe_topk=8, n_routed_experts=8, zero_expert_num=8)]


def written_config(model_type: str = "longcat_flash", **overrides) -> tuple[dict, object]:
    """(config.json as transformers 5 writes it, the config of the causal-LM model to build)."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    config = transformers.AutoConfig.for_model(model_type, **{**SIZES[model_type], **overrides})
    return config.to_dict(), config


@pytest.mark.parametrize("overrides", [{}] + VARIANTS, ids=str)
def test_the_engine_counts_the_real_parameters_and_tensors(overrides):
    written, config = written_config(**overrides)
    assert engine_counts(written) == real_counts(config)


def test_each_block_is_two_engine_layers():
    """num_layers blocks: 2 · num_layers MLA layers, the first of each pair with the MoE beside an MLP of
    ffn_hidden_size (the engine's shared expert: gate, up, down as mlps[0]), the router over n + z experts, gate_up
    sized by n + z experts and down_proj by n (LongcatFlashExperts)."""
    written, _ = written_config(num_layers=3)
    m = spec_from_hf_config(written).spec
    assert m.num_hidden_layers == 6 and m.is_mla
    assert [tuple(m.layer_kind(i))[:2] for i in range(6)] == [("mla", "moe"), ("mla", "dense")] * 3
    p = count_parameters(m).layers
    h, n, z, f, fe = 64, 8, 4, 96, 40
    assert (p[0].router, p[0].shared_experts, p[0].mlp, p[1].mlp) == (h * (n + z), 3 * h * f, 0, 3 * h * f)
    assert p[0].routed_experts == (n + z) * 2 * fe * h + n * h * fe


def _traced(config, attention: str, monkeypatch) -> tuple[dict, list]:
    """The per-kind results of measure.activations and the top-k indices each router picked in that trace."""
    picked = []
    router = transformers.models.longcat_flash.modeling_longcat_flash.LongcatFlashTopkRouter
    forward = router.forward

    def recording(self, hidden_states):
        out = forward(self, hidden_states)
        picked.append((self, out[2].detach().clone()))
        return out
    monkeypatch.setattr(router, "forward", recording)
    M.quiet()
    src = Source("longcat_flash", config.to_dict(), config, "test_longcat")
    spec, _ = M.spec_of(src)
    return spec, M.activations(src, spec, attention), picked


@pytest.mark.parametrize("overrides", [{}, dict(zero_expert_num=0), dict(zero_expert_num=12, moe_topk=3),
                                       dict(attention_bias=True, router_bias=True)], ids=str)
def test_one_layer_of_each_kind_saves_what_the_real_block_saves(overrides, monkeypatch):
    """Eager attention (CPU SDPA runs its math path for MLA's q/k wider than v, which no GPU kernel choice mirrors):
    the MLA + dense layer exactly; the MLA + MoE layer exactly once its balanced share of real pairs is replaced by
    the share the traced router picked (block 1's router: engine layer 2)."""
    _, config = written_config(**overrides)
    spec, result, picked = _traced(config, "eager", monkeypatch)
    assert result["mla+dense"]["engine"] == result["mla+dense"]["reference"]
    moe = result["mla+moe"]
    assert moe["layer"] == 2
    n, z, k = config.n_routed_experts, config.zero_expert_num, config.moe_topk
    indices = picked[1][1]  # block 1's router (each block runs its MoE once)
    real = int((indices < n).sum())
    T, h, f, e = M.B * M.S, config.hidden_size, config.expert_ffn_hidden_size, 2
    balanced = zero_experts.moe_saved(T, k, n, z, f, h, e)
    traced = zero_experts.router_saved(T, k, n + z, h) + T * k * zero_experts.pair_saved(h, e) + \
        real * zero_experts.real_pair_saved(f, h, e)
    assert moe["engine"] - balanced + traced == moe["reference"]
    if not z:
        assert moe["engine"] == moe["reference"]


def test_the_cache_holds_two_latents_per_block():
    """2 · num_layers MLA layers, each caching the kv latent and the RoPE key (kv_lora_rank + qk_rope_head_dim)."""
    _, config = written_config()
    src = Source("longcat_flash", config.to_dict(), config, "test_longcat")
    spec, _ = M.spec_of(src)
    result = M.cache(src, spec)
    assert result["exact"], result
    assert result["real"] == 2 * 2 * M.CACHE_B * M.CACHE_S * (16 + 8) * 2


def test_balanced_routing_by_hand():
    """T = 32, k = 2 of 8 real + 4 zero experts, f = 40, h = 64, bf16: the router 4·32·64 + 4·12·64 + 4·32·12 +
    8·64; every one of the 64 pairs 2·2·64 + 20; 64·8/12 of them (42, rounded down from 42.67) 2·(4·40 + 64) more."""
    router = 4 * 32 * 64 + 4 * 12 * 64 + 4 * 32 * 12 + 8 * 64
    assert zero_experts.moe_saved(32, 2, 8, 4, 40, 64, 2) == router + 64 * 276 + 64 * 8 * 448 // 12
    assert zero_experts.real_pairs(32, 2, 8, 4) == pytest.approx(42.667, abs=1e-3)


def test_a_token_passes_through_its_balanced_share_of_real_experts():
    """Active parameters: everything but the routed experts, plus k·n / (n + z) real experts of 3·f·h per MoE layer
    (the identities hold none; gate_up_proj's z extra rows are never read). LongCat-Flash's defaults (transformers'
    LongcatFlashConfig): 741.05 B in transformers' model (180.4 B of them gate_up rows of the 256 zero experts in its
    28 MoE layers), 12·512/768 = 8 real experts per token, 27.95 B active."""
    written, _ = written_config()
    c = count_parameters(spec_from_hf_config(written).spec)
    routed = sum(layer.routed_experts for layer in c.layers)
    assert c.active_per_token == c.total - routed + 2 * (2 * 8 * 3 * 40 * 64 // 12)
    full = count_parameters(spec_from_hf_config(transformers.AutoConfig.for_model("longcat_flash").to_dict()).spec)
    assert full.total == 741_053_585_408
    assert full.total - sum(x.routed_experts for x in full.layers) + 28 * 8 * 3 * 2048 * 6144 == full.active_per_token
