"""Published GPU memory measurements against the engine's estimate of the same number.

    python -m validation.published            # print the table and the summary, write published_comparison.json
    python -m validation.published --check    # exit 1 if the committed JSON is not what this produces now

`validation/published.csv` is a copy of the shared table of published numbers (one row per configuration, each
with its citation and notes; see the `kind`, `metric`, `unit` and `notes` columns). Every row is kept. A row is
*comparable* when the engine can express the configuration and the number means the same thing as one of the
engine's outputs:

* ``torch.cuda.max_memory_allocated`` rows  -> ``Estimate.peak_allocated_bytes`` (summed over GPUs when the
  source sums them);
* nvidia-smi rows                           -> ``Estimate.total_bytes`` (peak x (1 + fragmentation) + context);
* DeepSpeed estimator rows                  -> the model-state components (+ the ZeRO-3 gather buffer);
* torchao optimizer rows                    -> the optimizer-state component, as a difference between two rows
  (the absolute numbers have no stated batch/sequence).

Rows the engine cannot express (LLaMA-Adapter fine-tunes, FSDP runs that peak while loading, encoder and
encoder-decoder models, CPU offload, NF4 double quantisation, unstated batch or sequence, OOM) are kept with
``comparable = False`` and the reason; where the engine can still say something useful the row carries an
informational ``estimated_bytes``. Single-GPU LoRA / QLoRA rows use the engine's LoRA mode.

Error = (estimated - measured) / measured. Findings and the calibrated constants: validation/CALIBRATION.md.
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from calculator import estimate
from calculator.hf_config import spec_from_hf_config
from calculator.model import GenericModel, ModelSpec
from calculator.presets import load_model
from calculator.workload import RECIPES, Parallelism, Precision, Workload

HERE = Path(__file__).resolve().parent
CSV_PATH = HERE / "published.csv"
JSON_PATH = HERE / "published_comparison.json"

GIB, MIB, GB = 2**30, 2**20, 10**9

# What the `unit` column means, in bytes. "GB" alone is ambiguous and is resolved per source below.
UNITS = {
    "GB (GiB: bytes/1024^3)": GIB,
    "GB (GiB)": GIB,
    "GB (1e9)": GB,
    "MB (MiB)": MIB,
    "MB (MiB, >>20)": MIB,
}

# Error bounds (|error| %, per group of comparable rows). Each is the worst |error| measured by this module at the
# commit that recorded it plus a margin of 0.5-1 point, rounded up to a half point (validation/CALIBRATION.md,
# "Error bounds"). tests/test_published.py holds every comparable row to its group's bound. Do not loosen a bound
# to make a regression pass: fix the engine or explain the new number in CALIBRATION.md.
ERROR_BOUNDS_PCT: dict[str, float] = {
    "Qwen2.5 BF16": 3.0,
    "Qwen2.5 GPTQ-Int8": 4.5,
    "Qwen2.5 GPTQ-Int4": 3.0,
    "Qwen2.5 AWQ": 2.5,
    "Qwen2.5 AWQ, load peak": 33.0,
    "litgpt LoRA bf16": 10.5,
    "litgpt QLoRA nf4": 16.0,
    "litgpt generate bf16": 1.0,
    "litgpt generate nf4, load peak": 20.0,
    "bert-large V100 nvidia-smi, weights only": 1.5,
    "DeepSpeed estimator ZeRO-3": 1.0,
    "torchao optimizer delta": 2.0,
}


# ---------------------------------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    id: str
    source: str
    group: str  # comparable rows are bounded per group (ERROR_BOUNDS_PCT)
    model: str
    config: str  # the configuration in one line
    metric: str  # which engine output is compared: peak_allocated | total (nvidia-smi) | model_states | ...
    measured_bytes: int | None
    estimated_bytes: int | None
    error_pct: float | None
    comparable: bool
    why_not: str = ""  # why the row is not comparable
    note: str = ""  # known deviations, assumptions
    resolution_pct: float | None = None  # half the last printed digit of the published value, % of the value


def read_rows(path: Path = CSV_PATH) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _resolution_pct(value: str) -> float | None:
    x = _number(value)
    if not x:
        return None
    decimals = len(value.split(".")[1]) if "." in value else 0
    return round(0.5 * 10 ** -decimals / x * 100, 3)


def measured_bytes(row: dict[str, str], unit_bytes: int | None = None) -> int | None:
    """The published value in bytes (None when it is not a number: OOM, an error message)."""
    x = _number(row["value"])
    if x is None:
        return None
    unit = unit_bytes or UNITS.get(row["unit"])
    if unit is None:
        raise ValueError(f"row {row['id']}: unit {row['unit']!r} needs an explicit interpretation")
    return round(x * unit)


def _err(est: int | None, meas: int | None) -> float | None:
    if est is None or not meas:
        return None
    return round(100 * (est - meas) / meas, 3)


def _gib(x: int | None) -> str:
    return "—" if x is None else f"{x / GIB:.3f}"


# ---------------------------------------------------------------------------------------------------------------
# Models that are not presets: public Hugging Face config.json values (fields that only matter for tokenisation
# or the Hub left out). Parameter counts are checked against transformers built on the meta device
# (EXPECTED_PARAMETERS; tests/test_published.py).
# ---------------------------------------------------------------------------------------------------------------

LLAMA_2_7B = {
    "_name_or_path": "meta-llama/Llama-2-7b-hf", "model_type": "llama", "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
    "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float16",
}
LLAMA_2_13B = dict(LLAMA_2_7B, _name_or_path="meta-llama/Llama-2-13b-hf", hidden_size=5120, intermediate_size=13824,
                   num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=40)
LLAMA_2_70B = dict(LLAMA_2_7B, _name_or_path="meta-llama/Llama-2-70b-hf", hidden_size=8192, intermediate_size=28672,
                   num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8)
CODELLAMA_34B = dict(LLAMA_2_7B, _name_or_path="codellama/CodeLlama-34b-hf", hidden_size=8192,
                     intermediate_size=22016, num_hidden_layers=48, num_attention_heads=64, num_key_value_heads=8,
                     max_position_embeddings=16384, rope_theta=1000000, torch_dtype="bfloat16")
STABLELM_ALPHA_3B = {
    "_name_or_path": "stabilityai/stablelm-base-alpha-3b", "model_type": "gpt_neox",
    "architectures": ["GPTNeoXForCausalLM"], "hidden_size": 4096, "intermediate_size": 16384,
    "num_hidden_layers": 16, "num_attention_heads": 32, "vocab_size": 50688, "rotary_pct": 0.25,
    "max_position_embeddings": 4096, "use_parallel_residual": True, "tie_word_embeddings": False,
    "layer_norm_eps": 1e-05, "hidden_act": "gelu", "torch_dtype": "float16",
}
# phi-1.5 and Falcon-40B are written as ModelSpec fields directly (litgpt's layouts: fused qkv for phi, an untied
# lm_head for Falcon), with model_type set so the parameter counts follow transformers (phi's lm_head bias).
PHI_1_5_CONFIG = {  # microsoft/phi-1_5 config.json (for reference; mapped by phi_1_5_spec)
    "model_type": "phi", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
    "num_attention_heads": 32, "vocab_size": 51200, "partial_rotary_factor": 0.5, "hidden_act": "gelu_new",
    "tie_word_embeddings": False, "max_position_embeddings": 2048,
}
FALCON_40B_CONFIG = {  # tiiuae/falcon-40b config.json (for reference; mapped by falcon_40b_spec)
    "model_type": "falcon", "hidden_size": 8192, "num_hidden_layers": 60, "num_attention_heads": 128,
    "num_kv_heads": 8, "new_decoder_architecture": True, "parallel_attn": True, "bias": False, "alibi": False,
    "vocab_size": 65024,
}

EXPECTED_PARAMETERS = {  # sum(p.numel()) of the transformers model built from the config above on the meta device
    "Llama-2-7B": 6_738_415_616,
    "Llama-2-13B": 13_015_864_320,
    "Llama-2-70B": 68_976_648_192,
    "CodeLlama-34B": 33_743_970_304,
    "StableLM-Alpha-3B": 3_637_321_728,
    "phi-1.5": 1_418_270_720,
    "Falcon-40B (litgpt, untied lm_head)": 41_835_970_560,
    "bert-large-uncased + 2-class head": 335_143_938,
    "t5-large": 737_668_096,
    "t5-3b": 2_851_598_336,
}


def phi_1_5_spec() -> ModelSpec:
    """phi-1.5 in GPT-NeoX terms: fused qkv with bias, dense with bias, plain GELU MLP with biases, parallel
    attention/MLP sharing ONE LayerNorm, untied head with a bias (calculator.parameters.LM_HEAD_BIAS_TYPES)."""
    c = PHI_1_5_CONFIG
    return ModelSpec(name="phi-1.5", model_type="phi", family="gpt_neox", hidden_size=c["hidden_size"],
                     num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
                     intermediate_size=c["intermediate_size"], vocab_size=c["vocab_size"], tie_word_embeddings=False,
                     gated_mlp=False, hidden_act="gelu_pytorch_tanh", norm_type="layernorm", norms_per_layer=1,
                     qkv_bias=True, o_bias=True, mlp_bias=True, fused_qkv=True, parallel_residual=True)


def falcon_40b_spec() -> ModelSpec:
    """Falcon-40B (new decoder architecture): fused qkv for 128 query / 8 KV heads, no biases, two LayerNorms
    (ln_attn, ln_mlp), parallel attention/MLP, plain GELU MLP of 4h. litgpt keeps a separate lm_head."""
    c = FALCON_40B_CONFIG
    return ModelSpec(name="Falcon-40B", model_type="falcon", family="gpt_neox", hidden_size=c["hidden_size"],
                     num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
                     num_key_value_heads=c["num_kv_heads"], intermediate_size=4 * c["hidden_size"],
                     vocab_size=c["vocab_size"], tie_word_embeddings=False, gated_mlp=False, hidden_act="gelu",
                     norm_type="layernorm", norms_per_layer=2, fused_qkv=True, parallel_residual=True)


@lru_cache(maxsize=None)
def _hf_spec(key: str) -> ModelSpec:
    cfg = {"Llama-2-7B": LLAMA_2_7B, "Llama-2-13B": LLAMA_2_13B, "Llama-2-70B": LLAMA_2_70B,
           "CodeLlama-34B": CODELLAMA_34B, "StableLM-Alpha-3B": STABLELM_ALPHA_3B}[key]
    return spec_from_hf_config(dict(cfg), name=key).spec


def model_spec(key: str) -> ModelSpec:
    if key == "phi-1.5":
        return phi_1_5_spec()
    if key.startswith("Falcon-40B"):
        return falcon_40b_spec()
    return _hf_spec(key)


# ---------------------------------------------------------------------------------------------------------------
# Qwen2.5 speed benchmark: HF transformers 4.46 generate(), FA2, batch 1, prompt + 2048 new tokens,
# sum over GPUs of torch.cuda.max_memory_allocated (examples/speed-benchmark/speed_benchmark_transformers.py)
# ---------------------------------------------------------------------------------------------------------------

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
                      _err(est, meas), True, "", "; ".join(notes), _resolution_pct(row["value"]))


# ---------------------------------------------------------------------------------------------------------------
# litgpt resource tables (Oct 2023): generate.py rows, and LoRA / QLoRA fine-tunes on one GPU (the engine's LoRA mode)
# ---------------------------------------------------------------------------------------------------------------

LITGPT_MODELS = {
    "phi-1.5 1.3 B": "phi-1.5", "StableLM Alpha 3 B": "StableLM-Alpha-3B", "Llama 2 7 B": "Llama-2-7B",
    "Llama 2 13 B": "Llama-2-13B", "CodeLlama 34 B": "CodeLlama-34B",
    "Falcon 40 B": "Falcon-40B (litgpt, untied lm_head)", "Llama 2 70 B": "Llama-2-70B",
}
LITGPT_PROMPT = 6  # 'Hello, my name is' with BOS (5-6 tokens by tokenizer; immaterial next to the weights)
LITGPT_NEW_TOKENS = 50


LITGPT_LORA_RANK = 8  # litgpt finetune/lora.py defaults (Oct 2023): r=8, alpha=16, adapters on query and value


def litgpt_finetune(row: dict[str, str]) -> Comparison:
    """litgpt finetune/lora.py and finetune/adapter*.py (Oct 2023): bf16-true, micro-batch padded to the longest
    Alpaca sample, torch AdamW on the adapters (bnb PagedAdamW with a quantised base)."""
    key = LITGPT_MODELS[row["model"]]
    meas = measured_bytes(row)
    mode = row["mode"]
    mb, T, n = int(row["micro_batch"]), int(row["seq_len"].split()[0]), int(row["num_gpus"])
    dq, nf4 = "nf4-dq" in mode, "nf4" in mode
    ckpt = "checkpointing" in row["recompute"]
    base = "nf4-dq" if dq else ("nf4" if nf4 else "bf16")
    config = (f"{key} {'LoRA r=8 on q,v' if 'LoRA' in mode else mode.split('finetune ')[1].split(' +')[0]}, "
              f"{base} base, micro-batch {mb} × {T:,} tokens, {'checkpointing per block, FSDP ' if ckpt else ''}"
              f"{n}× A100-40GB")
    rp = _resolution_pct(row["value"])
    if "Adapter" in mode:
        return Comparison(row["id"], row["source"], "litgpt adapter fine-tune", key, config, "peak_allocated", meas,
                          None, None, False, "LLaMA-Adapter / Adapter v2 fine-tune: no engine mode", "", rp)
    opt_dtype = "fp32" if nf4 else "bf16"  # bnb PagedAdamW keeps 32-bit state; torch AdamW follows the bf16 params
    w = Workload(mode="train", micro_batch=mb, seq_len=T, optimizer="adamw", optimizer_impl="fused" if nf4 else
                 "foreach", precision=Precision(params="bf16", grads="bf16", master_weights=None,
                                                optimizer_states=opt_dtype, activations="bf16"),
                 finetune="qlora" if nf4 else "lora", lora_rank=LITGPT_LORA_RANK, lora_targets="qv",
                 lora_adapter_dtype="params",  # litgpt's bf16-true: the adapters are bf16 like the base
                 qlora_keeps_inputs=nf4,  # Oct 2023: bitsandbytes 0.41, MatMul4Bit saved its input
                 recompute="full" if ckpt else "none", attention="flash",
                 parallel=Parallelism(dp=n, zero=3) if n > 1 else Parallelism(), gpu="a100-40gb")
    est = estimate(model_spec(key), w, with_fits=False).peak_allocated_bytes
    notes = ["litgpt's own GPT and LoRA code (fused qkv adapter with zero-padding, bf16 chunked cross-entropy), "
             "not PEFT on transformers, which the engine's LoRA activations are traced on"]
    if nf4:
        notes.append("bitsandbytes 0.41's MatMul4Bit kept the input of every 4-bit linear for backward "
                     "(ctx.tensors = (A, B); since 0.43 only the weight): qlora_keeps_inputs; litgpt also quantises "
                     "lm_head")
    note = "; ".join(notes)
    if meas is None:
        return Comparison(row["id"], row["source"], "litgpt fine-tune, no number", key, config, "peak_allocated",
                          None, est, None, False, f"{row['value']} on A100-40GB (no number); the engine's peak "
                          f"allocated is {est / GIB:.1f} GiB (~39.4 GiB usable)", note)
    if n > 1:
        return Comparison(row["id"], row["source"], "litgpt LoRA FSDP", key, config, "peak_allocated", meas, est,
                          _err(est, meas), False,
                          "FSDP runs measure about the single-GPU number (Llama-2-7B 22.18 GB on 2 GPUs with "
                          "checkpointing vs 21.30 on 1 without), consistent with every rank holding the full bf16 "
                          "model at some point (unsharded checkpoint load); the engine models the sharded steady "
                          "state", note, rp)
    if dq:
        return Comparison(row["id"], row["source"], "litgpt QLoRA nf4-dq", key, config, "peak_allocated", meas, est,
                          _err(est, meas), False, "bnb double quantisation is not an engine format (estimate shown: "
                          "plain NF4 base)", note, rp)
    group = "litgpt QLoRA nf4" if nf4 else "litgpt LoRA bf16"
    return Comparison(row["id"], row["source"], group, key, config, "peak_allocated", meas, est, _err(est, meas), True,
                      "", note, rp)


def litgpt(row: dict[str, str]) -> Comparison:
    if row["mode"].startswith("finetune"):
        return litgpt_finetune(row)
    key = LITGPT_MODELS[row["model"]]
    meas = measured_bytes(row)
    dq = "nf4-dq" in row["param_dtype"]
    wdt = "nf4" if "nf4" in row["param_dtype"] else None
    spec = model_spec(key)
    w = Workload(mode="infer", micro_batch=1, seq_len=LITGPT_PROMPT, gen_tokens=LITGPT_NEW_TOKENS, weight_dtype=wdt,
                 quant_group_size=64, gpu="a100-40gb")
    est = estimate(spec, w, with_fits=False).peak_allocated_bytes
    fmt = "nf4-dq" if dq else (wdt or "bf16")
    config = f"{key} {fmt} weights, generate {LITGPT_PROMPT} + {LITGPT_NEW_TOKENS} tokens, 1× A100-40GB"
    notes = []
    if wdt:
        notes.append("Lightning's BitsandbytesPrecision quantises every nn.Linear incl. lm_head (the engine keeps "
                     "the head in bf16); measured includes the load-time quantisation transient of the largest "
                     "linear (bf16 init + fp16 cast, ≈ 4 B × its elements), not modelled")
    if key == "phi-1.5":
        notes.append("phi-1.5 mapped as GPT-NeoX-shaped (one LayerNorm, biases, fused qkv as in litgpt)")
    if meas is None:
        why = (f"{row['value']} on A100-40GB (no number); the engine's peak allocated is {est / GIB:.1f} GiB "
               f"(A100-40GB: 40 GiB total, ~39.4 GiB usable by PyTorch)")
        return Comparison(row["id"], row["source"], "litgpt generate, no number", key, config, "peak_allocated",
                          None, est, None, False, why, "; ".join(notes))
    if dq:
        why = ("bnb double quantisation (absmax stored as 8-bit per 64 + fp32 per 256 blocks: 0.516 B/param) is not "
               "an engine format; estimate shown is plain nf4 (0.5625 B/param)")
        return Comparison(row["id"], row["source"], "litgpt generate nf4-dq", key, config, "peak_allocated", meas,
                          est, _err(est, meas), False, why, "; ".join(notes), _resolution_pct(row["value"]))
    group = "litgpt generate nf4, load peak" if wdt else "litgpt generate bf16"
    return Comparison(row["id"], row["source"], group, key, config, "peak_allocated", meas, est, _err(est, meas),
                      True, "", "; ".join(notes), _resolution_pct(row["value"]))


# ---------------------------------------------------------------------------------------------------------------
# HF transformers docs, bert-large on a V100: nvidia-smi after training (incl. the 1343 MiB context)
# ---------------------------------------------------------------------------------------------------------------

BERT_PARAMS = EXPECTED_PARAMETERS["bert-large-uncased + 2-class head"]


# Peak allocated of the fp32 training rows, traced on the meta device with validation/trace.py's byte-exact tracker
# (python -m validation.published --trace-bert re-derives these): BertForSequenceClassification (transformers,
# eager attention, dropout 0.1 with CUDA's 1-byte masks), fp32, persistent gradients (HF Trainer 2022 zeroes
# them in place), transformers' 2022 AdamW (per-parameter loop, one sqrt temporary) or transformers' Adafactor.
# (states = weights + grads + optimizer state + inputs and buffers; working = the fwd/bwd or step peak above them).
BERT_TRACED = {
    "56": {"states": 5_362_344_000, "working": 7_013_666_824},  # batch 4, AdamW
    "57": {"states": 5_362_319_400, "working": 1_766_002_696},  # batch 1, AdamW (accumulation: same peak)
    "58": {"states": 5_362_319_400, "working": 154_152_968},  # batch 1, AdamW, gradient checkpointing
    "61": {"states": 2_684_402_516, "working": 7_013_666_824},  # batch 4, Adafactor (factored 2nd moment)
}
BERT_CONTEXT_ROW = "66"  # nvidia-smi with one tiny tensor: the CUDA 11.2 context + kernels on a V100


def _hf_adamw_2022_step(params, states, lr=5e-5, betas=(0.9, 0.999), eps=1e-8, step=2) -> None:
    """transformers.optimization.AdamW as HF Trainer used it in 2022: a Python loop, in-place moment updates and
    one `denom` temporary per parameter."""
    import math
    for p in params:
        m, v = states[p]
        m.mul_(betas[0]).add_(p.grad, alpha=1 - betas[0])
        v.mul_(betas[1]).addcmul_(p.grad, p.grad, value=1 - betas[1])
        denom = v.sqrt().add_(eps)
        p.data.addcdiv_(m, denom, value=-lr * math.sqrt(1 - betas[1] ** step) / (1 - betas[0] ** step))
        del denom


def trace_bert(micro_batch: int, seq_len: int = 512, checkpointing: bool = False,
               optimizer: str = "adamw") -> dict[str, int]:
    """One fp32 training step of bert-large-uncased + 2-class head on the meta device; bytes of the persistent
    states and of the peak working set above them."""
    import torch
    from transformers import AutoConfig, BertForSequenceClassification

    from validation import trace as tr

    cfg = AutoConfig.for_model("bert", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                               intermediate_size=4096, vocab_size=30522, max_position_embeddings=512,
                               type_vocab_size=2, num_labels=2)
    cfg._attn_implementation = "eager"
    dev = torch.device("meta")
    with dev:
        model = BertForSequenceClassification(cfg).float()
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    params = list(model.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)
    if optimizer == "adamw":
        states = {p: (torch.zeros_like(p), torch.zeros_like(p)) for p in params}
        state_tensors, opt = [t for v in states.values() for t in v], None
    else:
        from transformers.optimization import Adafactor
        opt = Adafactor(params, scale_parameter=False, relative_step=False, warmup_init=False, lr=1e-3)
        opt.step()
        state_tensors = [t for st in opt.state.values() for t in st.values() if isinstance(t, torch.Tensor)]
        for p in params:
            p.grad.zero_()
    ids = torch.zeros((micro_batch, seq_len), dtype=torch.long, device=dev)
    token_types = torch.zeros_like(ids)
    labels = torch.zeros((micro_batch,), dtype=torch.long, device=dev)
    persistent = [*params, *(p.grad for p in params), *state_tensors, ids, token_types, labels, *model.buffers()]
    tracker = tr.MemoryTracker("meta")
    tracker.persistent_keys = tr.storage_keys(persistent)
    tr._ACTIVE.append(tracker)
    try:
        with tr.device_emulation("meta"), tracker:
            tracker.reset_peak()
            loss = model(input_ids=ids, token_type_ids=token_types, labels=labels).loss
            loss.backward()
            del loss
            fwd_bwd, after = tracker.peak, tracker.current
            tracker.reset_peak()
            if opt is None:
                _hf_adamw_2022_step(params, states)
            else:
                opt.step()
            step = tracker.peak - after
    finally:
        tr._ACTIVE.pop()
        tracker.detach_all()
    return {"states": tr.storage_bytes(persistent), "working": max(fwd_bwd, step)}


BERT_TRACE_RUNS = {"56": (4, False, "adamw"), "57": (1, False, "adamw"), "58": (1, True, "adamw"),
                   "61": (4, False, "adafactor")}


def bert_fragmentation(rows: list[dict[str, str]] | None = None) -> dict:
    """reserved − allocated on the BERT rows (nvidia-smi − context − traced peak) and the least-squares fit
    reserved − allocated = a · states + b · working set."""
    rows = read_rows() if rows is None else rows
    by_id = {r["id"]: r for r in rows}
    ctx = measured_bytes(by_id[BERT_CONTEXT_ROW])
    points = []
    for rid, t in BERT_TRACED.items():
        slack = measured_bytes(by_id[rid]) - ctx - t["states"] - t["working"]
        points.append((rid, t["states"], t["working"], slack))
    # normal equations for slack = a·s + b·w
    ss = sum(s * s for _, s, _, _ in points)
    ww = sum(w * w for _, _, w, _ in points)
    sw = sum(s * w for _, s, w, _ in points)
    sy = sum(s * y for _, s, _, y in points)
    wy = sum(w * y for _, _, w, y in points)
    det = ss * ww - sw * sw
    a, b = (sy * ww - wy * sw) / det, (wy * ss - sy * sw) / det
    return {
        "context_bytes": ctx,
        "rows": [{"id": rid, "states": s, "working": w, "peak_allocated": s + w, "slack": y,
                  "slack_pct_of_peak": round(100 * y / (s + w), 2),
                  "fit_slack": round(a * s + b * w)} for rid, s, w, y in points],
        "a_states": round(a, 4), "b_working": round(b, 4),
    }


def bert(row: dict[str, str]) -> Comparison:
    meas = measured_bytes(row)
    fp32 = Workload(mode="infer", micro_batch=1, seq_len=1, precision=RECIPES["fp32"][1], gpu="v100-16gb")
    if row["mode"].startswith("weights only"):
        model = GenericModel(name="bert-large-uncased (+2-class head), weights only", total_params=BERT_PARAMS,
                             activation_elements_per_sample=0)
        est = estimate(model, fp32).total_bytes
        return Comparison(row["id"], row["source"], "bert-large V100 nvidia-smi, weights only", model.name,
                          "bert-large fp32 weights loaded to a V100 16GB (nothing else)", "total (nvidia-smi)", meas,
                          est, _err(est, meas), True, "",
                          f"weights {BERT_PARAMS:,} × 4 B + default 5% fragmentation + V100 context (catalogue)",
                          _resolution_pct(row["value"]))
    if row["mode"].startswith("CUDA context"):
        model = GenericModel(name="torch.ones((1, 1)).cuda()", total_params=1, activation_elements_per_sample=0)
        est = estimate(model, fp32).total_bytes
        return Comparison(row["id"], row["source"], "bert-large V100 nvidia-smi, context", model.name,
                          "CUDA context after a 1-element tensor on a V100 (CUDA 11.2)", "total (nvidia-smi)", meas,
                          est, _err(est, meas), False,
                          "calibration source: the GPU catalogue's V100 cuda_context_bytes is this measurement "
                          "(comparing would be circular)", "", _resolution_pct(row["value"]))
    note = ""
    if row["id"] in BERT_TRACED:
        t = BERT_TRACED[row["id"]]
        peak = t["states"] + t["working"]
        slack = meas - measured_bytes({"value": "1343", "unit": "MB (MiB)", "id": "66"}) - peak
        note = (f"traced peak allocated {peak / GIB:.3f} GiB (states {t['states'] / GIB:.3f} + working set "
                f"{t['working'] / GIB:.3f}); nvidia-smi − 1343 MiB context − traced = {slack / MIB:.0f} MiB "
                f"({100 * slack / peak:.1f}% of the peak) allocator slack")
    recipe = "AMP fp16" if "AMP" in row["param_dtype"] else "fp32"
    config = (f"bert-large seq-cls {recipe}, {row['optimizer']}, micro-batch {row['micro_batch']} × accumulation "
              f"{row['grad_accum']}, seq {row['seq_len']}, recompute {row['recompute'].split()[0]}")
    return Comparison(row["id"], row["source"], "bert-large V100 nvidia-smi, training", row["model"], config,
                      "total (nvidia-smi)", meas, None, None, False,
                      "encoder model (BERT, post-LN, HF Trainer 2022): the engine models decoder LMs; used for the "
                      "context / fragmentation calibration (CALIBRATION.md)", note, _resolution_pct(row["value"]))


# ---------------------------------------------------------------------------------------------------------------
# DeepSpeed memory estimator: exact formulas (model states only)
#   ZeRO-2: offload 2P, else 4P + 16P/N;  ZeRO-3: 4·LL (+ 2P/N with params on GPU) or 4·LL + 18P/N
# ---------------------------------------------------------------------------------------------------------------

T5 = {"t5-3b": (EXPECTED_PARAMETERS["t5-3b"], 32_899_072), "t5-large": (EXPECTED_PARAMETERS["t5-large"], 32_899_072)}

# The estimator's inputs are only the parameter count P and the largest layer LL. The engine needs a decoder, so
# each T5 is stood in for by a decoder with exactly P parameters whose largest ZeRO-3 unit is the tied embedding of
# LL = 32128 × 1024 elements (found by search; tests/test_published.py checks both counts).
STAND_INS = {
    "t5-large": ModelSpec(name="t5-large stand-in", hidden_size=1024, num_hidden_layers=25, num_attention_heads=16,
                          intermediate_size=11716, vocab_size=32128, tie_word_embeddings=True, gated_mlp=False,
                          norms_per_layer=2),
    "t5-3b": ModelSpec(name="t5-3b stand-in", hidden_size=512, num_hidden_layers=128, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=128, intermediate_size=13806, vocab_size=64256,
                       tie_word_embeddings=True, gated_mlp=True, mlp_bias=True, norms_per_layer=1),
}
DS_PRECISION = Precision(params="fp16", grads="fp32", master_weights="fp32", optimizer_states="fp32",
                         activations="fp16")  # DeepSpeed fp16: 2 B params + 16 B (fp32 grad, master, m, v)


def deepspeed_formula(stage: int, P: int, LL: int, N: int, offload_optimizer: bool, offload_params: bool) -> int:
    """deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs /
    stage3.estimate_zero3_model_states_mem_needs, GPU side."""
    if stage == 2:
        return 2 * P if offload_optimizer else 4 * P + int(16 * P / N)
    if offload_optimizer:
        return 4 * LL if offload_params else 4 * LL + int(2 * P / N)
    return 4 * LL + int(18 * P / N)


def _ds_case(row: dict[str, str]) -> tuple[str, int, int, bool, bool]:
    model = "t5-3b" if row["model"].startswith("t5-3b") else "t5-large"
    N = int(row["num_gpus"])
    stage = 2 if row["zero_fsdp"] == "ZeRO-2" else 3
    off = row["offload"]
    if "case" in off:  # t5-large rows: case1 no offload, case2 params+optimizer, case3 optimizer only
        opt, par = ("case2" in off or "case3" in off), ("case2" in off)
    else:
        opt, par = "offload_optimizer=cpu" in off, "offload_param=cpu" in off
    return model, N, stage, opt, par


def deepspeed_engine(model: str, N: int, stage: int) -> dict[str, int]:
    """The engine's model states and ZeRO-3 gather buffer on one GPU for the stand-in of `model`."""
    w = Workload(mode="train", micro_batch=1, seq_len=512, precision=DS_PRECISION, optimizer="adamw",
                 optimizer_impl="fused", parallel=Parallelism(dp=N, zero=stage))
    e = estimate(STAND_INS[model], w, with_fits=False)
    c = e.components
    states = c["weights"] + c["master_weights"] + c["gradients"] + c["optimizer_states"]
    # the estimator's largest-layer term is the gathered module and its gradient; DeepSpeed's runtime buffers
    # (reduce bucket, prefetch: calculator/stacks/deepspeed.py) are not in the estimator
    return {"model_states": states, "gather": sum(t.bytes for t in e.terms if t.key == "sharding.gather")}


