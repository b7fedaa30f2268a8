"""SGLang: the static memory of one GPU (weights + KV token pool) and the pool it leaves, as SGLang sizes them.

    mem_fraction_static = (GPU memory − reserved) / GPU memory, reserved by its rule
                                                  (sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings)
    KV pool  = free memory after loading − free memory before loading × (1 − mem_fraction_static)
             ≈ free before loading × mem_fraction_static − weights
                                                  (sglang/srt/mem_cache/kv_cache_configurator.py _profile_available_bytes)
    tokens   = KV pool // cell size, cell = KV heads × (head_dim + v_head_dim) × layers × dtype bytes; MLA:
               (kv_lora_rank + qk_rope_head_dim) × layers × bytes (sglang/srt/model_executor/pool_configurator.py)
    hybrids  : a state pool of K slots first, K = ⌊(pool × r / (1 + r) − per request) / per request⌋, then the
               token pool over the full-attention layers from the rest (kv_cache_configurator.py _handle_max_mamba_cache)
    pure SSM : Mamba2ForCausalLM, MambaForCausalLM, FalconMambaForCausalLM (configs/model_config.py
               PURE_SSM_ARCHITECTURES): the same K slots; no attention layer, so the cell is 0 and the token allocator
               holds max_total_num_tokens = context length (pool_configurator.py DefaultPoolConfigurator
               _zero_kv_max_tokens), context length = the config's max_position_embeddings or 2048
               (utils/hf_transformers/common.py get_context_length); the rest / (1 + r) share stays unallocated
    Gemma 3n / 4: the cells of engines/sglang_gemma.py (KV-shared layers keep buffers; Gemma 4 a hybrid SWA pool of
               two head sizes, Gemma 3n one pool over every layer)
    MiMo-V2   : the cells of engines/sglang_mimo.py (a hybrid SWA pool, each layer type its KV heads, V narrower than
               K), max_running_requests by resolve_max_num_reqs, a request's sliding tokens by compute_swa_request_cap
    DeepSeek-V4: the pools of engines/sglang_compressed.py (DSV4PoolConfigurator: sliding-window, c4 / c128
               compressed KV, indexer keys and compressor states, sized from one bytes-per-full-token coefficient)

Source read: the sglang 0.5.23 wheel (pure SSM: its configs/mamba2.py, configs/mamba.py, configs/hybrid_arch.py
mamba2_config, model_executor/pool_configurator.py, mem_cache/kv_cache_configurator.py).
"""
from __future__ import annotations

from functools import lru_cache

from calculator.engines import sglang_compressed, sglang_gemma, sglang_mimo, states, towers
from calculator.engines.common import (GiB, Serving, StatePool, attention_tp, check_context, check_request_length,
                                       device_visible_bytes, kv_heads_on_gpu, kv_token_bytes, sglang_derived_context,
                                       sglang_server)
from calculator.engines.vllm import NON_TORCH_BASIS, RELEASES, forward_peak
from calculator.memory.inference import with_kv_dtype
from calculator.model.spec import ModelSpec

VERSION = "0.5.23"
MiB = 2**20
SWA_FULL_TOKENS_RATIO = 0.8  # sglang/srt/arg_groups/fields/schedule.py swa_full_tokens_ratio fallback
PAGE_SIZE = 1  # token-granular pool with the default FlashInfer / FA3 backends
DSA_PAGE_SIZE = 64  # the DSA index-key pool's page on CUDA (mem_cache/index_key_cache.py IndexKeyCache)
MAMBA_FULL_MEMORY_RATIO = 0.9  # arg_groups/fields/schedule.py: mamba_full_memory_ratio None resolves to 0.9
# kv_cache_configurator.py MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO: a request's own slot, the locked prefix state
# and a donated slot; plus mem_cache/allocation_sizing.py get_mamba_tracking_slots per strategy
MAMBA_SLOTS_PER_REQUEST = 3
TRACKING_SLOTS = {"extra_buffer": 2, "extra_buffer_lazy": 1, "no_buffer": 0}
# arg_groups/overrides.py _mamba_radix_cache_resolution: "auto" is extra_buffer for the architectures both in
# _MAMBA_RADIX_CACHE_ARCHS (GraniteMoeHybrid: with a mamba layer) and in _MAMBA_EXTRA_BUFFER_ARCHS, with the default
# triton linear-attention backend and the overlap schedule on; no_buffer (0 tracking slots) for the rest
EXTRA_BUFFER_TYPES = ("qwen3_next", "kimi_linear", "nemotron_h", "falcon_h1", "granitemoehybrid",
                      *states.QWEN3_5_TYPES)
