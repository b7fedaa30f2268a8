"""calculator.model.hub.client's on-disk cache: what was fetched, served only when the Hub cannot be reached, and only to a
caller entitled to it.

One JSON file per (endpoint, model id, revision, credential). The credential is a digest of the token the fetch
used (credential_digest: SHA-256 with a fixed prefix; never the token itself), recorded only when the model
needed it: a model the Hub's API says is neither private nor gated, or one fetched without a token, is public
and stored under no credential, so anyone may be served it. Anything else is stored under the digest, and read
back only by a caller whose own token has the same digest (checked against the key and again inside the entry).

Bounded three ways: MAX_CACHE_ENTRIES files, MAX_CACHE_BYTES in all (the oldest files by mtime go first) and
MAX_ENTRY_BYTES per entry (a larger one is neither written nor read). Writes are atomic (temp file + os.replace);
temp files a dead writer left behind are removed once older than ORPHAN_AGE_S. Files that are not ours are left
alone.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path

from calculator.model.hub.types import CheckpointInfo, HubModel

DEFAULT_CACHE_DIR = "~/.cache/llm-gpu-mem/hub"
MAX_CACHE_ENTRIES = 256
MAX_CACHE_BYTES = 64 * 1024 * 1024
MAX_ENTRY_BYTES = 2 * 1024 * 1024       # a config.json with its counts is a few KB
ORPHAN_AGE_S = 600.0
FORMAT = 2
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.json")
_TEMP_NAME = re.compile(r"\.tmp-[A-Za-z0-9_]+\.json")
_DIGEST_PREFIX = b"llm-gpu-mem hub credential\x00"


def credential_digest(token: str | None) -> str | None:
    """A digest that tells credentials apart without revealing them (None for no token)."""
    return hashlib.sha256(_DIGEST_PREFIX + token.encode()).hexdigest() if token else None


def directory(cache_dir: str | os.PathLike | None) -> Path:
    """cache_dir, else $LLM_MEM_CACHE_DIR, else ~/.cache/llm-gpu-mem/hub."""
    return Path(os.path.expanduser(cache_dir or os.environ.get("LLM_MEM_CACHE_DIR") or DEFAULT_CACHE_DIR))


def entry_path(folder: Path, endpoint: str, model_id: str, revision: str, credential: str | None) -> Path:
    key = hashlib.sha256(json.dumps([endpoint, model_id, revision, credential]).encode()).hexdigest()
    return folder / f"{key}.json"


def write(folder: Path, endpoint: str, model: HubModel, credential: str | None) -> str | None:
    """Store `model` (under `credential`, None when public); a warning if it was too large to keep, else None.
    OSError if the directory cannot be written."""
    c = model.checkpoint
    entry = {
        "format": FORMAT, "endpoint": endpoint, "model_id": model.model_id, "revision": model.revision,
        "needs_auth": credential is not None, "credential": credential, "fetched_at": time.time(),
        "config": model.config,
        "checkpoint": None if c is None else
        {"total_parameters": c.total_parameters, "parameters_by_dtype": c.parameters_by_dtype, "source": c.source},
        "warnings": list(model.warnings),
    }
    data = json.dumps(entry).encode()
    if len(data) > MAX_ENTRY_BYTES:
        return f"not cached: the entry would be {len(data)} bytes, over the cache's {MAX_ENTRY_BYTES} per model"
    path = entry_path(folder, endpoint, model.model_id, model.revision, credential)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    evict(folder, keep=path)
    return None


def evict(folder: Path, keep: Path | None = None) -> None:
    """Remove orphaned temp files, then the oldest entries until both the count and the byte bounds hold."""
    now = time.time()
    entries = []
    for p in folder.iterdir():
        try:
            st = p.stat()
        except OSError:
            continue
        if _TEMP_NAME.fullmatch(p.name) and now - st.st_mtime > ORPHAN_AGE_S:
            _unlink(p)
        elif _ENTRY_NAME.fullmatch(p.name):
            entries.append((p == keep, st.st_mtime, p.name, st.st_size, p))
    entries.sort()  # oldest first; the entry just written last
    count, size = len(entries), sum(e[3] for e in entries)
    for _, _, _, nbytes, p in entries:
        if count <= MAX_CACHE_ENTRIES and size <= MAX_CACHE_BYTES:
            break
        if p != keep:
            _unlink(p)
            count, size = count - 1, size - nbytes


def _unlink(p: Path) -> None:
    try:
        p.unlink()
    except OSError:
        pass


def read(folder: Path, endpoint: str, model_id: str, revision: str, credential: str | None,
         reason: str) -> HubModel | None:
    """The cached model this caller may be served: the entry stored under its own credential, else the public
    one; None if there is none (or it is corrupt, oversized, or recorded for another credential). Its first
    warning says "offline: using cached config fetched at <date>; <reason>"."""
    keys = ([credential] if credential else []) + [None]
    for key in keys:
        model = _read_entry(entry_path(folder, endpoint, model_id, revision, key), endpoint, model_id, revision,
                            key, reason)
        if model is not None:
            return model
    return None


def _read_entry(path: Path, endpoint: str, model_id: str, revision: str, credential: str | None,
                reason: str) -> HubModel | None:
    try:
        if path.stat().st_size > MAX_ENTRY_BYTES:
            return None
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return None
    if (entry.get("endpoint"), entry.get("model_id"), entry.get("revision")) != (endpoint, model_id, revision):
        return None
    # who may read it: the entry says so itself (a file copied under another name changes nothing)
    if entry.get("credential") != credential or entry.get("needs_auth") is not (credential is not None):
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
