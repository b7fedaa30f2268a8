"""Reading an untrusted config.json safely: bounded before parsing, strictly typed after.

`parse_config_json` refuses a text over MAX_CONFIG_BYTES or nested deeper than MAX_CONFIG_DEPTH before the JSON
parser sees it (so no RecursionError, no parse of a 100 MB paste), and parses numbers with hooks that never build
an unbounded value: an integer of more than 19 digits, a float that overflows (1e400) and NaN / Infinity become
`Unreadable` markers. Nothing fails at parse time for a field the math does not use; a getter below that reads
such a field refuses it, naming the field.

The getters (`get_int`, `get_bool`, `get_float`, `get_str`, ...) accept exactly the JSON type the field has in
`transformers`: a bool is not an integer, a string is not a number, `true` is not a window size. Every refusal is a
ConfigError whose message starts with the field's name.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_CONFIG_BYTES = 1 << 19  # 512 KiB: real config.json files are a few kB (the largest multimodal ones ~100 kB)
MAX_CONFIG_DEPTH = 32  # nesting of objects and arrays (real configs: ≤ 4)
MAX_INT_DIGITS = 19  # |n| < 10^19: every count the engine takes is far below
MAX_LIST = 100_000  # entries of a list field the mapper reads (layer_types, mlp_only_layers ...)

REQUIRED = object()


class ConfigError(ValueError):
    """A config.json that cannot describe a model; the message names the field to fix."""


class Unreadable:
    """A JSON number the parser kept out of Python's numbers: too many digits, overflowing, NaN or infinite."""

    def __init__(self, text: str):
        self.text = text[:24] + ("…" if len(text) > 24 else "")

    def __repr__(self) -> str:
        return self.text


def _parse_int(text: str) -> int | Unreadable:
    return Unreadable(text) if len(text.lstrip("-")) > MAX_INT_DIGITS else int(text)


def _parse_float(text: str) -> float | Unreadable:
    value = float(text) if len(text) <= 400 else math.inf
    return value if math.isfinite(value) else Unreadable(text)


_TOKEN = re.compile(r'["\[\]{}]')
_STRING_REST = re.compile(r'(?:[^"\\]|\\.)*+"', re.DOTALL)  # the rest of a string after its opening quote


def nesting_depth(text: str) -> int:
    """Deepest nesting of [ and { outside strings: one left-to-right pass, each character read once. (A text with
    at most MAX_CONFIG_DEPTH brackets in all cannot nest deeper: their count is returned without the pass.)"""
    if text.count("[") + text.count("{") <= MAX_CONFIG_DEPTH:
        return text.count("[") + text.count("{")  # an upper bound, enough to pass the check
    depth = deepest = i = 0
    while (m := _TOKEN.search(text, i)) is not None:
        c, i = m.group(), m.end()
        if c == '"':
            rest = _STRING_REST.match(text, i)
            if rest is None:  # an unterminated string: the parser reports it
                break
            i = rest.end()
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def parse_config_json(text: str | bytes, what: str = "config.json") -> Any:
    """The parsed JSON of a config text, bounded in size, depth and number magnitude; ConfigError otherwise."""
    if isinstance(text, bytes):
        if len(text) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{what} is {len(text):,} bytes; at most {MAX_CONFIG_BYTES:,} are read")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{what} is not UTF-8 text (byte {exc.start})") from None
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{what} is {len(text):,} characters; at most {MAX_CONFIG_BYTES:,} are read")
    depth = nesting_depth(text)
    if depth > MAX_CONFIG_DEPTH:
        raise ConfigError(f"{what} nests {depth:,} levels deep; at most {MAX_CONFIG_DEPTH} are read")
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=Unreadable)
    except json.JSONDecodeError as exc:
        lines = text.splitlines()
        shown = f"; line {exc.lineno} reads {lines[exc.lineno - 1].strip()[:120]!r}" if exc.lineno <= len(lines) else ""
        raise ConfigError(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
                          f"{shown}") from None
    except RecursionError:  # unreachable after the depth check; kept so a parser change cannot leak it
        raise ConfigError(f"{what} nests too deeply") from None


