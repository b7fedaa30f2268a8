"""Mappings for DeepSeek sparse attention (DSA) and the MoE families around it (issue 21): each model_type's
config.json, read with its transformers 5.23 configuration class's defaults and field names, into a ModelSpec. The
indexed layers are "indexed_attention" (calculator/model/architectures/dsa.py: the lightning indexer on the model's
own attention); each layer's feed-forward is ModelSpec.ffn_types from the config's mlp_layer_types, or
first_k_dense_layers. Each mapper cites the modeling file it mirrors and is held to the real model's parameter and
tensor counts, its cache and its saved activations by tests/model/mappers/test_dsa.py.

DeepSeek-V4 (map_deepseek_v4) is compressed attention (calculator/model/architectures/compressed.py) with
hyper-connections, held to the real model by tests/model/mappers/test_deepseek_v4.py.

A.X-K1 (map_axk1) is DeepSeek-V3's MLA and MoE with a norm after the MoE block, held to the real model by
tests/model/mappers/test_axk1_and_refusals.py.

Refused, each naming what the engine lacks: hy_v4, axk2 and dots3_note_text (DSA_REFUSED).
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.architectures.compressed import CompressedSpec
from calculator.model.architectures.dsa import IndexerSpec
from calculator.model.config_read import (ConfigError, common_fields, get_bool, get_choice_list, get_int,
                                          get_int_list, get_str, partial_rotary_dim, router_group_fields)
from calculator.model.variants import VariantSpec

# Defaults of the configuration classes for the fields a real config.json may leave out
# (models/<type>/configuration_<type>.py).
V32_DEFAULTS = dict(q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                    n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=8, moe_intermediate_size=2048,
                    first_k_dense_replace=3, index_n_heads=64, index_head_dim=128, index_topk=2048)
GLM_DSA_DEFAULTS = dict(V32_DEFAULTS, q_lora_rank=2048, qk_nope_head_dim=192, v_head_dim=256, index_n_heads=32)
GLM_LITE_DEFAULTS = dict(q_lora_rank=768, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=192,
                         v_head_dim=256, n_routed_experts=64, n_shared_experts=1, num_experts_per_tok=4,
                         moe_intermediate_size=1536)
GLM4_MOE_DEFAULTS = dict(n_routed_experts=128, n_shared_experts=1, num_experts_per_tok=8, moe_intermediate_size=1408,
                         first_k_dense_replace=1, num_nextn_predict_layers=1)
MINIMAX_DEFAULTS = dict(head_dim=128, num_local_experts=128, num_experts_per_tok=4, dense_intermediate_size=12288,
                        shared_intermediate_size=3072, index_n_heads=4, index_head_dim=128, index_block_size=128,
                        index_topk_blocks=16, index_local_blocks=1)
MINIMAX_LEGACY_INDEX = {"index_n_heads": "sparse_num_index_heads", "index_head_dim": "sparse_index_dim",
                        "index_block_size": "sparse_block_size", "index_topk_blocks": "sparse_topk_blocks",
                        "index_local_blocks": "sparse_local_block"}  # MiniMaxM3VLTextConfig.__post_init__
V4_DEFAULTS = dict(vocab_size=129280, hidden_size=4096, moe_intermediate_size=2048, num_hidden_layers=43,
                   num_attention_heads=64, head_dim=512, q_lora_rank=1024, num_experts_per_tok=6,
                   n_routed_experts=256, hc_mult=4, sliding_window=128, o_groups=8, o_lora_rank=1024,
                   index_n_heads=64, index_head_dim=128, index_topk=512, num_nextn_predict_layers=1)
V4_RATIO_TYPES = {0: "compressed_window_attention", 4: "compressed_sparse_attention",
                  128: "heavily_compressed_attention"}  # configuration_deepseek_v4.py _COMPRESS_RATIO_TO_LAYER_TYPE
V4_LAYER_TYPES = {"sliding_attention": "compressed_window_attention",
                  "compressed_sparse_attention": "compressed_sparse_attention",
                  "heavily_compressed_attention": "heavily_compressed_attention"}


def _layer_count(key: str, values: list, n: int) -> list:
    if len(values) != n:
        raise ConfigError(f"{key}: has {len(values)} entries but num_hidden_layers is {n}")
    return values


def mlp_types(cfg: dict, n: int, default: list[str]) -> tuple[str, ...]:
    """Each layer's feed-forward from mlp_layer_types ("dense" or "sparse", what Glm4MoeLiteDecoderLayer and the
    classes built on it read), else the class's default: "moe" for a sparse layer."""
    types = get_choice_list(cfg, "mlp_layer_types", ("dense", "sparse"))
    types = _layer_count("mlp_layer_types", types if types is not None else default, n)
    return tuple("moe" if t == "sparse" else "dense" for t in types)


