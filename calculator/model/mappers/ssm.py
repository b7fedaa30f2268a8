"""Mappings for state-space (Mamba) models and hybrids (issue 21): each model_type's config.json, read with its
transformers 5.23 configuration class's defaults and field names, into a ModelSpec whose layer_types name each
layer's mixer ("mamba", "full_attention", "parallel_mamba_attention", "none") and whose ffn_types name each layer's
feed-forward. Each mapper cites the modeling file it mirrors and is held to the real model's parameter and tensor
counts by tests/model/mappers/test_ssm.py.
"""
from __future__ import annotations

from math import ceil
from typing import Any

from pydantic import ValidationError

from calculator.core import bounds as B
from calculator.model.architectures.mamba import MambaSpec
from calculator.model.config_read import (ConfigError, get_bool, get_choice_list, get_float, get_int, get_int_list,
                                          get_str)

MAMBA_TYPES = ("linear_attention", "mamba")  # a Mamba layer ("mamba", "attention": legacy names transformers remaps)
ATTENTION_TYPES = ("full_attention", "attention")


def _spec(**fields: Any) -> MambaSpec:
    """A MambaSpec, its refusals worded as config errors."""
    try:
        return MambaSpec(**fields)
    except ValidationError as exc:
        raise ConfigError(f"config.json's Mamba fields do not fit together: {exc.errors()[0]['msg']}") from None


def _flag(cfg: dict, *keys: str, default: bool) -> bool:
    """A true/false field under the first of `keys` present (legacy names first, as transformers pops them)."""
    for key in keys:
        if cfg.get(key) is not None:
            return get_bool(cfg, key, default)
    return default


def _head_dim(cfg: dict, key: str, d_inner: int, heads: int) -> int:
    """mamba_d_head: a number, or "auto" (the configuration classes' __post_init__: d_inner // n_heads); the
    configuration's validate_architecture requires n_heads × d_head == d_inner."""
    p = d_inner // heads if cfg.get(key) in (None, "auto") else get_int(cfg, key, hi=B.MAX_HEAD_DIM)
    if p * heads != d_inner:
        raise ConfigError(f"{key}: {p} × {heads} heads must equal the Mamba width {d_inner}")
    return p


def _mamba2(cfg: dict, d_inner: int, keys: tuple[str, ...], defaults: tuple[int, ...], **rest) -> MambaSpec:
    """A Mamba-2 mixer from the config's own field names (Mamba2Mixer and its copies): `keys` name the heads, head
    width, state size, groups, conv kernel, chunk size and conv bias; `defaults` the configuration class's heads,
    state size, groups, conv kernel and chunk size."""
    heads, d_head, state, groups, kernel, chunk, conv_bias = keys
    n_heads = get_int(cfg, heads, default=defaults[0], hi=B.MAX_HEADS)
    _head_dim(cfg, d_head, d_inner, n_heads)
    return _spec(version=2, d_inner=d_inner, num_heads=n_heads,
                 d_state=get_int(cfg, state, default=defaults[1], hi=B.MAX_HIDDEN),
                 n_groups=get_int(cfg, groups, default=defaults[2], hi=B.MAX_HEADS),
                 conv_kernel=get_int(cfg, kernel, default=defaults[3], hi=1024),
                 chunk_size=get_int(cfg, chunk, default=defaults[4], hi=1 << 20),
                 conv_bias=get_bool(cfg, conv_bias, True), **rest)


def _width(cfg: dict, key: str, h: int) -> int:
    """int(expand × hidden_size), as the mixers compute it."""
    d = int(get_float(cfg, key, 2.0, 1e-6, 1e6) * h)
    if d < 1 or d > B.MAX_HIDDEN:
        raise ConfigError(f"{key}: {key} × hidden_size must be a width from 1 to {B.MAX_HIDDEN:,}, got {d:,}")
    return d


def _attention(cfg: dict, h: int, head_dim_default: int | None = None) -> dict:
    """The attention sizes: heads, KV heads (None: as many as heads), head_dim (absent: hidden_size / heads)."""
    return dict(num_attention_heads=get_int(cfg, "num_attention_heads", hi=B.MAX_HEADS),
                num_key_value_heads=get_int(cfg, "num_key_value_heads", default=None, hi=B.MAX_HEADS),
                head_dim=get_int(cfg, "head_dim", default=head_dim_default, hi=B.MAX_HEAD_DIM))


