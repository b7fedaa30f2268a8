"""DeepSeek sparse attention's lightning indexer (DeepSeek-V3.2-Exp, "DeepSeek-V3.2: Pushing the Frontier of Open
Large Language Models", 2025, §2.1), the kind of the "indexed_attention" layers: a small scorer beside the model's
own attention that picks, for each query, the keys the attention may read. As transformers 5.23 builds it:

- "deepseek" (DeepSeek-V3.2 and GLM-5, models/deepseek_v32/modeling_deepseek_v32.py DeepseekV32Indexer, the same
  class in models/glm_moe_dsa/): wq_b maps MLA's normalised q latent (q_lora_rank wide) to n_heads query heads of
  head_dim; wk maps the hidden state to one shared key of head_dim, then k_norm, an nn.LayerNorm (weight and bias);
  weights_proj gives one weight per head. score[s, t] = Σ_h relu(q_h·k_t / √head_dim) · w_h / √n_heads, causal
  mask, top-min(topk, T) keys. No linear has a bias.
- "minimax" (MiniMax-M3, models/minimax_m3_vl/modeling_minimax_m3_vl.py MiniMaxM3VLIndexer): q_proj and k_proj
  read the hidden state, zero-centred RMSNorms q_norm and k_norm of head_dim; scores q·k per head without ReLU or
  head weights, max-pooled over blocks of block_size keys; each indexer head keeps its topk best blocks (the
  local_blocks ending at the query's block forced in) for its GQA group of query heads.
- "mistral" (Mistral-Large-4, models/mistral_large4/modeling_mistral_large4.py MistralLarge4TextIndexer): DeepSeek's
  indexer whose queries read the hidden state (no q-LoRA): q_input_norm, an nn.LayerNorm of hidden_size, then wq_b;
  the queries are multiplied by a MistralLarge4TextSoftmaxScaling (per-head scale and bias Parameters) before RoPE.

The layer runs the model's attention too (WITH_ATTENTION: MLA for DeepSeek, GQA for MiniMax): its tensors, saved
activations and K/V cache are the engine's; this module adds only the indexer's. In transformers the attention
stays dense: the top-k becomes a mask over all T keys (eager / SDPA); under SDPA MiniMax's per-head mask changes
what the attention keeps (saved()).
"""
from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from calculator.core import bounds as B
from calculator.core.dtypes import nbytes
from calculator.core.hash_once import HashedOnce
from calculator.model.architectures.shapes import Shape, linear

NAME = "dsa"
LABEL = "DeepSeek sparse attention's lightning indexer"
SOURCE = "dsa"
WITH_ATTENTION = True

VLLM_QUANT_BLOCK = 128  # vLLM's indexer cache: one fp32 scale per 128 fp8 key elements


