"""A model by Hugging Face Hub id in the calculator page (`?hf=org/name`), in AppTest, against a REAL local HTTP
server laid out like the Hub (tests/hub_server.py): exact checkpoint counts, the numbers the engine gives for the
fetched config.json, every Hub failure shown while the page keeps working on the preset, and the token kept out
of the URL, the exports and the session state."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

sys.path.insert(0, str(Path(__file__).parents[1]))
from hub_repos import (  # noqa: E402
    GATED_REPO, GATED_TOKEN, LLAMA_31_8B, LLAMA_31_8B_PARAMETERS, PRIVATE_REPO, PRIVATE_TOKEN, QWEN3_8B,
    QWEN3_8B_CONFIG, QWEN3_8B_PARAMETERS, TINY_CONFIG,
)
from hub_server import HubServer, hub_root, hub_server, hub_url  # noqa: E402,F401  (fixtures are used by name)

from calculator import estimate  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.presets import load_model  # noqa: E402
from calculator.model.hub import http as hub_http  # noqa: E402
from calculator.core.units import format_bytes  # noqa: E402
from calculator.core.workload import Workload  # noqa: E402
from dashboard import memo  # noqa: E402
from dashboard.safe_text import plain  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "app.py"
GPU = "h100-sxm"
PRESET = estimate(load_model("llama-3.1-8b").spec, Workload(gpu=GPU))  # the page's default model


@pytest.fixture(autouse=True)
def hub_env(hub_url, tmp_path, monkeypatch):
    """The page talks to the local Hub, with its own on-disk cache and no token from the environment."""
    monkeypatch.setenv("HF_ENDPOINT", hub_url)
    monkeypatch.setenv("LLM_MEM_CACHE_DIR", str(tmp_path / "hub-cache"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    memo.clear_all()
    yield tmp_path / "hub-cache"
    memo.clear_all()


@pytest.fixture
def downloads(monkeypatch) -> dict:
    """label -> the callable each download button was given (AppTest has no runtime to run deferred downloads)."""
    from streamlit.delta_generator import DeltaGenerator
    original, got = DeltaGenerator.download_button, {}

    def spy(self, label, data, *args, **kwargs):
        got[label] = data
        return original(self, label, data, *args, **kwargs)
    monkeypatch.setattr(DeltaGenerator, "download_button", spy)
    return got


def run(query: dict) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def table(at) -> list[dict]:
    from tests.html_read import breakdown
    return [r for r in breakdown(at) if r["Component"] != "Total"]  # the last row is the total


def shows(at, expected) -> bool:
    m = metrics(at)
    return (m.get("Total per GPU") == format_bytes(expected.total_bytes)
            and [int(r["Bytes"]) for r in table(at)] == [t.bytes for t in expected.terms])


def token_field(at):
    return next(t for t in at.text_input if t.label == "Hugging Face token")


def texts(at) -> str:
    """Every text element as the reader sees it (escapes removed, so a leaked token cannot hide behind them)."""
    return "\n".join(plain(str(e.value)) for kind in ("markdown", "caption", "error", "warning", "info", "code")
                     for e in at.get(kind))


def test_hub_id_in_the_link_loads_the_model_with_its_exact_count(downloads):
    at = run({"hf": QWEN3_8B, "mode": "infer", "seq": "8192"})
    assert at.text_input(key="hf").value == QWEN3_8B
    expected = estimate(spec_from_hf_config(QWEN3_8B_CONFIG, name=QWEN3_8B).spec,
                        Workload(mode="infer", seq_len=8192, gpu=GPU))
    assert shows(at, expected)
    kv = next(r for r in table(at) if r["Component"] == "KV cache")
    assert int(kv["Bytes"]) == 8192 * 36 * 2 * 8 * 128 * 2 == expected.components["kv_cache"]  # L·2·kvh·d·bf16
    assert f"{QWEN3_8B_PARAMETERS:,}" == "8,190,735,360"
    panel = texts(at)
    assert "**8,190,735,360** in the checkpoint (from the Hub's API)" in panel
    assert "**8,190,735,360** from the architecture" in panel and "BF16 8,190,735,360 (100.0%)" in panel
    assert not at.warning and not at.error  # counts agree: no mismatch warning
    doc = json.loads(downloads["Breakdown JSON"]())
    assert doc["inputs"]["hf"] == QWEN3_8B
    assert doc["model_source"]["checkpoint_parameters"] == QWEN3_8B_PARAMETERS
    assert doc["estimate"]["total_bytes"] == expected.total_bytes


def test_safetensors_headers_count_and_the_same_numbers_as_the_preset(hub_server):
    at = run({"hf": LLAMA_31_8B})
    assert "**8,030,261,248** in the checkpoint (from the safetensors headers)" in texts(at)
    assert f"{LLAMA_31_8B_PARAMETERS:,}" == "8,030,261,248"
    assert shows(at, PRESET)  # the preset is this very config.json
    assert any(r.path.endswith(".safetensors") and "Range" in r.headers for r in hub_server.requests)


def test_a_missing_repo_is_an_error_and_the_page_keeps_the_preset(hub_server):
    at = run({"hf": "acme/does-not-exist"})
    errors = [plain(e.value) for e in at.error]
    assert any("acme/does-not-exist" in e and "not found" in e and "llama-3.1-8b" in e for e in errors)
    assert shows(at, PRESET) and metrics(at)["Parameters"]
    asked = len(hub_server.requests)
    at.slider(key="mbs").set_value(2).run()  # another rerun does not ask the Hub again
    assert not at.exception and len(hub_server.requests) == asked
    assert shows(at, estimate(load_model("llama-3.1-8b").spec, Workload(micro_batch=2, gpu=GPU)))
    at.button(key="_hub_retry").click().run()  # Retry does
    assert len(hub_server.requests) > asked and at.error


@pytest.mark.parametrize("model_id, words", [
    ("acme/malformed-config", "not valid JSON"),
    ("acme/no-model-type", "no model_type"),
    ("not an id", "is not a Hugging Face model id"),
    ("acme/rate-limited-model", "429"),
])
def test_every_hub_error_is_a_clear_message(model_id, words):
    at = run({"hf": model_id})
    assert any(words in plain(e.value) for e in at.error), [e.value for e in at.error]
    assert shows(at, PRESET)


def test_gated_repo_with_the_token_field_and_the_token_is_nowhere_else(hub_server, hub_env, downloads):
    at = run({"hf": GATED_REPO, "mode": "infer"})
    assert any("401" in plain(e.value) or "token" in e.value.lower() for e in at.error)
    token_field(at).input(GATED_TOKEN).run()
    assert not at.exception
    assert not any(GATED_REPO in plain(e.value) for e in at.error)
    expected = estimate(spec_from_hf_config(TINY_CONFIG, name=GATED_REPO).spec, Workload(mode="infer", gpu=GPU))
    assert shows(at, expected)
    assert "in the checkpoint" in texts(at)
    assert any("differs from the checkpoint" in plain(w.value) for w in at.warning)  # the tiny checkpoint is partial
    sent = [r for r in hub_server.requests if r.headers.get("Authorization") == f"Bearer {GATED_TOKEN}"]
    assert sent and all(GATED_REPO in r.path for r in sent)

    # ... and nowhere else: URL, link, exports, session state, the on-disk cache, any element but its own field.
    assert all(GATED_TOKEN not in f"{k}={v}" for k, v in at.query_params.items())
    assert GATED_TOKEN not in texts(at)
    csv_text, json_text = downloads["Breakdown CSV"](), downloads["Breakdown JSON"]()
    assert GATED_REPO in csv_text and GATED_REPO in json_text
    assert GATED_TOKEN not in csv_text and GATED_TOKEN not in json_text
    snapshot = at.session_state.to_dict()  # what st.session_state.to_dict() gives the script
    assert snapshot["hf"] == GATED_REPO
    assert GATED_TOKEN not in repr(snapshot)
    assert all(GATED_TOKEN not in p.read_text() for p in hub_env.glob("*.json"))
    others = [e for e in at.text_input if e.label != "Hugging Face token"] + list(at.text_area)
    assert all(GATED_TOKEN not in plain(str(e.value)) for e in others)


def test_offline_the_cached_copy_is_used_and_said(hub_root):
    server = HubServer(hub_root)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("HF_ENDPOINT", server.url)
            assert "8,190,735,360" in texts(run({"hf": QWEN3_8B}))
            server.stop()  # the Hub is now unreachable
            memo.clear_all()  # a new server process: only the on-disk cache remains
            at = run({"hf": QWEN3_8B})
            assert any("offline" in i.value and "cached" in i.value for i in at.info)
            assert "8,190,735,360" in texts(at)
    finally:
        server.stop()


def test_picking_a_model_clears_the_hub_id():
    at = run({"hf": QWEN3_8B})
    assert "Not used while a Hugging Face id is set" in texts(at)
    at.selectbox(key="model").set_value("qwen2.5-7b").run()
    assert not at.exception
    assert at.text_input(key="hf").value == ""
    assert shows(at, estimate(load_model("qwen2.5-7b").spec, Workload(gpu=GPU)))


def test_edit_the_fetched_config(hub_server):
    at = run({"hf": QWEN3_8B})
    before = metrics(at)["Total per GPU"]
    next(b for b in at.sidebar.button if "config.json" in b.label).click().run()
    assert not at.exception
    assert at.selectbox(key="model").value == "config" and at.text_input(key="hf").value == ""
    assert json.loads(at.text_area(key="cfg").value) == QWEN3_8B_CONFIG
    assert metrics(at)["Total per GPU"] == before


# ---- two sessions of one server: a private model is served only to the session that authenticated for it ----
PRIVATE_CONFIG = dict(TINY_CONFIG, hidden_size=64, intermediate_size=128, _name_or_path="org/private-secret")
PRIVATE = estimate(spec_from_hf_config(PRIVATE_CONFIG, name=PRIVATE_REPO).spec, Workload(mode="infer", gpu=GPU))


def session_with_token(token: str) -> AppTest:
    at = run({"hf": PRIVATE_REPO, "mode": "infer"})
    if token:
        token_field(at).input(token).run()
        assert not at.exception
    return at


def refused(at) -> bool:
    """The page says the private model could not be used and shows the preset's numbers, not the private ones."""
    return (any(PRIVATE_REPO in plain(e.value) and "could not be used" in plain(e.value) for e in at.error)
            and not shows(at, PRIVATE) and shows(at, estimate(load_model("llama-3.1-8b").spec,
                                                               Workload(mode="infer", gpu=GPU))))


