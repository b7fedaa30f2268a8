"""LongCat-Flash (transformers models/longcat_flash/modeling_longcat_flash.py, 5.23), mapped onto two engine layers per
block.

A LongcatFlashDecoderLayer holds two MLA attentions (self_attn[0], self_attn[1]: cache layers 2i and 2i + 1), two
dense SwiGLU MLPs (mlps[0], mlps[1], ffn_hidden_size wide), four RMSNorms (input_layernorm[0..1],
post_attention_layernorm[0..1]) and one shortcut-connected MoE (mlp). The MoE reads post_attention_layernorm[0]'s
output, the very tensor mlps[0] reads, and its output is added to the residual only after mlps[1]
(`residual + mlps[1](...) + shortcut_mlp_output`). Where the sum lands changes no tensor and nothing saved for
backward, so block i is engine layers 2i and 2i + 1:

- layer 2i ("mla" + "moe"): MLA, then the routed experts beside an always-on MLP of ffn_hidden_size that reads the
  same normed input and is summed with them: the engine's shared expert (gate / up / down, no bias), the same
  tensors and the same saved activations as mlps[0];
- layer 2i + 1 ("mla" + "dense"): MLA and mlps[1].

config num_layers counts blocks (LongcatFlashConfig.num_hidden_layers = 2 · num_layers). The router
(LongcatFlashTopkRouter) scores n_routed_experts + zero_expert_num experts: its classifier is (n + z, h) (a bias per
router_bias), e_score_correction_bias a buffer; the zero experts are identities with no weights of their own, but
LongcatFlashExperts sizes gate_up_proj by all n + z experts (down_proj by n). What the MoE saves:
calculator.model.zero_experts.
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.config_read import ConfigError, common_fields, get_bool, get_int, get_str
from calculator.model.variants import VariantSpec


def map_longcat_flash(cfg: dict) -> dict:
    """LongCat-Flash: blocks of [MLA + (MoE beside a dense MLP)] and [MLA + dense MLP] (module docstring)."""
    blocks = get_int(cfg, "num_layers", default=28, hi=B.MAX_LAYERS // 2)
    ffn = get_int(cfg, "ffn_hidden_size", default=12288, hi=B.MAX_FFN)
    f = common_fields({**cfg, "num_hidden_layers": 2 * blocks, "intermediate_size": ffn})
    h = f["hidden_size"]
    bias = get_bool(cfg, "attention_bias", False)
    routed = get_int(cfg, "n_routed_experts", default=512, lo=1, hi=B.MAX_EXPERTS)
    zero = get_int(cfg, "zero_expert_num", default=256, lo=0, hi=B.MAX_EXPERTS)
    top_k = get_int(cfg, "moe_topk", default=12, lo=1, hi=B.MAX_EXPERTS)
    if top_k > routed:  # ModelSpec asks k <= num_experts (the real routed ones)
        raise ConfigError(f"moe_topk: {top_k} is above n_routed_experts ({routed}); the engine's router picks at "
                          f"most num_experts experts per token")
    width = get_int(cfg, "expert_ffn_hidden_size", default=2048, hi=B.MAX_FFN)
    f.update(family="deepseek", head_dim=None, num_key_value_heads=None,
             q_lora_rank=get_int(cfg, "q_lora_rank", default=1536, hi=B.MAX_HIDDEN),
             kv_lora_rank=get_int(cfg, "kv_lora_rank", default=512, hi=B.MAX_HIDDEN),
             qk_rope_head_dim=get_int(cfg, "qk_rope_head_dim", default=64, hi=B.MAX_HEAD_DIM),
             qk_nope_head_dim=get_int(cfg, "qk_nope_head_dim", default=128, hi=B.MAX_HEAD_DIM),
             v_head_dim=get_int(cfg, "v_head_dim", default=128, hi=B.MAX_HEAD_DIM), qkv_bias=bias, o_bias=bias,
             hidden_act=get_str(cfg, "hidden_act", default="silu"),
             num_experts=routed, num_experts_per_tok=top_k, moe_intermediate_size=width,
             shared_expert_intermediate_size=f["intermediate_size"], router_bias=get_bool(cfg, "router_bias", False),
             ffn_types=("moe", "dense") * blocks,
             variant=VariantSpec(zero_experts=zero, expert_tensors=((routed + zero, 2 * width, h), (routed, h, width)),
                                 router_fp32_input=True, router_fp32_weight_copy=True, router_renorm=False))
    qk = get_int(cfg, "qk_head_dim", default=None, hi=2 * B.MAX_HEAD_DIM)
    if qk is not None and qk != f["qk_nope_head_dim"] + f["qk_rope_head_dim"]:  # q_b_proj's heads split into the two
        raise ConfigError(f"qk_head_dim: {qk} is not qk_nope_head_dim + qk_rope_head_dim; LongcatFlashMLA splits "
                          f"each query head into those two parts")
    return f


LONGCAT_MAPPERS = {"longcat_flash": map_longcat_flash}