def deepspeed(row: dict[str, str]) -> Comparison:
    model, N, stage, opt, par = _ds_case(row)
    P, LL = T5[model]
    meas = measured_bytes(row)
    formula = deepspeed_formula(stage, P, LL, N, opt, par)
    off = "params+optimizer" if par else ("optimizer" if opt else "none")
    config = f"{model} ({P:,} params, largest layer {LL:,}), ZeRO-{stage}, {N} GPUs, offload {off}"
    note = f"DeepSpeed formula, exact: {formula:,} B"
    if opt or par:
        return Comparison(row["id"], row["source"], "DeepSpeed estimator", model, config, "model_states", meas, None,
                          None, False, "CPU offload: the engine has no offload option", note,
                          _resolution_pct(row["value"]))
    e = deepspeed_engine(model, N, stage)
    est = e["model_states"] + e["gather"]
    if stage == 2:
        return Comparison(row["id"], row["source"], "DeepSpeed estimator", model, config, "model_states", meas, est,
                          _err(est, meas), False,
                          "different accounting by design: DeepSpeed's ZeRO-2 estimate keeps an unpartitioned fp16 "
                          "gradient copy (4P = params + grads, + 16P/N); the engine shards the gradients (2P + 16P/N)",
                          note, _resolution_pct(row["value"]))
    note += (f"; engine model states {e['model_states']:,} B = 18P/N + 4 B AdamW step per tensor; engine gather "
             f"buffer {e['gather']:,} B = 2·LL·2 B + LL·4 B (unit + prefetch + its fp32 grad) vs DeepSpeed's 4·LL")
    return Comparison(row["id"], row["source"], "DeepSpeed estimator ZeRO-3", model, config,
                      "model_states (+ ZeRO-3 gather)", meas, est, _err(est, meas), True, "", note,
                      _resolution_pct(row["value"]))


