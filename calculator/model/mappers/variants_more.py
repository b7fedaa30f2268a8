"""More mappings of issue 21's variant decoders, registered in calculator.model.mappers.variants.VARIANT_MAPPERS: dense
types whose block differs from Llama's in a few tensors, the older GPT-style layouts, two MLA dense models, the
remaining MoE types, and the types refused with what the engine lacks. Each config.json is read with its
transformers 5.23 configuration class's defaults and field names; each mapper cites the modeling file it mirrors;
tests/model/mappers/test_variants.py holds every one to the real model's parameter and tensor counts.
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.config_read import (ConfigError, common_fields, get_bool, get_choice_list, get_float, get_int,
                                          get_int_list, get_str, get_window, sliding_fields)
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


def _act(cfg: dict, default: str = "silu", *keys: str) -> str:
    return get_str(cfg, *(keys or ("hidden_act",)), default=default)


def _llama(cfg: dict, **more) -> dict:
    """Llama's fields with attention_bias on q/k/v/o and mlp_bias."""
    f = common_fields(cfg)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(qkv_bias=bias, o_bias=bias, mlp_bias=get_bool(cfg, "mlp_bias", False), hidden_act=_act(cfg))
    f.update(more)
    return f


# ---- dense ----------------------------------------------------------------------------------------------------

def map_apertus(cfg: dict) -> dict:
    """Apertus (models/apertus/modeling_apertus.py): q/k/v/o per attention_bias, per-head q/k norms, a plain up/down
    MLP without bias whose xIELU activation (hidden_act "xielu", the default) holds two scalar Parameters
    (alpha_p, alpha_n) and runs in Python (five f-wide tensors and a mask kept)."""
    act = _act(cfg, "xielu")
    f = _llama(cfg, qk_norm=True, gated_mlp=False, mlp_bias=False)
    xielu = act == "xielu"
    f.update(hidden_act=act, variant=VariantSpec(mlp_tensors=((1,), (1,)) if xielu else (),
                                                 mlp_act="xielu" if xielu else "hf"))
    return f


def map_nanochat(cfg: dict) -> dict:
    """nanochat (models/nanochat/modeling_nanochat.py): q/k/v/o per attention_bias, a plain fc1/fc2 MLP (relu²),
    every RMSNorm (input, post-attention, q/k after RoPE, final) without a weight, so none keeps a normalised
    model-dtype copy (VariantSpec.norm "weightless"); final logit soft-capping."""
    f = _llama(cfg, gated_mlp=False, mlp_bias=False, qk_norm=True, hidden_act=_act(cfg, "relu2"),
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
             hidden_act=_act(cfg, "relu2"), norm_type="layernorm", _warnings=untraced("jais2"))
    return f


def map_hyperclovax(cfg: dict) -> dict:
    """HyperCLOVA X (models/hyperclovax/modeling_hyperclovax.py): Llama with post_norm1 / post_norm2 on the sublayer
    outputs when use_post_norm (Peri-LN); muP multipliers hold no tensor."""
    post = get_bool(cfg, "use_post_norm", True)
    return _llama(cfg, norms_per_layer=4 if post else 2, _warnings=untraced("hyperclovax"))


def map_olmo(cfg: dict) -> dict:
    """OLMo (models/olmo/modeling_olmo.py): Llama's q/k/v/o (attention_bias) and SwiGLU MLP with LayerNorms that hold
    no parameters (OlmoLayerNorm: non-affine, computed in fp32)."""
    return _llama(cfg, norm_type="layernorm", mlp_bias=False, variant=VariantSpec(norm_params="none"),
                  _warnings=untraced("olmo"))


