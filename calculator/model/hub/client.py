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
`timeout` is a real deadline for the whole call, slow bodies included; 429 and 5xx are retried with backoff
within it (calculator/model/hub/http.py). What one fetch reads is bounded: config.json, the index and the API page by
size, the shards by count, each safetensors header and all of them together by bytes.
Successful fetches are kept in a bounded on-disk cache, used only when the Hub cannot be reached, and a model
that needed a token only for a caller with the same token (calculator/model/hub/cache.py).
The token is sent only as an `Authorization: Bearer` header and is never stored, logged or echoed.
"""
from __future__ import annotations

import json
import math
import os
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, urlsplit

from calculator.model.hub import cache as hub_cache
from calculator.model.hub.cache import DEFAULT_CACHE_DIR, credential_digest  # noqa: F401  (re-exported)
from calculator.model.hub.http import Hub, parse_json
from calculator.model.hub.types import (  # noqa: F401  (re-exported: what callers catch and get)
    AccessDenied, CheckpointInfo, HubError, HubModel, HubTimeout, InvalidModelId, MalformedConfig, ModelNotFound,
    NoNetwork, RateLimited,
)

DEFAULT_ENDPOINT = "https://huggingface.co"
HEADER_PROBE_BYTES = 64 * 1024            # first Range read of a shard; most headers fit, else one more read
MAX_HEADER_BYTES = 16 * 1024 * 1024       # one shard's JSON header (safetensors allows 100 MB; real ones: < 1 MB)
MAX_SHARDS = 1024                         # shards one index may list (the largest public checkpoints: ~200)
MAX_CONFIG_BYTES = 1024 * 1024            # config.json (a few KB)
MAX_INDEX_BYTES = 32 * 1024 * 1024        # model.safetensors.index.json (DeepSeek-V3's: 9 MB)
MAX_API_BYTES = 8 * 1024 * 1024           # the API's model page
SHARD_WORKERS = 8                         # shard headers read in parallel
_ID_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")
_PACKED_DTYPES = {"I4", "U4", "I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64"}

# -----------------------------------------------------------------------------
# public functions


def looks_like_hub_id(text: str) -> bool:
    """True if `text` has the "org/name" shape of a Hub model id and is not an existing local path."""
    return _is_model_id(text) and not os.path.exists(text)


def credential(token: str | None = None) -> str | None:
    """A digest of the credential fetch_model(token=token) would use (`token`, else $HF_TOKEN; None for none):
    what a cache of fetched models must be keyed on. Never the token itself."""
    resolved = (token if token is not None else os.environ.get("HF_TOKEN") or "").strip()
    return credential_digest(resolved or None)


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
    resolved_token = _resolve_token(token)
    hub = Hub(_resolve_endpoint(endpoint), model_id, revision, resolved_token, timeout)
    credential = credential_digest(resolved_token)  # who this caller is to the cache (never the token)
    folder = hub_cache.directory(cache_dir) if use_cache else None

    unreachable = None
    try:
        config = _fetch_config(hub)
    except (NoNetwork, HubTimeout) as e:
        unreachable = e
    if unreachable is not None:  # raised here, outside the except block, so nothing gets chained to it
        cached = hub_cache.read(folder, hub.endpoint, model_id, revision, credential, unreachable.problem) \
            if folder else None
        if cached is not None:
            return cached
        if folder is not None:
            problem = f"{unreachable.problem}, and no cached copy of {model_id!r} exists" + (
                " that this token may read" if credential else "")
            raise type(unreachable)(problem, unreachable.fix)
        raise unreachable

    warnings = []
    if "text_config" in config and "hidden_size" not in config:
        warnings.append("using text_config of a multimodal model")
    checkpoint, api = _fetch_checkpoint(hub, warnings)
    config = _with_hf_quant_config(hub, config, api, warnings)
    quant = config.get("quantization_config")
    if quant and checkpoint and _PACKED_DTYPES & set(checkpoint.parameters_by_dtype):
        method = quant.get("quant_method", "quantized") if isinstance(quant, dict) else "quantized"
        warnings.append(f"{method} checkpoint: its integer tensors count packed storage elements, not parameters")
    model = HubModel(model_id, revision, config, checkpoint, from_cache=False, warnings=tuple(warnings))
    if folder is not None:
        # a model fetched with a token is kept for that token alone unless the Hub says it is public
        public = credential is None or _is_public(api)
        try:
            warning = hub_cache.write(folder, hub.endpoint, model, None if public else credential)
        except OSError as e:
            warning = f"could not write the cache in {folder} ({e.strerror or e})"
        if warning:
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
# config.json


def _fetch_config(hub: Hub) -> dict:
    status, headers, body = hub.get(hub.url("config.json"), limit=MAX_CONFIG_BYTES)
    hub.check(status, headers, "config.json")
    what = f"config.json of {hub.model_id!r}"
    config = parse_json(body, what, MalformedConfig)
    if not isinstance(config, dict):
        raise MalformedConfig(f"{what} is not a JSON object", "pick a repo with a transformers config.json")
    if not isinstance(config.get("model_type"), str) or not config["model_type"]:
        raise MalformedConfig(f"{what} has no model_type, so it is not a transformers model config",
                              "pick the transformers version of the model, or pass a local config file")
    return config


def _with_hf_quant_config(hub: Hub, config: dict, api: dict | None, warnings: list[str]) -> dict:
    """config.json with the quantization config of a ModelOpt 0.29-or-earlier checkpoint, which keeps it in
    hf_quant_config.json beside config.json: read, as vLLM's get_config reads it (transformers_utils/config.py),
    when config.json has no quantization_config and the API page lists the file (no request otherwise). It goes
    where config.json keeps one (calculator.model.checkpoint_quant reads its nested form)."""
    siblings = api.get("siblings") if isinstance(api, dict) else None
    listed = isinstance(siblings, list) and any(isinstance(s, dict) and s.get("rfilename") == "hf_quant_config.json"
                                                for s in siblings)
    if "quantization_config" in config or not listed:
        return config
    try:
        status, headers, body = hub.get(hub.url("hf_quant_config.json"), limit=MAX_CONFIG_BYTES)
        hub.check(status, headers, "hf_quant_config.json")
        quant = parse_json(body, f"hf_quant_config.json of {hub.model_id!r}", MalformedConfig)
    except HubError as e:
        warnings.append(f"could not read hf_quant_config.json ({e.problem}); the weights are priced as config.json "
                        "says")
        return config
    return {**config, "quantization_config": quant} if isinstance(quant, dict) else config


# -----------------------------------------------------------------------------
# exact parameter count


def _fetch_checkpoint(hub: Hub, warnings: list[str]) -> tuple[CheckpointInfo | None, dict | None]:
    """(the exact count from the API, else from the safetensors headers; the API page if it answered).
    A failure becomes a warning."""
    api = None
    try:
        api = _fetch_api(hub)
        info = _count_from_api(api) or _count_from_headers(hub)
    except HubError as e:
        warnings.append(f"could not count parameters from the checkpoint ({e.problem}); "
                        "estimating them from config.json")
        return None, api
    if info is None:
        warnings.append("no safetensors checkpoint (model.safetensors or model.safetensors.index.json); "
                        "estimating parameters from config.json")
    return info, api


def _fetch_api(hub: Hub) -> dict | None:
    """`{endpoint}/api/models/{id}/revision/{rev}` as a dict, or None if it cannot be had (a timeout raises)."""
    url = f"{hub.endpoint}/api/models/{hub.model_id}/revision/{quote(hub.revision, safe='')}"
    try:
        status, headers, body = hub.get(url, limit=MAX_API_BYTES)
        hub.check(status, headers, "the model's API page")
        data = parse_json(body, "the model's API page")
    except HubTimeout:
        raise
    except HubError:
        return None  # the headers may still answer
    return data if isinstance(data, dict) else None


def _is_public(api: dict | None) -> bool:
    """True only when the Hub's API says the repo is neither private nor gated (so no token is needed)."""
    return isinstance(api, dict) and api.get("private") is False and api.get("gated") is False


