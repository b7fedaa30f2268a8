"""Sources the engine cannot express at all: accelerate's big-model-inference benchmark and the HF PEFT README."""
from __future__ import annotations

from validation.published.rows import Comparison, number


def accelerate(row: dict[str, str]) -> Comparison:
    return Comparison(row["id"], row["source"], "accelerate device_map", row["model"],
                      f"{row['model']} {row['param_dtype']}, {row['metric']}, {row['gpu_type']}", row["metric"], None,
                      None, None, False,
                      "per-GPU weights placed by accelerate's device_map (balanced to max_memory, remainder "
                      "offloaded to CPU) in an unstated unit; the engine's pipeline split is even by layers, has no "
                      "CPU offload, and GPT-J/OPT/T0pp are not mapped model types")


def peft(row: dict[str, str]) -> Comparison:
    model = row["model"]
    reasons = []
    if "T0" in model or "mt0" in model:
        reasons.append("encoder-decoder (T5) model")
    if "LoRA" in row["mode"]:
        reasons.append("LoRA fine-tune (no engine mode)")
    if "ZeRO-3" in row["zero_fsdp"]:
        reasons.append("DeepSpeed ZeRO-3 CPU offload")
    if number(row["value"]) is None:
        reasons.append(f"{row['value']} (no number)")
    reasons.append("batch size and sequence length not stated")
    return Comparison(row["id"], row["source"], "HF PEFT README", model, f"{model} {row['mode']}", "peak_allocated",
                      None, None, None, False, "; ".join(reasons))
