"""Reading the page's static HTML elements (dashboard/views/html_blocks.py: the fit cards and the breakdown table) the way
a person reads them: each card's text and links, each table row as a dict. Python's own html.parser, no browser.
"""
from __future__ import annotations

from html.parser import HTMLParser


class _Reader(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.cards: dict[str, dict] = {}  # data-gpu -> {"text", "links": [(text, href)], "title"}
        self.rows: list[list[str]] = []
        self._card = None
        self._link = None
        self._cell = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "fit-card" in (a.get("class") or "").split():
            self._card = self.cards.setdefault(a["data-gpu"], {"text": "", "links": [], "title": a.get("title", "")})
        elif tag == "br" and self._card is not None:
            self._card["text"] += "\n"
        elif tag == "a" and self._card is not None:
            self._link = [a.get("href", ""), ""]
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "a" and self._link is not None:
            self._card["links"].append((self._link[1], self._link[0]))
            self._link = None
        elif tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(self._cell)
            self._cell = None
        elif tag == "div":  # a card holds no nested div: its closing tag ends it
            self._card = None

    def handle_data(self, data):
        if self._card is not None:
            self._card["text"] += data
        if self._link is not None:
            self._link[1] += data
        if self._cell is not None:
            self._cell += data


def read(html: str) -> _Reader:
    r = _Reader()
    r.feed(html)
    return r


def fit_cards(at) -> dict[str, dict]:
    """Every fit card on an AppTest page, by GPU id: {"text", "links": [(text, href)], "title"}."""
    out: dict[str, dict] = {}
    for h in at.get("html"):
        out.update(read(h.proto.body).cards)
    return out


def table_rows(body: str) -> list[dict]:
    """A static HTML table as a list of {column: cell text}, header row first consumed."""
    rows = read(body).rows
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def breakdown(at) -> list[dict]:
    """The breakdown table's rows (its last row the total); Bytes as int."""
    tables = [table_rows(h.proto.body) for h in at.get("html") if 'class="breakdown"' in h.proto.body]
    assert len(tables) == 1, f"{len(tables)} breakdown tables"
    return [{**r, "Bytes": int(r["Bytes"].replace(",", ""))} for r in tables[0]]
