"""Gemma 3n and Gemma 4 decoder layers (transformers 5.23 models/gemma3n/modeling_gemma3n.py and
models/gemma4/modeling_gemma4.py, gemma4_unified/modeling_gemma4_unified.py): a softmax-attention layer whose parts
change from layer to layer, so each layer is its own kind here (ModelSpec.layer_kind: LayerKind("gemma_next", ffn,
slot), slot = the first layer built the same way).

What a layer may hold beyond Gemma-3's:
- KV sharing (`num_kv_shared_layers`, Gemma3nTextConfig / Gemma4TextConfig.kv_sharing_modes): the last S layers
  "reuse" the K/V of the last earlier layer of their attention type (its mode "store"): no k_proj / v_proj / k_norm,
  no cache of their own;
- per-layer attention dims (Gemma 4): full-attention layers use `global_head_dim` and, with `attention_k_eq_v`,
  `num_global_key_value_heads` and no v_proj (V = v_norm(k_proj(x)));
- per-layer MLP widths (Gemma-3n `intermediate_size` lists; Gemma-4 `use_double_wide_mlp`: 2 f on reuse layers) and
  activation sparsity (Gemma-3n `activation_sparsity_pattern`: a gaussian top-k on the gate);
- per-layer embeddings (PLE, `hidden_size_per_layer_input` p): a gate h → p, a projection p → h and a norm per layer;
- AltUp (Gemma-3n, `altup_num_inputs` n streams) and LAuReL (Gemma-3n, `laurel_rank` r);
- Gemma-4's MoE block (`enable_moe_block`), run beside the dense MLP and summed with it (ModelSpec.num_experts, ...).

Parameters and the generate() cache of each layer are here; what a layer saves for backward is gemma_next_saved.py.
Formulas are read from transformers 5.23 models/gemma3n/modeling_gemma3n.py and models/gemma4/modeling_gemma4.py;
tests/model/mappers/test_gemma_next.py holds them to those models on the CPU.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from calculator.core import bounds as B
from calculator.core.hash_once import HashedOnce
from calculator.model.architectures.shapes import Shape, linear

NAME = "gemma_next"
LABEL = "Gemma 3n / 4 attention"
SOURCE = "gemma-next"
WITH_ATTENTION = True

KVMode = Literal["own", "store", "reuse"]
_PER_LAYER = dict(max_length=B.MAX_LAYERS)


class GemmaNextSpec(HashedOnce):
    """What a Gemma 3n / Gemma 4 text decoder adds to the ModelSpec it rides on (ModelSpec.gemma_next); every tuple
    has one entry per decoder layer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    generation: Literal["3n", "4"]
    kv_modes: tuple[KVMode, ...] = Field(**_PER_LAYER)  # kv_sharing_modes: None → "own"
    head_dims: tuple[int, ...] = Field(**_PER_LAYER)
    kv_heads: tuple[int, ...] = Field(**_PER_LAYER)
    k_eq_v: tuple[bool, ...] = Field(**_PER_LAYER)  # no v_proj: V = v_norm(k_proj(x)) (Gemma-4 full layers)
    intermediate_sizes: tuple[int, ...] = Field(**_PER_LAYER)
    sparse: tuple[bool, ...] = Field(**_PER_LAYER)  # activation_sparsity_pattern[i] > 0
    ple_size: int = Field(default=0, ge=0, le=B.MAX_HIDDEN, strict=True)  # hidden_size_per_layer_input (0: no PLE)
    ple_vocab: int = Field(default=0, ge=0, le=B.MAX_VOCAB, strict=True)  # vocab_size_per_layer_input
    altup_inputs: int = Field(default=0, ge=0, le=64, strict=True)  # AltUp streams n (0: no AltUp)
    laurel_rank: int = Field(default=0, ge=0, le=B.MAX_HIDDEN, strict=True)  # 0: no LAuReL
    moe_block: bool = False  # Gemma-4 enable_moe_block: routed experts beside the dense MLP

    @model_validator(mode="after")
    def _same_lengths(self) -> "GemmaNextSpec":
        n = len(self.kv_modes)
        if any(len(t) != n for t in (self.head_dims, self.kv_heads, self.k_eq_v, self.intermediate_sizes,
                                     self.sparse)):
            raise ValueError("gemma_next: every per-layer tuple needs one entry per decoder layer")
        return self


def kv_sharing_modes(types: list[str], shared: int) -> list[KVMode]:
    """Gemma3nTextConfig.kv_sharing_modes (configuration_gemma3n.py; Gemma4TextConfig's is the same code): the last
    `shared` layers reuse; before them, the last layer of each attention type stores its K/V for them. ValueError when
    a type the shared layers use has no layer before them."""
    n = len(types)
    if not shared:
        return ["own"] * n
    first = n - shared
    modes: list[KVMode] = ["own" if i < first else "reuse" for i in range(n)]
    for t in set(types):
        before = [i for i in range(first) if types[i] == t]
        if not before:
            raise ValueError(f"num_kv_shared_layers: no layer before the shared ones produces {t} keys and values")
        modes[before[-1]] = "store"
    return modes


