"""Mappings for the decoder architectures added after the traced ones (issue 13): GPT-BigCode, Falcon, StarCoder2,
Phi, StableLM, Cohere / Cohere2, OLMoE, Granite-MoE (and its shared-expert variant), OLMo-3, Helium, Ministral,
Seed-OSS, ERNIE-4.5, Arcee and Nemotron.

Each mapper reads the fields its transformers 5 configuration class declares, with that class's defaults, and
describes the tensors its modeling file builds (cited per mapper; the parameter counts equal the real model's on
the meta device, tests/model/mappers/test_archs.py). Where a block differs from the traced families in ways that only
change parameters (norms without bias, an LM head with a bias, q/k norm layouts) `calculator.model.parameters` keys the
difference on `model_type`. Their saved activations follow the nearest traced block layout; none of these was
traced, so every mapping says so in a warning.
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.config_read import (ConfigError, common_fields, get_bool, get_float, get_int, get_str, get_window,
                                    layer_types, llama_like_fields, sliding_fields)
from calculator.model.config_read import partial_rotary_dim
from calculator.model.variants import VariantSpec


def _untraced(model_type: str, layout: str) -> list[str]:
    return [f"{model_type}: parameters follow transformers' model exactly; saved activations are estimated with "
            f"the {layout} block layout (this architecture was not traced)"]


def _map_gpt_bigcode(cfg: dict) -> dict:
    """GPT-BigCode / StarCoder / SantaCoder (transformers models/gpt_bigcode/modeling_gpt_bigcode.py): GPT-2's block
    (learned positions, LayerNorms with bias, biased c_attn / c_proj / c_fc) with multi-query attention: c_attn
    outputs h + 2·head_dim when `multi_query` (one shared K/V head), 3·h otherwise; MLP width n_inner or 4·h. Its
    eager attention upcasts the scores to an fp32 softmax (GPTBigCodeAttention, unlike GPT-2's)."""
    h = get_int(cfg, "n_embd", "hidden_size", hi=B.MAX_HIDDEN)
    heads = get_int(cfg, "n_head", "num_attention_heads", hi=B.MAX_HEADS)
    mqa = get_bool(cfg, "multi_query", True)
    return dict(family="gpt2", hidden_size=h, num_hidden_layers=get_int(cfg, "n_layer", "num_hidden_layers",
                                                                         hi=B.MAX_LAYERS),
                num_attention_heads=heads, num_key_value_heads=1 if mqa else heads,
                intermediate_size=get_int(cfg, "n_inner", default=4 * h, hi=B.MAX_FFN),
                vocab_size=get_int(cfg, "vocab_size", hi=B.MAX_VOCAB),
                tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True), gated_mlp=False,
                hidden_act=get_str(cfg, "activation_function", default="gelu_pytorch_tanh"), norm_type="layernorm",
                qkv_bias=True, o_bias=True, mlp_bias=True, fused_qkv=True,
                learned_position_embeddings=get_int(cfg, "n_positions", "max_position_embeddings", default=1024,
                                                    hi=B.MAX_POSITIONS),
                dropout=get_float(cfg, "resid_pdrop", 0.1, 0.0, 0.999), variant=VariantSpec(eager_softmax="fp32"),
                _warnings=_untraced("gpt_bigcode", "GPT-2"))


def _map_falcon(cfg: dict) -> dict:
    """Falcon (transformers models/falcon/modeling_falcon.py): one fused query_key_value projection whose K/V heads
    are num_kv_heads with `new_decoder_architecture` (Falcon-40B/180B), one with `multi_query` (Falcon-7B), else
    all heads; dense and MLP (dense_h_to_4h / dense_4h_to_h, width ffn_hidden_size, default 4·h) biased per `bias`;
    LayerNorms with bias: two per layer (input + post-attention, or ln_attn + ln_mlp when num_ln_in_parallel_attn
    is 2, the default of the new architecture), one when attention and MLP read the same norm. FalconAttention
    splits q/k/v out of the fused output into copies (_split_heads, transpose + reshape: none of its views reaches
    the core) and its eager softmax runs in the model dtype (F.softmax(..., dtype=hidden_states.dtype))."""
    h = get_int(cfg, "hidden_size", "n_embed", hi=B.MAX_HIDDEN)
    heads = get_int(cfg, "num_attention_heads", "n_head", hi=B.MAX_HEADS)
    new_arch = get_bool(cfg, "new_decoder_architecture", False)
    if new_arch:
        kv = get_int(cfg, "num_kv_heads", default=heads, hi=B.MAX_HEADS)
    else:
        kv = 1 if get_bool(cfg, "multi_query", True) else heads
    parallel = get_bool(cfg, "parallel_attn", True)
    n_ln = get_int(cfg, "num_ln_in_parallel_attn", default=2 if new_arch else 1, hi=2)
    bias = get_bool(cfg, "bias", False)
    return dict(family="gpt_neox", hidden_size=h, num_hidden_layers=get_int(cfg, "num_hidden_layers", "n_layer",
                                                                             hi=B.MAX_LAYERS),
                num_attention_heads=heads, num_key_value_heads=kv,
                intermediate_size=get_int(cfg, "ffn_hidden_size", default=4 * h, hi=B.MAX_FFN),
                vocab_size=get_int(cfg, "vocab_size", hi=B.MAX_VOCAB),
                tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True), gated_mlp=False,
                hidden_act=get_str(cfg, "activation", default="gelu"), norm_type="layernorm",
                norms_per_layer=1 if parallel and n_ln == 1 else 2, qkv_bias=bias, o_bias=bias, mlp_bias=bias,
                fused_qkv=True, parallel_residual=parallel or new_arch, _warnings=_untraced("falcon", "GPT-NeoX"),
                variant=VariantSpec(fused_qkv_views=False, eager_softmax="model"))


