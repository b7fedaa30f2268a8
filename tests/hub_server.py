"""A fake Hugging Face Hub for tests: a real ThreadingHTTPServer on 127.0.0.1 (port 0, daemon thread) serving a
directory laid out like the Hub, with real safetensors files and HTTP Range support (206).

    /{org}/{name}/resolve/{revision}/{file}      files, Range honoured (except in NO_RANGE_REPO)
    /api/models/{org}/{name}[/revision/{rev}]     {org}/{name}/api.json
and the failure modes, by repo: GATED_REPO (401 without `Bearer GATED_TOKEN`), FORBIDDEN_REPO (403),
RATE_LIMITED_REPO (429, Retry-After: RETRY_AFTER), SLOW_REPO (sleeps SLOW_SECONDS), SERVER_ERROR_REPO (503),
unknown repos (404 RepoNotFound), unknown revisions (404 RevisionNotFound), missing files (404 EntryNotFound),
like the real Hub's X-Error-Code header.
PRIVATE_REPO (`org/private`: 401 without `Bearer PRIVATE_TOKEN`, its API page says "private": true) and slow
bodies: DRIP_REPO sends its config.json one byte every DRIP_INTERVAL s (headers at once), DRIP_HEADERS_REPO its
status line and headers that way. `HubServer.script(repo, [(status, retry_after), ...])` makes the next requests
for a repo answer those statuses (then normally again): for 5xx / 429 retries. Each Request records when it came.

The repos it serves, their ids and the failure modes' tokens and delays: tests/hub_repos.py.

Fixtures: `hub_root` (the directory, built once per module), `hub_server` (a running HubServer), `hub_url` (its
base URL), `clean_env` (autouse: no token, endpoint or proxy from the machine; the cache in a temp dir). Import them
into a test module: `from hub_server import hub_root, hub_server, hub_url`. `closed_port_url()`: where nothing listens.
"""
from __future__ import annotations

import json
import re
import shutil
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from hub_repos import (DRIP_HEADERS_REPO, DRIP_INTERVAL, DRIP_REPO, FORBIDDEN_REPO, GATED_REPO, GATED_TOKEN,
                       NO_RANGE_REPO, PRIVATE_REPO, PRIVATE_TOKEN, RATE_LIMITED_REPO, RETRY_AFTER, SERVER_ERROR_REPO,
                       SLOW_REPO, SLOW_SECONDS, TINY_CONFIG, build_hub_tree)


