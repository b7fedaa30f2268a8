"""Small departures from the engine's decoder layer that several mapped model types share (issue 21), and the pure
functions that price them.

A `VariantSpec` rides on a ModelSpec (`ModelSpec.variant`; None for every model mapped before it) and says what a
model type's transformers block holds or keeps beyond (or instead of) the engine's Llama / MoE layer:
- parameters: extra tensors per attention, dense-MLP or MoE layer (an attention output gate, xIELU's alphas, a
  router's e_score_correction_bias Parameter), tensors outside the layers (some built but never run), q/k norms
  spanning the whole projection, norms without a bias or without parameters, an LM head with a bias; which of them
  stay fp32 in a bf16 model or are never trained (requires_grad=False);
- saved activations: the norm's kind (fp32-weight RMSNorm, fp32 LayerNorm), an attention output gate, RoPE tables
  recomputed in fp32 by every layer, the MLP's activation (xIELU), and the router's bookkeeping (which top-k, a
  renormalisation, fp32 router input / weight copies, fp32 or model-dtype routing weights at the experts).

`calculator.model.parameters` / `calculator.memory.activations` call these from hooks reading `m.variant`; each term's
source is the modeling file the mapper cites, measured in tests/model/mappers/test_variants.py; no engine imports.
"""
from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from calculator.core import bounds as B
from calculator.core.hash_once import HashedOnce
from calculator.model import rope_variants, zero_experts

Shape = tuple[int, ...]
_SHAPES = dict(default=(), max_length=64)
_COUNT = dict(default=0, ge=0, le=B.MAX_PARAMS, strict=True)