def moe_fields(cfg: dict, f: dict, ffn_types: tuple[str, ...]) -> dict:
    """DeepseekV3MoE and its copies: a router of n_routed_experts (its fp32 e_score_correction_bias is a buffer),
    fused routed experts of moe_intermediate_size, n_shared_experts shared experts side by side in one MLP of
    n_shared_experts × moe_intermediate_size."""
    experts = get_int(cfg, "n_routed_experts", "num_local_experts", lo=0, hi=B.MAX_EXPERTS)
    if "moe" not in ffn_types:
        return f
    if not experts:
        raise ConfigError("n_routed_experts: the sparse layers of mlp_layer_types need at least one routed expert")
    f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", hi=experts),
             moe_intermediate_size=get_int(cfg, "moe_intermediate_size", hi=B.MAX_FFN),
             num_shared_experts=get_int(cfg, "n_shared_experts", lo=0, hi=B.MAX_SHARED_EXPERTS))
    return f


def mla_fields(cfg: dict, need_q_lora: bool) -> dict:
    """DeepSeek-V3's MLA (q-LoRA or a plain q_proj, kv latent, nope/rope heads), as DeepseekV3Config names it; the
    config's head_dim (written as qk_rope_head_dim, for the rotary class only) is not a head width here."""
    f = common_fields(cfg)
    bias = get_bool(cfg, "attention_bias", False)
    q_lora = get_int(cfg, "q_lora_rank", default=None, hi=B.MAX_HIDDEN)
    if need_q_lora and q_lora is None:
        raise ConfigError(f"q_lora_rank: {cfg.get('model_type')} always builds the q-LoRA path (its indexer reads "
                          f"the q latent); give q_lora_rank")
    f.update(family="deepseek", head_dim=None, q_lora_rank=q_lora,
             kv_lora_rank=get_int(cfg, "kv_lora_rank", hi=B.MAX_HIDDEN),
             qk_rope_head_dim=get_int(cfg, "qk_rope_head_dim", hi=B.MAX_HEAD_DIM),
             qk_nope_head_dim=get_int(cfg, "qk_nope_head_dim", hi=B.MAX_HEAD_DIM),
             v_head_dim=get_int(cfg, "v_head_dim", hi=B.MAX_HEAD_DIM), qkv_bias=bias, o_bias=bias,
             hidden_act=get_str(cfg, "hidden_act", default="silu"))
    return f


def _mtp(cfg: dict) -> int:
    """MTP layers the checkpoint carries (num_nextn_predict_layers; Glm4MoeConfig's num_mtp_layers): transformers
    skips their weights on load (_keys_to_ignore_on_load_unexpected)."""
    return get_int(cfg, "num_nextn_predict_layers", "num_mtp_layers", default=0, lo=0, hi=64)


def _deepseek_indexer(cfg: dict) -> IndexerSpec:
    return IndexerSpec(n_heads=get_int(cfg, "index_n_heads", hi=B.MAX_HEADS),
                       head_dim=get_int(cfg, "index_head_dim", hi=B.MAX_HEAD_DIM),
                       topk=get_int(cfg, "index_topk", hi=1 << 30))


