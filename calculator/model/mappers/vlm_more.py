"""Text towers of more vision-language models (issue 21), each mapped from the transformers 5.23 modeling file it
mirrors (cited per mapper): Emu3 (emu3, emu3_text_model), Molmo2 (molmo2, molmo2_text) and Muse-Glimmer
(muse_glimmer, muse_glimmer_text), Step-3.5 / 3.7 (step3p5, step3p7: served by vLLM and SGLang only,
ModelSpec.served_only), ERNIE-4.5-VL-MoE (ernie4_5_vl_moe, ernie4_5_vl_moe_text: its vision experts held without
gradient in a text step); and refused, each naming what the engine lacks: Muse-Spark, GLM-5-Next and Qwen4-Exp
(qwen4_exp, qwen4_exp_text).
calculator.model.mappers.vlm_text merges these tables into its own; tests/model/mappers/test_vlm_more.py holds each
type to the real model's parameter and tensor counts (validation/architectures: one traced layer's saved
activations and the cache), tests/model/mappers/test_axk1_and_refusals.py the Qwen4-Exp refusal.

MAPPERS: model_type -> mapper (cfg dict -> ModelSpec fields); SAME_BLOCKS: model_type -> an already mapped type whose
mapper reads it unchanged; TEXT_TYPES: outer multimodal type -> the text model_type its text_config holds (when the
text_config omits model_type); TIE_DEFAULTS: outer type -> its configuration class's tie_word_embeddings default
where the text class's differs; REFUSED: types mapped only to refuse them with the reason.

May import: calculator.core, calculator.model.config_read, calculator.model.variants (VariantSpec, as the package
allows) and the other mappers modules (not vlm_text).
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.config_read import (ConfigError, common_fields, get_bool, get_choice_list, get_float, get_int,
                                          get_int_list, get_str, get_window, llama_like_fields, sliding_fields)
from calculator.model.variants import VariantSpec


def map_emu3_text(cfg: dict) -> dict:
    """Emu3's language model (models/emu3/modeling_emu3.py Emu3TextModel / Emu3ForCausalLM, the text_config of
    Emu3ForConditionalGeneration): Llama's attention, MLP, RMSNorms and RoPE (Emu3Attention is LlamaAttention, q/k/v/o
    biased per attention_bias, head_dim = hidden_size // num_attention_heads), except that Emu3DecoderLayer drops out
    both residual branches with nn.Dropout(attention_dropout) (Emu3TextConfig default 0.1), the attention
    probabilities dropping out by the same rate in training: GPT-2's residual and attention dropout
    (ModelSpec.dropout), without an embedding dropout (LlamaModel has none: VariantSpec.embedding_dropout)."""
    f = llama_like_fields(cfg)
    drop = get_float(cfg, "attention_dropout", 0.1, 0.0, 0.99)
    if drop:
        f.update(dropout=drop, variant=VariantSpec(embedding_dropout=False))
    return f


MOLMO2_QK_NORMS = ("qwen3", "olmo")


MOLMO2_SDPA_WARNING = ("molmo2: Molmo2Model requires mm_token_type_ids in training and then always builds a 4-D "
                       "mask (block_sequence_ids), text-only batches too: under SDPA every layer repeats k / v to "
                       "the query heads and keeps the mask as a bias, which the calculator prices only for a padded "
                       "batch (set the workload's padded batch to include them); eager attention is unaffected")


def map_molmo2_text(cfg: dict) -> dict:
    """Molmo2's language model (models/molmo2/modeling_molmo2.py Molmo2TextModel, inside
    Molmo2ForConditionalGeneration): Qwen3's layer (Molmo2Attention: q/k/v biased per attention_bias, o_proj never;
    head_dim default 128; Llama-style RMSNorms; bias-free SwiGLU Molmo2MLP) whose q/k RMSNorms are per head
    (qk_norm_type "qwen3") or over the whole projection as OLMo-2's (qk_norm_type "olmo", VariantSpec.qk_norm_layout
    "full_width"); norm_after moves each layer's two norms onto the sublayer outputs (post-norm, as OLMo-2's: the
    same tensors and, per norm, the same saved copies). Molmo2ForConditionalGeneration declares no tied weights: its
    lm_head is never tied. Its embedding has vocab_size + additional_vocab_size rows where lm_head has vocab_size
    (ModelSpec.embedding_rows). Layers outside rope_scaling_layers rotate
    with an unscaled copy of the cos / sin tables (a second shared table, 2·s·head_dim more: warned). In training
    its SDPA layers always get a mask (MOLMO2_SDPA_WARNING)."""
    f = common_fields(cfg)
    extra = get_int(cfg, "additional_vocab_size", default=128, lo=0, hi=B.MAX_VOCAB)
    if extra:  # Molmo2TextModel.embed_tokens: one nn.Embedding of vocab_size + additional_vocab_size rows
        f["embedding_rows"] = f["vocab_size"] + extra
    qk = get_str(cfg, "qk_norm_type", default="qwen3")
    if qk not in MOLMO2_QK_NORMS:
        raise ConfigError(f"qk_norm_type: Molmo2Attention knows {', '.join(MOLMO2_QK_NORMS)}, got {qk!r}")
    f.update(head_dim=get_int(cfg, "head_dim", default=128, hi=B.MAX_HEAD_DIM),
             qkv_bias=get_bool(cfg, "attention_bias", False), o_bias=False, qk_norm=True,
             hidden_act=get_str(cfg, "hidden_act", default="silu"), tie_word_embeddings=False)
    if qk == "olmo":
        f["variant"] = VariantSpec(qk_norm_layout="full_width")
    n = f["num_hidden_layers"]
    f["_warnings"] = [MOLMO2_SDPA_WARNING]
    scaled = get_int_list(cfg, "rope_scaling_layers", lo=0, hi=B.MAX_LAYERS)
    if scaled is not None and 0 < len(set(scaled) & set(range(n))) < n:
        f["_warnings"].append("molmo2: layers inside and outside rope_scaling_layers rotate with two cos / sin "
                              "tables (Molmo2TextModel rotary_emb and rotary_emb_unscaled); the saved activations "
                              "count one (2·s·head_dim elements fewer)")
    return f


# MuseGlimmerTextConfig.__post_init__: full attention on every 4th layer counted back from the last, sliding elsewhere
def _glimmer_full(n: int, i: int) -> bool:
    return (n - 1 - i) % 4 == 0


GLIMMER_WARNING = ("muse_glimmer: parameters, cache and each layer's saved activations follow transformers; the "
                   "weightless RMSNorm on the token embeddings (MuseGlimmerTextNormedEmbedding.embed_norm) keeps "
                   "4·T·h + 8·T bytes the calculator leaves out (about one norm of one layer), and its q/k norms "
                   "keep 4 B more per head and token than priced (Gemma-4's pow(·, -0.5) keeps its input)")


def map_muse_glimmer_text(cfg: dict) -> dict:
    """Muse-Glimmer's language model (models/muse_glimmer/modeling_muse_glimmer.py MuseGlimmerTextModel, inside
    MuseGlimmerForConditionalGeneration): Gemma-2's layer (MuseGlimmerTextDecoderLayer: four zero-centred
    Gemma2RMSNorms, Gemma2MLP of hidden_activation) with AFMoE's attention (MuseGlimmerTextAttention: bias-free
    q/k/v/o and a sigmoid output gate gate_proj, heads·head_dim × h, VariantSpec.attention_gate "sigmoid"), but
    without q/k weights: one weightless RMSNorm (Gemma4RMSNorm with_scale=False) normalises q and k per head
    (VariantSpec.qk_norm_layout "none"), q then scaled by qk_scale_factor (a scalar: nothing kept); no attention
    soft-capping; the final logits scaled by output_multiplier (a scalar) before Gemma-2's tanh cap
    (final_logit_softcapping, default 20). Layers slide per layer_types (default: full on every 4th counted back
    from the last, those without RoPE: layer_rope_theta 0, which keeps nothing per layer); no embedding scale.
    Differences not priced (GLIMMER_WARNING): the embedding's weightless RMSNorm and 4 B per q/k row."""
    f = common_fields(cfg)
    n, h, a = f["num_hidden_layers"], f["hidden_size"], f["num_attention_heads"]
    f["head_dim"] = get_int(cfg, "head_dim", default=128, hi=B.MAX_HEAD_DIM)
    f.update(family="gemma", norms_per_layer=4,
             hidden_act=get_str(cfg, "hidden_activation", "hidden_act", default="silu"), qk_norm=True,
             final_logit_softcapping=get_float(cfg, "final_logit_softcapping", 20.0, 1e-6, 1e9),
             variant=VariantSpec(attention_tensors=((a * f["head_dim"], h),), attention_gate="sigmoid",
                                 qk_norm_layout="none"),
             _warnings=[GLIMMER_WARNING])
    if cfg.get("layer_types") is None and get_window(cfg):
        cfg = {**cfg, "layer_types": ["full_attention" if _glimmer_full(n, i) else "sliding_attention"
                                      for i in range(n)]}
    sliding_fields(cfg, f)
    return f