class IndexerSpec(HashedOnce):
    """The lightning indexer of the "indexed_attention" layers, in the config's own terms (index_n_heads,
    index_head_dim, index_topk; MiniMax: index_block_size, index_topk_blocks, index_local_blocks)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_heads: int = Field(gt=0, le=B.MAX_HEADS, strict=True)  # index_n_heads
    head_dim: int = Field(gt=0, le=B.MAX_HEAD_DIM, strict=True)  # index_head_dim
    # keys each query keeps: index_topk tokens ("deepseek"), or index_topk_blocks blocks of block_size ("minimax")
    topk: int = Field(gt=0, le=1 << 30, strict=True)
    variant: Literal["deepseek", "minimax", "mistral"] = "deepseek"
    block_size: int = Field(default=1, gt=0, le=1 << 20, strict=True)  # MiniMax index_block_size (1: per token)
    local_blocks: int = Field(default=0, ge=0, le=1 << 20, strict=True)  # MiniMax index_local_blocks


def _query_input(m) -> int:
    """Width the indexer's query projection reads: MLA's q latent (DeepSeek; q-LoRA is mandatory there) or the
    hidden state (MiniMax)."""
    if m.indexer.variant in ("minimax", "mistral"):
        return m.hidden_size
    if not m.q_lora_rank:
        raise ValueError("DeepSeek's lightning indexer reads MLA's q latent: q_lora_rank must be set")
    return m.q_lora_rank


def shapes(m) -> list[Shape]:
    """The indexer's parameter tensors, in the order transformers registers them (after the attention's).
    DeepSeek: wq_b, wk, k_norm (LayerNorm: weight, bias), weights_proj = ql·nI·dI + h·dI + 2·dI + h·nI.
    MiniMax: q_proj, k_proj, q_norm, k_norm = h·nI·dI + h·dI + 2·dI.
    Mistral: DeepSeek's with wq_b reading h, then q_input_norm (weight, bias) and softmax_scaling (scale, bias):
    h·nI·dI + h·dI + 2·dI + h·nI + 2·h + 2·nI."""
    ix, h = m.indexer, m.hidden_size
    q_k = linear(_query_input(m), ix.n_heads * ix.head_dim) + linear(h, ix.head_dim)
    norms = [(ix.head_dim,), (ix.head_dim,)]  # DeepSeek: k_norm's weight and bias; MiniMax: q_norm, k_norm
    mistral = [(h,), (h,), (ix.n_heads,), (ix.n_heads,)] if ix.variant == "mistral" else []
    return q_k + norms + (linear(h, ix.n_heads) if ix.variant != "minimax" else []) + mistral


def tp_replicated_shapes(m) -> list[Shape]:
    """Under tensor parallelism the whole indexer stays on every rank (its few heads are not split): vLLM 0.33
    models/deepseek_v2.py Indexer ("no tensor parallel, just replicated": ReplicatedLinear wq_b, wk and weights_proj
    fused with disable_tp, a LayerNorm k_norm), SGLang 0.5.23 (layers/attention/dsv4/indexer.py ReplicatedLinear);
    transformers' DeepseekV32 / GlmMoeDsa base_model_tp_plan name none of its modules."""
    return shapes(m)


def no_grad_shapes(m) -> list[Shape]:
    """The indexer's tensors that never get a gradient: all of them. What it returns are the top-k key indices
    (`topk(...).indices`, integers), so backward never reaches its weights: DeepseekV32Indexer / GlmMoeDsaIndexer /
    MistralLarge4TextIndexer.forward run under @torch.no_grad(), MiniMaxM3VLIndexer feeds only the indices on.
    Measured after a CPU backward of each type: tests/model/test_no_grad_parameters.py."""
    return shapes(m)


def linears(m) -> list[tuple[str, int, int]]:
    """(module name, in_features, out_features) of the indexer's nn.Linear modules."""
    ix, h = m.indexer, m.hidden_size
    if ix.variant == "minimax":
        return [("q_proj", h, ix.n_heads * ix.head_dim), ("k_proj", h, ix.head_dim)]  # Mistral: DeepSeek's three
    return [("wq_b", _query_input(m), ix.n_heads * ix.head_dim), ("wk", h, ix.head_dim),
            ("weights_proj", h, ix.n_heads)]


def state_bytes(m, batch: int, model_dtype_bytes: float) -> int:
    """Nothing per sequence beyond the per-token caches: the indexer keeps only its keys (kv_bytes_per_token)."""
    return 0


def kv_bytes_per_token(m, dtype: str) -> int:
    """What generate() caches per token and layer beyond the attention's K/V: the indexer's one roped key of
    head_dim, in the cache dtype (transformers cache_utils.DynamicIndexedLayer.indexer_keys [B, T, dI] for DeepSeek
    and GLM-5; MiniMaxM3VLSparseCacheLayer.idx_keys [B, 1, T, dI] for MiniMax). Measured after a CPU prefill:
    tests/model/mappers/test_dsa.py. DeepSeek-V3.2 in bf16: 2·128 = 256 B beside MLA's 2·(512 + 64) = 1,152 B."""
    return nbytes(m.indexer.head_dim, dtype)


