"""DeepSeek-V2's router (transformers 5.23 models/deepseek_v2/modeling_deepseek_v2.py DeepseekV2TopkRouter): an fp32
softmax over all experts of x.float() @ weight.float(), top-k, and `topk_weights * routed_scaling_factor`; it never
divides by the top-k sum (DeepseekV2TopkRouter.__init__ deletes norm_topk_prob, which the configuration still
carries), so it keeps neither the top-k values nor their row sum that a renormalising router (DeepSeek-V3's) keeps:
4·T·k + 4·T fewer bytes than the engine's DeepSeek MoE term (calculator.model.mappers.archs.DEEPSEEK_V2_VARIANT)."""
from __future__ import annotations

import pytest

from calculator import Workload
from calculator.memory import activations as act
from calculator.model.hf_config import spec_from_hf_config

CFG = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=2,
           vocab_size=101, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
           n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1, moe_intermediate_size=32,
           num_experts_per_tok=2)


@pytest.mark.parametrize("norm_topk_prob", [False, True, None])
def test_deepseek_v2_moe_keeps_no_renormalisation(norm_topk_prob):
    """T = 32, k = 2: DeepSeek-V3's mapping of the same config less 4·T·k + 4·T, whatever norm_topk_prob says (V3
    itself renormalises only with norm_topk_prob, default true: with false the two keep the same)."""
    extra = {} if norm_topk_prob is None else dict(norm_topk_prob=norm_topk_prob)
    v2 = spec_from_hf_config(dict(CFG, model_type="deepseek_v2", **extra)).spec
    v3 = spec_from_hf_config(dict(CFG, model_type="deepseek_v3", n_group=1, topk_group=1, **extra)).spec
    assert not v2.variant.router_renorm
    w = Workload(seq_len=16, micro_batch=2)
    T, k = 32, 2
    renorm = 0 if norm_topk_prob is False else 4 * T * k + 4 * T
    assert act.moe_saved(act.dims(v3, w), v3, 1) - act.moe_saved(act.dims(v2, w), v2, 1) == renorm
    kind = v2.layer_kind(1)
    assert act.exact_layer(v3, w, act.dims(v3, w), kind).total - act.exact_layer(v2, w, act.dims(v2, w), kind).total \
        == renorm


def test_the_traced_moe_layer_matches():
    pytest.importorskip("transformers")
    from validation.architectures import measure as M
    from validation.architectures.sources import source
    M.quiet()
    src = source("deepseek_v2")
    spec, _ = M.spec_of(src)
    for attention in ("eager", "sdpa"):
        result = M.activations(src, spec, attention)["mla+moe"]
        assert result["engine"] == result["reference"], (attention, result)
