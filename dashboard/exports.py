"""Exports of one view: CSV and JSON of the breakdown and the inputs, and a one-page PDF capacity report.

The PDF uses fpdf2 (pure Python). Its chart image is rendered by kaleido through a local Chromium only when
the report is requested; without kaleido or Chromium the report is still produced and says the chart is missing.
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


def to_csv(est, values: Mapping[str, Any], link: str = "", unit: str = "GB") -> str:
    """CSV: the inputs (section=input), every term of every stage (section=term) and the totals."""
    from calculator.core.units import format_bytes
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for key, value in values.items():
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
    return buf.getvalue()


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


# ---- chart image ------------------------------------------------------------------------------------------------
def chart_png(fig, width: int = 1000, height: int = 520, scale: int = 2) -> tuple[bytes | None, str]:
    """(PNG bytes, "") via kaleido + a local Chromium, or (None, why not)."""
    try:
        import kaleido  # noqa: F401  (plotly needs it for to_image)
    except ImportError:
        return None, "the chart image needs the kaleido package, which is not installed"
    import warnings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fig.to_image(format="png", width=width, height=height, scale=scale), ""
    except Exception as exc:  # kaleido raises several types when no browser is found or it fails to start
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, f"the chart image could not be rendered (kaleido/Chromium: {first[:160]})"


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


# ---- PDF --------------------------------------------------------------------------------------------------------
_FONT_DIRS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/dejavu", "/usr/local/share/fonts")
_ASCII = str.maketrans({"·": "*", "×": "x", "−": "-", "–": "-", "—": "-", "≈": "~", "≤": "<=", "≥": ">=",
                        "²": "^2", "³": "^3", "⁹": "^9", "⁰": "^0", "√": "sqrt", "Σ": "sum", "…": "...",
                        "’": "'", "“": '"', "”": '"', "→": "->", "⌈": "ceil(", "⌉": ")", "⌊": "floor(",
                        "⌋": ")", "Ψ": "Psi", "α": "alpha", "β": "beta"})


class _Report:
    """fpdf2 with a Unicode font when one is installed, else Helvetica with an ASCII transliteration."""

    def __init__(self):
        from fpdf import FPDF
        self.pdf = FPDF(orientation="P", unit="mm", format="A4")
        self.pdf.set_auto_page_break(False)
        self.pdf.set_margins(10, 10, 10)
        self.pdf.add_page()
        self.family, self.unicode = "helvetica", False
        for d in _FONT_DIRS:
            regular, bold = Path(d, "DejaVuSans.ttf"), Path(d, "DejaVuSans-Bold.ttf")
            if regular.exists() and bold.exists():
                self.pdf.add_font("dejavu", "", str(regular))
                self.pdf.add_font("dejavu", "B", str(bold))
                self.family, self.unicode = "dejavu", True
                break

    def t(self, s: Any) -> str:
        s = str(s)
        if self.unicode:
            return s
        return s.translate(_ASCII).encode("latin-1", "replace").decode("latin-1")

    def font(self, size: float, bold: bool = False):
        self.pdf.set_font(self.family, "B" if bold else "", size)

    def room(self, mm: float) -> bool:
        return self.pdf.get_y() + mm <= self.pdf.h - 12


def to_pdf(result, values: Mapping[str, Any], link: str, unit: str = "GB", png: bytes | None = None,
           png_note: str = "", gpu=None) -> bytes:
    """A one-page A4 capacity report: headline, chart, breakdown table, formulas, inputs and the link."""
    from calculator.core.result import COMPONENT_LABELS
    from calculator.core.sources import SOURCES
    from calculator.core.units import format_bytes, format_count

    est = result.estimate
    r = _Report()
    pdf = r.pdf
    width = pdf.w - pdf.l_margin - pdf.r_margin

    # Headline
    r.font(14, True)
    pdf.cell(0, 7, r.t(f"GPU memory capacity report: {est.model_name}"), new_x="LMARGIN", new_y="NEXT")
    r.font(8)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mode = "training" if est.mode == "train" else "inference"
    pdf.multi_cell(0, 4, align="L", text=r.t(
        f"{mode}, {format_count(est.parameters)} parameters ({format_count(est.active_parameters)} active). "
        f"Most loaded GPU (stage {est.worst_stage}): total {format_bytes(est.total_bytes, unit)}, "
        f"peak allocated {format_bytes(est.peak_allocated_bytes, unit)}. Generated {stamp}."
        + ("" if len(est.stages) == 1 else " Pipeline stages: " + ", ".join(
            f"{s.stage}: {format_bytes(s.total_bytes, unit)}" for s in est.stages) + ".")),
        new_x="LMARGIN", new_y="NEXT")
    if gpu is not None:
        fit = next(iter(est.fits_on([gpu.id])), None)
        if fit is not None:
            r.font(9, True)
            pdf.cell(0, 5, r.t(f"{fit.name}: {fit.verdict} - {fit.utilization:.0%} of "
                               f"{format_bytes(fit.capacity_bytes, unit)}, headroom "
                               f"{format_bytes(fit.headroom_bytes, unit)}"), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(1)

    # Chart (or why it is missing)
    if png:
        img_w = width * 0.82
        pdf.image(io.BytesIO(png), x=pdf.l_margin + (width - img_w) / 2, w=img_w)
    else:
        r.font(8)
        pdf.set_text_color(160, 40, 40)
        pdf.multi_cell(0, 4, r.t(f"Chart image not included: {png_note or 'no image was rendered'}. "
                                 "The table below holds the same numbers."), new_x="LMARGIN", new_y="NEXT")
        pdf.set_text_color(0, 0, 0)
    pdf.ln(1)

    # Breakdown table (components of the most loaded GPU)
    r.font(10, True)
    pdf.cell(0, 5, r.t(f"Breakdown per GPU (stage {est.worst_stage}, {unit})"), new_x="LMARGIN", new_y="NEXT")
    r.font(7.5)
    comps = [(c, b) for c, b in est.components.items() if b]
    with pdf.table(col_widths=(50, 25, 25), width=100, align="LEFT", line_height=3.8,
                   text_align=("LEFT", "RIGHT", "RIGHT"), first_row_as_headings=True) as table:
        table.row([r.t("Component"), r.t("Memory"), r.t("Share")])
        for c, b in comps:
            table.row([r.t(COMPONENT_LABELS.get(c, c)), r.t(format_bytes(b, unit)),
                       f"{b / est.total_bytes:.1%}" if est.total_bytes else ""])
        table.row([r.t("Total"), r.t(format_bytes(est.total_bytes, unit)), "100%"])
    pdf.ln(1.5)

    # Formulas with values and sources
    r.font(10, True)
    pdf.cell(0, 5, r.t("Formulas (symbols, values, bytes, source)"), new_x="LMARGIN", new_y="NEXT")
    r.font(6.5)
    skipped = 0
    terms = [t for t in est.terms if t.bytes]
    for i, term in enumerate(terms):
        src = SOURCES.get(term.source)
        line = (f"{term.label}: {term.formula} = {term.substituted} = {format_bytes(term.bytes, unit)}"
                f"  [{src.title if src else term.source}]")
        if not r.room(16):
            skipped = len(terms) - i
            break
        pdf.multi_cell(0, 3, r.t(line), align="L", new_x="LMARGIN", new_y="NEXT")
    if skipped:
        pdf.multi_cell(0, 3, r.t(f"... {skipped} more terms: see the JSON export or the link."),
                       new_x="LMARGIN", new_y="NEXT")
    pdf.ln(1)

    # Inputs and link
    if r.room(14):
        r.font(10, True)
        pdf.cell(0, 5, r.t("Inputs"), new_x="LMARGIN", new_y="NEXT")
        r.font(6.5)
        pdf.multi_cell(0, 3, r.t(inputs_summary(values)), align="L", new_x="LMARGIN", new_y="NEXT")
    r.font(7)
    pdf.set_y(max(pdf.get_y(), pdf.h - 18))  # the link sits at the foot of the page
    pdf.set_text_color(30, 80, 160)
    pdf.multi_cell(0, 3.2, r.t(f"Reproduce this view: {link}"), link=link, new_x="LMARGIN", new_y="NEXT")
    pdf.set_text_color(0, 0, 0)
    r.font(6)
    pdf.multi_cell(0, 3, r.t("Estimate from the LLM GPU Memory Calculator. Keep the total under 80% of the GPU "
                             "(Fujii et al. 2024: no OOM below that in 454 runs)."), new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())