def _base(cfg: dict, tie_default: bool) -> dict:
    return dict(hidden_size=get_int(cfg, "hidden_size", hi=B.MAX_HIDDEN),
                vocab_size=get_int(cfg, "vocab_size", hi=B.MAX_VOCAB),
                tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", tie_default))


def _mamba_only(cfg: dict, f: dict, mb: MambaSpec) -> dict:
    """A model of Mamba blocks only (RMSNorm → mixer → residual): no attention and no feed-forward. The attention
    fields say how tensor parallelism splits the mixer (Mamba-2: its heads; Mamba-1: its d channels)."""
    n = get_int(cfg, "num_hidden_layers", hi=B.MAX_LAYERS)
    heads = mb.num_heads if mb.version == 2 else (mb.d_inner if mb.d_inner <= B.MAX_HEADS else 1)
    f.update(num_hidden_layers=n, num_attention_heads=heads, head_dim=mb.d_inner // heads,
             intermediate_size=mb.d_inner, layer_types=("mamba",) * n, ffn_types=("none",) * n, mamba=mb,
             hidden_act=get_str(cfg, "hidden_act", default="silu"))
    return f


def map_mamba2(cfg: dict) -> dict:
    """Mamba-2 (models/mamba2/modeling_mamba2.py, Mamba2Block: Mamba2RMSNorm → Mamba2Mixer → residual in fp32):
    d = int(expand × hidden_size) = num_heads × head_dim; in/out_proj bias use_bias, conv bias use_conv_bias."""
    f = _base(cfg, tie_default=False)
    d = _width(cfg, "expand", f["hidden_size"])
    bias = get_bool(cfg, "use_bias", False)
    mb = _mamba2(cfg, d, ("num_heads", "head_dim", "state_size", "n_groups", "conv_kernel", "chunk_size",
                          "use_conv_bias"), (128, 128, 8, 4, 256), in_proj_bias=bias, out_proj_bias=bias)
    return _mamba_only(cfg, f, mb)


def map_mamba(cfg: dict) -> dict:
    """Mamba-1 (models/mamba/modeling_mamba.py MambaMixer) and Falcon-Mamba (models/falcon_mamba: the same tensors,
    dt/B/C RMSNorms without weights): d = int(expand × hidden_size), time_step_rank ("auto": ⌈hidden_size/16⌉)."""
    f = _base(cfg, tie_default=True)
    d = _width(cfg, "expand", f["hidden_size"])
    rank = cfg.get("time_step_rank")
    rank = ceil(f["hidden_size"] / 16) if rank in (None, "auto") else get_int(cfg, "time_step_rank", hi=B.MAX_HIDDEN)
    bias = get_bool(cfg, "use_bias", False)
    norm = "weightless" if get_str(cfg, "model_type") == "falcon_mamba" else "none"
    mb = _spec(version=1, d_inner=d, d_state=get_int(cfg, "state_size", default=16, hi=B.MAX_HIDDEN),
               conv_kernel=get_int(cfg, "conv_kernel", default=4, hi=1024), dt_rank=rank, in_proj_bias=bias,
               out_proj_bias=bias, conv_bias=get_bool(cfg, "use_conv_bias", True), dt_bc_norm=norm)
    return _mamba_only(cfg, f, mb)


NEMOTRON_PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
NEMOTRON_BLOCKS = {"linear_attention": ("mamba", "none"), "mamba": ("mamba", "none"),
                   "full_attention": ("full_attention", "none"), "attention": ("full_attention", "none"),
                   "mlp": ("none", "dense"), "moe": ("none", "moe")}


def _nemotron_blocks(cfg: dict) -> list[str]:
    """layers_block_type, or the legacy hybrid_override_pattern ("M-M*-E": Mamba, MLP, attention, MoE), or the
    configuration class's default; NemotronHConfig derives num_hidden_layers from it."""
    types = get_choice_list(cfg, "layers_block_type", tuple(NEMOTRON_BLOCKS))
    if types is None:
        pattern = get_str(cfg, "hybrid_override_pattern", default=None, max_len=B.MAX_LAYERS)
        if pattern is not None and any(c not in NEMOTRON_PATTERN for c in pattern):
            raise ConfigError(f"hybrid_override_pattern: only M, E, * and - are block types, got {pattern[:40]!r}")
        types = [NEMOTRON_PATTERN[c] for c in pattern] if pattern is not None else \
            ["linear_attention", "moe", "full_attention", "mlp"]
    if not types:
        raise ConfigError("layers_block_type: a model needs at least one block")
    return types


def map_nemotron_h(cfg: dict) -> dict:
    """Nemotron-H (models/nemotron_h/modeling_nemotron_h.py): every block is NemotronHRMSNorm → one of Mamba-2,
    attention (no bias, no RoPE), a relu² MLP (up, down) or a MoE of non-gated experts behind a sigmoid router
    with one shared expert; lm_head never tied (NemotronHForCausalLM._tied_weights_keys is empty). The norm
    multiplies its weight in fp32 (8·T·h + 4·T + 4·h saved, as the zero-centred norm: zero_centered_norm)."""
    f = _base(cfg, tie_default=False)
    h = f["hidden_size"]
    kinds = [NEMOTRON_BLOCKS[t] for t in _nemotron_blocks(cfg)]
    heads = get_int(cfg, "mamba_num_heads", default=128, hi=B.MAX_HEADS)
    d = heads * get_int(cfg, "mamba_head_dim", default=64, hi=B.MAX_HEAD_DIM)
    bias = get_bool(cfg, "use_bias", False)
    mb = _spec(version=2, d_inner=d, num_heads=heads, d_state=get_int(cfg, "ssm_state_size", default=128,
                                                                      hi=B.MAX_HIDDEN),
               n_groups=get_int(cfg, "mamba_n_groups", "n_groups", default=8, hi=B.MAX_HEADS),
               conv_kernel=get_int(cfg, "mamba_d_conv", "conv_kernel", default=4, hi=1024),
               chunk_size=get_int(cfg, "mamba_chunk_size", "chunk_size", default=128, hi=1 << 20),
               conv_bias=_flag(cfg, "mamba_conv_bias", "use_conv_bias", default=True), in_proj_bias=bias,
               out_proj_bias=bias)
    f.update(_attention(cfg, h, head_dim_default=128), num_hidden_layers=len(kinds), tie_word_embeddings=False,
             intermediate_size=get_int(cfg, "intermediate_size", default=21504, hi=B.MAX_FFN), gated_mlp=False,
             hidden_act=get_str(cfg, "mlp_hidden_act", default="relu2"), mlp_bias=get_bool(cfg, "mlp_bias", False),
             zero_centered_norm=True, layer_types=tuple(k[0] for k in kinds), ffn_types=tuple(k[1] for k in kinds),
             mamba=mb, mtp_layers=get_int(cfg, "num_nextn_predict_layers", default=0, lo=0, hi=64))
    if get_bool(cfg, "tie_word_embeddings", False):
        f["_warnings"] = ["Nemotron-H never ties lm_head to the embedding (transformers builds both): counted apart"]
    if "moe" in f["ffn_types"]:
        # NemotronHMoE's fc1_latent_proj / fc2_latent_proj around experts of moe_latent_size (Nemotron-3 Super)
        f["moe_latent_size"] = get_int(cfg, "moe_latent_size", default=None, hi=B.MAX_HIDDEN)
        experts = get_int(cfg, "n_routed_experts", "num_local_experts", default=8, hi=B.MAX_EXPERTS)
        f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", default=2, hi=experts),
                 moe_intermediate_size=get_int(cfg, "moe_intermediate_size", default=7688, hi=B.MAX_FFN),
                 shared_expert_intermediate_size=get_int(cfg, "moe_shared_expert_intermediate_size", default=7688,
                                                         hi=B.MAX_FFN))
    return f