class VariantSpec(HashedOnce):
    """What a model type's block has beyond the engine's layer; every default is the engine's own behaviour."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # ---- parameters ------------------------------------------------------------------------------------------
    attention_tensors: tuple[Shape, ...] = Field(**_SHAPES)  # per layer with softmax attention (e.g. a gate_proj)
    mlp_tensors: tuple[Shape, ...] = Field(**_SHAPES)  # per dense-MLP layer (xIELU's alpha_p, alpha_n)
    moe_tensors: tuple[Shape, ...] = Field(**_SHAPES)  # per MoE layer, with the router (e_score_correction_bias)
    no_grad_moe_tensors: tuple[Shape, ...] = Field(**_SHAPES)  # of those and the experts: none reached in a text step
    outer_tensors: tuple[Shape, ...] = Field(**_SHAPES)  # outside the decoder layers (counted with the embedding)
    idle_tensors: tuple[Shape, ...] = Field(default=(), max_length=1024)  # more outside, built but never run
    idle_served: bool = False  # vLLM / SGLang load the idle tensors too (else they skip them: MiMo's MTP block)
    # q/k norms (with ModelSpec.qk_norm): "head" (one RMSNorm weight of head_dim each, Qwen3), "full_width" (over
    # num_heads·head_dim, OLMo-2 style), "layernorm_head" (a LayerNorm of head_dim with a bias each, on views of the
    # fused qkv output: Persimmon, rope_variants.fused_view_qk_layernorm_saved), "none" (no weight), "head_affine"
    # (F.layer_norm per head without affine, then a weight and a bias per head and channel: Chameleon)
    qk_norm_layout: Literal["head", "full_width", "layernorm_head", "none", "head_affine"] = "head"
    expert_tensors: tuple[Shape, ...] | None = Field(default=None, max_length=8)  # routed experts laid out otherwise
    # LongCat-Flash's MoE (calculator.model.zero_experts): zero-computation (identity) experts beside the routed ones
    # (zero_expert_num, 0 included), the router scoring num_experts + zero_experts; None: no such MoE
    zero_experts: int | None = Field(default=None, ge=0, le=B.MAX_EXPERTS, strict=True)
    # the model's norms: "default" (ModelSpec.norm_type's), "weight" (a LayerNorm without bias), "none" (no weight)
    norm_params: Literal["default", "weight", "none"] = "default"
    lm_head_bias: bool = False  # a separate Parameter: kept even when the weight is tied to the embedding
    untrained_per_moe_layer: int = Field(**_COUNT)  # parameters with requires_grad=False in each MoE layer
    fp32_per_moe_layer: int = Field(**_COUNT)  # parameters that stay fp32 in a bf16 model, in each MoE layer
    fp32_per_layer: int = Field(**_COUNT)  # ... in every decoder layer (attention sinks kept in fp32)

    # ---- saved activations -------------------------------------------------------------------------------------
    # "hf": the engine's norm for ModelSpec.norm_type; "fp32_weight": RMSNorm multiplying its weight in fp32
    # (OLMo-2 style, `(self.weight * x).to(dtype)`); "fp32_layernorm": a LayerNorm computed in fp32 (Cohere2-MoE)
    # (Cohere's CohereLayerNorm too); "weightless": an RMSNorm without a weight, x.float()·rsqrt cast back (nanochat)
    # "fp32_input_layernorm": F.layer_norm on x.float() (OLMo's non-affine OlmoLayerNorm); "fp32_weight_copy":
    # fp32_weight on an fp32 copy of the weight, `self.weight.to(torch.float32) * x` (HeliumRMSNorm), or of
    # `1.0 + self.weight.float()` (VaultGemmaRMSNorm: the fp32 multiply keeps that h-wide vector beside x)
    norm: Literal["hf", "fp32_weight", "fp32_layernorm", "weightless", "fp32_input_layernorm",
                  "fp32_weight_copy"] = "hf"
    # eager attention's softmax: "hf" (fp32 unless GPT-2's block), "fp32" (upcast: GPT-BigCode), "model" (in the
    # model dtype: Falcon's, Llama-4's), "max" (model dtype after the row max, whose int64 indices stay: MiMo-V2-Flash)
    eager_softmax: Literal["hf", "fp32", "model", "max"] = "hf"
    # eager attention casts q and k to fp32 before the score matmul (GPT-Neo's GPTNeoSelfAttention._attn,
    # `query.to(torch.float32)`): the matmul keeps the fp32 copies instead of the model-dtype q and k
    eager_qk_fp32: bool = False
    # a fused qkv projection whose q/k/v reach the attention core as views (its whole output kept under flash);
    # False: split, transposed and reshaped into copies first (Falcon's _split_heads + reshape)
    fused_qkv_views: bool = True
    # dropout in training (1-byte masks on CUDA) beyond ModelSpec.dropout's residual one after attention and MLP:
    # on the attention probabilities (None: when ModelSpec.dropout > 0, GPT-2's attn_pdrop = resid_pdrop; OPT's
    # attention_dropout defaults to 0), on the embeddings' sum (OPT's decoder has none), between a plain MLP's
    # activation and fc2 (activation_dropout: its mask, and fc2 keeps the dropped copy)
    attention_dropout: bool | None = None
    embedding_dropout: bool = True
    activation_dropout: bool = False
    # XGLM's eager attention clamps the masked scores, torch.max(scores + mask, finfo.min): it keeps its input (e B
    # per score) and the fp32 scalar
    score_clamp: bool = False
    # eager attention with sinks (ModelSpec.attention_sinks): "gpt_oss" (a model-dtype softmax over [scores | sink]
    # after a max), "fp32" (Flint: q and k upcast, an fp32 softmax over [scores | sink]), "lse_scale" (Granite-SWA: an
    # fp32 softmax, the output scaled by sigmoid(logsumexp(scores) − sink))
    eager_sinks: Literal["gpt_oss", "fp32", "lse_scale"] = "gpt_oss"
    sub_norms: bool = False  # BitNet: an RMSNorm on the attention output (attn_sub_norm) and on the MLP product
    differential: bool = False  # DiffLlama: two attention calls sharing q/k (v halves), a group RMSNorm over 2 heads
    # "sigmoid": out · sigmoid(gate_proj(x)) (AFMoE); "softplus_head": out · softplus(g_proj(x).float()) per head
    # (Laguna); "softplus_element": the same per channel; "sigmoid_head": out · sigmoid(g_proj(x)) per head (LFM3);
    # "sigmoid_head_fp32": out · sigmoid(g_proj(x).float()).to(dtype) per head (Ling 3.0's MLA, on MLA too)
    attention_gate: Literal["none", "sigmoid", "softplus_head", "softplus_element", "sigmoid_head",
                            "sigmoid_head_fp32"] = "none"
    qkv_clip: bool = False  # DBRX's clip_qkv: the fused qkv output clamped to ±clip_qkv, the clamp keeping its input
    fp32_rope: bool = False  # q and k rotated in fp32: every layer keeps its own fp32 cos and sin (ERNIE-4.5-MoE)
    # the shared cos / sin tables stay fp32 (models/lfm3 Lfm3RotaryEmbedding.forward: uncast), counted once
    fp32_rope_tables: bool = False
    rope: bool = True  # False: no rotary embedding, no tables (NoPE: OLMo-Hybrid with rope_theta null builds none)
    # cos and sin sliced and repeat_interleave'd in every layer's apply_rotary_pos_emb (Helium): each layer keeps its
    # own model-dtype copies (fp32 ones with fp32_rope); with either, the shared tables are never saved
    interleaved_rope: bool = False
    # GPT-J / CodeGen's apply_rotary_pos_emb repeat_interleaves sin and cos in each of its two calls: each layer keeps
    # four tables of rotary_dim (calculator.model.rope_variants), "model" (GPT-J) or "fp32" (CodeGen) ones; the
    # shared tables are never saved
    per_call_rope: Literal["none", "model", "fp32"] = "none"
    rotary_dim: int = Field(default=0, ge=0, le=B.MAX_HEAD_DIM, strict=True)  # channels rotated per head; 0: all
    # "xielu": Apertus' Python xIELU on a plain up/down MLP; "fp32_glu": SwiGLU on gate.float() and up.float(), the
    # product cast back (Beam's MLP and experts)
    mlp_act: Literal["hf", "xielu", "fp32_glu"] = "hf"
    # ---- inference ---------------------------------------------------------------------------------------------
    # generate() with the legacy tuple cache (remote-code Qwen v1: each layer returns torch.cat((past, new)) as a new
    # tensor while the step's input past_key_values stays referenced): the previous step's whole cache is alive until
    # the step's forward ends, beside the new one
    legacy_kv_cache: bool = False
    # routed experts' router: "softmax" (softmax or sigmoid over all E in fp32, then top-k), "topk_softmax" /
    # "topk_sigmoid" (top-k of the logits, then an fp32 softmax / a model-dtype sigmoid over those k), "sparsemixer"
    # (PhiMoE: two experts, training-mode masks), "topk_model_softmax" (Aria: a model-dtype softmax over those k)
    # "dense_sigmoid" (Llama-4: every expert runs every token, scaled by a sigmoid of the top-k scattered logits)
    # "gather_sigmoid" (Kolibri-1: top-k of the fp32 logits + bias, then an fp32 sigmoid of the k gathered logits)
    # "model_softmax" (DBRX: a softmax over all E in the model dtype, then top-k; renormalised by their p-norm)
    router: Literal["softmax", "topk_softmax", "topk_sigmoid", "sparsemixer", "dense_sigmoid", "gather_sigmoid",
                    "model_softmax", "topk_model_softmax"] = "softmax"
    router_renorm: bool = True  # top-k weights divided by their sum in fp32 (keeps them and the row sum)
    router_jitter: bool = False  # DBRX's moe_jitter_eps: in training the router input is scaled by uniform noise
    # the experts run one by one on their gathered tokens (DBRX's DbrxExperts loop), not transformers' grouped_mm
    expert_loop: bool = False
    router_clamp: bool = False  # the sum is clamped first (one more fp32 row)
    moe_post_norm: bool = False  # a norm on the MoE block's output (A.X-K1's post_mlp_layernorm): its saved copies
    router_fp32_input: bool = False  # the router reads x.float(): an fp32 copy of its input
    router_fp32_weight_copy: bool = False  # ... and weight.float() of a model-dtype weight
    fp32_routing_weights: bool = True  # the experts receive fp32 routing weights (else the model dtype)
    gated_experts: bool = True  # False: up → act → down experts (grouped_mm has_gate=False: Nemotron-H's relu²)
    # MLA's query multiplied by a per-position scale before the core (mla_extra): "position" (Mistral-4's Llama-4
    # scale, no grad), "learned" (Mistral-Large-4's per-head scale · log(pos + 1) + bias Parameters)
    query_scale: Literal["none", "position", "learned"] = "none"


# ---- parameters ----------------------------------------------------------------------------------------------

def norm_param_shapes(v: VariantSpec, width: int) -> list[Shape] | None:
    """One of the model's norms' tensors, or None for the engine's own (ModelSpec.norm_type)."""
    return [] if v.norm_params == "none" else [(width,)] if v.norm_params == "weight" else None


