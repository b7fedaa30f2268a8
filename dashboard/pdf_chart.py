"""The breakdown chart of the PDF report, drawn with fpdf2's own vector operations: filled rectangles for the
stacked components of each pipeline stage, lines for the axis, the grid, the GPU's capacity and the 80% safe band,
and text for the labels and the legend. The same data as the page's chart (dashboard.charts.breakdown_data).

No image, no browser, nothing fetched: fpdf2 writes every label as a PDF text string (escaped, never read as HTML
or markup), and a PDF string cannot reference a URL. A chart costs ~2 ms (dozens of drawing operators).
"""
from __future__ import annotations

import math

from dashboard.charts import Breakdown

GRID = (232, 232, 232)
AXIS = (200, 200, 200)
TEXT = (49, 51, 63)
GPU_LINE = (197, 57, 72)      # "#c53948", the page's capacity line
SAFE_LINE = (42, 122, 42)     # "#2a7a2a", the page's 80% line
SAFE_FILL = (240, 248, 240)   # "#2ca02c" at 7% over white, the page's band
LEGEND_W = 52.0               # mm to the right of the plot


def rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def label_lines(label: str) -> list[str]:
    """A bar's label in short lines: "stage 1 (layers 8–15) · backward peak" → stage 1 / (layers 8–15) / backward
    peak."""
    return [p for part in label.split(" · ") for p in part.replace(" (layers", " · (layers").split(" · ")]


def nice_step(top: float, ticks: int = 5) -> float:
    """A round tick step (1, 2, 2.5 or 5 × 10^k) giving about `ticks` gridlines up to `top`."""
    if top <= 0:
        return 1.0
    raw = top / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def draw(report, data: Breakdown, unit: str, x: float, y: float, w: float, h: float) -> None:
    """Draw `data` in the box (x, y, w, h) in mm of report.pdf (a dashboard.exports._Report): the plot on the left,
    the legend on the right. Every string passes through report.t (the PDF core font's characters)."""
    from calculator.core.units import UNIT_BYTES, format_bytes
    pdf, t = report.pdf, report.t
    scale = UNIT_BYTES[unit]
    top = max([*data.totals, data.capacity_bytes, 1]) / scale * 1.12
    step = nice_step(top)
    axis_w = 14.0
    px, py, pw, ph = x + axis_w, y + 4.0, w - axis_w - LEGEND_W, h - 17.0  # the plot area
    base = py + ph

    def at(value_bytes: float) -> float:  # the page y (mm) of a value in bytes
        return base - value_bytes / scale / top * ph

    # axis title, safe band, grid and tick labels
    report.font(6.5)
    pdf.set_text_color(*TEXT)
    pdf.text(x, y + 1.5, t(f"Memory per GPU ({'GB = 10^9 bytes' if unit == 'GB' else 'GiB = 2^30 bytes'})"))
    if data.capacity_bytes:
        pdf.set_fill_color(*SAFE_FILL)
        pdf.rect(px, at(data.safe_bytes), pw, base - at(data.safe_bytes), style="F")
    pdf.set_line_width(0.15)
    tick = 0.0
    while tick <= top + 1e-9:
        ty = base - tick / top * ph
        pdf.set_draw_color(*(AXIS if tick == 0 else GRID))
        pdf.line(px, ty, px + pw, ty)
        label = f"{tick:g}"
        pdf.text(px - 1.5 - pdf.get_string_width(label), ty + 1.0, label)
        tick += step

    # the stacked bars, their segment values where they fit, the total above each
    n = max(len(data.stages), 1)
    slot = pw / n
    bar = slot * (0.5 if n == 1 else 0.7)
    for i, stage in enumerate(data.stages):
        bx = px + i * slot + (slot - bar) / 2
        bottom = 0
        for _comp, _label, colour, values in data.series:
            v = values[i]
            if not v:
                continue
            y0, y1 = at(bottom + v), at(bottom)
            pdf.set_fill_color(*rgb(colour))
            pdf.rect(bx, y0, bar, y1 - y0, style="F")
            shown = t(format_bytes(v, unit))
            report.font(5.5)
            if y1 - y0 >= 2.6 and pdf.get_string_width(shown) <= bar - 1:
                r, g, b = rgb(colour)
                pdf.set_text_color(*((255, 255, 255) if r * 0.3 + g * 0.59 + b * 0.11 < 150 else TEXT))
                pdf.text(bx + (bar - pdf.get_string_width(shown)) / 2, (y0 + y1) / 2 + 0.9, shown)
            bottom += v
        pdf.set_text_color(*TEXT)
        report.font(7, True)
        total = t(format_bytes(data.totals[i], unit))
        pdf.text(bx + (bar - pdf.get_string_width(total)) / 2, at(data.totals[i]) - 1.0, total)
        report.font(6.5 if i == data.peak_bar or n == 1 else 6, i == data.peak_bar and n > 1)
        for line_no, part in enumerate(label_lines(stage)):
            name = t(part)
            while pdf.get_string_width(name) > slot - 1 and len(name) > 4:
                name = name[:-2] + "."
            pdf.text(px + i * slot + (slot - pdf.get_string_width(name)) / 2, base + 3.5 + 2.6 * line_no, name)

    # the GPU's capacity and the 80% band's edge, labelled at the right end of the plot
    if data.capacity_bytes:
        report.font(6)
        for value, colour, label, below, dashed in (
                (data.safe_bytes, SAFE_LINE, "80%: safe band (Fujii et al. 2024)", True, True),
                (data.capacity_bytes, GPU_LINE,
                 f"{data.gpu_name}: {format_bytes(data.capacity_bytes, unit)} PyTorch can allocate",
                 False, False)):
            ly = at(value)
            pdf.set_draw_color(*colour)
            pdf.set_line_width(0.3 if dashed else 0.45)
            if dashed:
                pdf.set_dash_pattern(dash=0.8, gap=0.8)
            pdf.line(px, ly, px + pw, ly)
            pdf.set_dash_pattern()
            text = t(label)
            tw, ty = pdf.get_string_width(text), ly + (2.6 if below else -1.0)
            pdf.set_fill_color(255, 255, 255)  # a white ground under the label, as on the page
            pdf.rect(px + pw - tw - 1.0, ty - 2.1, tw + 1.0, 2.8, style="F")
            pdf.set_text_color(*colour)
            pdf.text(px + pw - tw - 0.5, ty, text)
        pdf.set_text_color(*TEXT)

    # the legend: the stack's order, top component first (as the page's side legend)
    lx, ly = px + pw + 4.0, py
    report.font(6.5)
    for _comp, label, colour, _values in reversed(data.series):
        pdf.set_fill_color(*rgb(colour))
        pdf.rect(lx, ly, 3.0, 3.0, style="F")
        pdf.text(lx + 4.2, ly + 2.4, t(label))
        ly += 4.2
    pdf.set_draw_color(0, 0, 0)
    pdf.set_text_color(0, 0, 0)
    pdf.set_line_width(0.2)
