"""Exact parameter counts of a decoder transformer, module by module, as `transformers` builds it.

Every count here is checked against `sum(p.numel() for p in model.parameters())` of the real `transformers`
model built from the same config on the meta device (tests/model/test_parameters.py). Buffers (rotary tables,
DeepSeek's e_score_correction_bias) are not parameters and are not counted.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property, lru_cache

from calculator.model import architectures, variants, zero_experts
from calculator.model.architectures.shapes import numel
from calculator.model.spec import LayerKind, ModelSpec


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one decoder layer, split by what shards differently."""

    attention: int  # q/k/v/o (+ biases, q/k norms, MLA low-rank projections, sinks)
    mlp: int  # the dense MLP (0 in an MoE layer)
    router: int  # MoE gate
    routed_experts: int  # all routed experts of the layer (sharded by expert parallelism)
    shared_experts: int  # always-on experts (not sharded by EP)
    norms: int
    largest_module: int  # the largest single module, for the ZeRO-3/FSDP gather buffer
    tensors: int = 0  # number of parameter tensors (AdamW keeps a 4-byte `step` per tensor)
    tp_replicated: int = 0  # of `attention`: what every tensor-parallel rank keeps whole (tp_replicated_shapes)

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.router + self.routed_experts + self.shared_experts + self.norms

    @property
    def dense(self) -> int:
        """Everything except routed experts (replicated across expert-parallel ranks)."""
        return self.total - self.routed_experts

    def tp_local(self, tp: int) -> int:
        """Attention, dense MLP and shared experts on one of `tp` tensor-parallel ranks: what TP splits, ⌈/ tp⌉,
        plus what every rank keeps whole (tp_replicated)."""
        return -(-(self.attention - self.tp_replicated + self.mlp + self.shared_experts) // tp) + self.tp_replicated


@dataclass(frozen=True)
class ParameterCounts:
    embedding: int  # token (+ learned position) embeddings
    layers: tuple[LayerParams, ...]
    final_norm: int
    lm_head: int  # 0 when tied to the embedding
    tensors: int  # number of parameter tensors in the model
    active_per_token: int  # parameters a token passes through (MoE: top-k of the routed experts)
    idle: int = 0  # modules built but never run, held with the embedding (VariantSpec.idle_tensors: MiMo's MTP)

    @cached_property
    def total(self) -> int:
        return (self.embedding + sum(n * l.total for l, n in kind_counts(self.layers)) + self.final_norm
                + self.lm_head + self.idle)

    @property
    def largest_module(self) -> int:
        return max([self.embedding, self.lm_head] + [l.largest_module for l in self.layers])


Shape = tuple[int, ...]

# Model types whose q/k norm spans the whole projection (num_heads·head_dim) instead of one head:
# OLMo-2 (transformers models/olmo2/modeling_olmo2.py, Olmo2Attention: q_norm = Olmo2RMSNorm(num_attention_heads *
# head_dim), k_norm = Olmo2RMSNorm(num_key_value_heads * head_dim)); OLMo-3 and OLMoE the same; Cohere
# (models/cohere/modeling_cohere.py: CohereLayerNorm(hidden_size=(num_heads, head_dim))). Qwen3 and Gemma-3
# normalise per head with one weight of head_dim.
FULL_WIDTH_QK_NORM_TYPES = frozenset({"olmo2", "olmo3", "olmoe", "cohere", "cohere2"})
# Phi (models/phi/modeling_phi.py, PhiAttention): q_layernorm = nn.LayerNorm(head_dim), a weight and a bias each.
LAYERNORM_QK_NORM_TYPES = frozenset({"phi"})
# StableLM (models/stablelm/modeling_stablelm.py, StableLmLayerNormPerHead): one bias-free LayerNorm(head_dim)
# module per head: num_heads weights for q, num_key_value_heads for k.
PER_HEAD_MODULE_QK_NORM_TYPES = frozenset({"stablelm"})
# LayerNorms without a bias: Cohere's CohereLayerNorm (weight only).
NORM_WITHOUT_BIAS_TYPES = frozenset({"cohere", "cohere2"})
# An LM head with a bias: Phi (PhiForCausalLM: nn.Linear(hidden_size, vocab_size, bias=True)).
LM_HEAD_BIAS_TYPES = frozenset({"phi"})


def linear_shapes(n_in: int, n_out: int, bias: bool = False) -> list[Shape]:
    """nn.Linear(n_in, n_out): a weight (n_out, n_in) and an optional bias (n_out,)."""
    return [(n_out, n_in)] + ([(n_out,)] if bias else [])


def norm_shapes(width: int, norm_type: str, bias: bool = True) -> list[Shape]:
    """RMSNorm keeps a weight of `width`; LayerNorm a weight and (unless bias-free) a bias."""
    return [(width,)] * (2 if norm_type == "layernorm" and bias else 1)


def model_norm_shapes(m: ModelSpec, width: int) -> list[Shape]:
    """One of the model's own norms over `width`."""
    if m.variant is not None:  # hook (issue 21): a model type's norms without a bias or without parameters
        shapes = variants.norm_param_shapes(m.variant, width)
        if shapes is not None:
            return shapes
    return norm_shapes(width, m.norm_type, m.model_type not in NORM_WITHOUT_BIAS_TYPES)


def final_norm_shapes(m: ModelSpec) -> list[Shape]:
    """The final norm's tensors, after DeepSeek-V4's hc_head (DeepseekV4HyperHead collapses the hc_mult streams just
    before it: ModelSpec.hc_mult)."""
    hc = architectures.compressed.hc_head_shapes(m.hidden_size, m.hc_mult) if m.hc_mult else []
    return hc + model_norm_shapes(m, m.hidden_size)


def lm_head_shapes(m: ModelSpec) -> list[Shape]:
    """The output projection's tensors (none when tied to the embedding)."""
    if m.variant is not None and m.variant.lm_head_bias:  # hook (issue 21): the bias stays when the weight is tied
        return [(m.vocab_size,)] if m.tie_word_embeddings else linear_shapes(m.hidden_size, m.vocab_size, True)
    if m.tie_word_embeddings:
        return []
    return linear_shapes(m.hidden_size, m.vocab_size, m.model_type in LM_HEAD_BIAS_TYPES)


def mlp_shapes(h: int, f: int, gated: bool, bias: bool, fused_gate_up: bool = False) -> list[Shape]:
    """Gated MLP (gate, up, down: 3·h·f; Phi-3 fuses gate and up) or plain MLP (fc1, fc2: 2·h·f)."""
    if gated and fused_gate_up:
        return linear_shapes(h, 2 * f, bias) + linear_shapes(f, h, bias)
    if gated:
        return 2 * linear_shapes(h, f, bias) + linear_shapes(f, h, bias)
    return linear_shapes(h, f, bias) + linear_shapes(f, h, bias)


def attention_shapes(m: ModelSpec) -> list[Shape]:
    """Attention block: q/k/v/o (GQA-aware, fused or not) or MLA's low-rank projections; q/k norms; sinks."""
    h, a = m.hidden_size, m.num_attention_heads
    if m.is_mla:
        # DeepSeek-V3 (transformers modeling_deepseek_v3.py): q_a_proj, q_a_layernorm, q_b_proj (or q_proj),
        # kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj.
        if m.q_lora_rank:
            q = (linear_shapes(h, m.q_lora_rank, m.qkv_bias) + [(m.q_lora_rank,)]
                 + linear_shapes(m.q_lora_rank, a * m.head_size))
        else:
            q = linear_shapes(h, a * m.head_size)
        kv = (linear_shapes(h, m.kv_lora_rank + m.qk_rope_head_dim, m.qkv_bias) + [(m.kv_lora_rank,)]
              + linear_shapes(m.kv_lora_rank, a * (m.qk_nope_head_dim + m.v_head_dim)))
        gate = list(m.variant.attention_tensors) if m.variant is not None else []  # hook (issue 21): Ling's g_proj
        return q + kv + linear_shapes(a * m.v_head_dim, h, m.o_bias) + gate
    q_out = 2 * m.q_dim if m.attention_output_gate else m.q_dim  # Qwen3-Next / Qwen3.5: q and its output gate
    v_dim, o_in = m.kv_heads * m.v_head_size, a * m.v_head_size  # MiMo-V2-Flash: v heads narrower than q/k's
    if m.fused_qkv:
        qkv = linear_shapes(h, q_out + m.kv_dim + v_dim, m.qkv_bias)
    else:
        qkv = (linear_shapes(h, q_out, m.qkv_bias) + linear_shapes(h, m.kv_dim, m.qkv_bias)
               + linear_shapes(h, v_dim, m.qkv_bias))
    if m.variant is not None:  # hook (issue 21): a variant's extra attention tensors (an output gate's projection
        qkv = qkv + list(m.variant.attention_tensors)  # reads the attention's input as q/k/v do), before o_proj
    shapes = qkv + linear_shapes(o_in, h, m.o_bias)
    layout = m.variant.qk_norm_layout if m.variant is not None else None  # hook (issue 21): a variant's q/k norms
    if m.qk_norm and layout == "none":
        pass
    elif m.qk_norm and layout == "head_affine":  # Chameleon: a weight and a bias of (heads, head_dim) for q and k
        shapes += [(a, m.head_size)] * 2 + [(m.kv_heads, m.head_size)] * 2
    elif m.qk_norm and (m.model_type in FULL_WIDTH_QK_NORM_TYPES or layout == "full_width"):
        shapes += [(m.q_dim,), (m.kv_dim,)]
    elif m.qk_norm and (m.model_type in LAYERNORM_QK_NORM_TYPES or layout == "layernorm_head"):
        shapes += 4 * [(m.head_size,)]
    elif m.qk_norm and m.model_type in PER_HEAD_MODULE_QK_NORM_TYPES:
        shapes += (a + m.kv_heads) * [(m.head_size,)]
    elif m.qk_norm:
        shapes += [(m.head_size,), (m.head_size,)]
    if m.attention_sinks:
        shapes.append((a,))
    return shapes


def mla_tp_replicated_shapes(m: ModelSpec) -> list[Shape]:
    """MLA's tensors every tensor-parallel rank keeps whole: the down projections q_a_proj and kv_a_proj_with_mqa
    (biases included) and the norms of their latents, q_a_layernorm and kv_a_layernorm. Every implementation the
    engine models replicates them: transformers (DeepseekV2/V32/GlmMoeDsa/LongcatFlash base_model_tp_plan leave
    q_a_proj out and give kv_a_proj_with_mqa "mla_kv_a_proj", distributed/tensor_parallel.py MlaKvAProjParallel:
    whole on every rank, its rope slice's gradient all-reduced), vLLM 0.33 and SGLang 0.5.23 (models/deepseek_v2.py:
    ReplicatedLinear q_a_proj / kv_a_proj_with_mqa, or SGLang's fused_qkv_a_proj_with_mqa), Megatron-Core with
    Transformer Engine (multi_latent_attention.py: linear_q_down_proj / linear_kv_down_proj are TELinear with
    parallel_mode="duplicated"; the latent norms are the up projections' TELayerNormColumnParallelLinear weights,
    gpt_layer_specs.py). q_b_proj / q_proj, kv_b_proj and o_proj are split by heads."""
    h = m.hidden_size
    q = (linear_shapes(h, m.q_lora_rank, m.qkv_bias) + [(m.q_lora_rank,)]) if m.q_lora_rank else []
    return q + linear_shapes(h, m.kv_lora_rank + m.qk_rope_head_dim, m.qkv_bias) + [(m.kv_lora_rank,)]


def tp_replicated_shapes(m: ModelSpec, kind: LayerKind) -> list[Shape]:
    """The tensors of one kind of layer's token mixer that tensor parallelism leaves whole on every rank: MLA's
    down projections and latent norms (mla_tp_replicated_shapes, also under a kind that runs beside MLA), and what
    the mixer kind declares (its module's tp_replicated_shapes: DSA's indexer, DeepSeek-V4's projections to the
    shared key and the latents, and its compressors). Gemma 3n / 4 split all of theirs."""
    if m.gemma_next is not None or kind.mixer == "none":
        return []
    if kind.mixer in ("attention", "mla"):
        att = m.attention_of(kind)
        return mla_tp_replicated_shapes(att) if att.is_mla else []
    out = mla_tp_replicated_shapes(m) if architectures.with_attention(kind.mixer) and m.is_mla else []
    own = getattr(architectures.mixer(kind.mixer), "tp_replicated_shapes", None)
    return out + (own(m) if own is not None else [])


def routed_expert_shapes(m: ModelSpec) -> list[Shape]:
    """All routed experts of a layer; transformers >= 5 stores them fused as (E, 2f, h) and (E, h, f)."""
    if m.variant is not None and m.variant.expert_tensors is not None:  # hook (issue 21): experts laid out otherwise
        return list(m.variant.expert_tensors)
    e, h, f = m.num_experts, m.expert_hidden_size, m.expert_intermediate_size  # a latent MoE's width
    width = 2 * f if m.gated_mlp else f
    shapes: list[Shape] = [(e, width, h), (e, h, f)]
    if m.expert_bias:
        shapes += [(e, width), (e, h)]
    return shapes


def layer_shapes(m: ModelSpec, i: int) -> dict[str, list[Shape]]:
    """Parameter tensor shapes of decoder layer i, grouped by how they shard."""
    return {k: list(v) for k, v in kind_shapes(m, m.layer_kind(i))}


@lru_cache(maxsize=512)
def kind_shapes(m: ModelSpec, kind: LayerKind) -> tuple[tuple[str, tuple[Shape, ...]], ...]:
    """Parameter tensor shapes of one kind of decoder layer (its token mixer and feed-forward), grouped by how they
    shard: every layer of a kind has the same, so they are derived once per model and kind (an immutable (group,
    shapes) tuple). The mixer's tensors are the "attention" group whatever its kind."""
    h = m.hidden_size
    if m.gemma_next is not None:  # hook: Gemma 3n / 4 layers differ layer by layer (architectures/gemma_next.py)
        return architectures.gemma_next.kind_shapes(m, kind)
    if kind.mixer in ("attention", "mla", "none"):
        mixer = attention_shapes(m.attention_of(kind)) if kind.mixer != "none" else []
    else:  # a kind of the registry, beside (or on top of) the model's attention when it says so
        mixer = (attention_shapes(m) if architectures.with_attention(kind.mixer) else []) + \
            architectures.mixer(kind.mixer).shapes(m)
    groups: dict[str, list[Shape]] = {
        "attention": mixer,
        # a block of a mixer or a feed-forward alone (Nemotron-H) has one norm
        "norms": (m.norms_per_layer if "none" not in kind else 1) * model_norm_shapes(m, h),
        "mlp": [], "router": [], "routed_experts": [], "shared_experts": [],
    }
    if m.hc_mult:  # hook: hyper-connections (DeepSeek-V4's attn_hc and ffn_hc), replicated like the norms
        groups["norms"] += 2 * architectures.compressed.hc_shapes(h, m.hc_mult)
    if kind.ffn == "dense":
        groups["mlp"] = mlp_shapes(h, m.ffn_of(kind).intermediate_size, m.gated_mlp, m.mlp_bias, m.fused_gate_up)
        if m.variant is not None:  # hook (issue 21): a variant's extra dense-MLP tensors (xIELU's alphas)
            groups["mlp"] += m.variant.mlp_tensors
    elif kind.ffn == "moe":
        zero = (m.variant.zero_experts or 0) if m.variant is not None else 0  # hook: LongCat-Flash's identities
        groups["router"] = linear_shapes(h, m.num_experts + zero, m.router_bias)
        groups["routed_experts"] = routed_expert_shapes(m)
        if m.variant is not None:  # hook (issue 21): a variant's router Parameters (e_score_correction_bias)
            groups["router"] += m.variant.moe_tensors
        if m.moe_latent_size:  # fc1_latent_proj, fc2_latent_proj: replicated like the gate (vLLM / SGLang
            # nemotron_h.py ReplicatedLinear; models/nemotron_h/modeling_nemotron_h.py NemotronHMoE, bias mlp_bias)
            groups["router"] += linear_shapes(h, m.moe_latent_size, m.mlp_bias) + \
                linear_shapes(m.moe_latent_size, h, m.mlp_bias)
        if m.num_shared_experts or m.shared_expert_intermediate_size:
            width = m.shared_expert_intermediate_size or m.num_shared_experts * m.expert_intermediate_size
            groups["shared_experts"] = mlp_shapes(h, width, m.gated_mlp, m.mlp_bias, m.fused_gate_up)
            if m.shared_expert_gate:
                groups["shared_experts"] += linear_shapes(h, 1)
    return tuple((k, tuple(v)) for k, v in groups.items())


@lru_cache(maxsize=256)
def layer_kinds(m: ModelSpec) -> tuple[tuple[LayerKind, int], ...]:
    """(kind, number of decoder layers) for each kind of layer the model has, in order of first appearance (dense
    before MoE for the models whose every mixer is the same)."""
    if all(t in (None, "full_attention", "sliding_attention") for t in (m.layer_types or (None,))) and (
            m.ffn_types is None or "none" not in m.ffn_types) and m.gemma_next is None and \
            not m.own_swa_heads:  # (Gemma 3n / 4, MiMo-V2-Flash, Step-3.5: kinds per layer type)
        mixer = "mla" if m.is_mla else "attention"
        moe = m.moe_layer_count if m.is_moe else 0
        return tuple((LayerKind(mixer, f), n) for f, n in (("dense", m.num_hidden_layers - moe), ("moe", moe)) if n)
    counts: dict[LayerKind, int] = {}
    for i in range(m.num_hidden_layers):
        k = m.layer_kind(i)
        counts[k] = counts.get(k, 0) + 1
    return tuple(counts.items())


@lru_cache(maxsize=256)
def stage_kinds(m: ModelSpec, first: int, last: int) -> tuple[tuple[LayerKind, int], ...]:
    """(kind, number of layers) of decoder layers first..last − 1, in order of first appearance."""
    if first == 0 and last == m.num_hidden_layers:
        return layer_kinds(m)
    counts: dict[LayerKind, int] = {}
    for i in range(first, last):
        k = m.layer_kind(i)
        counts[k] = counts.get(k, 0) + 1
    return tuple(counts.items())


def kind_counts(layers) -> list[tuple[LayerParams, int]]:
    """(layer, how many) for each distinct LayerParams object of `layers`, in order of first appearance
    (count_parameters shares one object per kind of layer, so a 32-layer model has one or two)."""
    by_id = {id(x): x for x in layers}
    return [(by_id[k], n) for k, n in Counter(map(id, layers)).items()]


def layer_params(m: ModelSpec, i: int) -> LayerParams:
    """Parameters of decoder layer i."""
    return kind_params(m, m.layer_kind(i))


@lru_cache(maxsize=512)
def kind_params(m: ModelSpec, kind: LayerKind) -> LayerParams:
    """Parameters of one kind of decoder layer."""
    n = {k: numel(v) for k, v in kind_shapes(m, kind)}
    largest = max(n["attention"], n["mlp"], n["routed_experts"], n["shared_experts"])
    return LayerParams(n["attention"], n["mlp"], n["router"], n["routed_experts"], n["shared_experts"], n["norms"],
                       largest_module=largest, tensors=sum(len(v) for _, v in kind_shapes(m, kind)),
                       tp_replicated=numel(tp_replicated_shapes(m, kind)))


def outer_shapes(m: ModelSpec) -> list[Shape]:
    """Hook (issue 21): the tensors outside the decoder layers beside the embedding, the final norm and the head
    (VariantSpec.outer_tensors, and the idle_tensors a model builds but never runs, which load all the same)."""
    return list(m.variant.outer_tensors) + list(m.variant.idle_tensors) if m.variant is not None else []


def model_tensor_shapes(m: ModelSpec) -> list[Shape]:
    """Every parameter tensor's shape (tied embeddings once), for optimizers whose state depends on shapes."""
    h = m.hidden_size
    shapes: list[Shape] = [(m.embedding_vocab_size, h)]
    if m.learned_position_embeddings:
        shapes.append((m.learned_position_embeddings, h))
    kinds = {kind: [s for _, group in kind_shapes(m, kind) for s in group] for kind, _ in layer_kinds(m)}
    for i in range(m.num_hidden_layers):
        shapes += kinds[m.layer_kind(i)]
    return shapes + outer_shapes(m) + final_norm_shapes(m) + lm_head_shapes(m)


def _layer_linears(m: ModelSpec):
    """(2-D weight shape, number of decoder layers holding it) over the model's kinds of layer."""
    return [(shape, n) for kind, n in layer_kinds(m) for _, group in kind_shapes(m, kind) for shape in group
            if len(shape) == 2]


@lru_cache(maxsize=256)
def count_parameters(m: ModelSpec) -> ParameterCounts:
    """Parameter counts of the whole model, module by module."""
    h = m.hidden_size
    embedding = m.embedding_vocab_size * h + m.learned_position_embeddings * h
    outer = outer_shapes(m)  # hook (issue 21): outer_tensors counted with the embedding, the idle ones apart
    idle = numel(architectures.idle_shapes(m))
    embedding += numel(m.variant.outer_tensors) if m.variant is not None else 0
    # Identical layers share one LayerParams (a 10,000-layer model: 80 kB of references, not 2.4 MB of objects
    # kept by this cache for every distinct model a server is asked about).
    kinds = {kind: (kind_params(m, kind), n) for kind, n in layer_kinds(m)}
    layers = tuple(kinds[m.layer_kind(i)][0] for i in range(m.num_hidden_layers)) if len(kinds) > 1 else \
        tuple(p for p, _ in kinds.values()) * m.num_hidden_layers
    final_norm = numel(final_norm_shapes(m))
    tensors = (1 + (m.learned_position_embeddings > 0) + sum(n * p.tensors for p, n in kinds.values())
               + len(final_norm_shapes(m)) + len(lm_head_shapes(m)) + len(outer))
    lm_head = numel(lm_head_shapes(m))
    inactive = 0
    for kind, (p, n) in kinds.items():  # each MoE layer's routed experts beyond the top-k
        if kind.ffn == "moe":
            routed_inactive = p.routed_experts * (m.num_experts - m.num_experts_per_tok) // m.num_experts
            if m.variant is not None and m.variant.zero_experts:  # hook: LongCat-Flash, k·n/(n + z) real experts
                routed_inactive = p.routed_experts - zero_experts.active_routed_params(
                    m.num_experts_per_tok, m.num_experts, m.variant.zero_experts, m.expert_intermediate_size, h)
            inactive += n * routed_inactive
    total = embedding + sum(n * p.total for p, n in kinds.values()) + final_norm + lm_head
    return ParameterCounts(embedding, layers, final_norm, lm_head, tensors, active_per_token=total - inactive,
                           idle=idle)


@lru_cache(maxsize=256)
def largest_tensor(m: ModelSpec) -> int:
    """Elements of the largest parameter tensor (what a for-loop optimizer step allocates temporaries for)."""
    h = m.hidden_size
    shapes = [(m.embedding_vocab_size, h), (m.learned_position_embeddings, h)] + final_norm_shapes(m) + \
        lm_head_shapes(m)
    shapes += outer_shapes(m)
    shapes += [s for kind, _ in layer_kinds(m) for _, group in kind_shapes(m, kind) for s in group]
    return max(numel([shape]) for shape in shapes)


@lru_cache(maxsize=256)
def largest_layer_linear(m: ModelSpec) -> int:
    """Elements of the largest 2-D weight inside a decoder layer (what a 4-bit kernel dequantizes at once)."""
    return max((shape[0] * shape[1] for shape, _ in _layer_linears(m)), default=0)


@lru_cache(maxsize=256)
def layer_linear_in_rows(m: ModelSpec) -> int:
    """Σ in_features over the 2-D weights of all decoder layers (GPTQ keeps an int32 g_idx per input row)."""
    return sum(shape[1] * n for shape, n in _layer_linears(m))


@lru_cache(maxsize=256)
def layer_linear_out_rows(m: ModelSpec) -> int:
    """Σ out_features over the 2-D weights of all decoder layers (LLM.int8 keeps an fp32 scale per output row)."""
    return sum(shape[0] * n for shape, n in _layer_linears(m))