def _dsa_model(cfg: dict, defaults: dict) -> tuple[dict, dict]:
    """What DeepSeek-V3.2 and GLM-5 share: MLA with q-LoRA, the lightning indexer, mlp_layer_types (default: the
    first first_k_dense_replace layers dense)."""
    cfg = {**defaults, **cfg}
    f = mla_fields(cfg, need_q_lora=True)
    n = f["num_hidden_layers"]
    dense = min(get_int(cfg, "first_k_dense_replace", lo=0, hi=B.MAX_LAYERS), n)
    ffn = mlp_types(cfg, n, ["dense"] * dense + ["sparse"] * (n - dense))
    f.update(ffn_types=ffn, indexer=_deepseek_indexer(cfg), mtp_layers=_mtp(cfg))
    return cfg, moe_fields(cfg, f, ffn)


def map_deepseek_v32(cfg: dict) -> dict:
    """DeepSeek-V3.2 (models/deepseek_v32/modeling_deepseek_v32.py): DeepseekV32Attention always builds its
    DeepseekV32Indexer, so every layer is indexed whatever layer_types says; Glm4MoeLite's decoder layer (dense
    MLP or DeepseekV3-style MoE per mlp_layer_types)."""
    _, f = _dsa_model(cfg, V32_DEFAULTS)
    f["layer_types"] = ("indexed_attention",) * f["num_hidden_layers"]
    return f


def glm_indexer_types(cfg: dict, n: int) -> list[str]:
    """GlmMoeDsaConfig.__post_init__: indexer_types as given; else index_topk_pattern (a string of F / S, or a list);
    else layer i runs its indexer iff max(i − index_skip_topk_offset + 1, 0) is a multiple of index_topk_freq."""
    types = get_choice_list(cfg, "indexer_types", ("full", "shared"))
    pattern = cfg.get("index_topk_pattern")
    if types is None and isinstance(pattern, str):
        if len(pattern) > n or set(pattern) - {"F", "S"}:
            raise ConfigError(f"index_topk_pattern: must be {n} letters F (full) or S (shared), got {pattern[:40]!r}")
        types = ["full" if c == "F" else "shared" for c in pattern]
    elif types is None and pattern is not None:
        types = get_choice_list(cfg, "index_topk_pattern", ("full", "shared"))
    if types is None:
        freq = max(get_int(cfg, "index_topk_freq", default=1, lo=0, hi=B.MAX_LAYERS), 1)
        offset = get_int(cfg, "index_skip_topk_offset", default=2, lo=-B.MAX_LAYERS, hi=B.MAX_LAYERS)
        types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]
    if types and types[0] == "shared":  # GlmMoeDsaAttention.forward raises: no earlier top-k to reuse
        raise ConfigError("indexer_types[0]: a shared layer reuses the previous layer's top-k; the first is full")
    return _layer_count("indexer_types", types, n)


def map_glm_moe_dsa(cfg: dict) -> dict:
    """GLM-5 (models/glm_moe_dsa/modeling_glm_moe_dsa.py): DeepSeek-V3.2's layers, except that a "shared" layer of
    indexer_types builds no indexer (GlmMoeDsaAttention: self.indexer = None) and reuses the previous layer's top-k:
    it is plain MLA, without indexer tensors or indexer keys in its cache (DynamicIndexedLayer leaves them empty)."""
    cfg, f = _dsa_model(cfg, GLM_DSA_DEFAULTS)
    types = glm_indexer_types(cfg, f["num_hidden_layers"])
    f["layer_types"] = tuple("indexed_attention" if t == "full" else "full_attention" for t in types)
    return f


def map_glm4_moe_lite(cfg: dict) -> dict:
    """GLM-4.7-Flash (models/glm4_moe_lite/modeling_glm4_moe_lite.py): DeepSeek-V3's MLA (q_lora_rank null: one
    q_proj), no indexer; mlp_layer_types, default one dense layer then MoE (first_k_dense_replace is not read)."""
    cfg = {**GLM_LITE_DEFAULTS, **cfg}
    f = mla_fields(cfg, need_q_lora=False)
    n = f["num_hidden_layers"]
    ffn = mlp_types(cfg, n, ["dense"] + ["sparse"] * (n - 1))
    f.update(ffn_types=ffn, mtp_layers=_mtp(cfg))
    return moe_fields(cfg, f, ffn)