@dataclass
class Request:
    """One request as the server saw it; status is 0 until answered, -1 if the client hung up."""

    path: str
    headers: dict[str, str]
    status: int
    at: float = 0.0  # time.monotonic() when it arrived


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        request = Request(self.path, dict(self.headers.items()), 0, time.monotonic())
        self.server.log(request)
        try:
            request.status = self._route()
        except OSError:  # the client gave up (timeout) or closed early (done with its Range read)
            request.status = -1

    def _route(self) -> int:
        srv = self.server
        if srv.delay:
            srv.stopping.wait(srv.delay)
        parts = urlsplit(self.path)
        seg = [unquote(s) for s in parts.path.split("/")[1:]]
        if seg[:2] == ["api", "models"] and len(seg) >= 4:
            repo, file = f"{seg[2]}/{seg[3]}", Path(seg[2], seg[3], "api.json")
            revision = seg[5] if len(seg) == 6 and seg[4] == "revision" else "main"
        elif len(seg) >= 5 and seg[2] == "resolve":
            repo, revision, file = f"{seg[0]}/{seg[1]}", seg[3], Path(seg[0], seg[1], "resolve", *seg[3:])
        else:
            return self._error(404, "RepoNotFound", "Not found")
        if any(s in ("", ".", "..") for s in file.parts):
            return self._error(400, "", "Bad path")

        scripted = srv.next_scripted(repo)
        if scripted is not None:
            status, retry_after = scripted
            return self._error(status, "", "Scripted failure", {"Retry-After": retry_after} if retry_after else None)
        if repo == PRIVATE_REPO and self.headers.get("Authorization") != f"Bearer {PRIVATE_TOKEN}":
            return self._error(401, "", "Invalid credentials in Authorization header")
        if repo == DRIP_HEADERS_REPO:
            return self._drip(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        if repo == DRIP_REPO and seg[-1] == "config.json":
            body = json.dumps(TINY_CONFIG).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return self._drip(body)
        if repo == GATED_REPO and self.headers.get("Authorization") != f"Bearer {GATED_TOKEN}":
            return self._error(401, "GatedRepo", f"Access to model {repo} is restricted. You must be authenticated.")
        if repo == FORBIDDEN_REPO:
            return self._error(403, "GatedRepo", f"Access to {repo} is restricted: you are not in the authorized list.")
        if repo == RATE_LIMITED_REPO:
            return self._error(429, "", "Too many requests", {"Retry-After": str(RETRY_AFTER)})
        if repo == SERVER_ERROR_REPO:
            return self._error(503, "", "Service unavailable")
        if repo == SLOW_REPO:
            srv.stopping.wait(SLOW_SECONDS)

        if not (srv.root / repo).is_dir():
            return self._error(404, "RepoNotFound", "Repository not found")
        if seg[0] != "api" and not (srv.root / repo / "resolve" / revision).is_dir():
            return self._error(404, "RevisionNotFound", "Invalid rev id")
        if not (srv.root / file).is_file():
            return self._error(404, "EntryNotFound", "Entry not found")
        return self._send_file(srv.root / file, honour_range=repo != NO_RANGE_REPO)

    def _drip(self, data: bytes) -> int:
        """Send `data` one byte every DRIP_INTERVAL s (until the client hangs up or the server stops)."""
        self.wfile.flush()
        for i in range(len(data)):
            self.wfile.write(data[i:i + 1])
            self.wfile.flush()
            if self.server.stopping.wait(self.server.drip_interval):
                break
        self.close_connection = True
        return 200

    def _error(self, status: int, code: str, message: str, extra: dict | None = None) -> int:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if code:
            self.send_header("X-Error-Code", code)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        return status

    def _send_file(self, path: Path, honour_range: bool) -> int:
        size = path.stat().st_size
        start, end, status = 0, size - 1, 200
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "").strip())
        if honour_range and m and (m[1] or m[2]):
            if m[1]:
                start, end = int(m[1]), min(int(m[2]) if m[2] else size - 1, size - 1)
            else:  # suffix: the last n bytes
                start = max(0, size - int(m[2]))
            if start > end:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return 416
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if path.suffix == ".json" else "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes" if honour_range else "none")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        with open(path, "rb") as f:
            f.seek(start)
            left = end - start + 1
            while left > 0:
                chunk = f.read(min(left, 64 * 1024))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)
        return status


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.delay = 0.0                     # seconds every request waits first (set it to make the Hub "slow")
        self.drip_interval = DRIP_INTERVAL   # seconds between two bytes of a dripped answer
        self.stopping = threading.Event()    # wakes sleeping handlers on stop
        self.requests: list[Request] = []
        self.scripts: dict[str, list[tuple[int, str | None]]] = {}
        self._lock = threading.Lock()

    def next_scripted(self, repo: str) -> tuple[int, str | None] | None:
        with self._lock:
            queue = self.scripts.get(repo)
            return queue.pop(0) if queue else None

    def log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)


class HubServer:
    """A running fake Hub serving `root`. `url` is its base URL, `requests` what it was asked, `delay` a lag
    added to every request, `drip_interval` the pace of a dripped answer; stop() closes the port (later requests get "connection refused")."""

    def __init__(self, root: Path):
        self._server = _Server(root)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def requests(self) -> list[Request]:
        return self._server.requests

    @property
    def delay(self) -> float:
        return self._server.delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        self._server.delay = seconds

    @property
    def drip_interval(self) -> float:
        return self._server.drip_interval

    @drip_interval.setter
    def drip_interval(self, seconds: float) -> None:
        self._server.drip_interval = seconds

    def clear(self) -> None:
        """Forget the requests seen so far (and any scripted answers not yet given)."""
        with self._server._lock:
            self._server.requests.clear()
            self._server.scripts.clear()

    def script(self, repo: str, answers: list[tuple[int, str | None]]) -> None:
        """The next len(answers) requests for `repo` get these (status, Retry-After) answers, then normal ones."""
        with self._server._lock:
            self._server.scripts[repo] = list(answers)

    def stop(self) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory: pytest.TempPathFactory):
    """The fake Hub's directory, built once per test module (and removed after: it holds 16 GB sparse files)."""
    root = tmp_path_factory.mktemp("hub")
    build_hub_tree(root)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def hub_server(hub_root: Path):
    """A HubServer over hub_root, running for the whole test module."""
    server = HubServer(hub_root)
    yield server
    server.stop()


@pytest.fixture()
def hub_url(hub_server: HubServer):
    """The running fake Hub's base URL, e.g. http://127.0.0.1:41234 (its request log cleared for each test)."""
    hub_server.clear()
    hub_server.delay = 0.0
    hub_server.drip_interval = DRIP_INTERVAL
    yield hub_server.url


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
