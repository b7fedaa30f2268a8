"""SGLang's Gemma 3n / Gemma 4 KV pools (calculator/engines/sglang_gemma.py), checked by hand against its rules:
Gemma 4 a hybrid SWA pool (pool_configurator.py HybridSWAPoolConfigurator) over every layer id of layer_types, the
KV-shared ones included; Gemma 3n one DefaultPoolConfigurator pool over all layers."""
import pytest

from calculator import Workload, estimate
from calculator.core.errors import InputError
from calculator.engines import sglang_gemma
from calculator.model.hf_config import spec_from_hf_config
from calculator.model.presets import load_model

RATIO = 0.8  # swa_full_tokens_ratio

S, F = "sliding_attention", "full_attention"
TINY4 = {"model_type": "gemma4_text", "architectures": ["Gemma4ForCausalLM"], "num_hidden_layers": 6,
         "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 32, "global_head_dim": 64, "sliding_window": 16, "num_kv_shared_layers": 2,
         "hidden_size_per_layer_input": 0, "vocab_size": 1000, "layer_types": [S, S, F, S, S, F]}
TINY3N = {"model_type": "gemma3n_text", "architectures": ["Gemma3nForCausalLM"], "num_hidden_layers": 10,
          "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 32, "sliding_window": 16, "num_kv_shared_layers": 3, "hidden_size_per_layer_input": 8,
          "vocab_size": 1000, "vocab_size_per_layer_input": 1000, "laurel_rank": 4}


def serve(m, gpu="h100-sxm", **kw):
    serving = kw.pop("serving", {})
    w = Workload(mode="infer", engine="sglang", gpu=gpu, serving=serving, **kw)
    return estimate(m, w, with_fits=False).serving


def spec(cfg):
    return spec_from_hf_config(dict(cfg)).spec


def test_gemma_4_26b_a4b_hybrid_pool_by_hand():
    """5 full layers: 2 KV heads × (512 + 512) × 2 B = 4,096 B; 25 sliding: 8 × (256 + 256) × 2 B = 8,192 B."""
    m = load_model("gemma-4-26b-a4b").spec
    sv = serve(m, seq_len=8000, gen_tokens=192)
    full, swa = 5 * 4096, 25 * 8192
    assert sv.kv_bytes_per_token == full + swa
    tokens = int(sv.kv_available_bytes / (full + RATIO * swa))
    assert sv.kv_pool_tokens == tokens and sv.starts
    assert sv.kv_pool_bytes == tokens * full + int(tokens * RATIO) * swa
    assert sv.max_concurrent_seqs == pytest.approx(min(tokens / 8192, tokens * RATIO / 1024))


def test_gemma_4_tensor_parallel_splits_each_pools_heads():
    """TP 2: full layers keep max(1, 2 // 2) = 1 head, sliding layers 8 // 2 = 4 (get_num_kv_heads /
    get_swa_num_kv_heads)."""
    m = load_model("gemma-4-26b-a4b").spec
    c = sglang_gemma.cells(m, Workload(mode="infer", engine="sglang", parallel={"tp": 2}), range(30))
    assert (c.full_cell, c.swa_cell, c.full_layers, c.swa_layers) == (5 * 2048, 25 * 4096, 5, 25)


def test_tiny_gemma_4_counts_kv_shared_layers():
    """Layers 4 (sliding) and 5 (full) reuse K/V, yet get_hybrid_layer_ids lists them: 2 full × 2 heads × (64 + 64)
    × 2 B and 4 sliding × 2 × (32 + 32) × 2 B."""
    m = spec(TINY4)
    assert m.gemma_next.kv_modes[4:] == ("reuse", "reuse")
    c = sglang_gemma.cells(m, Workload(mode="infer", engine="sglang"), range(6))
    assert (c.full_cell, c.swa_cell, c.hybrid) == (2 * 512, 4 * 256, True)
    sv = serve(m, seq_len=1000, gen_tokens=24)
    tokens = int(sv.kv_available_bytes / (1024 + RATIO * 1024))
    assert sv.kv_pool_tokens == tokens
    assert sv.kv_pool_bytes == tokens * 1024 + int(tokens * RATIO) * 1024
    assert sv.max_concurrent_seqs == pytest.approx(min(tokens / 1024, tokens * RATIO / 16))
    fp8 = sglang_gemma.cells(m, Workload(mode="infer", engine="sglang", kv_dtype="fp8"), range(6))
    assert (fp8.full_cell, fp8.swa_cell) == (512, 512)


def test_tiny_gemma_3n_is_one_pool_over_every_layer():
    """Not a hybrid-SWA architecture: 10 layers (3 KV-shared, 8 sliding) × 2 heads × (32 + 32) × 2 B, at full
    length."""
    m = spec(TINY3N)
    assert m.gemma_next.kv_modes.count("reuse") == 3
    c = sglang_gemma.cells(m, Workload(mode="infer", engine="sglang"), range(10))
    assert (c.full_cell, c.swa_cell, c.hybrid) == (10 * 256, 0, False)
    sv = serve(m, seq_len=1000, gen_tokens=24)
    assert sv.kv_bytes_per_token == 2560
    assert sv.kv_pool_tokens == sv.kv_available_bytes // 2560
    assert sv.kv_pool_bytes == sv.kv_pool_tokens * 2560
    assert sv.max_concurrent_seqs == pytest.approx(sv.kv_pool_tokens / 1024)


def test_sliding_pool_too_small_to_admit_one_request():
    """_solve_pool_sizes: sliding_window − 1 + page ≥ ⌊full tokens × 0.8⌋ fails the start."""
    m = load_model("gemma-4-26b-a4b").spec  # window 1024: sliding_window_size 1023
    assert sglang_gemma.swa_start_error(m, 1280, RATIO, 1).startswith("SWA pool (1024 tokens) cannot hold")
    assert sglang_gemma.swa_start_error(m, 1282, RATIO, 1) == ""  # ⌊1282 × 0.8⌋ = 1025 > 1023 + 1


def test_chunk_capped_sliding_pool_is_refused():
    m = load_model("gemma-4-26b-a4b").spec
    with pytest.raises(InputError, match="SWAChunkCapPoolConfigurator") as err:
        serve(m, serving={"max_num_seqs": 8, "prefix_caching": False})
    assert err.value.field == "serving.max_num_seqs"