def refuse_muse_spark(cfg: dict) -> dict:
    """Muse-Spark's language model (models/muse_spark/modeling_muse_spark.py MuseSparkTextModel): Muse-Glimmer's
    attention plus a weightless o_norm, learned residual gates (MuseSparkResidualGate: alpha·residual +
    beta·branch from a per-channel sigmoid, fp32) after both sublayers, and an MoE (MuseSparkMoE) that projects
    hidden_size down to moe_hidden_size (pre_expert_proj, pre_expert_norm), runs a per-expert loop with a
    post-expert norm (MuseSparkExperts) and projects back up (post_expert_proj)."""
    raise ConfigError("model_type: Muse-Spark cannot be described exactly yet: the calculator has no learned "
                      "residual gates (MuseSparkResidualGate) and no MoE run at a projected width "
                      "(MuseSparkMoE: pre_expert_proj / post_expert_proj around a per-expert loop with a "
                      "post-expert norm)")


def map_ernie4_5_vl_moe_text(cfg: dict) -> dict:
    """ERNIE-4.5-VL-MoE's language model (models/ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py Ernie4_5_VLMoeTextModel):
    ERNIE-4.5-MoE's attention and router (every linear biased per use_bias but the LM head, bias=False in
    Ernie4_5_VLMoeForConditionalGeneration; an fp32 router weight and an fp32
    moe_statics.e_score_correction_bias (1, E) with requires_grad=False; softmax, top-k renormalised by the clamped
    sum; shared experts of moe_intermediate_size[0] × moe_num_shared_experts), but each sparse layer of
    mlp_layer_types (default: all but the first) is Ernie4_5_VLMoeMoeBlock, two routed expert sets of
    moe_num_experts each with a router and moe_statics of its own: text experts of moe_intermediate_size[0] and vision
    experts of moe_intermediate_size[1], which only image and video tokens reach (moe_mm_token_type_ids). Both sets
    load, shard over EP and count (VariantSpec.expert_tensors: an expert slot holds its text and its vision expert);
    a text batch never reaches the vision router or experts, which get no gradient (VariantSpec.no_grad_moe_tensors:
    no AdamW state under torch.optim; the stacks whose flat buffers cover every trainable parameter hold them
    anyway). Its RoPE is computed once per forward, fp32 and already interleaved (Ernie4_5_VLMoeTextRotaryEmbedding
    recomposition_frequencies), where ERNIE-4.5-MoE's repeat_interleaves it in every layer (fp32_rope_tables)."""
    f = common_fields(cfg)
    n, h = f["num_hidden_layers"], f["hidden_size"]
    bias = get_bool(cfg, "use_bias", False)
    experts = get_int(cfg, "moe_num_experts", "num_experts", default=64, lo=1, hi=B.MAX_EXPERTS)
    widths = get_int_list(cfg, "moe_intermediate_size", lo=1, hi=B.MAX_FFN) or [1536, 512]
    if len(widths) != 2:
        raise ConfigError("moe_intermediate_size: ERNIE-4.5-VL gives two widths, [text experts, vision experts]")
    text_w, vision_w = widths
    mlp = get_choice_list(cfg, "mlp_layer_types", ("dense", "sparse")) or ["dense"] + ["sparse"] * (n - 1)
    if len(mlp) != n:
        raise ConfigError(f"mlp_layer_types: has {len(mlp)} entries but num_hidden_layers is {n}")
    shared = get_int(cfg, "moe_num_shared_experts", default=2, lo=0, hi=B.MAX_SHARED_EXPERTS)
    vision_experts = ((experts, 2 * vision_w, h), (experts, h, vision_w))
    vision_router = ((experts, h),)  # Ernie4_5_VLMoeMoeTopKRouter.weight, fp32
    f.update(tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True), qkv_bias=bias, o_bias=bias,
             mlp_bias=bias, hidden_act=get_str(cfg, "hidden_act", default="silu"), num_shared_experts=shared,
             num_experts=experts, num_experts_per_tok=get_int(cfg, "moe_k", "num_experts_per_tok", default=6,
                                                              hi=experts),
             moe_intermediate_size=text_w, dense_layer_indices=tuple(i for i, t in enumerate(mlp) if t == "dense"),
             variant=VariantSpec(expert_tensors=((experts, 2 * text_w, h), (experts, h, text_w),
                                                                    *vision_experts),
                                 moe_tensors=(*vision_router, (1, experts), (1, experts)),
                                 no_grad_moe_tensors=(*vision_router, *vision_experts),
                                 untrained_per_moe_layer=2 * experts, fp32_per_moe_layer=2 * (experts * h + experts),
                                 router_fp32_input=True, router_clamp=True, fp32_routing_weights=False,
                                 fp32_rope_tables=True))
    if shared:
        f["shared_expert_intermediate_size"] = text_w * shared
    return f


