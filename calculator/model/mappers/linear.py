"""Mappings for the short-convolution, KDA and lightning-attention hybrids (issue 21): each model_type's config.json,
read with its transformers 5.23 configuration class's defaults, aliases and __post_init__ derivations, into a
ModelSpec whose layer_types name each layer's mixer ("conv", "kda", "lightning_attention", "full_attention",
"sliding_attention"; calculator/model/architectures/). Each mapper cites the modeling file it mirrors and is held to
the real model's parameter and tensor counts by tests/model/mappers/test_linear.py.

LFM3's and Ling's per-head attention output gates (g_proj, hidden_size × heads per attention layer) are a VariantSpec
option of the attention (calculator/model/variants.py: attention_tensors, attention_gate). Refused, naming what the
engine lacks: inkling_text and inkling2_text.
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.architectures.kda import KDASpec
from calculator.model.architectures.lightning import LightningSpec, decay_buffer_elements
from calculator.model.architectures.short_conv import ShortConvSpec
from calculator.model.config_read import (ConfigError, get_bool, get_choice_list, get_float, get_int, get_int_list,
                                          get_window)
from calculator.model.variants import VariantSpec

# Defaults of the configuration classes (models/<type>/configuration_<type>.py, transformers 5.23) for the sizes a
# config.json may leave out.
LFM2_DEFAULTS = dict(vocab_size=65536, hidden_size=2560, intermediate_size=12288, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=8, conv_L_cache=3)
LFM2_MOE_DEFAULTS = dict(vocab_size=65536, hidden_size=2048, intermediate_size=7168, moe_intermediate_size=1792,
                         num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, conv_L_cache=3,
                         num_experts=32, num_experts_per_tok=4, num_dense_layers=2)
LFM3_DEFAULTS = dict(vocab_size=128000, hidden_size=2048, intermediate_size=7680, num_hidden_layers=24,
                     num_attention_heads=16, num_key_value_heads=4, head_dim=128, conv_L_cache=7, sliding_window=256)
KIMI_DEFAULTS = dict(vocab_size=163840, hidden_size=2304, intermediate_size=9216, moe_intermediate_size=1024,
                     num_hidden_layers=27, num_attention_heads=32, kv_lora_rank=512, qk_rope_head_dim=64,
                     qk_nope_head_dim=128, v_head_dim=128, linear_num_heads=32, linear_head_dim=128,
                     linear_conv_kernel_dim=4)
KIMI_MOE_DEFAULTS = dict(experts=256, top_k=8, shared=1)
MINIMAX_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, num_experts_per_tok=2, block_size=256)
BAILING_DEFAULTS = dict(vocab_size=157184, hidden_size=2560, intermediate_size=6144, moe_intermediate_size=768,
                        num_hidden_layers=42, num_attention_heads=32, kv_lora_rank=512, qk_rope_head_dim=64,
                        qk_nope_head_dim=128, v_head_dim=128, head_dim=128, short_conv_kernel_size=4,
                        layer_group_size=6, first_k_dense_replace=2)
BAILING_MOE_DEFAULTS = dict(experts=512, top_k=8, shared=1)


def _with_defaults(cfg: dict, defaults: dict) -> dict:
    """The config with the class's defaults for the fields it leaves out (absent or null)."""
    return {**cfg, **{k: v for k, v in defaults.items() if cfg.get(k) is None}}


def _sizes(cfg: dict) -> dict:
    """The sizes every config here has (hidden, layers, heads, vocabulary), each within the engine's bounds."""
    return dict(hidden_size=get_int(cfg, "hidden_size", hi=B.MAX_HIDDEN),
                num_hidden_layers=get_int(cfg, "num_hidden_layers", hi=B.MAX_LAYERS),
                num_attention_heads=get_int(cfg, "num_attention_heads", hi=B.MAX_HEADS),
                vocab_size=get_int(cfg, "vocab_size", hi=B.MAX_VOCAB), hidden_act="silu")


