"""The shared H200 protocol (`../shared/validation/gpu-h200/README.md`) on CUDA: snapshots, an empty allocator
before each case, the environment line, model configs from `presets/models/*.json`.

Every figure is what PyTorch's caching allocator or the driver reports; nothing here models anything.
`GPU_HARNESS_DEVICE=cpu` runs the same code paths on the CPU (every memory figure 0) to check the harness
itself without a GPU; `GPU_HARNESS_TINY=1` shrinks each config to two small layers for that dry run.
Case ids and the case list: cases.py.
"""

from __future__ import annotations

import gc
import importlib.metadata
import json
import os
import time
from pathlib import Path

import torch

DEVICE = os.environ.get("GPU_HARNESS_DEVICE", "cuda")
TINY = os.environ.get("GPU_HARNESS_TINY") == "1"
SNAPSHOT_KEYS = ("allocated", "reserved", "max_allocated", "max_reserved", "device_used", "device_total")
# config.json fields that describe the checkpoint or the hub, not the model
NOT_MODEL_FIELDS = ("model_type", "architectures", "auto_map", "torch_dtype", "dtype", "transformers_version",
                    "_name_or_path")


def on_cuda() -> bool:
    return DEVICE == "cuda"


def sync() -> None:
    if on_cuda():
        torch.cuda.synchronize()


def snapshot() -> dict:
    """The allocator's and the driver's view at this moment (after the device has finished its queued work)."""
    if not on_cuda():
        return dict.fromkeys(SNAPSHOT_KEYS, 0)
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
            "max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved(),
            "device_used": total - free, "device_total": total}


def reset_peak() -> None:
    if on_cuda():
        torch.cuda.reset_peak_memory_stats()


def fresh_allocator() -> None:
    """Each case starts here: cached blocks returned to the driver, cuBLAS workspaces cleared, peaks reset."""
    gc.collect()
    if not on_cuda():
        return
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def env_line() -> dict:
    """Measured once at the start of a fresh process, before any case: the CUDA context, what a first tensor and
    a first bf16 matmul (cuBLAS handle and workspace) add, and the capacity PyTorch sees."""
    import transformers
    env = {"torch": torch.__version__, "transformers": transformers.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name(0) if on_cuda() else "cpu"}
    for name in ("peft", "accelerate", "deepspeed"):
        try:
            env[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            env[name] = None
    if on_cuda():
        torch.cuda.init()
        free, total = torch.cuda.mem_get_info()
        env["total"], env["used_at_init"] = total, total - free
        one = torch.ones(1, device="cuda")
        env["used_after_ones"] = total - torch.cuda.mem_get_info()[0]
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        b = a @ a
        torch.cuda.synchronize()
        env["used_after_matmul"] = total - torch.cuda.mem_get_info()[0]
        env["reserved_after_matmul"] = torch.cuda.memory_reserved()
        env["allocated_after_matmul"] = torch.cuda.memory_allocated()
        env["matmul"] = "bf16 4096x4096 @ 4096x4096, both kept"
        del one, a, b
        env["driver_versions"] = {"cuda_runtime": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                                  "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    env["date"] = time.strftime("%Y-%m-%d")
    return env


def presets_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / "presets" / "models"
    return here if here.is_dir() else Path.cwd() / "presets" / "models"


def shrink(fields: dict) -> dict:
    """Two small layers of the same architecture (dry runs on the CPU only)."""
    small = dict(fields)
    heads = fields.get("num_attention_heads", 4)
    kv = fields.get("num_key_value_heads", heads)
    small.update(hidden_size=128, intermediate_size=256, num_attention_heads=4, vocab_size=1024,
                 num_key_value_heads=4 if kv == heads else (1 if kv == 1 else 2), num_hidden_layers=2)
    for key, value in (("head_dim", 32), ("moe_intermediate_size", 64), ("shared_expert_intermediate_size", 64),
                       ("num_local_experts", 4), ("num_experts", 4), ("num_experts_per_tok", 2),
                       ("sliding_window", 64), ("query_pre_attn_scalar", 32)):
        if fields.get(key) is not None:
            small[key] = min(fields[key], value) if key in ("num_experts_per_tok", "sliding_window") else value
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(small.get(key), int):
            small[key] = 0
    if "layer_types" in small:
        small["layer_types"] = small["layer_types"][:2]
    return small


def load_config(name: str, layers: int | None = None):
    """A `presets/models/<name>` config.json as transformers builds it; `layers` cuts the decoder stack."""
    from transformers import AutoConfig

    raw = json.loads((presets_dir() / name).read_text())
    fields = {k: v for k, v in raw.items() if k not in NOT_MODEL_FIELDS}
    if layers is not None:
        fields["num_hidden_layers"] = layers
        if "layer_types" in fields:
            fields["layer_types"] = fields["layer_types"][:layers]
    if TINY:
        fields = shrink(fields)
    return AutoConfig.for_model(raw["model_type"], **fields)


def build_model(config, dtype: torch.dtype, attn: str = "sdpa"):
    """`AutoModelForCausalLM.from_config` built directly on the device: random weights, as in the shared cases."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(DEVICE):
        return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)


def experts_implementation(model) -> str | None:
    return getattr(model.config, "_experts_implementation_internal", None) or \
        getattr(model.config, "_experts_implementation", None)


def parameter_counts(model) -> dict:
    params = list(model.parameters())
    return {"n_params": sum(p.numel() for p in params),
            "n_trainable": sum(p.numel() for p in params if p.requires_grad),
            "param_bytes": sum(p.numel() * p.element_size() for p in params)}


def random_ids(config, batch: int, seq: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, config.vocab_size, (batch, seq), generator=generator).to(DEVICE)


def append_record(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())
