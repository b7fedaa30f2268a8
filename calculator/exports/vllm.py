"""`vllm serve` command line.

Flags, read in the vllm 0.33.0 wheel (vllm/engine/arg_utils.py EngineArgs.add_cli_args; each flag's type from its
config field): --tensor-parallel-size, --pipeline-parallel-size, --data-parallel-size, --enable-expert-parallel
(ParallelConfig, vllm/config/parallel.py), --gpu-memory-utilization, --block-size, --kv-cache-dtype,
--[no-]enable-prefix-caching (CacheConfig, vllm/config/cache.py), --max-model-len, --dtype, --quantization,
--enforce-eager, --language-model-only (ModelConfig, vllm/config/model.py), --max-num-batched-tokens, --max-num-seqs (SchedulerConfig,
vllm/config/scheduler.py). The model is `vllm serve`'s positional argument. The wheel is CUDA-only (336 MB), so
tests parse the exported line with a parser rebuilt from tests/data/exports/vllm_flags.json
(validation/exports/flags.py read those definitions from the wheel's source).
With expert parallelism vLLM's EP group is the TP × DP ranks (vllm/config/parallel.py enable_expert_parallel).
"""
from __future__ import annotations

from calculator.exports.common import TORCH_DTYPE, Export, Notes, model_id, serving_view, shell_command

NAME = "vllm"
LABEL = "vllm serve command"
TARGET = "vLLM 0.33.0"
MODES = ("infer", "rl")
KV_DTYPES = {"fp8": "fp8", "bf16": "bfloat16", "fp16": "float16"}


def quantization(w, notes: Notes) -> str | None:
    """--quantization for the weight dtype (vLLM also reads it from a quantized checkpoint's config)."""
    wd = w.weight_dtype or w.precision.params
    if wd in ("int4", "int8"):  # bitsandbytes' LLM.int8 is vLLM's / SGLang's "bitsandbytes" method
        return {"awq": "awq", "gptq": "gptq", "llm-int8": "bitsandbytes"}.get(w.quant_method, w.quant_method)
    if wd == "fp8":
        return "fp8"
    if wd == "nf4":
        return "bitsandbytes"
    if wd in ("fp4", "nvfp4"):
        notes.add(f"{wd} weights: vLLM takes the method from the checkpoint (MXFP4 / NVFP4 / ModelOpt)")
    return None


def arguments(m, w, notes: Notes) -> list[str]:
    v = serving_view(w, NAME, notes)
    a: list = [model_id(m, notes), "--tensor-parallel-size", v.tp, "--pipeline-parallel-size", v.pp]
    if v.dp > 1:
        a += ["--data-parallel-size", v.dp]
    if v.ep > 1:
        a.append("--enable-expert-parallel")
        if v.ep != v.tp * v.dp:
            notes.add(f"expert parallelism {v.ep}: vLLM's EP group is TP × DP = {v.tp * v.dp} ranks")
    if w.serving.attention_dp > 1:
        notes.add("DP attention (attention_dp) is SGLang's; vLLM uses --data-parallel-size with expert parallelism")
    dtype = w.precision.params if w.precision.params in TORCH_DTYPE else "bf16"
    a += ["--dtype", TORCH_DTYPE[dtype]]
    q = quantization(w, notes)
    if q:
        a += ["--quantization", q]
    if w.expert_weight_dtype:
        notes.add(f"{w.expert_weight_dtype} routed experts: vLLM takes expert quantization from the checkpoint")
    if v.memory_fraction is not None:
        a += ["--gpu-memory-utilization", v.memory_fraction]
    if v.max_model_len is not None:
        a += ["--max-model-len", v.max_model_len]
    if v.max_num_batched_tokens is not None:
        a += ["--max-num-batched-tokens", v.max_num_batched_tokens]
    if v.max_num_seqs is not None:
        a += ["--max-num-seqs", v.max_num_seqs]
    if v.block_size is not None:
        a += ["--block-size", v.block_size]
    if w.kv_dtype == "auto":  # the engine's default, the estimate's too (memory.inference.kv_cache_dtype)
        pass
    elif w.kv_dtype in KV_DTYPES:  # given: passed where the default would differ (a checkpoint's FP8 KV scheme)
        if w.kv_dtype != dtype or getattr(m, "checkpoint_kv_dtype", None):
            a += ["--kv-cache-dtype", KV_DTYPES[w.kv_dtype]]
    else:
        notes.add(f"{w.kv_dtype} KV cache: vLLM 0.33 stores KV in bf16/fp16/fp8 (or its per-token-head int8 / "
                  "int4 schemes)")
    if not w.serving.prefix_caching:
        a.append("--no-enable-prefix-caching")
    if not w.serving.cuda_graphs:
        a.append("--enforce-eager")
    if w.serving.language_model_only:  # a vision-language model's tower not loaded (calculator/engines/towers.py)
        a.append("--language-model-only")
    if w.serving.version and not w.serving.version.startswith("0.33"):
        notes.add(f"the estimate follows vLLM {w.serving.version}; the flags were checked against 0.33.0")
    if w.attention != "flash":
        notes.add(f"{w.attention} attention: vLLM always runs its own paged-attention kernels")
    return [str(x) for x in a]


def build(m, w) -> Export:
    notes = Notes()
    args = arguments(m, w, notes)
    env = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True " if w.expandable_segments else ""
    body = shell_command(f"{env}vllm serve {args[0]}", args[1:])
    head = f"#!/usr/bin/env bash\n# {TARGET}: {LABEL}\n" + notes.comment_block()
    return Export(NAME, TARGET, "vllm_serve.sh", "text/x-shellscript", head + body, tuple(notes.lines))