# ---------------------------------------------------------------------------------------------------------------
# torchao low-bit optimizers, Llama-2-7B full bf16 fine-tune (torchtune): optimizer-state deltas only
# ---------------------------------------------------------------------------------------------------------------

# torchtune (mid-2024, torchtune/utils/memory.py get_memory_stats) divides max_memory_allocated by 1024**3; the
# README labels it "GB". Assumed GiB.
TORCHAO_UNIT = GIB
TORCHAO_REFERENCE = "102"  # PyTorch fused AdamW, bf16 states


def _llama2_7b_optimizer_states(optimizer: str) -> int:
    w = Workload(mode="train", micro_batch=1, seq_len=512, precision=RECIPES["pure-bf16"][1], optimizer=optimizer,
                 optimizer_impl="fused")
    return estimate(_hf_spec("Llama-2-7B"), w, with_fits=False).components["optimizer_states"]


def torchao(row: dict[str, str], by_id: dict[str, dict[str, str]]) -> Comparison:
    meas_abs = measured_bytes(row, TORCHAO_UNIT)
    config = f"Llama-2-7B full bf16 fine-tune (torchtune), {row['optimizer']}"
    if row["id"] == TORCHAO_REFERENCE:
        return Comparison(row["id"], row["source"], "torchao optimizer delta", "Llama-2-7B", config,
                          "peak_allocated", meas_abs, None, None, False,
                          "absolute peak: batch size, sequence lengths and activation checkpointing are not stated; "
                          "used as the reference of the deltas", "", _resolution_pct(row["value"]))
    if "4-bit" in row["optimizer"]:
        return Comparison(row["id"], row["source"], "torchao optimizer delta", "Llama-2-7B", config,
                          "optimizer-state delta vs fused AdamW", measured_bytes(by_id[TORCHAO_REFERENCE],
                                                                                 TORCHAO_UNIT) - meas_abs,
                          None, None, False, "4-bit optimizer states are not an engine option")
    meas = measured_bytes(by_id[TORCHAO_REFERENCE], TORCHAO_UNIT) - meas_abs
    est = _llama2_7b_optimizer_states("adamw") - _llama2_7b_optimizer_states("adamw-8bit")
    return Comparison(row["id"], row["source"], "torchao optimizer delta", "Llama-2-7B",
                      config + " vs PyTorch fused AdamW (bf16 states)", "optimizer-state delta vs fused AdamW", meas,
                      est, _err(est, meas), True, "",
                      "unit assumed GiB (torchtune get_memory_stats / 1024**3); 8-bit: 1 B per state element + one "
                      "fp32 absmax per 256 (bnb and torchao both use 256-element blocks)",
                      round(100 * 2 * 0.05 * GIB / meas, 3))


