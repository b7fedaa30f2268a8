"""Preset models (real Hugging Face config.json files) and the GPU catalogue, loaded once per process.

`presets/models/<id>.json` is a model's config.json as the Hub has it, plus `_name_or_path` (its Hub id);
`load_model` maps it with `calculator.model.hf_config.spec_from_hf_config`, and takes a filesystem path to any
config.json as well. `presets/gpus.json` lists GPUs with the memory total the device reports and where that
figure comes from. Every loader is cached: the app calls them on every rerun.
"""
from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from calculator.core.errors import InputError
from calculator.model.config_read import MAX_CONFIG_BYTES, parse_config_json
from calculator.model.hf_config import ConfigError, MappedConfig, spec_from_hf_config

PRESETS_DIR = Path(__file__).resolve().parents[2] / "presets"
MODELS_DIR = PRESETS_DIR / "models"
GPUS_FILE = PRESETS_DIR / "gpus.json"
MAX_MODEL_NAME_CHARS = 4096  # PATH_MAX on Linux; Hub ids are at most 96

# Family labels by model_type (the text model's type for multimodal configs).
FAMILIES = {
    "llama": "Llama", "llama4": "Llama 4", "mistral": "Mistral", "mixtral": "Mixtral (MoE)", "qwen2": "Qwen2/2.5",
    "qwen2_moe": "Qwen-MoE", "qwen3": "Qwen3", "qwen3_moe": "Qwen3-MoE", "gemma2": "Gemma 2", "gemma3": "Gemma 3",
    "gemma3_text": "Gemma 3", "phi3": "Phi-3/Phi-4", "deepseek_v2": "DeepSeek-V2 (MoE + MLA)",
    "deepseek_v3": "DeepSeek-V3 (MoE + MLA)", "gpt_oss": "GPT-OSS (MoE)", "olmo2": "OLMo 2", "gpt_neox": "GPT-NeoX",
    "gpt2": "GPT-2", "qwen3_next": "Qwen3-Next (Gated DeltaNet hybrid, MoE)",
    "qwen3_5_text": "Qwen3.5 (Gated DeltaNet hybrid)", "qwen3_5_moe_text": "Qwen3.5-MoE (Gated DeltaNet hybrid)",
    "deepseek_v32": "DeepSeek-V3.2 (MoE + MLA + sparse attention)", "glm_moe_dsa": "GLM-5 (MoE + MLA + sparse attention)",
    "nemotron_h": "Nemotron-H (Mamba-2 hybrid)", "glm4_moe": "GLM-4.5/4.6 (MoE)",
    "kimi_linear": "Kimi Linear (Kimi Delta Attention + MLA hybrid, MoE)",
    "olmo_hybrid": "OLMo Hybrid (Gated DeltaNet hybrid)",
}

# Display names where the Hub repository name is not the usual way to say it; notes where a preset needs one.
DISPLAY_NAMES = {
    "mistral-nemo-12b": "Mistral-Nemo-12B (2407)", "mistral-small-24b": "Mistral-Small-24B (2501)",
    "llama-4-scout": "Llama-4-Scout-17B-16E", "gemma-3-1b": "Gemma-3-1B", "gemma-3-4b": "Gemma-3-4B",
    "gemma-3-12b": "Gemma-3-12B", "gemma-3-27b": "Gemma-3-27B", "gemma-2-2b": "Gemma-2-2B", "gemma-2-9b": "Gemma-2-9B",
    "gemma-2-27b": "Gemma-2-27B", "phi-3-mini-4k": "Phi-3-mini-4k", "phi-3-medium-4k": "Phi-3-medium-4k",
    "phi-4": "Phi-4 (14B)", "olmo-2-7b": "OLMo-2-7B (1124)", "pythia-1.4b": "Pythia-1.4B", "gpt2": "GPT-2 (124M)",
    "smollm2-1.7b": "SmolLM2-1.7B",
}
NOTES = {
    "llama-3.1-8b": "Seed 000's \"8B · 32L\" model.",
    "llama-3.3-70b": "Same architecture as Llama-3.1-70B.",
    "llama-4-scout": "Text model only (the vision tower, ~1.9B parameters, is not counted). Chunked-attention "
                     "layers are treated as 8192-token sliding windows.",
    "mistral-7b-v0.1": "Sliding-window attention (4096) on every layer.",
    "gemma-3-4b": "Text model only (the SigLIP vision tower is not counted).",
    "gemma-3-12b": "Text model only (the SigLIP vision tower is not counted).",
    "gemma-3-27b": "Text model only (the SigLIP vision tower is not counted).",
    "deepseek-v3": "FP8 checkpoint (block-quantized 128x128). The multi-token-prediction layer "
                   "(num_nextn_predict_layers=1, ~14B) is not built by transformers and not counted.",
    "deepseek-r1": "Same architecture as DeepSeek-V3. FP8 checkpoint; the MTP layer is not counted.",
    "gpt-oss-20b": "Checkpoint stores the expert weights in MXFP4 (4-bit, 32-element blocks); the rest in bf16.",
    "gpt-oss-120b": "Checkpoint stores the expert weights in MXFP4 (4-bit, 32-element blocks); the rest in bf16.",
    "olmo-2-7b": "Checkpoint published in fp32.",
    "gemma-2-2b": "Checkpoint published in fp32.", "gemma-2-9b": "Checkpoint published in fp32.",
    "gemma-2-27b": "Checkpoint published in fp32.",
    "glm-4.5-air": "The multi-token-prediction layer (num_nextn_predict_layers=1) is not built by transformers and "
                   "not counted.",
    "mimo-v2-flash": "FP8 checkpoint (block-quantized 128x128). Its multi-token-prediction layers are not built by "
                     "transformers and not counted.",
}


