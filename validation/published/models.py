"""Models of the published rows that are not presets: public Hugging Face config.json values (fields that only
matter for tokenisation or the Hub left out). Parameter counts are checked against transformers built on the meta
device (EXPECTED_PARAMETERS; tests/validation/test_published.py).
"""
from __future__ import annotations

from functools import lru_cache

from calculator.model.hf_config import spec_from_hf_config
from calculator.model.spec import ModelSpec

LLAMA_2_7B = {
    "_name_or_path": "meta-llama/Llama-2-7b-hf", "model_type": "llama", "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
    "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float16",
}
LLAMA_2_13B = dict(LLAMA_2_7B, _name_or_path="meta-llama/Llama-2-13b-hf", hidden_size=5120, intermediate_size=13824,
                   num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=40)
LLAMA_2_70B = dict(LLAMA_2_7B, _name_or_path="meta-llama/Llama-2-70b-hf", hidden_size=8192, intermediate_size=28672,
                   num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8)
CODELLAMA_34B = dict(LLAMA_2_7B, _name_or_path="codellama/CodeLlama-34b-hf", hidden_size=8192,
                     intermediate_size=22016, num_hidden_layers=48, num_attention_heads=64, num_key_value_heads=8,
                     max_position_embeddings=16384, rope_theta=1000000, torch_dtype="bfloat16")
STABLELM_ALPHA_3B = {
    "_name_or_path": "stabilityai/stablelm-base-alpha-3b", "model_type": "gpt_neox",
    "architectures": ["GPTNeoXForCausalLM"], "hidden_size": 4096, "intermediate_size": 16384,
    "num_hidden_layers": 16, "num_attention_heads": 32, "vocab_size": 50688, "rotary_pct": 0.25,
    "max_position_embeddings": 4096, "use_parallel_residual": True, "tie_word_embeddings": False,
    "layer_norm_eps": 1e-05, "hidden_act": "gelu", "torch_dtype": "float16",
}
# phi-1.5 and Falcon-40B are written as ModelSpec fields directly (litgpt's layouts: fused qkv for phi, an untied
# lm_head for Falcon), with model_type set so the parameter counts follow transformers (phi's lm_head bias).
PHI_1_5_CONFIG = {  # microsoft/phi-1_5 config.json (for reference; mapped by phi_1_5_spec)
    "model_type": "phi", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
    "num_attention_heads": 32, "vocab_size": 51200, "partial_rotary_factor": 0.5, "hidden_act": "gelu_new",
    "tie_word_embeddings": False, "max_position_embeddings": 2048,
}
FALCON_40B_CONFIG = {  # tiiuae/falcon-40b config.json (for reference; mapped by falcon_40b_spec)
    "model_type": "falcon", "hidden_size": 8192, "num_hidden_layers": 60, "num_attention_heads": 128,
    "num_kv_heads": 8, "new_decoder_architecture": True, "parallel_attn": True, "bias": False, "alibi": False,
    "vocab_size": 65024,
}

EXPECTED_PARAMETERS = {  # sum(p.numel()) of the transformers model built from the config above on the meta device
    "Llama-2-7B": 6_738_415_616,
    "Llama-2-13B": 13_015_864_320,
    "Llama-2-70B": 68_976_648_192,
    "CodeLlama-34B": 33_743_970_304,
    "StableLM-Alpha-3B": 3_637_321_728,
    "phi-1.5": 1_418_270_720,
    "Falcon-40B (litgpt, untied lm_head)": 41_835_970_560,
    "bert-large-uncased + 2-class head": 335_143_938,
    "t5-large": 737_668_096,
    "t5-3b": 2_851_598_336,
}


def phi_1_5_spec() -> ModelSpec:
    """phi-1.5 in GPT-NeoX terms: fused qkv with bias, dense with bias, plain GELU MLP with biases, parallel
    attention/MLP sharing ONE LayerNorm, untied head with a bias (calculator.model.parameters.LM_HEAD_BIAS_TYPES)."""
    c = PHI_1_5_CONFIG
    return ModelSpec(name="phi-1.5", model_type="phi", family="gpt_neox", hidden_size=c["hidden_size"],
                     num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
                     intermediate_size=c["intermediate_size"], vocab_size=c["vocab_size"], tie_word_embeddings=False,
                     gated_mlp=False, hidden_act="gelu_pytorch_tanh", norm_type="layernorm", norms_per_layer=1,
                     qkv_bias=True, o_bias=True, mlp_bias=True, fused_qkv=True, parallel_residual=True)


def falcon_40b_spec() -> ModelSpec:
    """Falcon-40B (new decoder architecture): fused qkv for 128 query / 8 KV heads, no biases, two LayerNorms
    (ln_attn, ln_mlp), parallel attention/MLP, plain GELU MLP of 4h. litgpt keeps a separate lm_head."""
    c = FALCON_40B_CONFIG
    return ModelSpec(name="Falcon-40B", model_type="falcon", family="gpt_neox", hidden_size=c["hidden_size"],
                     num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
                     num_key_value_heads=c["num_kv_heads"], intermediate_size=4 * c["hidden_size"],
                     vocab_size=c["vocab_size"], tie_word_embeddings=False, gated_mlp=False, hidden_act="gelu",
                     norm_type="layernorm", norms_per_layer=2, fused_qkv=True, parallel_residual=True)


@lru_cache(maxsize=None)
def hf_spec(key: str) -> ModelSpec:
    cfg = {"Llama-2-7B": LLAMA_2_7B, "Llama-2-13B": LLAMA_2_13B, "Llama-2-70B": LLAMA_2_70B,
           "CodeLlama-34B": CODELLAMA_34B, "StableLM-Alpha-3B": STABLELM_ALPHA_3B}[key]
    return spec_from_hf_config(dict(cfg), name=key).spec


def model_spec(key: str) -> ModelSpec:
    if key == "phi-1.5":
        return phi_1_5_spec()
    if key.startswith("Falcon-40B"):
        return falcon_40b_spec()
    return hf_spec(key)
