"""SGLang's KV pools for MiMo-V2-Flash (ModelSpec.swa_num_key_value_heads): a hybrid SWA pool whose full and
sliding layers have KV heads of their own and v heads narrower than k's, as SGLang 0.5.23 sizes them.

    hybrid SWA  configs/model_config.py is_hybrid_swa_model lists MIMO_V2_MODEL_ARCHS (MiMoV2ForCausalLM,
                MiMoV2FlashForCausalLM); get_hybrid_layer_ids: swa layers = hybrid_layer_pattern[i] == 1, full = 0
                (ModelSpec.layer_is_sliding: the mapper checks the pattern against layer_types)
    full token  = max(1, num_key_value_heads // attn_tp) × (head_dim + v_head_dim) × kv bytes
    swa token   = max(1, swa_num_key_value_heads // attn_tp) × (swa_head_dim + swa_v_head_dim) × kv bytes
                (model_executor/pool_configurator.py HybridSWAPoolConfigurator.__init__, get_num_kv_heads /
                get_swa_num_kv_heads; the pools themselves, mem_cache/swa_memory_pool.py SWAKVPool over two
                mem_cache/memory_pool.py MHATokenToKVPool with swa_head_num / swa_head_dim / swa_v_head_dim, the
                is_hybrid_swa_compress kwargs of kv_cache_configurator.py _build_hybrid_swa_kv_pool; K rows of
                head_dim and V rows of v_head_dim). swa_head_dim = head_dim and swa_v_head_dim = v_head_dim: the
                mapper (variants_more.map_mimo_v2_flash) refuses a config where they differ.
    tokens      = ⌊available / (full token × n_full + swa_full_tokens_ratio × swa token × n_swa)⌋, page-aligned;
                swa tokens = ⌊full tokens × ratio⌋ page-aligned (HybridSWAPoolConfigurator._solve_pool_sizes),
                ratio 0.8 (arg_groups/fields/schedule.py fallback; arg_groups/model_overrides/mimo_v2.py sets none)
    start       refused when sliding_window_size + page ≥ swa tokens (MemoryPoolConfigurator.validate_swa_pool_size);
                sliding_window_size = the config's sliding_window_size (load_model_utils.resolve_sliding_window_size:
                MiMoV2ForCausalLM has no get_attention_sliding_window_size) = ModelSpec.sliding_window − 1
    running     max_running_requests = min(clamp(⌊full tokens / context × 512⌋, 2048, 4096) or the user's
                --max-running-requests // attention DP, full tokens // 2) (kv_cache_configurator.py
                resolve_max_num_reqs)
    a request   holds min(tokens, window + SGLANG_SWA_EVICTION_INTERVAL (128) + 2 × page) sliding tokens at most
                (pool_configurator.py compute_swa_request_cap without speculative decoding: window + interval +
                page trailing, one page of decode allocation; managers/schedule_batch.py maybe_evict_swa)
    capped      --max-running-requests with the radix cache off (SWARequestCapPoolConfigurator.is_applicable; the
                chunked prefill size is always > 0 here): swa tokens = ceil_page(per request × max(1, requests //
                attention DP) + chunks in flight × chunked_prefill_size + page), chunks in flight 2 with the overlap
                schedule, 1 without (arg_groups/overrides.py _pipeline_parallel_overlap_disable: off under PP);
                full tokens = ⌊(available − swa tokens × swa cell) / full cell⌋ page-aligned, none left refuses the
                start (SWARequestCapPoolConfigurator.calculate_pool_sizes); no window floor check on this path

Not modelled (refused): a pipeline stage without full or without sliding layers (the all-SWA branch and the "at least
one SWA layer" assert); MiMo's MTP draft layers (speculative decoding is not an option here).

Source read: the sglang 0.5.23 wheel (models/mimo_v2.py MiMoV2Attention / MiMoV2DecoderLayer, configs/model_config.py,
model_executor/pool_configurator.py, mem_cache/kv_cache_configurator.py, mem_cache/swa_memory_pool.py,
mem_cache/memory_pool.py, arg_groups/model_override_base.py: fa3 on Hopper, page size 1 (overrides.py
_page_size_default)).
"""
from __future__ import annotations

from dataclasses import dataclass

from calculator.memory.inference import with_kv_dtype
from calculator.core.dtypes import nbytes
from calculator.core.errors import InputError
from calculator.engines.common import attention_tp
from calculator.engines.sglang_gemma import swa_floor_error

SWA_EVICTION_INTERVAL = 128  # sglang/srt/environ.py SGLANG_SWA_EVICTION_INTERVAL default


@dataclass(frozen=True)
class MimoCells:
    """One token's bytes on this GPU: per layer of each pool, and over this GPU's layers of each pool."""

    full_token: int  # one full-attention layer
    swa_token: int  # one sliding layer
    full_layers: int
    swa_layers: int
    note: str

    @property
    def full_cell(self) -> int:
        return self.full_token * self.full_layers

    @property
    def swa_cell(self) -> int:
        return self.swa_token * self.swa_layers