# ---- typed getters -------------------------------------------------------------------------------------------------
def _shown(value: Any) -> str:
    if isinstance(value, Unreadable):
        return f"the number {value.text}"
    text = (json.dumps(value, default=repr) if isinstance(value, (str, bool, list, dict)) or value is None
            else repr(value))  # default: an Unreadable number inside a list or object shows as its text
    return text if len(text) <= 40 else text[:40] + "…"


def _find(cfg: dict, keys: tuple[str, ...]) -> tuple[str, Any]:
    for k in keys:
        if cfg.get(k) is not None:
            return k, cfg[k]
    return keys[0], None


def _missing(cfg: dict, key: str) -> ConfigError:
    return ConfigError(f"config.json has no {key!r} field (model_type {cfg.get('model_type')!r}); add it")


def get_int(cfg: dict, *keys: str, default: Any = REQUIRED, lo: int = 1, hi: int = 2**62) -> Any:
    """An integer field in [lo, hi] (the first of `keys` present); `default` when absent or null."""
    key, value = _find(cfg, keys)
    if value is None:
        if default is REQUIRED:
            raise _missing(cfg, key)
        return default
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: must be a whole number from {lo:,} to {hi:,}, got {_shown(value)}")
    if not lo <= value <= hi:
        raise ConfigError(f"{key}: must be from {lo:,} to {hi:,}, got {value:,}")
    return value


def get_bool(cfg: dict, key: str, default: bool) -> bool:
    """A true/false field; `default` when absent or null."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: must be true or false, got {_shown(value)}")
    return value


def get_float(cfg: dict, key: str, default: Any, lo: float, hi: float) -> Any:
    """A finite number in [lo, hi]; `default` when absent or null."""
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key}: must be a number from {lo:g} to {hi:g}, got {_shown(value)}")
    if not lo <= value <= hi:
        raise ConfigError(f"{key}: must be from {lo:g} to {hi:g}, got {value:g}")
    return float(value)


def partial_rotary_dim(cfg: dict, head_dim: int, default: float) -> int:
    """Channels of a head RoPE rotates, head_dim · partial_rotary_factor: the factor from rope_parameters (what
    transformers 5 writes), else the top-level partial_rotary_factor or GPT-NeoX's rotary_pct (transformers 4),
    else the configuration class's `default`."""
    rope = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    for source, key in ((rope, "partial_rotary_factor"), (cfg, "partial_rotary_factor"), (cfg, "rotary_pct")):
        if source.get(key) is not None:
            return int(head_dim * get_float(source, key, default, 0.0, 1.0))
    return int(head_dim * default)


