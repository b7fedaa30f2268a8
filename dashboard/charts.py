"""The stacked-bar breakdown as a Plotly `graph_objects` figure (plotly.express costs ~8x more per rerun).

One bar per pipeline stage when PP > 1, the selected GPU's capacity as a line, and the 80% band under it:
Fujii et al. 2024 report that none of 454 training runs whose estimate stayed under 80% of the GPU's
memory ran out of memory. Every number comes from the engine's Estimate; this module only draws it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import plotly.graph_objects as go

from dashboard.memo import LRU, deep_size

SAFE_FRACTION = 0.8  # Fujii et al. 2024 (calculator.core.sources.SOURCES["fujii"])
UNIT_AXIS = {"GB": "GB = 10⁹ bytes", "GiB": "GiB = 2³⁰ bytes"}

# One colour per component, stable across views (so screenshots in planning docs stay comparable).
COLORS = {
    "weights": "#1f77b4", "master_weights": "#aec7e8", "gradients": "#ff7f0e", "optimizer_states": "#2ca02c",
    "activations": "#d62728", "logits": "#ff9896", "kv_cache": "#9467bd", "transient": "#c5b0d5",
    "sharding_buffers": "#dbdb8d", "comm_buffers": "#8c564b", "fragmentation": "#c49c94", "cuda_context": "#7f7f7f",
    "framework_overhead": "#bcbd22",
}


def stage_label(stage, n_stages: int) -> str:
    if n_stages == 1:
        return "per GPU"
    first, last = stage.layers
    return f"stage {stage.stage} (layers {first}–{last - 1})" if last > first else f"stage {stage.stage}"


# A small explicit white style instead of a named template: loading "plotly_white" costs ~6 ms a rerun, and an
# explicit style renders the same on screen (theme=None) and in the PNG of the chart's toolbar.
AXIS_GRID = dict(gridcolor="#e8e8e8", zerolinecolor="#c8c8c8", linecolor="#c8c8c8", automargin=True)
CHART_STYLE = dict(template=dict(layout=dict()), paper_bgcolor="white", plot_bgcolor="white",
              font=dict(family="Source Sans Pro, Helvetica, Arial, sans-serif", size=13, color="#31333f"))


def hline(y: float, color: str, dash: str, text: str, below: bool) -> tuple[dict, dict]:
    """A full-width horizontal line (shape) and its right-aligned label (annotation), as plain layout dicts."""
    line = dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=y, y1=y,
                line=dict(color=color, width=2 if dash == "solid" else 1.5, dash=dash))
    label = dict(xref="paper", x=1, yref="y", y=y, text=text, showarrow=False, xanchor="right", align="right",
                 yanchor="top" if below else "bottom", font=dict(size=11, color=color),
                 bgcolor="rgba(255,255,255,0.85)")
    return line, label


@dataclass(frozen=True)
class Breakdown:
    """What the breakdown chart shows, in bytes: the page's Plotly figure and the PDF's vector chart
    (dashboard/pdf_chart.py) both draw this, so the two cannot disagree."""
    stages: tuple[str, ...]                                 # one bar per pipeline stage (stage_label)
    series: tuple[tuple[str, str, str, tuple[int, ...]], ...]  # (component, label, colour, bytes per stage)
    totals: tuple[int, ...]                                 # the total above each bar
    gpu_name: str = ""                                      # the selected GPU's line, if any
    capacity_bytes: int = 0

    @property
    def safe_bytes(self) -> float:
        return SAFE_FRACTION * self.capacity_bytes


def breakdown_data(est, gpu=None) -> Breakdown:
    """The stacked components of every pipeline stage (only those non-zero somewhere), totals, the GPU's line."""
    from calculator.core.result import COMPONENT_LABELS, COMPONENTS
    per_stage = [s.components for s in est.stages]
    series = []
    for comp in COMPONENTS:
        values = tuple(c.get(comp, 0) for c in per_stage)
        if any(values):
            series.append((comp, COMPONENT_LABELS.get(comp, comp), COLORS.get(comp, "#7f7f7f"), values))
    return Breakdown(tuple(stage_label(s, len(est.stages)) for s in est.stages), tuple(series),
                     tuple(s.total_bytes for s in est.stages), gpu.name if gpu is not None else "",
                     gpu.memory_bytes if gpu is not None else 0)


