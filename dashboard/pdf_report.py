"""The one-page PDF capacity report: headline, the breakdown chart (drawn by dashboard/pdf_chart.py), the
breakdown table, the formulas, the inputs and the link. fpdf2 alone, pure Python: no browser, no image, no font
file, nothing fetched, so a report costs a few milliseconds of one thread and a hosted server can serve many.

Bounded whatever the inputs: the page's core font (Helvetica, Latin-1; other characters are transliterated or
shown as "?"), every text wrapped by our own linear word wrap and cut at the room left on the one page (a pasted
config.json of 512 KiB in the link costs no more than a short link), at most MAX_RENDERS reports built at once
(the others wait, up to WAIT_S, then get a one-page "busy, retry" report). fpdf2 writes every string as PDF text:
a model name holding HTML or Markdown is printed as those characters.
"""
from __future__ import annotations

import datetime as _dt
import threading
from typing import Any, Iterator, Mapping

MAX_RENDERS = 2        # reports built at once by one server process
WAIT_S = 30.0          # how long a request waits for its turn before the "busy" report
MAX_TITLE_CHARS = 160  # of the model's name in the headline
MAX_LINK_CHARS = 64 * 1024  # a longer link (a large pasted config) is not made clickable: the JSON export has it
_RENDERS = threading.BoundedSemaphore(MAX_RENDERS)

_ASCII = str.maketrans({"·": "*", "×": "x", "−": "-", "–": "-", "—": "-", "≈": "~", "≤": "<=", "≥": ">=",
                        "²": "^2", "³": "^3", "⁹": "^9", "⁰": "^0", "√": "sqrt", "Σ": "sum", "…": "...",
                        "’": "'", "“": '"', "”": '"', "→": "->", "⌈": "ceil(", "⌉": ")", "⌊": "floor(",
                        "⌋": ")", "Ψ": "Psi", "α": "alpha", "β": "beta"})


class _Report:
    """An A4 fpdf2 document in the PDF's built-in Helvetica (no font file to parse, subset or embed)."""

    def __init__(self):
        from fpdf import FPDF
        self.pdf = FPDF(orientation="P", unit="mm", format="A4")
        self.pdf.set_auto_page_break(False)
        self.pdf.set_margins(10, 10, 10)
        self.pdf.add_page()
        self.width = self.pdf.w - self.pdf.l_margin - self.pdf.r_margin
        self.bottom = 12.0  # mm kept free at the foot of the page (the link's place)

    @staticmethod
    def t(s: Any) -> str:
        """Text the core font can show: common symbols spelled out, anything else outside Latin-1 as "?"."""
        return str(s).translate(_ASCII).encode("latin-1", "replace").decode("latin-1")

    def font(self, size: float, bold: bool = False) -> None:
        self.pdf.set_font("helvetica", "B" if bold else "", size)

    def room(self, mm: float) -> bool:
        return self.pdf.get_y() + mm <= self.pdf.h - self.bottom

    def lines(self, text: str, width: float) -> Iterator[str]:
        """`text` broken into lines of at most `width` mm, greedily at spaces (a word longer than a line is cut):
        linear in the text, and lazy, so a caller that stops after n lines never measures the rest."""
        width_of = self.pdf.get_string_width
        space = width_of(" ")
        for paragraph in self.t(text).split("\n"):
            line, used = "", 0.0
            for word in paragraph.split(" "):
                w = width_of(word)
                while w > width:  # cut a word longer than the line, character by character
                    if line:
                        yield line
                        line, used = "", 0.0
                    head, hw = "", 0.0
                    for ch in word:
                        cw = width_of(ch)
                        if hw + cw > width:
                            break
                        head, hw = head + ch, hw + cw
                    yield head
                    word = word[len(head):]
                    w = width_of(word)
                if line and used + space + w > width:
                    yield line
                    line, used = "", 0.0
                line, used = (f"{line} {word}", used + space + w) if line else (word, w)
            yield line

    def para(self, text: str, h: float, max_lines: int | None = None, link: str = "") -> bool:
        """Print `text` wrapped to the page width, one `h`-mm line each, stopping where the page ends (or at
        `max_lines`). True when all of it was printed."""
        pdf = self.pdf
        limit = max_lines if max_lines is not None else 10**9
        for i, line in enumerate(self.lines(text, self.width)):
            if i >= limit or not self.room(h):
                return False
            pdf.cell(self.width, h, line, link=link, new_x="LMARGIN", new_y="NEXT")
        return True


def pdf_report(result, values: Mapping[str, Any], link: str, unit: str = "GB", gpu=None) -> bytes:
    """to_pdf, at most MAX_RENDERS at once in this process; a request that waits longer than WAIT_S gets a
    one-page report saying the server is busy. What the page's download button calls."""
    if not _RENDERS.acquire(timeout=WAIT_S):
        return busy_pdf()
    try:
        return to_pdf(result, values, link, unit, gpu)
    finally:
        _RENDERS.release()


def busy_pdf() -> bytes:
    r = _Report()
    r.font(12, True)
    r.para("The server is busy building other reports.", 7)
    r.font(10)
    r.para("Nothing was computed for this request: download the report again in a moment.", 5)
    return bytes(r.pdf.output())