def map_glm4_moe(cfg: dict) -> dict:
    """GLM-4.5 / 4.6 (models/glm4_moe/modeling_glm4_moe.py): GQA whose head_dim is the config's or
    hidden_size // num_attention_heads (Glm4MoeAttention), biases on q, k, v only (o_proj never), optional per-head
    q/k RMSNorm (use_qk_norm); DeepseekV3-style MoE (fp32 router) from layer first_k_dense_replace on. Its
    num_nextn_predict_layers MTP layers are built only by generate(use_mtp=True) (ModelSpec.mtp_layers). Its
    apply_rotary_pos_emb rotates head_dim · partial_rotary_factor channels (Glm4MoeConfig: 0.5) and returns
    torch.cat([rotated, pass-through]) (rope_concat), its cos / sin tables that wide."""
    cfg = {**GLM4_MOE_DEFAULTS, **cfg}
    f = common_fields(cfg)
    n, h, heads = f["num_hidden_layers"], f["hidden_size"], f["num_attention_heads"]
    f["head_dim"] = f["head_dim"] or h // heads
    if not f["head_dim"]:
        raise ConfigError(f"head_dim: hidden_size // num_attention_heads is 0 ({h} // {heads}); give head_dim")
    bias = get_bool(cfg, "attention_bias", False)
    experts = get_int(cfg, "n_routed_experts", "num_local_experts", hi=B.MAX_EXPERTS)
    f.update(family="deepseek", qkv_bias=bias, o_bias=False, qk_norm=get_bool(cfg, "use_qk_norm", False),
             hidden_act=get_str(cfg, "hidden_act", default="silu"), num_experts=experts,
             num_experts_per_tok=get_int(cfg, "num_experts_per_tok", hi=experts),
             moe_intermediate_size=get_int(cfg, "moe_intermediate_size", hi=B.MAX_FFN),
             num_shared_experts=get_int(cfg, "n_shared_experts", lo=0, hi=B.MAX_SHARED_EXPERTS),
             first_k_dense_layers=min(get_int(cfg, "first_k_dense_replace", lo=0, hi=B.MAX_LAYERS), n),
             mtp_layers=_mtp(cfg), rope_concat=True, rotary_dim=partial_rotary_dim(cfg, f["head_dim"], 0.5))
    return f


def _minimax_index(cfg: dict) -> dict:
    """MiniMax-M3's index fields: flat, or the legacy names of sparse_attention_config (which win, as in
    MiniMaxM3VLTextConfig.__post_init__)."""
    sparse = cfg.get("sparse_attention_config")
    sparse = sparse if isinstance(sparse, dict) else {}
    return {**cfg, **{flat: sparse[legacy] for flat, legacy in MINIMAX_LEGACY_INDEX.items() if legacy in sparse}}


def _minimax_flags(cfg: dict, key: str, legacy: list[int] | None, on: str, off: str, default: str,
                   n: int) -> list[str]:
    types = get_choice_list(cfg, key, (on, off))
    if types is None:
        types = [on if x else off for x in legacy] if legacy is not None else [default] * n
    return _layer_count(key, types, n)