def _per_layer(key: str, types: list, n: int) -> list:
    if len(types) != n:
        raise ConfigError(f"{key}: has {len(types)} entries but num_hidden_layers is {n}")
    return types


def _layer_types(cfg: dict, n: int, choices: tuple[str, ...], default: list[str], rename: dict) -> tuple[str, ...]:
    """layer_types as given (each one of `choices`) or the class's derived default, renamed to the engine's types."""
    types = get_choice_list(cfg, "layer_types", choices)
    types = _per_layer("layer_types", types if types is not None else default, n)
    return tuple(rename.get(t, t) for t in types)


def _mlp_types(cfg: dict, n: int, first_dense: int) -> tuple[str, ...]:
    """Each layer's feed-forward from mlp_layer_types ("dense" / "sparse"), else dense below first_k_dense_replace."""
    types = get_choice_list(cfg, "mlp_layer_types", ("dense", "sparse"))
    types = _per_layer("mlp_layer_types", types if types is not None else
                       ["dense" if i < first_dense else "sparse" for i in range(n)], n)
    return tuple("moe" if t == "sparse" else "dense" for t in types)


# ---- LFM2, LFM2-MoE, LFM3 (short convolutions + attention) ----------------------------------------------------------
def _lfm_attention(cfg: dict, f: dict) -> dict:
    """Lfm2Attention / Lfm3Attention: GQA with a per-head RMSNorm of head_dim on q and k (q_layernorm / q_norm)."""
    f.update(num_key_value_heads=get_int(cfg, "num_key_value_heads", hi=B.MAX_HEADS),
             head_dim=get_int(cfg, "head_dim", default=None, hi=B.MAX_HEAD_DIM), qk_norm=True,
             short_conv=ShortConvSpec(conv_kernel=get_int(cfg, "conv_L_cache", hi=1024),
                                      bias=get_bool(cfg, "conv_bias", False)))
    return f


