"""Model configs measured into tests/golden by validation/trace/make_mla_golden.py (not in configs.MODELS: the main matrix
and its tests do not build them), written as the public Hugging Face ``config.json`` dicts like validation/trace/configs.py.
DeepSeek-V3 and GPT-OSS-20B are reduced to 4 layers with their real widths; their parameter counts are checked
against the published full-depth totals (``STAGING_FULL_DEPTH``).
"""

from __future__ import annotations

# DeepSeek-V3's published config.json (MLA + MoE with one shared expert; the fp8 quantization_config left out),
# reduced to 4 layers: first_k_dense_replace 2 (2 dense + 2 MoE layers).  Widths are the real ones.
DEEPSEEK_V3_4L = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "first_k_dense_replace": 2,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 4,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}

# GPT-OSS-20B's published config.json (attention sinks, sliding 128 / full alternating, 32 experts with biases,
# top-4), reduced to 4 layers (layer_types alternating sliding, full).
GPT_OSS_20B_4L = {
    "architectures": ["GptOssForCausalLM"],
    "attention_bias": True,
    "attention_dropout": 0.0,
    "eos_token_id": 200002,
    "experts_per_token": 4,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2880,
    "initial_context_length": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "max_position_embeddings": 131072,
    "model_type": "gpt_oss",
    "num_attention_heads": 64,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 4,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "output_router_logits": False,
    "pad_token_id": 199999,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "rope_type": "yarn",
        "truncate": False,
    },
    "rope_theta": 150000,
    "router_aux_loss_coef": 0.9,
    "sliding_window": 128,
    "swiglu_limit": 7.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 201088,
}

# Gemma-3-1B (text only) published config.json: q/k RMSNorm, 5 sliding (512) : 1 global, tied embeddings.
GEMMA_3_1B = {
    "architectures": ["Gemma3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": None,
    "bos_token_id": 2,
    "cache_implementation": "hybrid",
    "eos_token_id": [1, 106],
    "final_logit_softcapping": None,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152,
    "initializer_range": 0.02,
    "intermediate_size": 6912,
    "max_position_embeddings": 32768,
    "model_type": "gemma3_text",
    "num_attention_heads": 4,
    "num_hidden_layers": 26,
    "num_key_value_heads": 1,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 262144,
}

STAGING_MODELS = {
    "deepseek-v3-4l": DEEPSEEK_V3_4L,
    "gpt-oss-20b-4l": GPT_OSS_20B_4L,
    "gemma-3-1b": GEMMA_3_1B,
}

# Gemma-3-1B: the published count.  The 4-layer reductions have no published count: theirs is the published
# full-depth count minus the removed layers, each layer counted from the published widths
# (make_mla_golden checks the full-depth configs against the published totals too).
STAGING_EXPECTED_PARAMETERS = {
    "gemma-3-1b": 999_885_952,
    "deepseek-v3-4l": 26_034_904_064,  # of 671_026_404_352 at 61 layers (published: 671B without the MTP module)
    "gpt-oss-20b-4l": 4_451_017_664,  # of 20_914_757_184 at 24 layers (published)
}
# The full-depth counts the reductions are checked against: (layers, first_k_dense_replace or None, count).
STAGING_FULL_DEPTH = {
    "deepseek-v3-4l": (61, 3, 671_026_404_352),
    "gpt-oss-20b-4l": (24, None, 20_914_757_184),
}
