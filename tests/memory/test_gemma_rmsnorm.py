"""Gemma's RMSNorm (transformers 5.23 models/gemma/modeling_gemma.py GemmaRMSNorm.forward, and Gemma-2's and
Gemma-3's copies, q_norm / k_norm included): `output * (1.0 + self.weight.float())` multiplies in fp32 by a new fp32
vector of the norm's width, which the multiply keeps for the normalised x's gradient: 4·width per norm call beside
the fp32 input, the fp32 normalised x and the fp32 rsqrt per row. GPT-OSS's norm multiplies by the weight itself
(`self.weight * hidden_states`, models/gpt_oss/modeling_gpt_oss.py GptOssRMSNorm.forward): no copy."""
from __future__ import annotations

import pytest

from calculator import Workload
from calculator.memory import activations as act
from calculator.model.hf_config import spec_from_hf_config

T, H, HD = 32, 64, 16
GEMMA = dict(hidden_size=H, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
             vocab_size=101, head_dim=HD, max_position_embeddings=128)
GPT_OSS = dict(model_type="gpt_oss", hidden_size=H, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2,
               num_hidden_layers=2, vocab_size=101, head_dim=HD, num_local_experts=4, num_experts_per_tok=2)


@pytest.mark.parametrize("model_type", ["gemma", "gemma2", "gemma3_text"])
def test_gemma_norm_keeps_its_fp32_one_plus_weight(model_type):
    m = spec_from_hf_config(dict(model_type=model_type, **GEMMA)).spec
    assert act.norm_saved(m, T, H, 2) == 8 * T * H + 4 * T + 4 * H


def test_gemma3_qk_norms_keep_one_head_dim_vector_each():
    """q_norm and k_norm are Gemma3RMSNorm(head_dim): per head row the fp32 input and normalised x, an fp32 rsqrt,
    and one (1 + w) of head_dim per call."""
    m = spec_from_hf_config(dict(model_type="gemma3_text", **GEMMA)).spec
    d = act.dims(m, Workload(seq_len=16, micro_batch=2, attention="eager", mixer_kernels="torch"))
    qd, kvd, a, kv = 4 * HD, 2 * HD, 4, 2
    assert m.qk_norm and act.qk_norm_saved(d, m) == 8 * T * (qd + kvd) + 4 * T * (a + kv) + 2 * 4 * HD


def test_gpt_oss_norm_keeps_no_weight_copy():
    m = spec_from_hf_config(GPT_OSS).spec
    assert act.norm_saved(m, T, H, 2) == 8 * T * H + 4 * T


@pytest.mark.parametrize("model_type", ["gemma", "gemma2", "gemma3_text"])
def test_the_traced_layer_matches(model_type):
    """The tiny bf16 model's layer, traced on the CPU (validation/architectures/measure.py), eager and SDPA."""
    pytest.importorskip("transformers")
    from validation.architectures import measure as M
    from validation.architectures.sources import source
    M.quiet()
    src = source(model_type)
    spec, _ = M.spec_of(src)
    for attention in ("eager",) if model_type == "gemma2" else ("eager", "sdpa"):
        for result in M.activations(src, spec, attention).values():
            assert result["engine"] == result["reference"], (attention, result)