def _lfm2_ffn_width(cfg: dict, width: int) -> int:
    """Lfm2MLP's width: with block_auto_adjust_ff_dim, ⌊2·width/3⌋, then ⌊block_ffn_dim_multiplier × width⌋ rounded up
    to a multiple of block_multiple_of (Lfm2Config 5.23 refuses a null multiplier)."""
    if not get_bool(cfg, "block_auto_adjust_ff_dim", True):
        return width
    width = int(2 * width / 3)
    width = int(get_float(cfg, "block_ffn_dim_multiplier", 1.0, 1e-6, 1e6) * width)
    multiple = get_int(cfg, "block_multiple_of", default=256, hi=B.MAX_FFN)
    return multiple * -(-width // multiple)


def _lfm_tie(cfg: dict) -> bool:
    """tie_embedding (the checkpoints' name) wins over tie_word_embeddings; both default to true."""
    return get_bool(cfg, "tie_embedding", get_bool(cfg, "tie_word_embeddings", True))


def map_lfm2(cfg: dict) -> dict:
    """LFM2 (models/lfm2/modeling_lfm2.py): short-convolution layers and GQA layers (layer_types, else full_attn_idxs,
    whose default is every layer), a SwiGLU MLP of the adjusted width in every layer (block_ff_dim is
    intermediate_size's alias); embedding_norm is the final norm."""
    cfg = _with_defaults(cfg, LFM2_DEFAULTS)
    f = _lfm_attention(cfg, _sizes(cfg))
    n = f["num_hidden_layers"]
    idxs = get_int_list(cfg, "full_attn_idxs", lo=0, hi=B.MAX_LAYERS)
    attn = set(range(n)) if idxs is None else set(idxs)
    default = ["full_attention" if i in attn else "conv" for i in range(n)]
    f.update(intermediate_size=_lfm2_ffn_width(cfg, get_int(cfg, "block_ff_dim", "intermediate_size",
                                                             hi=B.MAX_FFN)),
             tie_word_embeddings=_lfm_tie(cfg),
             layer_types=_layer_types(cfg, n, ("conv", "full_attention"), default, {}))
    return f


def map_lfm2_moe(cfg: dict) -> dict:
    """LFM2-MoE (models/lfm2_moe/modeling_lfm2_moe.py): LFM2's mixers; the first num_dense_layers layers a SwiGLU MLP
    of intermediate_size (not adjusted), the others routed experts behind a sigmoid router (its expert_bias is a
    buffer). Its configuration derives no layer_types: without them transformers cannot build the model."""
    if cfg.get("layer_types") is None:
        raise ConfigError("layer_types: an lfm2_moe config must list each layer's type (\"conv\" or "
                          "\"full_attention\"); Lfm2MoeConfig derives none and transformers cannot build the model")
    cfg = _with_defaults(cfg, LFM2_MOE_DEFAULTS)
    f = _lfm_attention(cfg, _sizes(cfg))
    n = f["num_hidden_layers"]
    experts = get_int(cfg, "num_experts", hi=B.MAX_EXPERTS)
    f.update(intermediate_size=get_int(cfg, "intermediate_size", hi=B.MAX_FFN), tie_word_embeddings=_lfm_tie(cfg),
             layer_types=_layer_types(cfg, n, ("conv", "full_attention"), [], {}), num_experts=experts,
             num_experts_per_tok=get_int(cfg, "num_experts_per_tok", hi=experts),
             moe_intermediate_size=get_int(cfg, "moe_intermediate_size", hi=B.MAX_FFN),
             first_k_dense_layers=min(get_int(cfg, "num_dense_layers", lo=0, hi=B.MAX_LAYERS), n))
    return f


def map_lfm3(cfg: dict) -> dict:
    """LFM3 (models/lfm3/modeling_lfm3.py): short convolutions (kernel 7) and Qwen3-style full and sliding attention
    (layer_types, else layer i: i % 4 == 2 full, i % 4 == 0 (i > 0) sliding, else conv), sandwich norms (four per
    layer) with use_sandwich_norm, a SwiGLU MLP of intermediate_size; with use_attention_gate a per-head output gate
    g_proj (hidden_size → heads), `attn_output * sigmoid(g_proj(x))` in the model dtype."""
    cfg = _with_defaults(cfg, LFM3_DEFAULTS)
    f = _lfm_attention(cfg, _sizes(cfg))
    n, h, heads = f["num_hidden_layers"], f["hidden_size"], f["num_attention_heads"]
    default = ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0 else "conv"
               for i in range(n)]
    types = _layer_types(cfg, n, ("conv", "full_attention", "sliding_attention"), default, {})
    bias = get_bool(cfg, "attention_bias", False)
    f.update(intermediate_size=get_int(cfg, "intermediate_size", hi=B.MAX_FFN), tie_word_embeddings=_lfm_tie(cfg),
             layer_types=types, qkv_bias=bias, o_bias=bias,
             norms_per_layer=4 if get_bool(cfg, "use_sandwich_norm", True) else 2,
             sliding_window=get_window(cfg) if "sliding_attention" in types else None)
    gated = get_bool(cfg, "use_attention_gate", True)  # Lfm3RotaryEmbedding returns fp32 cos and sin
    f["variant"] = head_gate(h, heads, "sigmoid_head", fp32_rope_tables=True) if gated else \
        VariantSpec(fp32_rope_tables=True)
    return f


def head_gate(h: int, heads: int, kind: str, **more) -> VariantSpec:
    """A per-head attention output gate g_proj (nn.Linear(hidden_size, heads, bias=False)) in every attention layer
    (and `more` of the VariantSpec)."""
    return VariantSpec(attention_tensors=((heads, h),), attention_gate=kind, **more)


# ---- Kimi Linear and Ling 3.0 (KDA + MLA + DeepSeek-style MoE) ------------------------------------------------------
def _linear_attn_config(cfg: dict) -> dict:
    lac = cfg.get("linear_attn_config")
    if lac is None:
        return {}
    if not isinstance(lac, dict):
        raise ConfigError("linear_attn_config: must be an object (num_heads, head_dim, short_conv_kernel_size, "
                          "kda_layers, full_attn_layers)")
    return lac