def _map_starcoder2(cfg: dict) -> dict:
    """StarCoder2 (transformers models/starcoder2/modeling_starcoder2.py): separate q/k/v/o and a plain c_fc/c_proj
    MLP, all biased per `use_bias`; LayerNorms with bias; a sliding window on every layer when set."""
    f = common_fields(cfg)
    bias = get_bool(cfg, "use_bias", True)
    f.update(tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True), gated_mlp=False,
             hidden_act=get_str(cfg, "hidden_act", default="gelu_pytorch_tanh"), norm_type="layernorm",
             qkv_bias=bias, o_bias=bias, mlp_bias=bias, _warnings=_untraced("starcoder2", "Llama (LayerNorm)"))
    sliding_fields(cfg, f)
    return f


def _map_phi(cfg: dict) -> dict:
    """Phi-1/1.5/2 (transformers models/phi/modeling_phi.py): biased q/k/v/dense and fc1/fc2, one LayerNorm per
    layer read by attention and MLP in parallel, optional per-head LayerNorms on q and k (`qk_layernorm`), a biased
    LM head. PhiAttention.forward rotates the first rotary_ndims channels and torch.cat's the rest back: q reaches
    the attention kernel contiguous in (b, heads, s, d) (rope_concat)."""
    f = common_fields(cfg)
    f.update(gated_mlp=False, hidden_act=get_str(cfg, "hidden_act", default="gelu_new"), norm_type="layernorm",
             norms_per_layer=1, parallel_residual=True, qkv_bias=True, o_bias=True, mlp_bias=True,
             qk_norm=get_bool(cfg, "qk_layernorm", False), rope_concat=True,
             rotary_dim=partial_rotary_dim(cfg, f["hidden_size"] // f["num_attention_heads"], 0.5),
             _warnings=_untraced("phi", "GPT-NeoX (parallel)"))
    return f


def _map_stablelm(cfg: dict) -> dict:
    """StableLM (transformers models/stablelm/modeling_stablelm.py): Llama's q/k/v/o (q/k/v biased per
    `use_qkv_bias`) and SwiGLU MLP, LayerNorms with bias, no post-attention norm with `use_parallel_residual`,
    optional per-head LayerNorms on q and k (`qk_layernorm`: one bias-free norm module per head). Partial rotary as
    Phi's, torch.cat of the rotated and pass-through channels (rope_concat)."""
    f = common_fields(cfg)
    parallel = get_bool(cfg, "use_parallel_residual", False)
    f.update(norm_type="layernorm", norms_per_layer=1 if parallel else 2, parallel_residual=parallel,
             qkv_bias=get_bool(cfg, "use_qkv_bias", False), hidden_act=get_str(cfg, "hidden_act", default="silu"),
             qk_norm=get_bool(cfg, "qk_layernorm", False), rope_concat=True,
             rotary_dim=partial_rotary_dim(cfg, f["hidden_size"] // f["num_attention_heads"], 0.25),
             _warnings=_untraced("stablelm", "Llama (LayerNorm)"))
    return f


def _map_cohere(cfg: dict) -> dict:
    """Command-R (transformers models/cohere/modeling_cohere.py): q/k/v/o biased per `attention_bias`, SwiGLU MLP,
    one bias-free LayerNorm per layer read by attention and MLP in parallel, optional q/k norms of shape
    (heads, head_dim) (`use_qk_norm`); tied embeddings by default. CohereLayerNorm computes in fp32 (x − mean
    twice, the normalised x, its rstd and an fp32 copy of its weight: VariantSpec.norm "fp32_layernorm")."""
    f = llama_like_fields(cfg)
    f.update(tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True), norm_type="layernorm",
             norms_per_layer=1, parallel_residual=True, mlp_bias=False, qk_norm=get_bool(cfg, "use_qk_norm", False),
             variant=VariantSpec(norm="fp32_layernorm"),
             _warnings=_untraced(get_str(cfg, "model_type"), "Llama (parallel)"))
    return f


def _map_cohere2(cfg: dict) -> dict:
    """Command-R7B / Command-A (models/cohere2): Cohere's block; layers slide unless every `sliding_window_pattern`-th
    (default 4) when layer_types is absent (Cohere2Config.__post_init__)."""
    f = _map_cohere(cfg)
    n, window = f["num_hidden_layers"], get_window(cfg)
    if cfg.get("layer_types") is None and window:
        pattern = get_int(cfg, "sliding_window_pattern", default=4, hi=B.MAX_LAYERS)
        cfg = {**cfg, "layer_types": ["sliding_attention" if (i + 1) % pattern else "full_attention"
                                      for i in range(n)]}
    sliding_fields(cfg, f)
    return f


def _moe(cfg: dict, f: dict, *expert_keys: str) -> None:
    """Every layer a mixture of experts of width intermediate_size behind a bias-free router (fused experts)."""
    experts = get_int(cfg, *expert_keys, lo=1, hi=B.MAX_EXPERTS)
    f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", hi=experts))


def _map_olmoe(cfg: dict) -> dict:
    """OLMoE (transformers models/olmoe/modeling_olmoe.py): Llama attention with q/k RMSNorms over the whole
    projection, every layer `num_experts` fused experts of width intermediate_size."""
    f = llama_like_fields(cfg)
    f.update(qk_norm=True, mlp_bias=False, _warnings=_untraced("olmoe", "Mixtral"))
    _moe(cfg, f, "num_experts", "num_local_experts")
    return f


def _map_granitemoe(cfg: dict) -> dict:
    """Granite-MoE (transformers models/granitemoe/modeling_granitemoe.py): Llama attention, every layer
    `num_local_experts` fused experts (input_linear 2f×h, output_linear h×f) behind a bias-free router;
    granitemoeshared adds an always-on gated MLP of shared_intermediate_size (input_linear fused, 2 tensors)."""
    model_type = get_str(cfg, "model_type")
    f = llama_like_fields(cfg)
    f.update(mlp_bias=False, _warnings=_untraced(model_type, "Mixtral"))
    _moe(cfg, f, "num_local_experts", "num_experts")
    if model_type == "granitemoeshared":
        shared = get_int(cfg, "shared_intermediate_size", default=0, lo=0, hi=B.MAX_FFN)
        if shared:
            f.update(shared_expert_intermediate_size=shared, fused_gate_up=True)
    return f


def _map_olmo3(cfg: dict) -> dict:
    """OLMo-3 (models/olmo3): OLMo-2's block (post-norms, q/k RMSNorms over the whole projection) with
    sliding-window layers per layer_types."""
    f = llama_like_fields(cfg)
    f.update(qk_norm=True, variant=OLMO2_VARIANT, _warnings=_untraced("olmo3", "Llama"))
    sliding_fields(cfg, f)
    return f


def _map_llama_shaped(cfg: dict) -> dict:
    """Llama's tensors (attention_bias, mlp_bias), sliding per layer_types."""
    f = llama_like_fields(cfg)
    f["_warnings"] = _untraced(get_str(cfg, "model_type"), "Llama")
    sliding_fields(cfg, f)
    return f


def _map_helium(cfg: dict) -> dict:
    """Helium (models/helium/modeling_helium.py, HeliumAttention): q/k/v biased per attention_bias; o_proj is
    hidden_size × hidden_size without bias, so the heads must span hidden_size. HeliumRMSNorm multiplies an fp32
    copy of its weight; apply_rotary_pos_emb interleaves cos and sin in every layer."""
    f = _map_llama_shaped(cfg)
    f.update(o_bias=False, variant=VariantSpec(norm="fp32_weight_copy", interleaved_rope=True))
    if f["head_dim"] and f["head_dim"] * f["num_attention_heads"] != f["hidden_size"]:
        raise ConfigError(f"head_dim: helium's o_proj needs num_attention_heads × head_dim = hidden_size "
                          f"({f['hidden_size']}), got {f['num_attention_heads']} × {f['head_dim']}")
    return f


def _map_ministral(cfg: dict) -> dict:
    """Ministral (models/ministral/modeling_ministral.py): Mistral's bias-free q/k/v/o, sliding per layer_types."""
    f = _map_llama_shaped(cfg)
    f.update(qkv_bias=False, o_bias=False)
    return f


def _map_seed_oss(cfg: dict) -> dict:
    """Seed-OSS (models/seed_oss/modeling_seed_oss.py): Llama with q/k/v biased per attention_bias and o per
    attention_out_bias. It drops out in training (SeedOssConfig defaults 0.1 both): residual_dropout after o_proj
    (SeedOssAttention.forward) and down_proj (SeedOssMLP.forward), attention_dropout on the eager probabilities
    (eager_attention_forward, after their cast to the model dtype) or inside SDPA; none on the embeddings."""
    f = _map_llama_shaped(cfg)
    f.update(o_bias=get_bool(cfg, "attention_out_bias", False), _warnings=[],
             dropout=get_float(cfg, "residual_dropout", 0.1, 0.0, 0.999),
             variant=VariantSpec(attention_dropout=get_float(cfg, "attention_dropout", 0.1, 0.0, 0.999) > 0,
                                 embedding_dropout=False))
    return f


def _map_ernie4_5(cfg: dict) -> dict:
    """ERNIE-4.5 dense (models/ernie4_5): Llama's tensors, every linear biased per `use_bias`; tied by default. Its
    apply_rotary_pos_emb rotates q and k in fp32 with interleaved fp32 cos and sin made in every layer (fp32_rope)."""
    f = common_fields(cfg)
    bias = get_bool(cfg, "use_bias", False)
    f.update(tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True), qkv_bias=bias, o_bias=bias,
             mlp_bias=bias, hidden_act=get_str(cfg, "hidden_act", default="silu"),
             variant=VariantSpec(fp32_rope=True), _warnings=_untraced("ernie4_5", "Llama"))
    return f