def map_bitnet(cfg: dict) -> dict:
    """BitNet (models/bitnet/modeling_bitnet.py): Llama's tensors (dense bf16 weights in transformers) plus
    attn_sub_norm (h) before o_proj and ffn_sub_norm (intermediate_size) before down_proj; relu² SwiGLU. Both
    sub-norms are HF RMSNorms whose copies are saved (VariantSpec.sub_norms)."""
    f = _llama(cfg, mlp_bias=False, hidden_act=_act(cfg, "relu2"), _warnings=untraced("bitnet"))
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
             mlp_bias=get_bool(cfg, "mlp_bias", False), hidden_act=_act(cfg),
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


# ---- GPT-style layouts -----------------------------------------------------------------------------------------

def _gpt(cfg: dict, h_keys: tuple, layer_keys: tuple, head_keys: tuple, **more) -> dict:
    h = get_int(cfg, *h_keys, hi=B.MAX_HIDDEN)
    f = dict(hidden_size=h, num_hidden_layers=get_int(cfg, *layer_keys, hi=B.MAX_LAYERS),
             num_attention_heads=get_int(cfg, *head_keys, hi=B.MAX_HEADS), vocab_size=get_int(cfg, "vocab_size",
                                                                                             hi=B.MAX_VOCAB),
             gated_mlp=False, norm_type="layernorm", mlp_bias=True)
    f.update(more)
    return f


def map_gptj(cfg: dict) -> dict:
    """GPT-J (models/gptj/modeling_gptj.py) and CodeGen (models/codegen/modeling_codegen.py): one LayerNorm per layer
    read by attention and MLP in parallel, bias-free q/k/v (CodeGen: one fused qkv_proj) and out_proj, fc_in / fc_out
    with a bias (n_inner or 4·h), rotary positions, an LM head with a bias."""
    model_type = get_str(cfg, "model_type")
    h = get_int(cfg, "n_embd", "hidden_size", hi=B.MAX_HIDDEN)
    return _gpt(cfg, ("n_embd", "hidden_size"), ("n_layer", "num_hidden_layers"), ("n_head", "num_attention_heads"),
                intermediate_size=get_int(cfg, "n_inner", default=4 * h, hi=B.MAX_FFN), norms_per_layer=1,
                parallel_residual=True, fused_qkv=model_type == "codegen", hidden_act=_act(cfg, "gelu_new",
                                                                                           "activation_function"),
                tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", False),
                variant=VariantSpec(lm_head_bias=True), _warnings=untraced(model_type, "GPT-NeoX block"))


