"""The configuration of token mixers other than softmax attention, as a model's config.json gives it: one frozen
model per family of mixers, nested in ModelSpec. Which layers use which mixer is ModelSpec.layer_types; what each
mixer holds and computes is its module in calculator/model/architectures/.
"""
from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from calculator.core import bounds as B
from calculator.core.hash_once import HashedOnce

_dim = dict(gt=0, le=B.MAX_HIDDEN, strict=True)
_heads = dict(gt=0, le=B.MAX_HEADS, strict=True)


class LinearAttentionSpec(HashedOnce):
    """Gated DeltaNet (Qwen3-Next, Qwen3.5, OLMo-hybrid) and Kimi Delta Attention: key/value heads and widths, the
    depthwise causal convolution over q, k and v, and how the input projections are laid out."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_key_heads: int = Field(**_heads)
    num_value_heads: int = Field(**_heads)
    key_head_dim: int = Field(**_dim)
    value_head_dim: int = Field(**_dim)
    conv_kernel: int = Field(default=4, ge=0, le=1024, strict=True)  # linear_conv_kernel_dim (0: no convolution)
    # "qkvz_ba": Qwen3-Next's two fused projections in_proj_qkvz and in_proj_ba; "qkv_z_b_a": Qwen3.5's four;
    # "q_k_v_a_b_g": OLMo-Hybrid's six (q_proj, k_proj, v_proj, a_proj, b_proj, g_proj) and o_proj
    projections: Literal["qkvz_ba", "qkv_z_b_a", "q_k_v_a_b_g"] = "qkvz_ba"
    # OLMo-Hybrid's linear_allow_neg_eigval: beta = 2·sigmoid(b), a tensor apart from the sigmoid's saved output
    allow_neg_eigval: bool = False

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the causal convolution: q, k and v side by side."""
        return 2 * self.key_dim + self.value_dim
