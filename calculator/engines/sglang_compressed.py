"""SGLang 0.5.23's KV pools for DeepSeek-V4 (compressed attention, calculator/model/architectures/compressed.py), as
its DSV4PoolConfigurator sizes them and DeepSeekV4TokenToKVPool allocates them. Paths are inside the sglang 0.5.23
wheel; "pool_configurator.py" is srt/model_executor/pool_configurator.py, "dsv4 pool" is
srt/mem_cache/deepseek_v4_memory_pool.py.

Defaults read (each one a setting that would change the pool):
    page size 256            arg_groups/model_overrides/deepseek_v4.py _deepseek_v4_overrides (CUDA / ROCm)
    swa_full_tokens_ratio    0.1, declared by the same override for model_type deepseek_v4 before the cache hook
                             records it as explicitly set (arg_groups/pipeline.py: model adjustments, then
                             kv_cache_hook.py handle_cache_compatibility), so DSV4PoolConfigurator takes the ratio
                             and not the request cap (_resolve_swa_cap_tokens returns None with an operator ratio)
    max_running_requests     256 (arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults), per attention-DP rank
                             max(1, 256 // attn_dp_size)
    KV layout                V4 (srt/environ.py SGLANG_DSV4_KV_LAYOUT "v4" on every GPU; the DeepSeek-V4 model
                             type takes the flashmla backend, deepseek_v4_hook.py _default_dsv4_attention_backend)
    kv dtype                 fp8_e4m3 (arg_groups/overrides.py _deepseek_v4_kv_cache_dtype: auto -> fp8_e4m3)
    indexer                  fp8 keys, enable_deepseek_v4_fp4_indexer False (arg_groups/fields/exec_.py)
    compressor state         fp32 (srt/environ.py SGLANG_DSV4_COMPRESS_STATE_DTYPE "float32"), offline c128
                             (SGLANG_OPT_USE_ONLINE_COMPRESS False), rings 8 (c4) and 128 (c128) without
                             speculative decoding (dsv4 pool get_compress_state_ring_size)

Bytes (V4 layout, kernels/ops/attention/dsv4/kv_layout.py KVLayout.V4; dsv4 pool DeepSeekV4SingleKVPool):
    entry          = nope fp8 + rope bf16 + one ue8m0 scale per 64 nope + 1 pad = 448 + 128 + 7 + 1 = 584 B
    page           = round_up(entries × 584, 576) (KVLayout.page_bytes, page_align 576)
    per token      = page / entries (DSV4PoolConfigurator._get_paged_kv_bytes_per_token): SWA 256 entries a page,
                     149,760 B, 585 B a token; c4 64 entries, 37,440 B, 585 B an entry; c128 2 entries, 1,728 B,
                     864 B an entry
    indexer        = index_head_dim fp8 + an fp32 scale per 128 = 132 B an entry (get_dsv4_indexer_bytes_per_token)
    c4 state       = ring 8 rows per SWA page of 256, each 2·2·head_dim + 2·2·index_head_dim fp32 (kv and score of
                     the two overlapping series, attention and indexer compressors; _get_bytes_per_swa_token)
    c128 state     = per request slot, ring 128 rows of 2·head_dim fp32 (_get_c128_state_fixed_bytes)

Sizing (DSV4PoolConfigurator.calculate_pool_sizes, _compute_dsv4_sizes):
    swa token  S   = 585 × layers + 8/256 × (2·2·512 + 2·2·128) × 4 × c4 layers
    full token F   = 0.1 × S + (585/4 + 132/4) × c4 layers + 864/128 × c128 layers
    fixed          = ⌈(slots × 128 + 129) / 128⌉ × 128 rows × 2·512 × 4 B × c128 layers, slots = requests + 1
    full tokens    = ⌊⌊(available − fixed) / F⌋ / 256⌋ × 256; swa = ⌊⌊full × 0.1⌋ / 256⌋ × 256; c4 = full // 4;
                     c128 = full // 128; c4 state rows = swa // 256 × 8; the start is refused when
                     sliding_window + 256 ≥ swa (MemoryPoolConfigurator.validate_swa_pool_size)
    running        = min(max(1, 256 // attn_dp_size), full // 2) (kv_cache_configurator.py resolve_max_num_reqs)
Allocated (the tensors, which reserve one logical page beyond the sizes: dsv4 pool _num_dsv4_physical_kv_pages
⌈(size + 256) / page⌉ pages; CompressStatePool size + ring + 1 rows padded to the ratio; plus the allocator's int64
full→SWA map of full + 257 entries, mem_cache/allocator/swa.py) is what the pool term shows.

Not modelled (refused): a --swa-full-tokens-ratio or --page-size of one's own, speculative decoding (MTP), HiSparse,
the unified_kv / trtllm / V4.1 layouts, the NPU geometry. DP attention: the calculator refuses TP for DeepSeek-V4,
so an EP group's data-parallel ranks are SGLang's attention-DP ranks (--tp ep·etp --dp ep·etp
--enable-dp-attention); a GPU without EP is its own server (attn_dp_size 1).
"""
from __future__ import annotations

