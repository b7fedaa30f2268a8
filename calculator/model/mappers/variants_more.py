"""More mappings of issue 21's variant decoders, registered in calculator.model.mappers.variants.VARIANT_MAPPERS: dense
types whose block differs from Llama's in a few tensors, two MLA dense models, the remaining MoE types, and the
types refused with what the engine lacks (the older GPT-style layouts: gpt_style.py). Each config.json is read with its
transformers 5.23 configuration class's defaults and field names; each mapper cites the modeling file it mirrors;
tests/model/mappers/test_variants.py holds every one to the real model's parameter and tensor counts.
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.config_read import (ConfigError, common_fields, get_bool, get_choice_list, get_float, get_int,
                                          get_int_list, get_str, get_window, partial_rotary_dim, router_group_fields,
                                          sliding_fields)
from calculator.model.variants import VariantSpec

_LAYOUT = "nearest measured block layout"


def untraced(model_type: str, layout: str = _LAYOUT) -> list[str]:
    """The warning of a mapping whose parameters are exact and whose saved activations were not measured."""
    return [f"{model_type}: parameters follow transformers' model exactly; saved activations are estimated from the "
            f"{layout} (this architecture's layer was not traced)"]


def with_layer_types(cfg: dict, n: int, sliding) -> dict:
    """The config with layer_types as its configuration class derives them when absent (`sliding(i)`: whether layer
    i slides), so that sliding_fields reads them."""
    if cfg.get("layer_types") is None and get_window(cfg):
        cfg = {**cfg, "layer_types": ["sliding_attention" if sliding(i) else "full_attention" for i in range(n)]}
    return cfg


def dense_layers(cfg: dict, n: int, default_dense) -> tuple[int, ...]:
    """Layers with a dense MLP: from mlp_layer_types ("dense" / "sparse") or as the class derives them."""
    types = get_choice_list(cfg, "mlp_layer_types", ("dense", "sparse"))
    if types is None:
        return tuple(i for i in range(n) if default_dense(i))
    if len(types) != n:
        raise ConfigError(f"mlp_layer_types: has {len(types)} entries but num_hidden_layers is {n}")
    return tuple(i for i, t in enumerate(types) if t == "dense")


def act_name(cfg: dict, default: str = "silu", *keys: str) -> str:
    return get_str(cfg, *(keys or ("hidden_act",)), default=default)


def _llama(cfg: dict, **more) -> dict:
    """Llama's fields with attention_bias on q/k/v/o and mlp_bias."""
    f = common_fields(cfg)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(qkv_bias=bias, o_bias=bias, mlp_bias=get_bool(cfg, "mlp_bias", False), hidden_act=act_name(cfg))
    f.update(more)
    return f


# ---- dense ----------------------------------------------------------------------------------------------------

def map_apertus(cfg: dict) -> dict:
    """Apertus (models/apertus/modeling_apertus.py): q/k/v/o per attention_bias, per-head q/k norms, a plain up/down
    MLP without bias whose xIELU activation (hidden_act "xielu", the default) holds two scalar Parameters
    (alpha_p, alpha_n) and runs in Python (five f-wide tensors and a mask kept)."""
    act = act_name(cfg, "xielu")
    f = _llama(cfg, qk_norm=True, gated_mlp=False, mlp_bias=False)
    xielu = act == "xielu"
    f.update(hidden_act=act, variant=VariantSpec(mlp_tensors=((1,), (1,)) if xielu else (),
                                                 mlp_act="xielu" if xielu else "hf"))
    return f


def map_nanochat(cfg: dict) -> dict:
    """nanochat (models/nanochat/modeling_nanochat.py): q/k/v/o per attention_bias, a plain fc1/fc2 MLP (relu²),
    every RMSNorm (input, post-attention, q/k after RoPE, final) without a weight, so none keeps a normalised
    model-dtype copy (VariantSpec.norm "weightless"); final logit soft-capping."""
    f = _llama(cfg, gated_mlp=False, mlp_bias=False, qk_norm=True, hidden_act=act_name(cfg, "relu2"),
               final_logit_softcapping=get_float(cfg, "final_logit_softcapping", 15.0, 1e-6, 1e9),
               variant=VariantSpec(norm_params="none", qk_norm_layout="none", norm="weightless"),
               _warnings=untraced("nanochat"))
    return f