def context_fields(cfg: dict) -> dict:
    """config.json's max_position_embeddings (GPT-2's n_positions), model_max_length and RoPE parameter sets
    (ModelSpec.rope_sets, rope_nested): rope_parameters (transformers 5) or rope_scaling (4.x), one dict, or one per
    layer type (vllm transformers_utils/config.py iter_rope_parameters: nested when every value is a dict); `type`
    is the old name of `rope_type`."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    if not isinstance(rope, dict):
        rope = {}
    nested = bool(rope) and all(isinstance(v, dict) for v in rope.values())
    sets = []
    for part in (rope.values() if nested else [rope] if rope else []):
        kind = get_str(part, "rope_type", "type", default="default")
        sets.append((kind, get_float(part, "factor", None, 1e-6, 1e6),
                     get_int(part, "original_max_position_embeddings", default=None, hi=1 << 40)))
    return {"max_position_embeddings": get_int(cfg, "max_position_embeddings", "n_positions", default=None, hi=1 << 40),
            "model_max_length": get_int(cfg, "model_max_length", default=None, hi=1 << 40),
            "rope_sets": tuple(sets), "rope_nested": nested}


def get_str(cfg: dict, *keys: str, default: Any = REQUIRED, max_len: int = 100) -> Any:
    """A string field of at most `max_len` characters; `default` when absent or null."""
    key, value = _find(cfg, keys)
    if value is None:
        if default is REQUIRED:
            raise _missing(cfg, key)
        return default
    if not isinstance(value, str) or len(value) > max_len:
        raise ConfigError(f"{key}: must be a string of at most {max_len} characters, got {_shown(value)}")
    return value


def get_int_list(cfg: dict, key: str, lo: int, hi: int) -> list[int] | None:
    """A list of integers in [lo, hi], or None when absent or null."""
    value = cfg.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise ConfigError(f"{key}: must be a list of whole numbers, got {_shown(value)}")
    return [get_int({key: v}, key, lo=lo, hi=hi) for v in value]


def get_choice_list(cfg: dict, key: str, choices: tuple[str, ...]) -> list[str] | None:
    """A list of strings, each one of `choices`, or None when absent or null."""
    value = cfg.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise ConfigError(f"{key}: must be a list of strings, got {_shown(value)}")
    for i, v in enumerate(value):
        if v not in choices:
            raise ConfigError(f"{key}[{i}]: {_shown(v)} is not a layer type this calculator models "
                              f"(known: {', '.join(choices)})")
    return list(value)


def get_window(cfg: dict, key: str = "sliding_window", hi: int = 1 << 30) -> int | None:
    """A sliding-window size in tokens; absent, null or 0 means no window. `true` is not a size."""
    value = cfg.get(key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 0):
        return None
    return get_int(cfg, key, lo=1, hi=hi)


# ---- field groups most decoder configs share -------------------------------------------------------------------
LAYER_TYPES = ("full_attention", "sliding_attention")


def common_fields(cfg: dict) -> dict:
    """The Llama-style sizes nearly every decoder config shares, each within the engine's physical bounds."""
    from calculator.core import bounds as B
    return dict(
        hidden_size=get_int(cfg, "hidden_size", hi=B.MAX_HIDDEN),
        num_hidden_layers=get_int(cfg, "num_hidden_layers", hi=B.MAX_LAYERS),
        num_attention_heads=get_int(cfg, "num_attention_heads", hi=B.MAX_HEADS),
        num_key_value_heads=get_int(cfg, "num_key_value_heads", default=None, hi=B.MAX_HEADS),
        head_dim=get_int(cfg, "head_dim", default=None, hi=B.MAX_HEAD_DIM),
        intermediate_size=get_int(cfg, "intermediate_size", hi=B.MAX_FFN),
        vocab_size=get_int(cfg, "vocab_size", hi=B.MAX_VOCAB),
        tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", False),
    )


def layer_types(cfg: dict, n_layers: int, choices: tuple[str, ...] = LAYER_TYPES) -> list[str] | None:
    """`layer_types`, one known type per layer, or None when absent."""
    types = get_choice_list(cfg, "layer_types", choices)
    if types is not None and len(types) != n_layers:
        raise ConfigError(f"layer_types: has {len(types)} entries but num_hidden_layers is {n_layers}")
    return types


def sliding_fields(cfg: dict, fields: dict, default_on: bool = True) -> None:
    """Sliding window: on every layer unless layer_types says which (Qwen2: only with use_sliding_window)."""
    window = get_window(cfg)
    types = layer_types(cfg, fields["num_hidden_layers"])
    if types is not None:
        fields["layer_types"] = tuple(types) if window else None
        fields["sliding_window"] = window if window and "sliding_attention" in types else None
    elif window and default_on:
        fields["sliding_window"] = window


def llama_like_fields(cfg: dict) -> dict:
    """Llama's sizes plus its bias switches and activation (LlamaConfig: attention_bias, mlp_bias, hidden_act)."""
    f = common_fields(cfg)
    bias = get_bool(cfg, "attention_bias", False)
    f.update(qkv_bias=bias, o_bias=bias, mlp_bias=get_bool(cfg, "mlp_bias", False),
             hidden_act=get_str(cfg, "hidden_act", default="silu"))
    return f


