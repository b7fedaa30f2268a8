"""Draw one input as a URL-bound Streamlit widget, from its entry in dashboard.inputs.state.PARAMS, with the engine's
complaint about it (if any) right under it."""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Callable, Mapping

import streamlit as st

from dashboard.inputs.lazy import LAZY_KEYS
from dashboard.safe_text import md_message
from calculator.exports.page_keys import BY_KEY, options
from dashboard.inputs.query import bound

SLIDERS = {"mbs"}
TEXT_AREAS = {"cfg"}  # other text keys are one-line inputs
PLACEHOLDERS = {"cfg": '{"model_type": "llama", ...}', "hf": "org/name, e.g. Qwen/Qwen3-8B"}
RADIOS = {"mode", "ft", "unit", "zero", "rc", "attn", "act", "sched"}


_DRAWN: ContextVar[dict | None] = ContextVar("drawn", default=None)
ADJUSTED = "_adjusted"  # session state: {key: note} for inputs the last change put back in range (shown once)




def out_of_range_note(p, value: float) -> tuple[float | int, str] | None:
    """(the value used, the note) when `value` lies outside the range of input `p` (a dashboard.inputs.state.Param), else
    None. The nearest allowed value is used; the note names the field, what was entered and what to enter."""
    if value is None or p.lo is None or p.hi is None or p.lo <= value <= p.hi:
        return None
    used = p.lo if value < p.lo else p.hi
    used = int(used) if p.kind == "int" else float(used)
    side = "below the smallest" if value < p.lo else "above the largest"
    return used, (f"{p.label}: {bound(value)} is {side} value allowed; {bound(used)} is used (the field shows "
                  f"it) — enter {'a whole number' if p.kind == 'int' else 'a value'} from {bound(p.lo)} to "
                  f"{bound(p.hi)}")


def _keep_in_range(key: str, then: Callable | None) -> None:
    """on_change of a number input: a value out of range is replaced by the nearest allowed one before the script
    runs, so the field shows the value the numbers use, with a note under it. The widget has no min / max of its
    own: Streamlit's would keep showing the rejected number while the page computed with the previous one."""
    got = out_of_range_note(BY_KEY[key], st.session_state.get(key))
    notes = st.session_state.setdefault(ADJUSTED, {})
    if got is None:
        notes.pop(key, None)
    else:
        st.session_state[key], notes[key] = got
    if then is not None:
        then()


def clear_adjusted() -> None:
    """After a run has shown the notes of inputs put back in range: they are said once."""
    if st.session_state.get(ADJUSTED):
        st.session_state[ADJUSTED] = {}


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
    # Inputs of sections drawn only while open keep their URL parameter through dashboard.inputs.lazy, not a binding.
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
        kw["on_change"], kw["args"] = _keep_in_range, (key, on_change)
        value = box.number_input(label, value=p.default, step=1, **kw)
    else:
        kw["on_change"], kw["args"] = _keep_in_range, (key, on_change)
        value = box.number_input(label, value=p.default, step=float(p.step or 1), **kw)
    if caption:
        box.caption(caption)
    adjusted = st.session_state.get(ADJUSTED)
    if adjusted and key in adjusted:
        box.warning(md_message(adjusted[key]), icon=":material/warning:")
    for msg in problems.get(key, ()):
        box.error(md_message(msg), icon=":material/error:")  # engine messages can quote the link's values
    drawn = _DRAWN.get()
    if drawn is not None:
        drawn[key] = value
    return value