def map_minimax_m3(cfg: dict) -> dict:
    """MiniMax-M3's text model (models/minimax_m3_vl/modeling_minimax_m3_vl.py): GQA with zero-centred fp32 q/k
    RMSNorms of head_dim, the block lightning indexer on "minimax_m3_sparse" layers (layer_types, or
    sparse_attention_config.sparse_attention_freq; none by default); per mlp_layer_types (or moe_layer_freq) a
    MoE block (router, fused experts of intermediate_size, one shared MLP of shared_intermediate_size) or a dense
    MLP of dense_intermediate_size, every MLP a fused gate_up_proj."""
    cfg = _minimax_index({**MINIMAX_DEFAULTS, **cfg})
    f = common_fields(cfg)
    n = f["num_hidden_layers"]
    sparse = cfg.get("sparse_attention_config")
    freq = get_int_list(sparse, "sparse_attention_freq", lo=0, hi=1) if isinstance(sparse, dict) else None
    attn = _minimax_flags(cfg, "layer_types", freq, "minimax_m3_sparse", "full_attention", "full_attention", n)
    moe_freq = get_int_list(cfg, "moe_layer_freq", lo=0, hi=1) if isinstance(cfg.get("moe_layer_freq"), list) else None
    mlp = _minimax_flags(cfg, "mlp_layer_types", moe_freq, "sparse", "dense", "sparse", n)
    experts = get_int(cfg, "num_local_experts", "num_experts", hi=B.MAX_EXPERTS)
    f.update(qk_norm=True, zero_centered_norm=True, fused_gate_up=True, hidden_act="swiglu_oai", rope_concat=True,
             intermediate_size=get_int(cfg, "dense_intermediate_size", hi=B.MAX_FFN), num_experts=experts,
             num_experts_per_tok=get_int(cfg, "num_experts_per_tok", hi=experts),
             moe_intermediate_size=f["intermediate_size"],
             shared_expert_intermediate_size=get_int(cfg, "shared_intermediate_size", hi=B.MAX_FFN),
             ffn_types=tuple("moe" if t == "sparse" else "dense" for t in mlp),
             layer_types=tuple("indexed_attention" if t == "minimax_m3_sparse" else "full_attention" for t in attn))
    if "minimax_m3_sparse" in attn:
        f["indexer"] = IndexerSpec(
            n_heads=get_int(cfg, "index_n_heads", hi=B.MAX_HEADS),
            head_dim=get_int(cfg, "index_head_dim", hi=B.MAX_HEAD_DIM),
            topk=get_int(cfg, "index_topk_blocks", hi=1 << 30), variant="minimax",
            block_size=get_int(cfg, "index_block_size", hi=1 << 20),
            local_blocks=get_int(cfg, "index_local_blocks", lo=0, hi=1 << 20))
    return f


