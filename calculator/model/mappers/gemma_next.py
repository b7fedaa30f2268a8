"""Gemma 3n and Gemma 4 text decoders: `gemma3n_text`, `gemma4_text`, `gemma4_unified_text` (and the text_config of
the `gemma3n`, `gemma4`, `gemma4_unified` wrappers, calculator.model.hf_config), read with the defaults of transformers
5.23's Gemma3nTextConfig (models/gemma3n/configuration_gemma3n.py), Gemma4TextConfig (models/gemma4/
configuration_gemma4.py) and Gemma4UnifiedTextConfig (models/gemma4_unified/configuration_gemma4_unified.py).

The decoder is described by a ModelSpec whose layers are each their own kind (calculator.model.architectures.
gemma_next: KV sharing, per-layer head dims and MLP widths, PLE, AltUp, LAuReL, Gemma-4's MoE block beside the dense
MLP); the PLE table and projection and AltUp's projections are tensors outside the layers (VariantSpec.outer_tensors).
Parameters, the generate() cache and the saved activations equal transformers' on the CPU
(tests/model/mappers/test_gemma_next.py).
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.architectures.gemma_next import GemmaNextSpec, kv_sharing_modes, outer_tensors
from calculator.model.config_read import ConfigError, get_bool, get_float, get_int, get_str, layer_types
from calculator.model.variants import VariantSpec

_COMMON = {"num_attention_heads": 8, "head_dim": 256, "tie_word_embeddings": True, "attention_bias": False,
           "hidden_activation": "gelu_pytorch_tanh", "vocab_size_per_layer_input": 262_144,
           "hidden_size_per_layer_input": 256, "sliding_window": 512}
# the configuration classes' defaults (transformers 5.23)
DEFAULTS = {
    "gemma3n_text": {**_COMMON, "vocab_size": 262_400, "hidden_size": 2048, "intermediate_size": 16_384,
                     "num_hidden_layers": 35, "num_key_value_heads": 2, "max_position_embeddings": 32_768,
                     "final_logit_softcapping": 30.0, "altup_num_inputs": 4, "num_kv_shared_layers": 15,
                     "laurel_rank": 64},
    "gemma4_text": {**_COMMON, "vocab_size": 262_144, "hidden_size": 2304, "intermediate_size": 9216,
                    "num_hidden_layers": 30, "num_key_value_heads": 4, "max_position_embeddings": 131_072,
                    "num_kv_shared_layers": 0, "global_head_dim": 512},
}
DEFAULTS["gemma4_unified_text"] = {**DEFAULTS["gemma4_text"], "max_position_embeddings": 262_144,
                                   "sliding_window": 1024, "use_bidirectional_attention": "vision"}


def _layer_types(cfg: dict, n: int, gemma4: bool) -> list[str]:
    """layer_types, or the classes' pattern: Gemma-3n full attention every 5th layer, Gemma 4 every 6th; Gemma 4
    forces its last layer to full attention (Gemma4TextConfig.__post_init__)."""
    types = layer_types(cfg, n)
    if types is None:
        every = 6 if gemma4 else 5
        types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(n)]
    types = list(types)
    if gemma4:
        types[-1] = "full_attention"
    return types


def _per_layer_list(cfg: dict, key: str, n: int, default, kind: type) -> list:
    """A field given as one value for every layer or a list of one per layer (Gemma-3n intermediate_size,
    activation_sparsity_pattern)."""
    value = cfg.get(key, default)
    values = value if isinstance(value, list) else [value] * n
    if len(values) != n:
        raise ConfigError(f"{key}: has {len(values)} entries but num_hidden_layers is {n}")
    if kind is int and not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= B.MAX_FFN for v in values):
        raise ConfigError(f"{key}: every entry must be a whole number from 1 to {B.MAX_FFN}")
    if kind is float and not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1
                                 for v in values):
        raise ConfigError(f"{key}: every entry must be a number from 0 to below 1")
    return values


def _gemma4_dims(cfg: dict, types: list[str], d: int, kv: int) -> tuple[list[int], list[int]]:
    """(head_dim, KV heads) per layer (Gemma4TextConfig.__post_init__): full-attention layers use global_head_dim
    and, only with attention_k_eq_v, num_global_key_value_heads; a config transformers 5.x wrote instead lists
    them in per_layer_config ({"05": {"head_dim": 512, ...}}), which wins when present."""
    n = len(types)
    plc = cfg.get("per_layer_config")
    if isinstance(plc, dict):
        over: dict[int, dict] = {}
        for key, value in plc.items():
            try:
                i = int(key)
            except (TypeError, ValueError):
                raise ConfigError(f"per_layer_config: key {str(key)[:20]!r} is not a layer index") from None
            if not (0 <= i < n and isinstance(value, dict)):
                raise ConfigError(f"per_layer_config: entry {i} is not an object for a layer below {n}")
            over[i] = value
        dims = [get_int(over.get(i, {}), "head_dim", default=d, hi=B.MAX_HEAD_DIM) for i in range(n)]
        kvs = [get_int(over.get(i, {}), "num_key_value_heads", default=kv, hi=B.MAX_HEADS) for i in range(n)]
        return dims, kvs
    gd = get_int(cfg, "global_head_dim", default=512, hi=B.MAX_HEAD_DIM)
    gkv = get_int(cfg, "num_global_key_value_heads", default=None, hi=B.MAX_HEADS) \
        if get_bool(cfg, "attention_k_eq_v", False) else None
    full = [t == "full_attention" for t in types]
    return [gd if f else d for f in full], [(gkv or kv) if f else kv for f in full]


def map_gemma_next(cfg: dict) -> dict:
    """ModelSpec fields of a Gemma 3n / Gemma 4 text decoder (Gemma3nTextModel, Gemma4TextModel; lm_head tied by
    default). Vision and audio towers of the wrappers are not part of it."""
    model_type = get_str(cfg, "model_type")
    cfg = {**DEFAULTS[model_type], **cfg}  # absent fields take the class's default; null ones mean null
    gemma4, unified = model_type != "gemma3n_text", model_type == "gemma4_unified_text"
    n = get_int(cfg, "num_hidden_layers", hi=B.MAX_LAYERS)
    h = get_int(cfg, "hidden_size", hi=B.MAX_HIDDEN)
    a = get_int(cfg, "num_attention_heads", hi=B.MAX_HEADS)
    kv = get_int(cfg, "num_key_value_heads", hi=B.MAX_HEADS)
    d = get_int(cfg, "head_dim", hi=B.MAX_HEAD_DIM)
    window = get_int(cfg, "sliding_window", hi=B.MAX_WINDOW)
    if gemma4 and cfg.get("use_bidirectional_attention") == "all":
        window = window // 2 + 1  # Gemma4TextConfig.__post_init__: "due to fa we set exclusive bounds"
    types = _layer_types(cfg, n, gemma4)
    try:
        modes = kv_sharing_modes(types, get_int(cfg, "num_kv_shared_layers", lo=0, hi=n - 1))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    p = 0 if unified else get_int(cfg, "hidden_size_per_layer_input", default=0, lo=0, hi=B.MAX_HIDDEN)  # 0/null: no PLE
    vp = get_int(cfg, "vocab_size_per_layer_input", hi=B.MAX_VOCAB) if p else 0
    f_base = _per_layer_list(cfg, "intermediate_size", n, None, int)
    if gemma4:
        dims, kvs = _gemma4_dims(cfg, types, d, kv)
        k_eq_v = [get_bool(cfg, "attention_k_eq_v", False) and t == "full_attention" for t in types]
        double = get_bool(cfg, "use_double_wide_mlp", False)
        fs = [f * (2 if double and mode == "reuse" else 1) for f, mode in zip(f_base, modes)]
        sparse, altup, laurel = [False] * n, 0, 0
    else:
        dims, kvs, k_eq_v, fs = [d] * n, [kv] * n, [False] * n, f_base
        pattern = cfg.get("activation_sparsity_pattern")
        if pattern is None:
            pattern = [0.95] * 10 + [0.0] * (n - 10) if n > 10 else [0.0] * n
        sparse = [x > 0 for x in _per_layer_list({"activation_sparsity_pattern": pattern},
                                                 "activation_sparsity_pattern", n, None, float)]
        altup = get_int(cfg, "altup_num_inputs", hi=64)
        laurel = get_int(cfg, "laurel_rank", hi=B.MAX_HIDDEN)
    if any(a % k for k in kvs):
        raise ConfigError(f"num_key_value_heads: every layer's KV heads must divide num_attention_heads ({a})")
    moe = gemma4 and not unified and get_bool(cfg, "enable_moe_block", False)
    fields = dict(family="gemma", hidden_size=h, num_hidden_layers=n, num_attention_heads=a, num_key_value_heads=kv,
                  head_dim=d, intermediate_size=max(fs), vocab_size=get_int(cfg, "vocab_size", hi=B.MAX_VOCAB),
                  tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
                  hidden_act=get_str(cfg, "hidden_activation", "hidden_act"), norms_per_layer=4, qk_norm=True,
                  qkv_bias=get_bool(cfg, "attention_bias", False), o_bias=get_bool(cfg, "attention_bias", False),
                  sliding_window=window, layer_types=tuple(types),
                  final_logit_softcapping=get_float(cfg, "final_logit_softcapping", None, 1e-6, 1e9),
                  max_position_embeddings=get_int(cfg, "max_position_embeddings", hi=1 << 40))
    if moe:
        experts = get_int(cfg, "num_experts", hi=B.MAX_EXPERTS)
        fields.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "top_k_experts", hi=experts),
                      moe_intermediate_size=get_int(cfg, "moe_intermediate_size", hi=B.MAX_FFN))
    outer = outer_tensors(h, n, p, vp, altup)
    fields["variant"] = VariantSpec(outer_tensors=outer) if outer else None
    fields["gemma_next"] = GemmaNextSpec(
        generation="4" if gemma4 else "3n", kv_modes=tuple(modes), head_dims=tuple(dims), kv_heads=tuple(kvs),
        k_eq_v=tuple(k_eq_v), intermediate_sizes=tuple(fs), sparse=tuple(sparse), ple_size=p, ple_vocab=vp,
        altup_inputs=altup, laurel_rank=laurel, moe_block=moe)
    shared = modes.count("reuse")
    fields["_warnings"] = [f"{model_type}: the text decoder only" + (
        f"; {shared} of {n} layers reuse an earlier layer's keys and values (no cache of their own)" if shared else "")]
    return fields


GEMMA_NEXT_MAPPERS = {t: map_gemma_next for t in DEFAULTS}
# the wrappers whose text_config is one of these decoders (calculator.model.hf_config.TEXT_MODEL_TYPES)
GEMMA_NEXT_TEXT_TYPES = {"gemma3n": "gemma3n_text", "gemma4": "gemma4_text", "gemma4_unified": "gemma4_unified_text"}
