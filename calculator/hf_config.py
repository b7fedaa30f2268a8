"""Map a raw Hugging Face `config.json` (a dict) to the engine's `ModelSpec`.

Each supported `model_type` is read with the defaults its `transformers` configuration class uses, so a
config that omits a field means what it means in `transformers`. An unknown `model_type` falls back to the
generic Llama-like fields with a warning naming the fields that were used.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from calculator.dtypes import normalize_dtype
from calculator.model import ModelSpec


class ConfigError(ValueError):
    """A config.json that cannot describe a model; the message says which field to fix."""


@dataclass(frozen=True)
class Quantization:
    """Weight quantization declared by a checkpoint's `quantization_config`."""

    method: str
    bits: int
    group_size: int | None


@dataclass(frozen=True)
class MappedConfig:
    spec: ModelSpec
    warnings: tuple[str, ...] = ()
    checkpoint_dtype: str | None = None  # from torch_dtype / dtype
    quantization: Quantization | None = None
    raw: dict = field(default_factory=dict, compare=False, repr=False)


SUPPORTED_MODEL_TYPES = (
    "llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mixtral", "gemma", "gemma2", "gemma3",
    "gemma3_text", "phi3", "gpt2", "gpt_neox", "deepseek_v2", "deepseek_v3", "gpt_oss", "olmo2", "granite",
    "llama4", "llama4_text",
)

# The text model type inside a multimodal config whose text_config omits its own model_type.
TEXT_MODEL_TYPES = {"gemma3": "gemma3_text", "llama4": "llama4_text"}

# Defaults of transformers' Gemma3TextConfig (models/gemma3/configuration_gemma3.py). The Hub's multimodal
# Gemma-3 configs (4B, 12B, 27B) leave these out of text_config and rely on them.
GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "tie_word_embeddings": True, "attention_bias": False, "sliding_window": 4096,
}

# Defaults of transformers' Llama4TextConfig (models/llama4/configuration_llama4.py).
LLAMA4_TEXT_DEFAULTS = {
    "vocab_size": 202_048, "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
    "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
    "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "attention_chunk_size": 8192,
    "no_rope_layer_interval": 4, "tie_word_embeddings": False, "attention_bias": False,
}

# Fields read for an unsupported model_type (reported in the warning).
GENERIC_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                  "intermediate_size", "vocab_size", "tie_word_embeddings")


def _get(cfg: dict, key: str, default: Any = None, *aliases: str) -> Any:
    for k in (key, *aliases):
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def _require(cfg: dict, key: str, *aliases: str) -> Any:
    value = _get(cfg, key, None, *aliases)
    if value is None:
        raise ConfigError(f"config.json has no {key!r} field (model_type {cfg.get('model_type')!r}); add it")
    return value


def _common(cfg: dict) -> dict:
    """The Llama-style fields nearly every decoder config shares."""
    return dict(
        hidden_size=_require(cfg, "hidden_size"),
        num_hidden_layers=_require(cfg, "num_hidden_layers"),
        num_attention_heads=_require(cfg, "num_attention_heads"),
        num_key_value_heads=_get(cfg, "num_key_value_heads"),
        head_dim=_get(cfg, "head_dim"),
        intermediate_size=_require(cfg, "intermediate_size"),
        vocab_size=_require(cfg, "vocab_size"),
        tie_word_embeddings=bool(_get(cfg, "tie_word_embeddings", False)),
    )


def _layer_types(cfg: dict, n_layers: int) -> tuple | None:
    types = cfg.get("layer_types")
    if types is None:
        return None
    if len(types) != n_layers:
        raise ConfigError(f"layer_types has {len(types)} entries but num_hidden_layers is {n_layers}")
    return tuple("sliding_attention" if t == "sliding_attention" else "full_attention" for t in types)


def _sliding(cfg: dict, fields: dict, default_on: bool = True) -> None:
    """Sliding window: a window applies to every layer unless layer_types says which (Qwen2: use_sliding_window)."""
    window = cfg.get("sliding_window")
    types = _layer_types(cfg, fields["num_hidden_layers"])
    if types is not None:
        fields["layer_types"] = types if window else None
        fields["sliding_window"] = window if window and "sliding_attention" in types else None
    elif window and default_on:
        fields["sliding_window"] = window


def _llama_like(cfg: dict) -> dict:
    f = _common(cfg)
    f.update(qkv_bias=bool(cfg.get("attention_bias", False)), o_bias=bool(cfg.get("attention_bias", False)),
             mlp_bias=bool(cfg.get("mlp_bias", False)), hidden_act=cfg.get("hidden_act", "silu"))
    return f


