"""A query string checked before the widgets read it (calculator.exports.page_keys: what each key accepts), and the query
string that reproduces a view. Nothing here imports streamlit (tests/dashboard/test_dashboard_state.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from calculator.exports.page_keys import BY_KEY, PARAMS, URL_FORMAT_VERSION, VERSION_KEY, Param, options
from calculator.exports.page_link import to_query  # noqa: F401 (the query a page's values make)
from dashboard.safe_text import cut


def _fmt(value: str | list[str]) -> str:
    return ",".join(value) if isinstance(value, list) else value


class Unsafe(ValueError):
    """A value Streamlit 1.67's bound widget cannot even read (an int input given inf raises OverflowError in its
    deserializer): the page removes it from the URL and reruns before the widget sees it."""


def read_value(p: Param, raw: str, choices: Iterable[str] | None = None) -> tuple[Any, str]:
    """(value, note): what a URL string means for `p`, exactly as the bound widget reads it (note says how it
    was adjusted, e.g. a fraction truncated). ValueError if the widget drops it, Unsafe if it cannot read it."""
    if p.kind == "bool":
        low = raw.lower()
        if low not in ("true", "false"):
            raise ValueError("expected true or false")
        return low == "true", ""
    if p.kind == "choice":
        opts = tuple(choices) if choices is not None else options(p.key)
        if raw not in opts:
            shown = ", ".join(opts[:12]) + (" …" if len(opts) > 12 else "")
            raise ValueError(f"not one of {shown}")
        return raw, ""
    if p.kind == "text":
        return raw, ""
    if raw == "" and p.default is None:
        return None, ""
    try:
        num = float(raw)  # what Streamlit does with a number in the URL
    except ValueError:
        raise ValueError("not a number") from None
    if math.isnan(num):
        raise ValueError("not a number")
    if math.isinf(num):
        raise Unsafe("not a finite number")
    note = ""
    if p.kind == "int" and num != int(num):
        note = f"not a whole number: read as {int(num)}"  # Streamlit truncates toward zero
    if p.kind == "int":
        num = int(num)
    if (p.lo is not None and num < p.lo) or (p.hi is not None and num > p.hi):
        raise ValueError(f"outside {bound(p.lo)}–{bound(p.hi)}")
    return num, note


def parse_value(p: Param, raw: str, choices: Iterable[str] | None = None) -> Any:
    """The value a URL string means for `p` (see read_value); ValueError if the widget would not use it."""
    return read_value(p, raw, choices)[0]


@dataclass(frozen=True)
class LinkCheck:
    """What a shared link asked for: the values the widgets will take, one line per ignored or adjusted
    parameter, and the keys the page must remove from the URL itself (unknown, or unreadable by the widget)."""

    values: dict[str, Any] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    version: str | None = None
    unknown_keys: tuple[str, ...] = ()
    drop_keys: tuple[str, ...] = ()


def check_query_params(query: Mapping[str, str | list[str]],
                       choices: Callable[[str], Iterable[str]] = options) -> LinkCheck:
    """Validate a query string (st.query_params.to_dict() or a dict of lists) before the widgets read it.

    Bound widgets drop invalid values silently; this reports them so the page can say what was ignored. The lines
    are plain text (values cut to a readable length): a page shows them through dashboard.safe_text."""
    values: dict[str, Any] = {}
    ignored: list[str] = []
    unknown: list[str] = []
    drop: list[str] = []
    version = None
    for key, raw in query.items():
        if key == VERSION_KEY:
            version = _fmt(raw)
            if version != URL_FORMAT_VERSION:
                ignored.append(f"v={cut(version)}: this page reads link format v={URL_FORMAT_VERSION}; "
                               "the other parameters were read as v1")
            continue
        p = BY_KEY.get(key)
        if p is None:
            unknown.append(key)
            ignored.append(f"{cut(key, 40)}={cut(_fmt(raw))}: unknown parameter")
            continue
        if isinstance(raw, list):
            if len(raw) > 1:
                ignored.append(f"{key} given {len(raw)} times: only the last value is used")
            raw = raw[-1] if raw else ""  # as Streamlit reads a repeated single-value parameter
        try:
            values[key], note = read_value(p, raw, choices(key) if p.kind == "choice" else None)
            if note:
                ignored.append(f"{p.label} ({key}={cut(raw)}): {note}")
        except ValueError as exc:  # Unsafe too. The page removes the value from the URL before its widget reads
            drop.append(key)  # it: number inputs have no range of their own (dashboard.inputs.widgets), so it would stay
            ignored.append(f"{p.label} ({key}={cut(raw)}): {exc}; the default ({format_default(p)}) is used "
                           f"and shown{_what_to_enter(p)}")
    return LinkCheck(values, tuple(ignored), version, tuple(unknown), tuple(unknown + drop))


def bound(x: float) -> str:
    """A range end as people read it: 4,096, 100,000,000, 0.5."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def _what_to_enter(p: Param) -> str:
    if p.kind in ("int", "float") and p.lo is not None and p.hi is not None:
        return f" — enter {'a whole number' if p.kind == 'int' else 'a number'} from {bound(p.lo)} to {bound(p.hi)}"
    return ""


def format_default(p: Param) -> str:
    if p.default is None:
        return "empty"
    if isinstance(p.default, bool):
        return "true" if p.default else "false"
    return str(p.default)