def checkpoint_weight_fields(cfg: dict, fields: dict | None = None) -> dict:
    """ModelSpec.checkpoint_weight_dtype / checkpoint_expert_weight_dtype: what a checkpoint's quantization_config
    stores. "fp8" (DeepSeek-V3 / R1 / V3.2 / V4, Kimi-K2, MiniMax-M2, MiMo-V2: e4m3 in 128 × 128 blocks; transformers
    integrations/finegrained_fp8.py, vLLM model_executor/layers/quantization/fp8.py) keeps every decoder linear in
    fp8; "mxfp4" (gpt-oss: its modules_to_not_convert are attention, router, embeddings and head; transformers
    integrations/mxfp4.py) the routed experts in MXFP4; DeepSeek-V4's expert_dtype "fp4" its routed experts in
    FP4; ModelOpt's and llm-compressor's NVFP4 / FP8 (modelopt_weight_fields, compressed_tensors_weight_fields).
    Other methods (AWQ, GPTQ, bitsandbytes, integer compressed-tensors) stay with the workload's own quantization
    inputs: {} for them. With the mapper's `fields`, those fields and these merged (their warnings kept together)."""
    q = cfg.get("quantization_config")
    method = q.get("quant_method") if isinstance(q, dict) else None
    out = {}
    if method in ("fp8", "fbgemm_fp8"):
        out = {"checkpoint_weight_dtype": "fp8", "checkpoint_expert_weight_dtype": "fp8"}
    elif method == "mxfp4":
        out = {"checkpoint_expert_weight_dtype": "fp4"}
    elif method == "modelopt":
        out = modelopt_weight_fields(q)
    elif method == "compressed-tensors":
        out = compressed_tensors_weight_fields(q)
    if cfg.get("expert_dtype") == "fp4":
        out["checkpoint_expert_weight_dtype"] = "fp4"
    if fields is None:
        return out
    warned = list(fields.get("_warnings", ())) + out.pop("_warnings", [])  # the mapper's fields, these beside them
    return {**fields, **out, **({"_warnings": warned} if warned else {})}


MODELOPT_DTYPES = {"NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4", "W4A8_NVFP4_FP8": "nvfp4", "FP8": "fp8", "MXFP8": "fp8"}


def modelopt_weight_fields(q: dict) -> dict:
    """What an NVIDIA ModelOpt checkpoint stores (quant_method "modelopt": the nvidia/*-NVFP4 repositories; vLLM
    model_executor/layers/quantization/modelopt.py): NVFP4 keeps each quantized linear as packed E2M1 pairs with an
    E4M3 scale per 16 weights ("nvfp4"), FP8 one byte per weight (MXFP8's E8M0 scale per 32 not counted); the modules
    matching a pattern of `ignore` (`exclude_modules` in older files) stay in the model dtype. The released files
    exclude the attention, the shared experts, the routers and the first dense layers: the routed experts take the
    algorithm, and the other decoder linears too only when no pattern names the attention ("attn"). MIXED_PRECISION
    gives each layer's algorithm in quantized_layers: the routed experts' from their entries, the other decoder
    linears' from the attention's. ModelSpec has one dtype for the routed experts and one for every other decoder
    linear: where the file splits those otherwise, a warning says so."""
    ignore = _ignore_patterns(q.get("ignore", q.get("exclude_modules")))
    algo = q.get("quant_algo")
    if algo == "MIXED_PRECISION":
        layers = q.get("quantized_layers")
        algos = [(n, v.get("quant_algo")) for n, v in layers.items() if isinstance(v, dict)] \
            if isinstance(layers, dict) else []
        experts = {a for n, a in algos if "experts" in n and "shared" not in n}
        attention = {a for n, a in algos if "attn" in n}
        rest = {a for n, a in algos if "attn" not in n and ("experts" not in n or "shared" in n)
                and "lm_head" not in n}
        out = {}
        for key, found in (("checkpoint_expert_weight_dtype", experts), ("checkpoint_weight_dtype", attention),
                           ("checkpoint_mlp_weight_dtype", rest)):
            if len(found) == 1 and next(iter(found)) in MODELOPT_DTYPES:
                out[key] = MODELOPT_DTYPES[next(iter(found))]
        if len(rest) > 1:
            out["_warnings"] = [f"ModelOpt mixed precision: the dense MLPs and shared experts are stored in "
                                f"{'/'.join(sorted(rest))}; priced in the model dtype"]
        return out
    dtype = MODELOPT_DTYPES.get(algo) if isinstance(algo, str) else None
    if dtype is None:
        return {"_warnings": [f"ModelOpt quant_algo {str(algo)[:40]!r} is not read: the weights are priced in the "
                              "model dtype unless the weight dtype inputs say otherwise"]}
    return _outside_ignore(dtype, ignore, f"ModelOpt {algo}")


