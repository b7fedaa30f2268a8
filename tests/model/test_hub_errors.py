"""calculator.model.hub.client against a real HTTP server on 127.0.0.1 (tests/hub_server.py), no mocks: every failure mode
(unknown repo or revision, gated, forbidden, rate-limited, failing, slow or unreachable Hub, malformed config, invalid
id, bad revision or endpoint) raises the right HubError with one clear line naming what to change."""
from __future__ import annotations

import email.utils
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).parents[1]))  # hub_server.py, whatever pytest's import mode

from calculator.model.hub import http as hub_http  # noqa: E402
from calculator.model.hub.client import (  # noqa: E402
    AccessDenied, HubError, HubTimeout, InvalidModelId, MalformedConfig, ModelNotFound, NoNetwork, RateLimited,
    fetch_model, looks_like_hub_id,
)
from hub_repos import (  # noqa: E402
    FORBIDDEN_REPO, GATED_REPO, GATED_TOKEN, LLAMA_31_8B, QWEN3_8B, RATE_LIMITED_REPO, RETRY_AFTER,
    SERVER_ERROR_REPO, SLOW_REPO,
)
from hub_server import (  # noqa: E402,F401  (fixtures are used by name; clean_env is autouse)
    HubServer, clean_env, closed_port_url, hub_root, hub_server, hub_url,
)


def assert_clear_one_line(e: HubError) -> None:
    text = str(e)
    assert "\n" not in text and text == f"{e.problem}: {e.fix}"
    assert e.problem and e.fix


def test_unknown_repo_is_model_not_found(hub_url: str):
    with pytest.raises(ModelNotFound) as e:
        fetch_model("nobody/no-such-model", endpoint=hub_url)
    assert_clear_one_line(e.value)
    assert str(e.value) == ("model 'nobody/no-such-model' was not found on the Hugging Face Hub: check the id "
                            "(org/name, e.g. 'Qwen/Qwen3-8B'); if the repo is private, set HF_TOKEN")


def test_unknown_revision_is_model_not_found_and_revision_is_url_encoded(hub_url: str, hub_server: HubServer):
    with pytest.raises(ModelNotFound) as e:
        fetch_model(QWEN3_8B, revision="refs/pr/1", endpoint=hub_url)
    assert_clear_one_line(e.value)
    assert str(e.value).startswith("revision 'refs/pr/1' of 'Qwen/Qwen3-8B' was not found on the Hugging Face Hub")
    assert hub_server.requests[0].path == "/Qwen/Qwen3-8B/resolve/refs%2Fpr%2F1/config.json"


def test_repo_without_config_json_is_model_not_found(hub_url: str):
    with pytest.raises(ModelNotFound, match=r"'acme/no-config-model' has no config.json at revision 'main'"):
        fetch_model("acme/no-config-model", endpoint=hub_url)


def test_gated_repo_without_token_is_access_denied_naming_hf_token(hub_url: str, hub_server: HubServer):
    with pytest.raises(AccessDenied) as e:
        fetch_model(GATED_REPO, endpoint=hub_url)
    assert_clear_one_line(e.value)
    assert str(e.value) == (f"access to '{GATED_REPO}' was denied (HTTP 401: gated or private model): accept its "
                            f"licence at {hub_url}/{GATED_REPO} and set HF_TOKEN to an access token of that account")
    assert "Authorization" not in hub_server.requests[0].headers
    assert len(hub_server.requests) == 1  # no retry


def test_gated_repo_with_wrong_token_is_access_denied(hub_url: str):
    with pytest.raises(AccessDenied, match=r"with the given token: accept the licence at .* or set HF_TOKEN") as e:
        fetch_model(GATED_REPO, endpoint=hub_url, token="hf_WrongToken")
    assert "hf_WrongToken" not in str(e.value)