@dataclass(frozen=True)
class ModelPreset:
    id: str
    name: str  # display name
    hub_id: str
    model_type: str
    family: str
    notes: str = ""


@dataclass(frozen=True)
class GPU:
    id: str
    name: str
    vendor: str
    memory_bytes: int  # total the device reports (nvidia-smi memory.total / rocm-smi VRAM total), see memory_basis
    nominal_label: str  # the vendor's marketing figure, e.g. "80 GB HBM3"
    cuda_context_bytes: int  # CUDA/ROCm context + library handles of one PyTorch process, see cuda_context_basis
    source: str  # where the memory figure comes from
    notes: str = ""
    memory_basis: str = ""
    cuda_context_basis: str = ""
    # Speed (the time estimate, calculator.timing.step_time): dense peaks in FLOP/s, bandwidths in bytes/s; None: not published
    dense_bf16_flops: float | None = None
    dense_fp16_flops: float | None = None
    dense_fp8_flops: float | None = None
    dense_fp4_flops: float | None = None  # NVFP4 / MXFP4 (Blackwell, MI355X)
    fp32_flops: float | None = None  # non-tensor FP32 (PyTorch matmuls do not use TF32 by default)
    memory_bandwidth_bytes_per_s: float | None = None
    interconnect: str = ""
    interconnect_bytes_per_s: float | None = None  # GPU-to-GPU, both directions added, as datasheets state it
    speed_source: str = ""
    speed_basis: str = ""
    cublas_workspace_bytes: int = 32 * 2**20  # per cuBLAS handle and stream, see cublas_workspace_basis
    cublas_workspace_basis: str = ""
    pytorch_capacity_bytes: int | None = None  # torch.cuda.mem_get_info()[1], where measured
    pytorch_capacity_basis: str = ""

    @property
    def usable_bytes(self) -> int:
        """What PyTorch's process can fill: the capacity the CUDA driver reports to it where measured, else the
        nvidia-smi total."""
        return self.pytorch_capacity_bytes or self.memory_bytes


# ---- models -----------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _preset_paths() -> dict[str, Path]:
    return {p.stem: p for p in sorted(MODELS_DIR.glob("*.json"), key=lambda p: p.stem)}


