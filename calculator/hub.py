"""A small Hugging Face Hub client: fetch a model's config.json by id and count its parameters exactly.

Kept apart from the math: it returns the raw config (mapping it to the engine's model description is done
elsewhere) plus the exact parameter count per dtype when the Hub knows it. Standard library + `requests` only.

    model = fetch_model("Qwen/Qwen3-8B")   # HubModel(config={...}, checkpoint=CheckpointInfo(8190735360, ...))

Where the count comes from, first that answers:
1. `{endpoint}/api/models/{id}/revision/{rev}`: its "safetensors": {"parameters": {"BF16": n, ...}} field;
2. the safetensors headers themselves, read with HTTP Range requests (never the weights): the first 8 bytes
   of a shard are the little-endian u64 length N of the JSON header that follows, which maps each tensor name
   to {dtype, shape, data_offsets}. Shards are listed by model.safetensors.index.json's weight_map, or the
   checkpoint is a single model.safetensors.
A checkpoint that cannot be counted is a warning, not an error: config.json alone is enough to estimate.

Every failure is a `HubError` subclass whose str() is one line: what went wrong, then what to change.
Successful fetches are kept in a small on-disk cache, used only when the Hub cannot be reached.
The token is sent only as an `Authorization: Bearer` header and is never stored, logged or echoed.
"""
from __future__ import annotations

import datetime
import email.utils
import hashlib
import json
import math
import os
import re
import struct
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import requests

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_CACHE_DIR = "~/.cache/llm-gpu-mem/hub"
MAX_CACHE_ENTRIES = 256                   # the cache keeps at most this many models; the oldest (by mtime) go first
HEADER_PROBE_BYTES = 64 * 1024            # first Range read of a shard; most headers fit, else one more read
MAX_HEADER_BYTES = 100 * 1024 * 1024      # safetensors' own limit on the JSON header
MAX_JSON_BYTES = 64 * 1024 * 1024         # config.json, index.json and the API answer are far smaller
SHARD_WORKERS = 8                         # shard headers read in parallel
USER_AGENT = "llm-gpu-mem-calculator"
_CACHE_FORMAT = 1
_CACHE_NAME = re.compile(r"[0-9a-f]{64}\.json")
_ID_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")
_PACKED_DTYPES = {"I4", "U4", "I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64"}

# -----------------------------------------------------------------------------
# what fetch_model returns


@dataclass(frozen=True)
class CheckpointInfo:
    """The exact parameter count of a checkpoint, total and per safetensors dtype (e.g. {"BF16": 8030261248})."""

    total_parameters: int
    parameters_by_dtype: dict[str, int]
    source: str  # "api" | "safetensors-headers"


@dataclass(frozen=True)
class HubModel:
    """A model's raw config.json, its checkpoint count if known, and warnings worth showing the user."""

    model_id: str
    revision: str
    config: dict
    checkpoint: CheckpointInfo | None
    from_cache: bool  # True when served from the on-disk cache because the Hub could not be reached
    warnings: tuple[str, ...]


# -----------------------------------------------------------------------------
# errors: str(e) is one line, "<what went wrong>: <what to change>"


class HubError(Exception):
    """Base of every Hub failure. `problem` says what went wrong, `fix` what to change; str() joins them."""

    def __init__(self, problem: str, fix: str = ""):
        self.problem = " ".join(problem.split())
        self.fix = " ".join(fix.split())
        super().__init__(f"{self.problem}: {self.fix}" if self.fix else self.problem)


class InvalidModelId(HubError):
    """The text is not an "org/name" model id (checked before any request)."""


class ModelNotFound(HubError):
    """HTTP 404: no such repo, revision, or no config.json in it."""


class AccessDenied(HubError):
    """HTTP 401/403: the repo is gated or private, or the token was refused."""


class RateLimited(HubError):
    """HTTP 429. `retry_after` is the server's Retry-After in seconds, if it gave one."""

    def __init__(self, problem: str, fix: str = "", retry_after: int | None = None):
        super().__init__(problem, fix)
        self.retry_after = retry_after


class HubTimeout(HubError):
    """The Hub did not answer within the timeout (and no cached copy could stand in)."""


class NoNetwork(HubError):
    """The Hub could not be reached: connection refused, DNS failure... (and no cached copy could stand in)."""


class MalformedConfig(HubError):
    """config.json is not JSON, not a JSON object, or has no model_type."""


# -----------------------------------------------------------------------------
# public functions


def looks_like_hub_id(text: str) -> bool:
    """True if `text` has the "org/name" shape of a Hub model id and is not an existing local path."""
    return _is_model_id(text) and not os.path.exists(text)


