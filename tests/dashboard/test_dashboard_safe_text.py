"""dashboard.safe_text: a value from a link shown inside Markdown renders as exactly its characters. Checked by
parsing what md() returns with a CommonMark parser (markdown-it-py): no link, image, HTML, code span or emphasis
can come out of any text, and the reader sees the text itself."""
from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as hs
from markdown_it import MarkdownIt

from dashboard.safe_text import ECHO_LIMIT, cut, md, md_link, md_lines, plain

PARSER = MarkdownIt("commonmark", {"html": True})  # raw HTML on: anything that slipped through would show up
VECTORS = [
    "x`y`![i](http://img.evil.invalid/i.png)",
    "[l](http://link.evil.invalid/)",
    "<img src=http://html.evil.invalid/h.png>",
    "<a href='http://a.evil.invalid/'>a</a>",
    "<http://angle.evil.invalid/>",
    "``` ![i](http://fence.evil.invalid/i.png) ```",
    "![i][r]\n\n[r]: http://ref.evil.invalid/i.png",
    "&lt;img src=x&gt; &#60;b&#62;",
    "**bold** _it_ ~~s~~ $x^2$ :red[r] # h | a | b |",
]


# What remark-gfm (mdast-util-gfm-autolink-literal) links in text *after* escapes are resolved: Streamlit's
# Markdown links "http://…", "www.…" and "x@y.z" found in plain text, escaped or not.
GFM_URL = re.compile(r"(https?://|www(?=\.))([-.\w]+)", re.I)
GFM_EMAIL = re.compile(r"([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)")


def gfm_autolinks(markdown: str) -> list[str]:
    text = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)  # escapes resolved, zero-width spaces kept
    return [m[0] for m in GFM_URL.finditer(text)] + [m[0] for m in GFM_EMAIL.finditer(text)]


def inline_tokens(markdown: str) -> list[str]:
    out = []
    for tok in PARSER.parse(markdown):
        out.append(tok.type)
        out += [c.type for c in tok.children or ()]
    return out


def test_every_vector_renders_as_plain_text():
    for v in VECTORS:
        rendered = md(v)
        kinds = set(inline_tokens(rendered))
        assert kinds <= {"paragraph_open", "paragraph_close", "inline", "text", "softbreak"}, (v, kinds)
        assert "<a" not in PARSER.render(rendered) and "<img" not in PARSER.render(rendered)
        assert plain(rendered) == v.replace("\n", " ")  # what the reader sees: the characters themselves


def test_gfm_autolinks_and_streamlit_directives_cannot_start():
    # GFM autolinks need a literal "://", "www." or "x@y.z"; Streamlit's directives ":red[" and math "$"
    source = "see http://auto.evil.invalid www.evil.invalid WWW.x.y a@mail.evil.invalid https://x.y :red[r] $x$"
    assert len(gfm_autolinks(source)) == 5  # what Streamlit would link in the raw text
    text = md(source)
    assert gfm_autolinks(text) == []  # and in the escaped text, once its escapes are resolved
    for literal in ("://", "www.", "a@m", ":red[", "$x$"):
        assert literal not in text
    assert plain(text) == source


def test_line_breaks_and_invisible_characters_cannot_start_blocks_or_hide_text():
    text = md("a\n# heading\r\n> quote\u2028b\u202e\u200b")
    assert "\n" not in text and "\r" not in text and "\u2028" not in text
    assert "\u202e" not in text and "\u200b" not in text and text.count("\ufffd") == 2


def test_long_values_are_cut():
    assert md("a" * 1000).endswith("…") and len(plain(md("a" * 1000))) == ECHO_LIMIT + 1
    assert cut("abc", 2) == "ab…" and cut("abc") == "abc"


def test_links_keep_their_target_inside_the_parentheses():
    link = md_link("open [it]", "http://localhost:8501/?hf=a)![i](http://img.evil.invalid/i.png)&x=<b> `c`")
    tokens = [c for tok in PARSER.parse(link) for c in tok.children or ()]
    assert [t.type for t in tokens] == ["link_open", "text", "link_close"]
    href = tokens[0].attrs["href"]
    assert href.startswith("http://localhost:8501/?hf=a%29%21%5Bi%5D%28http") and tokens[1].content == "open [it]"
    assert md_link("x", "javascript:alert(1)") == "x" and md_link("y", "data:text/html,hi") == "y"


def test_bullet_lists_hold_one_inert_line_each():
    out = md_lines(["a=`b`", "c=![i](http://img.evil.invalid/i.png)"])
    assert [ln[:2] for ln in out.splitlines()] == ["- ", "- "]
    assert "image" not in inline_tokens(out) and "code_inline" not in inline_tokens(out)


@settings(max_examples=300, deadline=None)
@given(hs.text(max_size=200))
def test_any_text_is_inert(text):
    rendered = md(text, None)
    kinds = set(inline_tokens(rendered))
    assert kinds <= {"paragraph_open", "paragraph_close", "inline", "text", "softbreak", "hardbreak"} \
        or not rendered.strip(), kinds
    assert gfm_autolinks(rendered) == []
    shown = re.sub(r"[\r\n\t\v\f\x85\u2028\u2029]", " ", text)
    assert len(plain(rendered)) == len(shown)