def untrained_parameters(m) -> int:
    """Parameters created with requires_grad=False: counted by transformers' model.parameters(), given no gradient
    and no optimizer state (ERNIE-4.5-MoE's moe_statics, AFMoE's expert_bias, Laguna's e_score_correction_bias)."""
    v = m.variant
    return v.untrained_per_moe_layer * m.moe_layer_count if v is not None else 0


def fp32_parameters(m) -> int:
    """Parameters that stay fp32 in a bf16 model (ERNIE-4.5-MoE's router, HunYuan-MoE's wg, keep_in_fp32): 4 B each."""
    v = m.variant
    return v.fp32_per_moe_layer * m.moe_layer_count + v.fp32_per_layer * m.num_hidden_layers if v is not None else 0


# ---- saved activations (T tokens, e bytes per element; widths on this rank) ------------------------------------

def norm_saved(v: VariantSpec, T: int, width: int) -> int | None:
    """One norm's saved copies (without its output), or None for the engine's own:
    fp32-weight RMSNorm: fp32 input, fp32 normalised x, fp32 rsqrt per row, 8·T·w + 4·T;
    fp32 LayerNorm (Cohere2MoeLayerNorm): x − mean twice and the normalised x in fp32, an fp32 rstd per row and the
    fp32 copy of its weight, 12·T·w + 4·T + 4·w."""
    if v.norm == "fp32_weight":
        return 8 * T * width + 4 * T
    if v.norm == "fp32_layernorm":
        return 12 * T * width + 4 * T + 4 * width
    if v.norm == "fp32_input_layernorm":  # F.layer_norm's fp32 input and its fp32 mean and rstd per row
        return 4 * T * width + 8 * T
    if v.norm == "fp32_weight_copy":  # (weight.float() * x): the fp32_weight norm and the weight's fp32 copy (or
        # VaultGemma's fp32 1 + weight: models/vaultgemma/modeling_vaultgemma.py VaultGemmaRMSNorm.forward)
        return 8 * T * width + 4 * T + 4 * width
    if v.norm == "weightless":  # no `weight * x.to(dtype)`: only the fp32 input and rsqrt (its output is counted apart)
        return 4 * T * width + 4 * T
    return None


