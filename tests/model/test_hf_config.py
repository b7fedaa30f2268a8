"""Mapping a Hugging Face config.json to ModelSpec: the details each model family needs, and the errors."""
from __future__ import annotations

import pytest

from calculator.model.hf_config import ConfigError, Quantization, spec_from_hf_config
from calculator.model.parameters import count_parameters
from calculator.model.presets import load_model

LLAMA_LIKE = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000}


def raw(preset_id: str) -> dict:
    return dict(load_model(preset_id).raw)


def test_qwen3_head_dim_differs_from_hidden_over_heads():
    spec = load_model("qwen3-32b").spec
    assert (spec.hidden_size, spec.num_attention_heads, spec.head_dim) == (5120, 64, 128)
    assert spec.hidden_size // spec.num_attention_heads == 80
    assert spec.q_dim == 8192 != spec.hidden_size
    assert spec.kv_dim == 8 * 128
    assert spec.qk_norm and not spec.qkv_bias


def test_qwen3_without_head_dim_uses_the_transformers_default_of_128():
    cfg = {k: v for k, v in raw("qwen3-8b").items() if k != "head_dim"}
    assert spec_from_hf_config(cfg).spec.head_dim == 128


def test_qwen2_has_qkv_bias_and_no_sliding_window_unless_enabled():
    spec = load_model("qwen2.5-7b").spec
    assert spec.qkv_bias and not spec.o_bias
    assert spec.sliding_window is None  # sliding_window 131072 is in the file but use_sliding_window is false
    assert load_model("qwen2.5-0.5b").spec.tie_word_embeddings


def test_mistral_slides_every_layer():
    spec = load_model("mistral-7b-v0.1").spec
    assert spec.sliding_window == 4096
    assert all(spec.layer_is_sliding(i) for i in range(spec.num_hidden_layers))
    assert load_model("mistral-nemo-12b").spec.sliding_window is None
    assert load_model("mistral-nemo-12b").spec.head_dim == 128  # 5120 / 32 would be 160


def test_gemma2_alternates_sliding_and_global_layers():
    spec = load_model("gemma-2-9b").spec
    assert spec.sliding_window == 4096
    assert spec.layer_types[:4] == ("sliding_attention", "full_attention", "sliding_attention", "full_attention")
    assert [spec.layer_is_sliding(i) for i in range(spec.num_hidden_layers)] == [i % 2 == 0 for i in range(42)]
    assert (spec.norms_per_layer, spec.attn_logit_softcapping, spec.final_logit_softcapping) == (4, 50.0, 30.0)
    assert spec.family == "gemma" and spec.tie_word_embeddings and spec.head_dim == 256


def test_gemma3_multimodal_config_uses_text_config_with_a_warning_and_transformers_defaults():
    mapped = load_model("gemma-3-4b")
    assert len(mapped.warnings) == 1 and "text_config" in mapped.warnings[0] and "vision" in mapped.warnings[0]
    spec = mapped.spec
    assert spec.model_type == "gemma3_text"
    # The Hub's text_config omits these; Gemma3TextConfig's defaults fill them.
    assert (spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim, spec.vocab_size) == (8, 4, 256, 262208)
    assert spec.tie_word_embeddings and spec.qk_norm and spec.sliding_window == 1024
    assert spec.layer_types[:6] == ("sliding_attention",) * 5 + ("full_attention",)
    assert sum(t == "full_attention" for t in spec.layer_types) == 34 // 6
    assert spec.attn_logit_softcapping is None and spec.final_logit_softcapping is None


def test_gemma3_text_only_config_maps_without_a_warning():
    mapped = load_model("gemma-3-1b")
    assert mapped.warnings == ()
    assert (mapped.spec.sliding_window, mapped.spec.num_key_value_heads, mapped.spec.vocab_size) == (512, 1, 262144)


def test_gemma3_explicit_null_sliding_window_is_kept():
    cfg = {**raw("gemma-3-1b"), "sliding_window": None}
    spec = spec_from_hf_config(cfg).spec
    assert spec.sliding_window is None and not any(spec.layer_is_sliding(i) for i in range(spec.num_hidden_layers))


def test_deepseek_first_k_dense_replace_and_mla():
    spec = load_model("deepseek-v3").spec
    assert spec.first_k_dense_layers == 3
    assert [spec.layer_is_moe(i) for i in range(5)] == [False, False, False, True, True]
    assert spec.moe_layer_count == 58
    assert (spec.num_experts, spec.num_experts_per_tok, spec.num_shared_experts) == (256, 8, 1)
    assert spec.is_mla and (spec.q_lora_rank, spec.kv_lora_rank) == (1536, 512)
    assert (spec.head_size, spec.v_head_size) == (192, 128)
    lite = load_model("deepseek-v2-lite").spec
    assert lite.q_lora_rank is None and lite.first_k_dense_layers == 1 and lite.num_shared_experts == 2