def map_gpt_neo(cfg: dict) -> dict:
    """GPT-Neo (models/gpt_neo/modeling_gpt_neo.py): learned positions, two LayerNorms with a bias, bias-free q/k/v,
    out_proj and c_fc / c_proj with a bias (intermediate_size or 4·h); "local" layers (attention_types) attend within
    window_size tokens; tied by default."""
    h = get_int(cfg, "hidden_size", hi=B.MAX_HIDDEN)
    n = get_int(cfg, "num_layers", "num_hidden_layers", hi=B.MAX_LAYERS)
    kinds = get_choice_list(cfg, "attention_layers", ("global", "local"))
    if kinds is None:
        spec = cfg.get("attention_types") or [[["global", "local"], n // 2]]
        try:
            kinds = [k for pattern, times in spec for _ in range(times) for k in pattern]
        except (TypeError, ValueError):
            raise ConfigError("attention_types: must be a list of [[kinds], repeats]") from None
    if len(kinds) != n:
        raise ConfigError(f"attention_layers: has {len(kinds)} entries but num_layers is {n}")
    f = _gpt(cfg, ("hidden_size",), ("num_layers", "num_hidden_layers"), ("num_heads", "num_attention_heads"),
             intermediate_size=get_int(cfg, "intermediate_size", default=4 * h, hi=B.MAX_FFN), o_bias=True,
             hidden_act=_act(cfg, "gelu_new", "activation_function"),
             tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
             learned_position_embeddings=get_int(cfg, "max_position_embeddings", default=2048, hi=B.MAX_POSITIONS),
             _warnings=untraced("gpt_neo", "GPT-2 block"))
    window = get_int(cfg, "window_size", default=256, hi=B.MAX_WINDOW)
    if "local" in kinds:
        f.update(layer_types=tuple("sliding_attention" if k == "local" else "full_attention" for k in kinds),
                 sliding_window=window)
    return f


def map_bloom(cfg: dict) -> dict:
    """BLOOM (models/bloom/modeling_bloom.py): a LayerNorm (with bias) on the embedding, fused query_key_value and
    dense with biases, a 4·h MLP with biases, LayerNorms with a bias, ALiBi (no rotary), tied."""
    h = get_int(cfg, "hidden_size", "n_embed", hi=B.MAX_HIDDEN)
    return _gpt(cfg, ("hidden_size", "n_embed"), ("n_layer", "num_hidden_layers"), ("n_head", "num_attention_heads"),
                intermediate_size=4 * h, qkv_bias=True, o_bias=True, fused_qkv=True, hidden_act="gelu",
                tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
                variant=VariantSpec(outer_tensors=((h,), (h,))), _warnings=untraced("bloom", "GPT-NeoX block"))


def map_mpt(cfg: dict) -> dict:
    """MPT (models/mpt/modeling_mpt.py): fused Wqkv and out_proj without bias, LayerNorms whose bias is removed, an
    MLP of 4·d_model whatever expansion_ratio says, ALiBi, tied."""
    h = get_int(cfg, "d_model", "hidden_size", hi=B.MAX_HIDDEN)
    return _gpt(cfg, ("d_model", "hidden_size"), ("n_layers", "num_hidden_layers"), ("n_heads", "num_attention_heads"),
                intermediate_size=4 * h, mlp_bias=False, fused_qkv=True, hidden_act="gelu",
                tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
                variant=VariantSpec(norm_params="weight"), _warnings=untraced("mpt", "GPT-NeoX block"))


def map_opt(cfg: dict) -> dict:
    """OPT (models/opt/modeling_opt.py): learned positions with an offset of 2, q/k/v/out and fc1 / fc2 biased per
    enable_bias, LayerNorms (parameters per layer_norm_elementwise_affine), ReLU, tied by default. OPTDecoderLayer
    drops out (config.dropout) after attention and fc2; the probabilities per attention_dropout (default 0); the
    decoder none on the embeddings."""
    h = get_int(cfg, "hidden_size", hi=B.MAX_HIDDEN)
    if get_int(cfg, "word_embed_proj_dim", default=h, hi=B.MAX_HIDDEN) != h:
        raise ConfigError("word_embed_proj_dim: an embedding narrower than hidden_size (with project_in / "
                          "project_out) is not modelled; the engine's embedding and LM head are hidden_size wide")
    if not get_bool(cfg, "do_layer_norm_before", True) or get_bool(cfg, "_remove_final_layer_norm", False):
        raise ConfigError("do_layer_norm_before: OPT-350m's post-norm layout without a final LayerNorm is not "
                          "modelled")
    bias = get_bool(cfg, "enable_bias", True)
    affine = get_bool(cfg, "layer_norm_elementwise_affine", True)
    return _gpt(cfg, ("hidden_size",), ("num_hidden_layers",), ("num_attention_heads",),
                intermediate_size=get_int(cfg, "ffn_dim", hi=B.MAX_FFN), qkv_bias=bias, o_bias=bias, mlp_bias=bias,
                hidden_act=_act(cfg, "relu", "activation_function"),
                tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
                learned_position_embeddings=get_int(cfg, "max_position_embeddings", default=2048,
                                                    hi=B.MAX_POSITIONS - 2) + 2,
                dropout=get_float(cfg, "dropout", 0.1, 0.0, 0.999),
                variant=VariantSpec(norm_params="default" if affine else "none", embedding_dropout=False,
                                    attention_dropout=get_float(cfg, "attention_dropout", 0.0, 0.0, 0.999) > 0),
                _warnings=untraced("opt", "GPT-2 block"))


def map_xglm(cfg: dict) -> dict:
    """XGLM (models/xglm/modeling_xglm.py) and BioGPT (models/biogpt/modeling_biogpt.py): biased q/k/v/out and
    fc1 / fc2, two LayerNorms per layer and a final one, tied; XGLM's positions are a sinusoidal buffer, BioGPT's
    learned with an offset of 2. Both drop out the embeddings, after attention and fc2 (dropout / hidden_dropout_prob),
    the attention probabilities (attention_dropout / attention_probs_dropout_prob) and the activation
    (activation_dropout); their eager softmax runs in the model dtype (bf16; XGLM upcasts fp16 only), and XGLM's
    XGLMAttention clamps the masked scores (torch.max(scores, finfo.min))."""
    model_type = get_str(cfg, "model_type")
    bio = model_type == "biogpt"
    variant = VariantSpec(eager_softmax="model", score_clamp=not bio, activation_dropout=get_float(
        cfg, "activation_dropout", 0.0, 0.0, 0.999) > 0, attention_dropout=get_float(
        cfg, "attention_probs_dropout_prob" if bio else "attention_dropout", 0.1, 0.0, 0.999) > 0)
    positions = get_int(cfg, "max_position_embeddings", default=1024 if bio else 2048, hi=B.MAX_POSITIONS - 2)
    return _gpt(cfg, ("hidden_size", "d_model") if bio else ("d_model", "hidden_size"),
                ("num_hidden_layers",) if bio else ("num_layers", "num_hidden_layers"),
                ("num_attention_heads",) if bio else ("attention_heads", "num_attention_heads"),
                intermediate_size=get_int(cfg, "intermediate_size" if bio else "ffn_dim", hi=B.MAX_FFN),
                qkv_bias=True, o_bias=True, hidden_act=_act(cfg, "gelu", "hidden_act" if bio else
                                                            "activation_function"),
                tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
                learned_position_embeddings=positions + 2 if bio else 0, variant=variant,
                dropout=get_float(cfg, "hidden_dropout_prob" if bio else "dropout", 0.1, 0.0, 0.999),
                _warnings=untraced(model_type, "GPT-2 block"))


def map_persimmon(cfg: dict) -> dict:
    """Persimmon (models/persimmon/modeling_persimmon.py): fused query_key_value and dense with biases, per-head
    LayerNorms with a bias on q and k (qk_layernorm, default true), a plain biased MLP (relu²), LayerNorms with a
    bias, partial rotary; multi-head attention."""
    f = common_fields(cfg)
    f.update(num_key_value_heads=None, head_dim=None, qkv_bias=True, o_bias=True, mlp_bias=True, fused_qkv=True,
             gated_mlp=False, norm_type="layernorm", hidden_act=_act(cfg, "relu2"),
             qk_norm=get_bool(cfg, "qk_layernorm", True), variant=VariantSpec(qk_norm_layout="layernorm_head"),
             _warnings=untraced("persimmon", "GPT-NeoX block"))
    return f


# ---- MoE and sinks ------------------------------------------------------------------------------------------------

def map_granite_swa(cfg: dict) -> dict:
    """Granite-SWA (models/granite_swa/modeling_granite_swa.py) and Granite-MoE-SWA (models/granitemoe_swa): Granite's
    layer plus learned attention sinks (heads,) in every layer; layers slide unless every fourth (i % 4 == 0); the MoE
    type has num_local_experts fused experts of width intermediate_size and an optional shared MLP
    (shared_intermediate_size, input_linear fused); tied by default."""
    model_type = get_str(cfg, "model_type")
    moe = model_type == "granitemoe_swa"
    f = _llama(cfg, attention_sinks=True, tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", not moe),
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
    fp32 sigmoid router; full attention on layers 0, 1, i % 4 == 1 and the last."""
    f = _llama(cfg, qk_norm=True, attention_sinks=True, mlp_bias=False, _warnings=untraced("flint"))
    n, h, a = f["num_hidden_layers"], f["hidden_size"], f["num_attention_heads"]
    experts = get_int(cfg, "num_experts", default=256, lo=0, hi=B.MAX_EXPERTS)
    only = set(get_int_list(cfg, "mlp_only_layers", lo=0, hi=B.MAX_LAYERS) or [0, 1])
    step = get_int(cfg, "decoder_sparse_step", default=1, hi=B.MAX_LAYERS)
    f["variant"] = VariantSpec(norm="fp32_weight", fp32_per_moe_layer=experts * h, fp32_per_layer=a,
                               router_fp32_input=True)
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
    weight); full attention every sixth and the last layer."""
    f = _llama(cfg, qk_norm=True, norms_per_layer=4, mlp_bias=False, _warnings=untraced("beam"),
               final_logit_softcapping=get_float(cfg, "final_logit_softcapping", 30.0, 1e-6, 1e9))
    n, h, a = f["num_hidden_layers"], f["hidden_size"], f["num_attention_heads"]
    d = f["head_dim"] or h // a
    experts = get_int(cfg, "num_experts", default=256, lo=1, hi=B.MAX_EXPERTS)
    f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", default=8, hi=experts),
             moe_intermediate_size=get_int(cfg, "moe_intermediate_size", default=2560, hi=B.MAX_FFN),
             dense_layer_indices=dense_layers(cfg, n, lambda i: i < 3),
             variant=VariantSpec(attention_tensors=((a * d, h), (a,)), norm="fp32_weight", attention_gate="sigmoid",
                                 fp32_per_moe_layer=experts * h, router_fp32_input=True,
                                 router_renorm=get_bool(cfg, "norm_topk_prob", True)))
    sliding_fields(with_layer_types(cfg, n, lambda i: (i + 1) % 6 != 0 and i != n - 1), f)
    return f


def refuse(model_type: str, lacks: str):
    """A mapper that refuses `model_type`, saying what the engine lacks."""
    def mapper(cfg: dict) -> dict:
        raise ConfigError(f"model_type: {model_type!r} cannot be computed exactly yet: {lacks}")
    mapper.__doc__ = f"{model_type}: refused ({lacks})."
    return mapper


MORE_VARIANT_MAPPERS: dict = {
    "apertus": map_apertus, "nanochat": map_nanochat, "jais2": map_jais2, "hyperclovax": map_hyperclovax,
    "olmo": map_olmo, "bitnet": map_bitnet, "diffllama": map_diffllama, "cohere_compass_text": map_cohere_compass,
    "cohere_compass": map_cohere_compass, "youtu": map_youtu, "minicpm3": map_minicpm3, "gptj": map_gptj,
    "codegen": map_gptj, "gpt_neo": map_gpt_neo, "bloom": map_bloom, "mpt": map_mpt, "opt": map_opt,
    "xglm": map_xglm, "biogpt": map_xglm, "persimmon": map_persimmon, "granite_swa": map_granite_swa,
    "granitemoe_swa": map_granite_swa, "flint": map_flint, "beam": map_beam,
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
    # models/longcat_flash/modeling_longcat_flash.py
    "longcat_flash": refuse("longcat_flash", "each LongCat-Flash block holds two MLA attentions, two dense MLPs and "
                            "one MoE with zero-computation experts; the engine's layer has one token mixer and one "
                            "feed-forward"),
    # models/mimo_v2_flash/modeling_mimo_v2_flash.py
    "mimo_v2_flash": refuse("mimo_v2_flash", "its sliding layers have twice the key/value heads of its full layers "
                            "and attention sinks, and its value heads are narrower than head_dim; the engine's "
                            "attention has one head layout for every layer and v heads as wide as q/k heads"),
}