def softmax_fp32(v: VariantSpec | None, default: bool) -> bool:
    """Whether eager attention saves an fp32 softmax (the model's own choice, else the family's `default`)."""
    return default if v is None or v.eager_softmax == "hf" else v.eager_softmax == "fp32"


def attention_dropout(v: VariantSpec | None, hidden: float) -> bool:
    """Whether eager attention drops out its probabilities (the model's own setting, else with the hidden dropout)."""
    return hidden > 0 if v is None or v.attention_dropout is None else v.attention_dropout


def eager_sink_saved(v: VariantSpec | None, rows: int, s_kv: int, T: int, qd: int, e: int) -> int | None:
    """Eager attention with sinks beyond q, k and v (in the model dtype) and o_proj's input, or None for GPT-OSS's
    (activations.sink_softmax_saved); rows = a·b·s query rows.
    fp32 (Flint, models/flint/modeling_flint.py eager_attention_forward): query.float() and the repeat_kv copy's
    key_states.float() are the matmul's inputs, (4 − e)·T·qd more each; the fp32 softmax over [scores | sink]
    4·rows·(s_kv + 1); its sliced cast to the model dtype e·rows·s_kv (the matmul's input).
    lse_scale (Granite-SWA, models/granite_swa/modeling_granite_swa.py and granitemoe_swa, eager_attention_forward):
    the fp32 softmax and its cast (4 + e)·rows·s_kv; logsumexp's input e·rows·s_kv and output e·rows; the fp32
    sigmoid 4·rows and its cast e·rows; the unscaled output e·T·qd (attn_output · sink_scale keeps both)."""
    if v is None or v.eager_sinks == "gpt_oss":
        return None
    if v.eager_sinks == "fp32":
        return 2 * (4 - e) * T * qd + 4 * rows * (s_kv + 1) + e * rows * s_kv
    return (4 + 2 * e) * rows * s_kv + (2 * e + 4) * rows + e * T * qd