DEFAULT_CONTEXT_LEN = 2048  # utils/hf_transformers/common.py get_context_length: no length key in the config


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
    return list(_decode_graph_sizes(max_bs))


@lru_cache(maxsize=64)
def _decode_graph_sizes(max_bs: int) -> tuple[int, ...]:
    """decode_graph_sizes, kept per max batch (every budget of a planner's grid asks for the same few)."""
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    sizes = [s for s in sizes if s <= max_bs]
    return tuple(sizes if max_bs in sizes else sizes + [max_bs])


def prefill_graph_sizes(max_tokens: int) -> list[int]:
    """Prefill capture buckets up to chunked_prefill_size (cuda_graph_hook.generate_prefill_cuda_graph_batch_sizes)."""
    return list(_prefill_graph_sizes(max_tokens))


@lru_cache(maxsize=64)
def _prefill_graph_sizes(max_tokens: int) -> tuple[int, ...]:
    """prefill_graph_sizes, kept per chunked-prefill size."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))
    return tuple(s for s in sizes if s <= max_tokens)


def mem_fraction_rule(gpu_mem_mib: float, tp: int, pp: int, chunked: int, max_bs: int, mla: bool,
                      attn_dp: int = 1, graphs: bool = True) -> tuple[float, str]:
    """SGLang's default mem_fraction_static (arg_groups/memory_hook.py handle_gpu_memory_settings): reserved MB =
    512 + 1.5 × max(chunked prefill, 2048) + tp·pp/8 × 1024 + the graph reserve (reserve_for_graph_mb: 2 × decode
    max batch and 8 per prefill graph (MLA: 1536) with CUDA graphs on; with DP attention over attn_dp ranks
    max batch × attn_dp × 3, × 4.5 above a max batch of 300, graphs or not), at least 10 GiB above 60 GiB."""
    prefill = (1536 if mla else 8 * len(_prefill_graph_sizes(min(8192, chunked) if mla else chunked))) if graphs else 0
    decode = 2 * max_bs if graphs else 0
    dp_pad = max_bs * attn_dp * (4.5 if max_bs > 300 else 3) if attn_dp > 1 else 0
    reserved = 512 + max(chunked, 2048) * 1.5 + tp * pp / 8 * 1024 + decode + dp_pad + prefill
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    frac = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
    return frac, f"SGLang rule: ({gpu_mem_mib:.0f} − {reserved:.0f}) MiB / {gpu_mem_mib:.0f} MiB"


def cell_bytes(m: ModelSpec, w, layers: range) -> tuple[int, int]:
    """(full-attention cell, sliding-window cell): bytes of one token over this GPU's layers of each kind; only the
    layers that cache K/V (pool_configurator.py _compute_cell_size over full_attention_layer_ids), with DSA's index
    keys (_compute_dsa_indexer_cell_size)."""
    w = with_kv_dtype(m, w)  # kv_dtype "auto" as the runtime picks it (memory.inference.kv_cache_dtype)
    split = states.split_layers(m, layers)
    token = kv_token_bytes(m, kv_heads_on_gpu(m, w), w.kv_dtype)
    if split.indexed:
        token = states.ds_mla_token_bytes(m, w.kv_dtype, token)
    sliding = len(split.sliding)
    return token * (len(split.attention) - sliding) + split.extra_token_bytes, token * sliding


def mamba_ratio(m: ModelSpec, s) -> tuple[int, str]:
    """(state slots per running request, why): 1 without the radix cache, else 3 + the strategy's tracking slots
    (kv_cache_configurator.py _calculate_mamba_ratio; "auto": overrides.py _mamba_radix_cache_resolution)."""
    if not s.prefix_caching:
        return 1, "radix cache off: one slot a request"
    strategy = s.mamba_radix_cache_strategy
    if strategy == "auto":
        strategy = "extra_buffer" if m.model_type in EXTRA_BUFFER_TYPES else "no_buffer"
    return MAMBA_SLOTS_PER_REQUEST + TRACKING_SLOTS[strategy], f"radix cache, {strategy}"


def mamba_slots(m: ModelSpec, w, split, rest: int, ad: int) -> tuple[int, int, str, str, str, str]:
    """(bytes per slot, max_mamba_cache_size K, conv dtype, recurrent dtype, dtype basis, rule): one slot is one
    request's state over the linear layers (configs/mamba_utils.py mamba_cache_per_req); K as
    _handle_max_mamba_cache sizes it from `rest` (the memory left after the weights); `ad` the server's attention-DP
    ranks (common.sglang_server)."""
    s, tp = w.serving, attention_tp(w)
    per_req, dts = 0, ("bf16", "fp32", "")
    for i in split.state:
        kind = m.layer_kind(i).mixer
        dts = states.sglang_dtypes(m, w, kind)
        per_req += states.layer_state_bytes(m, kind, tp, dts[0], dts[1])
    if s.max_mamba_cache_size:
        return per_req, s.max_mamba_cache_size // ad, *dts, "--max-mamba-cache-size"
    if not s.prefix_caching and s.max_num_seqs:
        return per_req, max(1, s.max_num_seqs // ad), *dts, "max_running_requests (radix cache off)"
    r = s.mamba_full_memory_ratio or MAMBA_FULL_MEMORY_RATIO
    k = int((rest * r / (1 + r) - per_req) // per_req) if per_req else 0
    return per_req, max(k, 0), *dts, f"mamba_full_memory_ratio {r:g}: ⌊(rest × r / (1 + r) − slot) / slot⌋"


def ssm_start_error(slots: int, per_req: int, rest: int, frac: float) -> str:
    """An attention-free model's start failures, in SGLang's order: no state slot (_handle_max_mamba_cache
    RuntimeError), then nothing left after the state pool (_profile_available_bytes ValueError)."""
    if slots <= 0:
        return (f"Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
                f"max_mamba_cache_size={slots} (mamba_cache_per_req={per_req / MiB:.2f} MB)")
    if rest <= 0:
        return (f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={frac:g}. "
                "Raise --mem-fraction-static")
    return ""


def max_running(s, attention_dp: int, tokens: int, context_len: int, slots: int, ratio: int) -> int:
    """resolve_max_num_reqs: min(max(1, max_running_requests // attention DP) or clamp(tokens / context × 512, 2048,
    4096), tokens // 2, max_mamba_cache_size // ratio); attention DP: the server's (common.sglang_server)."""
    estimated = min(max(int(tokens / context_len * 512), 2048), 4096)
    cap = max(1, s.max_num_seqs // attention_dp) if s.max_num_seqs else estimated
    return max(0, min(cap, tokens // 2, slots // ratio))


def overheads(m: ModelSpec, w, max_bs: int, chunked: int, device: str, frac: float, rule: str,
              multi: bool) -> tuple[int, int, tuple[str, ...]]:
    """(CUDA graphs, activation peak, the notes every SGLang budget starts with): the first capture's working set
    + 1 MiB per further decode graph + the prefill graphs' reserve, and one chunked-prefill forward."""
    graphs = 0
    if w.serving.cuda_graphs:
        dec, pre = _decode_graph_sizes(max_bs), _prefill_graph_sizes(chunked)
        graphs = forward_peak(m, w, dec[-1]) + len(dec) * MiB + (1536 * MiB if m.is_mla else 8 * len(pre) * MiB)
    notes = (f"{device}; free before loading = total − CUDA context" + (" − NCCL" if multi else ""),
             f"mem_fraction_static {frac:g}: {rule}",
             "SGLang starts with any pool > 0 and caps a request's input at min(context length, pool tokens) − 1",
             "activations and CUDA graphs live in the (1 − mem_fraction_static) share: estimates, not subtracted "
             "from the pool", NON_TORCH_BASIS if multi else "")
    return graphs, forward_peak(m, w, chunked), notes


def budget(m: ModelSpec, w, shard, gpu, weights: int) -> Serving:
    w = with_kv_dtype(m, w)  # kv_dtype "auto" as the runtime picks it (memory.inference.kv_cache_dtype)
    s, p = w.serving, w.parallel
    server_tp, server_dp = sglang_server(w)  # SGLang's defaults read the server's --tp-size
    if s.version and not VERSION.startswith(s.version):
        from calculator.core.errors import InputError
        raise InputError("serving.version", f"SGLang {s.version!r} is not modelled; use {VERSION}")
    if m.gemma_next is not None:
        sglang_gemma.check_serving(m, s)
    visible, basis = device_visible_bytes(gpu)
    gpu_mib = gpu.memory_bytes / MiB
    chunked, max_bs = gpu_defaults(gpu_mib, server_tp)
    chunked = s.max_num_batched_tokens or chunked
    max_bs = min(max_bs, s.max_num_seqs) if s.max_num_seqs else max_bs
    if s.memory_fraction is not None:
        frac, rule = s.memory_fraction, "set by you"
    else:
        frac, rule = mem_fraction_rule(gpu_mib, server_tp, p.pp, chunked, max_bs, m.is_mla, server_dp,
                                       s.cuda_graphs)
        if m.vision is not None and not s.language_model_only:  # a multimodal model's headroom (towers.py)
            factor, why = towers.sglang_vlm_factor(m)
            frac, rule = frac * factor, f"{rule} {why}"
    multi = server_tp > 1 or p.pp > 1
    rel = RELEASES["0.33"]
    nccl = rel.non_torch_multi - rel.non_torch_tp1 if multi else 0
    context = gpu.cuda_context_bytes
    pre_load = visible - context - nccl  # free memory when the model runner starts
    kv_pool = int(pre_load * frac) - weights
    layers = range(shard.first_layer, shard.last_layer)
    device = f"device total {visible / GiB:.2f} GiB ({basis})"
    if m.compressed is not None:  # DeepSeek-V4: SGLang's own pools (calculator/engines/sglang_compressed.py)
        graphs, activation, notes = overheads(m, w, max_bs, chunked, device, frac, rule, multi)
        base = {"version": VERSION, "rule": rule, "visible": visible, "budget": int(pre_load * frac),
                "weights": weights, "activation": activation, "nccl": nccl, "graphs": graphs, "chunked": chunked,
                "max_bs": max_bs, "graph_sizes": len(_decode_graph_sizes(max_bs)) if s.cuda_graphs else 0,
                "notes": tuple(n for n in notes if n)}
        return sglang_compressed.serving(m, w, layers, kv_pool, frac, base)
    gemma = sglang_gemma.cells(m, w, layers) if m.gemma_next is not None else None
    mimo = sglang_mimo.cells(m, w, layers) if m.swa_num_key_value_heads is not None else None
    hooked = gemma or mimo  # hook: pools whose layer types have head sizes of their own
    full_cell, swa_cell = (hooked.full_cell, hooked.swa_cell) if hooked else cell_bytes(m, w, layers)
    split = states.split_layers(m, layers)
    rest, state = kv_pool, None
    if split.state:  # the state pool first, the tokens from what it leaves
        per_req, slots, conv_dt, ssm_dt, dt_basis, slot_rule = mamba_slots(m, w, split, max(kv_pool, 0), server_dp)
        rest = kv_pool - (slots + 1) * per_req
    attention_free = bool(split.state) and not (full_cell or swa_cell)  # Mamba2 / Mamba / Falcon-Mamba
    if not (full_cell or swa_cell or split.state):
        from calculator.core.errors import InputError
        raise InputError("engine", "SGLang: a model with neither attention nor state layers is not modelled")
    # the config's length (get_context_length: 2048 without one, which an attention-free model's pool is sized by)
    derived = sglang_derived_context(m) or (DEFAULT_CONTEXT_LEN if attention_free else None)
    check_context(s.max_model_len, derived, "sglang")  # SGLang's model config refuses it before any memory
    configured = s.max_model_len or derived or (w.seq_len + w.gen_tokens)
    if attention_free:  # cell 0: the token allocator holds one context length (DefaultPoolConfigurator)
        tokens = configured
    elif mimo is not None:  # the pool configurator SGLang picks for it (sglang_mimo.pool_tokens)
        tokens, swa_tokens, mimo_error, mimo_rule = sglang_mimo.pool_tokens(
            mimo, rest, s, server_dp, m.sliding_window - 1, PAGE_SIZE, chunked, p.pp, SWA_FULL_TOKENS_RATIO)
    elif full_cell and swa_cell:  # hybrid SWA pool: each sliding layer holds ratio × the full layers' tokens
        tokens = int(max(rest, 0) / (full_cell + SWA_FULL_TOKENS_RATIO * swa_cell))
    else:
        tokens = max(rest, 0) // (full_cell or swa_cell)
    page = DSA_PAGE_SIZE if split.indexed else PAGE_SIZE
    tokens = tokens // page * page
    check_request_length(w, configured, "sglang")
    per_seq = w.seq_len + w.gen_tokens
    window = m.sliding_window or 0
    if mimo is not None:  # resolve_max_num_reqs caps the running requests; compute_swa_request_cap their swa tokens
        running = max_running(s, server_dp, tokens, configured, tokens, 1)
        swa_hold = sglang_mimo.swa_tokens_per_request(per_seq, window - 1, page)
        concurrency = float(min(tokens / per_seq, swa_tokens / swa_hold, running))
    elif full_cell and swa_cell:
        concurrency = min(tokens / per_seq, tokens * SWA_FULL_TOKENS_RATIO / min(per_seq, window))
    else:
        concurrency = tokens / per_seq
    pool_bytes = tokens * full_cell + int(tokens * SWA_FULL_TOKENS_RATIO) * swa_cell if full_cell and swa_cell \
        else tokens * (full_cell or swa_cell)
    if mimo is not None:
        pool_bytes = tokens * full_cell + swa_tokens * swa_cell
    starts = tokens > 0
    error = "" if starts else ("Not enough memory. Please try to increase --mem-fraction-static. (the KV pool "
                               f"left after the weights is {kv_pool / GiB:.2f} GiB)")
    if mimo is not None and mimo_error:
        starts, error = False, mimo_error
    elif starts and gemma is not None and gemma.hybrid:
        error = sglang_gemma.swa_start_error(m, tokens, SWA_FULL_TOKENS_RATIO, page)
        starts = not error
    if attention_free:
        error = ssm_start_error(slots, per_req, rest, frac)
        starts = not error
    if split.state:
        ratio, why = mamba_ratio(m, s)
        running = max_running(s, server_dp, tokens, configured, slots, ratio)
        concurrency = float(min(concurrency, running))
        state = StatePool(f"SGLang: {slots:,} slots ({slot_rule}); {ratio} a request ({why})", len(split.state),
                          len(split.attention), split.kinds, conv_dt, ssm_dt, per_req // len(split.state), per_req,
                          ratio, slots, (slots + 1) * per_req, running)
        pool_bytes += state.pool_bytes
        if starts and running < 1:
            # resolve_max_num_reqs RuntimeError
            starts, error = False, ("Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
                                    f"max_mamba_cache_size={slots}, mamba_ratio={ratio}, resulting "
                                    f"max_num_reqs={running}: raise --mem-fraction-static or set "
                                    "--max-mamba-cache-size")
    graphs, activation, notes = overheads(m, w, max_bs, chunked, device, frac, rule, multi)
    notes += (towers.tower_note(m, w, shard, attention_tp(w)),)
    largest = min(configured, tokens - 1) if starts else 0  # a request's input is capped below the pool
    if hooked is not None:
        notes += (hooked.note,)
    if mimo is not None:
        notes += (f"{tokens:,} full-layer and {swa_tokens:,} sliding-layer tokens ({mimo_rule}); "
                  f"max_running_requests {running:,} "
                  "(kv_cache_configurator.py resolve_max_num_reqs); a request holds at most "
                  f"{swa_hold:,} sliding tokens (window {window - 1} + eviction interval "
                  f"{sglang_mimo.SWA_EVICTION_INTERVAL} + 2 pages)",)
    if state is not None:
        notes += (f"hybrid: {states.describe(split)}: {state.slots:,} state slots of {per_req / 2**20:.1f} MiB (conv "
                  f"{conv_dt}, recurrent {ssm_dt}: {dt_basis}), {state.slots_per_seq} a running request, so at most "
                  f"{state.max_running_seqs:,} requests at once (kv_cache_configurator.py resolve_max_num_reqs); the "
                  "token pool covers the attention layers only",)
    if attention_free:
        notes += (f"no attention layer: the token pool is {tokens:,} tokens of 0 B (max_total_num_tokens = the "
                  f"context length, pool_configurator.py DefaultPoolConfigurator), which also bounds the tokens of "
                  f"all running requests together; the {max(rest, 0) / GiB:.2f} GiB left after the state pool stay "
                  "unallocated (raise --mamba-full-memory-ratio or set --max-mamba-cache-size to use them)",)
    return Serving(
        "sglang", VERSION, frac, rule, visible, int(pre_load * frac), weights, activation, nccl, graphs,
        pool_bytes if starts else max(kv_pool, 0), kv_pool, full_cell + swa_cell, page, tokens // page, tokens,
        per_seq, concurrency,
        configured, largest, starts, error, chunked, max_bs, s.prefix_caching,
        len(_decode_graph_sizes(max_bs)) if s.cuda_graphs else 0, False,
        {"tp": p.tp, "pp": p.pp, "dp": p.dp, "attention_dp": server_dp, "ep": p.ep,
         "kv_heads_per_gpu": kv_heads_on_gpu(m, w)}, tuple(n for n in notes if n), state)