from dataclasses import dataclass

from calculator.core.errors import InputError
from calculator.engines.common import GiB, Serving, check_request_length, sglang_server
from calculator.engines.sglang_gemma import swa_floor_error
from calculator.engines.sglang_mimo import swa_tokens_per_request
from calculator.engines.vllm_compressed import ratio_of  # a layer's compress ratio (0: the window alone)

PAGE = 256  # arg_groups/model_overrides/deepseek_v4.py: page_size = 256 (NPU 128, not in the catalogue)
SWA_FULL_TOKENS_RATIO = 0.1  # model_overrides/deepseek_v4.py; pool_configurator.py DSV4_DEFAULT_SWA_FULL_TOKENS_RATIO
MAX_RUNNING_REQUESTS = 256  # arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults
RING = {4: 8, 128: 128}  # dsv4 pool get_compress_state_ring_size, no speculative decoding, offline c128
STATE_BYTES = 4  # srt/environ.py SGLANG_DSV4_COMPRESS_STATE_DTYPE "float32" (_get_dsv4_compress_state_dtype_sizes)
V4_PAGE_ALIGN = 576  # kernels/ops/attention/dsv4/kv_layout.py KVLayout.V4.page_align (TMA row stride)
V4_TILE = 64  # KVLayout.V4.tile_size: one ue8m0 scale per 64 NoPE values
SCALE_PAD = 1  # dsv4 pool DeepSeekV4SingleKVPool.scale_pad
INDEXER_QUANT_BLOCK = 128  # dsv4 pool DeepSeekV4IndexerPool.quant_block_size: one fp32 scale per 128 fp8 values
KV_DTYPE = "fp8_e4m3"
INDEX_MAP_BYTES = 8  # mem_cache/allocator/swa.py full_to_swa_index_mapping: torch.int64


def round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def entry_bytes(m) -> int:
    """DeepSeekV4SingleKVPool.get_bytes_per_token (V4 layout): NoPE fp8 + RoPE bf16 + NoPE // 64 scales + 1 pad:
    448 + 128 + 7 + 1 = 584 B for head_dim 512, rope 64 (create_buffer asserts 584)."""
    rope = m.compressed.rope_dim
    nope = m.head_dim - rope
    return nope + 2 * rope + nope // V4_TILE + SCALE_PAD


def entries_per_page(ratio: int) -> int:
    """Entries a page holds: 256 for the SWA pool, 256 / ratio for a compressed pool, whose slot is the full
    pool's loc // ratio (dsv4 pool _init_compressed_pools: page_size // ratio)."""
    return PAGE // ratio if ratio else PAGE


def page_bytes(m, ratio: int) -> int:
    """One page as allocated: round_up(entries × 584, 576) (KVLayout.page_bytes; create_buffer)."""
    return round_up(entries_per_page(ratio) * entry_bytes(m), V4_PAGE_ALIGN)


def paged_token_bytes(m, ratio: int = 0) -> float:
    """Bytes one entry costs with its page's padding: page / entries (DSV4PoolConfigurator.
    _get_paged_kv_bytes_per_token): 585 (SWA, c4), 864 (c128) for DeepSeek-V4."""
    return page_bytes(m, ratio) / entries_per_page(ratio)


def indexer_entry_bytes(m) -> int:
    """get_dsv4_indexer_bytes_per_token without fp4: index_head_dim fp8 + 4 B per 128 = 132 B."""
    d = m.compressed.index_head_dim
    return d + d // INDEXER_QUANT_BLOCK * 4


def state_row_bytes(head_dim: int, ratio: int) -> int:
    """One CompressStatePool row: kv and score, 2·(1 + overlap)·head_dim fp32, overlap for ratio 4
    (deepseek_v4_compress_state.py CompressStatePool.last_dim)."""
    return 2 * (1 + (ratio == 4)) * head_dim * STATE_BYTES


