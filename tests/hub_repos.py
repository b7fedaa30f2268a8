"""What the fake Hub of tests/hub_server.py serves: the repos, laid out on disk by `build_hub_tree`.

Real model configs (Qwen3-8B with the exact count its API page publishes, Llama-3.1-8B whose count comes from four
sharded safetensors headers), a tiny checkpoint, fp8 and GPTQ checkpoints, broken and malformed ones, and the repos
whose failure mode the server plays (their ids, tokens and delays are here; the server's handler acts them out).
The safetensors files are valid files of zeros written as sparse holes, so 16 GB of Llama weights cost no disk.
"""
from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

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


def _hub_config(preset: str) -> dict:
    """The config.json the Hub serves for a model: the shipped preset file (presets/models/, a copy of the Hub's)
    without the `_name_or_path` the presets add."""
    path = Path(__file__).resolve().parents[1] / "presets" / "models" / f"{preset}.json"
    return {k: v for k, v in json.loads(path.read_text()).items() if k != "_name_or_path"}


QWEN3_8B = "Qwen/Qwen3-8B"
QWEN3_8B_PARAMETERS = 8190735360   # the count the Hub's API publishes for Qwen/Qwen3-8B
QWEN3_8B_CONFIG = _hub_config("qwen3-8b")

LLAMA_31_8B = "meta-llama/Llama-3.1-8B"
LLAMA_31_8B_PARAMETERS = 8030261248  # the count the Hub's API publishes for meta-llama/Llama-3.1-8B
LLAMA_31_8B_CONFIG = _hub_config("llama-3.1-8b")

MODELOPT_LEGACY_REPO = "nvidia/tiny-FP8"
# nvidia/Llama-3.1-70B-Instruct-FP8's hf_quant_config.json (as vendored by ai-dynamo/aiconfigurator)
MODELOPT_LEGACY_QUANT = {"producer": {"name": "modelopt", "version": "0.23.0"},
                         "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                                          "exclude_modules": ["lm_head"]}}
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
    # ModelOpt <= 0.29: the quantization config in hf_quant_config.json, which the API page lists
    d = repo(MODELOPT_LEGACY_REPO, TINY_CONFIG, {"id": MODELOPT_LEGACY_REPO, "private": False, "gated": False,
                                                 "siblings": [{"rfilename": "config.json"},
                                                              {"rfilename": "hf_quant_config.json"}]})
    (d / "hf_quant_config.json").write_text(json.dumps(MODELOPT_LEGACY_QUANT))
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
