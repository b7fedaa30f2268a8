"""The fit cards and the breakdown table as static HTML (dashboard/views/html_blocks.py): every value escaped, a card says
name, capacity, verdict, share used, headroom and GPUs needed with the planner's layout as a link, its note as the
tooltip; the table shows every row, numbers right-aligned with separators, the total row last and bold."""
from __future__ import annotations

from calculator import estimate
from calculator.model.presets import load_model
from calculator.core.workload import Workload
from dashboard.views import html_blocks
from dashboard.views.html_blocks import fit_card, fit_cards, table
from tests.html_read import read, table_rows

LLAMA = load_model("llama-3.1-8b").spec
FITS = estimate(LLAMA, Workload(gpu="h100-sxm")).fits


def test_a_card_escapes_every_value_it_shows():
    f = FITS[0]._replace(name='<img src=x onerror="alert(1)">', note='"><script>x</script>', layout="TP2 <b>",
                         gpus_needed=2)
    html = fit_card(f, "GB", link='https://e.x/?a=1&b="2"')
    assert "<img" not in html and "<script" not in html and "<b>TP2" not in html
    card = read(html).cards[f.gpu]
    assert card["text"].startswith('<img src=x onerror="alert(1)">')  # shown as text
    assert card["title"] == '"><script>x</script>' and card["links"] == [("TP2 <b>", 'https://e.x/?a=1&b="2"')]


def test_a_card_reads_as_three_lines():
    f = next(f for f in FITS if f.verdict == "does not fit" and f.gpus_needed)
    text = read(fit_card(f, "GB", link="https://e.x/")).cards[f.gpu]["text"].split("\n")
    assert len(text) == 3 and text[0].startswith(f.name)
    assert text[1].strip().endswith(f"{f.utilization:.0%} used") and "does not fit" in text[1]
    assert text[2].startswith("short by") and f"needs {f.gpus_needed} GPUs" in text[2]


def test_cards_are_one_grid_and_link_only_a_layout():
    html = fit_cards(FITS[:6], "GB", lambda f: "https://e.x/" + f.gpu)
    cards = read(html).cards
    assert list(cards) == [f.gpu for f in FITS[:6]] and html.count('class="fit-cards"') == 1
    for f in FITS[:6]:
        assert bool(cards[f.gpu]["links"]) == bool(f.layout and f.gpus_needed and f.gpus_needed > 1)


def test_table_shows_every_row_and_a_bold_total():
    rows = [{"Term": "weights", "Bytes": 1_000_000, "Share": "50.0%"}, {"Term": "<total>", "Bytes": 2_000_000,
                                                                         "Share": "100.0%"}]
    html = table(rows, right=("Bytes", "Share"))
    assert table_rows(html) == [{"Term": "weights", "Bytes": "1,000,000", "Share": "50.0%"},
                                {"Term": "<total>", "Bytes": "2,000,000", "Share": "100.0%"}]
    last = html.rsplit("<tr>", 1)[1]
    assert last.count("font-weight:700") == 3 and "&lt;total&gt;" in last
    assert html.count("text-align:right") == 2 * 3  # the two numeric columns, header and both rows
    assert table([]) == ""


def test_a_card_states_its_reason_in_words_without_a_glyph():
    """Issue 24: the reason is on the card (a fourth line), not only in a tooltip behind ⓘ (a glyph some fonts lack)."""
    f = FITS[0]._replace(note="the engine refuses to start: the KV cache is larger than the pool")
    html = fit_card(f, "GB")
    lines = read(html).cards[f.gpu]["text"].split("\n")
    assert len(lines) == 4 and lines[3] == f.note
    assert "ⓘ" not in html
    assert len(read(fit_card(FITS[0]._replace(note=""), "GB")).cards[f.gpu]["text"].split("\n")) == 3


def test_share_link_escapes_the_link_and_its_script_holds_no_data():
    link = 'http://h/?model=x&cfg=%3Cscript%3E"</code><script>alert(1)</script>'
    out = html_blocks.share_link(link)
    body, script = out.split("<script>", 1)
    assert "<script" not in body and "&lt;/code&gt;&lt;script&gt;" in body and "&amp;cfg=" in body
    assert "http://h" not in script and "model=" not in script  # the copied text is read from the element
    assert out.count("<script>") == 1 and 'class="share-link"' in body and ">Copy link</button>" in body
