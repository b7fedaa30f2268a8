"""Mappings for decoders that differ from the Llama-style layer in a few tensors (MoE and attention variants) (issue
21): each model_type's config.json, read with its transformers 5.23 configuration class's defaults and field names,
into a ModelSpec, with a `VariantSpec` (calculator.model.variants) for what the engine's layer lacks. Each mapper cites
the modeling file it mirrors and is held to the real model's parameter and tensor counts by
tests/model/mappers/test_variants.py; the types of this module (and Apertus) also to one layer's saved activations,
measured on the CPU part by part. This module holds the MoE types so measured and the registry;
calculator/model/mappers/variants_more.py the rest.

A type whose block the engine cannot describe exactly is refused with what the engine lacks.
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.config_read import (ConfigError, common_fields, get_bool, get_float, get_int, get_int_list,
                                          get_str, sliding_fields)
from calculator.model.mappers.gpt_style import GPT_STYLE_MAPPERS
from calculator.model.mappers.variants_more import MORE_VARIANT_MAPPERS, dense_layers, untraced, with_layer_types
from calculator.model.variants import VariantSpec


def _top_k(cfg: dict, experts: int, *keys: str, default=None) -> int:
    keys = keys or ("num_experts_per_tok",)
    if default is None:
        return get_int(cfg, *keys, hi=experts)
    return get_int(cfg, *keys, default=default, hi=experts)


def _head_dim(cfg: dict, f: dict, default: int | None = None) -> dict:
    f["head_dim"] = get_int(cfg, "head_dim", default=default, hi=B.MAX_HEAD_DIM)
    return f


def _shared_count(cfg: dict, key: str, default: int) -> int:
    """Shared experts of a block that always builds its shared MLP: zero would build zero-width linears."""
    n = get_int(cfg, key, default=default, lo=0, hi=B.MAX_SHARED_EXPERTS)
    if n == 0:
        raise ConfigError(f"{key}: 0 makes transformers build zero-width shared-expert linears (tensors with no "
                          f"elements), which this calculator does not model; give at least 1")
    return n


def _moe(f: dict, experts: int, top_k: int, width: int, dense: tuple[int, ...] = (), **more) -> dict:
    f.update(num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=width, dense_layer_indices=dense,
             **more)
    return f


def map_minimax_m2(cfg: dict) -> dict:
    """MiniMax-M2 (models/minimax_m2/modeling_minimax_m2.py): bias-free q/k/v/o with q_norm / k_norm RMSNorms over the
    whole projection (num_heads·head_dim), every layer num_local_experts experts of width intermediate_size behind a
    sigmoid router (e_score_correction_bias is a buffer) renormalised in fp32, fp32 routing weights; its
    apply_rotary_pos_emb returns torch.cat([rotated, pass-through]) (rope_concat)."""
    f = _head_dim(cfg, common_fields(cfg), default=128)
    experts = get_int(cfg, "num_local_experts", "num_experts", lo=1, hi=B.MAX_EXPERTS)
    # partial RoPE (MiniMaxM2RotaryEmbedding: cos / sin of head_dim · partial_rotary_factor, which MiniMaxM2Config
    # derives from the released checkpoints' legacy rotary_dim): the shared tables are rotary_dim wide
    rope = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    src = rope if rope.get("partial_rotary_factor") is not None else cfg
    rotary = (int(f["head_dim"] * get_float(src, "partial_rotary_factor", 1.0, 0.0, 1.0))
              if src.get("partial_rotary_factor") is not None else get_int(cfg, "rotary_dim", default=0, lo=0,
                                                                            hi=f["head_dim"]))
    f.update(qk_norm=True, hidden_act=get_str(cfg, "hidden_act", default="silu"), rope_concat=True,
             variant=VariantSpec(qk_norm_layout="full_width", rotary_dim=rotary))
    return _moe(f, experts, _top_k(cfg, experts), f["intermediate_size"])


def map_hunyuan_v1_moe(cfg: dict) -> dict:
    """HunYuan-MoE-V1 (models/hunyuan_v1_moe/modeling_hunyuan_v1_moe.py): q/k/v/o biased per attention_bias, per-head
    query_layernorm / key_layernorm, every layer num_experts experts of width intermediate_size, one shared MLP of
    width intermediate_size, and a router `wg` created in fp32 that reads x.float(); fp32 renormalised weights."""
    if cfg.get("head_dim") is None:  # HunYuanMoEV1Config's default None: the attention's scaling fails on it
        raise ConfigError("head_dim: HunYuan-MoE-V1 needs it (transformers cannot build the attention without it)")
    f = _head_dim(cfg, common_fields(cfg))
    h = f["hidden_size"]
    for key in ("num_experts", "moe_topk"):
        if isinstance(cfg.get(key), list):
            raise ConfigError(f"{key}: a list per layer does not build in transformers 5.23 (HunYuanMoEV1Experts "
                              f"reads one number); give one number")
    experts = get_int(cfg, "num_experts", default=1, lo=1, hi=B.MAX_EXPERTS)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(qkv_bias=bias, o_bias=bias, qk_norm=True, hidden_act=get_str(cfg, "hidden_act", default="silu"),
             shared_expert_intermediate_size=f["intermediate_size"],
             variant=VariantSpec(router_fp32_input=True, fp32_per_moe_layer=experts * h))
    return _moe(f, experts, _top_k(cfg, experts, "moe_topk", default=1), f["intermediate_size"])


def map_ernie4_5_moe(cfg: dict) -> dict:
    """ERNIE-4.5-MoE (models/ernie4_5_moe/modeling_ernie4_5_moe.py): every linear but the experts biased per use_bias,
    the LM head too (its bias stays when tied, the default); layer i has experts iff (i + 1) % moe_layer_interval == 0
    and moe_layer_start_index <= i <= moe_layer_end_index (−1: the last); an fp32 router weight and an fp32
    moe_statics.e_score_correction_bias (1, E) Parameter with requires_grad=False; softmax, top-k renormalised by the
    clamped sum, weights cast to the model dtype; RoPE in fp32 (every layer keeps fp32 cos and sin)."""
    f = common_fields(cfg)
    n, h = f["num_hidden_layers"], f["hidden_size"]
    bias = get_bool(cfg, "use_bias", False)
    experts = get_int(cfg, "moe_num_experts", "num_experts", default=64, lo=1, hi=B.MAX_EXPERTS)
    start = get_int(cfg, "moe_layer_start_index", default=1, lo=0, hi=B.MAX_LAYERS)
    end = get_int(cfg, "moe_layer_end_index", default=n - 1, lo=-1, hi=B.MAX_LAYERS)
    end = n - 1 if end == -1 else end
    interval = get_int(cfg, "moe_layer_interval", default=1, hi=B.MAX_LAYERS)
    dense = tuple(i for i in range(n) if not ((i + 1) % interval == 0 and start <= i <= end))
    shared = get_int(cfg, "moe_num_shared_experts", default=0, lo=0, hi=B.MAX_SHARED_EXPERTS)
    f.update(tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True), qkv_bias=bias, o_bias=bias,
             mlp_bias=bias, hidden_act=get_str(cfg, "hidden_act", default="silu"), num_shared_experts=shared,
             variant=VariantSpec(lm_head_bias=bias, moe_tensors=((1, experts),), untrained_per_moe_layer=experts,
                                 fp32_per_moe_layer=experts * h + experts, router_fp32_input=True, router_clamp=True,
                                 fp32_routing_weights=False, fp32_rope=True))
    if len(dense) == n:
        return f
    width = get_int(cfg, "moe_intermediate_size", default=1536, hi=B.MAX_FFN)
    return _moe(f, experts, _top_k(cfg, experts, "moe_k", "num_experts_per_tok", default=6), width, dense)


def map_phimoe(cfg: dict) -> dict:
    """PhiMoE / Phi-3.5-MoE (models/phimoe/modeling_phimoe.py): q/k/v/o biased per attention_bias, LayerNorms with a
    bias, every layer num_local_experts experts of width intermediate_size behind sparsemixer routing, which picks
    exactly two experts per token whatever num_experts_per_tok says; an LM head bias per lm_head_bias; a sliding
    window on every layer when set."""
    f = common_fields(cfg)
    experts = get_int(cfg, "num_local_experts", "num_experts", default=16, lo=2, hi=B.MAX_EXPERTS)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(qkv_bias=bias, o_bias=bias, norm_type="layernorm", hidden_act=get_str(cfg, "hidden_act", default="silu"),
             variant=VariantSpec(lm_head_bias=get_bool(cfg, "lm_head_bias", False), router="sparsemixer",
                                 fp32_routing_weights=False))
    k = get_int(cfg, "num_experts_per_tok", default=2, hi=experts)
    if k != 2:
        f["_warnings"] = [f"phimoe: sparsemixer routes every token to 2 experts; num_experts_per_tok={k} is not used"]
    sliding_fields(cfg, f)
    return _moe(f, experts, 2, f["intermediate_size"])


def map_dots1(cfg: dict) -> dict:
    """dots.llm1 (models/dots1/modeling_dots1.py): q/k/v/o biased per attention_bias, per-head q/k norms, experts from
    layer first_k_dense_replace on with n_shared_experts shared ones, DeepSeek-V3's router (fp32 copies of its input
    and weight, sigmoid, e_score_correction_bias buffer, renormalised per norm_topk_prob, fp32 weights); layers from
    max_window_layers on slide when sliding_window is set."""
    f = _head_dim(cfg, common_fields(cfg))
    n = f["num_hidden_layers"]
    experts = get_int(cfg, "n_routed_experts", lo=1, hi=B.MAX_EXPERTS)
    bias = get_bool(cfg, "attention_bias", False)
    first = get_int(cfg, "first_k_dense_replace", default=0, lo=0, hi=n)
    f.update(qkv_bias=bias, o_bias=bias, qk_norm=True, hidden_act=get_str(cfg, "hidden_act", default="silu"),
             num_shared_experts=_shared_count(cfg, "n_shared_experts", 0),
             variant=VariantSpec(router_renorm=get_bool(cfg, "norm_topk_prob", False), router_fp32_input=True,
                                 router_fp32_weight_copy=True))
    window_from = get_int(cfg, "max_window_layers", default=62, lo=0, hi=B.MAX_LAYERS)
    sliding_fields(with_layer_types(cfg, n, lambda i: i >= window_from), f)
    width = get_int(cfg, "moe_intermediate_size", default=1408, hi=B.MAX_FFN)
    return _moe(f, experts, _top_k(cfg, experts), width, tuple(range(first)))


def map_afmoe(cfg: dict) -> dict:
    """AFMoE (models/afmoe/modeling_afmoe.py): q/k/v/o biased per attention_bias, per-head q/k norms, a sigmoid output
    gate gate_proj (heads·head_dim × h), four RMSNorms per layer (input, post-attention, pre- and post-MLP), all
    multiplying their weight in fp32; dense MLPs in the first num_dense_layers layers, then experts with
    num_shared_experts shared ones, a sigmoid router renormalised in fp32 and an expert_bias Parameter
    (requires_grad=False); layers slide unless every global_attn_every_n_layers-th."""
    f = _head_dim(cfg, common_fields(cfg), default=128)
    n, h = f["num_hidden_layers"], f["hidden_size"]
    a = f["num_attention_heads"]
    experts = get_int(cfg, "num_experts", default=64, lo=1, hi=B.MAX_EXPERTS)
    bias = get_bool(cfg, "attention_bias", False)
    first = get_int(cfg, "num_dense_layers", default=1, lo=0, hi=n)
    f.update(qkv_bias=bias, o_bias=bias, qk_norm=True, norms_per_layer=4,
             hidden_act=get_str(cfg, "hidden_act", default="silu"),
             num_shared_experts=_shared_count(cfg, "num_shared_experts", 2),
             variant=VariantSpec(attention_tensors=((a * f["head_dim"], h),), moe_tensors=((experts,),),
                                 untrained_per_moe_layer=experts, norm="fp32_weight", attention_gate="sigmoid"))
    every = get_int(cfg, "global_attn_every_n_layers", default=4, hi=B.MAX_LAYERS)
    sliding_fields(with_layer_types(cfg, n, lambda i: (i + 1) % every != 0), f)
    width = get_int(cfg, "moe_intermediate_size", default=1408, hi=B.MAX_FFN)
    return _moe(f, experts, _top_k(cfg, experts, default=6), width, tuple(range(first)))


def _deepseek_v3_router(cfg: dict, renorm_default: bool) -> dict:
    """DeepSeek-V3's router: fp32 copies of the input and of the (model-dtype) weight, sigmoid scores, top-k with the
    e_score_correction_bias buffer, renormalised per norm_topk_prob, fp32 weights to the experts."""
    return dict(router_renorm=get_bool(cfg, "norm_topk_prob", renorm_default), router_fp32_input=True,
                router_fp32_weight_copy=True)


def map_exaone_moe(cfg: dict) -> dict:
    """EXAONE-MoE (models/exaone_moe/modeling_exaone_moe.py): bias-free q/k/v/o, per-head q/k norms, mlp_layer_types
    (dense before first_k_dense_replace) with num_shared_experts shared experts and DeepSeek-V3's router; layers slide
    unless every sliding_window_pattern-th (those run without RoPE)."""
    f = _head_dim(cfg, common_fields(cfg))
    n = f["num_hidden_layers"]
    experts = get_int(cfg, "num_experts", default=64, lo=1, hi=B.MAX_EXPERTS)
    first = get_int(cfg, "first_k_dense_replace", default=1, lo=0, hi=n)
    f.update(qk_norm=True, hidden_act=get_str(cfg, "hidden_act", default="silu"),
             num_shared_experts=_shared_count(cfg, "num_shared_experts", 1),
             variant=VariantSpec(**_deepseek_v3_router(cfg, True)))
    pattern = get_int(cfg, "sliding_window_pattern", default=4, hi=B.MAX_LAYERS)
    sliding_fields(with_layer_types(cfg, n, lambda i: (i + 1) % pattern != 0), f)
    width = get_int(cfg, "moe_intermediate_size", default=1024, hi=B.MAX_FFN)
    return _moe(f, experts, _top_k(cfg, experts, default=8), width, dense_layers(cfg, n, lambda i: i < first))


def map_mellum(cfg: dict) -> dict:
    """Mellum (models/mellum/modeling_mellum.py): Qwen3-MoE's layer (q/k/v/o per attention_bias, per-head q/k norms)
    with mlp_layer_types (default all sparse) and layer_types; softmax router, renormalised per norm_topk_prob,
    weights cast to the model dtype. MTP layers are not built by transformers."""
    f = _head_dim(cfg, common_fields(cfg), default=128)
    n = f["num_hidden_layers"]
    experts = get_int(cfg, "num_local_experts", "num_experts", default=64, lo=1, hi=B.MAX_EXPERTS)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(qkv_bias=bias, o_bias=bias, qk_norm=True, hidden_act=get_str(cfg, "hidden_act", default="silu"),
             variant=VariantSpec(router_renorm=get_bool(cfg, "norm_topk_prob", True), fp32_routing_weights=False))
    sliding_fields(cfg, f)
    width = get_int(cfg, "moe_intermediate_size", default=896, hi=B.MAX_FFN)
    return _moe(f, experts, _top_k(cfg, experts, default=8), width, dense_layers(cfg, n, lambda i: False))


def map_laguna(cfg: dict) -> dict:
    """Laguna (models/laguna/modeling_laguna.py): q/k/v/o per attention_bias, per-head q/k norms, a softplus output
    gate g_proj (one per head with gating true / "per-head", else one per channel), mlp_layer_types (default the
    first dense), experts with one shared MLP of shared_expert_intermediate_size, a sigmoid router renormalised in
    fp32 with an e_score_correction_bias Parameter (requires_grad=False), weights cast to the model dtype."""
    f = _head_dim(cfg, common_fields(cfg), default=128)
    n, h, a = f["num_hidden_layers"], f["hidden_size"], f["num_attention_heads"]
    heads = get_int_list(cfg, "num_attention_heads_per_layer", lo=1, hi=B.MAX_HEADS)
    if heads is not None and set(heads) != {a}:
        raise ConfigError("num_attention_heads_per_layer: layers with different numbers of query heads need a "
                          "per-layer attention width, which this calculator's layer kinds do not have")
    gating = cfg.get("gating", True)
    if not isinstance(gating, (bool, str)):
        raise ConfigError(f"gating: must be true, false, \"per-head\" or \"per-element\", got {type(gating).__name__}")
    per_head = gating is True or gating == "per-head"
    experts = get_int(cfg, "num_experts", default=256, lo=1, hi=B.MAX_EXPERTS)
    bias = get_bool(cfg, "attention_bias", False)
    if get_bool(cfg, "moe_apply_router_weight_on_input", False):
        raise ConfigError("moe_apply_router_weight_on_input: true is not supported by transformers' Laguna")
    f.update(qkv_bias=bias, o_bias=bias, qk_norm=True, hidden_act=get_str(cfg, "hidden_act", default="silu"),
             shared_expert_intermediate_size=get_int(cfg, "shared_expert_intermediate_size", default=512,
                                                     hi=B.MAX_FFN),
             variant=VariantSpec(attention_tensors=((a if per_head else a * f["head_dim"], h),),
                                 moe_tensors=((experts,),), untrained_per_moe_layer=experts,
                                 attention_gate="softplus_head" if per_head else "softplus_element",
                                 fp32_routing_weights=False))
    sliding_fields(cfg, f)
    width = get_int(cfg, "moe_intermediate_size", default=512, hi=B.MAX_FFN)
    return _moe(f, experts, _top_k(cfg, experts, default=8), width, dense_layers(cfg, n, lambda i: i == 0))


def map_cohere2_moe(cfg: dict) -> dict:
    """Cohere2-MoE (models/cohere2_moe/modeling_cohere2_moe.py): Cohere's parallel block (attention and MLP read one
    norm: a weight-only LayerNorm computed in fp32, or an RMSNorm when rms_norm_eps is set), q/k/v/o per
    attention_bias, tied by default; mlp_layer_types (dense of prefix_dense_intermediate_size or intermediate_size),
    experts of width intermediate_size with num_shared_experts shared ones; the router takes the top-k logits, then a
    softmax (or sigmoid) over those k; weights cast to the model dtype."""
    f = _head_dim(cfg, common_fields(cfg), default=128)
    n, f_width = f["num_hidden_layers"], f["intermediate_size"]
    experts = get_int(cfg, "num_experts", default=8, lo=1, hi=B.MAX_EXPERTS)
    bias = get_bool(cfg, "attention_bias", False)
    rms = cfg.get("rms_norm_eps") is not None
    select = get_str(cfg, "expert_selection_fn", default="softmax")
    if select not in ("softmax", "sigmoid"):
        raise ConfigError(f"expert_selection_fn: must be softmax or sigmoid, got {select!r}")
    first = get_int(cfg, "first_k_dense_replace", default=0, lo=0, hi=n)
    f.update(tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True), qkv_bias=bias, o_bias=bias,
             norm_type="rmsnorm" if rms else "layernorm", norms_per_layer=1, parallel_residual=True,
             hidden_act=get_str(cfg, "hidden_act", default="silu"),
             intermediate_size=get_int(cfg, "prefix_dense_intermediate_size", default=f_width, hi=B.MAX_FFN),
             num_shared_experts=get_int(cfg, "num_shared_experts", default=0, lo=0, hi=B.MAX_SHARED_EXPERTS),
             variant=VariantSpec(norm_params="default" if rms else "weight", norm="hf" if rms else "fp32_layernorm",
                                 router="topk_softmax" if select == "softmax" else "topk_sigmoid",
                                 router_renorm=get_bool(cfg, "norm_topk_prob", True), fp32_routing_weights=False))
    prefix = get_int(cfg, "prefix_dense_sliding_window_pattern", default=1, hi=B.MAX_LAYERS)
    pattern = get_int(cfg, "sliding_window_pattern", default=4, hi=B.MAX_LAYERS)
    sliding_fields(with_layer_types(cfg, n, lambda i: (i + 1) % prefix != 0 if i < first
                                     else (i - first + 1) % pattern != 0), f)
    return _moe(f, experts, _top_k(cfg, experts, default=2), f_width, dense_layers(cfg, n, lambda i: i < first))


def map_flex_olmo(cfg: dict) -> dict:
    """FlexOlmo (models/flex_olmo/modeling_flex_olmo.py): OLMo-2's block (no pre-norms: post-attention and
    post-feedforward RMSNorms multiplying their weight in fp32; q/k norms over the whole projection; q/k/v/o per
    attention_bias) with OLMoE's experts of width intermediate_size in every layer; softmax router renormalised per
    norm_topk_prob, weights cast to the model dtype."""
    f = common_fields(cfg)
    experts = get_int(cfg, "num_experts", "num_local_experts", default=7, lo=1, hi=B.MAX_EXPERTS)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(qkv_bias=bias, o_bias=bias, qk_norm=True, hidden_act=get_str(cfg, "hidden_act", default="silu"),
             variant=VariantSpec(qk_norm_layout="full_width", norm="fp32_weight", fp32_routing_weights=False,
                                 router_renorm=get_bool(cfg, "norm_topk_prob", False)))
    return _moe(f, experts, _top_k(cfg, experts, default=5), f["intermediate_size"])


def map_solar_open(cfg: dict) -> dict:
    """Solar-Open (models/solar_open/modeling_solar_open.py): q/k/v biased per attention_bias, o_proj never; every
    layer n_routed_experts experts with n_shared_experts shared ones behind DeepSeek-V3's router."""
    if cfg.get("intermediate_size") is None:  # every layer has experts: no dense width is written
        cfg = {**cfg, "intermediate_size": get_int(cfg, "moe_intermediate_size", default=1280, hi=B.MAX_FFN)}
    f = _head_dim(cfg, common_fields(cfg), default=128)
    experts = get_int(cfg, "n_routed_experts", default=128, lo=1, hi=B.MAX_EXPERTS)
    f.update(qkv_bias=get_bool(cfg, "attention_bias", False), hidden_act=get_str(cfg, "hidden_act", default="silu"),
             num_shared_experts=_shared_count(cfg, "n_shared_experts", 1),
             variant=VariantSpec(**_deepseek_v3_router(cfg, True)))
    width = get_int(cfg, "moe_intermediate_size", default=1280, hi=B.MAX_FFN)
    return _moe(f, experts, _top_k(cfg, experts, default=8), width)


