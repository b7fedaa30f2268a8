"""The stacked-bar breakdown as a Plotly `graph_objects` figure (plotly.express costs ~8x more per rerun).

One bar per pipeline stage when PP > 1, the selected GPU's capacity as a line, and the 80% band under it:
Fujii et al. 2024 report that none of 454 training runs whose estimate stayed under 80% of the GPU's
memory ran out of memory. Every number comes from the engine's Estimate; this module only draws it.
"""
from __future__ import annotations

import re

import plotly.graph_objects as go

SAFE_FRACTION = 0.8  # Fujii et al. 2024 (calculator.sources.SOURCES["fujii"])
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


def breakdown_figure(est, unit: str = "GB", gpu=None, title: str | None = None) -> go.Figure:
    """Stacked bar of every component, one bar per pipeline stage; `gpu` (a catalogue GPU) adds its capacity."""
    from calculator.result import COMPONENT_LABELS, COMPONENTS
    from calculator.units import UNIT_BYTES, format_bytes

    scale = UNIT_BYTES[unit]
    stages = est.stages
    xs = [stage_label(s, len(stages)) for s in stages]
    per_stage = [s.components for s in stages]
    fig = go.Figure()
    for comp in COMPONENTS:
        values = [c.get(comp, 0) for c in per_stage]
        if not any(values):
            continue
        label = COMPONENT_LABELS.get(comp, comp)
        fig.add_trace(go.Bar(
            name=label, x=xs, y=[b / scale for b in values], marker_color=COLORS.get(comp),
            customdata=[format_bytes(b, unit) for b in values],
            hovertemplate=f"{label}: %{{customdata}}<extra>%{{x}}</extra>"))
    totals = [s.total_bytes for s in stages]
    top = max(totals) / scale if totals else 0
    fig.add_trace(go.Scatter(  # the total above each bar
        x=xs, y=[t / scale for t in totals], mode="text", text=[format_bytes(t, unit) for t in totals],
        textposition="top center", showlegend=False, hoverinfo="skip", name="total"))
    if gpu is not None:
        cap = gpu.memory_bytes / scale
        safe = SAFE_FRACTION * cap
        top = max(top, cap)
        fig.add_hrect(y0=0, y1=safe, fillcolor="#2ca02c", opacity=0.07, line_width=0, layer="below")
        fig.add_hline(y=safe, line_dash="dot", line_color="#2ca02c", line_width=1.5,
                      annotation_text="80%: safe band<br>(Fujii et al. 2024)", annotation_align="right",
                      annotation_position="bottom right", annotation_font_size=11,
                      annotation_font_color="#2a7a2a", annotation_bgcolor="rgba(255,255,255,0.85)")
        fig.add_hline(y=cap, line_color="#c53948", line_width=2,
                      annotation_text=f"{gpu.name}<br>{format_bytes(gpu.memory_bytes, unit)}",
                      annotation_align="right", annotation_position="top right", annotation_font_size=11,
                      annotation_font_color="#c53948", annotation_bgcolor="rgba(255,255,255,0.85)")
    fig.update_layout(
        barmode="stack", template="plotly_white", height=480, bargap=0.5 if len(stages) == 1 else 0.3,
        title=dict(text=title, x=0, xanchor="left", font_size=15) if title else None,
        margin=dict(l=10, r=10, t=48 if title else 16, b=10),
        legend=dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0, traceorder="normal"),
        yaxis=dict(title=f"Memory per GPU ({UNIT_AXIS[unit]})", range=[0, top * 1.12 if top else 1],
                   rangemode="tozero"),
        xaxis=dict(title=None),
        hovermode="closest",
    )
    return fig


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