def vllm_kv_bytes_per_token(m) -> int | None:
    """The indexer key cache vLLM keeps per token and layer for DeepSeek-V3.2 / GLM-5: fp8 (e4m3) keys with one
    fp32 scale per 128 elements, dI + 4·dI/128 bytes = 132 B at dI = 128 (vllm model_executor/models/deepseek_v2.py
    Indexer.__init__: DeepseekV32IndexerCache(head_dim = dI + dI // quant_block_size · 4, dtype uint8),
    quant_block_size 128; the DeepSeek-V3.2-Exp reference inference/model.py keeps the same k_cache + k_scale_cache).
    None for MiniMax and Mistral: their vLLM layout was not read."""
    ix = m.indexer
    if ix.variant != "deepseek":
        return None
    return ix.head_dim + ix.head_dim // VLLM_QUANT_BLOCK * 4


def saved(m, d, w) -> int:
    """What the indexer adds to its layer's saved activations in transformers. DeepseekV32Indexer.forward (and
    GlmMoeDsaIndexer.forward) is decorated @torch.no_grad(): its parameters get no gradient and autograd packs none
    of its tensors; MiniMaxM3VLIndexer runs with grad but hands on only integer block indices, so its graph is freed
    at once (unless the forward's output keeps a cache: the cached key then holds its k_norm's fp32 copies,
    8·T·dI + 4·T + 4·dI, while that output lives). Under eager the top-k only changes the values of the mask added
    to the scores; under SDPA MiniMax's mask changes what the attention keeps (minimax_sdpa_mask_saved). Held to
    the real models by tests/model/mappers/test_dsa.py."""
    if w is None or m.indexer.variant != "minimax" or w.attention != "sdpa":
        return 0
    return minimax_sdpa_mask_saved(m, d, w)


def minimax_sdpa_mask_saved(m, d, w) -> int:
    """MiniMax's indexed layer under SDPA (MiniMaxM3VLAttention.forward, MiniMaxM3VLIndexer.build_block_mask): an
    additive mask per query head in the model dtype, e·b·a·s·s_kv, which SDPA keeps (recomputed with the kernel
    under selective recompute); with a mask transformers repeats k and v to every query head (integrations/
    sdpa_attention.py use_gqa_in_sdpa), e·T·2·(qd − kvd) (none for MQA, a view; a padded batch's stage term prices
    it); and SDPA runs its memory-efficient kernel, whose (b, s, a, d) output o_proj reads without the copy the
    attention prices for rope_concat's FlashAttention output (calculator.memory.sdpa.output_copy): − e·T·qd. (A CPU
    run keeps that copy: its flash kernel takes the mask and writes the output in q's layout.)"""
    selective = w.recompute == "selective"
    bias = 0 if selective else d.e * d.b * d.a * d.s * d.s_kv
    if w.padded_batch:
        return bias
    repeated = d.e * d.T * 2 * (d.qd - d.kvd) if 1 < d.kv < d.a else 0
    copy = d.e * d.T * d.qd if m.rope_concat and not selective else 0
    return bias + repeated - copy


def trainable_saved(m, d) -> int:
    """What a DeepSeek indexer would save for backward if a trainer trained it (DeepSeek-V3.2's report trains it
    toward the attention's scores with a KL loss; not verified here, and transformers does not), for the local
    shapes `d` (calculator.memory.activations.Dims): wk's output, the LayerNorm input, e·T·dI; its fp32 mean and
    rstd 8·T; the fp32 keys broadcast over the queries by torch.matmul, 4·b·s·dI·s_kv (4·dI·s_kv when b = 1); the
    fp32 queries 4·T·nI·dI; the fp32 ReLU scores 4·T·nI·s_kv; the fp32 head weights 4·T·nI; the int64 top-k
    indices 8·T·min(k, s_kv). Measured on CPU by calling forward.__wrapped__ (research notes for issue 21, with 2·T
    for the LayerNorm statistics a CPU bf16 run keeps). Indexer heads are not split by tensor parallelism."""
    ix = m.indexer
    nI, dI, T, e = ix.n_heads, ix.head_dim, d.T, d.e
    keys = 4 * dI * d.s_kv * (d.b * d.s if d.b > 1 else 1)
    return (e * T * dI + 8 * T + keys + 4 * T * nI * dI + 4 * T * nI * d.s_kv + 4 * T * nI
            + 8 * T * min(ix.topk, d.s_kv))


