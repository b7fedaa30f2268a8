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

Fixtures: `hub_root` (the directory, built once per module), `hub_server` (a running HubServer), `hub_url` (its
base URL). Import them into a test module: `from hub_server import hub_root, hub_server, hub_url`.
"""
from __future__ import annotations

import json
import math
import re
import shutil
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

GATED_TOKEN = "hf_FakeGatedToken0123456789abcdefABCDEF"
GATED_REPO = "acme/gated-model"
FORBIDDEN_REPO = "acme/forbidden-model"
RATE_LIMITED_REPO = "acme/rate-limited-model"
RETRY_AFTER = 17
SLOW_REPO = "acme/slow-model"
SLOW_SECONDS = 3.0
SERVER_ERROR_REPO = "acme/server-error-model"
NO_RANGE_REPO = "acme/no-range-model"
PRIVATE_REPO = "org/private"
PRIVATE_TOKEN = "hf_FakePrivateToken9876543210zyxwvuZYXWVU"
DRIP_REPO = "acme/drip-model"
DRIP_HEADERS_REPO = "acme/drip-headers-model"
DRIP_INTERVAL = 0.25

QWEN3_8B = "Qwen/Qwen3-8B"
QWEN3_8B_PARAMETERS = 8190735360   # the count the Hub's API publishes for Qwen/Qwen3-8B
QWEN3_8B_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "max_position_embeddings": 40960,
    "max_window_layers": 36,
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

LLAMA_31_8B = "meta-llama/Llama-3.1-8B"
LLAMA_31_8B_PARAMETERS = 8030261248  # the count the Hub's API publishes for meta-llama/Llama-3.1-8B
LLAMA_31_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}

TINY_CONFIG = {"model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
               "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 32, "tie_word_embeddings": True}
# name -> (safetensors dtype, shape): a scalar, F32, F16 and I64, all written by the safetensors package if present
TINY_TENSORS = {
    "model.embed_tokens.weight": ("F32", [32, 8]),
    "model.layers.0.self_attn.q_proj.weight": ("F16", [8, 8]),
    "model.layers.0.self_attn.k_proj.weight": ("F16", [4, 8]),
    "model.layers.0.mlp.up_proj.weight": ("F16", [16, 8]),
    "model.layers.0.mlp.down_proj.weight": ("F16", [8, 16]),
    "model.norm.weight": ("F32", [8]),
    "model.rotary_emb.step": ("I64", []),
}

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
               "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}


# -----------------------------------------------------------------------------
# checkpoints


def decoder_tensors(config: dict, qk_norm: bool = False) -> dict[str, tuple[str, list[int]]]:
    """The tensors of a Llama-style decoder checkpoint in bf16, named as transformers saves them."""
    h, ffn, kv = config["hidden_size"], config["intermediate_size"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or h // config["num_attention_heads"]
    q = config["num_attention_heads"] * head_dim
    tensors = {"model.embed_tokens.weight": ("BF16", [config["vocab_size"], h])}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = ("BF16", [h])
        tensors[p + "mlp.down_proj.weight"] = ("BF16", [h, ffn])
        tensors[p + "mlp.gate_proj.weight"] = ("BF16", [ffn, h])
        tensors[p + "mlp.up_proj.weight"] = ("BF16", [ffn, h])
        tensors[p + "post_attention_layernorm.weight"] = ("BF16", [h])
        tensors[p + "self_attn.k_proj.weight"] = ("BF16", [kv * head_dim, h])
        tensors[p + "self_attn.o_proj.weight"] = ("BF16", [h, q])
        tensors[p + "self_attn.q_proj.weight"] = ("BF16", [q, h])
        tensors[p + "self_attn.v_proj.weight"] = ("BF16", [kv * head_dim, h])
        if qk_norm:
            tensors[p + "self_attn.q_norm.weight"] = ("BF16", [head_dim])
            tensors[p + "self_attn.k_norm.weight"] = ("BF16", [head_dim])
    tensors["model.norm.weight"] = ("BF16", [h])
    if not config.get("tie_word_embeddings"):
        tensors["lm_head.weight"] = ("BF16", [config["vocab_size"], h])
    return tensors


def numel_by_dtype(tensors: dict[str, tuple[str, list[int]]]) -> dict[str, int]:
    """What the client should count: numel summed per dtype."""
    counts: dict[str, int] = {}
    for dtype, shape in tensors.values():
        counts[dtype] = counts.get(dtype, 0) + math.prod(shape)
    return counts


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]], metadata: dict | None = None) -> None:
    """A valid safetensors file of zeros: u64 little-endian header length, JSON header padded with spaces to a
    multiple of 8, then the data. The data is a sparse hole (f.truncate), so 16 GB of Llama weights cost no disk."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(8 + len(blob) + offset)


