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
    (dashboard/pdf_chart.py) both draw this, so the two cannot disagree. Each bar is what one GPU holds at one
    moment of the step (calculator.planning.timeline.live_sets): a training step's forward end, backward pass and
    optimizer step; with pipeline stages, each stage at its own peak. The peak bar's total is the estimate's
    total per GPU."""
    stages: tuple[str, ...]                                 # one bar per moment or stage: its x label
    series: tuple[tuple[str, str, str, tuple[int, ...]], ...]  # (component, label, colour, bytes per bar)
    totals: tuple[int, ...]                                 # the total above each bar
    gpu_name: str = ""                                      # the selected GPU's line, if any
    capacity_bytes: int = 0                                 # what PyTorch can allocate on it (GPU.usable_bytes)
    moments: tuple[str, ...] = ()                           # the moment of each bar ("optimizer step", "peak", ...)
    peak_bar: int = 0                                       # the bar whose total is the estimate's total
    note: str = ""                                          # where the peak is, and which levers act on it

    @property
    def safe_bytes(self) -> float:
        return SAFE_FRACTION * self.capacity_bytes


def peak_note(moment: str, bars: int) -> str:
    """Which levers lower the peak, from the moment it is taken at (calculator/stages/moments.py)."""
    if bars < 2:
        return ""
    if moment == "optimizer step":
        return ("Peak at the optimizer step, after the activations are freed: recompute, micro-batch and sequence "
                "lower the other bars, not the peak")
    if moment.split(" (")[0] in ("rollout", "scoring", "training"):
        return f"Peak in the {moment.split(' (')[0]} phase of the RL step"
    if moment == "backward pass":
        return "Peak in the backward pass: recompute, a smaller micro-batch or a shorter sequence lower it"
    return f"Peak at the {moment}"


def _rl_sets(rl) -> tuple:
    """RL post-training: each phase of the step (rollout, scoring, training) with its terms (calculator/stages/rl.py)."""
    from calculator.planning.timeline import LiveSet
    return tuple(LiveSet(p.name if p.where == "every GPU" else f"{p.name} ({p.where})", tuple(p.terms),
                         p.name == rl.peak_phase) for p in rl.phases)


def breakdown_data(est, gpu=None) -> Breakdown:
    """The stacked components of every bar (only those non-zero somewhere), totals, the GPU's line (its
    PyTorch-allocatable capacity)."""
    from calculator.core.result import COMPONENT_LABELS, COMPONENTS
    from calculator.planning.timeline import live_sets
    n = len(est.stages)
    labels, moments, per_bar, totals, peak_bar, worst_moments = [], [], [], [], 0, 0
    for i, s in enumerate(est.stages):
        sets = live_sets(s) if est.rl is None else _rl_sets(est.rl)
        if i == est.worst_stage:
            worst_moments = len(sets)
        if n > 1:  # pipeline stages: each at its own peak ("stage 1 · backward pass"); their moments: the timeline
            sets = tuple(x for x in sets if x.is_peak)
        for x in sets:
            name = x.name if x.name != "peak" else ""
            label = " · ".join(p for p in (f"stage {s.stage}" if n > 1 else "", name) if p) or "per GPU"
            if i == est.worst_stage and x.is_peak:
                peak_bar = len(labels)
                label += " · peak" if len(sets) > 1 or n > 1 else ""
            comps = dict.fromkeys(COMPONENTS, 0)
            for t in x.terms:
                comps[t.component] += t.bytes
            labels.append(label)
            moments.append(x.name)
            per_bar.append(comps)
            totals.append(x.bytes)
    series = []
    for comp in COMPONENTS:
        values = tuple(c.get(comp, 0) for c in per_bar)
        if any(values):
            series.append((comp, COMPONENT_LABELS.get(comp, comp), COLORS.get(comp, "#7f7f7f"), values))
    return Breakdown(tuple(labels), tuple(series), tuple(totals), gpu.name if gpu is not None else "",
                     gpu.usable_bytes if gpu is not None else 0, tuple(moments), peak_bar,
                     peak_note(moments[peak_bar] if moments else "", worst_moments))


def breakdown_figure(est, unit: str = "GB", gpu=None, title: str | None = None, height: int = 480,
                     side_legend: bool = False) -> go.Figure:
    """Stacked bar of every component, one bar per moment of the step and pipeline stage (breakdown_data), the
    peak's bar in full colour; `gpu` (a catalogue GPU) adds its allocatable capacity.
    `side_legend`: the legend to the right of the plot (the page's compact view), else under it."""
    from calculator.core.units import UNIT_BYTES, format_bytes

    scale = UNIT_BYTES[unit]
    b = breakdown_data(est, gpu)
    xs = [x.replace(" · ", "<br>") for x in b.stages]  # "stage 1<br>backward pass<br>peak"
    if len(xs) > 3:  # narrow bars: one word a line
        xs = [x.replace(" pass", "").replace(" step", "<br>step").replace(" end", "<br>end") for x in xs]
    # the bars of other moments than the peak are paler: the peak's bar is the figure the page states
    opacity = [1.0 if i == b.peak_bar or len(xs) == 1 else 0.55 for i in range(len(xs))]
    data = []
    for _comp, label, color, values in b.series:
        data.append(dict(
            type="bar", name=label, x=xs, y=[v / scale for v in values], marker=dict(color=color, opacity=opacity),
            customdata=[format_bytes(v, unit) for v in values],
            hovertemplate=f"{label}: %{{customdata}}<extra>%{{x}}</extra>"))
    totals = list(b.totals)
    top = max(totals) / scale if totals else 0
    data.append(dict(  # the total above each bar
        type="scatter", x=xs, y=[t / scale for t in totals], mode="text", text=[format_bytes(t, unit) for t in totals],
        textposition="top center", showlegend=False, hoverinfo="skip", name="total"))
    shapes, notes = [], []
    if gpu is not None:
        cap = b.capacity_bytes / scale
        safe = SAFE_FRACTION * cap
        top = max(top, cap)
        shapes.append(dict(type="rect", xref="paper", x0=0, x1=1, yref="y", y0=0, y1=safe, fillcolor="#2ca02c",
                           opacity=0.07, line=dict(width=0), layer="below"))
        for line, label in (hline(safe, "#2a7a2a", "dot", "80%: safe band<br>(Fujii et al. 2024)", True),
                            hline(cap, "#c53948", "solid",
                                  f"{gpu.name}: {format_bytes(b.capacity_bytes, unit)}<br>PyTorch can allocate",
                                  False)):
            shapes.append(line)
            notes.append(label)
    own_title = bool(title)
    title = title or (_wrap(b.note) if b.note else "")  # else the chart says where the peak is, and why
    layout = dict(
        CHART_STYLE, barmode="stack", height=height, bargap=0.5 if len(xs) == 1 else 0.3,
        title=dict(text=title or "", x=0, xanchor="left", font=dict(size=15 if own_title else 12)),
        margin=dict(l=10, r=10, t=(16 + 16 * title.count("<br>") + 24) if title else 16, b=10),
        legend=dict(orientation="v", yanchor="top", y=1, xanchor="left", x=1.02, traceorder="reversed",
                    font=dict(size=12)) if side_legend else
        dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0, traceorder="normal"),
        yaxis=dict(AXIS_GRID, title=dict(text=f"Memory per GPU ({UNIT_AXIS[unit]})"),
                   range=[0, top * 1.12 if top else 1]),
        xaxis=dict(AXIS_GRID, tickangle=0), hovermode="closest", shapes=shapes, annotations=notes)
    # Plain dicts, built without plotly's per-property validation (~5 ms a rerun). tests/dashboard/test_dashboard_charts.py
    # validates the same figure with go.Figure(fig.to_dict()), so a wrong property still fails a test.
    return go.Figure(dict(data=data, layout=layout), _validate=False)


def _wrap(text: str, width: int = 88) -> str:
    """A chart title in lines of at most `width` characters (Plotly does not wrap titles)."""
    import textwrap
    return "<br>".join(textwrap.wrap(text, width))


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
    """Everything breakdown_figure draws: its data (every bar's components and total, the moments, the GPU line);
    the unit; the title and style."""
    return (breakdown_data(est, gpu), unit, gpu.id if gpu is not None else None, title, style)


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
