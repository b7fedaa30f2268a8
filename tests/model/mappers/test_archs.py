"""Every supported model_type: the config.json transformers 5 writes (`AutoConfig.for_model(...).to_dict()`) maps,
and the engine's parameter count and tensor count equal the real model's, built from that config on the meta
device. Variants cover the switches that change tensors (MQA, Falcon's new architecture, q/k norms, biases,
parallel residuals, shared experts)."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.hf_config import FAMILY_MAPPERS, SUPPORTED_MODEL_TYPES, spec_from_hf_config  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from tests.model.mappers.counts import real_counts  # noqa: E402

BASE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=96, vocab_size=100)
GPT2_LIKE = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=32)
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=32)
SIZES: dict[str, dict] = {
    "gpt2": GPT2_LIKE, "gpt_bigcode": GPT2_LIKE,
    "falcon": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=100, ffn_hidden_size=96),
    "gemma": dict(BASE, head_dim=16), "gemma2": dict(BASE, head_dim=16), "gemma3_text": dict(BASE, head_dim=16),
    "qwen3": dict(BASE, head_dim=16), "qwen3_moe": dict(BASE, head_dim=16, num_experts=4, **MOE),
    "qwen2_moe": dict(BASE, num_experts=4, shared_expert_intermediate_size=48, **MOE),
    "mixtral": dict(BASE, num_local_experts=4, num_experts_per_tok=2),
    "gpt_oss": dict(BASE, head_dim=16, num_local_experts=4, num_experts_per_tok=2),
    "olmoe": dict(BASE, num_experts=4, num_experts_per_tok=2),
    "granitemoe": dict(BASE, num_local_experts=4, num_experts_per_tok=2),
    "granitemoeshared": dict(BASE, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=48),
    "llama4_text": dict(BASE, head_dim=16, intermediate_size_mlp=128, num_local_experts=4, num_experts_per_tok=1,
                        interleave_moe_layer_step=2, moe_layers=None, no_rope_layers=None),
    "deepseek_v2": dict(BASE, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
                        qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4, n_shared_experts=1,
                        first_k_dense_replace=1, **MOE),
}
# DeepSeek-V3's router splits the experts into n_group groups (its default 8 cannot split 4 experts: the real forward
# fails); released DeepSeek-V3 keeps 4 of 8 groups, Kimi-K2 has one group. Three layers, two dense: each kind has a
# layer ≥ 1 (layer 0 also first-saves the shared RoPE tables, validation/architectures/measure.py)
V3 = dict(SIZES["deepseek_v2"], num_hidden_layers=3, first_k_dense_replace=2)
SIZES["deepseek_v3"], SIZES["kimi_k2"] = dict(V3, n_group=2, topk_group=1), dict(V3, n_group=1, topk_group=1)
SIZES.update(helium=dict(BASE, head_dim=16), ministral=dict(BASE, head_dim=16), phi3=dict(BASE, pad_token_id=None),
             smollm3=dict(BASE, pad_token_id=None), glm=dict(BASE, head_dim=16, pad_token_id=None),
             glm4=dict(BASE, head_dim=16, pad_token_id=None), vaultgemma=dict(BASE, head_dim=16),
             exaone4=dict(BASE, head_dim=16), hunyuan_v1_dense=dict(BASE, head_dim=16))
GDN = dict(BASE, head_dim=16, num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=4,
           linear_key_head_dim=8, linear_value_head_dim=12, linear_conv_kernel_dim=3)
SIZES.update(qwen3_next=dict(GDN, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                             shared_expert_intermediate_size=24),
             qwen3_5_text=GDN, qwen3_5_moe_text=dict(GDN, num_experts=4, num_experts_per_tok=2,
                                                      moe_intermediate_size=32, shared_expert_intermediate_size=24))
MULTIMODAL = {"gemma3": "gemma3_text", "llama4": "llama4_text", "qwen3_5": "qwen3_5_text",
              "qwen3_5_moe": "qwen3_5_moe_text"}
# Qwen's VLMs: their text towers have no *ForCausalLM, so the real model is the outer *ForConditionalGeneration
# (validation/architectures/causal_lm.py) with a tiny tower; a bare text config is built inside it, its head tied as it says
# (Qwen2.5-VL's multimodal RoPE sections must sum to head_dim / 2: 8 at these sizes)
SIZES.update(qwen2_5_vl_text=dict(BASE, rope_parameters=dict(rope_type="default", rope_theta=1e6,
                                                             mrope_section=[2, 3, 3])),
             qwen3_vl_text=dict(BASE, head_dim=16),
             qwen3_vl_moe_text=dict(BASE, head_dim=16, num_experts=4, **MOE))
QWEN3_TOWER = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64,
                   deepstack_visual_indexes=[0, 1])
VL = {"qwen2_5_vl": ("qwen2_5_vl_text", dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2,
                                             out_hidden_size=64, fullatt_block_indexes=[2])),
      "qwen3_vl": ("qwen3_vl_text", QWEN3_TOWER), "qwen3_vl_moe": ("qwen3_vl_moe_text", QWEN3_TOWER)}
VL_TEXT = {text: outer for outer, (text, _) in VL.items()}

VARIANTS = [
    ("gpt_bigcode", {"multi_query": False}), ("falcon", {"multi_query": False}),
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}),
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2, "num_ln_in_parallel_attn": 1}),
    ("falcon", {"parallel_attn": False, "bias": True}), ("phi", {"qk_layernorm": True}),
    ("stablelm", {"qk_layernorm": True, "use_parallel_residual": True, "use_qkv_bias": True}),
    ("cohere", {"use_qk_norm": True, "attention_bias": True}), ("starcoder2", {"use_bias": False}),
    ("seed_oss", {"attention_bias": True, "attention_out_bias": True}), ("ernie4_5", {"use_bias": True}),
    ("llama", {"attention_bias": True, "mlp_bias": True}), ("helium", {"attention_bias": True}), ("qwen3_moe", {"decoder_sparse_step": 2}),
    ("qwen2_moe", {"mlp_only_layers": [0]}), ("glm", {"attention_bias": False}), ("glm4", {"attention_bias": False}),
    ("internlm3", {"attention_bias": True, "mlp_bias": True}), ("cwm", {"mlp_bias": True}),
    ("hunyuan_v1_dense", {"attention_bias": True}),
    ("qwen3_next", {"full_attention_interval": 2, "decoder_sparse_step": 2}), ("qwen3_next", {"mlp_only_layers": [1]}),
    ("qwen3_next", {"layer_types": ["full_attention", "linear_attention", "linear_attention", "full_attention"]}),
    ("qwen3_5_text", {"attention_bias": True}), ("qwen3_5_moe_text", {"full_attention_interval": 1}),
]


# model types whose checkpoints ship remote code that transformers runs as one of its own types
REMOTE_CODE = {"kimi_k2": "deepseek_v3"}  # transformers models/kimi_k25: text_config kimi_k2 -> deepseek_v3


def _quiet():
    logging.getLogger("transformers").setLevel(logging.ERROR)


def written_config(model_type: str, **overrides) -> tuple[dict, object]:
    """(config.json as transformers 5 writes it, the config of the causal-LM model to build)."""
    _quiet()
    if model_type in VL:
        text, tower = VL[model_type]
        config = transformers.AutoConfig.for_model(model_type, text_config={**SIZES[text], **overrides},
                                                   vision_config=tower)
        return config.to_dict(), config
    if model_type in VL_TEXT:
        text = transformers.AutoConfig.for_model(model_type, **{**SIZES[model_type], **overrides})
        outer = transformers.AutoConfig.for_model(VL_TEXT[model_type], text_config=text.to_dict(),
                                                  vision_config=VL[VL_TEXT[model_type]][1],
                                                  tie_word_embeddings=text.to_dict().get("tie_word_embeddings", False))
        return text.to_dict(), outer
    sizes = SIZES.get(MULTIMODAL.get(model_type, model_type), BASE)
    if model_type in MULTIMODAL:
        config = transformers.AutoConfig.for_model(model_type, text_config={**sizes, **overrides})
        return config.to_dict(), config.text_config
    config = transformers.AutoConfig.for_model(REMOTE_CODE.get(model_type, model_type), **{**sizes, **overrides})
    return dict(config.to_dict(), model_type=model_type), config


# issue 21's families are held to the real models by their own test modules (tests/model/test_hf_<family>.py);
# Qwen's Gated DeltaNet hybrids stay here
TYPES_HERE = [t for t in SUPPORTED_MODEL_TYPES
              if t not in FAMILY_MAPPERS or t in ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                                                 "qwen3_5_moe_text")]


@pytest.mark.parametrize("model_type", TYPES_HERE)
def test_the_config_transformers_writes_maps_to_the_real_parameter_count(model_type):
    written, config = written_config(model_type)
    counts = count_parameters(spec_from_hf_config(written).spec)
    assert (counts.total, counts.tensors) == real_counts(config)


@pytest.mark.parametrize("model_type,overrides", VARIANTS, ids=lambda v: str(v))
def test_switches_that_change_tensors(model_type, overrides):
    written, config = written_config(model_type, **overrides)
    counts = count_parameters(spec_from_hf_config(written).spec)
    assert (counts.total, counts.tensors) == real_counts(config)


def test_qwen3_moe_written_by_transformers_5_says_num_local_experts():
    """Issue 13: Qwen3MoeConfig.to_dict() writes num_local_experts (transformers 4 wrote num_experts)."""
    written, _ = written_config("qwen3_moe")
    assert "num_local_experts" in written and "num_experts" not in written
    spec = spec_from_hf_config(written).spec
    assert (spec.num_experts, spec.num_experts_per_tok) == (4, 2)


def test_gpt_bigcode_is_multi_query_with_learned_positions():
    spec = spec_from_hf_config(written_config("gpt_bigcode")[0]).spec
    assert (spec.kv_heads, spec.learned_position_embeddings, spec.family) == (1, 32, "gpt2")


def test_new_architectures_say_their_activations_are_not_traced():
    mapped = spec_from_hf_config(written_config("falcon")[0])
    assert any("not traced" in w for w in mapped.warnings)
    assert spec_from_hf_config(written_config("llama")[0]).warnings == ()
