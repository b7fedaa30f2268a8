"""Text from a link, a pasted config or the Hub, made inert before a Markdown element shows it.

st.markdown, st.error, st.warning, st.info, st.caption and subheaders render CommonMark + GFM (links, images,
autolinked URLs and e-mail addresses, tables), Streamlit's own `:color[...]` directives and `$...$` LaTeX. A value
echoed inside a hand-built backtick span breaks out of it with one backtick, and then `![](https://host/x)` makes
every browser that opens the link fetch from that host. So every value that did not come from this code goes
through `md()`: each ASCII punctuation character is backslash-escaped (CommonMark: "any ASCII punctuation
character may be backslash-escaped", and an escaped character is literal text: no link, image, emphasis, code
span, HTML tag, entity, autolink, table cell, directive or math delimiter can start), line breaks become spaces
(no new block can start), control and invisible format characters (bidi overrides, zero-width joiners) become
U+FFFD, a zero-width space breaks what GFM would autolink after escapes are resolved ("http://", "www.", "a@b.c"),
and long values are cut. Where the text does not need Markdown at all, st.text / st.code are used instead.

Nothing here imports streamlit (tests/dashboard/test_dashboard_safe_text.py).
"""
from __future__ import annotations

import re
import string
import unicodedata
from urllib.parse import quote, urlsplit

ECHO_LIMIT = 120  # characters of an echoed value shown; the rest is cut ("…")
MESSAGE_LIMIT = 1000  # characters of a whole message (an engine or Hub complaint, which may quote values)
_PUNCTUATION = frozenset(string.punctuation)  # the ASCII punctuation CommonMark lets a backslash escape
_INVISIBLE = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))
# Streamlit's Markdown (remark-gfm) also turns text that merely looks like a URL or an e-mail address into a link,
# after escapes are resolved: "http://", "www." and "x@y.z" are found in the text itself. A zero-width space right
# after "http:" ("https:", "ftp:"…), "www" and "@" breaks each pattern (the mdast-util-gfm-autolink-literal regexes
# need "https?://", "www." and "@" followed by a word character); input zero-width spaces were already replaced.
_BREAK = "\u200b"
_AUTOLINK_START = re.compile(r"\\:(?=\\/)|(?i:www)(?=\\\.)|\\@")
_URL_SAFE = "/:?&=%#;,+@~_.-"  # kept as is in a URL; everything else (( ) [ ] < > ` " \\ $ * ! space…) is %-encoded


def cut(value: object, limit: int = ECHO_LIMIT) -> str:
    """str(value), cut to `limit` characters with "…" (plain text: still needs md() inside Markdown)."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "…"


def md(value: object, limit: int | None = ECHO_LIMIT) -> str:
    """`value` as Markdown that renders exactly as its characters (see the module docstring); cut to `limit`."""
    text = str(value) if limit is None else cut(value, limit)
    out = []
    for ch in text:
        if ch in _PUNCTUATION:
            out.append("\\" + ch)
        elif ch in "\r\n\t\v\f\x85\u2028\u2029":
            out.append(" ")
        elif unicodedata.category(ch) in _INVISIBLE:
            out.append("\ufffd")
        else:
            out.append(ch)
    return _AUTOLINK_START.sub(lambda m: m[0] + _BREAK, "".join(out))


def md_message(value: object) -> str:
    """A whole message (the engine's or the Hub client's, which may quote what the link gave) as inert Markdown."""
    return md(value, MESSAGE_LIMIT)


def md_link(label: str, url: str) -> str:
    """A Markdown link whose label is inert text and whose target cannot end early: only http(s) URLs, every
    character that could close or reopen Markdown %-encoded. Anything else becomes the bare (escaped) label."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return md(label)
    safe_url = quote(url, safe=_URL_SAFE + string.ascii_letters + string.digits)
    # %-encoding leaves no ( ) [ ] < > ` \ or whitespace, so the target is one token that ends at our ")"
    return f"[{md(label)}]({safe_url})"


def md_lines(lines, limit: int | None = MESSAGE_LIMIT) -> str:
    """A Markdown bullet list of plain-text lines, each made inert."""
    return "\n".join(f"- {md(line, limit)}" for line in lines)


_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")


def plain(markdown: str) -> str:
    """The text an md()-escaped string reads as (its backslash escapes removed): what the reader sees."""
    return _ESCAPED.sub(r"\1", markdown).replace(_BREAK, "")
