"""Sections of sidebar inputs drawn only while open, their values kept in the session and in the URL.

Why: each bound Streamlit widget of the number/select/radio/text kinds walks the whole session state when drawn
(SessionState.filtered_state), so a rerun costs O(widgets²). The inputs most people never touch (a custom
architecture, per-tensor dtypes, overheads, the serving engine in training, RL, Megatron-Core's flags) sit in sections that are drawn
only while open, or while they apply (Model = custom, mode = rl, …), or while one of their values is not the
default.

Their widgets are not URL-bound (a bound widget that is not drawn loses its URL parameter): the page keeps
their values in `held` (its session state) and writes their URL parameters itself, with the same keys and the
same format as bound widgets (dashboard.inputs.state.to_query: defaults left out). So every link keeps working and
every input keeps its key.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import streamlit as st

from calculator.exports.page_keys import ARCH_KEYS, BY_KEY, DTYPE_KEYS, PARAMS
from dashboard.inputs.query import to_query

SECTIONS: dict[str, tuple[str, ...]] = {
    "arch": ARCH_KEYS,
    "generic": ("gparams", "gact"),
    "dtypes": DTYPE_KEYS,
    "serving": tuple(p.key for p in PARAMS if p.group == "serving"),
    "rl": tuple(p.key for p in PARAMS if p.group == "rl"),
    "overheads": tuple(p.key for p in PARAMS if p.group == "overheads"),
    "vision": tuple(p.key for p in PARAMS if p.group == "vision"),
    "megatron": ("fp8", "f8pg", "cef", "gaf", "vdiv", "mtp", "cpc", "moed", "moecf", "moepad", "moer32", "moegg",
                 "moeimb", "det", "tpo", "pao", "gbf16", "rcm", "ofm", "oofr", "mfsdp"),
}
LAZY_KEYS = frozenset(k for keys in SECTIONS.values() for k in keys)
SECTION_OF = {k: name for name, keys in SECTIONS.items() for k in keys}


def open_key(name: str) -> str:
    """The session-state key of a section's expander (True while open)."""
    return f"_open_{name}"


def non_default(values: Mapping[str, Any], keys: Iterable[str]) -> bool:
    return any(values[k] != BY_KEY[k].default for k in keys)


def section(label: str, name: str, values: Mapping[str, Any], problems, *, force: bool = False):
    """An expander whose inputs are drawn only while it is open or `force`d (or one of its inputs has a problem).
    Returns the expander to draw them in, or None."""
    keys = SECTIONS[name]
    force = force or any(k in problems for k in keys)
    box = st.expander(label, expanded=force, key=open_key(name), on_change="rerun")
    if not (box.open or force):
        return None
    for key in keys:  # a widget drawn again starts from the value the page kept for it
        if key not in st.session_state:
            st.session_state[key] = values[key]
    return box


def keep(values: Mapping[str, Any], drawn: Iterable[str], held: dict) -> None:
    """After the run: remember every lazy input's value, forget the widget state of those not drawn (the kept
    value is the one source until they are drawn again), and write their URL parameters."""
    for key in LAZY_KEYS:
        held[key] = values[key]
        if key not in drawn and key in st.session_state:
            del st.session_state[key]
    want = to_query({k: values[k] for k in LAZY_KEYS})
    query = st.query_params
    for key in LAZY_KEYS:
        now = query.get(key)
        if key in want:
            if now != want[key]:
                query[key] = want[key]
        elif now is not None:
            del query[key]
