"""calculator.hub against a real HTTP server on 127.0.0.1 (tests/hub_server.py): no mocks."""
from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import socket
import sys
import time
import traceback
from pathlib import Path

import pytest
import requests
from hypothesis import given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # hub_server.py, whatever pytest's import mode

from calculator import hub, hub_http  # noqa: E402
from calculator.hub import (  # noqa: E402
    AccessDenied, CheckpointInfo, HubError, HubModel, HubTimeout, InvalidModelId, MalformedConfig, ModelNotFound,
    NoNetwork, RateLimited, fetch_model, looks_like_hub_id,
)
from hub_repos import (  # noqa: E402
    FORBIDDEN_REPO, GATED_REPO, GATED_TOKEN, LLAMA_31_8B, LLAMA_31_8B_CONFIG, LLAMA_31_8B_PARAMETERS, NO_RANGE_REPO,
    QWEN3_8B, QWEN3_8B_CONFIG, QWEN3_8B_PARAMETERS, RATE_LIMITED_REPO, RETRY_AFTER, SERVER_ERROR_REPO, SLOW_REPO,
    TINY_TENSORS, decoder_tensors, fp8_tensors, llama_shards, many_tensors, numel_by_dtype,
)
from hub_server import HubServer, hub_root, hub_server, hub_url  # noqa: E402,F401  (fixtures are used by name)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No HF_TOKEN / HF_ENDPOINT / proxy from the machine; the default cache goes to a temp dir, never ~/.cache."""
    for var in ("HF_TOKEN", "HF_ENDPOINT", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)
    cache = tmp_path / "cache"
    monkeypatch.setenv("LLM_MEM_CACHE_DIR", str(cache))
    return cache


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def assert_clear_one_line(e: HubError) -> None:
    text = str(e)
    assert "\n" not in text and text == f"{e.problem}: {e.fix}"
    assert e.problem and e.fix


# -----------------------------------------------------------------------------
# the two count paths


def test_qwen3_8b_config_and_exact_count_from_api(hub_url: str, hub_server: HubServer, clean_env: Path):
    model = fetch_model(QWEN3_8B, endpoint=hub_url)
    assert isinstance(model, HubModel)
    assert (model.model_id, model.revision, model.from_cache, model.warnings) == (QWEN3_8B, "main", False, ())
    assert model.config == QWEN3_8B_CONFIG
    assert model.checkpoint == CheckpointInfo(QWEN3_8B_PARAMETERS, {"BF16": QWEN3_8B_PARAMETERS}, "api")
    paths = [r.path for r in hub_server.requests]
    assert paths == ["/Qwen/Qwen3-8B/resolve/main/config.json", "/api/models/Qwen/Qwen3-8B/revision/main"]
    assert len(list(clean_env.glob("*.json"))) == 1  # written to $LLM_MEM_CACHE_DIR


def test_the_qwen3_api_count_is_the_architecture_count():
    """The fixture's API number is Qwen3-8B's real count: 36 layers with q/k norms, untied lm_head."""
    assert sum(numel_by_dtype(decoder_tensors(QWEN3_8B_CONFIG, qk_norm=True)).values()) == QWEN3_8B_PARAMETERS


def test_llama_31_8b_exact_count_from_sharded_safetensors_headers(hub_url: str, hub_server: HubServer):
    model = fetch_model(LLAMA_31_8B, endpoint=hub_url, timeout=60)  # generous: 4 parallel reads on a busy machine
    assert model.config == LLAMA_31_8B_CONFIG and model.warnings == ()
    assert model.checkpoint == CheckpointInfo(LLAMA_31_8B_PARAMETERS, {"BF16": LLAMA_31_8B_PARAMETERS},
                                              "safetensors-headers")
    # only headers were read, with Range requests answered 206: one per shard
    shard_reads = [r for r in hub_server.requests if r.path.endswith("-of-00004.safetensors")]
    assert sorted(r.path.rsplit("/", 1)[1] for r in shard_reads) == [
        f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)]
    assert all(r.headers["Range"] == f"bytes=0-{hub.HEADER_PROBE_BYTES - 1}" and r.status == 206 for r in shard_reads)


def test_llama_shards_are_real_safetensors_files_with_the_counted_shapes(hub_root: Path):
    """Cross-check against the safetensors package reading the very files the server sends."""
    safetensors = pytest.importorskip("safetensors")
    counts: dict[str, int] = {}
    for i, expected in enumerate(llama_shards(), 1):
        path = hub_root / LLAMA_31_8B / "resolve/main" / f"model-{i:05d}-of-00004.safetensors"
        with safetensors.safe_open(str(path), framework="numpy") as f:
            assert set(f.keys()) == set(expected)
            for name in f.keys():
                shape = f.get_slice(name).get_shape()
                assert list(shape) == expected[name][1]
                counts[f.get_slice(name).get_dtype()] = counts.get(f.get_slice(name).get_dtype(), 0) + math.prod(shape)
    assert counts == {"BF16": LLAMA_31_8B_PARAMETERS}