def write_tiny_safetensors(path: Path) -> None:
    """TINY_TENSORS written by the safetensors package itself when installed (else by write_safetensors)."""
    try:
        import numpy as np
        from safetensors.numpy import save_file
    except ImportError:
        write_safetensors(path, TINY_TENSORS, {"format": "pt"})
        return
    np_dtype = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    save_file({name: np.zeros(shape, dtype=np_dtype[dtype]) for name, (dtype, shape) in TINY_TENSORS.items()},
              str(path), metadata={"format": "pt"})


def write_sharded(repo_dir: Path, shards: list[dict[str, tuple[str, list[int]]]]) -> None:
    """model-0000i-of-0000n.safetensors files plus model.safetensors.index.json listing them in its weight_map."""
    n, weight_map, total = len(shards), {}, 0
    for i, tensors in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{n:05d}.safetensors"
        write_safetensors(repo_dir / name, tensors, {"format": "pt"})
        weight_map.update({t: name for t in tensors})
        total += sum(math.prod(shape) * DTYPE_BYTES[dtype] for dtype, shape in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (repo_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def llama_shards() -> list[dict[str, tuple[str, list[int]]]]:
    """Llama-3.1-8B's tensors in 4 shards, in order: embeddings + 8 layers each, the last with norm and lm_head."""
    shards: list[dict] = [{}, {}, {}, {}]
    for name, t in decoder_tensors(LLAMA_31_8B_CONFIG).items():
        m = re.match(r"model\.layers\.(\d+)\.", name)
        shards[int(m[1]) // 8 if m else (0 if "embed" in name else 3)][name] = t
    return shards


def fp8_tensors() -> dict[str, tuple[str, list[int]]]:
    """A DeepSeek-style fp8 checkpoint: F8_E4M3 weights, F32 block scales, BF16 embeddings and norms."""
    t = {"model.embed_tokens.weight": ("BF16", [1024, 256]), "model.norm.weight": ("BF16", [256])}
    for i in range(2):
        for proj, shape in (("q_proj", [256, 256]), ("up_proj", [512, 256]), ("down_proj", [256, 512])):
            t[f"model.layers.{i}.{proj}.weight"] = ("F8_E4M3", shape)
            t[f"model.layers.{i}.{proj}.weight_scale_inv"] = ("F32", [shape[0] // 128, shape[1] // 128])
    t["lm_head.weight"] = ("BF16", [1024, 256])
    return t


def gptq_tensors() -> dict[str, tuple[str, list[int]]]:
    """A GPTQ int4 layer: qweight packs 8 int4 values per I32."""
    return {"model.embed_tokens.weight": ("F16", [1024, 256]),
            "model.layers.0.mlp.up_proj.qweight": ("I32", [256 // 8, 512]),
            "model.layers.0.mlp.up_proj.qzeros": ("I32", [2, 512 // 8]),
            "model.layers.0.mlp.up_proj.scales": ("F16", [2, 512]),
            "model.layers.0.mlp.up_proj.g_idx": ("I32", [256])}


def many_tensors(n: int = 2000) -> dict[str, tuple[str, list[int]]]:
    """Enough tensors that the header (~150 KB) is larger than the client's first Range read."""
    return {f"model.layers.{i}.some_rather_long_parameter_name.weight": ("BF16", [i % 7 + 1, 3]) for i in range(n)}


def build_hub_tree(root: Path) -> None:
    """Lay out the fake Hub under root: {org}/{name}/resolve/main/... and {org}/{name}/api.json."""

    def repo(model_id: str, config: dict | str | None, api: dict | None = None) -> Path:
        d = root / model_id / "resolve" / "main"
        d.mkdir(parents=True)
        if config is not None:
            (d / "config.json").write_text(config if isinstance(config, str) else json.dumps(config, indent=2))
        if api is not None:
            (root / model_id / "api.json").write_text(json.dumps(api))
        return d

    # exact count from the API only
    repo(QWEN3_8B, QWEN3_8B_CONFIG, {
        "id": QWEN3_8B, "modelId": QWEN3_8B, "sha": "b968826d9c46dd6066d109eabc6255188de91218",
        "library_name": "transformers", "pipeline_tag": "text-generation", "private": False, "gated": False,
        "safetensors": {"parameters": {"BF16": QWEN3_8B_PARAMETERS}, "total": QWEN3_8B_PARAMETERS}})
    # exact count from the safetensors headers only: the API page has no "safetensors" field
    write_sharded(repo(LLAMA_31_8B, LLAMA_31_8B_CONFIG, {"id": LLAMA_31_8B, "gated": "manual"}), llama_shards())
    # a tiny single-file checkpoint and no API page at all
    write_tiny_safetensors(repo("acme/tiny-model", TINY_CONFIG) / "model.safetensors")
    write_sharded(repo("acme/many-tensors-model", TINY_CONFIG), [many_tensors(), {"lm_head.weight": ("BF16", [32, 8])}])
    write_sharded(repo(NO_RANGE_REPO, TINY_CONFIG), [many_tensors()])
    # quantized
    fp8_config = dict(TINY_CONFIG, model_type="deepseek_v3", quantization_config={
        "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]})
    write_safetensors(repo("acme/fp8-model", fp8_config) / "model.safetensors", fp8_tensors())
    gptq_config = dict(TINY_CONFIG, quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128})
    write_safetensors(repo("acme/gptq-model", gptq_config) / "model.safetensors", gptq_tensors())
    # broken checkpoints: an index naming a shard that is not there, a header length past the format's limit,
    # a header that is not JSON
    d = repo("acme/missing-shard-model", TINY_CONFIG)
    write_sharded(d, [{"model.embed_tokens.weight": ("BF16", [32, 8])}, {"lm_head.weight": ("BF16", [32, 8])}])
    (d / "model-00002-of-00002.safetensors").unlink()
    (repo("acme/huge-header-model", TINY_CONFIG) / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    (repo("acme/bad-header-model", TINY_CONFIG) / "model.safetensors").write_bytes(struct.pack("<Q", 8) + b"not json")
    # no safetensors at all
    (repo("acme/bin-only-model", TINY_CONFIG) / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    # multimodal: the language model lives in text_config
    repo("acme/vision-language-model", {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 34},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152}})
    # malformed
    repo("acme/malformed-config", '{"model_type": "llama", "hidden_size": 4096,')
    repo("acme/list-config", "[1, 2, 3]")
    repo("acme/no-model-type", {"hidden_size": 4096, "num_hidden_layers": 32})
    (repo("acme/no-config-model", None) / "README.md").write_text("# GGUF only\n")
    # failure modes: the files exist, the handler refuses or delays them
    for model_id in (GATED_REPO, FORBIDDEN_REPO, RATE_LIMITED_REPO, SLOW_REPO, SERVER_ERROR_REPO, DRIP_REPO,
                     DRIP_HEADERS_REPO):
        write_tiny_safetensors(repo(model_id, TINY_CONFIG) / "model.safetensors")
    # a private repo, whose config is recognisably its own
    private_config = dict(TINY_CONFIG, hidden_size=64, intermediate_size=128, _name_or_path="org/private-secret")
    write_tiny_safetensors(repo(PRIVATE_REPO, private_config, {"id": PRIVATE_REPO, "private": True, "gated": False})
                           / "model.safetensors")


# -----------------------------------------------------------------------------
# server


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
            if self.server.stopping.wait(DRIP_INTERVAL):
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
    added to every request; stop() closes the port (later requests get "connection refused")."""

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
    yield hub_server.url