def qk_norm_saved(v: VariantSpec, T: int, qd: int, kvd: int, a: int, kv: int, e: int,
                  fused_kept: bool = True) -> int:
    """q and k norms' copies: per element fp32 input + normalised x (model dtype, or fp32 for a fp32-weight norm),
    and one fp32 rsqrt per row: per head and token, or per token for norms over the whole projection; LayerNorms per
    head on views of the fused qkv output keep fp32 mean and rstd per row, and that output unless the core keeps it
    (`fused_kept`, rope_variants.fused_view_qk_layernorm_saved)."""
    rows = 2 * T if v.qk_norm_layout == "full_width" else T * (a + kv)
    if v.qk_norm_layout == "head_affine":  # F.layer_norm's input, its fp32 mean and rstd; `* weight` its output
        return 2 * e * T * (qd + kvd) + 8 * rows
    if v.qk_norm_layout == "layernorm_head":
        return rope_variants.fused_view_qk_layernorm_saved(T, qd, kvd, rows, e, fused_kept)
    per_elem = 8 if v.norm == "fp32_weight" else 4 if v.qk_norm_layout == "none" else 4 + e  # "none": no cast kept
    return per_elem * T * (qd + kvd) + 4 * rows


def attention_extra(v: VariantSpec, T: int, s: int, qd: int, a: int, e: int, rope_dim: int, kvd: int = 0,
                    core: int = 0, eager: bool = False) -> int:
    """What the attention keeps beyond the engine's: an output gate's activation and the gated product (o_proj's
    input; the core's output stays saved by the product) and fp32 RoPE tables recomputed in every layer.
    sigmoid: e·T·qd + e·T·qd; softplus per head: fp32 g_proj output 4·T·a, its cast e·T·a, the product e·T·qd;
    per channel: 4·T·qd + e·T·qd + e·T·qd; fp32 RoPE: cos and sin of s × rope_dim in fp32, 8·s·rope_dim
    (interleaved ones in the model dtype, 2·e·s·rope_dim).
    DBRX's clip_qkv: the clamp keeps its input, the whole fused qkv output, e·T·(qd + 2·kvd).
    BitNet's attn_sub_norm: an HF RMSNorm on the core's output, (4 + e)·T·qd + 4·T (o_proj keeps its output).
    DiffLlama (models/diffllama/modeling_diffllama.py, DiffLlamaAttention): `core` (one call: q/k/v, scores or
    logsumexp, output) again for the second call (eager: its own q copy and repeat_kv copies; flash: q and k are the
    first call's, only v2 e·T·kvd, out2 and logsumexp are new), the cat of both outputs (2·e·T·qd, kept by
    λ·out2), the group nn.RMSNorm over 2·head_dim (CUDA's fused rms_norm: input e·T·qd, rstd 4·T·a/2), o_proj's
    input e·T·qd (the flash output counted in `core` is out1 here), and λ₁, λ₂ (fp32) and λ (model dtype) scalars.
    GPT-Neo's eager core on fp32 q and k: eager_qk_fp32_extra."""
    out = 0
    if v.sub_norms:
        out += (4 + e) * T * qd + 4 * T
    if v.differential:
        second = core - e * T * qd if eager else e * T * (kvd + qd) + 4 * a * T
        out += second + 2 * e * T * qd + e * T * qd + 2 * a * T + (0 if eager else e * T * qd) + 4 + 4 + e
    out += output_gate_saved(v, T, a, qd, e)
    if v.qkv_clip:  # DBRX (models/dbrx/modeling_dbrx.py DbrxAttention): Wqkv(x).clamp(±clip_qkv) keeps Wqkv's output
        out += e * T * (qd + 2 * kvd)
    if v.eager_qk_fp32 and eager:
        out += eager_qk_fp32_extra(T, qd, e)
    if v.per_call_rope != "none":  # GPT-J / CodeGen: four tables of rotary_dim per layer
        out += rope_variants.per_call_rope_saved(v.per_call_rope, s, v.rotary_dim or rope_dim, e)
    if v.fp32_rope:
        out += 8 * s * rope_dim
    elif v.interleaved_rope:  # as wide as the rotated channels (GLM: head_dim · partial_rotary_factor)
        out += 2 * e * s * (v.rotary_dim or rope_dim)
    return out