def test_single_file_checkpoint_written_by_safetensors_counts_every_dtype(hub_url: str, hub_root: Path):
    model = fetch_model("acme/tiny-model", endpoint=hub_url)
    expected = numel_by_dtype(TINY_TENSORS)  # includes a scalar (shape []) counted as 1
    assert model.checkpoint.parameters_by_dtype == expected
    assert model.checkpoint.total_parameters == sum(expected.values()) == 617
    assert model.checkpoint.source == "safetensors-headers"
    safetensors = pytest.importorskip("safetensors")
    with safetensors.safe_open(str(hub_root / "acme/tiny-model/resolve/main/model.safetensors"), "numpy") as f:
        real = {}
        for name in f.keys():
            s = f.get_slice(name)
            real[s.get_dtype()] = real.get(s.get_dtype(), 0) + math.prod(s.get_shape())
    assert real == expected


def test_header_longer_than_the_first_range_read_takes_a_second_range(hub_url: str, hub_server: HubServer):
    model = fetch_model("acme/many-tensors-model", endpoint=hub_url)
    expected = sum(numel_by_dtype(many_tensors()).values()) + 32 * 8
    assert model.checkpoint.parameters_by_dtype == {"BF16": expected}
    ranges = [r.headers["Range"] for r in hub_server.requests if r.path.endswith("-of-00002.safetensors")]
    first = f"bytes=0-{hub.HEADER_PROBE_BYTES - 1}"
    assert ranges.count(first) == 2 and len(ranges) == 3
    assert [r for r in ranges if r != first][0].startswith(f"bytes={hub.HEADER_PROBE_BYTES}-")


def test_server_that_ignores_range_still_counts(hub_url: str, hub_server: HubServer):
    model = fetch_model(NO_RANGE_REPO, endpoint=hub_url)
    assert model.checkpoint.total_parameters == sum(numel_by_dtype(many_tensors()).values())
    assert {r.status for r in hub_server.requests if r.path.endswith(".safetensors")} <= {200, -1}


def test_quantized_fp8_checkpoint_keeps_quantization_config_and_counts_per_dtype(hub_url: str):
    model = fetch_model("acme/fp8-model", endpoint=hub_url)
    assert model.config["quantization_config"]["quant_method"] == "fp8"
    assert model.checkpoint.parameters_by_dtype == numel_by_dtype(fp8_tensors())
    assert list(model.checkpoint.parameters_by_dtype)[0] == "F8_E4M3"  # largest first
    assert model.warnings == ()


def test_packed_int_checkpoint_warns_that_int_counts_are_storage(hub_url: str):
    model = fetch_model("acme/gptq-model", endpoint=hub_url)
    assert "I32" in model.checkpoint.parameters_by_dtype
    assert model.warnings == ("gptq checkpoint: its integer tensors count packed storage elements, not parameters",)


def test_no_safetensors_is_a_warning_not_an_error(hub_url: str):
    model = fetch_model("acme/bin-only-model", endpoint=hub_url)
    assert model.checkpoint is None and model.config["model_type"] == "llama"
    assert model.warnings == ("no safetensors checkpoint (model.safetensors or model.safetensors.index.json); "
                              "estimating parameters from config.json",)


@pytest.mark.parametrize("model_id, problem", [
    ("acme/missing-shard-model",
     "shard model-00002-of-00002.safetensors listed in model.safetensors.index.json is missing"),
    ("acme/huge-header-model",
     "model.safetensors declares a 1000000000000-byte header, over the 16777216 bytes read per shard"),
    ("acme/bad-header-model", "the safetensors header of model.safetensors is not a JSON object"),
])
def test_broken_checkpoint_is_a_warning_not_an_error(hub_url: str, model_id: str, problem: str):
    model = fetch_model(model_id, endpoint=hub_url)
    assert model.checkpoint is None and model.config["model_type"] == "llama"
    assert model.warnings == (f"could not count parameters from the checkpoint ({problem}); "
                              "estimating them from config.json",)