def refuse_glm5_next(cfg: dict) -> dict:
    """GLM-5-Next's language model (models/glm5_next/modeling_glm5_next.py Glm5NextTextModel): GLM-5's DSA attention
    and KDA linear attention (Glm5NextTextLinearAttention) inside DeepSeek-V4's hyper-connections (attn_hc, ffn_hc
    of hc_mult streams), but the streams collapse by an unweighted mean (Glm5NextTextHyperHead: no parameters)
    where the calculator's hc_mult prices DeepSeek-V4's weighted hc_head, and layers whose indexer_types entry is
    "shared" have no indexer and reuse the previous layer's top-k indices."""
    raise ConfigError("model_type: GLM-5-Next cannot be described exactly yet: the calculator has no "
                      "hyper-connections without DeepSeek-V4's weighted hc_head (Glm5NextTextHyperHead: an "
                      "unweighted mean) and no DSA layers sharing the previous layer's top-k (indexer_types "
                      "\"shared\")")


def refuse_qwen4_exp(cfg: dict) -> dict:
    """Qwen4-Exp (models/qwen4_exp/modeling_qwen4_exp.py Qwen4ExpTextDecoderLayer) wraps Qwen3.5-MoE's Gated
    DeltaNet / attention and Qwen3-Next's MoE in parts the engine has no layer for: every layer's attention and MLP
    read and write hc_count residual streams through Qwen4ExpTextGatedResidual (a grouped RMSNorm over the streams,
    a low-rank sigmoid input mixer and per-stream injection weights; the model's hyper_connection_mixer collapses
    them), ModelSpec.hc_mult being DeepSeek-V4's mHC only; its indexed_attention layers select tokens with the QSA
    indexer (Qwen4ExpTextQSAIndexer: mean-pooled key blocks scored per query), not DeepSeek's lightning indexer; and
    the ple_layer_ids layers add hashed n-gram per-layer embeddings with a dilated convolution (Qwen4ExpTextPLELayer).
    """
    raise ConfigError("model_type: Qwen4-Exp cannot be described exactly yet: the calculator has no gated-residual "
                      "hyper-connections (Qwen4ExpTextGatedResidual: hc_count streams mixed by a low-rank input "
                      "mixer; its hc_mult is DeepSeek-V4's mHC only), no QSA indexer (Qwen4ExpTextQSAIndexer: "
                      "mean-pooled key blocks) and no hashed n-gram per-layer embeddings (Qwen4ExpTextPLELayer)")