# ---- the layer kinds -----------------------------------------------------------------------------------------------

def _signature(m, i: int) -> tuple:
    g = m.gemma_next
    return (m.layer_is_sliding(i), g.kv_modes[i], g.head_dims[i], g.kv_heads[i], g.k_eq_v[i],
            g.intermediate_sizes[i], g.sparse[i])


@lru_cache(maxsize=256)
def layer_slots(m) -> tuple[int, ...]:
    """Each layer's slot: the first layer built exactly like it (so layers alike share one kind)."""
    first: dict[tuple, int] = {}
    return tuple(first.setdefault(_signature(m, i), i) for i in range(m.num_hidden_layers))


def is_reuse(m, i: int) -> bool:
    return m.gemma_next.kv_modes[i] == "reuse"


# ---- parameters ----------------------------------------------------------------------------------------------------

def attention_shapes(m, i: int) -> list[Shape]:
    """Gemma3nTextAttention / Gemma4TextAttention of layer i: q_proj, k_proj and v_proj (none on a reuse layer; no
    v_proj with k_eq_v), o_proj, q_norm and k_norm of head_dim (v_norm has no weight)."""
    g, h, a, bias = m.gemma_next, m.hidden_size, m.num_attention_heads, m.qkv_bias
    d, kv = g.head_dims[i], g.kv_heads[i]
    shapes = linear(h, a * d, bias)
    if not is_reuse(m, i):
        shapes += linear(h, kv * d, bias) * (1 if g.k_eq_v[i] else 2)
    shapes += linear(a * d, h, bias) + [(d,)]
    return shapes + ([] if is_reuse(m, i) else [(d,)])


def extra_shapes(m) -> list[Shape]:
    """Per-layer tensors beside attention and MLP, replicated under TP: AltUp (correct_output_scale h,
    correction_coefs n×n, prediction_coefs n²×n, modality_router n×h, router_norm h), LAuReL (linear_left r×h,
    linear_right h×r, post_laurel_norm h), PLE (per_layer_input_gate p×h, per_layer_projection h×p,
    post_per_layer_input_norm h) — modeling_gemma3n.py Gemma3nTextAltUp, Gemma3nTextLaurelBlock,
    Gemma3nTextDecoderLayer; modeling_gemma4.py Gemma4TextDecoderLayer."""
    g, h = m.gemma_next, m.hidden_size
    n, r, p = g.altup_inputs, g.laurel_rank, g.ple_size
    out: list[Shape] = []
    if n:
        out += [(h,), (n, n), (n * n, n), (n, h), (h,)]
    if r:
        out += linear(h, r) + linear(r, h) + [(h,)]
    if p:
        out += linear(h, p) + linear(p, h) + [(h,)]
    return out


def moe_shapes(m) -> tuple[list[Shape], list[Shape], list[Shape]]:
    """Gemma-4's MoE block (modeling_gemma4.py Gemma4TextRouter, Gemma4TextExperts): (router: proj E×h, scale h,
    per_expert_scale E; experts: gate_up E×2fm×h, down E×h×fm; norms: pre_feedforward_layernorm_2,
    post_feedforward_layernorm_1 and _2)."""
    h, E, fm = m.hidden_size, m.num_experts, m.expert_intermediate_size
    return linear(h, E) + [(h,), (E,)], [(E, 2 * fm, h), (E, h, fm)], [(h,)] * 3


def kind_shapes(m, kind) -> tuple[tuple[str, tuple[Shape, ...]], ...]:
    """The (group, shapes) of the layers of one kind (calculator.model.parameters.kind_shapes' layout): attention;
    the four h-wide norms with the replicated AltUp / LAuReL / PLE tensors; the gated MLP (gate, up, down of width
    f_i); Gemma-4's router and routed experts."""
    i, h = kind.slot, m.hidden_size
    f = m.gemma_next.intermediate_sizes[i]
    groups = {"attention": attention_shapes(m, i), "norms": [(h,)] * 4 + extra_shapes(m),
              "mlp": linear(h, f) * 2 + linear(f, h), "router": [], "routed_experts": [], "shared_experts": []}
    if kind.ffn == "moe":
        router, experts, norms = moe_shapes(m)
        groups["router"], groups["routed_experts"] = router, experts
        groups["norms"] += norms
    return tuple((k, tuple(v)) for k, v in groups.items())


