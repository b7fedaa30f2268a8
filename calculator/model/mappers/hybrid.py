"""Mappings for hybrid decoders whose token mixers are not all softmax attention (issue 21): each model_type's
config.json read with its transformers 5.23 configuration class's defaults and field names, into a ModelSpec whose
layer_types name each layer's mixer (calculator/model/architectures/). Each mapper cites the modeling file it
mirrors; tests/model/mappers/test_hybrid.py holds every one to the real model's parameter count.
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.config_read import (ConfigError, common_fields, get_bool, get_choice_list, get_int,
                                          get_int_list, get_str)
from calculator.model.config_read import partial_rotary_dim
from calculator.model.mixer_specs import LinearAttentionSpec
from calculator.model.variants import VariantSpec

GDN_LAYER_TYPES = ("linear_attention", "full_attention")


def _interval_layer_types(cfg: dict, n_layers: int, choices: tuple[str, ...], interval_key: str,
                          default_interval: int) -> tuple[str, ...]:
    """layer_types as given, or as the configuration class derives them: every `interval`-th layer (1-based) full
    attention, the others linear (Qwen3NextConfig / Qwen3_5TextConfig __post_init__: full_attention_interval 4)."""
    types = get_choice_list(cfg, "layer_types", choices)
    if types is None:
        interval = get_int(cfg, interval_key, default=default_interval, hi=B.MAX_LAYERS)
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers)]
    if len(types) != n_layers:
        raise ConfigError(f"layer_types: has {len(types)} entries but num_hidden_layers is {n_layers}")
    return tuple(types)


def _gdn(cfg: dict, projections: str) -> LinearAttentionSpec:
    """The Gated DeltaNet fields (Qwen3NextConfig / Qwen3_5TextConfig names and defaults)."""
    return LinearAttentionSpec(
        num_key_heads=get_int(cfg, "linear_num_key_heads", default=16, hi=B.MAX_HEADS),
        num_value_heads=get_int(cfg, "linear_num_value_heads", default=32, hi=B.MAX_HEADS),
        key_head_dim=get_int(cfg, "linear_key_head_dim", default=128, hi=B.MAX_HEAD_DIM),
        value_head_dim=get_int(cfg, "linear_value_head_dim", default=128, hi=B.MAX_HEAD_DIM),
        conv_kernel=get_int(cfg, "linear_conv_kernel_dim", default=4, lo=0, hi=1024),
        projections=projections)


def _qwen_gdn_fields(cfg: dict, projections: str) -> dict:
    """What Qwen3-Next and Qwen3.5 share: Qwen3-style attention (q/k RMSNorm of head_dim, no bias by default) whose
    q_proj also computes an output gate, Gated DeltaNet in the other layers, two zero-centred RMSNorms per layer;
    apply_rotary_pos_emb returns torch.cat([rotated, pass-through]) (rope_concat)."""
    f = common_fields(cfg)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(head_dim=get_int(cfg, "head_dim", default=256, hi=B.MAX_HEAD_DIM), qkv_bias=bias, o_bias=bias,
             qk_norm=True, attention_output_gate=True, zero_centered_norm=True, rope_concat=True,
             rotary_dim=partial_rotary_dim(cfg, get_int(cfg, "head_dim", default=256, hi=B.MAX_HEAD_DIM), 0.25),
             hidden_act=get_str(cfg, "hidden_act", default="silu"),
             layer_types=_interval_layer_types(cfg, f["num_hidden_layers"], GDN_LAYER_TYPES,
                                               "full_attention_interval", 4),
             linear_attention=_gdn(cfg, projections))
    return f


def _qwen_gdn_moe(cfg: dict, f: dict, sparse_step: bool) -> dict:
    """Routed experts + one shared expert behind a sigmoid gate (Qwen3NextSparseMoeBlock, Qwen3_5MoeSparseMoeBlock).
    Qwen3-Next keeps Qwen-MoE's mlp_only_layers and decoder_sparse_step; every Qwen3.5-MoE layer has experts."""
    experts = get_int(cfg, "num_experts", "num_local_experts", lo=0, hi=B.MAX_EXPERTS)
    if not experts:
        return f
    shared = get_int(cfg, "shared_expert_intermediate_size", default=512, lo=0, hi=B.MAX_FFN) or None
    dense: tuple[int, ...] = ()
    if sparse_step:
        step = get_int(cfg, "decoder_sparse_step", default=1, hi=B.MAX_LAYERS)
        only = set(get_int_list(cfg, "mlp_only_layers", lo=0, hi=B.MAX_LAYERS) or [])
        dense = tuple(i for i in range(f["num_hidden_layers"]) if i in only or (i + 1) % step != 0)
    f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", hi=experts),
             moe_intermediate_size=get_int(cfg, "moe_intermediate_size", default=512, hi=B.MAX_FFN),
             shared_expert_intermediate_size=shared, shared_expert_gate=bool(shared), dense_layer_indices=dense)
    return f


def map_qwen3_next(cfg: dict) -> dict:
    """Qwen3-Next (models/qwen3_next/modeling_qwen3_next.py): Gated DeltaNet with fused in_proj_qkvz / in_proj_ba,
    gated attention every full_attention_interval-th layer, MoE with a gated shared expert."""
    return _qwen_gdn_moe(cfg, _qwen_gdn_fields(cfg, "qkvz_ba"), sparse_step=True)