def map_hy_v3(cfg: dict) -> dict:
    """HY-V3 (models/hy_v3/modeling_hy_v3.py): q/k/v/o per attention_bias, per-head q/k norms, mlp_layer_types (default
    the first dense), dense and shared MLPs biased per mlp_bias, num_shared_experts shared experts, a router reading
    fp32 copies of its input and weight (sigmoid, e_score_correction_bias buffer, renormalised, fp32 weights)."""
    f = _head_dim(cfg, common_fields(cfg), default=128)
    n = f["num_hidden_layers"]
    experts = get_int(cfg, "num_experts", "num_local_experts", default=192, lo=1, hi=B.MAX_EXPERTS)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(qkv_bias=bias, o_bias=bias, mlp_bias=get_bool(cfg, "mlp_bias", False), qk_norm=True,
             hidden_act=get_str(cfg, "hidden_act", default="silu"),
             num_shared_experts=_shared_count(cfg, "num_shared_experts", 1),
             variant=VariantSpec(router_fp32_input=True, router_fp32_weight_copy=True))
    width = get_int(cfg, "moe_intermediate_size", default=1536, hi=B.MAX_FFN)
    return _moe(f, experts, _top_k(cfg, experts, default=8), width, dense_layers(cfg, n, lambda i: i == 0))