def token_bytes(kv_heads: int, attn_tp: int, head_dim: int, v_head_dim: int, kv_dtype: str) -> int:
    """K and V of one token in one layer on one GPU: max(1, heads // attn_tp) × (head_dim + v_head_dim) × bytes
    (pool_configurator.py HybridSWAPoolConfigurator.__init__)."""
    return max(1, kv_heads // attn_tp) * (head_dim + v_head_dim) * nbytes(1, kv_dtype)


def cells(m, w, layers: range) -> MimoCells:
    """The two pools' per-token bytes over `layers` (model_config.py get_hybrid_layer_ids, MIMO_V2_MODEL_ARCHS)."""
    w = with_kv_dtype(m, w)  # kv_dtype "auto" as the runtime picks it (memory.inference.kv_cache_dtype)
    full = sum(1 for i in layers if not m.layer_is_sliding(i))
    swa = len(layers) - full
    if not swa or not full:  # HybridSWAPoolConfigurator.__init__ assert / its all-SWA branch
        raise InputError("parallel.pp", f"SGLang: a MiMo-V2-Flash pipeline stage of layers {layers.start}–"
                                        f"{layers.stop - 1} has {full} full and {swa} sliding layers; a stage without "
                                        "sliding layers fails HybridSWAPoolConfigurator's assert and one without full "
                                        "layers takes its all-SWA branch, which is not modelled: split the layers so "
                                        "each stage holds both")
    tp = attention_tp(w)
    dims = (m.head_size, m.v_head_size)
    full_token = token_bytes(m.kv_heads, tp, *dims, w.kv_dtype)
    swa_token = token_bytes(m.swa_num_key_value_heads, tp, *dims, w.kv_dtype)
    note = (f"MiMo-V2-Flash in SGLang: hybrid SWA pool (pool_configurator.py HybridSWAPoolConfigurator), {full} full "
            f"layers of {max(1, m.kv_heads // tp)} KV heads and {swa} sliding layers of "
            f"{max(1, m.swa_num_key_value_heads // tp)}, K {dims[0]} + V {dims[1]} wide: {full_token:,} and "
            f"{swa_token:,} B a token a layer")
    return MimoCells(full_token, swa_token, full, swa, note)


def swa_tokens_per_request(per_seq: int, window: int, page: int) -> int:
    """Sliding-pool tokens one running request holds at most: its tokens, or the window plus the eviction interval
    plus two pages (pool_configurator.py compute_swa_request_cap, no speculative decoding)."""
    return min(per_seq, swa_request_cap(window, page))


def swa_request_cap(window: int, page: int) -> int:
    """The most sliding tokens a running request keeps: window + eviction interval + two pages (one trailing, one of
    decode allocation; pool_configurator.py compute_swa_request_cap, no speculative decoding)."""
    return window + SWA_EVICTION_INTERVAL + 2 * page


def request_cap(s, attention_dp: int, window: int, page: int, chunked: int, pp: int) -> int:
    """Sliding tokens the scheduler holds live at --max-running-requests over the server's attention-DP ranks
    (pool_configurator.py compute_swa_request_cap: no speculative decoding, not a decode-disaggregation node)."""
    chunks_in_flight = 1 if pp > 1 else 2  # the overlap schedule is on unless PP turns it off
    return swa_request_cap(window, page) * max(1, s.max_num_seqs // attention_dp) + chunks_in_flight * chunked + page


def pool_tokens(c: MimoCells, rest: int, s, attention_dp: int, window: int, page: int, chunked: int, pp: int,
                ratio: float) -> tuple[int, int, str, str]:
    """(full tokens, sliding tokens, start error or "", rule): the pool configurator SGLang picks
    (pool_configurator.py create_memory_pool_configurator) sizing the pools from `rest` bytes."""
    if s.max_num_seqs and not s.prefix_caching:  # SWARequestCapPoolConfigurator
        swa = -(-request_cap(s, attention_dp, window, page, chunked, pp) // page) * page
        full = max(0, (rest - swa * c.swa_cell) // c.full_cell // page * page) if rest > 0 else 0
        error = "" if full or rest <= 0 else (
            f"SWA pool cap ({swa} tokens, {swa * c.swa_cell / 2**30:.2f} GiB) leaves no room for the full KV pool "
            f"within the available {rest / 2**30:.2f} GiB. Reduce --max-running-requests, lower "
            "SGLANG_SWA_EVICTION_INTERVAL, or increase --mem-fraction-static.")
        return full, swa, error, (f"SWARequestCapPoolConfigurator: {swa:,} sliding tokens for "
                                  f"{s.max_num_seqs:,} requests with the radix cache off")
    full = int(max(rest, 0) / (c.full_cell + ratio * c.swa_cell)) // page * page
    swa = int(full * ratio) // page * page
    error = swa_floor_error(window, page, swa) if full else ""
    return full, swa, error, f"HybridSWAPoolConfigurator: swa_full_tokens_ratio {ratio:g}"
