"""HTTP for calculator.model.hub.client: every request of one fetch shares one deadline, which nothing can outlive.

- The deadline is real: requests' `timeout` only bounds each socket wait, so a server that drips one byte every
  0.25 s (in its headers or its body) would keep a call alive indefinitely. Each attempt runs under a watchdog
  that shuts the attempt's sockets down when the deadline passes, so a blocked read fails at once; bodies are
  streamed (iter_content) and the clock is checked after every chunk.
- Retries: HTTP 429 and 5xx are retried with exponential backoff (BACKOFF_S, doubling) up to MAX_ATTEMPTS, waiting
  what the server's Retry-After asks when it gives one; a retry whose wait would end past the deadline is not
  made (the last answer is reported instead). A refused connection is retried once. A timeout is never retried:
  the time is spent.
- The token is sent only as an `Authorization: Bearer` header; it is never in a message, a repr or a file.
"""
from __future__ import annotations

import datetime
import email.utils
import http.client
import json
import math
import socket
import threading
import time
from urllib.parse import quote, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from calculator.model.hub.types import AccessDenied, HubError, HubTimeout, ModelNotFound, NoNetwork, RateLimited

USER_AGENT = "llm-gpu-mem-calculator"
MAX_ATTEMPTS = 4            # tries of one request answered 429 or 5xx (the deadline may allow fewer)
BACKOFF_S = 0.25            # wait before the 2nd try; doubles for each further one (unless Retry-After says)
CONNECTION_RETRIES = 1      # a refused or reset connection is tried once more
READ_CHUNK = 16 * 1024      # bytes per streamed read between clock checks
MAX_TOTAL_HEADER_BYTES = 64 * 1024 * 1024  # safetensors header bytes one fetch may read over all its shards


# -----------------------------------------------------------------------------
# the watchdog: sockets shut down at the deadline

_current = threading.local()  # the watchdog of the attempt running on this thread


class _Watchdog:
    """Shuts down every socket the current attempt opens once `deadline` (time.monotonic) passes."""

    def __init__(self, deadline: float):
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self.fire)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        _current.watchdog = self
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        _current.watchdog = None

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.fired:
                _shutdown(sock)

    def fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets:
                _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # a recv blocked on it returns at once
    except OSError:
        pass


def _watch(conn) -> None:
    watchdog = getattr(_current, "watchdog", None)
    if watchdog is not None and conn.sock is not None:
        watchdog.watch(conn.sock)


class _WatchedHTTPConnection(HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _watch(self)


class _WatchedHTTPSConnection(HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _watch(self)


class _Pool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class _WatchedAdapter(HTTPAdapter):
    """requests' adapter whose connections report their socket to the running attempt's watchdog."""

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}

    def proxy_manager_for(self, proxy, **kwargs):
        manager = super().proxy_manager_for(proxy, **kwargs)
        manager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}
        return manager


def _session() -> requests.Session:
    """A session for one attempt (so every connection it uses is opened, and watched, by this attempt)."""
    s = requests.Session()
    s.mount("http://", _WatchedAdapter())
    s.mount("https://", _WatchedAdapter())
    return s


# -----------------------------------------------------------------------------
# one fetch's requests


