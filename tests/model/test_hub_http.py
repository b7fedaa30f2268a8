"""calculator.model.hub.http against a real HTTP server on 127.0.0.1 (tests/hub_server.py): the call's timeout is a
deadline nothing outlives (a server dripping one byte every 0.25 s, in its body or its headers), 429 and 5xx are
retried with exponential backoff honouring Retry-After within the deadline, and what one fetch reads is bounded
(shard count, header bytes)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

from calculator.model.hub import client as hub  # noqa: E402
from calculator.model.hub import http as hub_http
from calculator.model.hub.client import HubError, HubTimeout, RateLimited, fetch_model  # noqa: E402
from hub_repos import (  # noqa: E402
    DRIP_HEADERS_REPO, DRIP_INTERVAL, DRIP_REPO, LLAMA_31_8B, QWEN3_8B, QWEN3_8B_PARAMETERS, TINY_CONFIG,
)
from hub_server import HubServer, hub_root, hub_server, hub_url  # noqa: E402,F401  (fixtures are used by name)


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setattr(hub_http, "BACKOFF_S", 0.05)  # short waits keep the tests fast; the rule is the same
    for var in ("HF_TOKEN", "HF_ENDPOINT", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LLM_MEM_CACHE_DIR", str(tmp_path / "cache"))


# -----------------------------------------------------------------------------
# the deadline


@pytest.mark.parametrize("repo", [DRIP_REPO, DRIP_HEADERS_REPO])
def test_a_dripping_server_cannot_keep_a_call_past_its_deadline(hub_url: str, repo: str):
    # one byte every 0.25 s: each socket wait is short, so requests' own timeout never fires (it took 34 s)
    start = time.monotonic()
    with pytest.raises(HubTimeout, match="did not answer within 1 s"):
        fetch_model(repo, endpoint=hub_url, timeout=1.0, use_cache=False)
    elapsed = time.monotonic() - start
    assert 1.0 <= elapsed < 1.0 + 2 * DRIP_INTERVAL, elapsed


def test_the_drip_really_is_slow_enough_to_matter(hub_url: str, hub_server: HubServer):
    # at DRIP_INTERVAL the config.json would take len × 0.25 s (~47 s), far past the 1 s deadline above; the server
    # really sends it whole, byte by byte, at that pace: shown at a 20× faster drip, which still outlasts 1 s
    body_bytes = len(json.dumps(TINY_CONFIG))
    assert body_bytes * DRIP_INTERVAL > 10 * 1.0
    hub_server.drip_interval = DRIP_INTERVAL / 20
    start = time.monotonic()
    model = fetch_model(DRIP_REPO, endpoint=hub_url, timeout=60, use_cache=False)
    assert model.config == TINY_CONFIG
    assert time.monotonic() - start >= body_bytes * hub_server.drip_interval * 0.9 > 1.0


def test_a_slow_body_becomes_a_warning_when_only_the_count_is_slow(hub_root: Path):
    server = HubServer(hub_root)
    try:
        server.script(QWEN3_8B, [])  # (nothing scripted: the API page answers; the delay does the rest)
        start = time.monotonic()
        server.delay = 0.4
        model = fetch_model(QWEN3_8B, endpoint=server.url, timeout=0.6, use_cache=False)
        assert time.monotonic() - start < 1.2
    finally:
        server.stop()
    assert model.config["model_type"] == "qwen3" and model.checkpoint is None
    assert "did not answer within 0.6 s" in model.warnings[0]


# -----------------------------------------------------------------------------
# retries


def test_5xx_is_retried_with_doubling_backoff_then_succeeds(hub_url: str, hub_server: HubServer):
    hub_server.script(QWEN3_8B, [(503, None), (502, None), (500, None)])
    model = fetch_model(QWEN3_8B, endpoint=hub_url, use_cache=False)
    assert model.checkpoint.total_parameters == QWEN3_8B_PARAMETERS
    tries = [r for r in hub_server.requests if r.path.endswith("config.json")]
    assert [r.status for r in tries] == [503, 502, 500, 200]
    gaps = [b.at - a.at for a, b in zip(tries, tries[1:])]
    assert gaps[0] >= 0.05 and gaps[1] >= 0.10 and gaps[2] >= 0.20, gaps  # 0.05 · 2^(n-1)


def test_429_honours_retry_after(hub_url: str, hub_server: HubServer):
    hub_server.script(QWEN3_8B, [(429, "1")])
    start = time.monotonic()
    model = fetch_model(QWEN3_8B, endpoint=hub_url, timeout=5, use_cache=False)
    assert model.config["model_type"] == "qwen3" and time.monotonic() - start >= 1.0
    first, second = [r for r in hub_server.requests if r.path.endswith("config.json")]
    assert (first.status, second.status) == (429, 200) and second.at - first.at >= 1.0


def test_429_without_retry_after_backs_off(hub_url: str, hub_server: HubServer):
    hub_server.script(QWEN3_8B, [(429, None), (429, None)])
    assert fetch_model(QWEN3_8B, endpoint=hub_url, use_cache=False).config["model_type"] == "qwen3"
    assert [r.status for r in hub_server.requests if r.path.endswith("config.json")] == [429, 429, 200]


def test_a_retry_after_past_the_deadline_is_not_waited_for(hub_url: str, hub_server: HubServer):
    hub_server.script(QWEN3_8B, [(429, "30")])
    start = time.monotonic()
    with pytest.raises(RateLimited) as e:
        fetch_model(QWEN3_8B, endpoint=hub_url, timeout=3, use_cache=False)
    assert time.monotonic() - start < 0.5 and e.value.retry_after == 30
    assert len(hub_server.requests) == 1


def test_retries_stop_at_the_deadline(hub_url: str, hub_server: HubServer, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(hub_http, "BACKOFF_S", 0.4)  # 0.4, then 0.8: the second wait would end past 1 s
    hub_server.script(QWEN3_8B, [(503, None)] * 4)
    start = time.monotonic()
    with pytest.raises(HubError, match="HTTP 503"):
        fetch_model(QWEN3_8B, endpoint=hub_url, timeout=1.0, use_cache=False)
    assert time.monotonic() - start < 1.0
    assert len(hub_server.requests) == 2


def test_retry_after_parsing():
    assert hub_http.parse_retry_after("0") == 0 and hub_http.parse_retry_after(" 5 ") == 5
    assert hub_http.parse_retry_after("") is None and hub_http.parse_retry_after("-3") is None


# -----------------------------------------------------------------------------
# what one fetch may read


def test_shard_count_is_bounded(hub_root: Path, hub_url: str, hub_server: HubServer,
                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(hub, "MAX_SHARDS", 3)  # the 4-shard Llama index is over it
    model = fetch_model(LLAMA_31_8B, endpoint=hub_url, use_cache=False, timeout=60)
    assert model.checkpoint is None
    assert "model.safetensors.index.json lists 4 shards, over 3" in model.warnings[0]
    assert not [r for r in hub_server.requests if r.path.endswith(".safetensors")]  # refused before any read


def test_header_bytes_are_bounded_over_all_shards(hub_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(hub_http, "MAX_TOTAL_HEADER_BYTES", 20_000)  # each Llama shard header is ~8.4 KB
    monkeypatch.setattr(hub, "SHARD_WORKERS", 1)
    model = fetch_model(LLAMA_31_8B, endpoint=hub_url, use_cache=False, timeout=60)
    assert model.checkpoint is None and "exceed 20000 bytes in all" in model.warnings[0]
    monkeypatch.setattr(hub_http, "MAX_TOTAL_HEADER_BYTES", 10**9)
    assert fetch_model(LLAMA_31_8B, endpoint=hub_url, use_cache=False, timeout=60).checkpoint is not None


def test_config_size_is_bounded(hub_root: Path, hub_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(hub, "MAX_CONFIG_BYTES", 100)
    with pytest.raises(HubError, match="config.json is larger than 100 bytes"):
        fetch_model(QWEN3_8B, endpoint=hub_url, use_cache=False)