def state_rows(size: int, ratio: int) -> int:
    """Rows CompressStatePool allocates: size + ring + 1, padded up to the ratio (offline compress)."""
    return round_up(size + RING[ratio] + 1, ratio)


@dataclass(frozen=True)
class Cells:
    """DSV4PoolConfigurator's coefficients over this stage's layers (stage_owner_layers / collect_sources_by_ratio:
    layers of ratio 4 and 128 own compressed storage; every layer keeps the sliding window)."""

    layers: int
    c4: int
    c128: int
    swa_token: float  # _get_bytes_per_swa_token
    c4_token: float  # _compressed_bytes_per_full_token(4), one c4 layer
    c128_token: float  # _compressed_bytes_per_full_token(128), one c128 layer
    full_token: float  # _get_bytes_per_full_token
    attn_state_row: int  # one c4 attention-compressor state row (8,192 B)
    indexer_state_row: int  # one c4 indexer-compressor state row (2,048 B)
    c128_state_row: int  # one c128 compressor state row (4,096 B)

    @property
    def c4_state_row(self) -> int:
        return self.attn_state_row + self.indexer_state_row


def cells(m, layers: range) -> Cells:
    ratios = [ratio_of(m, i) for i in layers]
    odd = sorted({r for r in ratios if r not in (0, 4, 128)})
    if odd:
        raise InputError("model", f"SGLang's DeepSeek-V4 pool takes compress ratios 0, 4 and 128 (ratios 1 / 2 are "
                                  f"V4.1's), not {odd} (deepseek_v4_memory_pool.py collect_sources_by_ratio)")
    c4, c128 = ratios.count(4), ratios.count(128)
    attn_row = state_row_bytes(m.head_dim, 4)
    idx_row = state_row_bytes(m.compressed.index_head_dim, 4)
    swa = paged_token_bytes(m) * len(ratios) + RING[4] / PAGE * (attn_row + idx_row) * c4
    c4_token = paged_token_bytes(m, 4) / 4 + indexer_entry_bytes(m) / 4
    c128_token = paged_token_bytes(m, 128) / 128
    full = SWA_FULL_TOKENS_RATIO * swa + c4_token * c4 + c128_token * c128
    return Cells(len(ratios), c4, c128, swa, c4_token, c128_token, full, attn_row, idx_row,
                 state_row_bytes(m.head_dim, 128))


def c128_state_bytes(c: Cells, requests: int) -> int:
    """_get_c128_state_fixed_bytes: one ring of 128 rows per request slot (requests + 1), plus ring + 1 rows, padded
    to 128, of 2·head_dim fp32, in every c128 layer."""
    return state_rows((requests + 1) * RING[128], 128) * c.c128_state_row * c.c128 if c.c128 else 0


@dataclass(frozen=True)
class Pools:
    """_DSV4PoolSizes with the requests and the memory the tensors take."""

    full: int
    swa: int
    c4: int
    c128: int
    c4_state: int  # rows
    c128_state: int  # rows (request slots × ring)
    running: int  # max_running_requests per attention-DP rank
    fixed: int  # the c128 state the sizing takes off first
    parts: tuple[tuple[str, int], ...]  # (pool, bytes allocated)

    @property
    def allocated(self) -> int:
        return sum(b for _, b in self.parts)


