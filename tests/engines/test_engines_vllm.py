"""vLLM's start-up arithmetic (calculator/engines/vllm.py), checked by hand against vLLM's own rules."""
import json
import math

import pytest

from calculator import InputError, Workload, estimate
from calculator.engines import vllm
from calculator.model.presets import get_gpu, load_model

GiB = 2**30
H100_VISIBLE = int(79.18 * GiB)  # presets/gpus.json pytorch_capacity_bytes (vLLM logs: 79.18 GiB)


def serve(model_id, gpu="h100-sxm", **kw):
    serving = kw.pop("serving", {})
    w = Workload(mode="infer", engine="vllm", gpu=gpu, serving=serving, **kw)
    return estimate(load_model(model_id).spec, w, with_fits=False)


def test_llama_8b_pool_by_hand_on_vllm_0_11():
    # llm-d's run: H100, gpu_memory_utilization 0.9, block 128, max_model_len 16000
    sv = serve("llama-3.1-8b", seq_len=16000,
               serving={"version": "0.11", "block_size": 128, "max_model_len": 16000}).serving
    requested = math.ceil(H100_VISIBLE * 0.9)
    weights = 8_030_261_248 * 2 + 131072 * 128 * 2  # bf16 params + RoPE cos/sin cache (max_position × head_dim)
    hidden = 8192 * 4096 * 2  # the profile run's hidden states (max_num_batched_tokens × h, bf16)
    sampler = int(1024 * 128256 * 38.4)  # 1,024 dummy requests × vocab × the measured bytes per logit
    non_torch = int(0.13 * GiB)
    assert (sv.budget_bytes, sv.weights_bytes) == (requested, weights)
    assert sv.activation_peak_bytes == hidden + sampler
    assert sv.kv_pool_bytes == requested - weights - (hidden + sampler) - non_torch  # no CUDA graphs in 0.11
    block_bytes = 128 * 4096 * 32  # tokens × (2 × 8 heads × 128 × 2 B per layer) × layers
    assert sv.kv_pool_blocks == sv.kv_pool_bytes // block_bytes
    assert sv.kv_pool_tokens == int(sv.kv_pool_blocks / 125 * 16000)  # ⌈16000 / 128⌉ blocks per request
    assert abs(sv.kv_pool_bytes / GiB - 51.38) < 0.01  # llm-d: "Available KV cache memory: 51.38 GiB"


def test_default_is_vllm_serve_on_the_device():
    sv = serve("llama-3.1-8b", seq_len=16000).serving
    assert (sv.version, sv.memory_fraction, sv.block_size) == ("0.33", 0.9, 16)
    assert (sv.max_num_batched_tokens, sv.max_num_seqs) == (8192, 1024)  # H100: >= 70 GiB, not an A100
    assert sv.configured_max_model_len == 131072 and sv.starts  # the model's max_position_embeddings
    assert sv.cuda_graphs_in_budget and sv.cuda_graph_bytes > 0
    # 0.33 takes the CUDA-graph estimate out of the pool: same inputs, smaller pool than without graphs
    eager = serve("llama-3.1-8b", seq_len=16000, serving={"cuda_graphs": False}).serving
    assert eager.kv_pool_bytes - sv.kv_pool_bytes == sv.cuda_graph_bytes
    # concurrency at --seq + --gen: blocks / ⌈16000 / 16⌉
    assert sv.max_concurrent_seqs == pytest.approx(sv.kv_pool_blocks / 1000)


def test_batch_defaults_follow_the_device():
    rel = vllm.RELEASES["0.33"]
    assert vllm.batch_defaults(int(79.3 * GiB), "NVIDIA A100 80GB", rel) == (2048, 256)
    assert vllm.batch_defaults(150_109_880_320, "H200", rel) == (8192, 1024)
    assert vllm.batch_defaults(179 * GiB, "B200", rel) == (16384, 1024)
    assert vllm.batch_defaults(179 * GiB, "B200", vllm.RELEASES["0.11"]) == (8192, 1024)


def test_capture_sizes_are_vllms_list():
    sizes = vllm.capture_sizes(1024, 8192)
    assert sizes[:5] == [1, 2, 4, 8, 16] and sizes[-1] == 512 and len(sizes) == 51
    assert vllm.capture_sizes(128, 8192)[-1] == 256  # min(2 × max_num_seqs, 512)