def test_a_private_model_loaded_by_one_session_is_not_served_to_another(hub_root):
    server = HubServer(hub_root)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("HF_ENDPOINT", server.url)
            # each fetch from the stopped server below retries once after BACKOFF_S (0.25 s, 8 of them): sooner
            # here; what is checked (refused, or A's offline copy) does not depend on the wait
            mp.setattr(hub_http, "BACKOFF_S", 0.01)
            a = session_with_token(PRIVATE_TOKEN)
            assert shows(a, PRIVATE) and not any(PRIVATE_REPO in plain(e.value) for e in a.error)
            for token in ("", "hf_WrongToken000000000000000000000000000", GATED_TOKEN):
                server.clear()
                b = session_with_token(token)  # same server process, same shared cache
                assert refused(b), token
                asked = [r for r in server.requests if r.path.endswith(f"{PRIVATE_REPO}/resolve/main/config.json")]
                assert asked and all(r.status == 401 for r in asked)  # B asked the Hub, which refused it

            server.stop()  # the Hub is unreachable: the on-disk cache holds A's copy, under A's credential
            for token in ("", "hf_WrongToken000000000000000000000000000"):
                assert refused(session_with_token(token)), token
            memo.clear_all()  # a restarted server: only the disk cache remains
            for token in ("", "hf_WrongToken000000000000000000000000000"):
                assert refused(session_with_token(token)), token
            again = session_with_token(PRIVATE_TOKEN)  # A's own token still gets the offline copy
            assert shows(again, PRIVATE) and any("offline" in i.value for i in again.info)
    finally:
        server.stop()