def _llama_moe(cfg: dict, **more) -> dict:
    """Llama's fields with attention_bias on q/k/v/o and mlp_bias (on the shared experts)."""
    f = common_fields(cfg)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(qkv_bias=bias, o_bias=bias, mlp_bias=get_bool(cfg, "mlp_bias", False),
             hidden_act=get_str(cfg, "hidden_act", default="silu"))
    f.update(more)
    return f


def map_aria_text(cfg: dict) -> dict:
    """Aria's text model (models/aria/modeling_aria.py, AriaTextDecoderLayer): Llama attention, every layer
    moe_num_experts experts of width intermediate_size (stored transposed) with moe_num_shared_experts shared ones
    (biased per mlp_bias)."""
    f = _llama_moe(cfg, _warnings=untraced("aria_text"))
    experts = get_int(cfg, "moe_num_experts", default=8, lo=1, hi=B.MAX_EXPERTS)
    shared = get_int(cfg, "moe_num_shared_experts", default=2, lo=0, hi=B.MAX_SHARED_EXPERTS)
    f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "moe_topk", default=2, hi=experts),
             num_shared_experts=shared)
    return f


def map_kolibri1(cfg: dict) -> dict:
    """Kolibri-1 (models/kolibri1/modeling_kolibri1.py): bias-free q/k/v/o, per-head q/k norms, four RMSNorms per layer
    (sandwich), every layer num_local_experts experts with a shared MLP of shared_expert_intermediate_size; layers
    slide unless every fifth. Kolibri1TopKRouter reads fp32 copies of its input and weight, takes the top-k of the
    logits (+ e_score_correction_bias, a buffer) and a sigmoid of the k gathered logits, renormalised per
    norm_topk_prob (default false); fp32 weights to the experts."""
    if cfg.get("intermediate_size") is None:  # every layer has experts: no dense width is written
        cfg = {**cfg, "intermediate_size": get_int(cfg, "moe_intermediate_size", default=512, hi=B.MAX_FFN)}
    f = _llama_moe(cfg, qk_norm=True, norms_per_layer=4,
                   variant=VariantSpec(router="gather_sigmoid", router_renorm=get_bool(cfg, "norm_topk_prob", False),
                                       router_fp32_input=True, router_fp32_weight_copy=True))
    experts = get_int(cfg, "num_local_experts", "num_experts", default=384, lo=1, hi=B.MAX_EXPERTS)
    f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", default=6, hi=experts),
             moe_intermediate_size=get_int(cfg, "moe_intermediate_size", default=512, hi=B.MAX_FFN),
             shared_expert_intermediate_size=get_int(cfg, "shared_expert_intermediate_size", default=512,
                                                     hi=B.MAX_FFN))
    sliding_fields(with_layer_types(cfg, f["num_hidden_layers"], lambda i: (i + 1) % 5 != 0), f)
    return f