def prefill_workspace(m, b: int, s: int, t: int) -> int:
    """Transient bytes of one DeepSeek indexer during a transformers prefill of s queries over t keys (freed before
    the attention; torch.profiler in the issue-21 notes): torch.matmul(q.float(), k.float()) copies the fp32 keys
    for every query when b > 1 (4·b·s·dI·t) and writes fp32 scores [b, s, nI, t] and their ReLU (8·b·s·nI·t). A
    real DSA kernel streams them; this is transformers' artefact."""
    ix = m.indexer
    return 4 * b * s * t * (ix.head_dim * (b > 1) + 2 * ix.n_heads)


def attention_mask_bytes(m, b: int, s: int, t: int, e: int) -> int:
    """Transient bytes the indexed layers' eager / SDPA path adds beside the attention's own causal mask while its
    core runs. DeepSeek (DeepseekV32Attention.forward): the boolean index mask [b, 1, s, t] scattered from the top-k
    and the attention mask refilled with it, (1 + e)·b·s·t; the model always materialises its causal mask too
    (create_causal_mask with allow_is_causal_skip=False), so SDPA gets an explicit mask. MiniMax
    (MiniMaxM3VLIndexer.build_block_mask): an additive mask per query head, e·b·H·s·t."""
    if m.indexer.variant != "minimax":  # Mistral-Large-4: GlmMoeDsaAttention's path
        return (1 + e) * b * s * t
    return e * b * m.num_attention_heads * s * t


def linear_flops_per_token(m, context: int | None = None) -> float:
    """Forward FLOPs per query token of the indexer's scoring beyond its linears (linears()), over `context` keys:
    DeepSeek 2·nI·(dI + 1)·T (q·k per head, then the weighted sum over heads); MiniMax 2·nI·dI·T. The ReLU,
    block max-pool and top-k are O(nI·T) comparisons, not counted. transformers scores all T keys (no causal
    skip): a prefill of S tokens costs S·this with T = S; a causal kernel T ≈ (S + 1)/2. Without `context` (a
    caller that does not know the keys scored) only the part independent of T is returned: 0."""
    if not context:
        return 0.0
    ix = m.indexer
    per_key = ix.head_dim + 1 if ix.variant != "minimax" else ix.head_dim
    return 2.0 * ix.n_heads * per_key * context


def attended_keys(m, context: int) -> int:
    """Keys the attention reads per query once the indexer has chosen them (a sparse kernel's cost: MLA with T →
    this): min(topk, T) tokens for DeepSeek; min(topk_blocks, ⌈T / block⌉) blocks of block_size for MiniMax.
    transformers' eager and SDPA paths still attend densely over all T keys under a mask."""
    ix = m.indexer
    if ix.variant != "minimax":
        return min(ix.topk, context)
    blocks = -(-context // ix.block_size)
    return min(min(ix.topk, blocks) * ix.block_size, context)


def prefill_transient(m, b: int, s: int, e: int) -> int:
    """What an indexed layer adds to transformers' prefill working set at its attention (prefill_workspace and
    attention_mask_bytes over the s prompt tokens)."""
    return prefill_workspace(m, b, s, s) + attention_mask_bytes(m, b, s, s, e)


# ---- LoRA ------------------------------------------------------------------------------------------------------------

# The indexer's linears read the hidden state or MLA's q latent, but DeepseekV32Indexer.forward runs under no_grad and
# MiniMax's hands on only integer indices: no adapter on them keeps anything, and none of them keeps the layer's input
READS_INPUT: frozenset[str] = frozenset()
ADAPTERS_SAVE = False


def frozen_saved(m, d, w, adapted: frozenset[str]) -> int:
    """Bytes saved() no longer keeps when the indexer is frozen: none (it saves nothing; the attention beside it has
    the engine's LoRA rules)."""
    return 0