def _map_plain_mlp(cfg: dict) -> dict:
    """Arcee (models/arcee) and Nemotron (models/nemotron): Llama attention with a plain up/down MLP (ReLU²);
    Nemotron's LayerNorm1P norms carry a bias."""
    model_type = get_str(cfg, "model_type")
    f = llama_like_fields(cfg)
    f.update(gated_mlp=False, hidden_act=get_str(cfg, "hidden_act", default="relu2"),
             _warnings=_untraced(model_type, "Llama (plain MLP)"))
    if model_type == "nemotron":  # apply_rotary_pos_emb: head_dim · partial_rotary_factor (0.5), then torch.cat
        head_dim = f["head_dim"] or f["hidden_size"] // f["num_attention_heads"]
        f.update(norm_type="layernorm", rope_concat=True, rotary_dim=partial_rotary_dim(cfg, head_dim, 0.5))
    return f


def _map_qk_norm_llama(cfg: dict) -> dict:
    """Hunyuan-V1 dense (models/hunyuan_v1_dense: query_layernorm / key_layernorm of head_dim) and EXAONE-4
    (models/exaone4: q_norm / k_norm of head_dim, post-attention and post-feedforward norms in place of the
    pre-norms, sliding layers per layer_types): Llama's tensors plus per-head q/k RMSNorms, as Qwen3."""
    f = _map_llama_shaped(cfg)
    f["qk_norm"] = True
    return f


