"""Links that carry Markdown, HTML and backticks in every key, every value, `hf`, `cmp` and `cfg` (and a pasted
config's `_name_or_path` and unknown keys): every Markdown element the pages draw from them is parsed with a
CommonMark parser, and none yields an image, raw HTML, a code span or a link to anywhere but the app itself;
nothing from the payload appears unescaped. (The browser version, with Chromium's network watched:
tests/e2e/test_injection_browser.py.)"""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from dashboard.inputs import state
from dashboard.planner import PLANNER_KEYS
from test_dashboard_safe_text import gfm_autolinks

APP = Path(__file__).resolve().parents[2] / "app.py"
PARSER = MarkdownIt("commonmark", {"html": True})
EVIL = "evil.invalid"
VECTORS = [
    "x`y`![i](http://img.evil.invalid/i.png)",
    "[l](http://link.evil.invalid/)",
    "<img src=http://html.evil.invalid/h.png>",
    "<a href=http://a.evil.invalid/>a</a>",
    "http://auto.evil.invalid/x www.evil.invalid",
    "<http://angle.evil.invalid/>",
    "![i][r]\n\n[r]: http://ref.evil.invalid/i.png",
    "``` ![i](http://fence.evil.invalid/i.png) ```",
    "a@mail.evil.invalid :red[r] $x^2$",
]
LOCAL_HOSTS = {"localhost", "127.0.0.1"}
NOT_ECHOED = {"compare: a usable pasted config"}  # its bar is named "config": nothing of the payload is shown


def vector(i: int) -> str:
    return VECTORS[i % len(VECTORS)]


def config_with_payload() -> str:
    cfg = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "_name_or_path": vector(0)}
    cfg.update({vector(i): vector(i + 1) for i in range(len(VECTORS))})  # unknown keys, odd values
    return json.dumps(cfg)


def every_key_query(extra_keys=()) -> dict[str, str]:
    """Every calculator key (and `extra_keys`) with a payload value, plus payload keys, plus the version key."""
    q = {p.key: vector(i) for i, p in enumerate(state.PARAMS)}
    q.update({k: vector(i) for i, k in enumerate(extra_keys)})
    q.update({vector(i): vector(i + 3) for i in range(len(VECTORS))})
    q["v"] = vector(2)
    return q


LINKS = {
    "calculator: every key": ("", every_key_query()),
    "calculator: a pasted config": ("", {"model": "config", "cfg": config_with_payload(), "hf": ""}),
    "calculator: a config the engine refuses": ("", {"model": "config", "cfg": json.dumps(
        {"model_type": vector(0), "_name_or_path": vector(1), "hidden_size": vector(2)})}),
    "calculator: hf": ("", {"hf": vector(0)}),
    "planner: every key": ("pages/planner.py", every_key_query(PLANNER_KEYS)),
    "planner: hf on a valid view": ("pages/planner.py", {"model": "qwen2.5-7b", "hf": vector(1)}),
    "compare: cmp": ("pages/compare.py", {"cmp": [
        vector(0), urlencode({"model": "qwen2.5-7b", "hf": vector(1)}),
        urlencode({"model": "config", "cfg": config_with_payload()}),
        urlencode({vector(3): vector(4), "model": vector(5)})]}),
    "compare: a usable pasted config": ("pages/compare.py", {"cmp": [
        urlencode({"model": "config", "cfg": config_with_payload()}), "model=qwen2.5-7b"]}),
}


def markdown_sources(at: AppTest) -> list[str]:
    """The Markdown source of every element that renders Markdown, widget labels and help texts included."""
    out = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "title", "header", "subheader",
                 "exception"):
        out += [str(e.value) for e in at.get(kind)]
    for kind in ("text_input", "text_area", "number_input", "selectbox", "radio", "checkbox", "slider", "button",
                 "metric"):
        for w in at.get(kind):
            out += [str(x) for x in (getattr(w, "label", ""), getattr(w, "help", "")) if x]
    return out


def assert_inert(source: str) -> None:
    """No image or raw HTML at all; links and code spans only our own (no payload in them); no payload text
    outside our links' %-encoded targets that is not escaped."""
    for tok in PARSER.parse(source):
        for t in [tok, *(tok.children or ())]:
            assert t.type not in ("image", "html_inline", "html_block", "fence", "code_block"), (t.type, source[:300])
            if t.type == "code_inline":
                assert "evil" not in t.content, source[:300]
            if t.type == "link_open":
                href = urlsplit(t.attrs["href"])
                assert "evil" not in (href.hostname or "") and (href.hostname in LOCAL_HOSTS or EVIL not in href.geturl()), \
                    (t.attrs["href"], source[:300])
    outside_links = re.sub(r"\]\([^)\s]*\)", "]()", source)  # link targets: checked above
    assert not [u for u in gfm_autolinks(outside_links) if "evil" in u], source[:300]  # remark-gfm's text autolinks
    assert EVIL not in outside_links, source[:300]  # every echoed payload is escaped (evil\\.invalid)


@pytest.fixture(autouse=True)
def no_hub(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: no request leaves the box
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.mark.parametrize("name", list(LINKS))
def test_link_content_is_never_rendered(name):
    page, query = LINKS[name]
    at = AppTest.from_file(str(APP), default_timeout=60)
    if page:
        at.switch_page(page)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    sources = markdown_sources(at)
    assert sources
    for source in sources:
        assert_inert(source)
    if name not in NOT_ECHOED:
        assert "evil\\.invalid" in "\n".join(sources), "the payload is shown (escaped), not silently dropped"
