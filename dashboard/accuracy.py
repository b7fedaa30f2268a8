"""What the Accuracy page shows, as plain data (no streamlit here, so it is unit-tested directly):

- the golden matrix: the engine against the byte-exact traces of real `transformers` code in tests/golden/
  (`validation.trace.compare`, engine only, no torch);
- the published comparison: the engine against published GPU measurements (validation/published_comparison.json,
  written by `python -m validation.published.compare`), and the calibrated constants of validation/CALIBRATION.md.

Every number comes from those modules and files; nothing here is typed in by hand.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED_JSON = ROOT / "validation" / "published_comparison.json"
GPU_JSON = ROOT / "validation" / "gpu_comparison.json"
CALIBRATION_MD = ROOT / "validation" / "CALIBRATION.md"

# The quantities a golden file measures, in display order, with what each is.
QUANTITIES: dict[str, str] = {
    "parameters": "Parameters (count)",
    "weights": "Weights",
    "master_weights": "Master weights",
    "gradients": "Gradients",
    "optimizer_states": "Optimizer states",
    "kv_cache": "KV cache",
    "activations": "Activations (saved for backward, incl. loss head)",
    "peak_allocated": "Peak allocated",
}
# Persistent tensors whose size follows from shapes and dtypes alone: the engine should get them to the byte.
MODEL_STATES = ("parameters", "weights", "master_weights", "gradients", "optimizer_states")

EXCLUDED_REASON = ("traced with PyTorch's CPU SDPA kernel (`attention=sdpa`), which saves other tensors than "
                   "CUDA's flash / memory-efficient / cuDNN kernels; the engine models FlashAttention-2 and eager "
                   "attention, so these cases are kept in tests/golden/ but not compared")

# What a published metric is compared with (the `metric` column of published_comparison.json's rows).
METRIC_MEANING: dict[str, str] = {
    "peak_allocated": "torch.cuda.max_memory_allocated() vs the engine's peak allocated (no CUDA context, no "
                      "allocator slack)",
    "peak_allocated (Σ over GPUs)": "torch.cuda.max_memory_allocated() summed over the GPUs of a device_map run vs "
                                    "the engine's pipeline stages summed",
    "total (nvidia-smi)": "nvidia-smi \"used\" vs the engine's total per GPU (peak allocated + fragmentation + "
                          "CUDA context)",
    "model_states": "DeepSpeed's estimate_zero*_model_states_mem_needs vs the engine's model-state components",
    "model_states (+ ZeRO-3 gather)": "DeepSpeed's ZeRO-3 estimator vs the engine's model states plus its ZeRO-3 "
                                      "gather buffer",
    "optimizer-state delta vs fused AdamW": "the difference of two torchao peak-memory rows vs the engine's "
                                            "optimizer-state component (AdamW bf16 − low-bit states)",
    "GPU 0 use": "accelerate's per-GPU device_map placement (not comparable: balanced to max_memory)",
    "GPU 1 use": "accelerate's per-GPU device_map placement (not comparable: balanced to max_memory)",
}


# ---- golden matrix ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Headline:
    cases: int
    architectures: tuple[str, ...]
    model_states_worst_pct: float  # worst |error| over MODEL_STATES (0.0 = exact)
    activations_worst_pct: float | None
    peak_worst_pct: float | None
    excluded: int

    @property
    def model_states_exact(self) -> bool:
        return self.model_states_worst_pct == 0.0


def case_meta(goldens: list[dict]) -> dict[str, dict[str, Any]]:
    """case id -> what the filters need: architecture, mode (train / LoRA train / infer), attention, recompute."""
    out = {}
    for g in goldens:
        run = g["run"]
        mode = run["mode"]
        if mode == "train" and run.get("finetune", "full") != "full":
            mode = f"{run['finetune']} train"
        out[g["id"]] = {"architecture": g["model"]["model_type"], "mode": mode, "attention": run["attention"],
                        "recompute": run.get("recompute") or "none", "batch": run["micro_batch"],
                        "seq": run["seq_len"]}
    return out


def headline(s: dict) -> Headline:
    """The page's headline from validation.trace.compare.summary()."""
    pq = s["per_quantity"]
    states = [pq[q]["worst_abs_error_pct"] for q in MODEL_STATES if q in pq]

    def worst(q):
        return pq[q]["worst_abs_error_pct"] if q in pq else None
    return Headline(s["cases"], tuple(s["architectures"]), max(states) if states else float("nan"),
                    worst("activations"), worst("peak_allocated"), len(s["excluded"]))