def test_gated_repo_with_the_right_token_works_from_argument_or_env(hub_url: str, hub_server: HubServer,
                                                                    monkeypatch: pytest.MonkeyPatch):
    assert fetch_model(GATED_REPO, endpoint=hub_url, token=GATED_TOKEN).checkpoint.total_parameters == 617
    monkeypatch.setenv("HF_TOKEN", GATED_TOKEN)
    assert fetch_model(GATED_REPO, endpoint=hub_url).config["model_type"] == "llama"
    assert {r.headers.get("Authorization") for r in hub_server.requests} == {f"Bearer {GATED_TOKEN}"}
    with pytest.raises(AccessDenied):  # the argument wins over the environment
        fetch_model(GATED_REPO, endpoint=hub_url, token="hf_other")


def test_forbidden_repo_is_access_denied(hub_url: str):
    with pytest.raises(AccessDenied, match=r"\(HTTP 403: gated or private model\): accept its licence") as e:
        fetch_model(FORBIDDEN_REPO, endpoint=hub_url)
    assert_clear_one_line(e.value)


def test_access_denied_is_not_cached(hub_url: str, clean_env: Path):
    with pytest.raises(AccessDenied):
        fetch_model(GATED_REPO, endpoint=hub_url)
    assert not clean_env.exists() or not list(clean_env.iterdir())


def test_rate_limit_mentions_retry_after_and_is_not_retried(hub_url: str, hub_server: HubServer):
    with pytest.raises(RateLimited) as e:
        fetch_model(RATE_LIMITED_REPO, endpoint=hub_url)
    assert_clear_one_line(e.value)
    assert e.value.retry_after == RETRY_AFTER
    assert str(e.value) == (f"the Hugging Face Hub rate-limited requests for '{RATE_LIMITED_REPO}' (HTTP 429): "
                            f"wait {RETRY_AFTER} s (Retry-After) and retry, or set HF_TOKEN for a higher limit")
    assert len(hub_server.requests) == 1