def _map_llama(cfg: dict) -> dict:
    f = _llama_like(cfg)
    _sliding(cfg, f)
    return f


def _map_qwen2(cfg: dict) -> dict:
    f = _common(cfg)
    f.update(qkv_bias=True, hidden_act=cfg.get("hidden_act", "silu"))
    _sliding(cfg, f, default_on=bool(cfg.get("use_sliding_window", False)))
    return f


def _map_qwen3(cfg: dict) -> dict:
    f = _common(cfg)
    bias = bool(cfg.get("attention_bias", False))
    f.update(qkv_bias=bias, o_bias=bias, qk_norm=True, head_dim=_get(cfg, "head_dim", 128),
             hidden_act=cfg.get("hidden_act", "silu"))
    _sliding(cfg, f, default_on=bool(cfg.get("use_sliding_window", False)))
    return f


def _qwen_moe_dense_layers(cfg: dict, n_layers: int) -> tuple[int, ...]:
    step = cfg.get("decoder_sparse_step", 1) or 1
    only = set(cfg.get("mlp_only_layers") or [])
    return tuple(i for i in range(n_layers) if i in only or (i + 1) % step != 0)


def _map_qwen2_moe(cfg: dict) -> dict:
    f = _map_qwen2(cfg)
    f.update(num_experts=_require(cfg, "num_experts"), num_experts_per_tok=_require(cfg, "num_experts_per_tok"),
             moe_intermediate_size=_require(cfg, "moe_intermediate_size"),
             shared_expert_intermediate_size=_get(cfg, "shared_expert_intermediate_size"),
             shared_expert_gate=bool(cfg.get("shared_expert_intermediate_size")),
             dense_layer_indices=_qwen_moe_dense_layers(cfg, f["num_hidden_layers"]))
    return f


def _map_qwen3_moe(cfg: dict) -> dict:
    f = _map_qwen3(cfg)
    f.update(num_experts=_require(cfg, "num_experts"), num_experts_per_tok=_require(cfg, "num_experts_per_tok"),
             moe_intermediate_size=_require(cfg, "moe_intermediate_size"),
             dense_layer_indices=_qwen_moe_dense_layers(cfg, f["num_hidden_layers"]))
    return f


def _map_mixtral(cfg: dict) -> dict:
    f = _common(cfg)
    f.update(num_experts=_require(cfg, "num_local_experts"), num_experts_per_tok=_require(cfg, "num_experts_per_tok"),
             hidden_act=cfg.get("hidden_act", "silu"))
    _sliding(cfg, f)
    return f


def _map_gemma(cfg: dict) -> dict:
    f = _common(cfg)
    f.update(family="gemma", head_dim=_get(cfg, "head_dim", 256), tie_word_embeddings=bool(
        _get(cfg, "tie_word_embeddings", True)), hidden_act=_get(cfg, "hidden_activation", "gelu_pytorch_tanh",
                                                                 "hidden_act"))
    bias = bool(cfg.get("attention_bias", False))
    f.update(qkv_bias=bias, o_bias=bias)
    return f


def _map_gemma2(cfg: dict) -> dict:
    f = _map_gemma(cfg)
    f.update(norms_per_layer=4, attn_logit_softcapping=cfg.get("attn_logit_softcapping"),
             final_logit_softcapping=cfg.get("final_logit_softcapping"))
    n = f["num_hidden_layers"]
    if cfg.get("layer_types") is None and cfg.get("sliding_window"):
        # Gemma-2 alternates sliding (even layers) and global attention.
        cfg = {**cfg, "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]}
    _sliding(cfg, f)
    return f


def _with_defaults(cfg: dict, defaults: dict) -> dict:
    """The config with its transformers class defaults filled in where a field is absent."""
    return {**defaults, **cfg}


def _map_gemma3(cfg: dict) -> dict:
    cfg = _with_defaults(cfg, GEMMA3_TEXT_DEFAULTS)
    f = _map_gemma2(cfg)
    f.update(qk_norm=True, attn_logit_softcapping=None, final_logit_softcapping=None)
    n = f["num_hidden_layers"]
    if cfg.get("layer_types") is None and cfg.get("sliding_window"):
        pattern = cfg.get("sliding_window_pattern", 6)
        types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]
        f["layer_types"], f["sliding_window"] = tuple(types), cfg["sliding_window"]
    return f


def _map_phi3(cfg: dict) -> dict:
    f = _common(cfg)
    f.update(family="phi3", fused_qkv=True, fused_gate_up=True, hidden_act=cfg.get("hidden_act", "silu"))
    _sliding(cfg, f)
    return f


