"""What the page shows when a job does not fit: the remedies table, the sweep chart and CSV, the step-timeline
chart. Plain functions of the engine's results (calculator.planning.remedies, calculator.planning.sweeps, calculator.planning.timeline); no
streamlit here, so they are unit-tested directly. Figures are plotly graph_objects built from plain dicts.
"""
from __future__ import annotations

import csv
import io
from typing import Any, Mapping

import plotly.graph_objects as go

from dashboard.charts import AXIS_GRID, CHART_STYLE, COLORS, SAFE_FRACTION, UNIT_AXIS, hline
from dashboard.memo import LRU

_ADVICE, _SWEEPS = LRU(64, max_bytes=32 * 2**20), LRU(64, max_bytes=16 * 2**20)  # ~0.4 MB / ~10 kB each


def _key(values: Mapping[str, Any]) -> tuple:
    """The inputs of a view (a Hugging Face model is its `hf` key), and the view keys the links carry."""
    from dashboard.inputs import state
    return tuple(sorted(state.to_query(values).items()))


def advice_for(result, values: Mapping[str, Any]):
    """calculator.planning.remedies.advise for the page's result, each remedy's url_query built on the page's own values
    (so a link keeps the model source and the view keys). Shared LRU: one computation per distinct input."""
    from calculator.planning.remedies import advise
    from calculator.exports import page_link as links

    def build():
        return advise(result.model, result.workload, url_of=lambda w: links.url_query(values, w))
    return _ADVICE.get_or_build(_key(values), build)


def sweep_for(result, values: Mapping[str, Any], axis: str):
    from calculator.planning.sweeps import sweep
    return _SWEEPS.get_or_build((_key(values), axis), lambda: sweep(result.model, result.workload, axis))


def remedy_rows(advice, unit: str, root: str) -> list[dict]:
    """One row per lever, most saved first: what changes, what it saves and costs, and the link that applies it."""
    from calculator.planning.levers import TIERS
    from calculator.core.units import format_bytes
    rows = []
    for r in advice.remedies:
        ratio = r.cost.get("step_time_ratio")
        rows.append({"Lever": r.lever, "Change": r.change, f"Saved ({unit})": format_bytes(r.saved_bytes, unit),
                     f"Per GPU after ({unit})": format_bytes(r.total_bytes, unit),
                     "Fits": "yes" if r.fits else ("no" if r.fits is False else "—"), "GPUs": r.cost["gpus"],
                     "Step time": f"×{ratio:.2f}" if ratio else "—", "Kind": TIERS[r.tier], "Cost": r.cost["text"],
                     "Open": f"{root}?{r.url_query}"})
    return rows


def combined_lines(advice, unit: str, root: str) -> list[str]:
    """The combination, one markdown line per step (each step's link opens the job with it and every earlier
    step applied)."""
    from calculator.core.units import format_bytes
    from dashboard.safe_text import md
    out = []
    for i, s in enumerate(advice.combined.steps, 1):
        out.append(f"{i}. {md(s.change)} → {format_bytes(s.total_bytes, unit)}"
                   + (" — **fits**" if s.fits else "") + f" ([open]({root}?{s.url_query}))")
    return out


