"""Exports of one view: CSV and JSON of the breakdown and the inputs, and a one-page PDF capacity report.

The PDF is built by dashboard/pdf_report.py with fpdf2 alone (its chart drawn as vectors: no browser, no image).
"""
from __future__ import annotations

import csv
import datetime as _dt
import io
import json
from pathlib import Path
from typing import Any, Mapping

CSV_COLUMNS = ("section", "stage", "component", "item", "bytes", "value", "formula", "substituted", "source")
FORMAT_ID = "llm-gpu-memory-calculator/export-1"


def _jsonable(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


def breakdown_rows(est, unit: str = "GB") -> list[dict]:
    """One row per term of every pipeline stage (the engine's numbers, formatted in `unit`)."""
    from calculator.core.units import format_bytes
    rows = []
    for s in est.stages:
        for t in s.terms:
            rows.append({"stage": s.stage, "component": t.component, "item": t.label, "bytes": t.bytes,
                         "value": format_bytes(t.bytes, unit), "formula": t.formula,
                         "substituted": t.substituted, "source": t.source, "key": t.key, "note": t.note})
    return rows


def applies(key: str, values: Mapping[str, Any]) -> bool:
    """Whether an input has a say in this view: the architecture fields only for a custom model, config.json only
    for a pasted config, the totals only for a generic model, serving-engine inputs only for inference (those of
    vLLM / SGLang only under them), RL inputs only in RL, adapters only when fine-tuning with them, the optimizer
    only when training."""
    from dashboard.inputs.state import BY_KEY
    p = BY_KEY.get(key)
    model, mode, ft = values.get("model"), values.get("mode"), values.get("ft")
    group = p.group if p is not None else ""
    if group == "arch":
        return model == "custom"
    if group == "config":
        return model == "config"
    if group == "generic":
        return model == "generic"
    if key == "hf":
        return bool(values.get("hf"))
    if group == "serving":
        return mode == "infer" and (key == "eng" or values.get("eng") != "hf")
    if group == "rl":
        return mode == "rl"
    if key in ("ft", "opt", "oimpl"):
        return mode != "infer"
    if key in ("lr", "lt", "lad"):
        return mode != "infer" and ft in ("lora", "qlora")
    if key in ("kbit", "qkin"):
        return mode != "infer" and ft == "qlora"
    return True


def applicable_inputs(values: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs of `values` that apply to this view (see `applies`), in their order."""
    return {k: v for k, v in values.items() if applies(k, values)}


def to_csv(est, values: Mapping[str, Any], link: str = "", unit: str = "GB") -> str:
    """CSV: the inputs that apply to this view (section=input; the link and the JSON export carry every input), every
    term of every stage (section=term), the totals and the chosen GPU's verdict (section=fit)."""
    from calculator.core.units import format_bytes
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for key, value in applicable_inputs(values).items():
        w.writerow({"section": "input", "item": key, "value": _jsonable(value)})
    if link:
        w.writerow({"section": "input", "item": "link", "value": link})
    for r in breakdown_rows(est, unit):
        w.writerow({k: r[k] for k in CSV_COLUMNS if k in r} | {"section": "term"})
    for s in est.stages:
        w.writerow({"section": "total", "stage": s.stage, "item": "peak allocated",
                    "bytes": s.peak_allocated_bytes, "value": format_bytes(s.peak_allocated_bytes, unit)})
        w.writerow({"section": "total", "stage": s.stage, "item": "total per GPU", "bytes": s.total_bytes,
                    "value": format_bytes(s.total_bytes, unit)})
    for row in fit_rows(est, values.get("gpu"), unit):
        w.writerow(row)
    return buf.getvalue()


def fit_rows(est, gpu_id, unit: str = "GB") -> list[dict]:
    """The chosen GPU's verdict (section=fit), against the one capacity the page, the chart and the PDF use: what
    PyTorch can allocate (GPU.usable_bytes); the device total once, named as such."""
    from calculator.core.units import format_bytes
    from calculator.model.presets import get_gpu
    fit = next(iter(est.fits_on([gpu_id])), None) if gpu_id else None
    if fit is None:
        return []
    g = get_gpu(gpu_id)

    def row(item, n=None, value=None):
        return {"section": "fit", "stage": "", "item": item, "bytes": "" if n is None else n,
                "value": format_bytes(n, unit) if value is None else value}
    return [row("GPU", value=fit.name), row("capacity (PyTorch can allocate)", fit.capacity_bytes),
            row("device total (as reported; not a verdict's capacity)", g.memory_bytes),
            row("used", fit.used_bytes), row("share of capacity", value=f"{fit.utilization:.1%}"),
            row("headroom", fit.headroom_bytes), row("verdict", value=fit.verdict)]


def to_json(est, values: Mapping[str, Any], model=None, workload=None, link: str = "",
            source: Mapping[str, Any] | None = None) -> str:
    """JSON: the URL inputs, the engine inputs they became, and Estimate.to_dict(); `source` says where a model
    given by Hugging Face id came from (its checkpoint's exact parameter count...)."""
    doc = {
        "format": FORMAT_ID,
        "link": link,
        "inputs": {k: _jsonable(v) for k, v in values.items()},
        **({"model_source": dict(source)} if source else {}),
        "engine_inputs": {
            "model": model.model_dump(mode="json") if model is not None else None,
            "workload": workload.model_dump(mode="json") if workload is not None else None,
        },
        "estimate": est.to_dict(),
    }
    return json.dumps(doc, indent=2, ensure_ascii=False)


# Inputs every report states, whether or not they are at their defaults (the rest only when changed).
SUMMARY_KEYS = ("model", "mode", "ft", "recipe", "opt", "rc", "attn", "act", "zero", "tp", "pp", "dp", "cp", "ep",
                "mbs", "seq", "gpu")


def inputs_summary(values: Mapping[str, Any]) -> str:
    from dashboard.inputs.state import DEFAULTS
    main = [f"{k}={values[k]}" for k in SUMMARY_KEYS if k in values]
    rest = [f"{k}={v}" for k, v in values.items()
            if k not in SUMMARY_KEYS and k != "cfg" and DEFAULTS.get(k, object()) != v]
    if values.get("cfg") and values.get("model") == "config":
        rest.append("cfg=<pasted config.json, see the link or the JSON export>")
    return " · ".join(main) + ("\nAlso changed from the defaults: " + ", ".join(rest) if rest else "")