def _lac_int(lac: dict, key: str, cfg: dict, fallback: str, hi: int) -> int:
    """A KDA size from the checkpoint's linear_attn_config, else the configuration class's own field."""
    if lac.get(key) is not None:
        try:
            return get_int(lac, key, hi=hi)
        except ConfigError as exc:
            raise ConfigError(f"linear_attn_config.{exc}") from None
    return get_int(cfg, fallback, hi=hi)


def _kimi_layer_types(cfg: dict, lac: dict, n: int) -> tuple[str, ...]:
    """KimiLinearConfig.__post_init__: layer_types as given, else linear_attn_config's 1-based kda_layers and
    full_attn_layers, else full attention at every 4th layer from layer 4 (i > 0, i % 4 == 0)."""
    default = ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(n)]
    if cfg.get("layer_types") is None and lac.get("full_attn_layers") is not None and lac.get("kda_layers") is not None:
        default = [None] * n
        for key, kind in (("full_attn_layers", "full_attention"), ("kda_layers", "linear_attention")):
            for i in get_int_list(lac, key, lo=1, hi=n) or []:
                default[i - 1] = kind
        if None in default:
            raise ConfigError(f"linear_attn_config: layer {default.index(None) + 1} is in neither kda_layers nor "
                              f"full_attn_layers")
    return _layer_types(cfg, n, ("linear_attention", "full_attention"), default, {"linear_attention": "kda"})


def _mla_moe_fields(cfg: dict, f: dict, ffn_types: tuple[str, ...], q_lora: bool, moe: dict) -> dict:
    """MLA in the full-attention layers (kv_lora_rank latent, attention_bias on kv_a / q_a and o_proj) and
    DeepSeek-style MoE (fp32 sigmoid router, its e_score_correction_bias a buffer; num_shared_experts shared experts
    in one MLP) in the sparse layers; lm_head never tied (_tied_weights_keys is empty)."""
    bias = get_bool(cfg, "attention_bias", False)
    experts = get_int(cfg, "num_experts", "num_local_experts", default=moe["experts"], lo=0, hi=B.MAX_EXPERTS)
    if "moe" in ffn_types and not experts:
        raise ConfigError("num_experts: the sparse layers of mlp_layer_types need at least one routed expert")
    f.update(family="deepseek", head_dim=None, tie_word_embeddings=False, qkv_bias=bias, o_bias=bias,
             q_lora_rank=get_int(cfg, "q_lora_rank", default=None, hi=B.MAX_HIDDEN) if q_lora else None,
             kv_lora_rank=get_int(cfg, "kv_lora_rank", hi=B.MAX_HIDDEN),
             qk_rope_head_dim=get_int(cfg, "qk_rope_head_dim", hi=B.MAX_HEAD_DIM),
             qk_nope_head_dim=get_int(cfg, "qk_nope_head_dim", hi=B.MAX_HEAD_DIM),
             v_head_dim=get_int(cfg, "v_head_dim", hi=B.MAX_HEAD_DIM),
             intermediate_size=get_int(cfg, "intermediate_size", hi=B.MAX_FFN), ffn_types=ffn_types,
             max_position_embeddings=get_int(cfg, "model_max_length", "max_position_embeddings", default=None,
                                             hi=1 << 40))
    if experts and "moe" in ffn_types:
        f.update(num_experts=experts,
                 num_experts_per_tok=get_int(cfg, "num_experts_per_token", "num_experts_per_tok",
                                             default=min(moe["top_k"], experts), hi=experts),
                 moe_intermediate_size=get_int(cfg, "moe_intermediate_size", hi=B.MAX_FFN),
                 num_shared_experts=get_int(cfg, "num_shared_experts", "n_shared_experts", default=moe["shared"],
                                            lo=0, hi=B.MAX_SHARED_EXPERTS))
    if get_bool(cfg, "tie_word_embeddings", False):
        f["_warnings"] = [f"{cfg.get('model_type')} never ties lm_head to the embedding (its causal-LM class has no "
                          f"tied weights): tie_word_embeddings is ignored"]
    return f