def _layer_types(cfg: dict, key: str, n: int, default: str) -> list[str]:
    """A layer type per layer ("mamba" and "attention" are legacy names); `default` for every layer when absent."""
    types = get_choice_list(cfg, key, MAMBA_TYPES + ATTENTION_TYPES) or [default] * n
    if len(types) != n:
        raise ConfigError(f"{key}: has {len(types)} entries but num_hidden_layers is {n}")
    return ["mamba" if t in MAMBA_TYPES else "full_attention" for t in types]


def _hybrid(cfg: dict) -> dict:
    """What Bamba, Granite-4 hybrids and Falcon-H1 share: two RMSNorms per layer, attention with one bias switch on
    q/k/v/o and head_dim = hidden_size / heads unless the file gives one."""
    f = _base(cfg, tie_default=False)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(_attention(cfg, f["hidden_size"]), num_hidden_layers=get_int(cfg, "num_hidden_layers", hi=B.MAX_LAYERS),
             qkv_bias=bias, o_bias=bias, hidden_act=get_str(cfg, "hidden_act", default="silu"),
             intermediate_size=get_int(cfg, "intermediate_size", hi=B.MAX_FFN))
    return f


def _mamba2_prefixed(cfg: dict, d: int, **rest) -> MambaSpec:
    """A Mamba-2 mixer under the mamba_* names of Bamba, Granite-4 hybrids and Falcon-H1."""
    return _mamba2(cfg, d, ("mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_d_conv",
                            "mamba_chunk_size", "mamba_conv_bias"), (128, 256, 1, 4, 256), **rest)


