"""Exact parameter counts of a decoder transformer, module by module, as `transformers` builds it.

Every count here is checked against `sum(p.numel() for p in model.parameters())` of the real `transformers`
model built from the same config on the meta device (tests/test_parameters.py). Buffers (rotary tables,
DeepSeek's e_score_correction_bias) are not parameters and are not counted.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from calculator.model import ModelSpec


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

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.router + self.routed_experts + self.shared_experts + self.norms

    @property
    def dense(self) -> int:
        """Everything except routed experts (replicated across expert-parallel ranks)."""
        return self.total - self.routed_experts


@dataclass(frozen=True)
class ParameterCounts:
    embedding: int  # token (+ learned position) embeddings
    layers: tuple[LayerParams, ...]
    final_norm: int
    lm_head: int  # 0 when tied to the embedding
    active_per_token: int  # parameters a token passes through (MoE: top-k of the routed experts)

    @property
    def total(self) -> int:
        return self.embedding + sum(l.total for l in self.layers) + self.final_norm + self.lm_head

    @property
    def routed_experts(self) -> int:
        return sum(l.routed_experts for l in self.layers)

    @property
    def largest_module(self) -> int:
        return max([self.embedding, self.lm_head] + [l.largest_module for l in self.layers])


def linear_params(n_in: int, n_out: int, bias: bool = False) -> int:
    """nn.Linear(n_in, n_out): weight n_in·n_out plus an optional bias of n_out."""
    return n_in * n_out + (n_out if bias else 0)


def norm_params(width: int, norm_type: str) -> int:
    """RMSNorm keeps a weight of `width`; LayerNorm a weight and a bias."""
    return width * (2 if norm_type == "layernorm" else 1)


def mlp_params(h: int, f: int, gated: bool, bias: bool) -> int:
    """Gated MLP (gate, up, down: 3·h·f) or plain MLP (fc1, fc2: 2·h·f), with optional biases."""
    if gated:
        return 2 * linear_params(h, f, bias) + linear_params(f, h, bias)
    return linear_params(h, f, bias) + linear_params(f, h, bias)


def attention_params(m: ModelSpec) -> int:
    """Attention block: q/k/v/o projections (GQA-aware) or MLA's low-rank projections, q/k norms, sinks."""
    h, a = m.hidden_size, m.num_attention_heads
    if m.is_mla:
        # DeepSeek-V3 (modeling_deepseek_v3.py): q_a_proj + q_a_layernorm + q_b_proj (or q_proj),
        # kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj.
        q = (linear_params(h, m.q_lora_rank, m.qkv_bias) + m.q_lora_rank
             + linear_params(m.q_lora_rank, a * m.head_size)) if m.q_lora_rank else linear_params(h, a * m.head_size)
        kv = (linear_params(h, m.kv_lora_rank + m.qk_rope_head_dim, m.qkv_bias) + m.kv_lora_rank
              + linear_params(m.kv_lora_rank, a * (m.qk_nope_head_dim + m.v_head_dim)))
        return q + kv + linear_params(a * m.v_head_dim, h, m.o_bias)
    qkv = linear_params(h, m.q_dim + 2 * m.kv_dim, m.qkv_bias)
    out = linear_params(m.q_dim, h, m.o_bias)
    qk_norms = 2 * m.head_size if m.qk_norm else 0
    sinks = a if m.attention_sinks else 0
    return qkv + out + qk_norms + sinks


def expert_params(m: ModelSpec, f: int) -> int:
    """One expert MLP of width f (GPT-OSS experts also carry biases)."""
    return mlp_params(m.hidden_size, f, m.gated_mlp, m.expert_bias)


def layer_params(m: ModelSpec, i: int) -> LayerParams:
    """Parameters of decoder layer i."""
    h = m.hidden_size
    attn = attention_params(m)
    norms = m.norms_per_layer * norm_params(h, m.norm_type)
    if not m.layer_is_moe(i):
        mlp = mlp_params(h, m.intermediate_size, m.gated_mlp, m.mlp_bias)
        return LayerParams(attn, mlp, 0, 0, 0, norms, largest_module=max(attn, mlp))
    router = linear_params(h, m.num_experts, m.router_bias)
    one_expert = expert_params(m, m.expert_intermediate_size)
    routed = m.num_experts * one_expert
    shared = 0
    if m.num_shared_experts or m.shared_expert_intermediate_size:
        width = m.shared_expert_intermediate_size or m.num_shared_experts * m.expert_intermediate_size
        shared = mlp_params(h, width, m.gated_mlp, m.mlp_bias) + (linear_params(h, 1) if m.shared_expert_gate else 0)
    # transformers >= 5 stores all routed experts of a layer as one fused parameter: it is gathered whole.
    return LayerParams(attn, 0, router, routed, shared, norms, largest_module=max(attn, routed, shared))


@lru_cache(maxsize=256)
def count_parameters(m: ModelSpec) -> ParameterCounts:
    """Parameter counts of the whole model, module by module."""
    h = m.hidden_size
    embedding = m.vocab_size * h + m.learned_position_embeddings * h
    layers = tuple(layer_params(m, i) for i in range(m.num_hidden_layers))
    final_norm = norm_params(h, m.norm_type)
    lm_head = 0 if m.tie_word_embeddings else m.vocab_size * h
    inactive = 0
    for i, layer in enumerate(layers):
        if m.layer_is_moe(i):
            inactive += layer.routed_experts * (m.num_experts - m.num_experts_per_tok) // m.num_experts
    total = embedding + sum(l.total for l in layers) + final_norm + lm_head
    return ParameterCounts(embedding, layers, final_norm, lm_head, active_per_token=total - inactive)