def map_kimi_linear(cfg: dict) -> dict:
    """Kimi Linear (models/kimi_linear/modeling_kimi_linear.py): KDA layers with low-rank forget and output gates
    (sizes from linear_attn_config when the checkpoint has one, else linear_num_heads / linear_head_dim /
    linear_conv_kernel_dim) and MLA without RoPE (the rope part of the key is still shared and cached); a dense MLP
    below first_k_dense_replace (default 1), MoE with shared experts above (mlp_layer_types when written)."""
    cfg = _with_defaults(cfg, KIMI_DEFAULTS)
    lac = _linear_attn_config(cfg)
    f = _sizes(cfg)
    n = f["num_hidden_layers"]
    kda = KDASpec(num_heads=_lac_int(lac, "num_heads", cfg, "linear_num_heads", B.MAX_HEADS),
                  head_dim=_lac_int(lac, "head_dim", cfg, "linear_head_dim", B.MAX_HEAD_DIM),
                  conv_kernel=_lac_int(lac, "short_conv_kernel_size", cfg, "linear_conv_kernel_dim", 1024))
    ffn = _mlp_types(cfg, n, get_int(cfg, "first_k_dense_replace", default=1, lo=0, hi=B.MAX_LAYERS))
    f.update(layer_types=_kimi_layer_types(cfg, lac, n), kda=kda)
    return _mla_moe_fields(cfg, f, ffn, q_lora=True, moe=KIMI_MOE_DEFAULTS)


def map_bailing_hybrid(cfg: dict) -> dict:
    """Ling 3.0's hybrid (models/bailing_hybrid/modeling_bailing_hybrid.py): KDA layers with full-rank forget and
    output gates, its conv weight, A_log and dt_bias kept in fp32 at load, the bounded forget gate with kda_safe_gate;
    MLA with RoPE and no q-LoRA every layer_group_size-th layer; dense MLP below first_k_dense_replace (default 2), MoE
    with shared experts above. KDA's head_dim is linear_head_dim (what to_dict writes) or the checkpoint's head_dim
    (BailingHybridConfig then overwrites head_dim with qk_rope_head_dim). The MLA's per-head output gate g_proj,
    `attn_output * sigmoid(g_proj(x).float()).to(dtype)`; the router DeepSeek-V3's (fp32 input and weight copies,
    sigmoid scores, renormalised per norm_topk_prob). The MTP layer (num_nextn_predict_layers) is not built by
    transformers and counted in mtp_layers only."""
    cfg = _with_defaults(cfg, BAILING_DEFAULTS)
    f = _sizes(cfg)
    n, h, heads = f["num_hidden_layers"], f["hidden_size"], f["num_attention_heads"]
    gate = head_gate(h, heads, "sigmoid_head_fp32", router_fp32_input=True, router_fp32_weight_copy=True,
                     router_renorm=get_bool(cfg, "moe_renormalize", get_bool(cfg, "norm_topk_prob", True)))
    kda = KDASpec(num_heads=get_int(cfg, "linear_num_heads", "num_attention_heads", hi=B.MAX_HEADS),
                  head_dim=get_int(cfg, "linear_head_dim", "head_dim", hi=B.MAX_HEAD_DIM),
                  conv_kernel=get_int(cfg, "linear_conv_kernel_dim", "short_conv_kernel_size", hi=1024),
                  low_rank_gates=False, fp32_conv=True, safe_gate=get_bool(cfg, "kda_safe_gate", True))
    group = get_int(cfg, "layer_group_size", hi=B.MAX_LAYERS)
    default = ["full_attention" if (i + 1) % group == 0 else "linear_attention" for i in range(n)]
    types = _layer_types(cfg, n, ("linear_attention", "full_attention"), default, {"linear_attention": "kda"})
    ffn = _mlp_types(cfg, n, get_int(cfg, "first_k_dense_replace", lo=0, hi=B.MAX_LAYERS))
    f.update(layer_types=types, kda=kda,
             mtp_layers=get_int(cfg, "num_nextn_predict_layers", "num_mtp_layers", default=1, lo=0, hi=64))
    f = _mla_moe_fields(cfg, f, ffn, q_lora=False, moe=BAILING_MOE_DEFAULTS)
    f["variant"] = gate
    return f