def pages(size: int, ratio: int) -> int:
    """_num_dsv4_physical_kv_pages: ⌈(size + one logical page of 256) / entries a page⌉ (the allocator's reserved
    page)."""
    return -(-(size + PAGE) // entries_per_page(ratio))


def solve(m, c: Cells, available: int, requests: int) -> Pools:
    """DSV4PoolConfigurator.calculate_pool_sizes, _compute_dsv4_sizes, finalize_with_max_running_requests, then the
    tensors DeepSeekV4TokenToKVPool allocates for those sizes."""
    fixed = c128_state_bytes(c, requests)
    for_tokens = max(available - fixed, 0)
    full = int(for_tokens / c.full_token) // PAGE * PAGE  # no ratio-1/2 layers: no padding loop to run
    swa = int(full * SWA_FULL_TOKENS_RATIO) // PAGE * PAGE
    c4, c128 = full // 4, full // 128
    c4_state = swa // PAGE * RING[4]
    running = min(requests, full // 2)  # kv_cache_configurator.py resolve_max_num_reqs
    c128_state = (running + 1) * RING[128]  # finalize_with_max_running_requests; the pool's max(...) is the same
    parts = (("sliding-window KV", pages(swa, 0) * page_bytes(m, 0) * c.layers),
             ("c4 compressed KV", pages(c4, 4) * page_bytes(m, 4) * c.c4),
             # the c4 indexer's size is c4_logical_size = c128 × 32 (DeepSeekV4TokenToKVPool.__init__), 64 a page
             ("c4 indexer keys", pages(c128 * 32, 4) * entries_per_page(4) * indexer_entry_bytes(m) * c.c4),
             ("c128 compressed KV", pages(c128, 128) * page_bytes(m, 128) * c.c128),
             ("c4 compressor state", state_rows(c4_state, 4) * c.c4_state_row * c.c4),
             ("c128 compressor state", state_rows(c128_state, 128) * c.c128_state_row * c.c128),
             # mem_cache/allocator/swa.py SWATokenToKVPoolAllocator: int64 full→SWA slot map, size + page + 1
             ("full→SWA index map", (full + PAGE + 1) * INDEX_MAP_BYTES))
    return Pools(full, swa, c4, c128, c4_state, c128_state, running, fixed, parts)


def attn_dp_size(w) -> int:
    """SGLang's attention-DP ranks of one server (common.sglang_server): an EP group wider than the attention's TP is
    one server of ep·etp GPUs with DP attention over ep·etp / tp ranks; otherwise the layout's TP splits the
    attention by heads (models/deepseek_v4.py: n_local_heads = n_heads // attn_tp_size, the shared key head, the
    latents' projections and the compressors whole on every rank) and the --attn-dp-size given."""
    return sglang_server(w)[1]


def check(m, w) -> None:
    """Refuse the settings whose pools were not read, naming the field."""
    s = w.serving
    if w.kv_dtype not in ("bf16", "fp8"):
        raise InputError("kv_dtype", f"SGLang serves DeepseekV4ForCausalLM with --kv-cache-dtype fp8_e4m3 or "
                                     f"bfloat16 only, got {w.kv_dtype} (arg_groups/overrides.py "
                                     "_deepseek_v4_kv_cache_dtype): use --kv-dtype fp8 or bf16 (SGLang's auto, which "
                                     "it resolves to fp8_e4m3)")
    if s.block_size not in (None, PAGE):
        raise InputError("serving.block_size", f"SGLang sets page_size {PAGE} for DeepseekV4ForCausalLM "
                                               "(arg_groups/model_overrides/deepseek_v4.py); other pages are not "
                                               "modelled")
    derived = m.max_position_embeddings
    if s.max_model_len and derived and s.max_model_len > derived:
        raise InputError("serving.max_model_len",
                         f"context length {s.max_model_len:,} is greater than DeepSeek-V4's derived context_length "
                         f"({derived:,}, max_position_embeddings: its rope_scaling has original_max_position_"
                         "embeddings, so no factor): SGLang refuses to start unless "
                         "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (configs/model_config.py "
                         "_derive_context_length; utils/hf_transformers/common.py get_context_length)")


def start_error(m, pools: Pools, available: int, frac: float) -> str:
    """SGLang's start failures in its order: nothing left after the weights (_profile_available_bytes ValueError),
    then the SWA floor (validate_swa_pool_size, before MemoryPoolConfig's full_tokens > 0 check)."""
    if available <= 0:
        return (f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={frac:g}. "
                "Raise --mem-fraction-static")
    err = swa_floor_error(m.compressed.window, PAGE, pools.swa)
    if err:
        return err
    if pools.full <= 0:
        return "Not enough memory. Please try to increase --mem-fraction-static."
    return ""


def notes(m, s, c: Cells, pools: Pools, ad: int, requests: int, per_seq: int) -> tuple[str, ...]:
    given = s.max_num_seqs or MAX_RUNNING_REQUESTS
    why = "--max-running-requests set by you" if s.max_num_seqs else "deepseek_v4_hook.py default 256"
    parts = "; ".join(f"{name} {b / GiB:.2f} GiB" for name, b in pools.parts)
    return (f"DeepSeek-V4 in SGLang 0.5.23 (DSV4PoolConfigurator, pool_configurator.py; V4 layout, {KV_DTYPE}, page "
            f"{PAGE}): {c.layers} layers keep the sliding window ({paged_token_bytes(m):g} B a token), {c.c4} c4 "
            f"layers {paged_token_bytes(m, 4):g} B + {indexer_entry_bytes(m)} B indexer per 4 tokens, {c.c128} c128 "
            f"layers {paged_token_bytes(m, 128):g} B per 128 tokens; an SWA slot costs {c.swa_token:,.2f} B "
            f"(with {RING[4]} fp32 c4 compressor-state rows per 256-token page), a full token {c.full_token:,.2f} B "
            f"(swa_full_tokens_ratio {SWA_FULL_TOKENS_RATIO} × the SWA slot + compressed KV and indexer)",
            f"pools: {pools.full:,} full tokens, {pools.swa:,} sliding-window tokens, {pools.c4:,} c4 / "
            f"{pools.c128:,} c128 entries, {pools.c4_state:,} c4 / {pools.c128_state:,} c128 state rows; allocated "
            f"{parts} (deepseek_v4_memory_pool.py DeepSeekV4TokenToKVPool)",
            f"max_running_requests {pools.running:,} = min({given:,} // attention-DP {ad} → {requests:,}, full tokens "
            f"// 2) ({why}; kv_cache_configurator.py resolve_max_num_reqs); "
            f"the c128 state of {requests + 1:,} request slots ({pools.fixed / GiB:.2f} GiB) is taken off before the "
            f"tokens; a running request holds at most {swa_tokens_per_request(per_seq, m.compressed.window, PAGE):,} "
            "sliding-window tokens (window + eviction interval 128 + 2 pages, compute_swa_request_cap)",
            f"SGLang defaults assumed: swa_full_tokens_ratio {SWA_FULL_TOKENS_RATIO} (the DeepSeek-V4 override; "
            "--swa-full-tokens-ratio changes it), SGLANG_DSV4_KV_LAYOUT v4, fp8 indexer, fp32 compressor state, no "
            "MTP; attention-DP ranks as common.sglang_server maps the layout; the mem_fraction_static rule is "
            "the generic one (memory_hook.py), with DP attention's graph padding, computed before the DeepSeek-V4 "
            "hook caps the decode graphs at its 256 running requests (pipeline.py runs handle_gpu_memory_settings "
            "first); DeepEP's 2 GiB reserve (--moe-a2a-backend deepep) is not added")


def serving(m, w, layers: range, available: int, frac: float, base: dict) -> Serving:
    """The SGLang budget of one GPU holding `layers` of DeepSeek-V4; `base` carries what sglang.budget computes for
    every model (memory fraction, weights, activations, graphs, generic notes)."""
    check(m, w)
    s = w.serving
    ad = attn_dp_size(w)
    requests = max(1, (s.max_num_seqs or MAX_RUNNING_REQUESTS) // ad)
    c = cells(m, layers)
    pools = solve(m, c, max(available, 0), requests)
    error = start_error(m, pools, available, frac)
    starts = not error
    per_seq = w.seq_len + w.gen_tokens
    configured = s.max_model_len or m.max_position_embeddings or per_seq
    check_request_length(w, configured, "sglang")
    held = round_up(per_seq, PAGE)  # the full pool is allocated by 256-token pages
    swa_hold = swa_tokens_per_request(held, m.compressed.window, PAGE)
    concurrency = float(min(pools.full / held, pools.swa / swa_hold, pools.running)) if starts else 0.0
    return Serving(
        engine="sglang", version=base["version"], memory_fraction=frac, memory_fraction_rule=base["rule"],
        device_visible_bytes=base["visible"], budget_bytes=base["budget"], weights_bytes=base["weights"],
        activation_peak_bytes=base["activation"], non_torch_bytes=base["nccl"], cuda_graph_bytes=base["graphs"],
        kv_pool_bytes=pools.allocated if starts else max(available, 0), kv_available_bytes=available,
        kv_bytes_per_token=round(c.full_token), block_size=PAGE, kv_pool_blocks=pools.full // PAGE,
        kv_pool_tokens=pools.full, tokens_per_seq=per_seq, max_concurrent_seqs=concurrency,
        configured_max_model_len=configured, max_model_len=min(configured, pools.full - 1) if starts else 0,
        starts=starts, start_error=error, max_num_batched_tokens=base["chunked"], max_num_seqs=base["max_bs"],
        prefix_caching=s.prefix_caching, cuda_graph_sizes=base["graph_sizes"], cuda_graphs_in_budget=False,
        layout={"tp": w.parallel.tp, "pp": w.parallel.pp, "dp": w.parallel.dp, "attention_dp": ad,
                "ep": w.parallel.ep, "kv_heads_per_gpu": 1},
        notes=base["notes"] + notes(m, s, c, pools, ad, requests, per_seq))
