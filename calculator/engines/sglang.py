"""SGLang: the static memory of one GPU (weights + KV token pool) and the pool it leaves, as SGLang sizes them.

    mem_fraction_static = (GPU memory − reserved) / GPU memory, reserved by its rule
                                                  (sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings)
    KV pool  = free memory after loading − free memory before loading × (1 − mem_fraction_static)
             ≈ free before loading × mem_fraction_static − weights
                                                  (sglang/srt/mem_cache/kv_cache_configurator.py _profile_available_bytes)
    tokens   = KV pool // cell size, cell = KV heads × (head_dim + v_head_dim) × layers × dtype bytes; MLA:
               (kv_lora_rank + qk_rope_head_dim) × layers × bytes (sglang/srt/model_executor/pool_configurator.py)

Source read: the sglang 0.5.23 wheel.
"""
from __future__ import annotations

from calculator.engines.common import GiB, Serving, device_visible_bytes, kv_heads_on_gpu, kv_token_bytes
from calculator.engines.vllm import NON_TORCH_BASIS, RELEASES, forward_peak
from calculator.model.spec import ModelSpec

VERSION = "0.5.23"
MiB = 2**20
SWA_FULL_TOKENS_RATIO = 0.8  # sglang/srt/arg_groups/fields/schedule.py swa_full_tokens_ratio fallback
PAGE_SIZE = 1  # token-granular pool with the default FlashInfer / FA3 backends


def gpu_defaults(gpu_mem_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA-graph max batch) by the nvidia-smi total (memory_hook.py)."""
    if gpu_mem_mib < 20 * 1024:
        return 2048, 8
    if gpu_mem_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if gpu_mem_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mem_mib < 160 * 1024:  # H100, A100-80, H20, H200
        return 8192, 256 if tp < 4 else 512
    return 16384, 512  # B200, MI300


def decode_graph_sizes(max_bs: int) -> list[int]:
    """1, 2, 4, 8, 12, then 16..256 by 8, 272..496 by 16, 512.. by 32, plus max_bs (cuda_graph_hook.py)."""
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    sizes = [s for s in sizes if s <= max_bs]
    return sizes if max_bs in sizes else sizes + [max_bs]


def prefill_graph_sizes(max_tokens: int) -> list[int]:
    """Prefill capture buckets up to chunked_prefill_size (cuda_graph_hook.generate_prefill_cuda_graph_batch_sizes)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))
    return [s for s in sizes if s <= max_tokens]


def mem_fraction_rule(gpu_mem_mib: float, tp: int, pp: int, chunked: int, max_bs: int, mla: bool) -> tuple[float, str]:
    """SGLang's default mem_fraction_static: reserved MB = 512 + 1.5 × max(chunked prefill, 2048) + tp·pp/8 × 1024
    + 2 × decode max batch + 8 per prefill graph (MLA: 1536), at least 10 GiB above 60 GiB of memory."""
    prefill = 1536 if mla else 8 * len(prefill_graph_sizes(min(8192, chunked) if mla else chunked))
    reserved = 512 + max(chunked, 2048) * 1.5 + tp * pp / 8 * 1024 + 2 * max_bs + prefill
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    frac = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
    return frac, f"SGLang rule: ({gpu_mem_mib:.0f} − {reserved:.0f}) MiB / {gpu_mem_mib:.0f} MiB"


def cell_bytes(m: ModelSpec, w, layers: range) -> tuple[int, int]:
    """(full-attention cell, sliding-window cell): bytes of one token over this GPU's layers of each kind."""
    token = kv_token_bytes(m, kv_heads_on_gpu(m, w), w.kv_dtype)
    sliding = sum(1 for i in layers if m.layer_is_sliding(i) and m.sliding_window)
    return token * (len(layers) - sliding), token * sliding