STEP_SERVED_ONLY = ("Step-3.5 / 3.7: transformers runs its routed experts one by one (Step3p7Experts: a Python loop "
                    "over the experts hit behind a sigmoid router) and clamps every SwiGLU (swiglu_limits), which "
                    "the training and generate() memory here do not describe")


def _step_layer_list(cfg: dict, key: str, n: int, extra: int, choices: tuple[str, ...]) -> list[str] | None:
    """A per-layer list of Step3p7TextConfig (layer_types, mlp_layer_types), cut as its __post_init__ cuts the
    released lists padded with num_nextn_predict_layers MTP entries."""
    items = get_choice_list(cfg, key, choices)
    if items is not None and extra and len(items) == n + extra:
        items = items[:n]
    if items is not None and len(items) != n:
        raise ConfigError(f"{key}: has {len(items)} entries but num_hidden_layers is {n}")
    return items


def map_step3p5(cfg: dict) -> dict:
    """Step-3.5 / Step-3.7's language model (models/step3p7/modeling_step3p7.py Step3p7TextModel, model_type step3p5;
    the Hub's Step-3.5-Flash config.json is read by the same Step3p7TextConfig, its legacy names through
    attribute_map and __post_init__). Step3p7Attention: q / k / v / o without bias (attention_bias), per-head
    Step3p7RMSNorm q / k norms (a weight of head_dim each), a sigmoid output gate g_proj = Linear(h, heads) per head
    (gating true / "per-head"; heads · head_dim per channel otherwise); sliding_attention layers (layer_types,
    sliding_window) build num_sliding_attention_heads query heads (legacy attention_other_setting.num_attention_heads:
    96 beside the full layers' 64 in Step-3.7-Flash) over the same num_key_value_heads. Step3p7DecoderLayer's MLP
    per mlp_layer_types (legacy moe_layers_enum; default: all sparse): a dense Step3p7MLP of intermediate_size, or
    Step3p7SparseMoeBlock — n_routed_experts fused experts of moe_intermediate_size (gate_up_proj, down_proj),
    a router weight (its e_score_correction_bias is a buffer) and one shared Step3p7MLP of share_expert_dim; untied
    lm_head; num_nextn_predict_layers MTP layers are not built (their weights skipped on load). Served by vLLM and
    SGLang as Step3p5ForCausalLM / Step3p7ForConditionalGeneration; transformers' own training and generate()
    memory is refused (ModelSpec.served_only: STEP_SERVED_ONLY)."""
    given = {k: v for k, v in cfg.items() if v is not None}
    if "num_key_value_heads" not in given and "num_attention_groups" in given:  # the Hub file's name
        given["num_key_value_heads"] = given["num_attention_groups"]
    cfg = {"vocab_size": 128815, "hidden_size": 4096, "intermediate_size": 11264, "num_hidden_layers": 45,
           "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 128000,
           **given}
    f = common_fields(cfg)
    n, h = f["num_hidden_layers"], f["hidden_size"]
    f["head_dim"] = get_int(cfg, "head_dim", default=128, hi=B.MAX_HEAD_DIM)
    heads, hd = f["num_attention_heads"], f["head_dim"]
    extra = get_int(cfg, "num_nextn_predict_layers", default=0, lo=0, hi=64)
    layers = _step_layer_list(cfg, "layer_types", n, extra, ("full_attention", "sliding_attention"))
    other = cfg.get("attention_other_setting") or {}
    if not isinstance(other, dict):
        raise ConfigError("attention_other_setting: must be an object (the sliding layers' num_attention_heads, "
                          "num_attention_groups, head_dim)")
    swa_heads = get_int(cfg, "num_sliding_attention_heads", default=None, hi=B.MAX_HEADS) or \
        get_int(other, "num_attention_heads", default=heads, hi=B.MAX_HEADS)
    if swa_heads % (f["num_key_value_heads"] or heads):
        raise ConfigError(f"num_sliding_attention_heads: the sliding layers' {swa_heads} query heads must be a "
                          f"multiple of the {f['num_key_value_heads'] or heads} key/value heads")
    if get_int(other, "num_attention_groups", default=f["num_key_value_heads"] or heads, hi=B.MAX_HEADS) != \
            (f["num_key_value_heads"] or heads) or get_int(other, "head_dim", default=hd, hi=B.MAX_HEAD_DIM) != hd:
        raise ConfigError("attention_other_setting: sliding layers with their own key/value heads or head_dim are "
                          "built by the serving engines but not by transformers' Step3p7Attention; this calculator "
                          "describes the sliding layers' query heads only")
    gating = cfg.get("gating", True)
    if not isinstance(gating, (bool, str)) or gating not in (True, False, "per-head", "per-element"):
        raise ConfigError(f"gating: must be true, false, \"per-head\" or \"per-element\", got {str(gating)[:40]}")
    per_head = gating is True or gating == "per-head"
    experts = get_int(cfg, "n_routed_experts", "moe_num_experts", "num_local_experts", default=288, lo=1,
                      hi=B.MAX_EXPERTS)
    mlp = _step_layer_list(cfg, "mlp_layer_types", n, extra, ("dense", "sparse"))
    if mlp is None and cfg.get("moe_layers_enum") is not None:
        enum = cfg["moe_layers_enum"]
        items = enum.split(",") if isinstance(enum, str) else enum if isinstance(enum, list) else None
        if items is None or not all(str(x).strip().lstrip("-").isdigit() for x in items if str(x).strip()):
            raise ConfigError("moe_layers_enum: must list layer indices, e.g. \"3,4,5\"")
        sparse = {int(x) for x in items if str(x).strip()}
        mlp = ["sparse" if i in sparse else "dense" for i in range(n)]
    mlp = mlp or ["sparse"] * n
    f.update(qkv_bias=get_bool(cfg, "attention_bias", False), o_bias=get_bool(cfg, "attention_bias", False),
             mlp_bias=get_bool(cfg, "mlp_bias", False), qk_norm=True, zero_centered_norm=True, hidden_act="silu",
             tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", False), mtp_layers=extra,
             num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", "moe_top_k", default=8,
                                                              hi=experts),
             moe_intermediate_size=get_int(cfg, "moe_intermediate_size", default=1280, hi=B.MAX_FFN),
             shared_expert_intermediate_size=get_int(cfg, "share_expert_dim", default=1280, hi=B.MAX_FFN),
             ffn_types=tuple("moe" if t == "sparse" else "dense" for t in mlp), served_only=STEP_SERVED_ONLY,
             variant=VariantSpec(attention_tensors=((heads if per_head else heads * hd, h),),
                                 attention_gate="sigmoid_head" if per_head else "sigmoid"))
    window = get_window(cfg)
    if layers is not None and window and "sliding_attention" in layers:
        f.update(layer_types=tuple(layers), sliding_window=window,
                 swa_num_attention_heads=swa_heads if swa_heads != heads else None)
    return f