# ---- MiniMax-Text-01 (lightning attention + attention, MoE everywhere) ----------------------------------------------
def map_minimax(cfg: dict) -> dict:
    """MiniMax-Text-01 (models/minimax/modeling_minimax.py): lightning attention in the "linear_attention" layers
    (layer_types, else every odd layer), GQA in the others, a Mixtral-style MoE (softmax router, num_local_experts
    experts of intermediate_size) in every layer. MiniMaxCache keeps every token of the attention layers whatever
    sliding_window says (the window only masks)."""
    cfg = _with_defaults(cfg, MINIMAX_DEFAULTS)
    f = _sizes(cfg)
    n, h, heads = f["num_hidden_layers"], f["hidden_size"], f["num_attention_heads"]
    head_dim = get_int(cfg, "head_dim", default=None, hi=B.MAX_HEAD_DIM) or get_int(
        {"head_dim": h // heads}, "head_dim", hi=B.MAX_HEAD_DIM)  # hidden_size / num_attention_heads when not given
    experts = get_int(cfg, "num_local_experts", "num_experts", default=8, hi=B.MAX_EXPERTS)
    default = ["full_attention" if (i + 1) % 2 else "linear_attention" for i in range(n)]
    f.update(num_key_value_heads=get_int(cfg, "num_key_value_heads", default=heads, hi=B.MAX_HEADS),
             head_dim=head_dim, intermediate_size=get_int(cfg, "intermediate_size", hi=B.MAX_FFN),
             tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", False), num_experts=experts,
             num_experts_per_tok=get_int(cfg, "num_experts_per_tok", hi=experts),
             layer_types=_layer_types(cfg, n, ("linear_attention", "full_attention"), default,
                                      {"linear_attention": "lightning_attention"}),
             lightning=LightningSpec(num_heads=heads, head_dim=head_dim,
                                     block_size=get_int(cfg, "block_size", hi=1 << 20)))
    warnings = []
    if get_window(cfg):
        warnings.append("MiniMax masks its attention to sliding_window but MiniMaxCache keeps every token: mapped as "
                        "full attention (the cache exact, attention time an upper bound)")
    n_lightning = f["layer_types"].count("lightning_attention")
    if n_lightning:
        per_layer = decay_buffer_elements(f["lightning"])
        warnings.append(f"the lightning layers' decay buffers ({n_lightning} × {per_layer:,} elements in the model "
                        f"dtype) are buffers, not parameters, and are not counted")
    f["_warnings"] = warnings
    return f


# ---- Inkling (refused) -----------------------------------------------------------------------------------------------
def map_inkling(cfg: dict) -> dict:
    """Inkling and Inkling 2 (models/inkling, models/inkling2): refused, naming what the engine lacks."""
    lacks = ("a relative-position attention bias (r_proj, rel_logits_proj), fp32 short convolutions on the keys and "
             "values and after the attention and the MLP (four per layer), and a router normalised over sink shared "
             "experts")
    if cfg.get("model_type") == "inkling2_text":
        lacks = ("block attention residuals (softmax mixtures over earlier blocks' states), dynamic short "
                 "convolutions on the keys and values, attention sinks and output gates, and a soft-capped MoE")
    raise ConfigError(f"model_type: {cfg.get('model_type')!r} is not modelled: the engine has no layer kind for "
                      f"{lacks}")


LINEAR_MAPPERS = {"lfm2": map_lfm2, "lfm2_moe": map_lfm2_moe, "lfm3": map_lfm3, "kimi_linear": map_kimi_linear,
                  "minimax": map_minimax, "bailing_hybrid": map_bailing_hybrid, "inkling_text": map_inkling,
                  "inkling2_text": map_inkling}