def _v4_layer_types(cfg: dict, n: int) -> tuple[str, ...]:
    """DeepseekV4Config.__post_init__: layer_types as given; else the legacy per-layer compress_ratios (0 / 4 / 128,
    cut to num_hidden_layers: the released list has one more, for the MTP layer); else two HCA layers, then CSA on
    odd and HCA on even indices."""
    given = get_choice_list(cfg, "layer_types", tuple(V4_LAYER_TYPES))
    if given is not None:
        return tuple(V4_LAYER_TYPES[t] for t in _layer_count("layer_types", given, n))
    ratios = get_int_list(cfg, "compress_ratios", lo=0, hi=1 << 20)
    if ratios is not None:
        if len(ratios) < n or set(ratios[:n]) - set(V4_RATIO_TYPES):
            raise ConfigError(f"compress_ratios: needs {n} entries, each 0, 4 or 128 (transformers maps no other)")
        return tuple(V4_RATIO_TYPES[r] for r in ratios[:n])
    return tuple(["heavily_compressed_attention"] * min(n, 2) + [
        "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(max(n - 2, 0))])


def _v4_rotary_factor(cfg: dict, head_dim: int) -> float:
    """DeepseekV4Config.__post_init__: partial_rotary_factor, else qk_rope_head_dim / head_dim, else 64 / 512."""
    factor = cfg.get("partial_rotary_factor")
    if factor is None:
        rope = get_int(cfg, "qk_rope_head_dim", default=None, lo=0, hi=B.MAX_HEAD_DIM)
        factor = rope / head_dim if rope is not None else 64 / 512
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 <= factor <= 1:
        raise ConfigError(f"partial_rotary_factor: must be a number in [0, 1], got {factor!r}")
    return factor


def map_deepseek_v4(cfg: dict) -> dict:
    """DeepSeek-V4 (models/deepseek_v4/modeling_deepseek_v4.py): every layer DeepseekV4Attention (one shared K = V
    head, q-LoRA, sinks, grouped low-rank output) with a CSA or HCA compressor or none per layer_types
    (architectures/compressed.py); attn_hc and ffn_hc hyper-connections of hc_mult streams in every layer and the
    model's hc_head (ModelSpec.hc_mult); every layer DeepseekV4SparseMoeBlock: a router weight (E, h) whether
    hash-routed (tid2eid, a buffer) or top-k (e_score_correction_bias, a buffer), fused experts of
    moe_intermediate_size and ONE shared DeepseekV4MLP of that width (n_shared_experts is not read: the class's
    intermediate_size maps to moe_intermediate_size). The MTP layers are not built."""
    cfg = {**V4_DEFAULTS, **cfg}
    f = common_fields({**cfg, "intermediate_size": cfg.get("moe_intermediate_size")})
    n, a, d = f["num_hidden_layers"], f["num_attention_heads"], f["head_dim"]
    if d is None:  # DeepseekV4Config is a strict dataclass: head_dim: int = 512, so null fails to load
        raise ConfigError("head_dim: DeepSeek-V4 needs a whole number here (DeepseekV4Config: 512 by default; "
                          "null is refused by its strict type check): give the checkpoint's head_dim or leave it out")
    rates = cfg.get("compress_rates") if isinstance(cfg.get("compress_rates"), dict) else {}
    rates = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128, **rates}
    groups = get_int(cfg, "o_groups", hi=B.MAX_HEADS)
    if (a * d) % groups:
        raise ConfigError(f"o_groups: heads × head_dim ({a * d}) must split into {groups} equal groups")
    spec = CompressedSpec(
        q_lora_rank=get_int(cfg, "q_lora_rank", hi=B.MAX_HIDDEN), o_groups=groups,
        o_lora_rank=get_int(cfg, "o_lora_rank", hi=B.MAX_HIDDEN), window=get_int(cfg, "sliding_window", hi=1 << 30),
        csa_rate=get_int({**rates, **cfg}, "compress_rate_csa", "compressed_sparse_attention", hi=1 << 20),
        hca_rate=get_int({**rates, **cfg}, "compress_rate_hca", "heavily_compressed_attention", hi=1 << 20),
        index_n_heads=get_int(cfg, "index_n_heads", hi=B.MAX_HEADS),
        index_head_dim=get_int(cfg, "index_head_dim", hi=B.MAX_HEAD_DIM),
        index_topk=get_int(cfg, "index_topk", hi=1 << 30), rope_dim=int(d * _v4_rotary_factor(cfg, d)),
        sinkhorn_iters=get_int(cfg, "hc_sinkhorn_iters", default=20, lo=0, hi=1 << 10))
    experts = get_int(cfg, "n_routed_experts", "num_local_experts", hi=B.MAX_EXPERTS)
    f.update(family="deepseek", num_key_value_heads=1, layer_types=_v4_layer_types(cfg, n), compressed=spec,
             hc_mult=get_int(cfg, "hc_mult", hi=64),
             mlp_bias=get_bool(cfg, "mlp_bias", False), hidden_act=get_str(cfg, "hidden_act", default="silu"),
             num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", hi=experts),
             moe_intermediate_size=f["intermediate_size"], num_shared_experts=1,
             shared_expert_intermediate_size=f["intermediate_size"], mtp_layers=_mtp(cfg))
    return f


def _refuse(model_type: str, lacks: str):
    def refuse(cfg: dict) -> dict:
        raise ConfigError(f"model_type: {model_type!r} cannot be described exactly yet: the calculator has no "
                          f"{lacks}")
    refuse.__doc__ = f"{model_type}: refused (the engine has no {lacks})."
    return refuse


# AXK1Config (models/axk1/configuration_axk1.py): the defaults of the fields a config.json may leave out
AXK1_DEFAULTS = dict(vocab_size=163840, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
                     num_hidden_layers=61, num_attention_heads=64, n_shared_experts=1, n_routed_experts=192,
                     kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128,
                     n_group=8, topk_group=4, num_experts_per_tok=8)


def _axk1_mlp_types(cfg: dict, n: int) -> list[str]:
    """AXK1Config.__post_init__'s default mlp_layer_types, from the legacy first_k_dense_replace (1) and
    moe_layer_freq (1): layer i is sparse when i >= first_k_dense_replace and i % moe_layer_freq == 0."""
    first = get_int(cfg, "first_k_dense_replace", default=1, lo=0, hi=B.MAX_LAYERS)
    freq = get_int(cfg, "moe_layer_freq", default=1, lo=1, hi=B.MAX_LAYERS)
    return ["sparse" if i >= first and i % freq == 0 else "dense" for i in range(n)]


def map_axk1(cfg: dict) -> dict:
    """A.X-K1 (models/axk1/modeling_axk1.py AXK1DecoderLayer, AXK1Attention, AXK1MoE): DeepSeek-V3's layer
    (deepseek_v3: MLA, a grouped sigmoid router with an e_score_correction_bias buffer, fused experts of
    moe_intermediate_size and n_shared_experts shared ones) with three differences: AXK1Attention always builds the
    q-LoRA path (q_a_proj, q_a_layernorm, q_b_proj; q_lora_rank may not be null); each layer's MLP is read from
    mlp_layer_types ("sparse" or "dense", as Glm4MoeLiteDecoderLayer does; first_k_dense_replace is only the
    legacy default); and AXK1MoE ends in one more RMSNorm of hidden_size, post_mlp_layernorm, on the sum of the
    routed and shared experts (one weight per MoE layer: VariantSpec.moe_tensors; its saved fp32 input, normalised
    copy and rsqrt, 4·T·h + e·T·h + 4·T per MoE layer: VariantSpec.moe_post_norm). Its router is DeepSeek-V3's:
    fp32 copies of its input and weight, renormalised per norm_topk_prob. No MTP layers (AXK1Config has none)."""
    cfg = {**AXK1_DEFAULTS, **cfg}
    f = mla_fields(cfg, need_q_lora=False)
    if f["q_lora_rank"] is None:
        raise ConfigError("q_lora_rank: A.X-K1 always builds the q-LoRA path (AXK1Attention: q_a_proj, "
                          "q_a_layernorm, q_b_proj); give q_lora_rank")
    n = f["num_hidden_layers"]
    ffn = mlp_types(cfg, n, _axk1_mlp_types(cfg, n))
    f["ffn_types"] = ffn
    f = moe_fields(cfg, f, ffn)
    if "moe" in ffn:
        f.update(router_group_fields(cfg, f["num_experts"]))
        f["variant"] = VariantSpec(moe_tensors=((f["hidden_size"],),), moe_post_norm=True, router_fp32_input=True,
                                   router_fp32_weight_copy=True, router_renorm=get_bool(cfg, "norm_topk_prob", True))
    return f


DSA_REFUSED = {
    "hy_v4": "hyper-connections of HY-V4's kind (models/hy_v4/modeling_hy_v4.py HYV4HyperConnection: 2 × hc_mult "
             "mixes and no comb matrix; ModelSpec.hc_mult is DeepSeek-V4's mHC), nor MLA with a per-head sigmoid "
             "output gate and attention sinks",
    "axk2": "MLA whose fused q + gate projection reads the q latent beside its un-normalised input (2 × q_lora_rank "
            "wide), nor low-rank gated RMSNorms (gated_norm_rank; models/axk2/modeling_axk2.py)",
    "dots3_note_text": "per-layer attention shapes (per_layer_config: sliding-window MLA layers with their own heads "
                       "and latent ranks), RoPE-only key norms or per-head output gates on MLA "
                       "(models/dots3_note/modeling_dots3_note.py)",
}

DSA_MAPPERS: dict = {
    "deepseek_v32": map_deepseek_v32, "glm_moe_dsa": map_glm_moe_dsa, "glm4_moe": map_glm4_moe,
    "glm4_moe_lite": map_glm4_moe_lite, "minimax_m3_vl_text": map_minimax_m3, "deepseek_v4": map_deepseek_v4,
    "axk1": map_axk1,
    **{t: _refuse(t, lacks) for t, lacks in DSA_REFUSED.items()},
}
