"""Draw one input as a URL-bound Streamlit widget, from its entry in dashboard.state.PARAMS, with the engine's
complaint about it (if any) right under it."""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Callable, Mapping

import streamlit as st

from dashboard.lazy import LAZY_KEYS
from dashboard.safe_text import md_message
from dashboard.state import BY_KEY, options

SLIDERS = {"mbs"}
TEXT_AREAS = {"cfg"}  # other text keys are one-line inputs
PLACEHOLDERS = {"cfg": '{"model_type": "llama", ...}', "hf": "org/name, e.g. Qwen/Qwen3-8B"}
RADIOS = {"mode", "ft", "unit", "zero", "rc", "attn", "act", "sched"}


_DRAWN: ContextVar[dict | None] = ContextVar("drawn", default=None)


def start_collecting() -> tuple[dict, Any]:
    """From now on every field() puts the value its widget returned into the returned dict (what the widgets hold
    after drawing, without another walk over the whole session state); stop_collecting(token) ends it. Each script
    run has its own context, so sessions never share the dict."""
    drawn: dict = {}
    return drawn, _DRAWN.set(drawn)


def stop_collecting(token) -> None:
    _DRAWN.reset(token)


def field(key: str, problems: Mapping[str, list[str]], *, disabled: bool = False, caption: str | None = None,
          on_change: Callable | None = None, label: str | None = None, container: Any = None,
          width: int | str | None = None) -> Any:
    """Draw the widget of `key` (`width`: pixels, or Streamlit's default); return its value."""
    p = BY_KEY[key]
    box = container if container is not None else st
    short = container is not None and p.short  # a shared row: short label, the full one in the help
    help_text = " — ".join(x for x in ((p.label if short else ""), p.help) if x) or None
    # Inputs of sections drawn only while open keep their URL parameter through dashboard.lazy, not a binding.
    kw: dict[str, Any] = dict(key=key, bind=None if key in LAZY_KEYS else "query-params", help=help_text,
                              disabled=disabled, on_change=on_change)
    if width is not None:
        kw["width"] = width
    label = label or (p.short if short else p.label)
    if p.kind == "bool":
        value = box.checkbox(label, value=p.default, **kw)
    elif p.kind == "choice":
        opts = options(key)
        index = opts.index(p.default) if p.default in opts else 0
        if key in RADIOS:
            value = box.radio(label, opts, index=index, horizontal=True, **kw)
        else:
            value = box.selectbox(label, opts, index=index, **kw)
    elif p.kind == "text" and key in TEXT_AREAS:
        value = box.text_area(label, value=p.default, height=140, placeholder=PLACEHOLDERS.get(key), **kw)
    elif p.kind == "text":
        value = box.text_input(label, value=p.default, placeholder=PLACEHOLDERS.get(key), **kw)
    elif key in SLIDERS:
        if p.kind == "int":
            value = box.slider(label, min_value=int(p.lo), max_value=int(p.hi), value=p.default, step=1, **kw)
        else:
            value = box.slider(label, min_value=float(p.lo), max_value=float(p.hi), value=p.default,
                               step=float(p.step or 1), **kw)
    elif p.kind == "int":
        value = box.number_input(label, min_value=int(p.lo), max_value=int(p.hi), value=p.default, step=1, **kw)
    else:
        value = box.number_input(label, min_value=float(p.lo), max_value=float(p.hi), value=p.default,
                                 step=float(p.step or 1), **kw)
    if caption:
        box.caption(caption)
    for msg in problems.get(key, ()):
        box.error(md_message(msg), icon=":material/error:")  # engine messages can quote the link's values
    drawn = _DRAWN.get()
    if drawn is not None:
        drawn[key] = value
    return value