def fetch_model(
    model_id: str,
    *,
    revision: str = "main",
    token: str | None = None,
    endpoint: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    timeout: float = 10.0,
    use_cache: bool = True,
) -> HubModel:
    """Fetch `model_id`'s config.json from the Hub and count its checkpoint's parameters exactly.

    endpoint: else $HF_ENDPOINT, else https://huggingface.co. token: else $HF_TOKEN (sent only as a Bearer header).
    cache_dir: else $LLM_MEM_CACHE_DIR, else ~/.cache/llm-gpu-mem/hub. timeout bounds the whole call, in seconds.
    The Hub is always asked first; the cache answers only when it cannot be reached or times out (from_cache=True).
    use_cache=False neither reads nor writes the cache. Raises a HubError subclass with a one-line message.
    """
    try:
        return _fetch_model(model_id, revision, token, endpoint, cache_dir, timeout, use_cache)
    except HubError as e:
        error = e
    # Re-raised from here without the inner frames, whose locals hold the token (tools such as error reporters
    # capture frame locals), and with this frame's own copy of it gone.
    token = None
    raise error.with_traceback(None)


def _fetch_model(model_id: str, revision: str, token: str | None, endpoint: str | None,
                 cache_dir: str | os.PathLike | None, timeout: float, use_cache: bool) -> HubModel:
    if not _is_model_id(model_id):
        shown = repr(model_id[:100]) + "..." if isinstance(model_id, str) and len(model_id) > 100 else repr(model_id)
        raise InvalidModelId(f"{shown} is not a Hugging Face model id", "use the 'org/name' form, e.g. 'Qwen/Qwen3-8B'")
    if not isinstance(revision, str) or not revision or any(c.isspace() or not c.isprintable() for c in revision):
        raise HubError(f"invalid revision {revision!r}", "use a branch, tag or commit hash, e.g. 'main'")
    if not timeout > 0:
        raise HubError(f"timeout must be positive, got {timeout!r}", "pass a number of seconds, e.g. 10")
    hub = _Hub(_resolve_endpoint(endpoint), model_id, revision, _resolve_token(token), timeout)
    cache_file = _cache_path(cache_dir, hub.endpoint, model_id, revision) if use_cache else None

    unreachable = None
    try:
        config = _fetch_config(hub)
    except (NoNetwork, HubTimeout) as e:
        unreachable = e
    if unreachable is not None:  # raised here, outside the except block, so nothing gets chained to it
        cached = _read_cache(cache_file, model_id, revision, unreachable.problem) if cache_file else None
        if cached is not None:
            return cached
        if cache_file is not None:
            problem = f"{unreachable.problem}, and no cached copy of {model_id!r} exists"
            raise type(unreachable)(problem, unreachable.fix)
        raise unreachable

    warnings = []
    if "text_config" in config and "hidden_size" not in config:
        warnings.append("using text_config of a multimodal model")
    checkpoint = _fetch_checkpoint(hub, warnings)
    quant = config.get("quantization_config")
    if quant and checkpoint and _PACKED_DTYPES & set(checkpoint.parameters_by_dtype):
        method = quant.get("quant_method", "quantized") if isinstance(quant, dict) else "quantized"
        warnings.append(f"{method} checkpoint: its integer tensors count packed storage elements, not parameters")
    model = HubModel(model_id, revision, config, checkpoint, from_cache=False, warnings=tuple(warnings))
    if cache_file is not None:
        try:
            _write_cache(cache_file, model)
        except OSError as e:
            warning = f"could not write the cache in {cache_file.parent} ({e.strerror or e})"
            model = HubModel(model_id, revision, config, checkpoint, False, model.warnings + (warning,))
    return model


# -----------------------------------------------------------------------------
# ids, endpoint, token


def _is_model_id(text: object) -> bool:
    if not isinstance(text, str):
        return False
    parts = text.split("/")
    return (len(parts) == 2 and not text.endswith(".git")
            and all(_ID_PART.fullmatch(p) and ".." not in p and "--" not in p for p in parts))


def _resolve_endpoint(endpoint: str | None) -> str:
    endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).strip().rstrip("/")
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HubError(f"the Hub endpoint {endpoint!r} is not an http(s) URL",
                       "set HF_ENDPOINT to e.g. https://huggingface.co")
    if "@" in parts.netloc:
        raise HubError("the Hub endpoint must not contain credentials",
                       "remove them from HF_ENDPOINT and set HF_TOKEN instead")
    return endpoint


