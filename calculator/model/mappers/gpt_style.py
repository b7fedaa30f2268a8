"""Issue 21's older GPT-style layouts (GPT-J / CodeGen, GPT-Neo, BLOOM, MPT, OPT, XGLM / BioGPT, Persimmon, CTRL,
GPT-NeoX-Japanese; OpenAI GPT refused),
registered in calculator.model.mappers.variants.VARIANT_MAPPERS: LayerNorms with biases, plain fc1 / fc2 MLPs, learned
or ALiBi positions, dropout in training. Each config.json is read with its transformers 5.23 configuration class's
defaults and field names; each mapper cites the modeling file it mirrors; tests/model/mappers/test_variants.py holds
every one to the real model's parameter and tensor counts.
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.config_read import (ConfigError, common_fields, get_bool, get_choice_list, get_float, get_int,
                                          get_str, partial_rotary_dim)
from calculator.model.mappers.variants_more import act_name, refuse, untraced
from calculator.model.variants import VariantSpec


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
    with a bias (n_inner or 4·h), rotary positions, an LM head with a bias.

    Their attention (GPTJAttention, CodeGenAttention): rotary on the first rotary_dim channels of each head, with sin
    and cos repeat_interleave'd in each apply_rotary_pos_emb call (VariantSpec.per_call_rope; CodeGen's stay fp32);
    the eager core `_attn` casts q and k to fp32 before the score matmul (eager_qk_fp32). CodeGen's _split_heads
    reshapes each of q, k, v from qkv_proj's mp_num = 4 groups of n_head / 4 heads to n_head heads: a copy, unless
    each group holds one head (n_head = 4), when v stays a view of qkv_proj's output (fused_qkv_views).
    CodeGenAttention has no other path than eager, GPT-J eager and flash_attention_2."""
    model_type = get_str(cfg, "model_type")
    codegen = model_type == "codegen"
    h = get_int(cfg, "n_embd", "hidden_size", hi=B.MAX_HIDDEN)
    f = _gpt(cfg, ("n_embd", "hidden_size"), ("n_layer", "num_hidden_layers"), ("n_head", "num_attention_heads"),
             intermediate_size=get_int(cfg, "n_inner", default=4 * h, hi=B.MAX_FFN), norms_per_layer=1,
             parallel_residual=True, fused_qkv=codegen, hidden_act=act_name(cfg, "gelu_new", "activation_function"),
             tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", False))
    head_dim = h // f["num_attention_heads"]
    # the configuration classes' default 64 when absent; null rotates whole heads (pos_embd_dim = embed_dim)
    rotary = get_int(cfg, "rotary_dim", default=None if "rotary_dim" in cfg else 64, hi=B.MAX_HEAD_DIM)
    f["variant"] = VariantSpec(lm_head_bias=True, eager_qk_fp32=True, per_call_rope="fp32" if codegen else "model",
                               rotary_dim=min(rotary or head_dim, head_dim),
                               fused_qkv_views=not codegen or f["num_attention_heads"] == 4)
    if codegen:
        f["_warnings"] = ["codegen: transformers' CodeGenAttention runs eager attention only (no sdpa or flash path): "
                          "its saved activations are those of attention eager"]
    return f


def map_gpt_neo(cfg: dict) -> dict:
    """GPT-Neo (models/gpt_neo/modeling_gpt_neo.py): learned positions, two LayerNorms with a bias, bias-free q/k/v,
    out_proj and c_fc / c_proj with a bias (intermediate_size or 4·h); tied by default. Its eager attention
    (GPTNeoSelfAttention._attn) casts q and k to fp32 before the unscaled score matmul (VariantSpec.eager_qk_fp32).
    Dropout in training: resid_dropout after out_proj and c_proj, attention_dropout on the probabilities (after their
    cast to the model dtype), embed_dropout on the embeddings' sum (counted with the residual one, ModelSpec.dropout).

    Its "local" layers (attention_types) are no sliding-window layers to the engine: in transformers 5.23 they differ
    from the global ones only in the values of the causal mask. The eager core scores every key and masks those
    beyond window_size (torch.where on the `bias` buffer), the flash path (GPTNeoFlashAttention2) passes no window,
    and the cache is a DynamicCache(config) whose layers are all full DynamicLayers: GPTNeoConfig has window_size,
    neither sliding_window nor layer_types, which cache_utils.get_layer_types_and_kwargs reads. So every layer keeps
    the whole prompt in the model dtype, and the layers are mapped as full attention."""
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
    get_int(cfg, "window_size", default=256, hi=B.MAX_WINDOW)  # read for its bounds only: it caps nothing
    variant = VariantSpec(eager_qk_fp32=True,
                          attention_dropout=get_float(cfg, "attention_dropout", 0.0, 0.0, 0.999) > 0,
                          embedding_dropout=get_float(cfg, "embed_dropout", 0.0, 0.0, 0.999) > 0)
    return _gpt(cfg, ("hidden_size",), ("num_layers", "num_hidden_layers"), ("num_heads", "num_attention_heads"),
                intermediate_size=get_int(cfg, "intermediate_size", default=4 * h, hi=B.MAX_FFN), o_bias=True,
                hidden_act=act_name(cfg, "gelu_new", "activation_function"),
                tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
                learned_position_embeddings=get_int(cfg, "max_position_embeddings", default=2048, hi=B.MAX_POSITIONS),
                dropout=get_float(cfg, "resid_dropout", 0.0, 0.0, 0.999), variant=variant)


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
                hidden_act=act_name(cfg, "relu", "activation_function"),
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
    XGLMAttention clamps the masked scores (torch.max(scores, finfo.min)). Neither rotates q and k: no RoPE tables
    (XGLM: rope False; BioGPT's learned positions already say so)."""
    model_type = get_str(cfg, "model_type")
    bio = model_type == "biogpt"
    variant = VariantSpec(eager_softmax="model", score_clamp=not bio, rope=bio, activation_dropout=get_float(
        cfg, "activation_dropout", 0.0, 0.0, 0.999) > 0, attention_dropout=get_float(
        cfg, "attention_probs_dropout_prob" if bio else "attention_dropout", 0.1, 0.0, 0.999) > 0)
    positions = get_int(cfg, "max_position_embeddings", default=1024 if bio else 2048, hi=B.MAX_POSITIONS - 2)
    return _gpt(cfg, ("hidden_size", "d_model") if bio else ("d_model", "hidden_size"),
                ("num_hidden_layers",) if bio else ("num_layers", "num_hidden_layers"),
                ("num_attention_heads",) if bio else ("attention_heads", "num_attention_heads"),
                intermediate_size=get_int(cfg, "intermediate_size" if bio else "ffn_dim", hi=B.MAX_FFN),
                qkv_bias=True, o_bias=True, hidden_act=act_name(cfg, "gelu", "hidden_act" if bio else
                                                            "activation_function"),
                tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
                learned_position_embeddings=positions + 2 if bio else 0, variant=variant,
                dropout=get_float(cfg, "hidden_dropout_prob" if bio else "dropout", 0.1, 0.0, 0.999),
                _warnings=untraced(model_type, "GPT-2 block"))


def map_persimmon(cfg: dict) -> dict:
    """Persimmon (models/persimmon/modeling_persimmon.py): fused query_key_value and dense with biases, per-head
    LayerNorms with a bias on q and k (qk_layernorm, default true) reading views of the fused output, a plain biased
    MLP (relu²), LayerNorms with a bias; multi-head attention. Partial rotary: the shared cos / sin tables and the
    rotated channels are head_dim · partial_rotary_factor wide (rope_parameters, or the top-level field transformers
    4 wrote; default 0.5), and q and k leave the rotation as torch.cat((rot, pass)), contiguous per head
    (rope_concat: a FlashAttention kernel's output is laid out like q, and o_proj's input is its copy)."""
    f = common_fields(cfg)
    rope = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    factor = get_float(rope if rope.get("partial_rotary_factor") is not None else cfg, "partial_rotary_factor", 0.5,
                       0.0, 1.0)
    head_dim = f["hidden_size"] // f["num_attention_heads"]
    f.update(num_key_value_heads=None, head_dim=None, qkv_bias=True, o_bias=True, mlp_bias=True, fused_qkv=True,
             gated_mlp=False, norm_type="layernorm", hidden_act=act_name(cfg, "relu2"), rope_concat=True,
             qk_norm=get_bool(cfg, "qk_layernorm", True),
             variant=VariantSpec(qk_norm_layout="layernorm_head", rotary_dim=int(head_dim * factor)))
    return f


def map_ctrl(cfg: dict) -> dict:
    """CTRL (models/ctrl/modeling_ctrl.py, CTRLLMHeadModel / CTRLModel / EncoderLayer): the XGLM layout without its
    score clamp or extra dropouts. Pre-LN blocks (layernorm1 / layernorm2 with a bias, a final layernorm), biased
    Wq / Wk / Wv and dense, a biased ReLU MLP of dff, an LM head with a bias whose weight is tied to `w`; the
    sinusoidal positions are a non-persistent buffer indexed without grad (no parameter, no RoPE tables). Its
    eager_attention_forward runs the softmax in the model dtype, and MultiHeadAttention passes dropout=0.0: no
    attention dropout whatever the config; dropout1 / dropout2 (resid_pdrop) after attention and the MLP, embd_pdrop
    on the embeddings' sum."""
    h = get_int(cfg, "n_embd", "hidden_size", hi=B.MAX_HIDDEN)
    variant = VariantSpec(lm_head_bias=True, eager_softmax="model", attention_dropout=False, rope=False,
                          embedding_dropout=get_float(cfg, "embd_pdrop", 0.1, 0.0, 0.999) > 0)
    return _gpt(cfg, ("n_embd", "hidden_size"), ("n_layer", "num_hidden_layers"), ("n_head", "num_attention_heads"),
                intermediate_size=get_int(cfg, "dff", default=8192, hi=B.MAX_FFN), qkv_bias=True, o_bias=True,
                hidden_act="relu", tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
                dropout=get_float(cfg, "resid_pdrop", 0.1, 0.0, 0.999), variant=variant)


def map_gpt_neox_japanese(cfg: dict) -> dict:
    """GPT-NeoX-Japanese (models/gpt_neox_japanese/modeling_gpt_neox_japanese.py, GPTNeoXJapaneseForCausalLM /
    GPTNeoXJapaneseLayer / GPTNeoXJapaneseAttention): GPT-NeoX's fused query_key_value (here bias-free) and partial
    rotary (head_size · partial_rotary_factor, default 1.0; q and k leave it as torch.cat(rot, pass).contiguous():
    rope_concat), but sequential residuals (no use_parallel_residual), a bias-free dense and a bias-free MLP of
    int(hidden_size · intermediate_multiple_size), LayerNorms with a bias, tied embed_out. Only the last layer's
    attention holds a dense_bias (hidden_size,) Parameter, counted outside the layers (VariantSpec.outer_tensors).
    Its own _attn is eager only: baddbmm on the q / k copies, a model-dtype softmax, attention_dropout on the
    probabilities, torch.matmul with v (a view of the fused output, copied); hidden_dropout after attention and MLP
    (bias_dropout_add), no embedding dropout."""
    h = get_int(cfg, "hidden_size", hi=B.MAX_HIDDEN)
    f = _gpt(cfg, ("hidden_size",), ("num_hidden_layers",), ("num_attention_heads",),
             intermediate_size=int(h * get_float(cfg, "intermediate_multiple_size", 4.0, 0.0, B.MAX_FFN / h)),
             mlp_bias=False, fused_qkv=True, rope_concat=True, hidden_act=act_name(cfg, "gelu"),
             tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
             dropout=get_float(cfg, "hidden_dropout", 0.0, 0.0, 0.999),
             variant=VariantSpec(outer_tensors=((h,),), eager_softmax="model", embedding_dropout=False,
                                 attention_dropout=get_float(cfg, "attention_dropout", 0.1, 0.0, 0.999) > 0))
    f["rotary_dim"] = partial_rotary_dim(cfg, h // f["num_attention_heads"], 1.0)
    if f["intermediate_size"] < 1:
        raise ConfigError("intermediate_multiple_size: hidden_size times it must be at least 1")
    f["_warnings"] = ["gpt_neox_japanese: transformers' GPTNeoXJapaneseAttention runs its own eager attention only "
                      "(no sdpa or flash path): its saved activations are those of attention eager"]
    return f


GPT_STYLE_MAPPERS: dict = {
    "gptj": map_gptj, "codegen": map_gptj, "gpt_neo": map_gpt_neo, "bloom": map_bloom, "mpt": map_mpt, "opt": map_opt,
    "xglm": map_xglm, "biogpt": map_xglm, "persimmon": map_persimmon, "ctrl": map_ctrl,
    "gpt_neox_japanese": map_gpt_neox_japanese,
    # models/openai/modeling_openai.py (OpenAIGPTLMHeadModel): its post-LN Block keeps the tensors a pre-LN one
    # does (traced: exact with GPT-2's eager core), but the model's edges do not fit the engine
    "openai-gpt": refuse("openai-gpt", "OpenAIGPTModel ends on the last block's ln_2 with no final LayerNorm (the "
                         "engine always counts one) and its Attention takes no past key values, so it has no KV "
                         "cache (the engine always prices one)"),
}