def _map_gpt2(cfg: dict) -> dict:
    h = _require(cfg, "n_embd", "hidden_size")
    return dict(family="gpt2", hidden_size=h, num_hidden_layers=_require(cfg, "n_layer", "num_hidden_layers"),
                num_attention_heads=_require(cfg, "n_head", "num_attention_heads"),
                intermediate_size=_get(cfg, "n_inner", 4 * h) or 4 * h, vocab_size=_require(cfg, "vocab_size"),
                tie_word_embeddings=bool(_get(cfg, "tie_word_embeddings", True)), gated_mlp=False,
                hidden_act=cfg.get("activation_function", "gelu_new"), norm_type="layernorm", qkv_bias=True,
                o_bias=True, mlp_bias=True, fused_qkv=True,
                learned_position_embeddings=_get(cfg, "n_positions", 1024, "max_position_embeddings"),
                dropout=float(_get(cfg, "resid_pdrop", 0.1)))


def _map_gpt_neox(cfg: dict) -> dict:
    f = _common(cfg)
    bias = bool(cfg.get("attention_bias", True))
    f.update(family="gpt_neox", gated_mlp=False, hidden_act=cfg.get("hidden_act", "gelu"), norm_type="layernorm",
             qkv_bias=bias, o_bias=bias, mlp_bias=True, fused_qkv=True,
             parallel_residual=bool(cfg.get("use_parallel_residual", True)),
             tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)))
    return f


def _map_deepseek(cfg: dict) -> dict:
    f = _common(cfg)
    bias = bool(cfg.get("attention_bias", False))
    f.update(family="deepseek", q_lora_rank=cfg.get("q_lora_rank"), kv_lora_rank=_require(cfg, "kv_lora_rank"),
             qk_rope_head_dim=_require(cfg, "qk_rope_head_dim"), qk_nope_head_dim=_require(cfg, "qk_nope_head_dim"),
             v_head_dim=_require(cfg, "v_head_dim"), qkv_bias=bias, o_bias=bias, head_dim=None,
             hidden_act=cfg.get("hidden_act", "silu"))
    experts = cfg.get("n_routed_experts")
    if experts:
        f.update(num_experts=experts, num_experts_per_tok=_require(cfg, "num_experts_per_tok"),
                 moe_intermediate_size=_require(cfg, "moe_intermediate_size"),
                 num_shared_experts=cfg.get("n_shared_experts") or 0,
                 first_k_dense_layers=cfg.get("first_k_dense_replace", 0) or 0)
    return f


def _map_gpt_oss(cfg: dict) -> dict:
    f = _common(cfg)
    f.update(family="gpt_oss", head_dim=_get(cfg, "head_dim", 64), qkv_bias=True, o_bias=True,
             attention_sinks=True, num_experts=_require(cfg, "num_local_experts"),
             num_experts_per_tok=_require(cfg, "num_experts_per_tok", "experts_per_token"), router_bias=True,
             expert_bias=True, hidden_act="swiglu_oai")
    _sliding(cfg, f)
    return f


def _map_olmo2(cfg: dict) -> dict:
    f = _llama_like(cfg)
    f.update(qk_norm=True)
    return f


def _map_llama4(cfg: dict) -> dict:
    """Llama-4 text model (transformers models/llama4/modeling_llama4.py, Llama4TextDecoderLayer).

    Layers listed in `moe_layers` (default: every `interleave_moe_layer_step`-th) hold `num_local_experts` fused
    routed experts and one shared expert, all of width `intermediate_size`, behind a bias-free router; the other
    layers a dense MLP of width `intermediate_size_mlp`. Its q/k norm is a weightless L2 norm (no parameters).
    Layers whose `no_rope_layers` entry is 1 use chunked attention (layer_types "chunked_attention"): a token sees
    only its own chunk of `attention_chunk_size` tokens, so their K/V cache is bounded like a sliding window of
    that size, which is how they are mapped (with a warning).
    """
    cfg = _with_defaults(cfg, LLAMA4_TEXT_DEFAULTS)
    f = _llama_like(cfg)
    n = f["num_hidden_layers"]
    step = cfg["interleave_moe_layer_step"] or 1
    moe_layers = cfg.get("moe_layers")
    if moe_layers is None:
        moe_layers = list(range(step - 1, n, step))
    moe = set(moe_layers)
    f.update(num_experts=cfg["num_local_experts"], num_experts_per_tok=cfg["num_experts_per_tok"],
             moe_intermediate_size=cfg["intermediate_size"], intermediate_size=cfg["intermediate_size_mlp"],
             num_shared_experts=1, dense_layer_indices=tuple(i for i in range(n) if i not in moe))
    types = cfg.get("layer_types")
    if types is None:
        interval = cfg["no_rope_layer_interval"]
        no_rope = cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
        types = ["chunked_attention" if r else "full_attention" for r in no_rope]
    if len(types) != n:
        raise ConfigError(f"layer_types/no_rope_layers has {len(types)} entries but num_hidden_layers is {n}")
    chunk = cfg.get("attention_chunk_size")
    if chunk and "chunked_attention" in types:
        f["layer_types"] = tuple("sliding_attention" if t == "chunked_attention" else "full_attention" for t in types)
        f["sliding_window"] = chunk
        f["_warnings"] = [f"Llama-4 chunked-attention layers ({types.count('chunked_attention')} of {n}) are "
                          f"treated as sliding-window layers of attention_chunk_size={chunk} tokens (same K/V "
                          f"cache bound; attention within a chunk)"]
    return f