def map_bamba(cfg: dict) -> dict:
    """Bamba (models/bamba/modeling_bamba.py BambaDecoderLayer): Mamba-2, or attention at attn_layer_indices (RoPE on
    half of head_dim), and a gated MLP (mlp_bias) in every layer; the mixer's biases mamba_proj_bias."""
    f = _hybrid(cfg)
    n = f["num_hidden_layers"]
    attn = set(get_int_list(cfg, "attn_layer_indices", lo=0, hi=B.MAX_LAYERS) or [])
    bias = get_bool(cfg, "mamba_proj_bias", False)
    f.update(mamba=_mamba2_prefixed(cfg, _width(cfg, "mamba_expand", f["hidden_size"]), in_proj_bias=bias,
                                    out_proj_bias=bias), mlp_bias=get_bool(cfg, "mlp_bias", False),
             layer_types=tuple("full_attention" if i in attn else "mamba" for i in range(n)))
    head_dim = f.get("head_dim") or f["hidden_size"] // f["num_attention_heads"]
    # BambaConfig hard-codes partial_rotary_factor 0.5; apply_rotary_pos_emb concatenates the pass-through half
    f.update(rope_concat=True, rotary_dim=head_dim // 2)
    return f


def map_granitemoehybrid(cfg: dict) -> dict:
    """Granite-4 hybrids (models/granitemoehybrid/modeling_granitemoehybrid.py GraniteMoeHybridDecoderLayer): Mamba-2
    or attention per layer_types, then routed experts (when num_local_experts > 0) beside a shared gated MLP of
    shared_intermediate_size (input_linear fused gate and up) in every layer."""
    f = _hybrid(cfg)
    h, n = f["hidden_size"], f["num_hidden_layers"]
    bias = get_bool(cfg, "mamba_proj_bias", False)
    key = "layer_types" if cfg.get("layer_types") is not None else "layers_block_type"
    shared = get_int(cfg, "shared_intermediate_size", default=1024, hi=B.MAX_FFN)
    f.update(mamba=_mamba2_prefixed(cfg, _width(cfg, "mamba_expand", h), in_proj_bias=bias, out_proj_bias=bias),
             layer_types=tuple(_layer_types(cfg, key, n, "linear_attention")), fused_gate_up=True)
    experts = get_int(cfg, "num_local_experts", default=8, lo=0, hi=B.MAX_EXPERTS)
    if experts:
        f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", default=2, hi=experts),
                 moe_intermediate_size=f["intermediate_size"], shared_expert_intermediate_size=shared,
                 ffn_types=("moe",) * n)
    else:  # the shared MLP alone
        f.update(intermediate_size=shared)
    return f