def sweep_csv(sw) -> str:
    rows = sw.rows()
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else [sw.axis], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def sweep_figure(sw, unit: str = "GB", gpu=None) -> go.Figure:
    """Stacked areas, one per component, over the sweep's values (points the engine refused are left out), the
    GPU's capacity and the 80% band, and the current value marked."""
    from calculator.core.result import COMPONENT_LABELS, COMPONENTS
    from calculator.core.units import UNIT_BYTES, format_bytes
    scale = UNIT_BYTES[unit]
    pts = [p for p in sw.points if p.total_bytes is not None]
    xs = [p.x for p in pts]
    data = []
    for comp in COMPONENTS:
        ys = [p.components.get(comp, 0) for p in pts]
        if not any(ys):
            continue
        label = COMPONENT_LABELS.get(comp, comp)
        data.append(dict(type="scatter", mode="lines", stackgroup="one", name=label, x=xs, y=[b / scale for b in ys],
                         line=dict(width=0.5, color=COLORS.get(comp)), customdata=[format_bytes(b, unit) for b in ys],
                         hovertemplate=f"{label}: %{{customdata}}<extra>%{{x}}</extra>"))
    data.append(dict(type="scatter", mode="lines+markers", name="Total per GPU", x=xs,
                     y=[p.total_bytes / scale for p in pts], line=dict(color="#31333f", width=2),
                     customdata=[format_bytes(p.total_bytes, unit) for p in pts],
                     hovertemplate="total: %{customdata}<extra>%{x}</extra>"))
    top = max((p.total_bytes for p in pts), default=0) / scale
    shapes, notes = [], []
    if gpu is not None and sw.capacity_bytes:
        cap = sw.capacity_bytes / scale
        top = max(top, cap)  # the whole curve and the GPU's line: nothing clipped
        for line, label in (hline(SAFE_FRACTION * cap, "#2a7a2a", "dot", "80%: safe band", True),
                            hline(cap, "#c53948", "solid", f"{gpu.name}", False)):
            shapes.append(line)
            notes.append(label)
    if sw.current in xs:
        shapes.append(dict(type="line", xref="x", x0=sw.current, x1=sw.current, yref="paper", y0=0, y1=1,
                           line=dict(color="#555", width=1, dash="dash")))
        notes.append(dict(xref="x", x=sw.current, yref="paper", y=1, text="now", showarrow=False, yanchor="bottom",
                          font=dict(size=11, color="#555")))
    layout = dict(CHART_STYLE, height=460, margin=dict(l=10, r=10, t=24, b=10), hovermode="x unified",
                  legend=dict(orientation="h", yanchor="top", y=-0.28, xanchor="left", x=0),
                  xaxis=dict(AXIS_GRID, title=dict(text=sw.label), type="log", tickvals=xs,
                             ticktext=[f"{x:,}" for x in xs]),
                  yaxis=dict(AXIS_GRID, title=dict(text=f"Memory per GPU ({UNIT_AXIS[unit]})"),
                             range=[0, top * 1.1 if top else 1]),
                  shapes=shapes, annotations=notes)
    return go.Figure(dict(data=data, layout=layout), _validate=False)


def timeline_figure(tl, unit: str = "GB") -> go.Figure:
    """One stacked bar per moment of the step (long-lived memory and the working set), the peak marked."""
    from calculator.core.units import UNIT_BYTES, format_bytes
    scale = UNIT_BYTES[unit]
    xs = [m.name for m in tl.moments]
    long = [m.long_lived_bytes for m in tl.moments]
    work = [m.working_bytes for m in tl.moments]
    data = [dict(type="bar", name="Long-lived (weights, states, KV so far)", x=xs, y=[b / scale for b in long],
                 marker=dict(color="#1f77b4"), customdata=[format_bytes(b, unit) for b in long],
                 hovertemplate="long-lived: %{customdata}<extra>%{x}</extra>"),
            dict(type="bar", name="Working set (activations, transients)", x=xs, y=[b / scale for b in work],
                 marker=dict(color="#d62728"), customdata=[format_bytes(b, unit) for b in work],
                 hovertemplate="working set: %{customdata}<extra>%{x}</extra>"),
            dict(type="scatter", mode="text", x=xs, y=[m.bytes / scale for m in tl.moments], showlegend=False,
                 text=["" if i == tl.peak_index else format_bytes(m.bytes, unit) for i, m in enumerate(tl.moments)],
                 textposition="top center", hoverinfo="skip")]
    peak = tl.peak
    top = max(m.bytes for m in tl.moments) / scale
    notes = [dict(x=peak.name, y=peak.bytes / scale, xref="x", yref="y",
                  text=f"<b>peak: {format_bytes(peak.bytes, unit)}</b>", showarrow=True, arrowhead=2, ax=0, ay=-30,
                  font=dict(color="#c53948", size=13), arrowcolor="#c53948")]
    what = "Allocated" if tl.measure == "peak_allocated_bytes" else "Total (nvidia-smi)"
    layout = dict(CHART_STYLE, barmode="stack", height=400, bargap=0.35, margin=dict(l=10, r=10, t=24, b=10),
                  legend=dict(orientation="h", yanchor="top", y=-0.15, xanchor="left", x=0),
                  xaxis=dict(AXIS_GRID), yaxis=dict(AXIS_GRID, title=dict(text=f"{what} per GPU ({UNIT_AXIS[unit]})"),
                                                range=[0, top * 1.25 if top else 1]),
                  annotations=notes)
    return go.Figure(dict(data=data, layout=layout), _validate=False)
