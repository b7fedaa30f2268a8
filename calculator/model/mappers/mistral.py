"""Mistral's MLA MoE models: Mistral-Small-4 ("mistral4") and Mistral-Large-4's text tower ("mistral_large4_text";
the multimodal "mistral_large4" maps its text_config). Each config.json is read with its transformers 5.23
configuration class's defaults and field names, each mapper cites the modeling file it mirrors and
tests/model/mappers/test_mistral4.py holds both to the real model's parameter and tensor counts, one traced layer per
kind and the cache after a prefill.
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.architectures.dsa import IndexerSpec
from calculator.model.config_read import (ConfigError, common_fields, get_bool, get_float, get_int, get_int_list,
                                          get_str)
from calculator.model.mappers.dsa import glm_indexer_types, mlp_types
from calculator.model.variants import VariantSpec

# Mistral4Config's defaults for the fields a config.json may leave out (models/mistral4/configuration_mistral4.py)
MISTRAL4_DEFAULTS = dict(vocab_size=131072, hidden_size=4096, intermediate_size=12288, moe_intermediate_size=2048,
                         num_hidden_layers=36, num_attention_heads=32, n_shared_experts=1, n_routed_experts=128,
                         kv_lora_rank=256, q_lora_rank=1024, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=64,
                         num_experts_per_tok=4, first_k_dense_replace=0, norm_topk_prob=True)


def mistral_router(renorm: bool) -> VariantSpec:
    """Mistral4TopkRouter (models/mistral4/modeling_mistral4.py, DeepseekV2TopkRouter's layout: one weight, no
    correction bias) computes in the model dtype: F.linear(x, weight) keeps the MoE input the shared experts keep
    too, softmax keeps its model-dtype scores (T·E), the group and expert top-k selection keeps nothing that reaches
    the weights, scores.gather keeps its int64 top-k indices, the in-place renormalisation by the row sum keeps the
    top-k weights and that sum; Mistral4Experts receive model-dtype routing weights ("model_softmax", the engine's
    DBRX router bookkeeping, variants.moe_saved)."""
    return VariantSpec(router="model_softmax", router_renorm=renorm, fp32_routing_weights=False,
                       query_scale="position")


def map_mistral4(cfg: dict) -> dict:
    """Mistral-Small-4 (models/mistral4/modeling_mistral4.py): DeepSeek-V3's MLA (q-LoRA, kv latent, nope/rope heads,
    interleaved RoPE; Mistral4Attention multiplies the query by a Llama-4 position scale that needs no grad, its
    per-token table kept by the product) and DeepSeek-V3's MoE (fused routed experts of moe_intermediate_size,
    n_shared_experts side by side in one MLP) from layer first_k_dense_replace on, behind Mistral4TopkRouter."""
    cfg = {**MISTRAL4_DEFAULTS, **cfg}
    f = common_fields(cfg)
    bias = get_bool(cfg, "attention_bias", False)
    n = f["num_hidden_layers"]
    experts = get_int(cfg, "n_routed_experts", "num_local_experts", lo=1, hi=B.MAX_EXPERTS)
    f.update(family="deepseek", head_dim=None, q_lora_rank=get_int(cfg, "q_lora_rank", default=None, hi=B.MAX_HIDDEN),
             kv_lora_rank=get_int(cfg, "kv_lora_rank", hi=B.MAX_HIDDEN),
             qk_rope_head_dim=get_int(cfg, "qk_rope_head_dim", hi=B.MAX_HEAD_DIM),
             qk_nope_head_dim=get_int(cfg, "qk_nope_head_dim", hi=B.MAX_HEAD_DIM),
             v_head_dim=get_int(cfg, "v_head_dim", hi=B.MAX_HEAD_DIM), qkv_bias=bias, o_bias=bias,
             hidden_act=get_str(cfg, "hidden_act", default="silu"), num_experts=experts,
             num_experts_per_tok=get_int(cfg, "num_experts_per_tok", hi=experts),
             moe_intermediate_size=get_int(cfg, "moe_intermediate_size", hi=B.MAX_FFN),
             num_shared_experts=get_int(cfg, "n_shared_experts", lo=0, hi=B.MAX_SHARED_EXPERTS),
             first_k_dense_layers=min(get_int(cfg, "first_k_dense_replace", lo=0, hi=B.MAX_LAYERS), n),
             variant=mistral_router(get_bool(cfg, "norm_topk_prob", True)))
    return _mla_heads(f)


def _mla_heads(f: dict) -> dict:
    if f["num_key_value_heads"] not in (None, f["num_attention_heads"]):
        raise ConfigError("num_key_value_heads: the attention expands the latent into num_attention_heads keys and "
                          "repeats them num_attention_heads // num_key_value_heads times; give equal counts")
    return f


# MistralLarge4TextConfig's defaults (models/mistral_large4/configuration_mistral_large4.py)
LARGE4_DEFAULTS = dict(vocab_size=204800, hidden_size=6144, intermediate_size=24576, moe_intermediate_size=6144,
                       num_hidden_layers=72, num_attention_heads=64, n_shared_experts=1, n_routed_experts=128,
                       kv_lora_rank=512, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=64,
                       num_experts_per_tok=4, index_topk=2048, index_head_dim=128, index_n_heads=32,
                       first_k_dense_replace=1, final_logit_softcapping=30.0)
LARGE4_LACKS = ("MLA layers of two shapes in one model (Mistral-Large-4's NoPE layers, no_rope_layers 0: no "
                "rotary key in the latent, a kv_b_proj qk_rope_head_dim wider per head) or latent KV caches shared "
                "across layers (kv_source_layers)")


def _large4_layers(cfg: dict, n: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(layer_types, ffn_types) as MistralLarge4TextConfig.__post_init__ (GlmMoeDsaConfig's) derives them: a layer
    runs its indexer unless indexer_types (else index_topk_pattern, else index_topk_freq / index_skip_topk_offset)
    says "shared" (plain MLA reusing the previous top-k), GLM-5's rule (dsa.glm_indexer_types); mlp_layer_types,
    else first_k_dense_replace dense layers (dsa.mlp_types)."""
    types = glm_indexer_types(cfg, n)
    dense = min(get_int(cfg, "first_k_dense_replace", lo=0, hi=B.MAX_LAYERS), n)
    return (tuple("indexed_attention" if t == "full" else "full_attention" for t in types),
            mlp_types(cfg, n, ["dense"] * dense + ["sparse"] * (n - dense)))