def map_falcon_h1(cfg: dict) -> dict:
    """Falcon-H1 (models/falcon_h1/modeling_falcon_h1.py FalconH1DecoderLayer): Mamba-2 and attention in parallel in
    every layer, then a gated MLP; d = mamba_d_ssm (else int(mamba_expand × hidden_size)), in_proj bias
    mamba_proj_bias, out_proj bias projectors_bias, the gated RMSNorm only with mamba_rms_norm."""
    f = _hybrid(cfg)
    d = get_int(cfg, "mamba_d_ssm", default=None, hi=B.MAX_HIDDEN) or _width(cfg, "mamba_expand", f["hidden_size"])
    mb = _mamba2_prefixed(cfg, d, in_proj_bias=get_bool(cfg, "mamba_proj_bias", False),
                          out_proj_bias=get_bool(cfg, "projectors_bias", False),
                          gated_norm=get_bool(cfg, "mamba_rms_norm", False))
    f.update(mamba=mb, mlp_bias=get_bool(cfg, "mlp_bias", False),
             layer_types=("parallel_mamba_attention",) * f["num_hidden_layers"])
    return f


def map_jamba(cfg: dict) -> dict:
    """Jamba (models/jamba/modeling_jamba.py): attention (no bias, no RoPE) where i % attn_layer_period ==
    attn_layer_offset, Mamba-1 with weighted dt/B/C RMSNorms elsewhere; routed experts (gated, no shared expert)
    where i % expert_layer_period == expert_layer_offset and num_experts > 1, a gated MLP elsewhere."""
    f = _hybrid(cfg)
    h, n = f["hidden_size"], f["num_hidden_layers"]
    rank = cfg.get("mamba_dt_rank")
    rank = ceil(h / 16) if rank in (None, "auto") else get_int(cfg, "mamba_dt_rank", hi=B.MAX_HIDDEN)
    bias = get_bool(cfg, "mamba_proj_bias", False)
    mb = _spec(version=1, d_inner=get_int(cfg, "mamba_expand", default=2, hi=B.MAX_HIDDEN) * h, dt_rank=rank,
               d_state=get_int(cfg, "mamba_d_state", default=16, hi=B.MAX_HIDDEN),
               conv_kernel=get_int(cfg, "mamba_d_conv", default=4, hi=1024), in_proj_bias=bias, out_proj_bias=bias,
               conv_bias=get_bool(cfg, "mamba_conv_bias", True), dt_bc_norm="weighted")
    a_period = get_int(cfg, "attn_layer_period", default=8, hi=B.MAX_LAYERS)
    a_offset = get_int(cfg, "attn_layer_offset", default=4, lo=0, hi=a_period - 1)
    e_period = get_int(cfg, "expert_layer_period", default=2, hi=B.MAX_LAYERS)
    e_offset = get_int(cfg, "expert_layer_offset", default=1, lo=0, hi=e_period - 1)
    experts = get_int(cfg, "num_experts", "num_local_experts", default=16, hi=B.MAX_EXPERTS)
    moe = [experts > 1 and i % e_period == e_offset for i in range(n)]
    f.update(qkv_bias=False, o_bias=False, mamba=mb, ffn_types=tuple("moe" if x else "dense" for x in moe),
             layer_types=tuple("full_attention" if i % a_period == a_offset else "mamba" for i in range(n)))
    if any(moe):
        f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", default=2,
                                                                  hi=experts))
    return f


def map_zamba2(cfg: dict) -> dict:
    """Zamba2 (models/zamba2/modeling_zamba2.py) is refused: its hybrid layers run shared transformer blocks."""
    raise ConfigError("model_type: 'zamba2' is not supported: its hybrid layers reuse num_mem_blocks shared "
                      "transformer blocks (attention over the concatenated 2·hidden_size input and an MLP, the same "
                      "weights at every hybrid layer, plus per-layer LoRA adapters and an unshared linear); the "
                      "engine describes each layer's own weights and has no field for weights shared across layers, "
                      "so its parameter count would be wrong")


SSM_MAPPERS = {
    "mamba2": map_mamba2, "mamba": map_mamba, "falcon_mamba": map_mamba, "nemotron_h": map_nemotron_h,
    "granitemoehybrid": map_granitemoehybrid, "bamba": map_bamba, "falcon_h1": map_falcon_h1, "jamba": map_jamba,
    "zamba2": map_zamba2,
}