def map_jais2(cfg: dict) -> dict:
    """Jais-2 (models/jais2/modeling_jais2.py): q/k/v/o per attention_bias (default true), a plain up/down MLP (relu²)
    biased per mlp_bias (default true), LayerNorms with a bias."""
    f = common_fields(cfg)
    bias = get_bool(cfg, "attention_bias", True)
    f.update(qkv_bias=bias, o_bias=bias, mlp_bias=get_bool(cfg, "mlp_bias", True), gated_mlp=False,
             hidden_act=act_name(cfg, "relu2"), norm_type="layernorm", _warnings=untraced("jais2"))
    return f


def map_hyperclovax(cfg: dict) -> dict:
    """HyperCLOVA X (models/hyperclovax/modeling_hyperclovax.py): Llama with post_norm1 / post_norm2 on the sublayer
    outputs when use_post_norm (Peri-LN); muP multipliers hold no tensor."""
    post = get_bool(cfg, "use_post_norm", True)
    return _llama(cfg, norms_per_layer=4 if post else 2, _warnings=untraced("hyperclovax"))


def map_olmo(cfg: dict) -> dict:
    """OLMo (models/olmo/modeling_olmo.py): Llama's q/k/v/o (attention_bias) and SwiGLU MLP with LayerNorms that hold
    no parameters (OlmoLayerNorm: non-affine F.layer_norm on x.float(), VariantSpec.norm "fp32_input_layernorm")."""
    return _llama(cfg, norm_type="layernorm", mlp_bias=False, _warnings=untraced("olmo"),
                  variant=VariantSpec(norm_params="none", norm="fp32_input_layernorm"))


def map_bitnet(cfg: dict) -> dict:
    """BitNet (models/bitnet/modeling_bitnet.py): Llama's tensors (dense bf16 weights in transformers) plus
    attn_sub_norm (h) before o_proj and ffn_sub_norm (intermediate_size) before down_proj; relu² SwiGLU. Both
    sub-norms are HF RMSNorms whose copies are saved (VariantSpec.sub_norms)."""
    f = _llama(cfg, mlp_bias=False, hidden_act=act_name(cfg, "relu2"), _warnings=untraced("bitnet"))
    f["variant"] = VariantSpec(attention_tensors=((f["hidden_size"],),), mlp_tensors=((f["intermediate_size"],),),
                               sub_norms=True)
    return f


def map_diffllama(cfg: dict) -> dict:
    """DiffLlama (models/diffllama/modeling_diffllama.py): Llama plus lambda_q1, lambda_k1, lambda_q2, lambda_k2
    (head_dim each) per layer; its group norm has no weight. The differential attention calls the attention core
    twice (shared q/k, the two halves of v) and group-normalises their difference (VariantSpec.differential)."""
    f = _llama(cfg, mlp_bias=False, _warnings=untraced("diffllama"))
    d = f["head_dim"] or f["hidden_size"] // f["num_attention_heads"]
    f["variant"] = VariantSpec(attention_tensors=4 * ((d,),), differential=True)
    return f


def map_cohere_compass(cfg: dict) -> dict:
    """Cohere Compass text model (models/cohere_compass/modeling_cohere_compass.py): Cohere2's parallel block (one
    weight-only LayerNorm computed in fp32 read by attention and the SwiGLU MLP), q/k/v/o per attention_bias, head_dim
    always hidden_size / heads, layers sliding only where layer_types says; tied by default."""
    f = _llama(cfg, head_dim=None, mlp_bias=False, norm_type="layernorm", norms_per_layer=1, parallel_residual=True,
               tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
               variant=VariantSpec(norm_params="weight", norm="fp32_layernorm"), _warnings=untraced("cohere_compass"))
    sliding_fields(cfg, f)
    return f