KIMI_K2 = dict(load_model("deepseek-v3").raw, model_type="kimi_k2",
               n_routed_experts=384, num_attention_heads=64, num_key_value_heads=64, first_k_dense_replace=1,
               vocab_size=163840, n_group=1, topk_group=1)  # Kimi K2's shape (moonshotai/Kimi-K2-Instruct)


def test_kimi_k2_is_deepseek_v3_under_its_own_model_type_and_inside_kimi_k25():
    """Kimi K2 ships DeepseekV3ForCausalLM with "model_type": "kimi_k2" (transformers' Kimi_K25Config maps its
    text_config to deepseek_v3): the same ModelSpec as the config read as deepseek_v3, bare or wrapped."""
    k2 = spec_from_hf_config(KIMI_K2).spec
    as_v3 = spec_from_hf_config(dict(KIMI_K2, model_type="deepseek_v3")).spec
    assert k2.model_copy(update={"model_type": "deepseek_v3"}) == as_v3
    assert (k2.num_experts, k2.first_k_dense_layers, k2.moe_layer_count) == (384, 1, 60)
    wrapped = spec_from_hf_config({"model_type": "kimi_k25", "text_config": KIMI_K2,
                                   "vision_config": {"hidden_size": 1152}})
    assert count_parameters(wrapped.spec).total == count_parameters(k2).total


def test_gpt_oss_layer_types_sinks_and_mxfp4_quantization():
    mapped = load_model("gpt-oss-20b")
    spec = mapped.spec
    assert spec.layer_types == ("sliding_attention", "full_attention") * 12
    assert spec.sliding_window == 128
    assert spec.attention_sinks and spec.router_bias and spec.expert_bias and spec.qkv_bias and spec.o_bias
    assert (spec.num_experts, spec.num_experts_per_tok, spec.head_dim) == (32, 4, 64)
    assert mapped.quantization == Quantization(method="mxfp4", bits=4, group_size=32)


def test_fp8_block_quantization_is_8_bits():
    assert load_model("deepseek-v3").quantization == Quantization("fp8", 8, None)


def test_mixtral_and_qwen_moe_experts():
    mixtral = load_model("mixtral-8x7b").spec
    assert (mixtral.num_experts, mixtral.num_experts_per_tok, mixtral.expert_intermediate_size) == (8, 2, 14336)
    qwen2_moe = load_model("qwen2-57b-a14b").spec
    assert qwen2_moe.shared_expert_gate and qwen2_moe.shared_expert_intermediate_size == 20480
    assert qwen2_moe.moe_layer_count == 28
    qwen3_moe = load_model("qwen3-30b-a3b").spec
    assert (qwen3_moe.num_experts, qwen3_moe.moe_intermediate_size, qwen3_moe.head_dim) == (128, 768, 128)
    assert not qwen3_moe.shared_expert_gate and qwen3_moe.num_shared_experts == 0


