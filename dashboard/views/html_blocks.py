"""The two parts of the calculator page that change on every input, each drawn as ONE static HTML element
(st.html): the six fit cards and the breakdown table.

Why (measured with Chrome traces of the renderer's main thread during bench_paint.py's slider steps):
the browser renders every element of the page again when a rerun starts (each one turns stale) and every changed
element again when its new value arrives. st.table renders each of its ~130 cells as Markdown, and six bordered
cards in rows cost nine layout blocks and six Markdown elements. As one HTML element each, a slider step costs the
browser's main thread ~190 ms of CPU instead of ~230 ms (the bare Streamlit page with the same widgets: ~95 ms).

Every value is escaped here (html.escape, quotes included); Streamlit sanitizes st.html again (DOMPurify). Styles
are inline (a sanitizer keeps style attributes) and use translucent colours, so the cards read on the light and
the dark theme. Nothing here imports streamlit (tests/dashboard/test_dashboard_html_blocks.py).
"""
from __future__ import annotations

from html import escape
from typing import Callable, Iterable, Mapping

# Verdict colours: text on a translucent badge of the same hue (Streamlit's green / orange / red badges).
VERDICT_STYLE = {"fits": ("#1f9d55", "rgba(33,195,84,.14)", "✓"),
                 "tight": ("#d9730d", "rgba(255,164,33,.18)", "⚠"),
                 "does not fit": ("#d93a3a", "rgba(255,75,75,.14)", "✕")}
GRAY = "rgba(128,128,128,.95)"
BORDER = "1px solid rgba(128,128,128,.3)"

_GRID = "display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:.5rem;"
_CARD = f"border:{BORDER};border-radius:.5rem;padding:.45rem .75rem;line-height:1.5;font-size:.95rem;"
_SMALL = "font-size:.82rem;"


def text(value: object) -> str:
    """Plain text inside an element or an attribute: every <, >, &, " and ' escaped."""
    return escape(str(value), quote=True)


def verdict_badge(verdict: str) -> str:
    color, background, mark = VERDICT_STYLE.get(verdict, (GRAY, "rgba(128,128,128,.12)", ""))
    return (f'<span style="color:{color};background:{background};border-radius:.4rem;padding:0 .4rem;'
            f'font-size:.85rem;white-space:nowrap">{mark} {text(verdict)}</span>')


def fit_card(f, unit: str, link: str | None = None) -> str:
    """One card, three short lines: name and capacity; verdict and share used; headroom (or shortfall) and GPUs
    needed, the planner's layout a link when `link` is given; then the card's note (its reason) in words."""
    from calculator.core.units import format_bytes
    color = VERDICT_STYLE.get(f.verdict, (GRAY,))[0]
    head = format_bytes(abs(f.headroom_bytes), unit)
    room = f"{text(head)} free" if f.headroom_bytes >= 0 else f"short by {text(head)}"
    if f.gpus_needed:
        needs = f"needs <b>{f.gpus_needed}</b> GPU{'s' if f.gpus_needed > 1 else ''}"
        if f.layout and link and f.gpus_needed > 1:
            needs += f' (<a href="{text(link)}" target="_self">{text(f.layout)}</a>)'
    else:
        needs = f"no layout of up to {f.searched_gpus:,} fits" if f.searched_gpus else "no layout fits"
    note = f' title="{text(f.note)}"' if f.note else ""
    # the reason in words on the card (one line, cut with an ellipsis; the whole of it in the card's title), not
    # behind a glyph some fonts lack
    why = (f'<br><span class="fit-note" style="{_SMALL}color:{GRAY};display:block;white-space:nowrap;'
           f'overflow:hidden;text-overflow:ellipsis">{text(f.note)}</span>') if f.note else ""
    return (f'<div class="fit-card" data-gpu="{text(f.gpu)}" style="{_CARD}"{note}>'
            f'<b>{text(f.name)}</b> <span style="{_SMALL}color:{GRAY}">{text(format_bytes(f.capacity_bytes, unit))}'
            f'</span><br>{verdict_badge(f.verdict)} <span style="color:{color}"><b>{f.utilization:.0%}</b> '
            f'used</span><br><span style="{_SMALL}">{room} · {needs}</span>{why}</div>')


def fit_cards(fits: Iterable, unit: str, link_of: Callable | None = None) -> str:
    """Every card in a two-column grid; link_of(fit) -> the URL of the planner's layout ('GPUs needed')."""
    cards = "".join(fit_card(f, unit, link_of(f) if link_of is not None and f.layout else None) for f in fits)
    return f'<div class="fit-cards" style="{_GRID}">{cards}</div>'


def table(rows: list[Mapping[str, object]], right: Iterable[str] = (), total_last: bool = True) -> str:
    """A static table of every row (no scroll box); columns in `right` are right-aligned (numbers with thousands
    separators); with total_last, the last row is bold and ruled off."""
    if not rows:
        return ""
    cols = list(rows[0])
    right = set(right)
    cell = "padding:.25rem .6rem;border-bottom:" + BORDER + ";"

    def td(col: str, value: object, tag: str = "td", extra: str = "") -> str:
        shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value
        align = "text-align:right;font-variant-numeric:tabular-nums;" if col in right else "text-align:left;"
        return f'<{tag} style="{cell}{align}{extra}">{text(shown)}</{tag}>'
    head = "".join(td(c, c, "th", f"font-weight:600;color:{GRAY};") for c in cols)
    body = []
    for i, r in enumerate(rows):
        total = total_last and i == len(rows) - 1
        extra = "font-weight:700;border-top:2px solid rgba(128,128,128,.6);" if total else ""
        body.append("<tr>" + "".join(td(c, r[c], extra=extra) for c in cols) + "</tr>")
    return (f'<table class="breakdown" style="width:100%;border-collapse:collapse;font-size:.9rem">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


# The share link's copy button: the page's own script, with no data in it (the link is read from the element
# beside it, where it is escaped text). navigator.clipboard needs a secure context (https, localhost); elsewhere the
# link is selected and copied with execCommand, or left selected for Ctrl+C.
_COPY_JS = """<script>(() => document.querySelectorAll('.share-link:not([data-bound])').forEach((box) => {
  box.dataset.bound = '1';
  const b = box.querySelector('button'), t = box.querySelector('code');
  b.addEventListener('click', async () => {
    let ok = false;
    try { await navigator.clipboard.writeText(t.textContent); ok = true; } catch (e) {
      const r = document.createRange(); r.selectNodeContents(t);
      const s = window.getSelection(); s.removeAllRanges(); s.addRange(r);
      try { ok = document.execCommand('copy'); } catch (e2) { ok = false; }
    }
    b.textContent = ok ? 'Copied' : 'Press Ctrl+C';
    setTimeout(() => { b.textContent = 'Copy link'; }, 2000);
  });
}))();</script>"""


def share_link(link: str) -> str:
    """The view's link as text, with a button that copies it (st.html with its script: a few hundred bytes, where
    st.code's copy button would load a 1.5 MB syntax highlighter)."""
    return (f'<div class="share-link" style="display:flex;gap:.5rem;align-items:flex-start">'
            f'<button type="button" style="{_SMALL}border:{BORDER};border-radius:.4rem;padding:.15rem .6rem;'
            f'background:transparent;color:inherit;cursor:pointer;white-space:nowrap">Copy link</button>'
            f'<code style="{_SMALL}word-break:break-all;flex:1">{text(link)}</code></div>' + _COPY_JS)