def _mla(cfg: dict, tie: bool) -> dict:
    """DeepSeek's multi-head latent attention (q_a / q_b or q_proj, kv_a_with_mqa, kv_b, o; attention_bias on q_a,
    kv_a and o) over a dense SwiGLU MLP."""
    f = common_fields(cfg)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(q_lora_rank=get_int(cfg, "q_lora_rank", default=None, hi=B.MAX_HIDDEN),
             kv_lora_rank=get_int(cfg, "kv_lora_rank", hi=B.MAX_HIDDEN),
             qk_rope_head_dim=get_int(cfg, "qk_rope_head_dim", hi=B.MAX_HEAD_DIM),
             qk_nope_head_dim=get_int(cfg, "qk_nope_head_dim", hi=B.MAX_HEAD_DIM),
             v_head_dim=get_int(cfg, "v_head_dim", hi=B.MAX_HEAD_DIM), head_dim=None, qkv_bias=bias, o_bias=bias,
             mlp_bias=get_bool(cfg, "mlp_bias", False), hidden_act=act_name(cfg),
             tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", tie))
    return f


def map_youtu(cfg: dict) -> dict:
    """Youtu-LLM (models/youtu/modeling_youtu.py): DeepSeek-V3's MLA (q_lora_rank may be null) and a dense SwiGLU
    MLP in every layer; tied by default."""
    f = _mla(cfg, True)
    f["_warnings"] = untraced("youtu", "DeepSeek MLA block")
    return f


def map_minicpm3(cfg: dict) -> dict:
    """MiniCPM3 (models/minicpm3/modeling_minicpm3.py): DeepSeek-V2's MLA and a dense SwiGLU MLP biased per mlp_bias;
    tied by default; muP scales hold no tensor."""
    f = _mla(cfg, True)
    f["_warnings"] = untraced("minicpm3", "DeepSeek MLA block")
    return f


# ---- MoE and sinks ------------------------------------------------------------------------------------------------

def map_granite_swa(cfg: dict) -> dict:
    """Granite-SWA (models/granite_swa/modeling_granite_swa.py) and Granite-MoE-SWA (models/granitemoe_swa): Granite's
    layer plus learned attention sinks (heads,) in every layer; layers slide unless every fourth (i % 4 == 0); the MoE
    type has num_local_experts fused experts of width intermediate_size and an optional shared MLP
    (shared_intermediate_size, input_linear fused); tied by default. Eager sinks scale the output by
    sigmoid(logsumexp − sink) (eager_sinks "lse_scale"); the router softmaxes its top-k logits in fp32 and casts
    the weights to the model dtype (GraniteMoeSWATopKRouter)."""
    model_type = get_str(cfg, "model_type")
    moe = model_type == "granitemoe_swa"
    f = _llama(cfg, attention_sinks=True, tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", not moe),
               variant=VariantSpec(eager_sinks="lse_scale", router="topk_softmax", fp32_routing_weights=not moe),
               _warnings=untraced(model_type, "GPT-OSS (sinks) block"))
    if moe:
        experts = get_int(cfg, "num_local_experts", "num_experts", lo=1, hi=B.MAX_EXPERTS)
        shared = get_int(cfg, "shared_intermediate_size", default=0, lo=0, hi=B.MAX_FFN)
        f.update(mlp_bias=False, num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok",
                                                                                  hi=experts))
        if shared:
            f.update(shared_expert_intermediate_size=shared, fused_gate_up=True)
    sliding_fields(with_layer_types(cfg, f["num_hidden_layers"], lambda i: i % 4 != 0), f)
    return f


def map_flint(cfg: dict) -> dict:
    """Flint (models/flint/modeling_flint.py): q/k/v/o per attention_bias, per-head q/k norms, fp32 attention sinks in
    every layer, RMSNorms multiplying their weight in fp32; dense in mlp_only_layers (default [0, 1]) and where
    (i + 1) % decoder_sparse_step != 0, else experts with a shared MLP of shared_expert_intermediate_size behind a
    fp32 sigmoid router; full attention on layers 0, 1, i % 4 == 1 and the last. Eager scores in fp32 (eager_sinks)."""
    f = _llama(cfg, qk_norm=True, attention_sinks=True, mlp_bias=False, _warnings=untraced("flint"))
    n, h, a = f["num_hidden_layers"], f["hidden_size"], f["num_attention_heads"]
    experts = get_int(cfg, "num_experts", default=256, lo=0, hi=B.MAX_EXPERTS)
    only = set(get_int_list(cfg, "mlp_only_layers", lo=0, hi=B.MAX_LAYERS) or [0, 1])
    step = get_int(cfg, "decoder_sparse_step", default=1, hi=B.MAX_LAYERS)
    f["variant"] = VariantSpec(norm="fp32_weight", fp32_per_moe_layer=experts * h, fp32_per_layer=a,
                               router_fp32_input=True, eager_sinks="fp32")
    if experts:
        f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", default=6, hi=experts),
                 moe_intermediate_size=get_int(cfg, "moe_intermediate_size", default=512, hi=B.MAX_FFN),
                 shared_expert_intermediate_size=get_int(cfg, "shared_expert_intermediate_size", default=1024,
                                                         hi=B.MAX_FFN),
                 dense_layer_indices=tuple(i for i in range(n) if i in only or (i + 1) % step != 0))
    sliding_fields(with_layer_types(cfg, n, lambda i: not (i < 2 or i % 4 == 1 or i == n - 1)), f)
    return f