def per_quantity_rows(s: dict) -> list[dict[str, Any]]:
    """One row per quantity: n, median and worst |error| %, and the case that sets the worst."""
    worst_case: dict[str, tuple[float, str]] = {}
    for case, q, _, _, err in s["rows"]:
        if q not in worst_case or abs(err) > worst_case[q][0]:
            worst_case[q] = (abs(err), case)
    order = [q for q in QUANTITIES if q in s["per_quantity"]] + [q for q in s["per_quantity"] if q not in QUANTITIES]
    return [{"Quantity": QUANTITIES.get(q, q), "key": q, "Cases": s["per_quantity"][q]["n"],
             "Median |error| %": s["per_quantity"][q]["median_abs_error_pct"],
             "Worst |error| %": s["per_quantity"][q]["worst_abs_error_pct"],
             "Worst case": worst_case[q][1] if worst_case[q][0] > 0 else "—"} for q in order]


def case_rows(s: dict, meta: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every (case, quantity) comparison with its filter columns."""
    rows = []
    for case, q, meas, pred, err in s["rows"]:
        m = meta.get(case, {})
        rows.append({"Case": case, "Architecture": m.get("architecture", "?"), "Mode": m.get("mode", "?"),
                     "Attention": m.get("attention", "?"), "Recompute": m.get("recompute", "?"),
                     "Quantity": q, "Measured": meas, "Predicted": pred, "Error %": err})
    return rows


def excluded_rows(s: dict, meta: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"Case": case, "Architecture": meta.get(case, {}).get("architecture", "?"),
             "Mode": meta.get(case, {}).get("mode", "?"), "Reason": EXCLUDED_REASON} for case in s["excluded"]]


def scatter_figure(s: dict):
    """Predicted vs measured, one marker trace per quantity, log axes, and the y = x diagonal.

    Both axes get the same log range, so the diagonal drawn in paper coordinates from (0, 0) to (1, 1) is exactly
    y = x; it is a shape, not a trace, so the figure has one trace per quantity."""
    import math

    import plotly.graph_objects as go

    from dashboard.charts import COLORS, AXIS_GRID, CHART_STYLE
    by_q: dict[str, list[tuple]] = {}
    for case, q, meas, pred, err in s["rows"]:
        if meas > 0 and pred > 0:  # log axes
            by_q.setdefault(q, []).append((case, meas, pred, err))
    values = [v for pts in by_q.values() for p in pts for v in p[1:3]]
    lo, hi = (math.log10(min(values)), math.log10(max(values))) if values else (0.0, 1.0)
    pad = 0.05 * (hi - lo or 1.0)
    rng = [lo - pad, hi + pad]
    colors = dict(COLORS, parameters="#17becf", peak_allocated="#000000", master_weights="#7f7f7f")
    order = [q for q in QUANTITIES if q in by_q] + [q for q in by_q if q not in QUANTITIES]
    data = []
    for q in order:
        pts = by_q[q]
        data.append(dict(
            type="scatter", mode="markers", name=QUANTITIES.get(q, q), x=[p[1] for p in pts], y=[p[2] for p in pts],
            text=[p[0] for p in pts], customdata=[p[3] for p in pts],
            marker=dict(color=colors.get(q), size=7, opacity=0.75, line=dict(width=0.5, color="white")),
            hovertemplate="%{text}<br>measured %{x:,}<br>predicted %{y:,}<br>error %{customdata:+.3f}%<extra>"
                          + QUANTITIES.get(q, q) + "</extra>"))
    axis = dict(AXIS_GRID, type="log", range=rng, exponentformat="SI")  # 1G, 1T (not "1B": B reads as bytes)
    layout = dict(
        CHART_STYLE, height=560, margin=dict(l=10, r=10, t=16, b=10), hovermode="closest",
        xaxis=dict(axis, title=dict(text="measured (bytes; parameters: count)")),
        yaxis=dict(axis, title=dict(text="predicted by the engine")),
        legend=dict(orientation="v", yanchor="top", y=1, xanchor="left", x=1.02),
        shapes=[dict(type="line", xref="paper", yref="paper", x0=0, y0=0, x1=1, y1=1, layer="below",
                     line=dict(color="#c8c8c8", width=1.5, dash="dash"))],
        annotations=[dict(xref="paper", yref="paper", x=0.75, y=0.7, text="y = x", showarrow=False,
                          xanchor="left", yanchor="top", font=dict(size=11, color="#888888"))])
    return go.Figure(dict(data=data, layout=layout), _validate=False)


# ---- published measurements ---------------------------------------------------------------------------------------
def load_published(path: Path = PUBLISHED_JSON) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def group_rows(pub: dict) -> list[dict[str, Any]]:
    """One row per source group: what it compares, rows, comparable, median / worst |error| %, the bound."""
    metrics: dict[str, list[str]] = {}
    sources: dict[str, str] = {}
    for r in pub["rows"]:
        ms = metrics.setdefault(r["group"], [])
        if r["metric"] not in ms:
            ms.append(r["metric"])
        sources.setdefault(r["group"], r["source"])
    out = []
    for g in pub["groups"]:
        name = g["group"]
        out.append({"Group": name, "Rows": g["rows"], "Comparable": g["comparable"],
                    "Median |error| %": g["median_abs_error_pct"], "Worst |error| %": g["worst_abs_error_pct"],
                    "Worst row": g["worst_id"] or "", "Bound ±%": g.get("bound_pct"),
                    "Metric": ", ".join(metrics.get(name, [])), "Source": sources.get(name, "")})
    return out


def published_rows(pub: dict) -> list[dict[str, Any]]:
    return [{"Id": r["id"], "Group": r["group"], "Model": r["model"], "Metric": r["metric"],
             "Measured (bytes)": r["measured_bytes"], "Estimated (bytes)": r["estimated_bytes"],
             "Error %": r["error_pct"], "Comparable": r["comparable"], "Configuration": r["config"],
             "Note": r["note"] if r["comparable"] else "; ".join(x for x in (r["why_not"], r["note"]) if x)}
            for r in pub["rows"]]


def published_headline(pub: dict) -> dict[str, Any]:
    """Rows, comparable rows, and the groups held to a bound with their worst error."""
    comparable = [r for r in pub["rows"] if r["comparable"]]
    bounded = [g for g in pub["groups"] if g.get("bound_pct") is not None and g["comparable"]]
    return {"rows": len(pub["rows"]), "comparable": len(comparable), "groups": len(bounded),
            "within_bound": sum(1 for g in bounded if g["worst_abs_error_pct"] <= g["bound_pct"])}


def calibrated_constants_markdown(path: Path = CALIBRATION_MD) -> str | None:
    """The "Calibrated constants" table of CALIBRATION.md, as Markdown (None if the section is not there)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    m = re.search(r"^## Calibrated constants\s*\n(.*?)(?=^#{2,3} )", text, re.S | re.M)
    return m.group(1).strip() if m else None


@lru_cache(maxsize=1)
def _timing_comparisons() -> tuple:
    from validation.gpu import timing_compare
    return tuple(timing_compare.comparisons())


def timing_rows() -> list[dict[str, Any]]:
    """One row per timed H200 case: measured and estimated seconds (validation/gpu/timing_compare.py)."""
    return [{"Case": r["id"], "Group": r["group"], "Measured (s)": round(r["measured_s"], 4),
             "Estimated (s)": round(r["estimated_s"], 4), "Error %": 100 * r["error"]}
            for r in _timing_comparisons()]


def timing_group_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per group: cases, median and worst |error| (issue 9's bound: 20% median)."""
    import statistics
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(r["Group"], []).append(abs(r["Error %"]))
    return [{"Group": g, "Timed cases": len(v), "Median |error| %": round(statistics.median(v), 1),
             "Worst |error| %": round(max(v), 1)} for g, v in groups.items()]


@lru_cache(maxsize=1)
def _throughput_comparisons() -> tuple:
    from validation.published import throughput
    cases, skipped = throughput.load()
    results, refused = throughput.evaluate(cases)
    return tuple(results), tuple(skipped) + tuple(refused)


def throughput_group_rows() -> list[dict[str, Any]]:
    """Per source of published multi-GPU throughput (validation/published/throughput/): runs compared, the
    median and worst |error| of the step time, the median signed error; then the fit and held-out sets."""
    from validation.published.throughput import summary
    results, _ = _throughput_comparisons()
    out = []
    for group, (n, median, worst, signed) in summary(results).items():
        fit = {"fit": "fitted", "held out": "held out", "all": "all"}.get(group)
        if fit is None:
            fit = "fitted" if any(r.case.fit for r in results if r.case.group == group) else "held out"
        out.append({"Group": group, "Rows": n, "Set": fit, "Median |error| %": round(median, 1),
                    "Worst |error| %": round(worst, 1), "Median error %": round(signed, 1)})
    return out


def throughput_rows() -> list[dict[str, Any]]:
    """One row per compared published run: published and estimated step time, error, what bounds the step."""
    results, _ = _throughput_comparisons()
    return [{"Row": r.case.id, "Run": r.case.label, "Group": r.case.group, "Set": "fitted" if r.case.fit else
             "held out", "Published (s)": round(r.case.published_step_s, 3), "Estimated (s)": round(r.estimated_s, 3),
             "Error %": round(r.error_pct, 1), "Bottleneck": r.bottleneck, "Note": r.note}
            for r in sorted(results, key=lambda r: (r.case.group, r.case.id))]


def throughput_skipped_rows() -> list[dict[str, Any]]:
    _, skipped = _throughput_comparisons()
    return [{"Row": s.id, "Run": s.label, "Group": s.group, "Why not compared": s.reason} for s in skipped]


def load_gpu_matrix(path: Path = GPU_JSON) -> dict:
    """validation/gpu_comparison.json: the engine against the real-GPU goldens (python -m validation.gpu.compare)."""
    return json.loads(path.read_text(encoding="utf-8"))


def gpu_group_rows(data: dict) -> list[dict[str, Any]]:
    """Per training stack / model implementation / kind of run: peak allocated and nvidia-smi errors."""
    return [{"Stack / implementation / kind": g["group"], "Runs": g["cases"], "Peak compared": g["peak_n"],
             "Peak median |error| %": g["peak_median_pct"], "Peak worst |error| %": g["peak_worst_pct"],
             "nvidia-smi median |error| %": g["smi_median_pct"], "nvidia-smi worst |error| %": g["smi_worst_pct"]}
            for g in data["groups"]]


def gpu_case_rows(data: dict) -> list[dict[str, Any]]:
    return [{"Run": c["id"], "Group": c["group"], "Measured peak (GB)": _gb(c["measured_peak"]),
             "Engine peak (GB)": _gb(c["engine_peak"]), "Peak error %": c["peak_err_pct"],
             "Measured nvidia-smi (GB)": _gb(c["measured_smi"]), "Engine total (GB)": _gb(c["engine_smi"]),
             "nvidia-smi error %": c["smi_err_pct"], "Not described yet": c["error"]} for c in data["cases"]]


def _gb(v: int | None) -> float | None:
    return None if v is None else round(v / 1e9, 2)


@lru_cache(maxsize=1)
def published_stack_rows() -> tuple[dict[str, Any], ...]:
    """torchtitan's FSDP2 and ms-swift's DeepSpeed / Megatron-SWIFT published runs against the engine with the stack
    named (validation/published/stacks.py)."""
    from validation.published.stacks import compare
    return tuple({"Row": r.id, "Source": r.source, "Stack": r.stack, "Implementation": r.impl,
                  "Figure": r.figure if r.comparable else f"{r.figure}, not held to the bound",
                  "Measured reserved (GiB)": round(r.measured / 2**30, 1),
                  "Engine reserved (GiB)": round(r.estimated / 2**30, 1), "Error %": round(r.error_pct, 1),
                  "Command": "python -m calculator " + " ".join(r.argv)} for r in compare())


# ---- every architecture (validation/architectures/table.json) --------------------------------------------------
def load_architectures(path: Path | None = None) -> dict:
    """validation/architectures/table.json, written by `python -m validation.architectures` (read, never run)."""
    from validation.architectures import TABLE
    return json.loads((path or TABLE).read_text())


def architecture_rows(table: dict) -> list[dict[str, Any]]:
    """One row per supported model_type: its layer kinds, the parameter check, each kind's traced layer, the cache."""
    from validation.architectures import summary as arch
    out = []
    for row in table["rows"]:
        mixers, ffns = arch.kinds_of(row)
        acts = "; ".join(f"{k}: {arch.activation_cell(a)}" for k, a in row["activations"].items())
        out.append({"Model type": row["model_type"], "Mixer": ", ".join(sorted(mixers)) or "—",
                    "FFN": ", ".join(sorted(ffns)) or "—", "Parameters": arch.params_cell(row["parameters"]),
                    "Activations (one layer per kind)": acts or "not traced: " + row.get("refused", "—"),
                    "Cache after a prefill": arch.cache_cell(row["cache"]), "Config from": row.get("source", "")})
    return out


def architecture_kind_rows(table: dict) -> list[dict[str, Any]]:
    """kind → types, parameters exact n/N, and the traced layers' error (median |error|, worst, signed)."""
    from validation.architectures.summary import per_kind
    return [{"Kind": f"{g['role']}: {g['kind']}", "Types": g["n_types"],
             "Parameters exact": f"{g['params_exact']}/{g['n_types']}", "Layers traced": g["traced"],
             "Exact layers": g["exact_layers"], "Median |error| %": g["median_abs_pct"], "Worst error %": g["worst_pct"],
             "Not traced": g["not_traced"]} for g in per_kind(table)]