def outer_tensors(h: int, n_layers: int, ple_size: int, ple_vocab: int, altup: int) -> tuple[Shape, ...]:
    """Outside the layers, counted with the embedding: embed_tokens_per_layer Vp × L·p, per_layer_model_projection
    L·p × h, per_layer_projection_norm p (PLE); altup_projections and altup_unembed_projections, (n − 1) h × h each
    (Gemma3nTextModel)."""
    out: list[Shape] = []
    if ple_size:
        out += [(ple_vocab, n_layers * ple_size), (n_layers * ple_size, h), (ple_size,)]
    if altup > 1:
        out += [(h, h)] * (2 * (altup - 1))
    return tuple(out)


# ---- the registry's interface (calculator/model/architectures/__init__.py) ------------------------------------------

def shapes(m) -> list[Shape]:
    """Unused: calculator.model.parameters.kind_shapes asks kind_shapes above for these layers."""
    return []


def linears(m) -> list[tuple[str, int, int]]:
    """(module, in, out) of the attention of the model's first layer (for the time model: q, k, v, then o)."""
    h, a, d, kv = m.hidden_size, m.num_attention_heads, m.gemma_next.head_dims[0], m.gemma_next.kv_heads[0]
    return [("q_proj", h, a * d), ("k_proj", h, kv * d), ("v_proj", h, kv * d), ("o_proj", a * d, h)]


def linear_flops_per_token(m) -> float:
    """No core of its own beside the softmax attention the time model adds (WITH_ATTENTION)."""
    return 0.0


def state_bytes(m, batch: int, model_dtype_bytes: float) -> int:
    """No recurrent state: the cache is K/V (kv_cache_bytes)."""
    return 0


def saved(m, d, w) -> int:
    """Unused: calculator.memory.activations.exact_layer asks gemma_next_saved for these layers."""
    return 0


# ---- caches --------------------------------------------------------------------------------------------------------

def kv_heads_on_rank(m, i: int, kv_heads_rank: int) -> int:
    """Layer i's KV heads on one TP rank, from the sliding layers' count on that rank (kv // tp, at least 1)."""
    kv, base = m.gemma_next.kv_heads[i], m.kv_heads
    return kv if kv_heads_rank == base else max(kv * kv_heads_rank // base, 1)


def layer_token_bytes(m, i: int, kv_heads_rank: int, elem_bytes: float) -> float:
    """K and V of one token in layer i: 2 · kv_i · d_i elements (0 on a reuse layer: it reads its producer's)."""
    if is_reuse(m, i):
        return 0
    return 2 * kv_heads_on_rank(m, i, kv_heads_rank) * m.gemma_next.head_dims[i] * elem_bytes


def generate_cached_tokens(m, i: int, total_tokens: int) -> int:
    """Tokens layer i keeps in generate()'s DynamicCache (transformers cache_utils.py): all of them on a full layer
    (DynamicLayer), at most W − 1 on a sliding one (DynamicSlidingWindowLayer keeps sliding_window − 1), none on a
    reuse layer (DummyLayer, get_layer_types_and_kwargs)."""
    if is_reuse(m, i):
        return 0
    return min(total_tokens, m.sliding_window - 1) if m.layer_is_sliding(i) else total_tokens


def generate_kv_bytes(m, layers, batch: int, total_tokens: int, kv_heads_rank: int, elem_bytes: float) -> int:
    """generate()'s K/V cache over `layers`: Σ_i b · cached_i · 2 · kv_i · d_i · e."""
    return int(sum(batch * generate_cached_tokens(m, i, total_tokens) * layer_token_bytes(m, i, kv_heads_rank,
                                                                                         elem_bytes)
                   for i in layers))


def prefill_transient(m, b: int, s: int, e: int) -> int:
    """generate()'s prefill: a sliding `store` layer hands cat(cache, new) — the whole prompt's K/V, not capped by
    the window — to its consumers, alive until the forward ends: 2 · b · kv · s · d · e (modeling_gemma3n.py
    Gemma3nTextAttention, shared_kv_states; the full store layer hands its cache tensors: nothing more)."""
    g = m.gemma_next
    return sum(2 * b * g.kv_heads[i] * s * g.head_dims[i] * e for i in range(m.num_hidden_layers)
               if g.kv_modes[i] == "store" and m.layer_is_sliding(i))


def vllm_token_bytes(m, i: int, tp: int, elem_bytes: float) -> int:
    """One token's K/V in layer i as vLLM allocates it: 2 · max(kv_i / tp, 1) · d_i · e; none on a KV-shared layer
    (vllm/v1/worker/gpu_model_runner.py get_kv_cache_spec skips a layer with kv_sharing_target_layer_name;
    model_executor/models/gemma3n.py, gemma4.py set it on the last num_kv_shared_layers layers)."""
    if is_reuse(m, i):
        return 0
    g = m.gemma_next
    return int(2 * max(g.kv_heads[i] // tp, 1) * g.head_dims[i] * elem_bytes)