def map_beam(cfg: dict) -> dict:
    """Beam (models/beam/modeling_beam.py): q/k/v/o per attention_bias, per-head q/k norms, a sigmoid head gate
    gate_proj (heads·head_dim × h) with gate_bias (heads,), four RMSNorms multiplying their weight in fp32,
    mlp_layer_types (default three dense), experts without a shared one behind DeepSeek-V3's group router (fp32
    weight); full attention every sixth and the last layer. BeamMLP and BeamExperts evaluate SwiGLU in fp32
    (mlp_act "fp32_glu")."""
    f = _llama(cfg, qk_norm=True, norms_per_layer=4, mlp_bias=False, _warnings=untraced("beam"),
               final_logit_softcapping=get_float(cfg, "final_logit_softcapping", 30.0, 1e-6, 1e9))
    n, h, a = f["num_hidden_layers"], f["hidden_size"], f["num_attention_heads"]
    d = f["head_dim"] or h // a
    experts = get_int(cfg, "num_experts", default=256, lo=1, hi=B.MAX_EXPERTS)
    f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", default=8, hi=experts),
             moe_intermediate_size=get_int(cfg, "moe_intermediate_size", default=2560, hi=B.MAX_FFN),
             dense_layer_indices=dense_layers(cfg, n, lambda i: i < 3),
             variant=VariantSpec(attention_tensors=((a * d, h), (a,)), norm="fp32_weight", attention_gate="sigmoid",
                                 mlp_act="fp32_glu",
                                 fp32_per_moe_layer=experts * h, router_fp32_input=True,
                                 router_renorm=get_bool(cfg, "norm_topk_prob", True)))
    sliding_fields(with_layer_types(cfg, n, lambda i: (i + 1) % 6 != 0 and i != n - 1), f)
    return f