def _map_glm(cfg: dict) -> dict:
    """GLM / GLM-4 (models/glm/modeling_glm.py, models/glm4/modeling_glm4.py): q/k/v biased per attention_bias,
    o_proj without bias, one fused gate_up_proj (2f × h); GLM-4 adds post_self_attn_layernorm and
    post_mlp_layernorm (four RMSNorms per layer). apply_rotary_pos_emb repeat_interleaves half of cos and sin in
    every layer (each layer keeps its own copies) and rotates head_dim · partial_rotary_factor channels (default 0.5),
    concatenating the rest back (rope_concat)."""
    model_type = get_str(cfg, "model_type")
    f = common_fields(cfg)
    rotary = partial_rotary_dim(cfg, f["head_dim"] or f["hidden_size"] // f["num_attention_heads"], 0.5)
    f.update(qkv_bias=get_bool(cfg, "attention_bias", True), o_bias=False, fused_gate_up=True,
             hidden_act=get_str(cfg, "hidden_act", default="silu"), norms_per_layer=4 if model_type == "glm4" else 2,
             rope_concat=True, rotary_dim=rotary, variant=VariantSpec(interleaved_rope=True, rotary_dim=rotary))
    return f


def map_gemma(cfg: dict) -> dict:
    """Gemma (models/gemma/modeling_gemma.py): GeGLU MLP, head_dim 256 by default, tied embeddings; Gemma-2/3 and
    VaultGemma start from it."""
    f = common_fields(cfg)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(family="gemma", head_dim=get_int(cfg, "head_dim", default=256, hi=B.MAX_HEAD_DIM),
             tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
             hidden_act=get_str(cfg, "hidden_activation", "hidden_act", default="gelu_pytorch_tanh"),
             qkv_bias=bias, o_bias=bias)
    return f


def _map_vaultgemma(cfg: dict) -> dict:
    """VaultGemma (models/vaultgemma/modeling_vaultgemma.py): Gemma-2's attention and GeGLU MLP with two norms per
    layer (input_layernorm, pre_feedforward_layernorm; no post-norms), sliding layers per layer_types. Its attention
    scores and final logits are soft-capped (tanh) per attn_logit_softcapping and final_logit_softcapping
    (VaultGemmaConfig defaults 50 and 30; null: none), as Gemma-2's; VaultGemmaRMSNorm.forward's fp32 multiply by
    `1.0 + self.weight.float()` keeps that fp32 h-wide vector beside the normalised x (VariantSpec.norm)."""
    f = map_gemma(cfg)
    f.update(attn_logit_softcapping=_softcap(cfg, "attn_logit_softcapping", 50.0),
             final_logit_softcapping=_softcap(cfg, "final_logit_softcapping", 30.0),
             variant=VariantSpec(norm="fp32_weight_copy"))
    sliding_fields(cfg, f)
    return f


def _softcap(cfg: dict, key: str, default: float) -> float | None:
    """A soft-capping value: the class's default when absent, none when written as null."""
    return None if key in cfg and cfg[key] is None else get_float(cfg, key, default, 1e-6, 1e9)


# Llama-4 (transformers models/llama4/modeling_llama4.py; mapped in calculator.model.hf_config): Llama4TextL2Norm on
# q and k has no weight, so only its fp32 input and rsqrt are saved; eager_attention_forward's softmax stays in the
# model dtype; Llama4TextMoe runs every expert on every token, each scaled by a sigmoid of the top-k logits
# scattered over -inf (router "dense_sigmoid")
LLAMA4_VARIANT = VariantSpec(qk_norm_layout="none", eager_softmax="model", router="dense_sigmoid")

# DeepSeek-V2 (models/deepseek_v2/modeling_deepseek_v2.py DeepseekV2TopkRouter, mapped in calculator.model.hf_config):
# the router reads x.float() and weight.float(), keeps an fp32 softmax over all experts and the top-k indices, and
# never divides by the top-k sum (its __init__ deletes norm_topk_prob; topk_weights · routed_scaling_factor keeps
# nothing); fp32 weights to the experts
DEEPSEEK_V2_VARIANT = VariantSpec(router_renorm=False, router_fp32_input=True, router_fp32_weight_copy=True)

# OLMo-2 / OLMo-3 (models/olmo2, models/olmo3 Olmo*RMSNorm): every norm multiplies its weight in fp32 and keeps the
# fp32 normalised x; the q/k norms span the whole projection
OLMO2_VARIANT = VariantSpec(norm="fp32_weight", qk_norm_layout="full_width")

ARCH_MAPPERS = {
    "gpt_bigcode": _map_gpt_bigcode, "falcon": _map_falcon, "starcoder2": _map_starcoder2, "phi": _map_phi,
    "stablelm": _map_stablelm, "cohere": _map_cohere, "cohere2": _map_cohere2, "olmoe": _map_olmoe,
    "granitemoe": _map_granitemoe, "granitemoeshared": _map_granitemoe, "olmo3": _map_olmo3,
    "helium": _map_helium, "ministral": _map_ministral, "seed_oss": _map_seed_oss,
    "ernie4_5": _map_ernie4_5, "arcee": _map_plain_mlp, "nemotron": _map_plain_mlp,
    "internlm3": _map_llama_shaped, "iquestcoder": _map_llama_shaped, "cwm": _map_llama_shaped,
    "ministral3": _map_ministral, "smollm3": _map_llama_shaped, "hunyuan_v1_dense": _map_qk_norm_llama,
    "exaone4": _map_qk_norm_llama, "glm": _map_glm, "glm4": _map_glm, "vaultgemma": _map_vaultgemma,
}

__all__ = ["ARCH_MAPPERS", "ConfigError", "layer_types"]
