"""calculator.model.hub.cache through calculator.model.hub.client.fetch_model against a real HTTP server on 127.0.0.1
(tests/hub_server.py): used only when the Hub cannot be reached, bounded in entries, bytes and orphaned temp
files, and never serving a model that needed a token to a caller without that very token."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))  # hub_server.py, whatever pytest's import mode

from calculator.model.hub import client as hub  # noqa: E402
from calculator.model.hub import cache as hub_cache
from calculator.model.hub import http as hub_http
from calculator.model.hub.client import NoNetwork, fetch_model  # noqa: E402
from hub_repos import (  # noqa: E402
    GATED_REPO, GATED_TOKEN, LLAMA_31_8B, PRIVATE_REPO, PRIVATE_TOKEN, QWEN3_8B, QWEN3_8B_CONFIG,
    QWEN3_8B_PARAMETERS,
)
from hub_server import (  # noqa: E402,F401  (fixtures are used by name; clean_env is autouse)
    HubServer, clean_env, hub_root, hub_server, hub_url,
)


@pytest.fixture(autouse=True)
def short_backoff(monkeypatch: pytest.MonkeyPatch):
    """A fetch from a stopped server is refused, tried once more after BACKOFF_S, then read from the cache: 0.25 s
    each (19 of them in test_corrupt_cache_files_are_ignored_then_replaced: 4.75 s of its 5 s). The retry still
    happens, sooner; nothing checked here depends on the wait (tests/model/test_hub_http.py checks the backoff)."""
    monkeypatch.setattr(hub_http, "BACKOFF_S", 0.01)


def test_offline_after_a_fetch_serves_the_cache(hub_root: Path, tmp_path: Path):
    server = HubServer(hub_root)
    fresh = fetch_model(LLAMA_31_8B, endpoint=server.url, cache_dir=tmp_path)
    assert not fresh.from_cache
    server.stop()  # the same endpoint now refuses connections
    cached = fetch_model(LLAMA_31_8B, endpoint=server.url, cache_dir=tmp_path)
    assert cached.from_cache
    assert (cached.config, cached.checkpoint, cached.model_id, cached.revision) == (
        fresh.config, fresh.checkpoint, fresh.model_id, fresh.revision)
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert cached.warnings[0].startswith(f"offline: using cached config fetched at {today}")
    assert cached.warnings[0].endswith(f"; cannot reach the Hugging Face Hub at {server.url} (connection refused)")
    assert len(cached.warnings) == 1
    with pytest.raises(NoNetwork):  # a different revision is a different entry
        fetch_model(LLAMA_31_8B, revision="v2", endpoint=server.url, cache_dir=tmp_path)


def test_offline_keeps_the_original_warnings(hub_root: Path, tmp_path: Path):
    server = HubServer(hub_root)
    fetch_model("acme/vision-language-model", endpoint=server.url, cache_dir=tmp_path)
    server.stop()
    model = fetch_model("acme/vision-language-model", endpoint=server.url, cache_dir=tmp_path)
    assert model.warnings[0].startswith("offline: ") and model.warnings[1] == "using text_config of a multimodal model"


def test_timeout_serves_the_cache(hub_root: Path, tmp_path: Path):
    server = HubServer(hub_root)
    try:
        fetch_model(QWEN3_8B, endpoint=server.url, cache_dir=tmp_path)
        server.delay = 5.0
        start = time.monotonic()
        model = fetch_model(QWEN3_8B, endpoint=server.url, cache_dir=tmp_path, timeout=0.3)
        assert time.monotonic() - start < 1.0
    finally:
        server.stop()
    assert model.from_cache and model.checkpoint.total_parameters == QWEN3_8B_PARAMETERS
    assert "did not answer within 0.3 s" in model.warnings[0]


def test_the_hub_is_asked_first_even_when_cached(hub_url: str, hub_server: HubServer, tmp_path: Path):
    fetch_model(QWEN3_8B, endpoint=hub_url, cache_dir=tmp_path)
    again = fetch_model(QWEN3_8B, endpoint=hub_url, cache_dir=tmp_path)
    assert not again.from_cache and len(hub_server.requests) == 4


def test_use_cache_false_neither_writes_nor_reads(hub_root: Path, tmp_path: Path):
    server = HubServer(hub_root)
    fetch_model(QWEN3_8B, endpoint=server.url, cache_dir=tmp_path, use_cache=False)
    assert list(tmp_path.iterdir()) == []
    fetch_model(QWEN3_8B, endpoint=server.url, cache_dir=tmp_path)
    server.stop()
    with pytest.raises(NoNetwork) as e:
        fetch_model(QWEN3_8B, endpoint=server.url, cache_dir=tmp_path, use_cache=False)
    assert "cached" not in str(e.value)


def test_cache_is_bounded_and_evicts_the_oldest(hub_url: str, tmp_path: Path):
    assert hub_cache.MAX_CACHE_ENTRIES == 256
    old = time.time() - 10_000
    for i in range(hub_cache.MAX_CACHE_ENTRIES):
        p = tmp_path / f"{i:064x}.json"
        p.write_text("{}")
        os.utime(p, (old + i, old + i))
    (tmp_path / "notes.txt").write_text("not ours")
    fetch_model(QWEN3_8B, endpoint=hub_url, cache_dir=tmp_path)
    entries = sorted(p.name for p in tmp_path.glob("*.json"))
    assert len(entries) == hub_cache.MAX_CACHE_ENTRIES
    assert f"{0:064x}.json" not in entries and f"{1:064x}.json" in entries  # the oldest went
    assert (tmp_path / "notes.txt").exists()  # files that are not cache entries are left alone
    fetch_model(LLAMA_31_8B, endpoint=hub_url, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == hub_cache.MAX_CACHE_ENTRIES and not (tmp_path / f"{1:064x}.json").exists()
    assert not list(tmp_path.glob(".tmp-*"))  # atomic writes leave no temp files


def test_cache_that_cannot_be_written_is_a_warning(hub_url: str, tmp_path: Path):
    (tmp_path / "a-file").write_text("")
    model = fetch_model(QWEN3_8B, endpoint=hub_url, cache_dir=tmp_path / "a-file" / "cache")
    assert model.checkpoint.total_parameters == QWEN3_8B_PARAMETERS
    assert model.warnings[-1].startswith("could not write the cache in ")


def test_cache_location_and_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("LLM_MEM_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = hub_cache.directory(None)
    assert folder == tmp_path / ".cache" / "llm-gpu-mem" / "hub"
    path = hub_cache.entry_path(folder, "https://huggingface.co", QWEN3_8B, "main", None)
    assert len(path.stem) == 64 and path.suffix == ".json"
    others = {hub_cache.entry_path(folder, *key) for key in [
        ("https://hf-mirror.com", QWEN3_8B, "main", None), ("https://huggingface.co", LLAMA_31_8B, "main", None),
        ("https://huggingface.co", QWEN3_8B, "v1", None),
        ("https://huggingface.co", QWEN3_8B, "main", hub.credential_digest(GATED_TOKEN))]}
    assert path not in others and len(others) == 4
    monkeypatch.setenv("LLM_MEM_CACHE_DIR", str(tmp_path / "env"))
    assert hub_cache.directory(None) == tmp_path / "env"
    assert hub_cache.directory(tmp_path / "arg") == tmp_path / "arg"


# -----------------------------------------------------------------------------
# corrupt entries: ignored, never a crash, replaced by the next fetch


def _mutations(entry: dict) -> list:
    """The real entry with one thing wrong each (any of them makes it unusable)."""
    def changed(**kw):
        return json.dumps(dict(entry, **kw)).encode()
    checkpoint = dict(entry["checkpoint"], total_parameters=entry["checkpoint"]["total_parameters"] + 1)
    return [
        b"\x00\xff not json", b"{", b"[]", b'{"format": 2}', b"[" * 100_000,
        changed(format=1), changed(endpoint="https://elsewhere.example"), changed(model_id="acme/other"),
        changed(revision="v2"), changed(config=[]), changed(config={"hidden_size": 1}),
        changed(fetched_at="yesterday"), changed(fetched_at=1e300), changed(checkpoint=checkpoint),
        changed(checkpoint=7), changed(warnings=[1]), changed(needs_auth=True),
        changed(credential=hub.credential_digest(PRIVATE_TOKEN)),
    ]


def test_corrupt_cache_files_are_ignored_then_replaced(hub_root: Path, tmp_path: Path):
    server = HubServer(hub_root)
    fetch_model(QWEN3_8B, endpoint=server.url, cache_dir=tmp_path)
    [entry] = list(tmp_path.iterdir())
    good = entry.read_bytes()
    server.stop()
    for garbage in _mutations(json.loads(good)):
        entry.write_bytes(garbage)
        with pytest.raises(NoNetwork, match="no cached copy"):  # ignored, not a crash
            fetch_model(QWEN3_8B, endpoint=server.url, cache_dir=tmp_path)
    entry.write_bytes(good)  # the untouched entry is served: the mutations are what made the difference
    assert fetch_model(QWEN3_8B, endpoint=server.url, cache_dir=tmp_path).from_cache
    server = HubServer(hub_root)
    try:
        entry = hub_cache.entry_path(tmp_path, server.url, QWEN3_8B, "main", None)  # (a new port: a new key)
        entry.write_bytes(b"{")
        fetch_model(QWEN3_8B, endpoint=server.url, cache_dir=tmp_path)  # a fresh fetch replaces it
        assert json.loads(entry.read_text())["config"] == QWEN3_8B_CONFIG
    finally:
        server.stop()


# -----------------------------------------------------------------------------
# bounded in bytes, and orphaned temp files swept


def test_cache_is_bounded_in_bytes(hub_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(hub_cache, "MAX_CACHE_BYTES", 100_000)
    old = time.time() - 10_000
    for i in range(4):  # 4 x 40 KB of old entries: 160 KB, over the bound before anything is added
        p = tmp_path / f"{i:064x}.json"
        p.write_bytes(b" " * 40_000)
        os.utime(p, (old + i, old + i))
    fetch_model(QWEN3_8B, endpoint=hub_url, cache_dir=tmp_path)
    sizes = {p.name: p.stat().st_size for p in tmp_path.glob("*.json")}
    assert sum(sizes.values()) <= 100_000
    new = hub_cache.entry_path(tmp_path, hub_url, QWEN3_8B, "main", None).name
    assert new in sizes  # the entry just written stays; the oldest went first
    assert sorted(sizes) == sorted([new, f"{2:064x}.json", f"{3:064x}.json"])


def test_an_entry_over_the_per_entry_bound_is_neither_written_nor_read(hub_url: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(hub_cache, "MAX_ENTRY_BYTES", 500)  # Qwen3-8B's entry is ~1.3 KB
    model = fetch_model(QWEN3_8B, endpoint=hub_url, cache_dir=tmp_path)
    assert model.checkpoint.total_parameters == QWEN3_8B_PARAMETERS
    assert "not cached: the entry would be" in model.warnings[-1] and "over the cache's 500 per model" in model.warnings[-1]
    assert not list(tmp_path.glob("*.json"))
    path = hub_cache.entry_path(tmp_path, hub_url, QWEN3_8B, "main", None)
    path.write_bytes(b" " * 501)  # an oversized file under the right name is not even parsed
    assert hub_cache.read(tmp_path, hub_url, QWEN3_8B, "main", None, "offline") is None


def test_orphaned_temp_files_are_swept(hub_url: str, tmp_path: Path):
    stale, fresh = tmp_path / ".tmp-deadwriter.json", tmp_path / ".tmp-liveone.json"
    for p in (stale, fresh):
        p.write_bytes(b"x" * 1000)
    old = time.time() - hub_cache.ORPHAN_AGE_S - 60
    os.utime(stale, (old, old))
    (tmp_path / "notes.txt").write_text("not ours")
    fetch_model(QWEN3_8B, endpoint=hub_url, cache_dir=tmp_path)
    assert not stale.exists()  # a dead writer's leftover
    assert fresh.exists()  # may be another process writing right now
    assert (tmp_path / "notes.txt").exists()


# -----------------------------------------------------------------------------
# who may be served what


def test_a_private_model_is_served_offline_only_to_its_own_token(hub_root: Path, tmp_path: Path):
    server = HubServer(hub_root)
    fresh = fetch_model(PRIVATE_REPO, endpoint=server.url, cache_dir=tmp_path, token=PRIVATE_TOKEN)
    assert fresh.config["_name_or_path"] == "org/private-secret"
    [entry] = list(tmp_path.glob("*.json"))
    text = entry.read_text()
    assert PRIVATE_TOKEN not in text and json.loads(text)["credential"] == hub.credential_digest(PRIVATE_TOKEN)
    server.stop()  # the Hub is unreachable: only the disk cache could answer
    for token in (None, "", "hf_WrongToken000000000000000000000000000", GATED_TOKEN):
        with pytest.raises(NoNetwork, match="no cached copy") as e:
            fetch_model(PRIVATE_REPO, endpoint=server.url, cache_dir=tmp_path, token=token)
        assert "private-secret" not in str(e.value)
    cached = fetch_model(PRIVATE_REPO, endpoint=server.url, cache_dir=tmp_path, token=PRIVATE_TOKEN)
    assert cached.from_cache and cached.config == fresh.config


def test_a_private_model_is_not_served_offline_through_hf_token_of_another(hub_root: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    server = HubServer(hub_root)
    monkeypatch.setenv("HF_TOKEN", PRIVATE_TOKEN)  # the CLI's way: the environment's token
    fetch_model(PRIVATE_REPO, endpoint=server.url, cache_dir=tmp_path)
    server.stop()
    assert fetch_model(PRIVATE_REPO, endpoint=server.url, cache_dir=tmp_path).from_cache
    monkeypatch.setenv("HF_TOKEN", GATED_TOKEN)
    with pytest.raises(NoNetwork, match="no cached copy .* that this token may read"):
        fetch_model(PRIVATE_REPO, endpoint=server.url, cache_dir=tmp_path)
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(NoNetwork, match="no cached copy"):
        fetch_model(PRIVATE_REPO, endpoint=server.url, cache_dir=tmp_path)


def test_a_gated_model_is_kept_for_its_token_and_a_public_one_for_everyone(hub_root: Path, tmp_path: Path):
    server = HubServer(hub_root)
    fetch_model(GATED_REPO, endpoint=server.url, cache_dir=tmp_path, token=GATED_TOKEN)  # no API page: not public
    fetch_model(QWEN3_8B, endpoint=server.url, cache_dir=tmp_path, token=GATED_TOKEN)  # API: private/gated false
    server.stop()
    with pytest.raises(NoNetwork, match="no cached copy"):
        fetch_model(GATED_REPO, endpoint=server.url, cache_dir=tmp_path)
    assert fetch_model(GATED_REPO, endpoint=server.url, cache_dir=tmp_path, token=GATED_TOKEN).from_cache
    assert fetch_model(QWEN3_8B, endpoint=server.url, cache_dir=tmp_path).from_cache
    assert fetch_model(QWEN3_8B, endpoint=server.url, cache_dir=tmp_path, token=PRIVATE_TOKEN).from_cache


def test_an_entry_renamed_to_the_public_key_is_still_not_served(hub_root: Path, tmp_path: Path):
    server = HubServer(hub_root)
    fetch_model(PRIVATE_REPO, endpoint=server.url, cache_dir=tmp_path, token=PRIVATE_TOKEN)
    server.stop()
    [entry] = list(tmp_path.glob("*.json"))
    entry.rename(hub_cache.entry_path(tmp_path, server.url, PRIVATE_REPO, "main", None))
    with pytest.raises(NoNetwork, match="no cached copy"):  # the entry itself says whose it is
        fetch_model(PRIVATE_REPO, endpoint=server.url, cache_dir=tmp_path)


def test_credential_is_a_digest_of_the_token_used(monkeypatch: pytest.MonkeyPatch):
    assert hub.credential(None) is None and hub.credential("") is None and hub.credential("  ") is None
    digest = hub.credential(PRIVATE_TOKEN)
    assert len(digest) == 64 and PRIVATE_TOKEN not in digest and digest == hub.credential(f" {PRIVATE_TOKEN} ")
    assert digest != hub.credential(GATED_TOKEN)
    monkeypatch.setenv("HF_TOKEN", PRIVATE_TOKEN)  # no token given: the environment's is the one used
    assert hub.credential(None) == digest and hub.credential(GATED_TOKEN) != digest