# transformers 5.23 types the engine knows but cannot describe yet, each with what it lacks (a refusal that says why,
# where an unknown type only lists the supported ones)
NOT_MODELLED = {
    "recurrent_gemma": "RG-LRU recurrent blocks (models/recurrent_gemma RecurrentGemmaRecurrentBlock: a gated linear "
                       "recurrence behind a causal conv1d) between its local-attention layers",
    "rwkv": "RWKV time-mixing and channel-mixing blocks (models/rwkv RwkvSelfAttention's WKV recurrence)",
    "xlstm": "xLSTM's mLSTM blocks (models/xlstm: a matrix-memory recurrence with exponential gating)",
    "zamba": "shared transformer blocks re-applied between Mamba layers over the hidden state concatenated with the "
             "embeddings (models/zamba ZambaAttentionDecoderLayer)",
    "hrm_text": "HRM's hierarchical recurrence (models/hrm_text HrmTextModel: its layer stacks re-run for H_cycles × "
                "L_cycles iterations, only the last ones under autograd)",
    "blt": "a byte-level local encoder and decoder with cross-attention around a patch-level global transformer "
           "(models/blt BltModel)",
    "cpmant": "CPM-Ant's segment and relative position bias inside every attention (models/cpmant "
              "CpmAntSegmentPositionEmbedding)",
    "mllama_text_model": "Llama 3.2 Vision's cross-attention layers (models/mllama MllamaCrossAttentionDecoderLayer: "
                         "K/V over the vision tokens, tanh gates) nor its tiled vision encoder",
    "idefics": "IDEFICS's gated cross-attention layers and perceiver resampler (models/idefics "
               "IdeficsGatedCrossAttentionLayer)",
    "git": "GIT's BERT-style decoder (post-LayerNorm, learned positions) over image tokens with a bidirectional image / "
           "causal text mask (models/git GitModel)",
}