def compressed_tensors_weight_fields(q: dict) -> dict:
    """What an llm-compressor checkpoint stores (quant_method "compressed-tensors": RedHatAI's *-FP8-dynamic and
    *-NVFP4 repositories; vLLM model_executor/layers/quantization/compressed_tensors/compressed_tensors.py): the
    config group that targets "Linear" names the weights' format — 8-bit float is fp8 (its per-channel or
    per-tensor scales not counted), 4-bit float in groups of 16 is nvfp4; integer formats (W4A16, W8A8) stay with
    the workload's quantization inputs. The modules `ignore` names stay in the model dtype, as ModelOpt's."""
    groups = q.get("config_groups")
    formats = set()
    for g in (groups.values() if isinstance(groups, dict) else ()):
        w = g.get("weights") if isinstance(g, dict) else None
        targets = g.get("targets") if isinstance(g, dict) else None
        if isinstance(w, dict) and isinstance(targets, list) and "Linear" in targets and w.get("type") == "float":
            formats.add("fp8" if w.get("num_bits") == 8 else "nvfp4" if (w.get("num_bits"), w.get("group_size")) ==
                        (4, 16) else None)
    if len(formats) != 1 or None in formats:
        return {}
    return _outside_ignore(formats.pop(), _ignore_patterns(q.get("ignore")), "compressed-tensors")


def _ignore_patterns(ignore) -> list[str]:
    """A quantization_config's list of module patterns kept unquantized (its strings; [] for anything else)."""
    return [p for p in ignore if isinstance(p, str)] if isinstance(ignore, list) else []


def _outside_ignore(dtype: str, ignore: list[str], what: str) -> dict:
    """The stored dtypes of a checkpoint whose linears are `dtype` outside its ignore patterns: all of them; where a
    pattern keeps the attention, the rest (the dense MLPs and shared experts too, unless a pattern names an MLP or
    a shared expert: then they are priced with the attention, which a warning says)."""
    if not any("attn" in p for p in ignore):
        return {"checkpoint_weight_dtype": dtype, "checkpoint_expert_weight_dtype": dtype}
    if not any(k in p for p in ignore for k in ("mlp", "shared_expert", "ffn")):
        return {"checkpoint_expert_weight_dtype": dtype, "checkpoint_mlp_weight_dtype": dtype}
    return {"checkpoint_expert_weight_dtype": dtype,
            "_warnings": [f"{what}: its ignore list keeps the attention and some MLPs or shared experts in the model "
                          f"dtype, so every non-expert decoder linear is priced so and the routed experts in {dtype}; "
                          "an MLP or shared expert the file quantizes is over-counted"]}


def router_group_fields(cfg: dict, experts: int) -> dict:
    """ModelSpec.router_groups / router_group_topk of a DeepSeek-style router: n_group groups, the token's top-k
    from its topk_group best (transformers DeepseekV3TopkRouter / DeepSeek-V2's "group_limited_greedy"; its
    "greedy" ignores the groups); {} when the config sets no groups."""
    groups = get_int(cfg, "n_group", default=1, lo=1, hi=experts)
    if groups == 1 or experts % groups or get_str(cfg, "topk_method", default="noaux_tc") == "greedy":
        return {}
    return {"router_groups": groups, "router_group_topk": get_int(cfg, "topk_group", default=groups, hi=groups)}


def served_architecture(raw: dict) -> str | None:
    """config.json's architectures[0], the class a serving engine loads (vLLM's and SGLang's registries are keyed
    by it); None when absent or not a name."""
    names = raw.get("architectures")
    first = names[0] if isinstance(names, list) and names else None
    return first if isinstance(first, str) and 0 < len(first) <= 100 and first.isidentifier() else None