def _resolve_token(token: str | None) -> str | None:
    token = (token if token is not None else os.environ.get("HF_TOKEN") or "").strip()
    if token and not all(33 <= ord(c) < 127 for c in token):
        # requests would put the raw header value in its error message: never let it get that far
        raise AccessDenied("the Hugging Face token contains spaces or non-ASCII characters",
                           "copy the token (hf_...) into HF_TOKEN again")
    return token or None


# -----------------------------------------------------------------------------
# HTTP: one retry at most, the whole fetch bounded by one deadline


class _Hub:
    """What every request of one fetch shares. Holds the token: never put it in a message, a repr or a file."""

    def __init__(self, endpoint: str, model_id: str, revision: str, token: str | None, timeout: float):
        self.endpoint, self.model_id, self.revision, self.timeout = endpoint, model_id, revision, timeout
        self.deadline = time.monotonic() + timeout
        self._token = token

    def __repr__(self) -> str:
        return f"_Hub({self.endpoint!r}, {self.model_id!r}, {self.revision!r})"

    @property
    def has_token(self) -> bool:
        return self._token is not None

    def url(self, filename: str) -> str:
        return f"{self.endpoint}/{self.model_id}/resolve/{quote(self.revision, safe='')}/{quote(filename)}"

    def get(self, url: str, *, byte_range: tuple[int, int] | None = None, limit: int = MAX_JSON_BYTES,
            truncate: bool = False) -> tuple[int, dict, bytes]:
        """GET url -> (status, headers, body). The body is read only for 2xx, at most `limit` bytes (beyond that:
        cut if `truncate`, else an error). Retries once on a connection error or 5xx; raises NoNetwork/HubTimeout."""
        headers = {"User-Agent": USER_AGENT}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if byte_range:
            headers["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
            headers["Accept-Encoding"] = "identity"
        failure = ""
        for attempt in range(2):
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                failure = "timeout"
                break
            try:
                with requests.get(url, headers=headers, timeout=remaining, stream=True) as r:
                    if r.status_code >= 500 and attempt == 0:
                        failure = f"HTTP {r.status_code}"
                        continue
                    body = self._read(r, limit, truncate) if 200 <= r.status_code < 300 else b""
                    return r.status_code, r.headers, body
            except requests.Timeout:
                failure = "timeout"
                break
            except requests.ConnectionError as e:  # also what a read timeout mid-body turns into
                failure = "timeout" if time.monotonic() >= self.deadline else _connection_reason(e)
                if failure == "timeout":
                    break
            except requests.RequestException as e:
                failure = f"request failed ({type(e).__name__})"
                break
        # Raised out here, not inside an except block: a chained requests exception would carry the request
        # and so its Authorization header.
        if failure == "timeout":
            raise HubTimeout(f"the Hugging Face Hub at {self.endpoint} did not answer within {self.timeout:g} s",
                             "retry, raise the timeout, or set HF_ENDPOINT to a closer mirror")
        raise NoNetwork(f"cannot reach the Hugging Face Hub at {self.endpoint} ({failure})",
                        "check the network connection, or set HF_ENDPOINT to a reachable mirror")

    def _read(self, r: requests.Response, limit: int, truncate: bool) -> bytes:
        chunks, size = [], 0
        for chunk in r.iter_content(16 * 1024):
            chunks.append(chunk)
            size += len(chunk)
            if truncate and size >= limit:
                break
            if size > limit:
                raise HubError(f"{urlsplit(r.url).path} is larger than {limit} bytes", "check HF_ENDPOINT")
            if time.monotonic() > self.deadline:
                raise HubTimeout(f"the Hugging Face Hub at {self.endpoint} did not answer within {self.timeout:g} s",
                                 "retry, raise the timeout, or set HF_ENDPOINT to a closer mirror")
        return b"".join(chunks)[:limit]

    def check(self, status: int, headers: dict, what: str) -> None:
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
            wait = _retry_after(headers.get("Retry-After"))
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


def _retry_after(value: str | None) -> int | None:
    """Retry-After as whole seconds: either a number of seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0, math.ceil((when - datetime.datetime.now(datetime.timezone.utc)).total_seconds()))
    except (TypeError, ValueError):  # unparsable, or a date without a time zone
        return None


def _json(body: bytes, what: str) -> object:
    try:
        return json.loads(body.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as e:
        where = f" (line {e.lineno}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
        fix = "pick a repo with a valid transformers config.json, or pass a local config file"
        raise MalformedConfig(f"{what} is not valid JSON{where}", fix) from None


# -----------------------------------------------------------------------------
# config.json


def _fetch_config(hub: _Hub) -> dict:
    status, headers, body = hub.get(hub.url("config.json"))
    hub.check(status, headers, "config.json")
    what = f"config.json of {hub.model_id!r}"
    config = _json(body, what)
    if not isinstance(config, dict):
        raise MalformedConfig(f"{what} is not a JSON object", "pick a repo with a transformers config.json")
    if not isinstance(config.get("model_type"), str) or not config["model_type"]:
        raise MalformedConfig(f"{what} has no model_type, so it is not a transformers model config",
                              "pick the transformers version of the model, or pass a local config file")
    return config


# -----------------------------------------------------------------------------
# exact parameter count


def _fetch_checkpoint(hub: _Hub, warnings: list[str]) -> CheckpointInfo | None:
    """The exact count from the API, else from the safetensors headers; a failure becomes a warning."""
    try:
        info = _count_from_api(hub) or _count_from_headers(hub)
    except HubError as e:
        warnings.append(f"could not count parameters from the checkpoint ({e.problem}); "
                        "estimating them from config.json")
        return None
    if info is None:
        warnings.append("no safetensors checkpoint (model.safetensors or model.safetensors.index.json); "
                        "estimating parameters from config.json")
    return info


def _count_from_api(hub: _Hub) -> CheckpointInfo | None:
    """The API's "safetensors": {"parameters": {dtype: n}} field, or None if it has none."""
    url = f"{hub.endpoint}/api/models/{hub.model_id}/revision/{quote(hub.revision, safe='')}"
    try:
        status, headers, body = hub.get(url)
        hub.check(status, headers, "the model's API page")
        data = _json(body, "the model's API page")
    except HubTimeout:
        raise
    except HubError:
        return None  # the headers may still answer
    st = data.get("safetensors") if isinstance(data, dict) else None
    params = st.get("parameters") if isinstance(st, dict) else None
    if not isinstance(params, dict) or not params or not all(
            isinstance(k, str) and type(v) is int and v >= 0 for k, v in params.items()):
        return None
    return _checkpoint(params, "api")


def _count_from_headers(hub: _Hub) -> CheckpointInfo | None:
    """Sum numel per dtype over the safetensors headers of every shard; None if there is no safetensors file."""
    status, headers, body = hub.get(hub.url("model.safetensors.index.json"))
    if status == 404:
        shards = ["model.safetensors"]
    else:
        hub.check(status, headers, "model.safetensors.index.json")
        index = _json(body, "model.safetensors.index.json")
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        files = list(weight_map.values()) if isinstance(weight_map, dict) else []
        if not files or not all(isinstance(f, str) and f and not f.startswith("/") and ".." not in f.split("/")
                                for f in files):
            raise HubError("model.safetensors.index.json has no usable weight_map",
                           "the checkpoint index looks corrupt")
        shards = sorted(set(files))
    with ThreadPoolExecutor(max_workers=min(SHARD_WORKERS, len(shards))) as pool:
        futures = [pool.submit(_read_safetensors_header, hub, name) for name in shards]
        try:
            tensor_headers = [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    if tensor_headers == [None] and shards == ["model.safetensors"]:
        return None
    counts: dict[str, int] = {}
    for name, header in zip(shards, tensor_headers):
        if header is None:
            raise HubError(f"shard {name} listed in model.safetensors.index.json is missing",
                           "the checkpoint is incomplete")
        for dtype, n in _count_tensors(header, name).items():
            counts[dtype] = counts.get(dtype, 0) + n
    return _checkpoint(counts, "safetensors-headers")


def _read_safetensors_header(hub: _Hub, name: str) -> dict | None:
    """The JSON header of one shard, read with Range requests; None if the file does not exist."""
    url = hub.url(name)
    probe = (0, HEADER_PROBE_BYTES - 1)
    status, headers, head = hub.get(url, byte_range=probe, limit=HEADER_PROBE_BYTES, truncate=True)
    if status == 404:
        return None
    hub.check(status, headers, name)
    if len(head) < 8:
        raise HubError(f"{name} is too short to be a safetensors file", "the checkpoint looks corrupt")
    (n,) = struct.unpack("<Q", head[:8])  # little-endian u64: the length of the JSON header
    if n > MAX_HEADER_BYTES:
        raise HubError(f"{name} declares a {n}-byte header, over the safetensors limit", "the checkpoint looks corrupt")
    end = 8 + n
    if len(head) < end:  # the header is longer than the probe: fetch the rest
        status, headers, rest = hub.get(url, byte_range=(len(head), end - 1), limit=end, truncate=True)
        hub.check(status, headers, name)
        if status == 200:  # the server ignored Range and sent the file from byte 0
            rest = rest[len(head):]
        head += rest
    if len(head) < end:
        raise HubError(f"{name} ends inside its header", "the checkpoint looks truncated")
    try:
        header = json.loads(head[8:end].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        header = None
    if not isinstance(header, dict):
        raise HubError(f"the safetensors header of {name} is not a JSON object", "the checkpoint looks corrupt")
    return header


def _count_tensors(header: dict, name: str) -> dict[str, int]:
    """numel per dtype of one safetensors header ({tensor: {dtype, shape, data_offsets}, "__metadata__": {...}})."""
    counts: dict[str, int] = {}
    for tensor, info in header.items():
        if tensor == "__metadata__":
            continue
        dtype = info.get("dtype") if isinstance(info, dict) else None
        shape = info.get("shape") if isinstance(info, dict) else None
        if not isinstance(dtype, str) or not isinstance(shape, list) or not all(
                type(d) is int and d >= 0 for d in shape):
            raise HubError(f"tensor {tensor[:80]!r} in {name} has no valid dtype and shape",
                           "the checkpoint looks corrupt")
        counts[dtype] = counts.get(dtype, 0) + math.prod(shape)  # shape [] is a scalar: 1 element
    return counts


def _checkpoint(counts: dict[str, int], source: str) -> CheckpointInfo:
    by_dtype = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return CheckpointInfo(sum(by_dtype.values()), by_dtype, source)


# -----------------------------------------------------------------------------
# on-disk cache: one JSON file per (endpoint, model id, revision), never anything about the token


def _cache_path(cache_dir: str | os.PathLike | None, endpoint: str, model_id: str, revision: str) -> Path:
    directory = Path(os.path.expanduser(cache_dir or os.environ.get("LLM_MEM_CACHE_DIR") or DEFAULT_CACHE_DIR))
    key = hashlib.sha256(json.dumps([endpoint, model_id, revision]).encode()).hexdigest()
    return directory / f"{key}.json"


def _write_cache(path: Path, model: HubModel) -> None:
    """Write atomically (temp file + os.replace), then evict the oldest entries beyond MAX_CACHE_ENTRIES."""
    c = model.checkpoint
    entry = {
        "format": _CACHE_FORMAT,
        "model_id": model.model_id,
        "revision": model.revision,
        "fetched_at": time.time(),
        "config": model.config,
        "checkpoint": None if c is None else
        {"total_parameters": c.total_parameters, "parameters_by_dtype": c.parameters_by_dtype, "source": c.source},
        "warnings": list(model.warnings),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entry, f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _evict(path.parent)


def _evict(directory: Path) -> None:
    entries = []
    for p in directory.iterdir():
        if _CACHE_NAME.fullmatch(p.name):
            try:
                entries.append((p.stat().st_mtime, p.name, p))
            except OSError:
                pass
    entries.sort()
    for _, _, p in entries[:max(0, len(entries) - MAX_CACHE_ENTRIES)]:
        try:
            p.unlink()
        except OSError:
            pass


def _read_cache(path: Path, model_id: str, revision: str, reason: str) -> HubModel | None:
    """The cached HubModel, its first warning "offline: using cached config fetched at <date>; <reason>";
    None if there is no entry or it is corrupt (a corrupt file is ignored here and replaced by the next fetch)."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("format") != _CACHE_FORMAT:
        return None
    if entry.get("model_id") != model_id or entry.get("revision") != revision:
        return None
    config, c, fetched_at, warnings = (entry.get(k) for k in ("config", "checkpoint", "fetched_at", "warnings"))
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        return None
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        return None
    checkpoint = None
    if c is not None:
        by_dtype = c.get("parameters_by_dtype") if isinstance(c, dict) else None
        if not isinstance(by_dtype, dict) or not all(type(v) is int for v in by_dtype.values()):
            return None
        if c.get("source") not in ("api", "safetensors-headers") or c.get("total_parameters") != sum(by_dtype.values()):
            return None
        checkpoint = CheckpointInfo(c["total_parameters"], by_dtype, c["source"])
    try:
        fetched = datetime.datetime.fromtimestamp(fetched_at, datetime.timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return None
    offline = f"offline: using cached config fetched at {fetched:%Y-%m-%d %H:%M UTC}; {reason}"
    return HubModel(model_id, revision, config, checkpoint, True, (offline,) + tuple(warnings))
