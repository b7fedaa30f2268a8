"""Serving throughput of a vLLM / SGLang layout at a target concurrency: how many sequences one engine replica runs
at once, and the output tokens per second per GPU that gives at the decode step's time per output token.

    running batch  B = min(⌈C / DP⌉, ⌊sequences the KV pool holds⌋, the scheduler's cap)   (per replica)
    step batch     b = ⌈B / PP⌉            (PP micro-batches in flight, one in each stage)
    TPOT           = the decode step of b sequences through every stage (a sequence's token interval)
    output tok/s   = DP × B / TPOT                                (every sequence of every replica, a token a TPOT)
    per GPU        = output tok/s / (TP × PP × DP)
    TTFT           = the prefill of one request (its prompt alone, no batching)

C is the number of requests the deployment holds in flight, spread evenly over the DP replicas by the router (None:
as many as each engine admits, its saturated throughput). TPOT(B) is calculator.timing.inference_time's decode step
(every weight read once a step, the KV cache of every sequence read, TP all-reduce, EP all-to-all, PP sends, the
engine's step overhead) at the mean cache length. This is the measure serving planners rank by (NVIDIA
aiconfigurator / Dynamo planner, llm-d: output tokens/s per GPU at a concurrency, under the memory that fits).
Not modelled: chunked prefill sharing the decode step, uneven pipeline stages' idle time, SGLang DP attention's
per-rank batches, TTFT/TPOT SLAs.
"""
from __future__ import annotations

import math
import sys

from calculator.timing.inference_time import INFERENCE_BOTTLENECKS


def scheduler_cap(sv, w) -> int:
    """The most sequences the engine schedules in one step, memory aside.
    vLLM: max_num_seqs (vllm/v1/core/sched/scheduler.py Scheduler.schedule stops admitting waiting requests when
    len(self.running) == self.max_num_seqs; default 1024 on ≥ 70 GiB GPUs but A100, else 256:
    vllm/engine/arg_utils.py get_batch_defaults) — `Serving.max_num_seqs`.
    SGLang: max_running_requests (python/sglang/srt/model_executor/model_runner.py, the req_to_token pool size:
    --max-running-requests, else clamp(pool tokens / context length × 512, 2048, 4096), at most pool tokens / 2;
    calculator.engines.sglang.max_running)."""
    if sv.engine == "sglang":
        from calculator.engines.common import sglang_server
        from calculator.engines.sglang import max_running
        return max_running(w.serving, sglang_server(w)[1], sv.kv_pool_tokens, sv.configured_max_model_len,
                           sys.maxsize, 1)
    return int(sv.max_num_seqs)


def per_replica(concurrency: int | None, dp: int) -> int | None:
    """Requests one DP replica holds when the deployment holds `concurrency` (the router spreads them evenly:
    ⌈C / DP⌉); None: no target, each replica runs as many as it admits."""
    return None if concurrency is None else -(-concurrency // max(dp, 1))


def running_batch(offered: int | None, held: float, cap: int) -> int:
    """Sequences one replica decodes at once: min(offered, ⌊held⌋, cap). `held`: sequences of seq + gen tokens the
    KV pool holds at once (Serving.max_concurrent_seqs: vLLM num_blocks / blocks per request,
    kv_cache_utils.get_max_concurrency_for_kv_cache_config; SGLang pool tokens / tokens per request) — a request
    the pool cannot hold waits (vLLM's scheduler stops admitting when KVCacheManager.allocate_slots returns None and
    preempts the newest running request when a decode step needs a block none is free for; SGLang's PrefillAdder
    admits a request only while the token pool has room); `cap`: scheduler_cap."""
    batch = min(math.floor(held + 1e-9), cap)
    return max(0, batch if offered is None else min(offered, batch))


def pp_step_batch(batch: int, pp: int) -> int:
    """Sequences in one decode micro-batch with PP stages: ⌈B / PP⌉. Both engines keep PP batches in flight, one in
    each stage (vllm/v1/engine/core.py EngineCore.step_with_batch_queue, batch_queue_size = the executor's
    max_concurrent_batches = PP; SGLang scheduler_pp_mixin.py event_loop_pp, pp_size micro-batches), so every stage
    is busy and a sequence's token interval is one micro-batch's walk through the stages."""
    return -(-batch // max(pp, 1)) if batch else 0


def output_tokens_per_s(batch: int, tpot_s: float | None, dp: int) -> float:
    """Output tokens per second of the whole layout: every replica emits `batch` tokens a decode step of tpot_s."""
    if not batch or not tpot_s:
        return 0.0
    return dp * batch / tpot_s


def per_gpu(rate: float, gpus: int) -> float:
    """Tokens per second per GPU: the layout's rate over its TP × PP × DP GPUs."""
    return rate / gpus if gpus else 0.0


def cost_per_million_output(price_per_gpu_hour: float | None, gpus: int, rate: float) -> float | None:
    """USD per million output tokens: the GPUs' hourly price over the tokens they emit in an hour."""
    if price_per_gpu_hour is None or not rate:
        return None
    return price_per_gpu_hour * gpus / 3600 / rate * 1e6


def decode_bottleneck(rows, tpot_s: float) -> str:
    """What bounds a decode step (INFERENCE_BOTTLENECKS) from an estimate's roofline rows of phase "decode":
    compute- and memory-bound kernels, TP / EP / PP communication, and the host (the step overhead and dispatch
    beyond them)."""
    parts = dict.fromkeys(INFERENCE_BOTTLENECKS, 0.0)
    for r in rows:
        if r.phase != "decode":
            continue
        key = f"{r.name.split(' ')[0]} comm" if r.bound == "communication" else r.bound
        parts[key if key in parts else "memory"] += r.time_s
    parts["host"] = max(0.0, tpot_s - sum(parts.values()))
    return max(parts, key=parts.get)
