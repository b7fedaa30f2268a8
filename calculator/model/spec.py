"""The model description the engine computes with: a decoder transformer (dense or MoE, MHA/GQA/MQA or MLA,
full or sliding-window attention) or a generic network given only as totals (seed 004).

Field names follow Hugging Face `config.json` wherever one exists, so a preset file is a real config and
`calculator.model.hf_config.spec_from_hf_config` is a thin mapping. `family` selects how a block lays out its
tensors (which decides the exact saved activations; see `calculator.memory.activations`).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from calculator.core import bounds as B
from calculator.core.dtypes import Dtype
from calculator.core.hash_once import HashedOnce
from calculator.model.architectures.compressed import CompressedSpec
from calculator.model.architectures import ffn_widths as per_layer_ffn
from calculator.model.architectures.dsa import IndexerSpec
from calculator.model.architectures.gemma_next import GemmaNextSpec
from calculator.model.architectures.gemma_next import layer_slots as gemma_slots
from calculator.model.architectures.kda import KDASpec
from calculator.model.architectures.lightning import LightningSpec
from calculator.model.architectures.mamba import MambaSpec
from calculator.model.architectures.short_conv import ShortConvSpec
from calculator.model.mixer_specs import LinearAttentionSpec
from calculator.model.variants import VariantSpec
from calculator.model.vision import VisionSpec

Family = Literal["llama", "gemma", "phi3", "gpt2", "gpt_neox", "deepseek", "gpt_oss"]


class LayerKind(NamedTuple):
    """What one decoder layer is made of: a token mixer and a feed-forward, each of a kind
    (calculator/model/architectures/ holds one module per kind)."""

    mixer: str  # "attention" (full, sliding or chunked), "mla", or a kind of calculator.model.architectures.MIXERS
    ffn: str  # "dense", "moe" or "none"
    # Gemma 3n / 4 (calculator.model.architectures.gemma_next): the first layer built like this one, whose parts
    # change layer by layer; MiMo-V2-Flash (ModelSpec.swa_num_key_value_heads): 1 on a sliding layer, 0 on a full
    # one (ModelSpec.attention_of); -1 for every other model
    slot: int = -1


# layer type -> the ModelSpec field that configures it
_LAYER_TYPE_CONFIG = {"linear_attention": "linear_attention", "mamba": "mamba", "conv": "short_conv", "kda": "kda",
                      "lightning_attention": "lightning", "indexed_attention": "indexer",
                      "parallel_mamba_attention": "mamba", "compressed_window_attention": "compressed",
                      "compressed_sparse_attention": "compressed", "heavily_compressed_attention": "compressed"}
# layer_types entry -> the token mixer kind of that layer (softmax attention: "attention", or "mla" for MLA models)
LAYER_TYPE_MIXERS = {"full_attention": "attention", "sliding_attention": "attention",
                     "linear_attention": "gated_deltanet", "mamba": "mamba", "conv": "short_conv", "kda": "kda",
                     "lightning_attention": "lightning", "indexed_attention": "dsa",
                     "parallel_mamba_attention": "mamba_attention", "none": "none",
                     # DeepSeek-V4 (architectures/compressed.py): its "sliding_attention" layers (compress ratio 0)
                     # are compressed_window_attention here, as they are not the engine's sliding attention
                     "compressed_window_attention": "compressed_window",
                     "compressed_sparse_attention": "compressed_sparse",
                     "heavily_compressed_attention": "compressed_heavy"}
# "none": a block without a token mixer (Nemotron-H's MLP or MoE blocks); mappers name each layer with these values
LayerType = Literal["full_attention", "sliding_attention", "linear_attention", "mamba", "conv", "kda",
                    "lightning_attention", "indexed_attention", "parallel_mamba_attention", "none",
                    "compressed_window_attention", "compressed_sparse_attention", "heavily_compressed_attention"]
FfnType = Literal["dense", "moe", "none"]


class ModelSpec(HashedOnce):
    """A decoder-only transformer, described with Hugging Face config field names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(default="custom", max_length=B.MAX_NAME_CHARS)
    model_type: str = Field(default="llama", max_length=B.MAX_NAME_CHARS)
    architecture: str | None = Field(default=None, max_length=B.MAX_NAME_CHARS)  # config.json's architectures[0]
    family: Family = "llama"

    hidden_size: int = Field(gt=0, le=B.MAX_HIDDEN, strict=True)
    num_hidden_layers: int = Field(gt=0, le=B.MAX_LAYERS, strict=True)
    num_attention_heads: int = Field(gt=0, le=B.MAX_HEADS, strict=True)
    num_key_value_heads: int | None = Field(default=None, gt=0, le=B.MAX_HEADS, strict=True)
    head_dim: int | None = Field(default=None, gt=0, le=B.MAX_HEAD_DIM, strict=True)
    intermediate_size: int = Field(gt=0, le=B.MAX_FFN, strict=True)
    vocab_size: int = Field(gt=0, le=B.MAX_VOCAB, strict=True)
    # rows of the input embedding where they are not vocab_size (Molmo2: vocab_size + additional_vocab_size; its
    # lm_head has vocab_size): ModelSpec.embedding_vocab_size
    embedding_rows: int | None = Field(default=None, gt=0, le=2 * B.MAX_VOCAB, strict=True)
    tie_word_embeddings: bool = False

    # Block details that change parameter counts or saved activations.
    gated_mlp: bool = True  # SwiGLU/GeGLU (gate, up, down) vs plain fc1/fc2
    hidden_act: str = Field(default="silu", max_length=100)
    norm_type: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    # Gemma-2/3: 4 (pre/post attention and feed-forward)
    norms_per_layer: int = Field(default=2, ge=0, le=B.MAX_NORMS_PER_LAYER, strict=True)
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3/Gemma-3 per-head RMSNorm on q and k
    learned_position_embeddings: int = Field(default=0, ge=0, le=B.MAX_POSITIONS, strict=True)  # GPT-2: n_positions
    fused_qkv: bool = False  # one qkv projection whose output stays saved whole (Phi-3, GPT-2, GPT-NeoX)
    fused_gate_up: bool = False  # Phi-3's gate_up_proj
    parallel_residual: bool = False  # GPT-NeoX
    # residual/attention dropout while training (GPT-2 0.1)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, allow_inf_nan=False)

    # Mixture of experts (num_experts = 0 means dense).
    num_experts: int = Field(default=0, ge=0, le=B.MAX_EXPERTS, strict=True)
    num_experts_per_tok: int = Field(default=0, ge=0, le=B.MAX_EXPERTS, strict=True)
    moe_intermediate_size: int | None = Field(default=None, gt=0, le=B.MAX_FFN, strict=True)
    num_shared_experts: int = Field(default=0, ge=0, le=B.MAX_SHARED_EXPERTS, strict=True)
    # total width of the shared expert(s)
    shared_expert_intermediate_size: int | None = Field(default=None, gt=0, le=B.MAX_FFN, strict=True)
    shared_expert_gate: bool = False  # Qwen2-MoE's sigmoid gate on the shared expert
    first_k_dense_layers: int = Field(default=0, ge=0, le=B.MAX_LAYERS, strict=True)  # DeepSeek first_k_dense_replace
    # group-limited routing (DeepSeek-V2/V3 n_group / topk_group; Megatron's --moe-router-num-groups /
    # --moe-router-group-topk): the experts split into router_groups equal groups and a token's top-k comes from
    # its router_group_topk best groups only (1 / 1: no limit)
    router_groups: int = Field(default=1, ge=1, le=B.MAX_EXPERTS, strict=True)
    router_group_topk: int = Field(default=1, ge=1, le=B.MAX_EXPERTS, strict=True)
    # the dtypes the checkpoint's quantization_config stores the decoder linears / the routed experts in (None: the
    # model dtype), which a serving engine loads as they are (memory.inference.serving_weight_dtypes)
    checkpoint_weight_dtype: Dtype | None = None
    checkpoint_expert_weight_dtype: Dtype | None = None
    # the dense MLPs' and shared experts' where the checkpoint stores them otherwise than its other non-expert
    # linears (ModelOpt NVFP4 files that keep the attention in bf16 and quantize the MLPs)
    checkpoint_mlp_weight_dtype: Dtype | None = None
    # the KV cache dtype the checkpoint's quantization_config names (ModelOpt kv_cache_scheme / kv_cache_quant_algo),
    # which vLLM and SGLang use for kv_dtype "auto" (memory.inference.kv_cache_dtype)
    checkpoint_kv_dtype: Literal["fp8"] | None = None
    dense_layer_indices: tuple[int, ...] = Field(default=(), max_length=B.MAX_LAYERS)  # Qwen-MoE mlp_only_layers
    router_bias: bool = False
    expert_bias: bool = False  # GPT-OSS experts carry biases
    # latent MoE (Nemotron-3 Super / Ultra, config moe_latent_size; Megatron --moe-latent-size): the routed experts
    # read and write this width, between fc1_latent_proj (h → latent) and fc2_latent_proj (latent → h)
    moe_latent_size: int | None = Field(default=None, gt=0, le=B.MAX_HIDDEN, strict=True)

    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank set means MLA.
    q_lora_rank: int | None = Field(default=None, gt=0, le=B.MAX_HIDDEN, strict=True)
    kv_lora_rank: int | None = Field(default=None, gt=0, le=B.MAX_HIDDEN, strict=True)
    qk_rope_head_dim: int | None = Field(default=None, gt=0, le=B.MAX_HEAD_DIM, strict=True)
    qk_nope_head_dim: int | None = Field(default=None, gt=0, le=B.MAX_HEAD_DIM, strict=True)
    v_head_dim: int | None = Field(default=None, gt=0, le=B.MAX_HEAD_DIM, strict=True)

    # Attention pattern.
    sliding_window: int | None = Field(default=None, gt=0, le=B.MAX_WINDOW, strict=True)
    # Each layer's token mixer, as config.json names it (None: softmax attention everywhere, sliding per
    # sliding_window); linear_attention layers are Gated DeltaNet (linear_attention below).
    layer_types: tuple[LayerType, ...] | None = Field(default=None, max_length=B.MAX_LAYERS)
    attn_logit_softcapping: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    final_logit_softcapping: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    attention_sinks: bool = False  # GPT-OSS: one learned logit per head
    # MiMo-V2-Flash: the sliding_attention layers' own key/value heads and sinks where they differ from the full
    # layers' (num_key_value_heads, attention_sinks); each kind of layer computes with its view (attention_of)
    swa_num_key_value_heads: int | None = Field(default=None, gt=0, le=B.MAX_HEADS, strict=True)
    swa_attention_sinks: bool = False
    # Step-3.5 / 3.7: the sliding layers' own query heads (attention_other_setting: 96 where full layers have 64);
    # their per-head tensors (VariantSpec.attention_tensors of num_attention_heads rows) follow (attention_of)
    swa_num_attention_heads: int | None = Field(default=None, gt=0, le=B.MAX_HEADS, strict=True)
    # a model only the serving engines run as described: why transformers' code (training, generate()) is not
    served_only: str | None = Field(default=None, max_length=400)
    # Qwen3-Next / Qwen3.5: q_proj also computes a per-channel gate, sigmoid(gate) × the attention output
    attention_output_gate: bool = False
    # Qwen3-Next / Qwen3.5 RMSNorm: the weight starts at zero and scales by (1 + w), all in fp32
    zero_centered_norm: bool = False
    # MiniMax-M3's apply_rotary_pos_emb returns torch.cat([rotated, pass-through]): q reaches the attention kernel
    # contiguous in (b, heads, s, d), and so does a FlashAttention kernel's output (calculator.memory.sdpa.output_copy)
    rope_concat: bool = False
    # channels of each head RoPE rotates under partial rotary (head_dim · partial_rotary_factor: GPT-NeoX, Phi,
    # StableLM, Qwen3-Next, Qwen3.5), the width of the shared cos / sin tables (activations.rotary_saved); 0: all
    rotary_dim: int = Field(default=0, ge=0, le=B.MAX_HEAD_DIM, strict=True)

    # Each layer's feed-forward (None: a dense MLP, or routed experts per num_experts, first_k_dense_layers and
    # dense_layer_indices); "none": a block without one (Nemotron-H's mamba and attention blocks)
    ffn_types: tuple[FfnType, ...] | None = Field(default=None, max_length=B.MAX_LAYERS)
    # Each layer's dense MLP width where it changes layer by layer (Nemotron-NAS; architectures/ffn_widths.py);
    # intermediate_size is then the widest
    ffn_widths: tuple[int, ...] | None = Field(default=None, max_length=B.MAX_LAYERS)
    # Multi-token-prediction layers the checkpoint carries (num_nextn_predict_layers / mtp_num_layers): transformers
    # does not build them; a trainer that trains them (Megatron) pays a layer each (Workload decides)
    mtp_layers: int = Field(default=0, ge=0, le=64, strict=True)

    # Token mixers other than softmax attention, for the layers layer_types names (one config per kind; each kind's
    # module in calculator/model/architectures/ says what it holds and computes).
    linear_attention: LinearAttentionSpec | None = None  # Gated DeltaNet
    mamba: MambaSpec | None = None
    short_conv: ShortConvSpec | None = None
    kda: KDASpec | None = None
    lightning: LightningSpec | None = None
    indexer: IndexerSpec | None = None  # DSA's lightning indexer on "indexed_attention" layers
    compressed: CompressedSpec | None = None  # DeepSeek-V4's compressed attention on the compressed_* layers
    # hyper-connections: the residual stream is hc_mult streams mixed around every block (DeepSeek-V4's mHC;
    # architectures/compressed.py hc_shapes); 0: the plain residual, without them
    hc_mult: int = Field(default=0, ge=0, le=64, strict=True)
    # A few tensors or saved activations a model type's block has beyond the engine's layer (calculator.model.variants;
    # None for every model whose block is the engine's own)
    variant: VariantSpec | None = None
    vision: VisionSpec | None = None  # a vision-language model's tower and projector (calculator.model.vision)
    # Gemma 3n / 4: KV sharing, per-layer dims, PLE, AltUp, LAuReL (calculator.model.architectures.gemma_next)
    gemma_next: GemmaNextSpec | None = None
    # Longest context the model was built for (config.json max_position_embeddings / n_positions): serving engines
    # take it as the default max_model_len and size their RoPE cos/sin cache by it. None: not given.
    max_position_embeddings: int | None = Field(default=None, gt=0)
    # What the engines also read to derive the longest context they accept (calculator.engines.common.
    # derived_context): config.json's model_max_length, and each RoPE parameter set as (rope_type, factor, its
    # original_max_position_embeddings), one per layer type when rope_parameters is nested (rope_nested).
    model_max_length: int | None = Field(default=None, gt=0)
    rope_sets: tuple[tuple[str, float | None, int | None], ...] = ()
    rope_nested: bool = False

    @model_validator(mode="after")
    def _check_shapes(self) -> "ModelSpec":
        h, a = self.hidden_size, self.num_attention_heads
        if self.head_dim is None and not self.is_mla and h % a:
            raise ValueError(
                f"hidden_size ({h}) must be divisible by num_attention_heads ({a}), or give head_dim explicitly")
        kv = self.num_key_value_heads
        for name, kv in (("num_key_value_heads", kv), ("swa_num_key_value_heads", self.swa_num_key_value_heads)):
            if kv is not None and a % kv:
                raise ValueError(f"num_attention_heads ({a}) must be a multiple of {name} ({kv})")
        if self.swa_num_attention_heads is not None and self.swa_num_attention_heads % self.kv_heads:
            raise ValueError(f"swa_num_attention_heads ({self.swa_num_attention_heads}) must be a multiple of the "
                             f"key/value heads ({self.kv_heads})")
        if self.is_mla and (self.qk_rope_head_dim is None or self.qk_nope_head_dim is None
                            or self.v_head_dim is None):
            raise ValueError("MLA (kv_lora_rank set) also needs qk_rope_head_dim, qk_nope_head_dim and v_head_dim")
        if self.num_experts:
            if not 0 < self.num_experts_per_tok <= self.num_experts:
                raise ValueError(f"num_experts_per_tok must be between 1 and num_experts ({self.num_experts}), "
                                 f"got {self.num_experts_per_tok}")
            if self.first_k_dense_layers > self.num_hidden_layers:
                raise ValueError("first_k_dense_layers cannot exceed num_hidden_layers")
            if self.num_experts % self.router_groups or self.router_group_topk > self.router_groups:
                raise ValueError(f"router_groups ({self.router_groups}) must divide num_experts and be at least "
                                 f"router_group_topk ({self.router_group_topk})")
        if self.layer_types is not None and len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries but num_hidden_layers is "
                             f"{self.num_hidden_layers}")
        if self.layer_types and "sliding_attention" in self.layer_types and not self.sliding_window:
            raise ValueError("layer_types has sliding_attention layers but sliding_window is not set")
        for layer_type, field in _LAYER_TYPE_CONFIG.items():
            if self.layer_types and layer_type in self.layer_types and getattr(self, field) is None:
                raise ValueError(f"layer_types has {layer_type} layers but their configuration ({field}) is not set")
        if self.ffn_types is not None:
            if len(self.ffn_types) != self.num_hidden_layers:
                raise ValueError(f"ffn_types has {len(self.ffn_types)} entries but num_hidden_layers is "
                                 f"{self.num_hidden_layers}")
            if "moe" in self.ffn_types and not self.num_experts:
                raise ValueError("ffn_types has moe layers but num_experts is 0")
        if any(not 0 <= i < self.num_hidden_layers for i in self.dense_layer_indices):
            raise ValueError("dense_layer_indices must be layer indices below num_hidden_layers")
        if self.ffn_widths is not None:
            per_layer_ffn.check(self)
        return self

    # ---- derived shapes -------------------------------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        """Per-head width of q and k (MLA: nope + rope)."""
        if self.is_mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim  # type: ignore[operator]
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def v_head_size(self) -> int:
        """Per-head width of v (MLA's v_head_dim; MiMo-V2-Flash's v_head_dim, narrower than q/k; else head_size)."""
        return self.v_head_dim or self.head_size

    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads (= hidden_size for most models, not for Qwen3-MoE, Gemma, GPT-OSS)."""
        return self.num_attention_heads * self.head_size

    @property
    def kv_dim(self) -> int:
        """Width of the concatenated key (or value) heads."""
        return self.kv_heads * self.head_size

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def embedding_vocab_size(self) -> int:
        """Rows of the input embedding (the head's vocab_size unless embedding_rows says otherwise)."""
        return self.embedding_rows or self.vocab_size

    @property
    def expert_hidden_size(self) -> int:
        """The width the routed experts read and write: the latent MoE's, else the model's."""
        return self.moe_latent_size or self.hidden_size

    def layer_is_moe(self, i: int) -> bool:
        """Whether decoder layer i has a routed-expert MLP."""
        if self.ffn_types is not None:
            return self.ffn_types[i] == "moe"
        return self.is_moe and i >= self.first_k_dense_layers and i not in self.dense_layer_indices

    def layer_kind(self, i: int) -> LayerKind:
        """Decoder layer i's token mixer and feed-forward."""
        if self.gemma_next is not None:  # hook: each Gemma 3n / 4 layer's kind is its slot (layers alike share one)
            return LayerKind("gemma_next", "moe" if self.gemma_next.moe_block else "dense", gemma_slots(self)[i])
        types = self.layer_types
        mixer = LAYER_TYPE_MIXERS[types[i]] if types is not None else "attention"
        if mixer == "attention" and self.is_mla:
            mixer = "mla"
        ffn = self.ffn_types[i] if self.ffn_types is not None else "moe" if self.layer_is_moe(i) else "dense"
        if self.ffn_widths is not None and ffn == "dense":  # a dense width of its own (Nemotron-NAS): its slot
            return LayerKind(mixer, ffn, per_layer_ffn.slot(self, i))
        if self.own_swa_heads and mixer == "attention":  # sliding layers' own head layout:
            return LayerKind(mixer, ffn, int(self.layer_is_sliding(i)))  # a kind of their own, slot 1 (full: 0)
        return LayerKind(mixer, ffn)

    def attention_of(self, kind: LayerKind) -> "ModelSpec":
        """The model as a layer of `kind` computes its attention: itself, or (swa_num_key_value_heads set) with the
        sliding layers' key/value heads and sinks on a sliding kind (slot 1), the full layers' on a full one."""
        return self if kind.slot < 0 or not self.own_swa_heads else _attention_of(self, kind.slot == 1)

    def ffn_of(self, kind: LayerKind) -> "ModelSpec":
        """The model as a layer of `kind` computes its feed-forward: itself, or (ffn_widths set) with that kind's
        width as intermediate_size (architectures/ffn_widths.py)."""
        return self if self.ffn_widths is None or kind.slot < 0 else per_layer_ffn.view(self, kind.slot)

    @property
    def own_swa_heads(self) -> bool:
        """Whether the sliding layers have a head layout of their own (a kind per layer type, attention_of)."""
        return self.swa_num_key_value_heads is not None or self.swa_num_attention_heads is not None

    def layer_is_sliding(self, i: int) -> bool:
        """Whether decoder layer i attends only within `sliding_window` tokens."""
        if self.layer_types is not None:
            return self.layer_types[i] == "sliding_attention"
        return self.sliding_window is not None

    def sdpa_mask_on(self, i: int, w) -> bool:
        """Whether transformers hands layer i's SDPA call a 4-D mask under workload `w` (calculator.memory.sdpa
        prices it): a padded batch, a sliding window no longer than the keys (masking_utils keeps it once
        kv_length >= W), or the images' bidirectional blocks (VisionSpec.masks_layer)."""
        sliding = self.layer_is_sliding(i)
        return w.attention == "sdpa" and (
            w.padded_batch or (sliding and bool(self.sliding_window) and self.sliding_window <= w.seq_len)
            or bool(w.images_per_sample and self.vision is not None and self.vision.masks_layer(sliding)))

    @property
    def moe_layer_count(self) -> int:
        return _moe_layer_count(self)


@lru_cache(maxsize=256)
def _attention_of(m: ModelSpec, sliding: bool) -> ModelSpec:
    """ModelSpec.attention_of: one head layout on every layer (models/mimo_v2_flash/modeling_mimo_v2_flash.py
    MiMoV2FlashAttention: num_key_value_heads on full layers, swa ones and sinks on sliding layers)."""
    kv, sinks = ((m.swa_num_key_value_heads or m.num_key_value_heads, m.swa_attention_sinks) if sliding
                 else (m.num_key_value_heads, m.attention_sinks))
    a = (m.swa_num_attention_heads or m.num_attention_heads) if sliding else m.num_attention_heads
    update = dict(num_key_value_heads=kv, attention_sinks=sinks, swa_num_key_value_heads=None,
                  swa_attention_sinks=False, swa_num_attention_heads=None, num_attention_heads=a, head_dim=m.head_size)
    if a != m.num_attention_heads and m.variant is not None:  # per-head tensors (Step-3.5's g_proj) follow the heads
        rows = {m.num_attention_heads: a, m.num_attention_heads * m.head_size: a * m.head_size}
        update["variant"] = m.variant.model_copy(update={"attention_tensors": tuple(
            (rows.get(s[0], s[0]),) + tuple(s[1:]) if s else s for s in m.variant.attention_tensors)})
    return m.model_copy(update=update)


@lru_cache(maxsize=256)
def _moe_layer_count(m: ModelSpec) -> int:
    """Decoder layers with routed experts. Cached by the model's value, not on the instance: model_copy copies an
    instance's __dict__, so a cached_property would carry the count over to a copy with other layers."""
    return sum(m.layer_is_moe(i) for i in range(m.num_hidden_layers))


class GenericModel(BaseModel):
    """Any network given only as totals: parameter count and activation elements saved per sample (seed 004)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(default="generic network", max_length=B.MAX_NAME_CHARS)
    total_params: int = Field(gt=0, le=B.MAX_PARAMS, strict=True)
    activation_elements_per_sample: int = Field(ge=0, le=B.MAX_ACTIVATION_ELEMENTS, strict=True)
