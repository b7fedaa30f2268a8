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