def budget(m: ModelSpec, w, shard, gpu, weights: int) -> Serving:
    s, p = w.serving, w.parallel
    if s.version and not VERSION.startswith(s.version):
        from calculator.core.errors import InputError
        raise InputError("serving.version", f"SGLang {s.version!r} is not modelled; use {VERSION}")
    visible, basis = device_visible_bytes(gpu)
    gpu_mib = gpu.memory_bytes / MiB
    chunked, max_bs = gpu_defaults(gpu_mib, p.tp)
    chunked = s.max_num_batched_tokens or chunked
    max_bs = min(max_bs, s.max_num_seqs) if s.max_num_seqs else max_bs
    if s.memory_fraction is not None:
        frac, rule = s.memory_fraction, "set by you"
    else:
        frac, rule = mem_fraction_rule(gpu_mib, p.tp, p.pp, chunked, max_bs, m.is_mla)
    multi = p.tp > 1 or p.pp > 1
    rel = RELEASES["0.33"]
    nccl = rel.non_torch_multi - rel.non_torch_tp1 if multi else 0
    context = gpu.cuda_context_bytes
    pre_load = visible - context - nccl  # free memory when the model runner starts
    kv_pool = int(pre_load * frac) - weights
    layers = range(shard.first_layer, shard.last_layer)
    full_cell, swa_cell = cell_bytes(m, w, layers)
    if full_cell and swa_cell:  # hybrid SWA pool: each sliding layer holds ratio × the full layers' tokens
        tokens = int(max(kv_pool, 0) / (full_cell + SWA_FULL_TOKENS_RATIO * swa_cell))
    else:
        tokens = max(kv_pool, 0) // (full_cell or swa_cell)
    tokens = tokens // PAGE_SIZE * PAGE_SIZE
    configured = s.max_model_len or m.max_position_embeddings or (w.seq_len + w.gen_tokens)
    per_seq = w.seq_len + w.gen_tokens
    window = m.sliding_window or 0
    if full_cell and swa_cell:
        concurrency = min(tokens / per_seq, tokens * SWA_FULL_TOKENS_RATIO / min(per_seq, window))
    else:
        concurrency = tokens / per_seq
    pool_bytes = tokens * full_cell + int(tokens * SWA_FULL_TOKENS_RATIO) * swa_cell if full_cell and swa_cell \
        else tokens * (full_cell or swa_cell)
    graphs = 0
    if s.cuda_graphs:
        dec, pre = decode_graph_sizes(max_bs), prefill_graph_sizes(chunked)
        graphs = forward_peak(m, w, dec[-1]) + len(dec) * MiB + (1536 * MiB if m.is_mla else 8 * len(pre) * MiB)
    activation = forward_peak(m, w, chunked)
    starts = tokens > 0
    largest = min(configured, tokens - 1) if starts else 0  # a request's input is capped below the pool
    error = "" if starts else ("Not enough memory. Please try to increase --mem-fraction-static. (the KV pool "
                               f"left after the weights is {kv_pool / GiB:.2f} GiB)")
    notes = (f"device total {visible / GiB:.2f} GiB ({basis}); free before loading = total − CUDA context"
             + (" − NCCL" if multi else ""), f"mem_fraction_static {frac:g}: {rule}",
             "SGLang starts with any pool > 0 and caps a request's input at min(context length, pool tokens) − 1",
             "activations and CUDA graphs live in the (1 − mem_fraction_static) share: estimates, not subtracted "
             "from the pool", NON_TORCH_BASIS if multi else "")
    return Serving(
        "sglang", VERSION, frac, rule, visible, int(pre_load * frac), weights, activation, nccl, graphs,
        pool_bytes if starts else max(kv_pool, 0), kv_pool, full_cell + swa_cell, PAGE_SIZE, tokens // PAGE_SIZE, tokens,
        per_seq, concurrency,
        configured, largest, starts, error, chunked, max_bs, s.prefix_caching,
        len(decode_graph_sizes(max_bs)) if s.cuda_graphs else 0, False,
        {"tp": p.tp, "pp": p.pp, "dp": p.dp, "attention_dp": s.attention_dp, "ep": p.ep,
         "kv_heads_per_gpu": kv_heads_on_gpu(m, w)}, tuple(n for n in notes if n))
