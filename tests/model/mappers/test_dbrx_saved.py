"""DBRX's decoder layer (models/dbrx/modeling_dbrx.py, transformers 5.23): what one layer saves for backward equals
what a tiny bf16 DBRX saves on the CPU (validation/architectures/measure.py's trace, less LayerNorm's CPU-only bf16
statistics), eager and SDPA, across the switches that change it: clip_qkv's clamp, the experts run one by one, the
model-dtype softmax router with and without its p-norm renormalisation, moe_jitter_eps' noise."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model import variants  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from validation.architectures import measure as M  # noqa: E402
from validation.architectures.sources import Source  # noqa: E402

BASE = dict(d_model=64, n_heads=4, n_layers=2, vocab_size=101)
CASES = {
    "gqa, jitter": (dict(kv_n_heads=2, clip_qkv=8), dict(moe_num_experts=4, moe_top_k=2, ffn_hidden_size=40,
                                                         moe_jitter_eps=0.01)),
    "mqa, top-1, no renorm": (dict(kv_n_heads=1, clip_qkv=8), dict(moe_num_experts=3, moe_top_k=1, ffn_hidden_size=24,
                                                                   moe_normalize_expert_weights=None)),
    "mha, 2-norm, jitter": (dict(kv_n_heads=4, clip_qkv=0.5), dict(moe_num_experts=6, moe_top_k=3, ffn_hidden_size=24,
                                                                   moe_normalize_expert_weights=2.0,
                                                                   moe_jitter_eps=0.1)),
}


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_dbrx_layer_saves_what_the_real_layer_saves(case, attention):
    attn, ffn = CASES[case]
    M.quiet()
    config = transformers.AutoConfig.for_model("dbrx", **BASE, attn_config=dict(attn, rope_theta=1e4),
                                               ffn_config=ffn)
    src = Source("dbrx", config.to_dict(), config, case)
    spec, warnings = M.spec_of(src)
    assert not warnings
    (result,) = M.activations(src, spec, attention).values()
    assert result["engine"] == result["reference"], result


def test_the_expert_loop_and_router_terms_by_hand():
    """T = 32 tokens, k = 2 of E = 4 experts, f = 40, h = 64, bf16: per routed pair (S = 64) the gathered input, down
    output and weighted copy (3·2·64), four f-wide tensors (4·2·40), the routing weight (2) and torch.where's two
    int64 columns (16); the bf16 softmax 2·32·4, top-k indices 8·32·2, top-k values 2·32·2 and their norm 2·32; the
    jitter noise 2·32·64."""
    v = variants.VariantSpec(router="model_softmax", expert_loop=True)
    pairs = 64 * (2 * (3 * 64 + 4 * 40 + 1) + 16)
    router = 2 * 32 * 4 + 8 * 32 * 2 + 2 * 32 * 2 + 2 * 32
    assert variants.moe_saved(v, 32, 2, 4, 40, 64, 2) == pairs + router
    jitter = v.model_copy(update=dict(router_jitter=True, router_renorm=False))
    assert variants.moe_saved(jitter, 32, 2, 4, 40, 64, 2) == pairs + router - 2 * 32 * 2 - 2 * 32 + 2 * 32 * 64


def test_clip_qkv_keeps_the_fused_output():
    """Wqkv(x).clamp(±clip_qkv) keeps its input: e·T·(qd + 2·kvd) more than without clipping."""
    clipped = variants.VariantSpec(qkv_clip=True)
    assert variants.attention_extra(clipped, 32, 16, 64, 4, 2, 16, 32) == 2 * 32 * (64 + 2 * 32)
    written = transformers.AutoConfig.for_model("dbrx", **BASE, attn_config=dict(kv_n_heads=2, rope_theta=1e4,
                                                                                  clip_qkv=8)).to_dict()
    v = spec_from_hf_config(written).spec.variant
    assert (v.qkv_clip, v.expert_loop, v.router, v.router_renorm, v.router_jitter) == (
        True, True, "model_softmax", True, False)