def test_max_model_len_check_refuses_what_does_not_fit():
    # Qwen3-32B on one H100: 4.45 GiB of KV; 32,000 tokens need 64 × 2 × 8 × 128 × 2 B = 262,144 B each (7.8 GiB)
    ok = serve("qwen3-32b", seq_len=16000, serving={"version": "0.11", "block_size": 128,
                                                     "max_model_len": 16000}).serving
    bad = serve("qwen3-32b", seq_len=16000, serving={"version": "0.11", "block_size": 128,
                                                      "max_model_len": 32000}).serving
    assert ok.starts and not bad.starts
    assert bad.max_model_len == ok.max_model_len < 32000
    assert bad.start_error.startswith("To serve at least one request with the model's max seq len (32000)")
    # the largest length that starts fits the pool less the null block, and one block more does not
    block = 128 * 262144
    usable = bad.kv_pool_bytes - block
    assert math.ceil(bad.max_model_len / 128) * block <= usable < math.ceil((bad.max_model_len + 128) / 128) * block


def test_weights_over_the_budget_leave_no_cache():
    sv = serve("llama-3.3-70b", weight_dtype="fp8", seq_len=16000,
               serving={"version": "0.11", "block_size": 128, "max_model_len": 16000}).serving
    assert not sv.starts and sv.kv_pool_bytes == 0
    assert sv.start_error.startswith("No available memory for the cache blocks")
    assert sv.kv_available_bytes / GiB == pytest.approx(-1.44, abs=0.1)  # llm-d: -1.44 GiB


def test_sliding_window_layers_use_the_hybrid_allocator():
    m = load_model("gemma-3-27b").spec  # 52 sliding (window 1024) + 10 full layers
    g = vllm.kv_groups(m, range(62), 4096, 16)
    assert (g.group_size, g.full_groups, g.sliding_groups) == (10, 1, 6)  # 52 sliding padded to 60
    # a 10,000-token request: ⌈10000/16⌉ full blocks + 6 × (⌈min(1023 + 8192, 10000)/16⌉ + 1) sliding ones
    assert g.blocks_per_request(10000, 16, 8192) == 625 + 6 * (576 + 1)
    assert g.bytes_per_block == 16 * 4096 * 10