def to_pdf(result, values: Mapping[str, Any], link: str, unit: str = "GB", gpu=None) -> bytes:
    """A one-page A4 capacity report: headline, chart, breakdown table, formulas, inputs and the link."""
    from calculator.core.sources import SOURCES
    from calculator.core.units import format_bytes, format_count
    from dashboard import pdf_chart
    from dashboard.charts import breakdown_data
    from dashboard.exports import inputs_summary

    est = result.estimate
    r = _Report()
    pdf = r.pdf

    # Headline
    r.font(14, True)
    name = str(est.model_name)
    r.para(f"GPU memory capacity report: {name[:MAX_TITLE_CHARS]}{'...' if len(name) > MAX_TITLE_CHARS else ''}",
           7, max_lines=2)
    r.font(8)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mode = {"train": "training", "infer": "inference", "rl": "RL post-training"}.get(est.mode, est.mode)
    r.para(f"{mode}, {format_count(est.parameters)} parameters ({format_count(est.active_parameters)} active). "
           f"Most loaded GPU (stage {est.worst_stage}): total {format_bytes(est.total_bytes, unit)}, "
           f"peak allocated {format_bytes(est.peak_allocated_bytes, unit)}. Generated {stamp}."
           + ("" if len(est.stages) == 1 else " Pipeline stages: " + ", ".join(
               f"{s.stage}: {format_bytes(s.total_bytes, unit)}" for s in est.stages) + "."), 4, max_lines=4)
    if gpu is not None:
        fit = next(iter(est.fits_on([gpu.id])), None)
        if fit is not None:
            r.font(9, True)
            r.para(f"{fit.name}: {fit.verdict} - {fit.utilization:.0%} of {format_bytes(fit.capacity_bytes, unit)} "
                   f"PyTorch can allocate, headroom {format_bytes(fit.headroom_bytes, unit)}", 5, max_lines=1)
            r.font(7)
            r.para(f"Device total {format_bytes(gpu.memory_bytes, unit)} (as the device reports it); every verdict and the chart's "
                   "line use what PyTorch can allocate.", 4, max_lines=1)
    pdf.ln(1)

    # Chart: vectors, the page chart's data
    chart_h = 74.0
    data = breakdown_data(est, gpu)
    pdf_chart.draw(r, data, unit, pdf.l_margin, pdf.get_y(), r.width, chart_h)
    pdf.set_y(pdf.get_y() + chart_h + 1)
    if data.note:
        r.font(6.5)
        r.para(data.note + ".", 3, max_lines=2)

    # Breakdown table: what is live on the most loaded GPU at the peak (the chart's full-colour bar)
    r.font(10, True)
    moment = data.moments[data.peak_bar] if data.moments else "peak"
    r.para(f"Breakdown per GPU at the peak ({moment}{'' if moment == 'peak' else ', the peak'}; stage "
           f"{est.worst_stage}, {unit})", 5, max_lines=1)
    total = data.totals[data.peak_bar] if data.totals else est.total_bytes
    rows = [(label, format_bytes(vs[data.peak_bar], unit), f"{vs[data.peak_bar] / total:.1%}" if total else "")
            for _c, label, _colour, vs in data.series if vs[data.peak_bar]]
    _table(r, [("Component", "Memory", "Share"), *rows, ("Total", format_bytes(est.total_bytes, unit), "100%")])
    pdf.ln(1.5)

    # Formulas with values and sources
    r.font(10, True)
    r.para("Formulas (symbols, values, bytes, source)", 5, max_lines=1)
    r.font(6.5)
    terms = [t for t in est.terms if t.bytes]
    for i, term in enumerate(terms):
        src = SOURCES.get(term.source)
        line = (f"{term.label}: {term.formula} = {term.substituted} = {format_bytes(term.bytes, unit)}"
                f"  [{src.title if src else term.source}]")
        if not r.room(16) or not r.para(line, 3, max_lines=4):
            r.para(f"... {len(terms) - i} more terms: see the JSON export or the link.", 3, max_lines=1)
            break
    pdf.ln(1)

    # Inputs and link
    if r.room(14):
        r.font(10, True)
        r.para("Inputs", 5, max_lines=1)
        r.font(6.5)
        r.para(inputs_summary(values), 3, max_lines=6)
    r.font(7)
    pdf.set_y(max(pdf.get_y(), pdf.h - 18))  # the link sits at the foot of the page
    r.bottom = 4.0
    pdf.set_text_color(30, 80, 160)
    clickable = link if len(link) <= MAX_LINK_CHARS else ""
    shown = f"Reproduce this view: {link}" if len(link) <= 300 else (
        f"Reproduce this view ({len(link):,} characters: the JSON export holds it): {link[:200]}...")
    r.para(shown, 3.2, max_lines=3, link=clickable)
    pdf.set_text_color(0, 0, 0)
    r.font(6)
    r.para("Estimate from the LLM GPU Memory Calculator. Keep the total under 80% of the GPU (Fujii et al. 2024: "
           "no OOM below that in 454 runs).", 3, max_lines=2)
    return bytes(pdf.output())


def _table(r: _Report, rows: list[tuple[str, str, str]]) -> None:
    """A small ruled table: the first row bold, the last (the total) bold; the text cut to its column."""
    pdf = r.pdf
    widths, h = (50.0, 25.0, 25.0), 3.8
    for i, row in enumerate(rows):
        if not r.room(h):
            return
        r.font(7.5, bold=i in (0, len(rows) - 1))
        if i in (1, len(rows) - 1):
            pdf.line(pdf.l_margin, pdf.get_y(), pdf.l_margin + sum(widths), pdf.get_y())
        for j, (text, w) in enumerate(zip(row, widths)):
            cut = next(r.lines(text, w - 1.5), "")
            pdf.cell(w, h, cut, align="L" if j == 0 else "R", new_x="RIGHT", new_y="TOP")
        pdf.ln(h)