def _read_json(path: Path) -> object:
    """A config.json file, read only if it is within the size bound, parsed with calculator.model.config_read's bounds."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise InputError("model", f"no such file: {path}") from None
    except OSError as exc:
        raise InputError("model", f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise InputError("model", f"{path} is larger than {MAX_CONFIG_BYTES:,} bytes: not a config.json")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("model", f"cannot read {path}: not UTF-8 text") from None
    try:
        return parse_config_json(text, str(path))
    except ConfigError as exc:
        raise InputError("model", str(exc)) from None


def _map(cfg: object, path: Path) -> MappedConfig:
    try:
        return spec_from_hf_config(cfg)
    except ConfigError as exc:
        raise InputError("model", f"{path}: {exc}") from None


@lru_cache(maxsize=None)
def _load_preset(preset_id: str) -> MappedConfig:
    path = _preset_paths()[preset_id]
    return _map(_read_json(path), path)


@lru_cache(maxsize=64)
def _load_file(path: str, mtime_ns: int, size: int, side: tuple | None) -> MappedConfig:  # keyed on mtime/size:
    cfg = _read_json(Path(path))  # edits are re-read (the hf_quant_config.json beside it too)
    if side is not None and isinstance(cfg, dict) and "quantization_config" not in cfg:
        quant = _read_json(Path(path).parent / HF_QUANT_CONFIG)  # ModelOpt ≤ 0.29 (checkpoint_quant.py)
        cfg = {**cfg, "quantization_config": quant} if isinstance(quant, dict) else cfg
    return _map(cfg, Path(path))


HF_QUANT_CONFIG = "hf_quant_config.json"  # read beside a config.json file, as vLLM's get_config does


def _side_stat(path: Path) -> tuple | None:
    """(mtime, size) of the hf_quant_config.json beside a file named config.json, or None when there is none."""
    if path.name != "config.json":
        return None
    try:
        st = (path.parent / HF_QUANT_CONFIG).stat()
    except (OSError, ValueError):
        return None
    return st.st_mtime_ns, st.st_size


def _suggestions(name: str) -> list[str]:
    ids = list(_preset_paths())
    key = name.strip().lower()
    close = difflib.get_close_matches(key, ids, n=5, cutoff=0.5)
    contained = [i for i in ids if key and (key in i or i in key) and i not in close]
    return (close + contained)[:5]


def _looks_like_path(value: str) -> bool:
    if os.sep in value or "/" in value or value.endswith(".json"):
        return True
    try:
        return Path(value).exists()
    except (OSError, ValueError):  # a name too long for the filesystem, or with a NUL byte: not a file
        return False


def load_model(id_or_path: str | os.PathLike) -> MappedConfig:
    """A preset id (e.g. "llama-3.1-8b") or a path to a config.json (or to a folder holding one) -> MappedConfig.

    Raises InputError("model", ...) for an unknown id (naming close matches), a missing or malformed file
    (naming the file and the JSON error's line) or a config that cannot describe a model.
    """
    if isinstance(id_or_path, os.PathLike):
        id_or_path = os.fspath(id_or_path)
    if not isinstance(id_or_path, str) or not id_or_path.strip():
        raise InputError("model", "give a preset id such as 'llama-3.1-8b' or a path to a config.json")
    value = id_or_path.strip()
    if len(value) > MAX_MODEL_NAME_CHARS:
        raise InputError("model", f"the model name is {len(value):,} characters; a preset id, path or Hub id has at "
                                  f"most {MAX_MODEL_NAME_CHARS:,}")
    if value.lower() in _preset_paths():
        return _load_preset(value.lower())
    if _looks_like_path(value):
        path = Path(value).expanduser()
        if path.is_dir():
            path = path / "config.json"
        try:
            st = path.stat()
        except (OSError, ValueError) as exc:
            why = "no such file" if isinstance(exc, FileNotFoundError) else "cannot read"
            raise InputError("model", f"{why}: {str(path)[:200]}") from None
        return _load_file(str(path.resolve()), st.st_mtime_ns, st.st_size, _side_stat(path))
    hints = _suggestions(value)
    hint = f" Did you mean: {', '.join(hints)}?" if hints else ""
    raise InputError("model", f"unknown model preset {value[:100]!r}.{hint} Use one of the {len(_preset_paths())} preset "
                              f"ids (calculator.model.presets.list_models()) or a path to a config.json.")


@lru_cache(maxsize=1)
def _models() -> tuple[ModelPreset, ...]:
    out = []
    for pid in _preset_paths():
        mapped = _load_preset(pid)
        hub_id = str(mapped.raw.get("_name_or_path", pid))
        model_type = mapped.spec.model_type
        notes = NOTES.get(pid, "")
        out.append(ModelPreset(id=pid, name=DISPLAY_NAMES.get(pid, hub_id.split("/")[-1]), hub_id=hub_id,
                               model_type=model_type, family=FAMILIES.get(model_type, model_type), notes=notes))
    return tuple(out)


def list_models() -> list[ModelPreset]:
    """Every preset model, sorted by id."""
    return list(_models())


# ---- GPUs -------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _gpus() -> tuple[GPU, ...]:
    try:
        data = json.loads(GPUS_FILE.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError("gpu", f"{GPUS_FILE} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    fields = set(GPU.__dataclass_fields__)
    return tuple(GPU(**{k: v for k, v in g.items() if k in fields}) for g in data["gpus"])


def list_gpus() -> list[GPU]:
    """The GPU catalogue, in catalogue order."""
    return list(_gpus())


def get_gpu(gpu_id: str) -> GPU:
    """The catalogue GPU with this id (case-insensitive); InputError("gpu", ...) listing the valid ids if unknown."""
    key = str(gpu_id).strip().lower()
    for g in _gpus():
        if g.id == key:
            return g
    ids = [g.id for g in _gpus()]
    close = difflib.get_close_matches(key, ids, n=3, cutoff=0.4)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise InputError("gpu", f"unknown GPU {gpu_id!r}.{hint} Valid ids: {', '.join(ids)}")