def _not_modelled(t: str):
    def refuse(cfg: dict) -> dict:
        raise ConfigError(f"model_type: '{t}' cannot be described exactly yet: the calculator has no {NOT_MODELLED[t]}")
    return refuse


MAPPERS: dict = {
    **{t: _not_modelled(t) for t in NOT_MODELLED},
    "emu3": map_emu3_text, "emu3_text_model": map_emu3_text,
    "molmo2": map_molmo2_text, "molmo2_text": map_molmo2_text,
    "muse_glimmer": map_muse_glimmer_text, "muse_glimmer_text": map_muse_glimmer_text,
    "muse_spark": refuse_muse_spark, "muse_spark_text": refuse_muse_spark,
    "ernie4_5_vl_moe": map_ernie4_5_vl_moe_text, "ernie4_5_vl_moe_text": map_ernie4_5_vl_moe_text,
    "glm5_next": refuse_glm5_next, "glm5_next_text": refuse_glm5_next,
    "qwen4_exp": refuse_qwen4_exp, "qwen4_exp_text": refuse_qwen4_exp, "step3p7": map_step3p5,
    "step3p5": map_step3p5,
}
SAME_BLOCKS: dict[str, str] = {}
TEXT_TYPES: dict[str, str] = {"emu3": "emu3_text_model", "molmo2": "molmo2_text", "muse_glimmer": "muse_glimmer_text",
                              "muse_spark": "muse_spark_text", "ernie4_5_vl_moe": "ernie4_5_vl_moe_text",
                              "glm5_next": "glm5_next_text",
                              # Qwen4ExpConfig / Step3p7Config (Step3p7Config.__post_init__ pops the Hub's one)
                              "qwen4_exp": "qwen4_exp_text", "step3p7": "step3p5"}
# MuseGlimmerConfig has no tie_word_embeddings field: its lm_head ties by the outer config's (False unless written),
# whatever the text_config says
TIE_DEFAULTS: dict[str, bool] = {"muse_glimmer": False}
REFUSED: frozenset[str] = frozenset({*NOT_MODELLED, "muse_spark", "muse_spark_text", "glm5_next", "glm5_next_text",
                                     "qwen4_exp", "qwen4_exp_text"})
