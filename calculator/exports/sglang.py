"""SGLang `python -m sglang.launch_server` command line.

Flags, read in the sglang 0.5.23 wheel (generated from the Annotated fields of sglang/srt/arg_groups/fields/*.py by
sglang/srt/arg_groups/arg_utils.py add_cli_args_from_dataclass, plus sglang/srt/server_args.py): --model-path,
--dtype, --quantization, --context-length, --kv-cache-dtype (fields/model.py); --tp-size, --pp-size, --dp-size,
--attn-dp-size, --ep-size (fields/parallel.py); --mem-fraction-static, --disable-radix-cache, --page-size
(fields/memory.py); --chunked-prefill-size, --max-running-requests (fields/schedule.py);
--cuda-graph-backend-decode / --cuda-graph-backend-prefill disabled (fields/exec_.py; the older --disable-cuda-graph
and --dp-size + --enable-dp-attention are deprecated spellings in 0.5.23). sglang's server_args imports triton and
CUDA kernels, so tests parse the exported line with a parser rebuilt from tests/data/exports/sglang_flags.json
(validation/exports/flags.py read those definitions from the wheel's source).
"""
from __future__ import annotations

from calculator.engines.common import sglang_server
from calculator.exports.common import TORCH_DTYPE, Export, Notes, model_id, serving_view, shell_command
from calculator.exports.vllm import quantization

NAME = "sglang"
LABEL = "SGLang launch_server command"
TARGET = "SGLang 0.5.23"
MODES = ("infer", "rl")
KV_DTYPES = {"fp8": "fp8_e4m3", "bf16": "bf16"}


def arguments(m, w, notes: Notes) -> list[str]:
    v = serving_view(w, NAME, notes)
    tp_size, attn_dp = sglang_server(w) if w.mode != "rl" else (v.tp, 1)
    servers = v.tp * v.dp // tp_size  # SGLang's data-parallel replicas of that server
    if tp_size > v.tp:
        notes.add(f"EP {v.ep} spans {tp_size} GPUs: SGLang keeps a server's experts inside its TP group, so the "
                  f"layout runs as one server of --tp-size {tp_size} with DP attention (--attn-dp-size {attn_dp}): "
                  f"attention TP {v.tp} and 1/{v.ep} of the experts per GPU, as estimated")
    a: list = ["--model-path", model_id(m, notes), "--tp-size", tp_size, "--pp-size", v.pp]
    if servers > 1:
        a += ["--dp-size", servers]
    if attn_dp > 1:
        a += ["--attn-dp-size", attn_dp]
    if v.ep > 1:
        a += ["--ep-size", v.ep]
    dtype = w.precision.params if w.precision.params in TORCH_DTYPE else "bf16"
    a += ["--dtype", TORCH_DTYPE[dtype]]
    q = quantization(w, notes)
    if q:
        a += ["--quantization", q]
    if w.expert_weight_dtype:
        notes.add(f"{w.expert_weight_dtype} routed experts: SGLang takes expert quantization from the checkpoint")
    if v.memory_fraction is not None:
        a += ["--mem-fraction-static", v.memory_fraction]
    if v.max_model_len is not None:
        a += ["--context-length", v.max_model_len]
    if v.max_num_batched_tokens is not None:
        a += ["--chunked-prefill-size", v.max_num_batched_tokens]
    if v.max_num_seqs is not None:
        a += ["--max-running-requests", v.max_num_seqs]
    if v.block_size is not None:
        a += ["--page-size", v.block_size]
    if w.kv_dtype == "auto":  # the engine's default, the estimate's too (memory.inference.kv_cache_dtype)
        pass
    elif w.kv_dtype in KV_DTYPES:  # given: passed where the default would differ (a checkpoint's FP8 KV scheme)
        if w.kv_dtype != dtype or getattr(m, "checkpoint_kv_dtype", None):
            a += ["--kv-cache-dtype", KV_DTYPES[w.kv_dtype]]
    else:
        notes.add(f"{w.kv_dtype} KV cache: SGLang 0.5.23 stores KV in bf16, fp8 or fp4")
    if not w.serving.prefix_caching:
        a.append("--disable-radix-cache")
    if not w.serving.cuda_graphs:
        a += ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
    if w.serving.language_model_only:  # a vision-language model's tower not loaded (calculator/engines/towers.py)
        a.append("--language-model-only")
    if w.serving.version and w.serving.version != "0.5.23":
        notes.add(f"the estimate follows SGLang {w.serving.version}; the flags were checked against 0.5.23")
    return [str(x) for x in a]


def build(m, w) -> Export:
    notes = Notes()
    args = arguments(m, w, notes)
    env = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True " if w.expandable_segments else ""
    body = shell_command(f"{env}python -m sglang.launch_server", args)
    head = f"#!/usr/bin/env bash\n# {TARGET}: {LABEL}\n" + notes.comment_block()
    return Export(NAME, TARGET, "sglang_launch_server.sh", "text/x-shellscript", head + body, tuple(notes.lines))