MAPPERS = {
    "llama": _map_llama, "mistral": _map_llama, "granite": _map_llama, "qwen2": _map_qwen2, "qwen3": _map_qwen3,
    "qwen2_moe": _map_qwen2_moe, "qwen3_moe": _map_qwen3_moe, "mixtral": _map_mixtral, "gemma": _map_gemma,
    "gemma2": _map_gemma2, "gemma3": _map_gemma3, "gemma3_text": _map_gemma3, "phi3": _map_phi3, "gpt2": _map_gpt2,
    "gpt_neox": _map_gpt_neox, "deepseek_v2": _map_deepseek, "deepseek_v3": _map_deepseek, "gpt_oss": _map_gpt_oss,
    "olmo2": _map_olmo2, "llama4": _map_llama4, "llama4_text": _map_llama4,
}


def _quantization(cfg: dict) -> Quantization | None:
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method", "unknown"))
    bits = q.get("bits") or q.get("w_bit")
    if bits is None and q.get("load_in_4bit"):
        bits = 4
    if bits is None and q.get("load_in_8bit"):
        bits = 8
    if bits is None and method in ("fp8", "fbgemm_fp8"):
        bits = 8
    if bits is None and method == "mxfp4":
        bits = 4
    group = q.get("group_size") or q.get("q_group_size") or (32 if method == "mxfp4" else None)
    if method == "bitsandbytes" and bits == 4:
        group = q.get("bnb_4bit_blocksize", 64)
    return Quantization(method, int(bits or 16), int(group) if group and group > 0 else None)


def spec_from_hf_config(cfg: Any, name: str | None = None) -> MappedConfig:
    """Build a ModelSpec from a Hugging Face config.json dict; raise ConfigError with a clear message if it can't."""
    if not isinstance(cfg, dict):
        raise ConfigError("config.json must be a JSON object (a dict of fields)")
    raw = cfg
    warnings: list[str] = []
    if "text_config" in cfg and "hidden_size" not in cfg and isinstance(cfg["text_config"], dict):
        warnings.append(f"multimodal {cfg.get('model_type')!r} config: using its text_config (vision tower ignored)")
        outer = cfg
        cfg = dict(cfg["text_config"])
        cfg.setdefault("model_type", TEXT_MODEL_TYPES.get(outer.get("model_type"), outer.get("model_type")))
        for k in ("tie_word_embeddings", "torch_dtype", "dtype", "quantization_config", "_name_or_path"):
            if k in outer and k not in cfg:
                cfg[k] = outer[k]
    model_type = cfg.get("model_type")
    if not model_type:
        raise ConfigError("config.json has no 'model_type' field; add one such as \"llama\"")
    mapper = MAPPERS.get(model_type)
    if mapper is None:
        used = [k for k in GENERIC_FIELDS if k in cfg]
        warnings.append(f"model_type {model_type!r} is not specifically supported: read as a Llama-style decoder "
                        f"from the fields {', '.join(used)}; attention/MLP details may differ")
        mapper = _map_llama
    try:
        fields = mapper(cfg)
    except (TypeError, KeyError) as exc:
        raise ConfigError(f"config.json field has the wrong type: {exc}") from None
    warnings.extend(fields.pop("_warnings", ()))
    fields["model_type"] = model_type
    fields["name"] = name or cfg.get("_name_or_path") or model_type
    fields.setdefault("max_position_embeddings", _get(cfg, "max_position_embeddings", None, "n_positions"))
    try:
        spec = ModelSpec(**{k: v for k, v in fields.items() if v is not None or k in ("layer_types",)})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "config"
        raise ConfigError(f"config.json is not a valid model: {where}: {err['msg']}") from None
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    try:
        checkpoint_dtype = normalize_dtype(dtype) if dtype else None
    except ValueError:
        checkpoint_dtype = None
    return MappedConfig(spec, tuple(warnings), checkpoint_dtype, _quantization(cfg), raw)