def eager_qk_fp32_extra(T: int, qd: int, e: int) -> int:
    """GPT-Neo (transformers models/gpt_neo/modeling_gpt_neo.py, GPTNeoSelfAttention._attn): `query.to(float32)`
    and `key.to(float32)` feed torch.matmul, which keeps both fp32 copies (4·T·qd each; k is as wide as q, GPT-Neo
    being multi-head) where the engine's eager core keeps the model-dtype q and k (e·T·qd each): 2·(4 − e)·T·qd
    more. The cast itself keeps nothing, and in GPT-Neo nothing else keeps the model-dtype q or k."""
    return 2 * (4 - e) * T * qd


def output_gate_saved(v: VariantSpec, T: int, a: int, width: int, e: int) -> int:
    """An attention output gate, beyond the core's output (which the gated product keeps, counted by the engine as
    o_proj's input): the gate's activation and the product (o_proj's input), `width` = a·v_head_dim wide; the gate's
    own projection reads the attention's input, which q/k/v already keep.
    sigmoid (AFMoE): e·T·w + e·T·w; softplus per head (Laguna): fp32 g_proj output 4·T·a, its cast e·T·a, the
    product e·T·w; per channel: 4·T·w + e·T·w + e·T·w;
    sigmoid per head (models/lfm3/modeling_lfm3.py Lfm3Attention.forward, `attn_output *
    torch.sigmoid(self.g_proj(hidden_states)).unsqueeze(-1)`): the model-dtype sigmoid (its backward and the product
    keep it) e·T·a, the product e·T·w;
    sigmoid per head in fp32 (models/bailing_hybrid/modeling_bailing_hybrid.py BailingHybridAttention.forward,
    `torch.sigmoid(self.g_proj(hidden_states).float()).to(hidden_states.dtype)`): the fp32 sigmoid 4·T·a, its cast
    (the product's) e·T·a, the product e·T·w."""
    gate = v.attention_gate
    if gate == "sigmoid":
        return 2 * e * T * width
    if gate in ("softplus_head", "sigmoid_head_fp32"):
        return (4 + e) * T * a + e * T * width
    if gate == "softplus_element":
        return (4 + 2 * e) * T * width
    if gate == "sigmoid_head":
        return e * T * a + e * T * width
    return 0