class Hub:
    """What every request of one fetch shares: endpoint, repo, revision, the deadline, the token (private: never
    put it in a message, a repr or a file) and the header bytes read so far."""

    def __init__(self, endpoint: str, model_id: str, revision: str, token: str | None, timeout: float):
        self.endpoint, self.model_id, self.revision, self.timeout = endpoint, model_id, revision, timeout
        self.deadline = time.monotonic() + timeout
        self._token = token
        self._header_bytes = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Hub({self.endpoint!r}, {self.model_id!r}, {self.revision!r})"

    @property
    def has_token(self) -> bool:
        return self._token is not None

    def url(self, filename: str) -> str:
        return f"{self.endpoint}/{self.model_id}/resolve/{quote(self.revision, safe='')}/{quote(filename)}"

    def spend_header_bytes(self, n: int, name: str) -> None:
        """Count `n` more safetensors header bytes against MAX_TOTAL_HEADER_BYTES for this fetch."""
        with self._lock:
            self._header_bytes += n
            total = self._header_bytes
        if total > MAX_TOTAL_HEADER_BYTES:
            raise HubError(f"the checkpoint's safetensors headers exceed {MAX_TOTAL_HEADER_BYTES} bytes in all "
                           f"(at {name})", "the checkpoint index looks corrupt")

    def timeout_error(self) -> HubTimeout:
        return HubTimeout(f"the Hugging Face Hub at {self.endpoint} did not answer within {self.timeout:g} s",
                          "retry, raise the timeout, or set HF_ENDPOINT to a closer mirror")

    def get(self, url: str, *, limit: int, byte_range: tuple[int, int] | None = None,
            truncate: bool = False) -> tuple[int, dict, bytes]:
        """GET url -> (status, headers, body), all within the deadline. The body is read only for 2xx, at most
        `limit` bytes (beyond that: cut if `truncate`, else an error). 429 and 5xx are retried (see the module
        docstring); the last answer is returned when no retry fits. Raises HubTimeout or NoNetwork."""
        headers = {"User-Agent": USER_AGENT}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if byte_range:
            headers["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
            headers["Accept-Encoding"] = "identity"
        failure, tries, refused, answer = "", 0, 0, None
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                failure = "timeout"
                break
            tries += 1
            wait = None
            with _Watchdog(self.deadline) as watchdog:
                try:
                    with _session() as s, s.get(url, headers=headers, timeout=remaining, stream=True) as r:
                        if (r.status_code == 429 or r.status_code >= 500) and tries < MAX_ATTEMPTS:
                            wait = self._backoff(tries, r.headers.get("Retry-After"))
                        if wait is None:
                            body = self._read(r, limit, truncate) if 200 <= r.status_code < 300 else b""
                            return r.status_code, r.headers, body
                        answer = (r.status_code, r.headers, b"")
                except requests.Timeout:
                    failure = "timeout"
                except (requests.RequestException, OSError, http.client.HTTPException) as e:
                    # a connection error, or a read the watchdog cut short
                    failure = "timeout" if watchdog.fired or time.monotonic() >= self.deadline else \
                        _connection_reason(e) if isinstance(e, requests.ConnectionError) else \
                        f"request failed ({type(e).__name__})"
            if failure == "timeout":
                break
            if failure:  # a connection failure: once more, after a short wait, if it fits
                refused += 1
                if refused > CONNECTION_RETRIES or time.monotonic() + BACKOFF_S >= self.deadline:
                    break
                failure, wait, answer = "", BACKOFF_S, None
            time.sleep(wait)
            if answer is not None and time.monotonic() >= self.deadline:
                return answer  # the retry no longer fits: report what the server said
        # Raised out here, not inside an except block: a chained requests exception would carry the request
        # and so its Authorization header.
        if failure == "timeout":
            raise self.timeout_error()
        raise NoNetwork(f"cannot reach the Hugging Face Hub at {self.endpoint} ({failure})",
                        "check the network connection, or set HF_ENDPOINT to a reachable mirror")

    def _backoff(self, tries: int, retry_after: str | None) -> float | None:
        """Seconds to wait before try `tries + 1`, or None when that try could not start before the deadline."""
        asked = parse_retry_after(retry_after)
        wait = float(asked) if asked is not None else BACKOFF_S * 2 ** (tries - 1)
        return wait if time.monotonic() + wait < self.deadline else None

    def _read(self, r: requests.Response, limit: int, truncate: bool) -> bytes:
        chunks, size = [], 0
        for chunk in r.iter_content(READ_CHUNK):
            chunks.append(chunk)
            size += len(chunk)
            if truncate and size >= limit:
                break
            if size > limit:
                raise HubError(f"{urlsplit(r.url).path} is larger than {limit} bytes", "check HF_ENDPOINT")
            if time.monotonic() > self.deadline:
                raise self.timeout_error()
        return b"".join(chunks)[:limit]

    def check(self, status: int, headers, what: str) -> None:
        """Raise the HubError that an HTTP status means for `what` (a file name); return on 2xx."""
        if 200 <= status < 300:
            return
        mid, rev, page = repr(self.model_id), repr(self.revision), f"{self.endpoint}/{self.model_id}"
        code = headers.get("X-Error-Code", "")
        if code == "RevisionNotFound":
            raise ModelNotFound(f"revision {rev} of {mid} was not found on the Hugging Face Hub",
                                "use an existing branch, tag or commit hash (the default is 'main')")
        if code == "EntryNotFound":
            raise ModelNotFound(f"{mid} has no {what} at revision {rev}",
                                "pick a repo that ships a transformers config.json (not a GGUF-only repo)")
        if code == "RepoNotFound" or status == 404:
            raise ModelNotFound(f"model {mid} was not found on the Hugging Face Hub",
                                "check the id (org/name, e.g. 'Qwen/Qwen3-8B'); if the repo is private, set HF_TOKEN")
        if status in (401, 403):
            if self.has_token:
                raise AccessDenied(f"access to {mid} was denied (HTTP {status}) with the given token",
                                   f"accept the licence at {page} with the token's account, "
                                   "or set HF_TOKEN to a token with read access")
            raise AccessDenied(f"access to {mid} was denied (HTTP {status}: gated or private model)",
                               f"accept its licence at {page} and set HF_TOKEN to an access token of that account")
        if status == 429:
            wait = parse_retry_after(headers.get("Retry-After"))
            when = f"wait {wait} s (Retry-After)" if wait is not None else "wait a minute"
            raise RateLimited(f"the Hugging Face Hub rate-limited requests for {mid} (HTTP 429)",
                              f"{when} and retry, or set HF_TOKEN for a higher limit", retry_after=wait)
        if status >= 500:
            raise HubError(f"the Hugging Face Hub failed (HTTP {status}) on {what} of {mid}",
                           "the Hub may be down, retry later")
        raise HubError(f"unexpected HTTP {status} from the Hugging Face Hub on {what} of {mid}",
                       "check HF_ENDPOINT and retry")


def _connection_reason(e: Exception) -> str:
    text = str(e).lower()
    if "refused" in text:
        return "connection refused"
    if any(s in text for s in ("name or service", "nodename", "getaddrinfo", "resolve", "no address")):
        return "DNS lookup failed"
    return "connection failed"


def parse_retry_after(value: str | None) -> int | None:
    """Retry-After as whole seconds: either a number of seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0, math.ceil((when - datetime.datetime.now(datetime.timezone.utc)).total_seconds()))
    except (TypeError, ValueError, OverflowError):  # unparsable, or a date without a time zone
        return None


def parse_json(body: bytes, what: str, error=HubError) -> object:
    """`body` as JSON, or `error` saying where it is not valid."""
    try:
        return json.loads(body.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        where = f" (line {e.lineno}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
        fix = "pick a repo with a valid transformers config.json, or pass a local config file"
        raise error(f"{what} is not valid JSON{where}", fix) from None
