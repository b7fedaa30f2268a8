"""The calculator page's breakdown table and formula panel, built once per distinct estimate and unit.

st.dataframe converts a pandas DataFrame to Arrow on every rerun (~1 ms for 13 rows); given a ready pyarrow Table
it only serializes it (~0.1 ms). Both are kept in small LRUs shared by every session (they are never mutated).
"""
from __future__ import annotations

from dashboard.memo import LRU

_TABLES = LRU()
_FORMULAS = LRU()


def terms_key(est, unit: str) -> tuple:
    """What the table and the panel show: every term of the most loaded stage, the total, the unit."""
    return (tuple((t.key, t.component, t.label, t.bytes, t.formula, t.substituted, t.source, t.note)
                  for t in est.terms), est.total_bytes, unit)


def breakdown_rows(est, unit: str) -> list[dict]:
    from calculator.result import COMPONENT_LABELS
    from calculator.units import format_bytes
    return [{"Component": COMPONENT_LABELS.get(t.component, t.component), "Term": t.label,
             f"Memory ({unit})": format_bytes(t.bytes, unit), "Bytes": t.bytes,
             "Share": t.bytes / est.total_bytes if est.total_bytes else 0.0} for t in est.terms]


def breakdown_table(est, unit: str):
    """The breakdown table as a pyarrow Table (columns Component, Term, Memory (unit), Bytes, Share)."""
    def build():
        import pandas as pd
        import pyarrow as pa
        return pa.Table.from_pandas(pd.DataFrame(breakdown_rows(est, unit)), preserve_index=False)
    return _TABLES.get_or_build(terms_key(est, unit), build)


def formula_markdown(est, unit: str) -> str:
    """Every term with its formula, the formula with values substituted, and its source: one Markdown text."""
    def build():
        from calculator.sources import SOURCES
        from calculator.units import format_bytes
        blocks = ["**Formula and source of every term**"]
        for t in est.terms:
            src = SOURCES.get(t.source)
            cite = f"[{src.title}]({src.url})" if src else f"`{t.source}`"
            blocks.append(f"**{t.label}** — {format_bytes(t.bytes, unit)} ({t.bytes:,} bytes)  \n"
                          f"`{t.formula}`  \n`= {t.substituted}`  \nSource: {cite}"
                          + (f" — {src.detail}" if src and src.detail else "")
                          + (f"  \n_{t.note}_" if t.note else ""))
        return "\n\n".join(blocks)
    return _FORMULAS.get_or_build(terms_key(est, unit), build)