def map_dbrx(cfg: dict) -> dict:
    """DBRX (models/dbrx/modeling_dbrx.py): fused Wqkv (h + 2·kv_n_heads·head_dim) and out_proj without bias, two
    LayerNorms without bias, every layer moe_num_experts experts stored as three (E·f × h) matrices w1, v1, w2 behind
    a bias-free router; untied (tying is refused by the model). Saved activations: clip_qkv's clamp, the experts run
    one by one, a model-dtype softmax router renormalised by moe_normalize_expert_weights' p-norm, moe_jitter_eps'
    noise (calculator.model.variants.expert_loop_saved)."""
    attn, ffn = cfg.get("attn_config") or {}, cfg.get("ffn_config") or {}
    if not isinstance(attn, dict) or not isinstance(ffn, dict):
        raise ConfigError("attn_config / ffn_config: must be objects")
    h = get_int(cfg, "d_model", "hidden_size", hi=B.MAX_HIDDEN)
    heads = get_int(cfg, "n_heads", "num_attention_heads", hi=B.MAX_HEADS)
    experts = get_int(ffn, "moe_num_experts", default=4, lo=1, hi=B.MAX_EXPERTS)
    width = get_int(ffn, "ffn_hidden_size", default=3584, hi=B.MAX_FFN)
    return dict(hidden_size=h, num_hidden_layers=get_int(cfg, "n_layers", "num_hidden_layers", hi=B.MAX_LAYERS),
                num_attention_heads=heads, num_key_value_heads=get_int(attn, "kv_n_heads", default=1, hi=heads),
                intermediate_size=width, vocab_size=get_int(cfg, "vocab_size", hi=B.MAX_VOCAB), norm_type="layernorm",
                fused_qkv=True, num_experts=experts,
                num_experts_per_tok=get_int(ffn, "moe_top_k", default=1, hi=experts),
                variant=VariantSpec(norm_params="weight", expert_tensors=3 * ((experts * width, h),),
                                    qkv_clip=attn.get("clip_qkv") is not None, router="model_softmax",
                                    router_renorm=ffn.get("moe_normalize_expert_weights", 1.0) is not None,
                                    router_jitter=ffn.get("moe_jitter_eps") is not None, expert_loop=True))


VARIANT_MAPPERS: dict = {
    "minimax_m2": map_minimax_m2, "hunyuan_v1_moe": map_hunyuan_v1_moe, "ernie4_5_moe": map_ernie4_5_moe,
    "phimoe": map_phimoe, "dots1": map_dots1, "afmoe": map_afmoe, "exaone_moe": map_exaone_moe,
    "mellum": map_mellum, "laguna": map_laguna, "cohere2_moe": map_cohere2_moe, "flex_olmo": map_flex_olmo,
    "solar_open": map_solar_open, "hy_v3": map_hy_v3, "aria_text": map_aria_text, "kolibri1": map_kolibri1,
    "dbrx": map_dbrx,
    **MORE_VARIANT_MAPPERS, **GPT_STYLE_MAPPERS,
}