def test_server_error_is_retried_with_backoff_then_reported(hub_url: str, hub_server: HubServer,
                                                            monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(hub_http, "BACKOFF_S", 0.05)
    with pytest.raises(HubError) as e:
        fetch_model(SERVER_ERROR_REPO, endpoint=hub_url)
    assert type(e.value) is HubError
    assert_clear_one_line(e.value)
    assert "HTTP 503" in str(e.value) and "retry later" in str(e.value)
    assert len(hub_server.requests) == hub_http.MAX_ATTEMPTS == 4


def test_slow_hub_times_out_within_the_timeout(hub_url: str, hub_server: HubServer):
    start = time.monotonic()
    with pytest.raises(HubTimeout) as e:
        fetch_model(SLOW_REPO, endpoint=hub_url, timeout=0.5)
    assert time.monotonic() - start < 1.5
    assert_clear_one_line(e.value)
    assert str(e.value) == (f"the Hugging Face Hub at {hub_url} did not answer within 0.5 s, and no cached copy of "
                            f"'{SLOW_REPO}' exists: retry, raise the timeout, or set HF_ENDPOINT to a closer mirror")
    assert len(hub_server.requests) == 1  # a timeout is not retried: the time is spent


def test_closed_port_without_cache_is_no_network():
    url = closed_port_url()
    with pytest.raises(NoNetwork) as e:
        fetch_model(QWEN3_8B, endpoint=url)
    assert_clear_one_line(e.value)
    assert str(e.value) == (f"cannot reach the Hugging Face Hub at {url} (connection refused), and no cached copy "
                            "of 'Qwen/Qwen3-8B' exists: check the network connection, or set HF_ENDPOINT to a "
                            "reachable mirror")
    assert e.value.__cause__ is None and e.value.__context__ is None


def test_unresolvable_host_is_no_network():
    with pytest.raises(NoNetwork, match=r"\(DNS lookup failed\)"):
        fetch_model(QWEN3_8B, endpoint="http://no-such-host.invalid", timeout=5)


@pytest.mark.parametrize("model_id, problem", [
    ("acme/malformed-config", "config.json of 'acme/malformed-config' is not valid JSON (line 1, column 45)"),
    ("acme/list-config", "config.json of 'acme/list-config' is not a JSON object"),
    ("acme/no-model-type",
     "config.json of 'acme/no-model-type' has no model_type, so it is not a transformers model config"),
])
def test_malformed_config(hub_url: str, model_id: str, problem: str):
    with pytest.raises(MalformedConfig) as e:
        fetch_model(model_id, endpoint=hub_url)
    assert_clear_one_line(e.value)
    assert e.value.problem == problem


INVALID_IDS = ["", "noslash", "../etc/passwd", "a/b/c", "org/na me", " org/name", "org/name ", "org/name\n",
               "org//name", "/org/name", "org/", "/name", "org/..", "./name", "org/name.git", "org/a--b", "org/a..b",
               "org/-name", "org/name-", "x" * 97 + "/name", "org\\name", "org/name?x=1", "org/name#x", "org/näme"]


@pytest.mark.parametrize("model_id", INVALID_IDS)
def test_invalid_ids_are_rejected_before_any_request(hub_url: str, hub_server: HubServer, model_id: str):
    with pytest.raises(InvalidModelId) as e:
        fetch_model(model_id, endpoint=hub_url)
    assert_clear_one_line(e.value)
    shown = repr(model_id) if len(model_id) <= 100 else repr(model_id[:100]) + "..."
    assert str(e.value) == f"{shown} is not a Hugging Face model id: use the 'org/name' form, e.g. 'Qwen/Qwen3-8B'"
    assert hub_server.requests == []
    assert not looks_like_hub_id(model_id)


def test_non_string_id_is_rejected():
    with pytest.raises(InvalidModelId):
        fetch_model(None, endpoint=closed_port_url())  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_text_is_either_a_valid_id_or_rejected_before_any_request(text: str):
    url = closed_port_url()  # a request would be refused: NoNetwork, not InvalidModelId
    try:
        fetch_model(text, endpoint=url, use_cache=False)
    except InvalidModelId:
        assert not looks_like_hub_id(text)
    except NoNetwork:
        assert text.count("/") == 1 and not any(c.isspace() for c in text) and ".." not in text
        assert all(c.isascii() for c in text)


def test_looks_like_hub_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for text in (QWEN3_8B, LLAMA_31_8B, "unsloth/Llama-3.2-1B-Instruct-bnb-4bit", "google/gemma-3-4b-it", "a/b"):
        assert looks_like_hub_id(text), text
    for text in ("", "config.json", "./org/name", "/etc/passwd", "org/name/config.json", "C:\\models\\x"):
        assert not looks_like_hub_id(text), text
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "llama.json").write_text("{}")
    assert not looks_like_hub_id("configs/llama.json")  # a local file of the same shape
    assert looks_like_hub_id("configs/other.json")


def test_bad_revision_endpoint_or_timeout_are_hub_errors():
    with pytest.raises(HubError, match=r"invalid revision 'a b': use a branch, tag or commit hash"):
        fetch_model(QWEN3_8B, revision="a b", endpoint=closed_port_url())
    with pytest.raises(HubError, match=r"is not an http\(s\) URL: set HF_ENDPOINT"):
        fetch_model(QWEN3_8B, endpoint="ftp://example.org")
    with pytest.raises(HubError, match=r"must not contain credentials"):
        fetch_model(QWEN3_8B, endpoint="https://user:secret@example.org")
    with pytest.raises(HubError, match=r"timeout must be positive"):
        fetch_model(QWEN3_8B, endpoint=closed_port_url(), timeout=0)


def test_retry_after_as_seconds_or_http_date():
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert hub_http.parse_retry_after("17") == 17 and 58 <= hub_http.parse_retry_after(in_a_minute) <= 61
    assert hub_http.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0
    assert hub_http.parse_retry_after(None) is hub_http.parse_retry_after("soon") is hub_http.parse_retry_after("Wed, 21 Oct 2015 07:28:00") is None


def test_every_error_is_a_hub_error():
    for cls in (InvalidModelId, ModelNotFound, AccessDenied, RateLimited, HubTimeout, NoNetwork, MalformedConfig):
        assert issubclass(cls, HubError)


def test_endpoint_from_hf_endpoint(hub_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_ENDPOINT", hub_url + "/")
    assert fetch_model(QWEN3_8B).checkpoint.source == "api"
