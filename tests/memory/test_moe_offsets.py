"""transformers' grouped_mm experts (integrations/moe.py grouped_mm_experts_forward, transformers 5.23, the default
experts_implementation) build `offsets = torch.cumsum(tokens_per_expert, dim=0, dtype=torch.int32)` over the experts
the module holds, self.num_experts (E/ep under expert parallelism: distributed/expert_parallel.py), and both grouped
matmuls keep it for backward: 4·E/ep bytes per MoE layer, whatever the tokens (was a constant 32 B, right at E = 8)."""
from __future__ import annotations

import pytest

from calculator import Workload
from calculator.core.workload import Parallelism
from calculator.memory import activations as act
from calculator.model import variants
from calculator.model.hf_config import spec_from_hf_config
from calculator.model.variants import VariantSpec

MIXTRAL = dict(model_type="mixtral", hidden_size=64, intermediate_size=96, num_attention_heads=4,
               num_key_value_heads=2, num_hidden_layers=2, vocab_size=101, num_experts_per_tok=2)
GPT_OSS = dict(model_type="gpt_oss", hidden_size=64, intermediate_size=32, num_attention_heads=4,
               num_key_value_heads=2, num_hidden_layers=2, vocab_size=101, head_dim=16, num_experts_per_tok=2)


def _workload(ep: int) -> Workload:
    return Workload(seq_len=16, micro_batch=2, parallel=Parallelism(dp=ep, ep=ep))


def _dims(m, ep: int = 1):
    return act.dims(m, _workload(ep))


@pytest.mark.parametrize("experts", [4, 8, 16, 64])
def test_mixtral_moe_by_hand(experts):
    """T = 32, k = 2 (S = 64), h = 64, f = 96, bf16: gathered input and output 2·e·S·h, SwiGLU 4·e·S·f, fp32
    weights and int64 indices 28·S, fp32 softmax 4·T·E, top-k values and indices 12·T·k, their sum 4·T, offsets 4·E."""
    m = spec_from_hf_config(dict(MIXTRAL, num_local_experts=experts)).spec
    T, S, h, f, k = 32, 64, 64, 96, 2
    assert act.moe_saved(_dims(m), m, 1) == (4 * S * h + 8 * S * f + 28 * S + 4 * T * experts + 12 * T * k + 4 * T
                                             + 4 * experts)


@pytest.mark.parametrize("cfg", [MIXTRAL, GPT_OSS], ids=["default", "gpt_oss"])
def test_expert_parallelism_keeps_the_offsets_of_the_local_experts(cfg):
    """Only the offsets term depends on ep (S = T·k pairs per rank, as the engine prices them): 4·E − 4·E/ep."""
    m = spec_from_hf_config(dict(cfg, num_local_experts=16)).spec
    d1, d4 = _dims(m, 1), _dims(m, 4)
    assert d1 == d4
    assert act.moe_saved(d1, m, 1, 1) - act.moe_saved(d4, m, 1, 4) == 4 * 16 - 4 * 4
    assert act.exact_layer(m, _workload(1), d1, m.layer_kind(0)).mlp - act.exact_layer(m, _workload(4), d4, m.layer_kind(0)).mlp \
        == 4 * 16 - 4 * 4


@pytest.mark.parametrize("v", [VariantSpec(), VariantSpec(router="topk_softmax"), VariantSpec(router="sparsemixer")])
def test_a_variants_experts_keep_the_offsets_of_the_local_experts(v):
    """calculator.model.variants.moe_saved: the same 4·E/ep term beside each router's bookkeeping."""
    T, k, E, f, h, e = 32, 2, 16, 32, 64, 2
    assert variants.moe_saved(v, T, k, E, f, h, e) - variants.moe_saved(v, T, k, E, f, h, e, ep=4) == 4 * 16 - 4 * 4


@pytest.mark.parametrize("model_type", ["mixtral", "minimax", "deepseek_v3", "kimi_k2"])
def test_the_traced_moe_layer_matches(model_type):
    """E = 4 in the tiny configs: 16 B of offsets; these rows are exact (validation/architectures)."""
    pytest.importorskip("transformers")
    from validation.architectures import measure as M
    from validation.architectures.sources import source
    M.quiet()
    src = source(model_type)
    spec, _ = M.spec_of(src)
    for kind, result in M.activations(src, spec, "eager").items():
        if "moe" in kind:
            assert result["engine"] == result["reference"], (kind, result)