def test_sliding_layers_reserve_the_tokens_in_flight_by_release():
    """vLLM 0.33 (v1/kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request, config/vllm.py
    max_in_flight_tokens): a sliding group holds ⌈min(window − 1 + (pp + 1) × max_num_batched_tokens, len) / block⌉
    + 1 blocks per request (async scheduling and the V2 model runner on by default); 0.11 held window − 1 + one
    batch. Gemma-3-27B at 100,000 tokens, 8,192 batched tokens, block 16: 0.33 → 6 × (⌈(1023 + 16384)/16⌉ + 1)."""
    full = -(-100_000 // 16)
    new = serve("gemma-3-27b", seq_len=100_000, serving={"version": "0.33", "max_model_len": 100_000,
                                                         "max_num_batched_tokens": 8192})
    old = serve("gemma-3-27b", seq_len=100_000, serving={"version": "0.11", "max_model_len": 100_000,
                                                         "max_num_batched_tokens": 8192})
    g = vllm.kv_groups(load_model("gemma-3-27b").spec, range(62), 1, 16)
    assert vllm.vllm_kv.max_in_flight_tokens(8192, 1) == 16384
    assert vllm.vllm_kv.max_in_flight_tokens(8192, 3) == 32768
    assert g.blocks_per_request(100_000, 16, 16384) == full + 6 * (-(-(1023 + 16384) // 16) + 1)
    per_req_new = full + 6 * (-(-(1023 + 16384) // 16) + 1)
    per_req_old = full + 6 * (-(-(1023 + 8192) // 16) + 1)
    # "GPU KV cache size": concurrency at max_model_len × max_model_len (kv_cache_utils.get_kv_cache_capacity)
    assert new.serving.kv_pool_tokens == int(new.serving.kv_pool_blocks / per_req_new * 100_000)
    assert old.serving.kv_pool_tokens == int(old.serving.kv_pool_blocks / per_req_old * 100_000)


def test_mla_caches_the_latent_in_64_token_blocks_on_every_tp_rank():
    sv = serve("deepseek-v3", gpu="h200", weight_dtype="fp8", seq_len=8000, parallel={"tp": 8}).serving
    assert sv.block_size == 64
    assert sv.kv_bytes_per_token == 61 * (512 + 64) * 2  # latent replicated, not split by TP


def test_fp8_kv_halves_each_token():
    bf16 = serve("llama-3.1-8b", seq_len=4096).serving
    fp8 = serve("llama-3.1-8b", seq_len=4096, kv_dtype="fp8").serving
    assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
    assert fp8.kv_pool_blocks == fp8.kv_pool_bytes // (16 * fp8.kv_bytes_per_token)


def test_tensor_parallel_splits_heads_and_pipeline_keeps_fewest_blocks():
    tp2 = serve("llama-3.1-8b", seq_len=4096, parallel={"tp": 2}).serving
    assert tp2.kv_bytes_per_token == 131072 // 2 and tp2.non_torch_bytes == int(0.55 * GiB)
    est = serve("llama-3.1-8b", seq_len=4096, parallel={"pp": 2})
    assert len(est.stages) == 2
    assert est.serving.kv_bytes_per_token == 131072 // 2  # 16 layers per stage


def test_engine_needs_a_gpu_and_an_inference_mode():
    with pytest.raises(InputError, match="gpu"):
        estimate(load_model("llama-3.1-8b").spec, Workload(mode="infer", engine="vllm"))
    with pytest.raises(ValueError, match="mode 'infer'"):
        Workload(mode="train", engine="vllm")
    with pytest.raises(InputError, match="attention_dp"):
        serve("llama-3.1-8b", parallel={"tp": 2}, serving={"attention_dp": 2})
    with pytest.raises(InputError, match="not modelled"):
        serve("llama-3.1-8b", serving={"version": "0.5"})


def test_fit_cards_say_whether_the_engine_starts_and_holds_the_batch():
    w = Workload(mode="infer", engine="vllm", gpu="h100-sxm", seq_len=30000, micro_batch=4,
                 serving={"max_model_len": 30000})
    fits = {f.gpu: f for f in estimate(load_model("llama-3.1-8b").spec, w).fits}
    assert fits["h100-sxm"].verdict == "fits"
    assert fits["v100-16gb"].verdict == "does not fit"  # 16 GB of weights in a 0.9 × 15.3 GiB budget
    assert fits["l4"].verdict == "tight"  # starts (one 30k sequence fits), but not 4 at once
    # without a max_model_len the model's 131,072 tokens must fit: on an L4 vLLM refuses to start
    w = w.model_copy(update={"serving": w.serving.model_copy(update={"max_model_len": None})})
    assert {f.gpu: f for f in estimate(load_model("llama-3.1-8b").spec, w).fits}["l4"].verdict == "does not fit"


def test_cli_json_carries_the_serving_figures(capsys):
    from calculator.cli.main import main
    assert main(["estimate", "--model", "llama-3.1-8b", "--mode", "infer", "--engine", "vllm", "--gpu",
                 "h100-sxm", "--seq", "16000", "--json"]) == 0
    sv = json.loads(capsys.readouterr().out)["serving"]
    for key in ("kv_pool_bytes", "kv_pool_tokens", "kv_pool_blocks", "max_concurrent_seqs", "max_model_len"):
        assert key in sv
    assert sv["memory_fraction"] == 0.9 and sv["max_num_batched_tokens"] == 8192 and sv["cuda_graph_bytes"] > 0
    assert sv["max_concurrent_seqs"] == pytest.approx(sv["kv_pool_blocks"] / 1000)
    assert main(["estimate", "--model", "llama-3.1-8b", "--mode", "infer", "--engine", "vllm", "--gpu", "h100-sxm",
                 "--gpu-memory-utilization", "1.5"]) == 2
    assert "memory_fraction" in capsys.readouterr().err


@pytest.mark.parametrize("model_id", ["llama-3.1-70b", "gemma-3-27b"])
def test_a_pipeline_budgets_every_stage_as_if_alone(model_id):
    """engines.run budgets the equal middle stages of a uniform model once: each stage's figures are still
    vllm.budget on that stage alone (and on per-layer models, whose stages differ, each stage by its own layers)."""
    from calculator.core.workload import Parallelism
    from calculator.engines import engine_weight_bytes, run, stage_terms
    from calculator.memory.parallel import stage_shards
    m = load_model(model_id).spec
    w = Workload(mode="infer", engine="vllm", seq_len=8192, gpu="h100-sxm", parallel=Parallelism(tp=2, pp=4))
    gpu = get_gpu("h100-sxm")
    shards = stage_shards(m, w.parallel)
    stages, _ = run(m, w, shards, gpu)
    for st, sh in zip(stages, shards):
        alone = vllm.budget(m, w, sh, gpu, engine_weight_bytes(m, w, sh, 1))
        context = gpu.cuda_context_bytes
        assert st.terms == stage_terms(alone, context), (model_id, sh.stage)
