"""MiniMax lightning attention, the linear-attention token mixer of MiniMax-Text-01 (MiniMax, MiniMax-01: Scaling
Foundation Models with Lightning Attention, arXiv:2501.08313; Qin et al., Lightning Attention-2, arXiv:2401.04658),
as transformers 5.23 builds it: models/minimax/modeling_minimax.py MiniMaxLightningAttention.

Per layer: qkv_proj (h → 3·heads·head_dim) through SiLU, a block-wise linear attention with a fixed per-head decay
(blocks of block_size tokens: softmax-free q·kᵀ within a block, a head_dim × head_dim state across blocks), an
RMSNorm over heads·head_dim, a sigmoid output gate (output_gate, h → heads·head_dim) and out_proj. Its decay tables
(slope_rate, query_decay, key_decay, diagonal_decay: heads·(1 + 2B + B²) elements) are buffers, not parameters.
transformers has no kernel for it: the GPU runs the same PyTorch block loop.
"""
from __future__ import annotations

from pydantic import ConfigDict, Field

from calculator.core import bounds as B
from calculator.core.hash_once import HashedOnce
from calculator.model.architectures.shapes import Shape, linear

NAME = "lightning"
LABEL = "MiniMax lightning attention"
SOURCE = "lightning-attention"


class LightningSpec(HashedOnce):
    """The configuration of lightning-attention layers (MiniMaxConfig num_attention_heads, head_dim, block_size)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_heads: int = Field(gt=0, le=B.MAX_HEADS, strict=True)
    head_dim: int = Field(gt=0, le=B.MAX_HEAD_DIM, strict=True)
    block_size: int = Field(default=256, gt=0, le=1 << 20, strict=True)

    @property
    def width(self) -> int:
        """heads × head_dim: the width of q, k, v, the norm and the gate."""
        return self.num_heads * self.head_dim


def shapes(m) -> list[Shape]:
    """Every parameter tensor of one MiniMaxLightningAttention, in registration order: norm, qkv_proj, out_proj,
    output_gate."""
    w, h = m.lightning.width, m.hidden_size
    return [(w,)] + linear(h, 3 * w) + linear(w, h) + linear(h, w)


def linears(m) -> list[tuple[str, int, int]]:
    """(module name, in_features, out_features) of its nn.Linear modules."""
    w, h = m.lightning.width, m.hidden_size
    return [("qkv_proj", h, 3 * w), ("output_gate", h, w), ("out_proj", w, h)]


def decay_buffer_elements(lt: LightningSpec) -> int:
    """Elements of one layer's decay buffers (slope_rate, query_decay, key_decay, diagonal_decay):
    heads·(1 + 2·B + B²), kept in the model dtype beside the parameters (not counted as parameters)."""
    return lt.num_heads * (1 + 2 * lt.block_size + lt.block_size ** 2)


def state_bytes(m, batch: int, model_dtype_bytes: float) -> int:
    """What generate() keeps per layer for `batch` sequences (MiniMaxCache.linear_cache, the state
    attn_weights_inter): [b, heads, head_dim, head_dim] in the model dtype, whatever the length."""
    lt = m.lightning
    return int(batch * lt.num_heads * lt.head_dim ** 2 * model_dtype_bytes)


def serving_state(m, tp: int) -> tuple[int, int]:
    """(conv elements, recurrent elements) per sequence on one TP rank as vLLM kept them (vLLM 0.33 mamba_utils.py
    MambaStateShapeCalculator.linear_attention_state_shape: (heads / TP) × head_dim × head_dim, no conv; vLLM ran
    MiniMax-Text-01 up to 0.23)."""
    lt = m.lightning
    return 0, (lt.num_heads // tp) * lt.head_dim ** 2


def block_sizes(s: int, block: int) -> list[int]:
    """The blocks MiniMaxLightningAttention cuts a sequence of s tokens into: full blocks, the last one partial."""
    return [min(block, s - i) for i in range(0, s, block)]


def blocks_saved(b: int, s: int, heads: int, d: int, block: int, e: int) -> int:
    """Bytes the block loop saves for backward (MiniMaxLightningAttention.forward, no cache), in the model dtype,
    traced on the CPU (tests/model/test_linear_mixers.py), for blocks c_1..c_n:
    3·b·heads·s·d (each block's q, kᵀ and v matmul operands) + b·heads·Σ c_j² (q·kᵀ ⊙ decay per block)
    + n·b·heads·d² (the state entering each block) + b·heads·d·(s − c_1) (q·decay of blocks 2..n)
    + m·b·heads·d·(s − c_n) (the state-update operands of blocks 1..n − 1; m = 2 for b > 1, 1 for b = 1 where one
    operand stays a view of the qkv activation) + max(n − 2, 0)·heads (the per-block decay scalars), all × e."""
    cs = block_sizes(s, block)
    n = len(cs)
    m_ops = 2 if b > 1 else 1
    return e * (3 * b * heads * s * d + b * heads * sum(c * c for c in cs) + n * b * heads * d * d
                + b * heads * d * (s - cs[0]) + m_ops * b * heads * d * (s - cs[-1]) + max(n - 2, 0) * heads)


def saved(m, d, w) -> int:
    """What one lightning-attention mixer saves for backward beyond its input (the norm output, read by qkv_proj and
    output_gate), for the local shapes `d` (heads split by TP; the same with Workload.mixer_kernels "fused" and
    "torch": transformers 5.23 has no kernel hook for it): SiLU's input (the qkv_proj output, 3·e·T·w), the block
    loop (blocks_saved), the RMSNorm over w (4·T·w fp32 copy + 4·T rsqrt + e·T·w normalised), sigmoid's output, the
    normalised output and out_proj's input (3·e·T·w), w = heads × head_dim."""
    lt, e, T = m.lightning, d.e, d.T
    heads = max(lt.num_heads // d.tp, 1)
    wd = heads * lt.head_dim
    norm = 4 * T * wd + 4 * T + e * T * wd
    return 3 * e * T * wd + blocks_saved(d.b, d.s, heads, lt.head_dim, lt.block_size, e) + norm + 3 * e * T * wd


def linear_flops_per_token(m) -> float:
    """FLOPs per token of one lightning-attention mixer beyond its projections (forward), per head: q·kᵀ and
    (q·kᵀ ⊙ decay)·v over the whole block (2·B·d each: the block loop computes full B × B blocks), q·state and the
    state update kᵀ·v (2·d² each): heads·(4·d² + 4·B·d) (MiniMaxLightningAttention.forward; Lightning Attention-2's
    intra/inter-block split)."""
    lt = m.lightning
    d = lt.head_dim
    return lt.num_heads * (4 * d * d + 4 * lt.block_size * d)


# ---- LoRA: what the frozen mixer no longer saves -------------------------------------------------------------------

READS_INPUT = frozenset({"qkv_proj", "output_gate"})  # the linears that read the layer's normalised input


def frozen_saved(m, d, w, adapted: frozenset[str]) -> int:
    """Bytes saved() no longer keeps when the mixer is frozen and only the `adapted` linears carry LoRA adapters,
    its input requiring grad (MiniMaxLightningAttention.forward; measured with PEFT 0.21 on the CPU,
    validation/trace/lora_hybrid.py): the RMSNorm's normalised copy (its weight frozen), e·T·w, and out_proj's input
    unless out_proj is adapted, e·T·w (w = heads × head_dim on this rank)."""
    lt = m.lightning
    wd = max(lt.num_heads // d.tp, 1) * lt.head_dim
    return d.e * d.T * wd + (0 if "out_proj" in adapted else d.e * d.T * wd)
