"""Map a raw Hugging Face `config.json` (a dict) to the engine's `ModelSpec`.

Each supported `model_type` is read with the defaults its `transformers` configuration class uses, so a
config that omits a field means what it means in `transformers`, under the field names transformers 4.40 to 5.x
write (e.g. Qwen3-MoE's `num_experts`, written `num_local_experts` by transformers 5). Every field the math uses
is read with a strict type and a physical bound (`calculator.model.config_read`); a refusal names the field.

An unknown `model_type` is refused, never mapped as something else: a block layout the engine has not been checked
against could hold different tensors. The message lists the supported types and, for a model whose blocks are
Llama's (RMSNorm, q/k/v/o, SwiGLU), says to set `"model_type": "llama"` and which Llama fields it lacks. New types
go in `calculator.model.mappers`, each checked against the real transformers model (tests)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from calculator.core import bounds as B
from calculator.model.config_read import (LAYER_TYPES, ConfigError, common_fields, context_fields, get_bool,
                                          get_float, get_int, get_int_list, get_str, get_window, layer_types,
                                          llama_like_fields, parse_config_json, partial_rotary_dim,
                                          router_group_fields, served_architecture, sliding_fields)
from calculator.model.checkpoint_quant import checkpoint_weight_fields
from calculator.core.dtypes import normalize_dtype
from calculator.model.mappers.archs import ARCH_MAPPERS, DEEPSEEK_V2_VARIANT, LLAMA4_VARIANT, OLMO2_VARIANT, map_gemma
from calculator.model.mappers.dsa import DSA_MAPPERS, DSA_REFUSED
from calculator.model.mappers.gemma_next import GEMMA_NEXT_MAPPERS
from calculator.model.mappers.hybrid import HYBRID_MAPPERS
from calculator.model.mappers.linear import LINEAR_MAPPERS
from calculator.model.mappers.longcat import LONGCAT_MAPPERS
from calculator.model.mappers.mistral import MISTRAL_MAPPERS
from calculator.model.mappers.remote import REMOTE_MAPPERS
from calculator.model.mappers.ssm import SSM_MAPPERS
from calculator.model.mappers.variants import VARIANT_MAPPERS
from calculator.model.mappers.vlm_text import VLM_REFUSED, VLM_SAME_BLOCKS, VLM_TEXT_MAPPERS
from calculator.model.routers import with_router
from calculator.model.spec import ModelSpec
from calculator.model.text_towers import TEXT_MODEL_TYPES, text_config
from calculator.model.vision import vision_from_config

__all__ = ["ConfigError", "MappedConfig", "Quantization", "parse_config_json", "spec_from_hf_config",
           "SUPPORTED_MODEL_TYPES"]


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


# Defaults of transformers' Gemma3TextConfig (models/gemma3/configuration_gemma3.py). The Hub's multimodal
# Gemma-3 configs (4B, 12B, 27B) leave these out of text_config and rely on them.
GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "tie_word_embeddings": True, "attention_bias": False, "sliding_window": 4096, "max_position_embeddings": 131_072,
}

# Defaults of transformers' Llama4TextConfig (models/llama4/configuration_llama4.py).
LLAMA4_TEXT_DEFAULTS = {
    "vocab_size": 202_048, "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
    "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
    "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "attention_chunk_size": 8192,
    "no_rope_layer_interval": 4, "tie_word_embeddings": False, "attention_bias": False}


def _with_defaults(cfg: dict, defaults: dict) -> dict:
    """The config with its transformers class defaults filled in where a field is absent."""
    return {**defaults, **cfg}


def _map_llama(cfg: dict) -> dict:
    f = llama_like_fields(cfg)
    sliding_fields(cfg, f)
    return f


def _map_qwen2(cfg: dict) -> dict:
    f = common_fields(cfg)
    f.update(qkv_bias=True, hidden_act=get_str(cfg, "hidden_act", default="silu"))
    sliding_fields(cfg, f, default_on=get_bool(cfg, "use_sliding_window", False))
    return f


def _map_qwen3(cfg: dict) -> dict:
    f = common_fields(cfg)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(qkv_bias=bias, o_bias=bias, qk_norm=True, head_dim=get_int(cfg, "head_dim", default=128,
                                                                        hi=B.MAX_HEAD_DIM),
             hidden_act=get_str(cfg, "hidden_act", default="silu"))
    sliding_fields(cfg, f, default_on=get_bool(cfg, "use_sliding_window", False))
    return f


def _qwen_moe_dense_layers(cfg: dict, n_layers: int) -> tuple[int, ...]:
    """Qwen2/3-MoE (transformers modeling_qwen3_moe.py, Qwen3MoeDecoderLayer): layer i has experts unless it is in
    mlp_only_layers or (i + 1) is not a multiple of decoder_sparse_step."""
    step = get_int(cfg, "decoder_sparse_step", default=1, hi=B.MAX_LAYERS)
    only = set(get_int_list(cfg, "mlp_only_layers", lo=0, hi=B.MAX_LAYERS) or [])  # beyond the last: unused
    return tuple(i for i in range(n_layers) if i in only or (i + 1) % step != 0)


def _qwen_experts(cfg: dict, f: dict) -> int:
    """Routed experts of a Qwen-MoE config: num_experts (transformers 4.x) or num_local_experts (5.x to_dict).
    Zero builds dense layers in transformers (`config.num_experts > 0` gates the MoE block)."""
    return get_int(cfg, "num_experts", "num_local_experts", lo=0, hi=B.MAX_EXPERTS)


def _map_qwen2_moe(cfg: dict) -> dict:
    f = _map_qwen2(cfg)
    experts = _qwen_experts(cfg, f)
    if experts:
        shared = get_int(cfg, "shared_expert_intermediate_size", default=None, lo=0, hi=B.MAX_FFN) or None
        f.update(num_experts=experts, num_experts_per_tok=_top_k(cfg, experts),
                 moe_intermediate_size=get_int(cfg, "moe_intermediate_size", hi=B.MAX_FFN),
                 shared_expert_intermediate_size=shared, shared_expert_gate=bool(shared),
                 dense_layer_indices=_qwen_moe_dense_layers(cfg, f["num_hidden_layers"]))
    return f


def _map_qwen3_moe(cfg: dict) -> dict:
    f = _map_qwen3(cfg)
    experts = _qwen_experts(cfg, f)
    if experts:
        f.update(num_experts=experts, num_experts_per_tok=_top_k(cfg, experts),
                 moe_intermediate_size=get_int(cfg, "moe_intermediate_size", hi=B.MAX_FFN),
                 dense_layer_indices=_qwen_moe_dense_layers(cfg, f["num_hidden_layers"]))
    return f


def _top_k(cfg: dict, experts: int, *aliases: str) -> int:
    """Experts per token: at least 1 and at most the routed experts."""
    return get_int(cfg, "num_experts_per_tok", *aliases, hi=experts)


def _moe_experts(cfg: dict, *keys: str) -> int:
    """Routed experts of an always-MoE architecture (Mixtral, GPT-OSS...): zero experts cannot route a token."""
    return get_int(cfg, *keys, lo=1, hi=B.MAX_EXPERTS)


def _map_mixtral(cfg: dict) -> dict:
    f = common_fields(cfg)
    experts = _moe_experts(cfg, "num_local_experts", "num_experts")
    f.update(num_experts=experts, num_experts_per_tok=_top_k(cfg, experts),
             hidden_act=get_str(cfg, "hidden_act", default="silu"))
    sliding_fields(cfg, f)
    return f


def _softcap(cfg: dict, key: str) -> float | None:
    return get_float(cfg, key, None, 1e-6, 1e9)


def _map_gemma2(cfg: dict) -> dict:
    f = map_gemma(cfg)
    f.update(norms_per_layer=4, attn_logit_softcapping=_softcap(cfg, "attn_logit_softcapping"),
             final_logit_softcapping=_softcap(cfg, "final_logit_softcapping"))
    n = f["num_hidden_layers"]
    if cfg.get("layer_types") is None and get_window(cfg):
        # Gemma-2 alternates sliding (even layers) and global attention.
        cfg = {**cfg, "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]}
    sliding_fields(cfg, f)
    return f


def _map_gemma3(cfg: dict) -> dict:
    cfg = _with_defaults(cfg, GEMMA3_TEXT_DEFAULTS)
    f = _map_gemma2(cfg)
    f.update(qk_norm=True, attn_logit_softcapping=None, final_logit_softcapping=None,
             max_position_embeddings=get_int(cfg, "max_position_embeddings", hi=1 << 40))
    n = f["num_hidden_layers"]
    window = get_window(cfg)
    if cfg.get("layer_types") is None and window:
        pattern = get_int(cfg, "sliding_window_pattern", default=6, hi=B.MAX_LAYERS)
        types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]
        f["layer_types"], f["sliding_window"] = tuple(types), window
    return f


def _map_phi3(cfg: dict) -> dict:  # apply_rotary_pos_emb: torch.cat([rotated, pass-through]), even at factor 1.0
    f = common_fields(cfg)
    head_dim = f["head_dim"] or f["hidden_size"] // f["num_attention_heads"]
    f.update(family="phi3", fused_qkv=True, fused_gate_up=True, hidden_act=get_str(cfg, "hidden_act", default="silu"),
             rope_concat=True, rotary_dim=partial_rotary_dim(cfg, head_dim, 1.0))
    sliding_fields(cfg, f)
    return f


def _map_gpt2(cfg: dict) -> dict:
    h = get_int(cfg, "n_embd", "hidden_size", hi=B.MAX_HIDDEN)
    return dict(family="gpt2", hidden_size=h, num_hidden_layers=get_int(cfg, "n_layer", "num_hidden_layers",
                                                                         hi=B.MAX_LAYERS),
                num_attention_heads=get_int(cfg, "n_head", "num_attention_heads", hi=B.MAX_HEADS),
                intermediate_size=get_int(cfg, "n_inner", default=4 * h, hi=B.MAX_FFN),
                vocab_size=get_int(cfg, "vocab_size", hi=B.MAX_VOCAB),
                tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True), gated_mlp=False,
                hidden_act=get_str(cfg, "activation_function", default="gelu_new"), norm_type="layernorm",
                qkv_bias=True, o_bias=True, mlp_bias=True, fused_qkv=True,
                learned_position_embeddings=get_int(cfg, "n_positions", "max_position_embeddings", default=1024,
                                                    hi=B.MAX_POSITIONS),
                dropout=get_float(cfg, "resid_pdrop", 0.1, 0.0, 0.999))


def _map_gpt_neox(cfg: dict) -> dict:
    """GPT-NeoX (transformers models/gpt_neox/modeling_gpt_neox.py): multi-head attention with head size
    hidden_size / num_attention_heads; a num_key_value_heads or head_dim in the file is not read. Its
    apply_rotary_pos_emb returns torch.cat([q_embed, q_pass], dim=-1) for any rotary_pct (rope_concat)."""
    f = common_fields(cfg)
    f.update(num_key_value_heads=None, head_dim=None)
    bias = get_bool(cfg, "attention_bias", True)
    f.update(family="gpt_neox", gated_mlp=False, hidden_act=get_str(cfg, "hidden_act", default="gelu"),
             norm_type="layernorm", qkv_bias=bias, o_bias=bias, mlp_bias=True, fused_qkv=True, rope_concat=True,
             rotary_dim=partial_rotary_dim(cfg, f["hidden_size"] // f["num_attention_heads"], 0.25),
             parallel_residual=get_bool(cfg, "use_parallel_residual", True),
             tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", False))
    return f


def _map_deepseek(cfg: dict) -> dict:
    f = common_fields(cfg)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(family="deepseek", q_lora_rank=get_int(cfg, "q_lora_rank", default=None, hi=B.MAX_HIDDEN),
             kv_lora_rank=get_int(cfg, "kv_lora_rank", hi=B.MAX_HIDDEN),
             qk_rope_head_dim=get_int(cfg, "qk_rope_head_dim", hi=B.MAX_HEAD_DIM),
             qk_nope_head_dim=get_int(cfg, "qk_nope_head_dim", hi=B.MAX_HEAD_DIM),
             v_head_dim=get_int(cfg, "v_head_dim", hi=B.MAX_HEAD_DIM), qkv_bias=bias, o_bias=bias, head_dim=None,
             hidden_act=get_str(cfg, "hidden_act", default="silu"),
             mtp_layers=get_int(cfg, "num_nextn_predict_layers", default=0, lo=0, hi=64))  # ModelSpec.mtp_layers
    experts = get_int(cfg, "n_routed_experts", default=0, lo=0, hi=B.MAX_EXPERTS)
    if experts:
        f.update(num_experts=experts, num_experts_per_tok=_top_k(cfg, experts),
                 moe_intermediate_size=get_int(cfg, "moe_intermediate_size", hi=B.MAX_FFN),
                 num_shared_experts=get_int(cfg, "n_shared_experts", default=0, lo=0, hi=B.MAX_SHARED_EXPERTS),
                 first_k_dense_layers=get_int(cfg, "first_k_dense_replace", default=0, lo=0, hi=f["num_hidden_layers"]))
        f.update(router_group_fields(cfg, experts))
        if get_str(cfg, "model_type") == "deepseek_v2" or not get_bool(cfg, "norm_topk_prob", True):
            f["variant"] = DEEPSEEK_V2_VARIANT  # V2's router never renormalises, V3's only with norm_topk_prob
    return f


def _map_gpt_oss(cfg: dict) -> dict:
    f = common_fields(cfg)
    experts = _moe_experts(cfg, "num_local_experts", "num_experts")
    f.update(family="gpt_oss", head_dim=get_int(cfg, "head_dim", default=64, hi=B.MAX_HEAD_DIM), qkv_bias=True,
             o_bias=True, attention_sinks=True, num_experts=experts,
             num_experts_per_tok=_top_k(cfg, experts, "experts_per_token"), router_bias=True,
             expert_bias=True, hidden_act="swiglu_oai")
    sliding_fields(cfg, f)
    return f


def _map_olmo2(cfg: dict) -> dict:
    """OLMo-2 (models/olmo2/modeling_olmo2.py): post-norms, fp32-weight RMSNorms, full-width q/k norms."""
    return {**llama_like_fields(cfg), "qk_norm": True, "variant": OLMO2_VARIANT}


def _map_llama4(cfg: dict) -> dict:
    """Llama-4 text model (transformers models/llama4/modeling_llama4.py, Llama4TextDecoderLayer).

    Layers listed in `moe_layers` (default: every `interleave_moe_layer_step`-th) hold `num_local_experts` fused
    routed experts and one shared expert, all of width `intermediate_size`, behind a bias-free router; the other
    layers a dense MLP of width `intermediate_size_mlp`. Its q/k norm is a weightless L2 norm (LLAMA4_VARIANT).
    Layers whose `no_rope_layers` entry is 1 use chunked attention (layer_types "chunked_attention"): a token sees
    only its own chunk of `attention_chunk_size` tokens, so their K/V cache is bounded like a sliding window of
    that size, which is how they are mapped (with a warning)."""
    cfg = _with_defaults(cfg, LLAMA4_TEXT_DEFAULTS)
    f = llama_like_fields(cfg)
    n = f["num_hidden_layers"]
    step = get_int(cfg, "interleave_moe_layer_step", hi=B.MAX_LAYERS)
    moe_layers = get_int_list(cfg, "moe_layers", lo=0, hi=B.MAX_LAYERS)
    if moe_layers is None:
        moe_layers = list(range(step - 1, n, step))
    moe = set(moe_layers)
    experts = _moe_experts(cfg, "num_local_experts")
    f.update(num_experts=experts, num_experts_per_tok=_top_k(cfg, experts),
             moe_intermediate_size=f["intermediate_size"],
             intermediate_size=get_int(cfg, "intermediate_size_mlp", hi=B.MAX_FFN),
             num_shared_experts=1, dense_layer_indices=tuple(i for i in range(n) if i not in moe),
             qk_norm=get_bool(cfg, "use_qk_norm", True), variant=LLAMA4_VARIANT)
    types = layer_types(cfg, n, LAYER_TYPES + ("chunked_attention",))
    if types is None:
        interval = get_int(cfg, "no_rope_layer_interval", hi=B.MAX_LAYERS)
        no_rope = get_int_list(cfg, "no_rope_layers", lo=0, hi=1) or [int((i + 1) % interval != 0)
                                                                       for i in range(n)]
        if len(no_rope) != n:
            raise ConfigError(f"no_rope_layers: has {len(no_rope)} entries but num_hidden_layers is {n}")
        types = ["chunked_attention" if r else "full_attention" for r in no_rope]
    chunk = get_window(cfg, "attention_chunk_size")
    if chunk and "chunked_attention" in types:
        f["layer_types"] = tuple("sliding_attention" if t == "chunked_attention" else "full_attention" for t in types)
        f["sliding_window"] = chunk
        f["_warnings"] = [f"Llama-4 chunked-attention layers ({types.count('chunked_attention')} of {n}) are "
                          f"treated as sliding-window layers of attention_chunk_size={chunk} tokens (same K/V "
                          f"cache bound; attention within a chunk)"]
    elif "sliding_attention" in types:
        raise ConfigError("layer_types: Llama-4 has no sliding_attention layers (chunked_attention or "
                          "full_attention)")
    return f


MAPPERS = {
    "llama": _map_llama, "mistral": _map_llama, "granite": _map_llama, "qwen2": _map_qwen2, "qwen3": _map_qwen3,
    "qwen2_moe": _map_qwen2_moe, "qwen3_moe": _map_qwen3_moe, "mixtral": _map_mixtral, "gemma": map_gemma,
    "gemma2": _map_gemma2, "gemma3": _map_gemma3, "gemma3_text": _map_gemma3, "phi3": _map_phi3, "gpt2": _map_gpt2,
    "gpt_neox": _map_gpt_neox, "deepseek_v2": _map_deepseek, "deepseek_v3": _map_deepseek, "gpt_oss": _map_gpt_oss,
    "olmo2": _map_olmo2, "llama4": _map_llama4, "llama4_text": _map_llama4, "kimi_k2": _map_deepseek,
}
# issue 21's families, each in its own module with its own test (tests/model/test_hf_<family>.py)
FAMILY_MAPPERS = {**HYBRID_MAPPERS, **SSM_MAPPERS, **LINEAR_MAPPERS, **DSA_MAPPERS, **VARIANT_MAPPERS,
                  **GEMMA_NEXT_MAPPERS, **REMOTE_MAPPERS,  # Gemma 3n / 4 (gemma_next.py); remote code (remote.py)
                  **LONGCAT_MAPPERS,  # LongCat-Flash: two engine layers per block (longcat.py)
                  **MISTRAL_MAPPERS,  # Mistral-Small-4 / Large-4 (MLA, DSA; mistral.py)
                  **VLM_TEXT_MAPPERS}  # vision-language models' text towers (vlm_text.py)
MAPPERS.update({**ARCH_MAPPERS, **FAMILY_MAPPERS})
MAPPERS.update({t: MAPPERS[same] for t, same in VLM_SAME_BLOCKS.items()})  # VLM text towers of a mapped type's blocks
# model types whose mapper refuses them, naming what the engine lacks (weights shared, compressed attention, ...;
# a variants_more.refuse mapper): known, but not supported
REFUSED_MODEL_TYPES = frozenset({"zamba2", "inkling_text", "inkling2_text", *DSA_REFUSED, *VLM_REFUSED,
                                 *(t for t, f in MAPPERS.items() if getattr(f, "refuses", False))})
SUPPORTED_MODEL_TYPES = tuple(sorted(t for t in MAPPERS if t not in REFUSED_MODEL_TYPES))


LLAMA_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


def _unknown_type(cfg: dict, model_type: str) -> ConfigError:
    lacks = [k for k in LLAMA_FIELDS if cfg.get(k) is None]
    llama = (f"it lacks {', '.join(lacks)} for that" if lacks else "it has the fields that needs")
    return ConfigError(f"model_type: {model_type!r} is not a supported architecture (supported: "
                       f"{', '.join(SUPPORTED_MODEL_TYPES)}). If its decoder blocks are exactly Llama's (RMSNorm, "
                       f"q/k/v/o, SwiGLU MLP), set \"model_type\": \"llama\" ({llama}); otherwise describe it as a "
                       f"custom model")


def _quantization(cfg: dict) -> Quantization | None:
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = get_str(q, "quant_method", default="unknown")
    bits = get_int(q, "bits", "w_bit", default=None, hi=64)
    if bits is None and get_bool(q, "load_in_4bit", False):
        bits = 4
    if bits is None and get_bool(q, "load_in_8bit", False):
        bits = 8
    if bits is None and method in ("fp8", "fbgemm_fp8"):
        bits = 8
    if bits is None and method == "mxfp4":
        bits = 4
    group = get_int(q, "group_size", "q_group_size", default=None, lo=-1, hi=B.MAX_GROUP_SIZE)
    if group is None and method == "mxfp4":
        group = 32
    if method == "bitsandbytes" and bits == 4:
        group = get_int(q, "bnb_4bit_blocksize", default=64, hi=B.MAX_GROUP_SIZE)
    return Quantization(method, bits or 16, group if group and group > 0 else None)


def spec_from_hf_config(cfg: Any, name: str | None = None) -> MappedConfig:
    """Build a ModelSpec from a Hugging Face config.json dict; raise ConfigError naming the field if it can't."""
    if not isinstance(cfg, dict):
        raise ConfigError("config.json must be a JSON object (a dict of fields)")
    raw = cfg
    warnings: list[str] = []
    cfg = text_config(cfg)
    if cfg.get("model_type") is None or cfg.get("model_type") == "":
        raise ConfigError("config.json has no 'model_type' field; add one such as \"llama\"")
    model_type = get_str(cfg, "model_type")
    mapper = MAPPERS.get(model_type)
    if mapper is None:
        raise _unknown_type(cfg, model_type)
    fields = checkpoint_weight_fields(cfg, with_router(model_type, cfg, mapper(cfg)))  # routers.py; quantization
    fields["vision"], vision_warning = vision_from_config(raw, fields["hidden_size"])  # the tower, or why not
    warnings.extend(([vision_warning] if vision_warning else []) + list(fields.pop("_warnings", ())))
    fields.update(model_type=model_type, architecture=served_architecture(raw))  # the class an engine loads
    given = name if isinstance(name, str) and name else cfg.get("_name_or_path")
    fields["name"] = given[:200] if isinstance(given, str) and given else model_type
    fields.update({k: v for k, v in context_fields(cfg).items() if k not in fields})  # where the mapper gave none
    try:
        spec = ModelSpec(**{k: v for k, v in fields.items() if v is not None or k in ("layer_types",)})
    except ValidationError as exc:
        where, msg = B.describe(exc, ModelSpec)
        raise ConfigError(f"config.json is not a valid model: {where}: {msg}") from None
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    try:
        checkpoint_dtype = normalize_dtype(dtype) if isinstance(dtype, str) else None
    except ValueError:
        checkpoint_dtype = None
    return MappedConfig(spec, tuple(warnings), checkpoint_dtype, _quantization(cfg), raw)
