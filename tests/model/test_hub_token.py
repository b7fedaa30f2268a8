"""calculator.model.hub.client against a real HTTP server on 127.0.0.1 (tests/hub_server.py), no mocks: the token is sent as a
Bearer header and never appears in errors, warnings, logs, the cache or URLs."""
from __future__ import annotations

import logging
import sys
import traceback
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).parents[1]))  # hub_server.py, whatever pytest's import mode

from calculator.model.hub.client import AccessDenied, HubError, NoNetwork, fetch_model  # noqa: E402
from hub_repos import (  # noqa: E402
    FORBIDDEN_REPO, GATED_REPO, GATED_TOKEN, QWEN3_8B, RATE_LIMITED_REPO, SERVER_ERROR_REPO, SLOW_REPO,
)
from hub_server import (  # noqa: E402,F401  (fixtures are used by name; clean_env is autouse)
    HubServer, clean_env, closed_port_url, hub_root, hub_server, hub_url,
)


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
                if "/calculator/model/hub/" in Path(frame.f_code.co_filename).as_posix():
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