def mla_extra(v: VariantSpec, T: int, s: int, a: int, qk: int, vd: int, e: int) -> int:
    """What an MLA layer keeps beyond the engine's: an output gate on its a·v_head_dim output (output_gate_saved)
    and a per-position query scale, `query_states * scale` on the concatenated q (the product is the core's q):
    "position" (models/mistral4/modeling_mistral4.py Mistral4Attention.forward, get_llama_4_attn_scale: a
    [1, 1, s, 1] table of position_ids [1, s], no grad) keeps only that table, e·s; "learned"
    (models/mistral_large4/modeling_mistral_large4.py MistralLarge4TextSoftmaxScaling.forward: scale[h]·log(pos + 1)
    + bias[h], Parameters) keeps the unscaled q, e·T·a·qk, the [1, a, s] scale and the log-position cast that
    scale · log_pos keeps, e·(a + 1)·s."""
    out = output_gate_saved(v, T, a, a * vd, e)
    if v.query_scale == "position":
        out += e * s
    elif v.query_scale == "learned":
        out += e * T * a * qk + e * (a + 1) * s
    return out


def shared_rope_width(v: VariantSpec | None, head_dim: int) -> int:
    """The width of the RoPE tables computed once and kept by every layer (rope_variants.shared_rope_width; NoPE: 0)."""
    if v is None:
        return head_dim
    return rope_variants.shared_rope_width(v.per_call_rope != "none", v.rotary_dim, head_dim) if v.rope else 0


def mlp_saved(v: VariantSpec, T: int, f: int, e: int) -> int | None:
    """A dense MLP's saved tensors, or None for the engine's. Apertus' Python xIELU on a plain up/down MLP keeps the
    up_proj output, alpha_p·x, expm1(min(x, eps)), expm1(...) − x and the `where` output (down_proj's input), e·T·f
    each, a bool x > 0 (T·f) and the two softplus-ed alphas (scalars, e B each). Activation dropout on a plain MLP
    (XGLM, BioGPT): the activation's saved input or output, the 1-byte mask and the dropped copy (fc2's input)."""
    if v.mlp_act == "xielu":
        return 5 * e * T * f + T * f + 2 * e
    if v.mlp_act == "fp32_glu":  # fp32 gate, up and activation, and the product cast back (down_proj's input)
        return (12 + e) * T * f
    if v.activation_dropout:  # plain MLP: the activation's input (GELU) or output (ReLU), the mask, fc2's input
        return 2 * e * T * f + T * f
    if v.sub_norms:  # BitNet's ffn_sub_norm (an HF RMSNorm) on the product, which is then not kept: the three
        # f-wide tensors before it, the norm's fp32 copy, normalised copy and rsqrt, and its output (down_proj's input)
        return 5 * e * T * f + 4 * T * f + 4 * T
    return None


