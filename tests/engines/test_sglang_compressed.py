"""SGLang 0.5.23's KV pools for DeepSeek-V4 (calculator/engines/sglang_compressed.py): each pool's bytes a token
worked out by hand from the sglang 0.5.23 wheel's formulas, and the pools of DeepSeek-V4-Flash on B200 with SGLang's
defaults. Paths are inside the wheel: "pool_configurator.py" = srt/model_executor/pool_configurator.py, "dsv4 pool"
= srt/mem_cache/deepseek_v4_memory_pool.py, "kv_layout.py" = kernels/ops/attention/dsv4/kv_layout.py."""
from __future__ import annotations

import math

import pytest

from calculator import InputError, Workload, estimate
from calculator.engines import sglang_compressed as sc
from calculator.model.presets import load_model

FLASH = load_model("deepseek-v4-flash").spec
# DeepSeek-V4-Flash: 43 layers, compress_ratios 0, 0, then 4 / 128 alternating: 2 window-only, 21 c4, 20 c128
LAYERS, C4, C128 = 43, 21, 20


def _serve(**kw):
    w = Workload(mode="infer", engine="sglang", gpu="b200", **kw)
    return estimate(FLASH, w, with_fits=False).serving


def test_bytes_a_token_of_each_pool_by_hand():
    # dsv4 pool DeepSeekV4SingleKVPool.get_bytes_per_token, V4 layout: 448 NoPE fp8 + 64 RoPE bf16 + 448 // 64
    # ue8m0 scales + 1 pad (create_buffer asserts 448 + 64 * 2 + 8 = 584)
    assert sc.entry_bytes(FLASH) == 448 + 64 * 2 + 448 // 64 + 1 == 584
    # kv_layout.py KVLayout.page_bytes: ceil(entries × 584 / 576) × 576; pool_configurator.py
    # _get_paged_kv_bytes_per_token = page / entries, a compressed page holding 256 // ratio entries
    swa_page = math.ceil(256 * 584 / 576) * 576  # 260 × 576
    c4_page = math.ceil(64 * 584 / 576) * 576  # 65 × 576
    c128_page = math.ceil(2 * 584 / 576) * 576  # 3 × 576
    assert (sc.page_bytes(FLASH, 0), sc.page_bytes(FLASH, 4), sc.page_bytes(FLASH, 128)) == (149_760, 37_440, 1_728)
    assert (swa_page, c4_page, c128_page) == (149_760, 37_440, 1_728)
    assert sc.paged_token_bytes(FLASH) == swa_page / 256 == 585.0
    assert sc.paged_token_bytes(FLASH, 4) == c4_page / 64 == 585.0
    assert sc.paged_token_bytes(FLASH, 128) == c128_page / 2 == 864.0
    # get_dsv4_indexer_bytes_per_token, fp8 (enable_deepseek_v4_fp4_indexer False): 128 + 128 // 128 × 4
    assert sc.indexer_entry_bytes(FLASH) == 128 + 4 == 132
    # deepseek_v4_compress_state.py CompressStatePool.last_dim = 2 · (1 + overlap) · head_dim, fp32
    # (SGLANG_DSV4_COMPRESS_STATE_DTYPE float32): c4 attention 2·2·512·4, c4 indexer 2·2·128·4, c128 2·512·4
    c = sc.cells(FLASH, range(LAYERS))
    assert (c.layers, c.c4, c.c128) == (LAYERS, C4, C128)
    assert (c.attn_state_row, c.indexer_state_row, c.c128_state_row) == (8_192, 2_048, 4_096)
    # pool_configurator.py _get_bytes_per_swa_token: 585 × 43 + ring 8 / page 256 × (8,192 + 2,048) × 21 c4 layers
    swa_token = 585 * LAYERS + 8 / 256 * (8_192 + 2_048) * C4
    assert c.swa_token == swa_token == 25_155 + 6_720 == 31_875
    # _compressed_bytes_per_full_token: c4 585 / 4 + 132 / 4 = 179.25; c128 864 / 128 = 6.75
    assert (c.c4_token, c.c128_token) == (585 / 4 + 132 / 4, 864 / 128) == (179.25, 6.75)
    # _get_bytes_per_full_token: swa_full_tokens_ratio 0.1 × SWA slot + Σ compressed bytes × layers
    full_token = 0.1 * 31_875 + 179.25 * C4 + 6.75 * C128  # 3,187.5 + 3,764.25 + 135
    assert c.full_token == pytest.approx(full_token) and full_token == pytest.approx(7_086.75)