# ---------------------------------------------------------------------------------------------------------------
# Sources the engine cannot express at all
# ---------------------------------------------------------------------------------------------------------------


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
    if _number(row["value"]) is None:
        reasons.append(f"{row['value']} (no number)")
    reasons.append("batch size and sequence length not stated")
    return Comparison(row["id"], row["source"], "HF PEFT README", model, f"{model} {row['mode']}", "peak_allocated",
                      None, None, None, False, "; ".join(reasons))


# ---------------------------------------------------------------------------------------------------------------
# Analysis for validation/CALIBRATION.md (python -m validation.published --analysis): what the rows say about the
# formulas, and the errors once the terms CALIBRATION.md proposes are added. Nothing here feeds the JSON.
# ---------------------------------------------------------------------------------------------------------------


def linear_shapes(spec: ModelSpec) -> list[tuple[int, int]]:
    """(in, out) of every decoder-layer linear of a Llama/Qwen-style model (q, k, v, o, gate, up, down)."""
    h, qd, kvd, f = spec.hidden_size, spec.q_dim, spec.kv_dim, spec.intermediate_size
    per_layer = [(h, qd), (h, kvd), (h, kvd), (qd, h), (h, f), (h, f), (f, h)]
    return per_layer * spec.num_hidden_layers


def proposed_extra_bytes(c: Comparison, row: dict[str, str]) -> int:
    """Bytes the terms proposed in CALIBRATION.md add to (or take from) the engine's estimate of row `c`."""
    if c.source == "Qwen2.5 speed benchmark":
        fmt, n = row["param_dtype"], int(row["num_gpus"])
        spec = qwen_spec(row["model"], fmt)
        shapes = linear_shapes(spec)
        g_idx = 4 * sum(i for i, _ in shapes)
        if fmt == "GPTQ-Int4":  # exllama temp_dq per GPU + g_idx
            return n * 2 * max(i * o for i, o in shapes) + g_idx
        if fmt == "GPTQ-Int8":  # 8-bit packed zero points (1 B per group and output) + g_idx
            return sum(-(-i // 128) * o for i, o in shapes) + g_idx
        if fmt == "AWQ" and c.group.endswith("load peak"):  # load peak: weights + one V·h bf16 copy
            w = Workload(mode="infer", seq_len=1, weight_dtype="int4", quant_group_size=128)
            weights = estimate(spec, w, with_fits=False).components["weights"]
            return max(0, weights + 2 * spec.vocab_size * spec.hidden_size - c.estimated_bytes)
        return 0
    if c.source == "litgpt resource tables" and row["mode"].startswith("finetune"):
        if "nf4" not in row["mode"] or "LoRA" not in row["mode"]:
            return 0
        # QLoRA on bitsandbytes: MatMul4Bit keeps every 4-bit linear's input (MLP norm output, o_proj input, the
        # f-wide down/fc2 input) that the engine drops for frozen linears; the lm_head is NF4 in litgpt (saves
        # 1.4375 B × V·h) and is dequantised to bf16 for each matmul (2 B × V·h transient).
        spec = model_spec(LITGPT_MODELS[row["model"]])
        h, f, head = spec.hidden_size, spec.intermediate_size, spec.vocab_size * spec.hidden_size
        tokens = int(row["micro_batch"]) * int(row["seq_len"].split()[0])
        kept = spec.num_hidden_layers * tokens * 2 * (2 * h + f)
        dq = 0
        if "nf4-dq" in row["mode"]:  # double quantisation of the base: 4 B absmax per 64 -> 1 B + fp32 per 256 blocks
            blocks = -(-count_linear(spec) // 64)
            dq = 4 * blocks - (blocks + 4 * -(-blocks // 256))
        return kept + 2 * head - (2 * head - (head // 2 + 4 * -(-head // 64))) - dq
    if c.source == "litgpt resource tables" and "nf4" in row["param_dtype"]:
        spec = model_spec(LITGPT_MODELS[row["model"]])
        head = spec.vocab_size * spec.hidden_size
        q_head = head // 2 + 4 * -(-head // 64)
        if "nf4-dq" in row["param_dtype"]:  # double quantisation: 8-bit absmax per 64 + fp32 per 256 blocks
            lin = count_linear(spec)
            blocks = -(-lin // 64)  # 4 B absmax per block -> 1 B, + one fp32 per 256 blocks
            dq_saving = 4 * blocks - (blocks + 4 * -(-blocks // 256))
            hb = -(-head // 64)
            q_head = head // 2 + hb + 4 * -(-hb // 256)
        else:
            dq_saving = 0
        generate = c.estimated_bytes - (2 * head - q_head) - dq_saving
        weights = estimate(spec, Workload(mode="infer", seq_len=1, weight_dtype="nf4", quant_group_size=64),
                           with_fits=False).components["weights"] - (2 * head - q_head) - dq_saving
        load = weights + 4 * head  # the head's bf16 init + its fp16 cast while it is quantised
        return max(generate, load) - c.estimated_bytes
    return 0


def count_linear(spec: ModelSpec) -> int:
    """Decoder-layer linear parameters (what the engine quantises)."""
    from calculator.parallel import stage_shards
    return stage_shards(spec, Parallelism())[0].layer_linear


def what_if(comparisons: list[Comparison], rows: list[dict[str, str]]) -> list[dict]:
    by_id = {r["id"]: r for r in rows}
    fixed = []
    for c in comparisons:
        if c.estimated_bytes is None or c.measured_bytes is None:
            continue
        extra = proposed_extra_bytes(c, by_id[c.id])
        est = c.estimated_bytes + extra
        fixed.append(Comparison(**{**asdict(c), "estimated_bytes": est, "error_pct": _err(est, c.measured_bytes),
                                   "comparable": c.comparable or "nf4-dq" in c.group}))
    return summarize(fixed, "group")


def qwen_increments(comparisons: list[Comparison]) -> list[tuple]:
    """Single-GPU Qwen rows: (model, format, prompt, measured − measured at prompt 1, estimated − estimated at
    prompt 1), both in bytes: the part of the peak that grows with the prompt (KV cache + prefill working set)."""
    key = {}
    for c in comparisons:
        if c.source == "Qwen2.5 speed benchmark" and "1× A100" in c.config:
            T = int(re.search(r"prompt ([\d,]+)", c.config).group(1).replace(",", ""))
            fmt = c.config.split(",")[0].split()[-1]
            key[(c.model, fmt, T)] = c
    out = []
    for (model, fmt, T), c in key.items():
        base = key.get((model, fmt, 1))
        if T == 1 or base is None or base.group.endswith("load peak"):
            continue
        out.append((model, fmt, T, c.measured_bytes - base.measured_bytes, c.estimated_bytes - base.estimated_bytes))
    return out


def analysis_text(comparisons: list[Comparison], rows: list[dict[str, str]]) -> str:
    lines = ["Qwen2.5, single GPU: growth with the prompt (peak at prompt T − peak at prompt 1), GiB",
             f"{'model':24s} {'format':10s} {'T':>6} {'measured':>9} {'engine':>9} {'engine−meas':>12}"]
    incs = qwen_increments(comparisons)
    for model, fmt, T, dm, de in incs:
        lines.append(f"{model:24s} {fmt:10s} {T:>6} {dm / GIB:9.3f} {de / GIB:9.3f} {(de - dm) / GIB:+12.3f}")
    d = [(de - dm) / GIB for *_, dm, de in incs]
    lines.append(f"engine − measured growth: median {statistics.median(d):+.3f} GiB, range {min(d):+.3f} .. "
                 f"{max(d):+.3f} GiB over {len(d)} rows (published values are rounded to 0.01 GiB)")
    lines += ["", "Qwen2.5, single GPU: measured − engine at each prompt length, GiB (T-independent = a constant term)"]
    table_: dict[tuple, dict[int, float]] = {}
    for c in comparisons:
        if c.source == "Qwen2.5 speed benchmark" and "1× A100" in c.config:
            T = int(re.search(r"prompt ([\d,]+)", c.config).group(1).replace(",", ""))
            fmt = c.config.split(",")[0].split()[-1]
            table_.setdefault((c.model, fmt), {})[T] = (c.measured_bytes - c.estimated_bytes) / GIB
    lines.append(f"{'model':24s} {'format':10s} " + " ".join(f"{t:>8}" for t in (1, 6144, 14336, 30720)))
    for (model, fmt), v in table_.items():
        lines.append(f"{model:24s} {fmt:10s} " + " ".join(f"{v[t]:+8.3f}" if t in v else f"{'':>8}"
                                                          for t in (1, 6144, 14336, 30720)))
    by_id = {r["id"]: r for r in rows}
    lines += ["", "Unmodelled constant by format: mean over prompts ≥ 6144 of (measured − engine), minus AWQ's (the "
              "engine's int4 formula is AWQ's layout), vs the proposed term, GiB",
              f"{'model':24s} {'GPTQ-Int4−AWQ':>14} {'temp_dq':>8} {'GPTQ-Int8−AWQ':>14} {'zeros+g_idx':>12}"]
    for model in QWEN_PRESETS:
        const = {fmt: statistics.fmean(v for t, v in table_.get((model, fmt), {}).items() if t >= 6144)
                 for fmt in ("AWQ", "GPTQ-Int4", "GPTQ-Int8") if table_.get((model, fmt))}
        if len(const) < 3 or len({t for t in table_[(model, "AWQ")] if t >= 6144}) < 3:
            continue
        pred = {}
        for c in comparisons:
            if c.model == model and "1× A100" in c.config and ", prompt 6,144" in c.config:
                fmt = c.config.split(",")[0].split()[-1]
                pred[fmt] = proposed_extra_bytes(c, by_id[c.id]) / GIB
        lines.append(f"{model:24s} {const['GPTQ-Int4'] - const['AWQ']:+14.3f} {pred['GPTQ-Int4']:8.3f} "
                     f"{const['GPTQ-Int8'] - const['AWQ']:+14.3f} {pred['GPTQ-Int8']:12.3f}")
    lines += ["", "Errors by group with the terms proposed in CALIBRATION.md added (nf4-dq rows included)",
              f"{'group':44s} {'comp.':>5} {'median |e|%':>11} {'worst |e|%':>10} {'(id)':>6} {'mean e%':>8}"]
    for s in what_if(comparisons, rows):
        if not s["comparable"]:
            continue
        lines.append(f"{s['group'][:44]:44s} {s['comparable']:>5} {s['median_abs_error_pct']:>11.2f} "
                     f"{s['worst_abs_error_pct']:>10.2f} {s['worst_id']:>6} {s['mean_error_pct']:>+8.2f}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------------------------

MAPPERS = {
    "Qwen2.5 speed benchmark": qwen,
    "litgpt resource tables": litgpt,
    "HuggingFace transformers docs (bert-large on V100)": bert,
    "DeepSpeed memory estimator docs": deepspeed,
    "accelerate big-model-inference benchmark": accelerate,
    "HF PEFT README": peft,
}


def compare(rows: list[dict[str, str]] | None = None) -> list[Comparison]:
    rows = read_rows() if rows is None else rows
    by_id = {r["id"]: r for r in rows}
    out = []
    for r in rows:
        if r["source"] == "torchao low-bit optimizer benchmarks":
            out.append(torchao(r, by_id))
        else:
            out.append(MAPPERS[r["source"]](r))
    return out


def _stats(items: list[Comparison]) -> dict:
    comp = [c for c in items if c.comparable and c.error_pct is not None]
    errs = [abs(c.error_pct) for c in comp]
    worst = max(comp, key=lambda c: abs(c.error_pct), default=None)
    return {
        "rows": len(items),
        "comparable": len(comp),
        "median_abs_error_pct": round(statistics.median(errs), 3) if errs else None,
        "worst_abs_error_pct": round(abs(worst.error_pct), 3) if worst else None,
        "worst_id": worst.id if worst else None,
        "mean_error_pct": round(statistics.fmean(c.error_pct for c in comp), 3) if comp else None,
    }


def summarize(comparisons: list[Comparison], key: str) -> list[dict]:
    names = list(dict.fromkeys(getattr(c, key) for c in comparisons))
    out = []
    for name in names:
        entry = {key: name, **_stats([c for c in comparisons if getattr(c, key) == name])}
        if key == "group" and name in ERROR_BOUNDS_PCT:
            entry["bound_pct"] = ERROR_BOUNDS_PCT[name]
        out.append(entry)
    return out


def calibration(rows: list[dict[str, str]] | None = None) -> dict:
    """The constants the published rows calibrate (each with its source); CALIBRATION.md explains them."""
    rows = read_rows() if rows is None else rows
    by_id = {r["id"]: r for r in rows}
    frag = bert_fragmentation(rows)
    ctx = frag["context_bytes"]
    load_slack = measured_bytes(by_id["65"]) - ctx - 4 * BERT_PARAMS
    constants = [
        {"name": "CUDA context, V100, CUDA 11.2 driver 460 (kernels loaded eagerly)", "value": ctx, "unit": "bytes",
         "source": "row 66: HF transformers docs, nvidia-smi after torch.ones((1, 1)).cuda(); = the catalogue's "
                   "v100 cuda_context_bytes"},
        {"name": "allocator slack after loading weights only", "value": round(100 * load_slack / (4 * BERT_PARAMS), 3),
         "unit": "% of the weights", "source": "row 65 − row 66 − 335,143,938 × 4 B"},
        {"name": "fragmentation (reserved − allocated), share of the model states", "value": frag["a_states"],
         "unit": "fraction", "source": "rows 56, 57, 58, 61 (nvidia-smi − row 66) − traced peak allocated; "
                                       "least squares with the next constant"},
        {"name": "fragmentation (reserved − allocated), share of the fwd/bwd (or step) working set",
         "value": frag["b_working"], "unit": "fraction", "source": "as above"},
        {"name": "GPTQ 4-bit (exllama v1) dequantisation scratch per GPU", "value": 2, "unit": "bytes × max(in·out)",
         "source": "Qwen2.5 GPTQ-Int4 − AWQ rows (7B–72B; AutoGPTQ temp_dq buffer)"},
        {"name": "GPTQ 8-bit packed zero points", "value": 1, "unit": "byte per group of 128 per output",
         "source": "GPTQ checkpoint layout (qzeros int32 packing 4 zeros); Qwen2.5 GPTQ-Int8 rows are above it"},
        {"name": "AWQ load peak, tied-embedding model", "value": 2, "unit": "bytes × vocab × hidden above the weights",
         "source": "Qwen2.5-0.5B/1.5B/3B AWQ at prompt 1 (rows 335, 351, 367)"},
        {"name": "bitsandbytes 4-bit load transient (litgpt / Lightning)", "value": 4,
         "unit": "bytes × elements of the largest linear (lm_head)", "source": "litgpt nf4 and nf4-dq generate rows"},
        {"name": "NCCL communication buffers", "value": None, "unit": "", "source": "not calibrated: no published row "
         "isolates them (device_map pipelines use no NCCL; the DeepSpeed rows count model states only)"},
    ]
    return {"constants": constants, "bert_fragmentation": frag}


def build(comparisons: list[Comparison] | None = None) -> dict:
    comparisons = compare() if comparisons is None else comparisons
    return {
        "about": ("Published GPU memory numbers vs the engine's estimate of the same metric. "
                  "error_pct = (estimated - measured) / measured × 100. Rows with comparable = false are kept with "
                  "the reason (why_not); their estimated_bytes, when present, is informational. Findings and the "
                  "calibrated constants: validation/CALIBRATION.md."),
        "generated_by": "python -m validation.published",
        "data": "validation/published.csv",
        "sources": summarize(comparisons, "source"),
        "groups": summarize(comparisons, "group"),
        "calibration": calibration(),
        "rows": [asdict(c) for c in comparisons],
    }


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def table(comparisons: list[Comparison]) -> str:
    lines = [f"{'id':>4}  {'group':36s} {'measured GiB':>12} {'estimate GiB':>12} {'error %':>8}  config / why not"]
    for c in comparisons:
        err = "" if c.error_pct is None else f"{c.error_pct:+8.2f}"
        tail = c.config if c.comparable else f"[not comparable] {c.why_not}"
        lines.append(f"{c.id:>4}  {c.group[:36]:36s} {_gib(c.measured_bytes):>12} {_gib(c.estimated_bytes):>12} "
                     f"{err:>8}  {tail}")
    return "\n".join(lines)


def summary_text(data: dict) -> str:
    lines = ["", f"{'source / group':60s} {'rows':>5} {'comp.':>5} {'median |e|%':>11} {'worst |e|%':>10} "
                 f"{'(id)':>6} {'mean e%':>8} {'bound':>6}"]
    for kind in ("sources", "groups"):
        key = kind[:-1]
        for s in data[kind]:
            med = "—" if s["median_abs_error_pct"] is None else f"{s['median_abs_error_pct']:.2f}"
            worst = "—" if s["worst_abs_error_pct"] is None else f"{s['worst_abs_error_pct']:.2f}"
            mean = "—" if s["mean_error_pct"] is None else f"{s['mean_error_pct']:+.2f}"
            bound = f"{s['bound_pct']:g}" if "bound_pct" in s else ""
            lines.append(f"{s[key][:60]:60s} {s['rows']:>5} {s['comparable']:>5} {med:>11} {worst:>10} "
                         f"{s['worst_id'] or '':>6} {mean:>8} {bound:>6}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed JSON is stale (writes nothing)")
    ap.add_argument("--quiet", action="store_true", help="summary only")
    ap.add_argument("--analysis", action="store_true", help="print the CALIBRATION.md analysis (writes nothing)")
    ap.add_argument("--trace-bert", action="store_true",
                    help="re-trace the BERT training rows (needs torch + transformers) and compare with BERT_TRACED")
    args = ap.parse_args(argv)
    rows = read_rows()
    comparisons = compare(rows)
    if args.analysis:
        print(analysis_text(comparisons, rows))
        frag = bert_fragmentation(rows)
        print(f"\nBERT V100 rows: nvidia-smi − context ({frag['context_bytes'] / MIB:.0f} MiB) − traced peak allocated")
        for r in frag["rows"]:
            print(f"  row {r['id']}: states {r['states'] / MIB:8.1f} MiB, working {r['working'] / MIB:8.1f} MiB, "
                  f"slack {r['slack'] / MIB:7.1f} MiB = {r['slack_pct_of_peak']:5.2f}% of peak; fit "
                  f"{r['fit_slack'] / MIB:7.1f} MiB")
        print(f"  fit: slack = {frag['a_states']:.4f} × states + {frag['b_working']:.4f} × working set")
        return 0
    if args.trace_bert:
        ok = True
        for rid, (b, ck, opt) in BERT_TRACE_RUNS.items():
            got = trace_bert(b, 512, ck, opt)
            ok &= got == BERT_TRACED[rid]
            print(f"row {rid}: traced {got}, recorded {BERT_TRACED[rid]}{'' if got == BERT_TRACED[rid] else '  DIFFERS'}")
        return 0 if ok else 1
    data = build(comparisons)
    text = dumps(data)
    if args.check:
        current = JSON_PATH.read_text(encoding="utf-8") if JSON_PATH.exists() else ""
        if current != text:
            print(f"{JSON_PATH} is stale: run python -m validation.published", file=sys.stderr)
            return 1
        print(f"{JSON_PATH.name} is up to date")
        return 0
    if not args.quiet:
        print(table(comparisons))
    print(summary_text(data))
    JSON_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {JSON_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