def moe_saved(v: VariantSpec, T: int, k: int, E: int, f: int, h: int, e: int, ep: int = 1) -> int:
    """Routed experts and their router (transformers' grouped_mm experts, S = T·k routed pairs; PhiMoE k = 2):
    gathered input and expert output e·S·2h, gate_up / activation / product e·S·4f, three int64 S-vectors 24·S, the
    routing weights 4·S (fp32) or e·S, int32 offsets 4·E/ep (ungated relu² experts: e·S·2f, not 4f); the router:
    softmax: fp32 scores 4·T·E and int64 top-k indices 8·T·k, a renormalisation 4·T·k + 4·T (+ 4·T clamped), an
    fp32 copy of the input 4·T·h and of a model-dtype weight 4·E·h;
    gather_sigmoid: the softmax's 4·T·E and 8·T·k, then gather_sigmoid_router_saved;
    topk_softmax: int64 indices 8·T·k and the fp32 softmax over k, 4·T·k; topk_sigmoid: the indices and the
    model-dtype sigmoid e·T·k (+ its row sum e·T when renormalised); topk_model_softmax: its softmax's e·T·k;
    sparsemixer (training): two softmaxes e·T·E and two bool masks T·E each, int64 argmaxes and gathered weights,
    20·T."""
    S = T * k
    if v.zero_experts is not None:  # LongCat-Flash's loop over the experts hit, identities among them
        return zero_experts.moe_saved(T, k, E, v.zero_experts, f, h, e)
    if v.router == "dense_sigmoid":  # E·T rows: the repeated input and its scaled copy (bmm's input), gate_up,
        # the activation, the product; the model-dtype scores at the experts e·E·T, int64 top-k 8·T·k, fp32 sigmoid
        return e * E * T * (2 * h + 4 * f) + e * E * T + 8 * T * k + 4 * T * E
    if v.expert_loop:
        return expert_loop_saved(v, T, k, E, f, h, e)
    glu = (12 + e) * f if v.mlp_act == "fp32_glu" else (4 if v.gated_experts else 2) * e * f  # per routed pair
    out = S * (glu + 2 * e * h) + 24 * S + (4 if v.fp32_routing_weights else e) * S + 4 * (E // ep)
    if v.router == "sparsemixer":
        return out + 2 * e * T * E + 2 * T * E + 20 * T
    if v.router == "topk_softmax":
        return out + 12 * T * k
    if v.router == "model_softmax":  # DBRX's bookkeeping (expert_loop_saved) at grouped_mm experts (Mistral-4)
        return out + e * T * E + 8 * T * k + (e * T * k + e * T if v.router_renorm else 0)
    if v.router in ("topk_sigmoid", "topk_model_softmax"):  # the sigmoid's / softmax's output, the row sum
        return out + 8 * T * k + e * T * k + (e * T if v.router_renorm else 0)
    out += 4 * T * E + 8 * T * k
    if v.router == "gather_sigmoid":
        out += gather_sigmoid_router_saved(v, T, k)
    elif v.router_renorm:
        out += 4 * T * k + 4 * T + (4 * T if v.router_clamp else 0)
    if v.router_fp32_input:
        out += 4 * T * h
    if v.router_fp32_weight_copy:
        out += 4 * E * h
    return out


def expert_loop_saved(v: VariantSpec, T: int, k: int, E: int, f: int, h: int, e: int) -> int:
    """DBRX's experts and router (models/dbrx/modeling_dbrx.py, transformers 5.23). DbrxExperts.forward loops over the
    experts hit: torch.where(expert_mask[i]) gives (idx, token_idx) as the two columns of one int64 [n, 2] tensor
    (16 B per routed pair, kept by hidden_states[token_idx] and index_add_); per routed pair (S = T·k in all) the
    gathered input (x.matmul(w1.T) keeps it), gate_proj before SiLU, up_proj, SiLU's output and the product
    (4·e·f), down_proj's output and its product with the gathered model-dtype routing weight (e each: index_add_
    keeps that source), e·(3h + 4f + 1) + 16 per pair. DbrxFFN.route_tokens_to_experts ("model_softmax"): the
    softmax over all E in the router logits' dtype e·T·E, topk's int64 indices 8·T·k and, when
    moe_normalize_expert_weights is set, the top-k values e·T·k and their p-norm e·T (the division and torch.norm
    keep them); DbrxRouter's jitter (moe_jitter_eps, training) keeps its uniform noise e·T·h."""
    S = T * k
    out = S * (e * (3 * h + 4 * f + 1) + 16)
    out += e * T * E + 8 * T * k + (e * T * k + e * T if v.router_renorm else 0)
    return out + (e * T * h if v.router_jitter else 0)


def gather_sigmoid_router_saved(v: VariantSpec, T: int, k: int) -> int:
    """Kolibri-1's router (models/kolibri1/modeling_kolibri1.py Kolibri1TopKRouter.forward) beyond the fp32 logits
    (router_logits.gather keeps its input, 4·T·E) and topk's int64 indices (8·T·k): `.sigmoid()` of the k gathered
    logits keeps its fp32 output, 4·T·k; with norm_topk_prob the division keeps that output and the fp32 row sum,
    4·T more."""
    return 4 * T * k + (4 * T if v.router_renorm else 0)


def moe_input_kept(v: VariantSpec, shared_expert: bool) -> bool:
    """Whether anything keeps the MoE block's input (the post-attention norm's output): a shared expert's linears or
    a model-dtype router do; an fp32 router reads an fp32 copy, and the experts keep their gathered copy."""
    return shared_expert or not v.router_fp32_input