def map_mistral_large4(cfg: dict) -> dict:
    """Mistral-Large-4's text model (models/mistral_large4/modeling_mistral_large4.py MistralLarge4TextModel):
    GLM-5's DSA layers without q-LoRA. MistralLarge4TextAttention: q_proj, MLA's kv latent (kv_a_proj_with_mqa,
    kv_a_layernorm, kv_b_proj), o_proj, and a MistralLarge4TextSoftmaxScaling (per-head scale and bias Parameters)
    on the concatenated query ("learned" query_scale); a "full" layer of indexer_types runs MistralLarge4TextIndexer
    (IndexerSpec "mistral", under no_grad), a "shared" one reuses the previous top-k. MistralLarge4TextTopkRouter
    routes in fp32 (its weight kept fp32: _keep_in_fp32_modules_strict "mlp.gate.weight"; F.linear on x.float(),
    an fp32 softmax, the top-k always renormalised) to fused experts and n_shared_experts shared experts; the LM
    head's logits are soft-capped at final_logit_softcapping. NoPE layers and cross-layer KV sharing are refused
    (LARGE4_LACKS). The rotary embedding's alpha is a buffer."""
    cfg = {**LARGE4_DEFAULTS, **cfg}
    f = common_fields(cfg)
    n, h, a = f["num_hidden_layers"], f["hidden_size"], f["num_attention_heads"]
    no_rope = get_int_list(cfg, "no_rope_layers", lo=0, hi=1)
    if no_rope is None:  # the class's default: every no_rope_layer_interval-th layer is NoPE
        interval = get_int(cfg, "no_rope_layer_interval", default=4, lo=1, hi=B.MAX_LAYERS)
        no_rope = [int((i + 1) % interval != 0) for i in range(n)]
    sources = get_int_list(cfg, "kv_source_layers", lo=0, hi=B.MAX_LAYERS)
    if 0 in no_rope[:n] or (sources is not None and sources != list(range(n))):
        raise ConfigError(f"model_type: {cfg.get('model_type')!r} cannot be described exactly yet: the calculator "
                          f"has no {LARGE4_LACKS}")
    layer_types, ffn_types = _large4_layers(cfg, n)
    experts = get_int(cfg, "n_routed_experts", "num_local_experts", lo=1, hi=B.MAX_EXPERTS)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(family="deepseek", head_dim=None, q_lora_rank=None, kv_lora_rank=get_int(cfg, "kv_lora_rank",
                                                                                       hi=B.MAX_HIDDEN),
             qk_rope_head_dim=get_int(cfg, "qk_rope_head_dim", hi=B.MAX_HEAD_DIM),
             qk_nope_head_dim=get_int(cfg, "qk_nope_head_dim", hi=B.MAX_HEAD_DIM),
             v_head_dim=get_int(cfg, "v_head_dim", hi=B.MAX_HEAD_DIM), qkv_bias=bias, o_bias=bias,
             hidden_act=get_str(cfg, "hidden_act", default="silu"), layer_types=layer_types, ffn_types=ffn_types,
             indexer=IndexerSpec(n_heads=get_int(cfg, "index_n_heads", hi=B.MAX_HEADS),
                                 head_dim=get_int(cfg, "index_head_dim", hi=B.MAX_HEAD_DIM),
                                 topk=get_int(cfg, "index_topk", hi=1 << 30), variant="mistral"),
             final_logit_softcapping=get_float(cfg, "final_logit_softcapping", None, 1e-6, 1e9))
    if "moe" in ffn_types:
        f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", hi=experts),
                 moe_intermediate_size=get_int(cfg, "moe_intermediate_size", hi=B.MAX_FFN),
                 num_shared_experts=get_int(cfg, "n_shared_experts", lo=0, hi=B.MAX_SHARED_EXPERTS))
    f["variant"] = VariantSpec(attention_tensors=((a,), (a,)), query_scale="learned", router_fp32_input=True,
                               fp32_per_moe_layer=experts * h if "moe" in ffn_types else 0)
    return _mla_heads(f)


MISTRAL_MAPPERS: dict = {"mistral4": map_mistral4, "mistral_large4_text": map_mistral_large4,
                         "mistral_large4": map_mistral_large4}
MISTRAL_TEXT_TYPES = {"mistral_large4": "mistral_large4_text"}  # calculator.model.text_towers