def _by_hand(available: int, requests: int) -> dict:
    """DSV4PoolConfigurator.calculate_pool_sizes / _compute_dsv4_sizes / finalize_with_max_running_requests."""
    # _get_c128_state_fixed_bytes: (requests + 1) slots × ring 128 + ring 128 + 1 rows, padded to 128, of 4,096 B,
    # in each of the 20 c128 layers
    fixed = math.ceil(((requests + 1) * 128 + 129) / 128) * 128 * 4_096 * C128
    full = int((available - fixed) / 7_086.75) // 256 * 256
    swa = int(full * 0.1) // 256 * 256
    running = min(requests, full // 2)  # kv_cache_configurator.py resolve_max_num_reqs
    return {"fixed": fixed, "full": full, "swa": swa, "c4": full // 4, "c128": full // 128,
            "c4_state": swa // 256 * 8, "c128_state": (running + 1) * 128, "running": running}


def test_v4_flash_on_8_b200_ep8_dp8():
    """EP8 × DP8: one SGLang server of 8 attention-DP ranks (the EP group wider than the attention's TP 1), so
    max_running_requests 256 (deepseek_v4_hook.py apply_deepseek_v4_defaults) // 8 = 32 a rank."""
    sv = _serve(parallel={"ep": 8, "dp": 8})
    assert sv.starts and sv.start_error == "" and sv.block_size == 256 and sv.layout["attention_dp"] == 8
    h = _by_hand(sv.kv_available_bytes, 256 // 8)
    assert h["fixed"] == 35 * 128 * 4_096 * 20 == 367_001_600
    assert sv.kv_pool_tokens == h["full"] and sv.kv_pool_blocks == h["full"] // 256
    c = sc.cells(FLASH, range(LAYERS))
    pools = sc.solve(FLASH, c, sv.kv_available_bytes, 32)
    assert (pools.full, pools.swa, pools.c4, pools.c128, pools.c4_state, pools.c128_state, pools.running) == \
        (h["full"], h["swa"], h["c4"], h["c128"], h["c4_state"], h["c128_state"], h["running"])
    # memory fraction 0.748: DP attention over 8 ranks pads the decode graphs, 512 × 8 × 4.5 MB (memory_hook.py
    # reserve_for_graph_mb), so about 16.1 M full tokens a GPU (19.05 M without that reserve)
    assert sv.memory_fraction == 0.748
    assert 15_500_000 < sv.kv_pool_tokens < 16_500_000 and h["running"] == 32
    # the tensors (dsv4 pool _num_dsv4_physical_kv_pages: ⌈(size + 256) / entries a page⌉ pages)
    swa_bytes = math.ceil((h["swa"] + 256) / 256) * 149_760 * LAYERS
    c4_bytes = math.ceil((h["c4"] + 256) / 64) * 37_440 * C4
    index_bytes = math.ceil((h["c128"] * 32 + 256) / 64) * 64 * 132 * C4  # size c4_logical_size = c128 × 32
    c128_bytes = math.ceil((h["c128"] + 256) / 2) * 1_728 * C128
    c4_state = math.ceil((h["c4_state"] + 8 + 1) / 4) * 4 * (8_192 + 2_048) * C4
    c128_state = math.ceil((h["c128_state"] + 128 + 1) / 128) * 128 * 4_096 * C128
    index_map = (h["full"] + 256 + 1) * 8  # mem_cache/allocator/swa.py full_to_swa_index_mapping, int64
    assert sv.kv_pool_bytes == swa_bytes + c4_bytes + index_bytes + c128_bytes + c4_state + c128_state + index_map
    # requests of 4,096 tokens: 16 pages of full tokens each, 768 sliding tokens (128 + 128 + 2 × 256) at most
    assert sv.max_concurrent_seqs == min(h["full"] / 4_096, h["swa"] / 768, 32) == 32
    assert sv.max_model_len == sv.configured_max_model_len == 1_048_576
    assert any("DSV4PoolConfigurator" in n for n in sv.notes)


def test_v4_flash_on_one_b200():
    """One GPU, its own server: 256 running requests, whose c128 state (257 slots) is taken off first; 4,096-token
    requests are held back by the sliding-window pool (768 tokens a request)."""
    sv = _serve()
    assert sv.starts and sv.layout["attention_dp"] == 1
    h = _by_hand(sv.kv_available_bytes, 256)
    assert h["fixed"] == math.ceil((257 * 128 + 129) / 128) * 128 * 4_096 * 20 == 259 * 128 * 4_096 * 20
    assert sv.kv_pool_tokens == h["full"] > 0
    assert sv.max_concurrent_seqs == pytest.approx(min(h["full"] / 4_096, h["swa"] / 768, h["running"]))
    assert sv.max_model_len == h["full"] - 1 < 1_048_576  # the input is capped at the pool's tokens − 1


def test_start_refused_below_the_swa_floor():
    """validate_swa_pool_size: sliding_window 128 + page 256 ≥ the SWA pool's tokens refuses the start."""
    first = _serve(parallel={"ep": 8, "dp": 8})
    pre_load = first.budget_bytes / first.memory_fraction  # free memory before loading
    # a fraction leaving the c128 state and 3,000 full tokens: 3,000 → 2,816 full, 281 → 256 sliding tokens
    frac = (first.weights_bytes + 367_001_600 + 3_000 * 7_086.75) / pre_load
    sv = _serve(parallel={"ep": 8, "dp": 8}, serving={"memory_fraction": frac})
    assert 0 < sv.kv_available_bytes and sv.kv_pool_tokens == 2_816
    assert not sv.starts and "SWA pool" in sv.start_error and "sliding_window_size (128)" in sv.start_error


def test_bad_inputs_name_the_field():
    with pytest.raises(InputError, match="derived context_length") as e:
        _serve(parallel={"ep": 8, "dp": 8}, serving={"max_model_len": 2_000_000})
    assert e.value.field == "serving.max_model_len"
    with pytest.raises(InputError) as e:
        _serve(serving={"block_size": 64})
    assert e.value.field == "serving.block_size"
    with pytest.raises(InputError) as e:
        _serve(kv_dtype="int8")
    assert e.value.field == "kv_dtype"


def test_v4_flash_tp8_is_one_server_without_dp_attention():
    """TP8 without EP: one SGLang server of --tp-size 8, the attention split by heads (models/deepseek_v4.py
    n_local_heads = n_heads // attn_tp_size; the shared key head, the latents' projections and the compressors whole
    on every rank), no DP attention: max_running_requests keeps DeepSeek-V4's default 256. Its weights per GPU are
    below EP8 × DP8's, whose every rank holds the whole attention."""
    tp8 = _serve(parallel={"tp": 8})
    dp8 = _serve(parallel={"ep": 8, "dp": 8})
    assert tp8.starts and tp8.layout["attention_dp"] == 1
    assert tp8.max_concurrent_seqs == 256  # 4,096-token requests: the running cap binds, not the pool
    assert tp8.weights_bytes < dp8.weights_bytes
