"""Published GPU memory of remote-code Qwen (v1) models (issue 21) against the engine, from the model's own
config.json (model_type "qwen", calculator/model/mappers/remote.py): the QwenLM/Qwen README's inference table
(rows.csv, `qv1-inf-*`) and its fine-tuning profile (`qv1-lora-*`, `qv1-qlora-*`).

    .venv/bin/python -m validation.published.qwen_v1     # per row: published, engine, error

The configs: qwen-7b.json is Qwen/Qwen-7B's config.json (mirrored in github.com/zhangningboo/Qwen-7B @abcb6d6d; the
-Chat model's block is the same), qwen-72b.json Qwen/Qwen-72B's (github.com/mapengAdam/qianwen-72B @46228648).
Inference rows are `torch.cuda.max_memory_allocated()` / 1024³ (the README's profile.py), compared with the
engine's peak allocated (summed over the GPUs of a device_map='auto' split). The fine-tuning table does not say how
it measured memory, and its Q-LoRA runs quantise with GPTQ (an fp16 auto-gptq base under DeepSpeed ZeRO-2), not an
engine QLoRA format: those rows carry the engine's number for information and are not comparable.

May import: calculator, validation.published.rows.
"""
from __future__ import annotations

import csv
import json
from functools import lru_cache
from pathlib import Path

from calculator import estimate
from calculator.core.workload import Parallelism, Precision, Workload
from calculator.model.hf_config import spec_from_hf_config
from calculator.model.spec import ModelSpec
from validation.published.rows import GIB, Comparison, error_pct, resolution_pct

HERE = Path(__file__).resolve().parent
CONFIGS = {"7b": "qwen-7b.json", "72b": "qwen-72b.json"}
WEIGHTS = {"BF16": None, "GPTQ-Int8": "int8", "GPTQ-Int4": "int4"}
# |error| bound per group: the worst measured at the commit that recorded it plus a margin, rounded up to a half
# point (as validation/published/rows.py ERROR_BOUNDS_PCT)
ERROR_BOUNDS_PCT = {"Qwen v1 generate": 8.5}
LORA_RANK = 64  # finetune.py LoraArguments: r=64, alpha=16, dropout=0.05, c_attn / c_proj / w1 / w2


def read_rows(path: Path = HERE / "rows.csv") -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@lru_cache(maxsize=None)
def qwen_v1_spec(size: str) -> ModelSpec:
    return spec_from_hf_config(json.loads((HERE / CONFIGS[size]).read_text())).spec


def _size(model: str) -> str:
    return model.split("-")[1].lower()


def _generate(row: dict[str, str]) -> Comparison:
    spec, n = qwen_v1_spec(_size(row["model"])), int(row["num_gpus"])
    fmt = row["weights"]
    w = Workload(mode="infer", micro_batch=1, seq_len=int(row["prompt"]), gen_tokens=int(row["gen_tokens"]),
                 attention="flash", weight_dtype=WEIGHTS[fmt], quant_group_size=128, quant_method="gptq",
                 gpu="a100-80gb")
    if n > 1:  # device_map='auto' over n GPUs: the engine's n pipeline stages, summed (80 layers split evenly)
        w = w.model_copy(update={"parallel": Parallelism(pp=n)})
    est = sum(s.peak_allocated_bytes for s in estimate(spec, w, with_fits=False).stages)
    meas = round(float(row["value"]) * GIB)
    config = (f"{row['model']} {fmt}, batch 1, prompt {row['prompt']} + {int(row['gen_tokens']):,} generated, "
              f"flash-attn 2, {n}× A100-80GB")
    note = ("legacy tuple KV cache: the previous step's cache is alive beside the new one at the end of each decode "
            "step (VariantSpec.legacy_kv_cache)" + ("; Σ of the engine's pipeline stages" if n > 1 else ""))
    return Comparison(row["id"], row["source"], "Qwen v1 generate", row["model"], config,
                      "peak_allocated" + (" (Σ over GPUs)" if n > 1 else ""), meas, est, error_pct(est, meas), True,
                      "", note, resolution_pct(row["value"]))


def _finetune(row: dict[str, str]) -> Comparison:
    spec, T = qwen_v1_spec(_size(row["model"])), int(row["prompt"])
    qlora = row["setting"] == "Q-LoRA"
    e = "fp16" if qlora else "bf16"
    w = Workload(mode="train", micro_batch=1, seq_len=T, optimizer="adamw", optimizer_impl="foreach",
                 precision=Precision(params=e, grads=e, master_weights=None, optimizer_states="fp32", activations=e),
                 finetune="qlora" if qlora else "lora", lora_rank=LORA_RANK, lora_targets="all-linear",
                 recompute="full", attention="flash", gpu="a100-80gb")
    est = estimate(spec, w, with_fits=False).peak_allocated_bytes
    meas = round(float(row["value"]) * GIB)
    why = "the README does not say how it measured memory (max_memory_allocated, reserved or nvidia-smi)"
    if qlora:
        why += ("; its Q-LoRA base is GPTQ-Int4 (auto-gptq QuantLinear, fp16, DeepSpeed ZeRO-2), the engine's "
                "QLoRA is a bitsandbytes NF4 base")
    config = (f"{row['model']} {row['setting']} r={LORA_RANK} on every decoder linear, batch 1 × {T:,} tokens, "
              f"gradient checkpointing, flash-attn 2, 1× A100-80GB")
    return Comparison(row["id"], row["source"], f"Qwen v1 {row['setting']} (no stated metric)", row["model"], config,
                      "peak_allocated (informational)", meas, est, error_pct(est, meas), False, why,
                      "LoRA dropout 0.05 (a dropped copy of each adapter input in the recomputed layer) is not "
                      "modelled", resolution_pct(row["value"]))


def qwen_v1(row: dict[str, str]) -> Comparison:
    return _generate(row) if row["setting"] == "generate" else _finetune(row)


def comparisons() -> list[Comparison]:
    return [qwen_v1(r) for r in read_rows()]


__all__ = ["ERROR_BOUNDS_PCT", "comparisons", "qwen_v1", "qwen_v1_spec", "read_rows"]
