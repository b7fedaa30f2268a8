"""Formulas & references: every source the engine cites, and the terms (with their formulas) that use it."""
from __future__ import annotations

import streamlit as st

from calculator.core.result import COMPONENT_LABELS
from calculator.core.sources import SOURCES
from dashboard.references import CATALOG, term_catalog
from dashboard.views import entry

entry.through_app()  # a first visit straight to this page still runs inside app.py's navigation


def _catalog() -> dict:
    """Built once per server, for every session (dashboard.memo: no visitor's clear-cache message empties it)."""
    return CATALOG.get("catalog", lambda: {k: [u.__dict__ for u in v] for k, v in term_catalog().items()},
                       on_miss=lambda: st.spinner("Collecting the engine's formulas…"))


st.title("Formulas & references")
st.caption(f"Every formula the calculator uses comes from the engine (`calculator/`), and every term names its "
           f"source. Below are the {len(SOURCES)} sources of `calculator.core.sources.SOURCES`, each with the terms that "
           "cite it, collected by running the engine over configurations that reach each of its branches.")

catalog = _catalog()
for key, src in SOURCES.items():
    uses = catalog.get(key, [])
    with st.container(border=True, key=f"src_{key}"):
        st.markdown(f"#### [{src.title}]({src.url})\n`{key}` — {src.detail}")
        if uses:
            for u in uses:
                st.markdown(f"- **{u['label']}** ({COMPONENT_LABELS.get(u['component'], u['component'])}): "
                            f"`{u['formula']}`")
        else:
            st.caption("In the engine's source registry; no term of the configurations sampled here cites it.")
unknown = sorted(set(catalog) - set(SOURCES))
if unknown:
    st.error("Terms cite sources missing from calculator.core.sources.SOURCES: " + ", ".join(unknown))
