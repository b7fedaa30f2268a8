"""Qwen2.5 speed benchmark rows: HF transformers 4.46 generate(), FA2, batch 1, prompt + 2048 new tokens,
sum over GPUs of torch.cuda.max_memory_allocated (examples/speed-benchmark/speed_benchmark_transformers.py).
"""
from __future__ import annotations

import re
from functools import lru_cache

from calculator import estimate
from calculator.model.hf_config import spec_from_hf_config
from calculator.model.spec import ModelSpec
from calculator.model.presets import load_model
from calculator.core.workload import Parallelism, Workload
from validation.published.rows import Comparison, error_pct, resolution_pct, measured_bytes

QWEN_PRESETS = {
    "Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b", "Qwen2.5-1.5B-Instruct": "qwen2.5-1.5b",
    "Qwen2.5-3B-Instruct": "qwen2.5-3b", "Qwen2.5-7B-Instruct": "qwen2.5-7b", "Qwen2.5-14B-Instruct": "qwen2.5-14b",
    "Qwen2.5-32B-Instruct": "qwen2.5-32b", "Qwen2.5-72B-Instruct": "qwen2.5-72b",
}
QWEN_WEIGHTS = {"BF16": None, "GPTQ-Int8": "int8", "GPTQ-Int4": "int4", "AWQ": "int4"}
QWEN_TIED = {"Qwen2.5-0.5B-Instruct", "Qwen2.5-1.5B-Instruct", "Qwen2.5-3B-Instruct"}
# Qwen/Qwen2.5-72B-Instruct-AWQ config.json has intermediate_size 29696 (29568 padded to a multiple of 128 per
# 8-way tensor-parallel shard); the GPTQ-Int4/Int8 checkpoints are assumed to be padded the same way.
QWEN_72B_QUANT_INTERMEDIATE = 29696
QWEN_GEN_TOKENS = 2048


@lru_cache(maxsize=None)
def qwen_spec(model: str, fmt: str) -> ModelSpec:
    preset = QWEN_PRESETS[model]
    if preset == "qwen2.5-72b" and fmt != "BF16":
        raw = {k: v for k, v in load_model(preset).raw.items() if not k.startswith("_")}
        raw["intermediate_size"] = QWEN_72B_QUANT_INTERMEDIATE
        return spec_from_hf_config(raw, name=f"{model}-{fmt} (intermediate_size 29696)").spec
    return load_model(preset).spec


def _sum_over_gpus(spec: ModelSpec, w: Workload, n: int) -> tuple[int, str]:
    """Σ over n GPUs of max_memory_allocated under device_map='auto' (a naive layer split): the engine's stages
    with pp = n summed. When n does not divide the layers (72B on 3 GPUs), the engine's own marginal GPU cost
    (pp=2 sum − pp=1) is added n − 1 times: each extra GPU repeats the per-GPU working set."""
    e1 = estimate(spec, w, with_fits=False).peak_allocated_bytes
    if n == 1:
        return e1, ""
    if spec.num_hidden_layers % n == 0:
        e = estimate(spec, w.model_copy(update={"parallel": Parallelism(pp=n)}), with_fits=False)
        return sum(s.peak_allocated_bytes for s in e.stages), f"Σ of the engine's {n} pipeline stages"
    e2 = estimate(spec, w.model_copy(update={"parallel": Parallelism(pp=2)}), with_fits=False)
    per_gpu = sum(s.peak_allocated_bytes for s in e2.stages) - e1
    return e1 + (n - 1) * per_gpu, (f"{spec.num_hidden_layers} layers do not split {n} ways: pp=1 estimate + "
                                    f"{n - 1} × the engine's extra-GPU cost (pp=2 Σ − pp=1)")


def qwen(row: dict[str, str]) -> Comparison:
    model, fmt = row["model"], row["param_dtype"]
    T = int(re.search(r"input (\d+)", row["seq_len"]).group(1))
    n = int(row["num_gpus"])
    spec = qwen_spec(model, fmt)
    w = Workload(mode="infer", micro_batch=1, seq_len=T, gen_tokens=QWEN_GEN_TOKENS, attention="flash",
                 weight_dtype=QWEN_WEIGHTS[fmt], quant_group_size=128, gpu="a100-80gb",
                 quant_method="gptq" if fmt.startswith("GPTQ") else "awq")
    est, how = _sum_over_gpus(spec, w, n)
    meas = measured_bytes(row)
    notes = [how] if how else []
    group = f"Qwen2.5 {fmt}"
    if fmt == "AWQ" and model in QWEN_TIED and T == 1:
        group = "Qwen2.5 AWQ, load peak"
        notes.append("measured = the from_pretrained load peak (weights + one vocab×hidden bf16 copy of the tied "
                     "embedding), above the generate peak at prompt 1; the engine has no load-time term")
    if fmt == "GPTQ-Int4":
        notes.append("engine quant_method='gptq': g_idx and exllama's fp16 dequantisation buffer of the largest "
                     "quantised linear per GPU (AutoGPTQ temp_dq, max(in·out)·2 B)")
    if fmt == "GPTQ-Int8":
        notes.append("engine quant_method='gptq': fp16 scale + 8-bit zero point per 128-group (3 B) and g_idx")
    if spec.intermediate_size == QWEN_72B_QUANT_INTERMEDIATE:
        notes.append("quantised 72B checkpoints pad intermediate_size 29568 → 29696 (AWQ config.json; GPTQ assumed)")
    short = model.replace("-Instruct", "")
    config = (f"{short} {fmt}, batch 1, prompt {T:,} + {QWEN_GEN_TOKENS:,} generated, flash-attn 2, "
              f"{n}× A100-80GB")
    return Comparison(row["id"], row["source"], group, model, config, "peak_allocated (Σ over GPUs)", meas, est,
                      error_pct(est, meas), True, "", "; ".join(notes), resolution_pct(row["value"]))