def breakdown_figure(est, unit: str = "GB", gpu=None, title: str | None = None, height: int = 480,
                     side_legend: bool = False) -> go.Figure:
    """Stacked bar of every component, one bar per pipeline stage; `gpu` (a catalogue GPU) adds its capacity.
    `side_legend`: the legend to the right of the plot (the page's compact view), else under it."""
    from calculator.core.units import UNIT_BYTES, format_bytes

    scale = UNIT_BYTES[unit]
    b = breakdown_data(est, gpu)
    stages, xs = est.stages, list(b.stages)
    data = []
    for _comp, label, color, values in b.series:
        data.append(dict(
            type="bar", name=label, x=xs, y=[v / scale for v in values], marker=dict(color=color),
            customdata=[format_bytes(v, unit) for v in values],
            hovertemplate=f"{label}: %{{customdata}}<extra>%{{x}}</extra>"))
    totals = list(b.totals)
    top = max(totals) / scale if totals else 0
    data.append(dict(  # the total above each bar
        type="scatter", x=xs, y=[t / scale for t in totals], mode="text", text=[format_bytes(t, unit) for t in totals],
        textposition="top center", showlegend=False, hoverinfo="skip", name="total"))
    shapes, notes = [], []
    if gpu is not None:
        cap = gpu.memory_bytes / scale
        safe = SAFE_FRACTION * cap
        top = max(top, cap)
        shapes.append(dict(type="rect", xref="paper", x0=0, x1=1, yref="y", y0=0, y1=safe, fillcolor="#2ca02c",
                           opacity=0.07, line=dict(width=0), layer="below"))
        for line, label in (hline(safe, "#2a7a2a", "dot", "80%: safe band<br>(Fujii et al. 2024)", True),
                            hline(cap, "#c53948", "solid", f"{gpu.name}<br>{format_bytes(gpu.memory_bytes, unit)}",
                                   False)):
            shapes.append(line)
            notes.append(label)
    layout = dict(
        CHART_STYLE, barmode="stack", height=height, bargap=0.5 if len(stages) == 1 else 0.3,
        title=dict(text=title or "", x=0, xanchor="left", font=dict(size=15)),
        margin=dict(l=10, r=10, t=48 if title else 16, b=10),
        legend=dict(orientation="v", yanchor="top", y=1, xanchor="left", x=1.02, traceorder="reversed",
                    font=dict(size=12)) if side_legend else
        dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0, traceorder="normal"),
        yaxis=dict(AXIS_GRID, title=dict(text=f"Memory per GPU ({UNIT_AXIS[unit]})"),
                   range=[0, top * 1.12 if top else 1]),
        xaxis=dict(AXIS_GRID), hovermode="closest", shapes=shapes, annotations=notes)
    # Plain dicts, built without plotly's per-property validation (~5 ms a rerun). tests/dashboard/test_dashboard_charts.py
    # validates the same figure with go.Figure(fig.to_dict()), so a wrong property still fails a test.
    return go.Figure(dict(data=data, layout=layout), _validate=False)


class _FrozenFigure(go.Figure):
    """A figure whose to_dict() is computed once: st.plotly_chart calls to_dict() (a deep copy) on every rerun,
    and only reads the result. Shared between sessions by breakdown_figure_cached: never mutate one."""

    def __init__(self, fig: go.Figure):
        super().__init__(fig.to_dict(), _validate=False)
        self._frozen = fig.to_dict()

    def to_dict(self) -> dict:
        return self._frozen


_FIGURES = LRU(256, max_bytes=24 * 2**20, sizeof=lambda f: 3 * deep_size(f.to_dict()))  # ~75 kB each


def figure_key(est, unit: str, gpu=None, title: str | None = None, *style) -> tuple:
    """Everything breakdown_figure draws: per stage its layers, components and total; the unit; the GPU line."""
    stages = tuple((s.stage, tuple(s.layers), tuple(sorted(s.components.items())), s.total_bytes) for s in est.stages)
    return (stages, unit, (gpu.id, gpu.name, gpu.memory_bytes) if gpu is not None else None, title, style)


def breakdown_figure_cached(est, unit: str = "GB", gpu=None, title: str | None = None, height: int = 480,
                            side_legend: bool = False) -> go.Figure:
    """breakdown_figure, built once per distinct figure_key (an LRU shared by all sessions; the page's rerun no
    longer pays for building the figure, nor for st.plotly_chart's copy of it)."""
    return _FIGURES.get_or_build(figure_key(est, unit, gpu, title, height, side_legend),
                                 lambda: _FrozenFigure(breakdown_figure(est, unit, gpu, title, height, side_legend)))


def png_filename(values: dict) -> str:
    """A filename that says what the chart shows: gpu-memory_llama-3.1-8b_train_h100-sxm_tp1-pp1-dp1_z0."""
    model = values.get("model", "model")
    parts = ["gpu-memory", model, values.get("mode", "train"), values.get("gpu", "gpu"),
             f"tp{values.get('tp', 1)}-pp{values.get('pp', 1)}-dp{values.get('dp', 1)}", f"z{values.get('zero', 0)}",
             f"b{values.get('mbs', 1)}-s{values.get('seq', 0)}"]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "_".join(str(p) for p in parts))


def plotly_config(values: dict) -> dict:
    """Chart toolbar config: the PNG download gets a meaningful filename and 2x scale."""
    return {"displaylogo": False,
            "toImageButtonOptions": {"format": "png", "filename": png_filename(values), "scale": 2}}