def test_checkpoint_timeout_is_a_warning(hub_root: Path):
    """Every request takes 0.6 s and the whole call 1 s: config.json arrives, the count does not."""
    server = HubServer(hub_root)
    server.delay = 0.6
    try:
        start = time.monotonic()
        model = fetch_model(QWEN3_8B, endpoint=server.url, timeout=1.0, use_cache=False)
        assert time.monotonic() - start < 1.5
    finally:
        server.stop()
    assert model.config == QWEN3_8B_CONFIG and model.checkpoint is None
    assert len(model.warnings) == 1 and model.warnings[0].startswith("could not count parameters from the checkpoint")
    assert "did not answer within 1 s" in model.warnings[0]


def test_multimodal_config_is_returned_raw_with_a_warning(hub_url: str):
    model = fetch_model("acme/vision-language-model", endpoint=hub_url)
    assert model.config["text_config"]["hidden_size"] == 2560 and "hidden_size" not in model.config
    assert model.warnings[0] == "using text_config of a multimodal model"


# -----------------------------------------------------------------------------
# failure modes: the right type, one clear line naming what to change


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


# -----------------------------------------------------------------------------
# the token never leaks


def test_token_never_appears_in_errors_warnings_logs_cache_or_urls(
        hub_root: Path, hub_url: str, hub_server: HubServer, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch):
    caplog.set_level(logging.DEBUG)
    secret = GATED_TOKEN
    cache = tmp_path / "token-cache"
    texts: list[str] = []

    def chain(e: BaseException):
        while e is not None:
            yield e
            e = e.__cause__ or e.__context__

    def expect_error(model_id: str, endpoint: str, **kw) -> HubError:
        with pytest.raises(HubError) as info:
            fetch_model(model_id, endpoint=endpoint, token=secret, cache_dir=cache, **kw)
        e = info.value
        texts.extend([str(e), repr(e), "".join(traceback.format_exception(e)), repr(e.args), repr(vars(e))])
        assert not any(isinstance(x, requests.RequestException) for x in chain(e))  # they hold the request headers
        texts.extend(frame_locals(e))
        return e

    def frame_locals(e: BaseException):
        """What an error reporter that captures locals would see in the client's frames."""
        for x in chain(e):
            for frame, _ in traceback.walk_tb(x.__traceback__):
                if Path(frame.f_code.co_filename).name.startswith("hub") and "calculator" in frame.f_code.co_filename:
                    for value in frame.f_locals.values():
                        yield repr(value)
                        yield repr(getattr(value, "__dict__", None))

    for model_id in ("nobody/nothing", FORBIDDEN_REPO, RATE_LIMITED_REPO, SERVER_ERROR_REPO, "acme/malformed-config"):
        expect_error(model_id, hub_url)
    expect_error(SLOW_REPO, hub_url, timeout=0.3)
    expect_error(QWEN3_8B, closed_port_url())
    monkeypatch.setenv("HF_TOKEN", secret)
    with pytest.raises(NoNetwork) as info:
        fetch_model(QWEN3_8B, endpoint=closed_port_url(), cache_dir=cache)
    texts.append("".join(traceback.format_exception(info.value)))
    texts.extend(frame_locals(info.value))
    monkeypatch.delenv("HF_TOKEN")

    # successes, fresh and then from the cache once the server is gone
    server = HubServer(hub_root)
    models = [fetch_model(GATED_REPO, endpoint=server.url, token=secret, cache_dir=cache),
              fetch_model("acme/bin-only-model", endpoint=server.url, token=secret, cache_dir=cache),
              fetch_model("acme/vision-language-model", endpoint=server.url, token=secret, cache_dir=cache)]
    sent = list(server.requests)
    server.stop()
    models.append(fetch_model(GATED_REPO, endpoint=server.url, token=secret, cache_dir=cache))
    assert models[-1].from_cache
    texts.extend(repr(m) for m in models)
    texts.extend(w for m in models for w in m.warnings)

    # a token that requests would refuse as a header value (and echo in its error)
    with pytest.raises(AccessDenied, match="contains spaces or non-ASCII") as info:
        fetch_model(QWEN3_8B, endpoint=hub_url, token=secret + "\nX-Injected: 1", cache_dir=cache)
    texts.append("".join(traceback.format_exception(info.value)))

    texts.extend(r.getMessage() for r in caplog.records)
    files = list(cache.iterdir())
    assert len(files) == 3
    texts.extend(str(p) for p in files)
    texts.extend(p.read_text() for p in files)
    texts.extend(r.path for r in hub_server.requests + sent)
    assert all(secret not in t for t in texts)
    # ...while it really was sent, as a Bearer header
    assert {r.headers.get("Authorization") for r in hub_server.requests + sent} == {f"Bearer {secret}"}