def map_qwen3_5(cfg: dict) -> dict:
    """Qwen3.5 dense (models/qwen3_5/modeling_qwen3_5.py): Gated DeltaNet with in_proj_qkv / z / b / a, gated
    attention every full_attention_interval-th layer, a SwiGLU MLP in every layer."""
    return _qwen_gdn_fields(cfg, "qkv_z_b_a")


def map_qwen3_5_moe(cfg: dict) -> dict:
    """Qwen3.5-MoE (models/qwen3_5_moe/modeling_qwen3_5_moe.py): Qwen3.5's mixers, every layer a sparse MoE block
    with a gated shared expert."""
    if cfg.get("intermediate_size") is None:  # every layer has experts: no dense MLP width is written
        cfg = {**cfg, "intermediate_size": get_int(cfg, "moe_intermediate_size", default=512, hi=B.MAX_FFN)}
    return _qwen_gdn_moe(cfg, _qwen_gdn_fields(cfg, "qkv_z_b_a"), sparse_step=False)


def _olmo_rope(cfg: dict) -> bool:
    """Whether OlmoHybridModel builds its rotary embedding: rope_parameters' rope_theta, else the top-level
    rope_theta, else the configuration's default 10000 (PreTrainedConfig.convert_rope_params_to_dict); a null theta
    (the released checkpoints) builds none (NoPE)."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    if isinstance(rope, dict) and "rope_theta" in rope:
        return rope["rope_theta"] is not None
    return cfg.get("rope_theta", 10000.0) is not None


def map_olmo_hybrid(cfg: dict) -> dict:
    """OLMo-Hybrid (models/olmo_hybrid/modeling_olmo_hybrid.py): OlmoHybridAttentionDecoderLayer is OLMo-3's post-norm
    block (attention and MLP read the residual stream, post_attention_layernorm and post_feedforward_layernorm norm
    their outputs; q/k RMSNorms over the whole projection; every RMSNorm multiplies its weight in fp32); the
    OlmoHybridLinearAttentionDecoderLayer is pre-norm (input_layernorm, post_attention_layernorm) around a Gated
    DeltaNet with separate q/k/v/a/b/g projections (beta doubled per linear_allow_neg_eigval) and the same MLP.
    Two norms a layer either way, each saving the same tensors (its fp32 input, rsqrt and fp32 normalised copy; its
    output or the residual sum is the next linear's input). The RoPE tables stay fp32 (OlmoHybridRotaryEmbedding);
    with a null rope_theta there is none (NoPE, the released checkpoints).
    layer_types default: every 4th layer full attention, the last one when none is (OlmoHybridConfig.__post_init__)."""
    f = common_fields(cfg)
    n, heads, h = f["num_hidden_layers"], f["num_attention_heads"], f["hidden_size"]
    types = get_choice_list(cfg, "layer_types", GDN_LAYER_TYPES)
    if types is None:
        types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(n)]
        if "full_attention" not in types:
            types[-1] = "full_attention"
    if len(types) != n:
        raise ConfigError(f"layer_types: has {len(types)} entries but num_hidden_layers is {n}")
    if set(types) != set(GDN_LAYER_TYPES):
        raise ConfigError("layer_types: OLMo-Hybrid needs at least one linear_attention and one full_attention layer")
    nk = get_int(cfg, "linear_num_key_heads", default=heads, hi=B.MAX_HEADS)
    nv = get_int(cfg, "linear_num_value_heads", default=heads, hi=B.MAX_HEADS)
    dk = get_int(cfg, "linear_key_head_dim", default=int(0.75 * h / nk), hi=B.MAX_HEAD_DIM)
    dv = get_int(cfg, "linear_value_head_dim", default=2 * dk, hi=B.MAX_HEAD_DIM)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(qkv_bias=bias, o_bias=bias, qk_norm=True, hidden_act=get_str(cfg, "hidden_act", default="silu"),
             layer_types=tuple(types), max_position_embeddings=get_int(cfg, "max_position_embeddings", default=65536,
                                                                       hi=1 << 40),
             variant=VariantSpec(norm="fp32_weight", qk_norm_layout="full_width", fp32_rope_tables=True,
                                 rope=_olmo_rope(cfg)),
             linear_attention=LinearAttentionSpec(
                 num_key_heads=nk, num_value_heads=nv, key_head_dim=dk, value_head_dim=dv,
                 conv_kernel=get_int(cfg, "linear_conv_kernel_dim", default=4, hi=1024), projections="q_k_v_a_b_g",
                 allow_neg_eigval=get_bool(cfg, "linear_allow_neg_eigval", True)))
    return f


HYBRID_MAPPERS = {
    "qwen3_next": map_qwen3_next, "qwen3_5_text": map_qwen3_5, "qwen3_5_moe_text": map_qwen3_5_moe,
    "olmo_hybrid": map_olmo_hybrid,
    "qwen3_5": map_qwen3_5, "qwen3_5_moe": map_qwen3_5_moe,  # their text_config (calculator.model.hf_config)
}
# multimodal wrappers whose text_config omits its model_type
HYBRID_TEXT_TYPES = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}