def test_qwen_moe_decoder_sparse_step_and_mlp_only_layers():
    cfg = {**raw("qwen3-30b-a3b"), "num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [5]}
    spec = spec_from_hf_config(cfg).spec
    assert [spec.layer_is_moe(i) for i in range(6)] == [False, True, False, True, False, False]


def test_llama4_moe_shared_expert_and_chunked_attention():
    mapped = load_model("llama-4-scout")
    spec = mapped.spec
    assert spec.model_type == "llama4_text"
    assert (spec.num_experts, spec.num_experts_per_tok, spec.num_shared_experts) == (16, 1, 1)
    assert (spec.moe_intermediate_size, spec.intermediate_size) == (8192, 16384)
    assert spec.moe_layer_count == 48
    assert spec.sliding_window == 8192
    assert spec.layer_types[:4] == ("sliding_attention",) * 3 + ("full_attention",)
    assert any("chunked" in w for w in mapped.warnings)


def test_llama4_interleaved_moe_layers_default_from_the_step():
    text = {k: v for k, v in raw("llama-4-scout")["text_config"].items() if k != "moe_layers"}
    cfg = {**text, "num_hidden_layers": 4, "no_rope_layers": [1, 1, 1, 0], "interleave_moe_layer_step": 2}
    spec = spec_from_hf_config(cfg).spec
    assert [spec.layer_is_moe(i) for i in range(4)] == [False, True, False, True]


def test_phi3_fuses_qkv_and_gate_up():
    spec = load_model("phi-3-mini-4k").spec
    assert spec.fused_qkv and spec.fused_gate_up and spec.family == "phi3"
    assert spec.sliding_window == 2047
    assert load_model("phi-4").spec.sliding_window is None


def test_gpt2_and_gpt_neox_fields():
    gpt2 = load_model("gpt2").spec
    assert (gpt2.hidden_size, gpt2.num_hidden_layers, gpt2.intermediate_size) == (768, 12, 3072)
    assert gpt2.learned_position_embeddings == 1024 and gpt2.dropout == 0.1 and not gpt2.gated_mlp
    assert gpt2.norm_type == "layernorm" and gpt2.tie_word_embeddings
    neox = load_model("pythia-1.4b").spec
    assert neox.parallel_residual and neox.fused_qkv and not neox.tie_word_embeddings


def test_olmo2_has_qk_norm():
    spec = load_model("olmo-2-7b").spec
    assert spec.qk_norm and spec.model_type == "olmo2"
    # OLMo-2 normalises the whole q and k projections (4096 + 4096 weights), not one 128-wide head each.
    layer = count_parameters(spec).layers[0]
    assert layer.attention == 4 * 4096 * 4096 + 2 * 4096


def test_unknown_model_type_is_refused_not_read_as_llama():
    """An architecture the engine has not been checked against is refused (its blocks could hold other tensors);
    the message lists the supported types and the Llama fields the config lacks for `"model_type": "llama"`."""
    with pytest.raises(ConfigError) as err:
        spec_from_hf_config({**LLAMA_LIKE, "model_type": "brand_new_arch", "head_dim": 64})
    msg = str(err.value)
    assert msg.startswith("model_type: 'brand_new_arch' is not a supported architecture")
    assert "qwen3_moe" in msg and "gpt_bigcode" in msg and "has the fields" in msg
    with pytest.raises(ConfigError, match="it lacks intermediate_size, vocab_size"):
        spec_from_hf_config({k: v for k, v in LLAMA_LIKE.items() if k not in ("intermediate_size", "vocab_size")}
                            | {"model_type": "other"})


@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                   "vocab_size"])
def test_missing_field_is_a_config_error_naming_it(field):
    with pytest.raises(ConfigError, match=field):
        spec_from_hf_config({k: v for k, v in LLAMA_LIKE.items() if k != field})


def test_missing_model_type_is_a_config_error():
    with pytest.raises(ConfigError, match="model_type"):
        spec_from_hf_config({k: v for k, v in LLAMA_LIKE.items() if k != "model_type"})


@pytest.mark.parametrize("value", [None, [1, 2], "config", 3])
def test_non_dict_is_a_config_error(value):
    with pytest.raises(ConfigError, match="JSON object"):
        spec_from_hf_config(value)


def test_heads_not_dividing_hidden_is_a_config_error():
    with pytest.raises(ConfigError, match="divisible"):
        spec_from_hf_config({**LLAMA_LIKE, "num_attention_heads": 3, "num_key_value_heads": 1})
    # an explicit head_dim makes it valid (Qwen3, Gemma, Mistral-Nemo do this)
    assert spec_from_hf_config({**LLAMA_LIKE, "num_attention_heads": 3, "num_key_value_heads": 1,
                                "head_dim": 64}).spec.q_dim == 192


def test_kv_heads_not_dividing_heads_is_a_config_error():
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        spec_from_hf_config({**LLAMA_LIKE, "num_key_value_heads": 3})


def test_layer_types_of_the_wrong_length_is_a_config_error():
    with pytest.raises(ConfigError, match="layer_types"):
        spec_from_hf_config({**LLAMA_LIKE, "sliding_window": 128, "layer_types": ["sliding_attention"] * 3})


def test_wrong_type_is_a_config_error():
    with pytest.raises(ConfigError):
        spec_from_hf_config({**LLAMA_LIKE, "hidden_size": "big"})


def test_checkpoint_dtype_reads_torch_dtype_or_dtype():
    assert spec_from_hf_config({**LLAMA_LIKE, "torch_dtype": "bfloat16"}).checkpoint_dtype == "bf16"
    assert spec_from_hf_config({**LLAMA_LIKE, "dtype": "float16"}).checkpoint_dtype == "fp16"
    assert spec_from_hf_config({**LLAMA_LIKE, "torch_dtype": "weird"}).checkpoint_dtype is None