def _count_from_api(api: dict | None) -> CheckpointInfo | None:
    """The API's "safetensors": {"parameters": {dtype: n}} field, or None if it has none."""
    st = api.get("safetensors") if isinstance(api, dict) else None
    params = st.get("parameters") if isinstance(st, dict) else None
    if not isinstance(params, dict) or not params or not all(
            isinstance(k, str) and type(v) is int and v >= 0 for k, v in params.items()):
        return None
    return _checkpoint(params, "api")


def _count_from_headers(hub: Hub) -> CheckpointInfo | None:
    """Sum numel per dtype over the safetensors headers of every shard; None if there is no safetensors file."""
    status, headers, body = hub.get(hub.url("model.safetensors.index.json"), limit=MAX_INDEX_BYTES)
    if status == 404:
        shards = ["model.safetensors"]
    else:
        hub.check(status, headers, "model.safetensors.index.json")
        index = parse_json(body, "model.safetensors.index.json")
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        files = list(weight_map.values()) if isinstance(weight_map, dict) else []
        if not files or not all(isinstance(f, str) and f and not f.startswith("/") and ".." not in f.split("/")
                                for f in files):
            raise HubError("model.safetensors.index.json has no usable weight_map",
                           "the checkpoint index looks corrupt")
        shards = sorted(set(files))
        if len(shards) > MAX_SHARDS:
            raise HubError(f"model.safetensors.index.json lists {len(shards)} shards, over {MAX_SHARDS}",
                           "the checkpoint index looks corrupt")
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


def _read_safetensors_header(hub: Hub, name: str) -> dict | None:
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
        raise HubError(f"{name} declares a {n}-byte header, over the {MAX_HEADER_BYTES} bytes read per shard",
                       "the checkpoint looks corrupt")
    hub.spend_header_bytes(n, name)
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
