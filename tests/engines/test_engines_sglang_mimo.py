"""SGLang's MiMo-V2-Flash KV pools (calculator/engines/sglang_mimo.py), checked by hand against its rules: a hybrid
SWA pool (pool_configurator.py HybridSWAPoolConfigurator) whose full layers keep num_key_value_heads and sliding
layers swa_num_key_value_heads, K rows head_dim and V rows v_head_dim wide; max_running_requests by
kv_cache_configurator.py resolve_max_num_reqs."""
import pytest

from calculator import Workload, estimate
from calculator.core.errors import InputError
from calculator.engines import sglang_mimo
from calculator.model.hf_config import spec_from_hf_config
from calculator.model.presets import load_model

RATIO = 0.8  # swa_full_tokens_ratio
# layers 0 and 5 full (hybrid_layer_pattern 0), 1–4 sliding; K 48 and V 32 wide; 2 full and 4 sliding KV heads
TINY = {"model_type": "mimo_v2_flash", "architectures": ["MiMoV2FlashForCausalLM"], "num_hidden_layers": 6,
        "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 48, "v_head_dim": 32, "swa_num_key_value_heads": 4, "sliding_window_size": 16,
        "hybrid_layer_pattern": [0, 1, 1, 1, 1, 0], "n_routed_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "vocab_size": 1000, "max_position_embeddings": 4096}


def serve(m, gpu="h100-sxm", **kw):
    serving = kw.pop("serving", {})
    w = Workload(mode="infer", engine="sglang", gpu=gpu, serving=serving, **kw)
    return estimate(m, w, with_fits=False).serving


def tiny():
    return spec_from_hf_config(dict(TINY)).spec


def test_tiny_mimo_pools_by_hand():
    """Full: 2 heads × (48 + 32) × 2 B = 320 B a layer, 2 layers = 640 B; sliding: 4 × 80 × 2 = 640 B a layer, 4
    layers = 2,560 B. Tokens = ⌊available / (640 + 0.8 × 2,560)⌋ = ⌊available / 2,688⌋, sliding tokens ⌊× 0.8⌋;
    max_running_requests = min(clamp(⌊tokens / 4,096 × 512⌋, 2,048, 4,096), tokens // 2)."""
    m = tiny()
    c = sglang_mimo.cells(m, Workload(mode="infer", engine="sglang"), range(6))
    assert (c.full_token, c.swa_token, c.full_layers, c.swa_layers, c.full_cell, c.swa_cell) == (320, 640, 2, 4,
                                                                                                   640, 2560)
    sv = serve(m, seq_len=1000, gen_tokens=24)
    assert sv.kv_bytes_per_token == 640 + 2560 and sv.starts
    tokens = int(sv.kv_available_bytes / 2688)
    swa = int(tokens * RATIO)
    assert sv.kv_pool_tokens == tokens and sv.kv_pool_blocks == tokens
    assert sv.kv_pool_bytes == tokens * 640 + swa * 2560
    running = min(max(min(int(tokens / 4096 * 512), 4096), 2048), tokens // 2)
    assert running == 4096  # a tiny model on an H100: the pool is millions of tokens
    hold = min(1024, 16 + 128 + 2)  # window 16 + eviction interval 128 + 2 pages
    assert sv.max_concurrent_seqs == pytest.approx(min(tokens / 1024, swa / hold, running))
    assert any(f"max_running_requests {running:,}" in n for n in sv.notes)


def test_tiny_mimo_running_requests_follow_max_num_seqs():
    """--max-running-requests with the radix cache on: min(8, tokens // 2) requests at once."""
    sv = serve(tiny(), seq_len=1000, gen_tokens=24, serving={"max_num_seqs": 8})
    assert sv.max_concurrent_seqs == 8


def test_tensor_parallel_splits_each_pools_heads():
    """TP 2: full max(1, 2 // 2) = 1 head, sliding 4 // 2 = 2; TP 4: one head each (get_num_kv_heads /
    get_swa_num_kv_heads replicate below one)."""
    m = tiny()
    tp2 = sglang_mimo.cells(m, Workload(mode="infer", engine="sglang", parallel={"tp": 2}), range(6))
    assert (tp2.full_token, tp2.swa_token) == (160, 320)
    tp4 = sglang_mimo.cells(m, Workload(mode="infer", engine="sglang", parallel={"tp": 4}), range(6))
    assert (tp4.full_token, tp4.swa_token) == (160, 160)
    fp8 = sglang_mimo.cells(m, Workload(mode="infer", engine="sglang", kv_dtype="fp8"), range(6))
    assert (fp8.full_token, fp8.swa_token) == (160, 320)


def test_sliding_pool_too_small_to_admit_one_request():
    """validate_swa_pool_size: sliding_window_size (16) + page (1) ≥ ⌊full tokens × 0.8⌋ fails the start."""
    m = tiny()
    c = sglang_mimo.cells(m, Workload(mode="infer", engine="sglang"), range(6))
    s = Workload(mode="infer", engine="sglang").serving
    full, swa, error, _ = sglang_mimo.pool_tokens(c, 21 * 2688, s, 1, 16, 1, 8192, 1, RATIO)
    assert (full, swa) == (21, 16) and error.startswith("SWA pool (16 tokens) cannot hold")
    assert sglang_mimo.pool_tokens(c, 23 * 2688, s, 1, 16, 1, 8192, 1, RATIO)[:3] == (23, 18, "")  # 18 > 16 + 1


def test_mimo_v2_flash_tp8_on_h200():
    """TP 8: one KV head per GPU in both pools, 1 × (192 + 128) × 2 = 640 B a layer; 9 full layers (5,760 B) and
    39 sliding (24,960 B): tokens = ⌊available / (5,760 + 0.8 × 24,960)⌋ = ⌊available / 25,728⌋."""
    m = load_model("mimo-v2-flash").spec
    sv = serve(m, gpu="h200", parallel={"tp": 8})
    assert sv.kv_bytes_per_token == 9 * 640 + 39 * 640 and sv.starts
    tokens = int(sv.kv_available_bytes / 25728)
    assert sv.kv_pool_tokens == tokens
    assert sv.kv_pool_bytes == tokens * 5760 + int(tokens * RATIO) * 24960


def test_radix_cache_off_with_max_running_requests_caps_the_sliding_pool():
    """SWARequestCapPoolConfigurator: 8 requests × (16 + 128 + 2) + 2 chunks in flight × 8,192 (H100's
    chunked_prefill_size) + 1 = 17,553 sliding tokens; the full pool gets ⌊(available − 17,553 × 2,560) / 640⌋."""
    m = tiny()
    sv = serve(m, seq_len=1000, gen_tokens=24, serving={"max_num_seqs": 8, "prefix_caching": False})
    swa = 8 * 146 + 2 * 8192 + 1
    assert swa == 17_553 and sv.starts
    full = (sv.kv_available_bytes - swa * 2560) // 640
    assert sv.kv_pool_tokens == full
    assert sv.kv_pool_bytes == full * 640 + swa * 2560
    assert sv.max_concurrent_seqs == 8
    assert any("SWARequestCapPoolConfigurator: 17,553 sliding tokens" in n for n in sv.notes)
    c = sglang_mimo.cells(m, Workload(mode="infer", engine="sglang"), range(6))
    s = Workload(mode="infer", engine="sglang", serving={"max_num_seqs": 8, "prefix_caching": False}).serving
    assert sglang_mimo.request_cap(s, 1, 16, 1, 8192, 2) == 8 * 146 + 8192 + 1  # PP: no overlap schedule, one chunk
    full, swa, error, _ = sglang_mimo.pool_tokens(c, 17_553 * 2560 + 639, s, 1, 16, 1, 8192, 1, RATIO)
    assert (full, swa) == (0, 17_553) and error.startswith("SWA pool cap (17553 tokens")


def test_what_stays_refused():
    m = tiny()
    twelve = spec_from_hf_config({**TINY, "num_hidden_layers": 12, "hybrid_layer_pattern": None}).spec
    with pytest.raises(InputError, match="0 full and 3 sliding layers"):
        sglang_mimo.cells(twelve, Workload(mode="infer", engine="sglang"), range(6, 9))