def map_mimo_v2_flash(cfg: dict) -> dict:
    """MiMo-V2-Flash (models/mimo_v2_flash/modeling_mimo_v2_flash.py, configuration_mimo_v2_flash.py): q/k/v per
    attention_bias, o_proj without; q and k heads of head_dim (192), v heads of v_head_dim (128); sliding layers have
    2 × num_key_value_heads key/value heads and sinks (heads,), full ones (layer 0 and every sixth) neither
    (MiMoV2FlashAttention: swa_num_key_value_heads, swa_attention_sinks); sliding_window = sliding_window_size + 1;
    partial RoPE on int(head_dim · 0.334) channels; mlp_layer_types (one dense layer, then experts without a shared
    one behind DeepSeek-V3's fp32 sigmoid router, e_score_correction_bias a buffer). The eager core subtracts the row
    max and softmaxes in the model dtype on every layer, over [scores | sink] on sliding ones (eager_softmax "max";
    the model declares no SDPA). Hub keys transformers ignores must agree with what it builds."""
    f = _llama(cfg, o_bias=False, family="deepseek", head_dim=get_int(cfg, "head_dim", default=192,
                                                                      hi=B.MAX_HEAD_DIM))
    n, kv, d = f["num_hidden_layers"], f["num_key_value_heads"] or f["num_attention_heads"], f["head_dim"]
    v = get_int(cfg, "v_head_dim", default=128, hi=B.MAX_HEAD_DIM)
    for key, built in (("swa_num_key_value_heads", 2 * kv), ("swa_head_dim", d), ("swa_v_head_dim", v),
                       ("swa_num_attention_heads", f["num_attention_heads"])):
        if cfg.get(key) is not None and get_int(cfg, key, hi=B.MAX_HEADS * B.MAX_HEAD_DIM) != built:
            raise ConfigError(f"{key}: transformers builds {built} (MiMoV2FlashAttention), not {cfg[key]}")
    experts = get_int(cfg, "n_routed_experts", "num_local_experts", default=256, lo=1, hi=B.MAX_EXPERTS)
    rope = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    full_rope = rope.get("full_attention") if isinstance(rope.get("full_attention"), dict) else rope
    window = (get_int(cfg, "sliding_window_size", hi=1 << 30) + 1 if cfg.get("sliding_window_size") is not None
              else get_window(cfg) or 129)
    f.update(v_head_dim=v, swa_num_key_value_heads=2 * kv, swa_attention_sinks=True,
             rotary_dim=partial_rotary_dim({**cfg, "rope_parameters": full_rope}, d, 0.334),
             num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", default=8, hi=experts),
             moe_intermediate_size=get_int(cfg, "moe_intermediate_size", default=2048, hi=B.MAX_FFN),
             dense_layer_indices=dense_layers(cfg, n, lambda i: i == 0),
             variant=VariantSpec(eager_softmax="max", router_fp32_input=True, router_fp32_weight_copy=True),
             **router_group_fields(cfg, experts))
    sliding_fields(with_layer_types({**cfg, "sliding_window": window}, n, lambda i: i and (i + 1) % 6), f)
    built = {"hybrid_layer_pattern": [int(f["layer_types"][i] == "sliding_attention") for i in range(n)],
             "moe_layer_freq": [int(i not in f["dense_layer_indices"]) for i in range(n)]}
    for key, layers in built.items():  # the checkpoint's per-layer lists, which MiMoV2FlashConfig does not read
        if cfg.get(key) is not None and get_int_list(cfg, key, lo=0, hi=1) != layers:
            raise ConfigError(f"{key}: transformers builds {layers} (configuration_mimo_v2_flash.py defaults)")
    for key, sinks in (("add_swa_attention_sink_bias", True), ("add_full_attention_sink_bias", False)):
        if get_bool(cfg, key, sinks) != sinks:
            raise ConfigError(f"{key}: MiMoV2FlashAttention builds sinks on sliding layers only")
    return f


def refuse(model_type: str, lacks: str):
    """A mapper that refuses `model_type`, saying what the engine lacks."""
    def mapper(cfg: dict) -> dict:
        raise ConfigError(f"model_type: {model_type!r} cannot be computed exactly yet: {lacks}")
    mapper.__doc__ = f"{model_type}: refused ({lacks})."
    mapper.refuses = True  # hf_config.REFUSED_MODEL_TYPES: known, not supported
    return mapper


MORE_VARIANT_MAPPERS: dict = {
    "apertus": map_apertus, "nanochat": map_nanochat, "jais2": map_jais2, "hyperclovax": map_hyperclovax,
    "olmo": map_olmo, "bitnet": map_bitnet, "diffllama": map_diffllama, "cohere_compass_text": map_cohere_compass,
    "cohere_compass": map_cohere_compass, "youtu": map_youtu, "minicpm3": map_minicpm3,
    "granite_swa": map_granite_swa, "granitemoe_swa": map_granite_swa, "flint": map_flint, "beam": map_beam,
    "mimo_v2_flash": map_mimo_v2_flash,
    # models/jetmoe/modeling_jetmoe.py
    "jetmoe": refuse("jetmoe", "its attention is a mixture of query-head experts (MoA) with a router of its own; "
                     "the engine's attention has one set of query heads"),
    # models/doge/modeling_doge.py
    "doge": refuse("doge", "its dynamic mask (A, dt_proj) requires grad, which sends SDPA down the math path with "
                   "fp32 score-sized tensors per layer, and its CDMoE retrieves single-neuron experts; the engine "
                   "models neither"),
    # models/zaya/modeling_zaya.py
    "zaya": refuse("zaya", "its CCA attention holds depthwise and grouped convolutions over q and k with a "
                   "recurrent value state, and its router is an MLP with a skip class; the engine models neither"),
}
