"""Inference: KV cache for GQA, MLA and sliding windows, quantized weights."""
import pytest

from calculator import Workload, estimate
from calculator.memory import inference as inf
from calculator.model.presets import load_model


def kv(model_id, **kw):
    m = load_model(model_id).spec
    return estimate(m, Workload(mode="infer", **kw), with_fits=False).components["kv_cache"]


def test_gqa_kv_cache_llama_8b_at_32k_is_4_gib():
    # 2 (K,V) × 32 layers × 8 kv heads × 128 × 2 B = 131,072 B per token
    assert kv("llama-3.1-8b", seq_len=32768) == 32768 * 131072 == 4 * 2**30


def test_kv_cache_scales_with_batch_and_generated_tokens():
    assert kv("llama-3.1-8b", seq_len=1000, gen_tokens=24, micro_batch=4) == 4 * 1024 * 131072


def test_qwen3_uses_head_dim_not_hidden_over_heads():
    m = load_model("qwen3-8b").spec
    assert inf.kv_bytes_per_token_per_layer(m, m.kv_heads, "bf16") == 4096  # measured-facts table


def test_mla_caches_the_latent():
    m = load_model("deepseek-v3").spec
    assert inf.kv_bytes_per_token_per_layer(m, m.kv_heads, "bf16") == 1152  # (512 + 64) × 2 B
    assert kv("deepseek-v3", seq_len=8192) == 61 * 8192 * 1152


def test_sliding_window_layers_cap_the_cache():
    # Mistral-7B-v0.1: every layer slides over 4096 tokens; 2 × 8 kv heads × 128 × 2 B = 4096 B per token and layer
    assert kv("mistral-7b-v0.1", seq_len=32768) == 32 * 4096 * 4096
    # Gemma-2-9B: half the layers slide (window 4096), half are global
    m = load_model("gemma-2-9b").spec
    per = inf.kv_bytes_per_token_per_layer(m, m.kv_heads, "bf16")
    assert kv("gemma-2-9b", seq_len=16384) == 21 * 16384 * per + 21 * 4096 * per


def test_kv_dtype_halves_the_cache():
    assert kv("llama-3.1-8b", seq_len=4096, kv_dtype="fp8") * 2 == kv("llama-3.1-8b", seq_len=4096)


def test_tensor_parallel_splits_kv_heads_until_one_per_rank():
    full = kv("llama-3.1-8b", seq_len=4096)
    assert kv("llama-3.1-8b", seq_len=4096, parallel={"tp": 8}) == full // 8
    # tp = 16 > 8 kv heads: each rank keeps one replicated head (needs 32 heads % 16 == 0)
    assert kv("llama-3.1-8b", seq_len=4096, parallel={"tp": 16}) == full // 8


def test_int4_weights_carry_group_scales():
    n = 7_000_000_000
    assert inf.quantized_weight_bytes(n, "int4", 128) == n // 2 + round(n / 128 * 2.5)
    assert inf.quantized_weight_bytes(n, "nf4", 128) == n // 2 + n // 64 * 4
    assert inf.quantized_weight_bytes(n, "fp8", 128) == n


def test_quantized_model_keeps_embeddings_in_bf16():
    m = load_model("llama-3.1-8b").spec
    e = estimate(m, Workload(mode="infer", seq_len=1, weight_dtype="int4"), with_fits=False)
    embeddings = 2 * (2 * 128256 * 4096 + 4096 * (1 + 2 * 32))  # embed + head + norms, 2 B each (bf16)
    linear = 8030261248 - 2 * 128256 * 4096 - 4096 * 65
    assert e.components["weights"] == embeddings + inf.quantized_weight_bytes(linear, "int4", 128)


def test_prefill_working_set_grows_with_prompt():
    a = estimate(load_model("llama-3.1-8b").spec, Workload(mode="infer", seq_len=1024), with_fits=False)
    b = estimate(load_model("llama-3.1-8b").spec, Workload(mode="infer", seq_len=8192), with_fits=False)
    assert b.components["activations"] > 7 * a.components["activations"]


def test_gptq_int4_adds_g_idx_and_the_exllama_buffer():
    m = load_model("qwen2.5-7b").spec
    awq = estimate(m, Workload(mode="infer", seq_len=128, weight_dtype="int4"), with_fits=False)
    gptq = estimate(m, Workload(mode="infer", seq_len=128, weight_dtype="int4", quant_method="gptq"), with_fits=False)
    buffer = next(t for t in gptq.terms if t.key == "transient.gptq_buffer")
    assert buffer.bytes == 2 * 18944 * 3584  # the largest linear (gate/up/down) in fp16
    in_rows = 28 * (3 * 3584 + 3584 + 2 * 3584 + 18944)  # q, k, v, o, gate, up, down input rows per layer
    assert gptq.components["weights"] - awq.components["weights"] == 4 * in_rows


def test_gptq_int8_counts_scale_and_zero_point_per_group():
    n = 1_280_000
    assert inf.quantized_weight_bytes(n, "int8", 128, "gptq") == n + 10_000 * 3
    assert inf.quantized_weight_bytes(n, "int8", 128, "awq") == n + 10_000 * 2


def test_llm_int8_weights_keep_a_scale_per_output_row_and_the_matmul_its_int32_and_fp16_outputs():
    m = load_model("llama-3.1-8b").spec
    w = Workload(mode="infer", micro_batch=4, seq_len=4096, gen_tokens=8, weight_dtype="int8",
                 quant_method="llm-int8", gpu="h200")
    e = estimate(m, w, with_fits=False)
    rows = 32 * (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096)
    # H200 after loading with load_in_8bit: 9,086,706,688 B allocated
    assert e.components["weights"] == 6_979_321_856 + 4 * rows + 2 * 1_050_939_392 == 9_086_705_664
    T, h, f = 16384, 4096, 14336
    assert inf.llm_int8_mlp_extra(T, 2, h, f, fp16_model=False) == 4 * T * f + T * h + 4 * T
    assert inf.llm_int8_mlp_extra(T, 2, h, f, fp16_model=True) == 2 * T * f + T * h + 4 * T
    plain = estimate(m, w.model_copy(update={"quant_method": "awq"}), with_fits=False)
    assert e.components["activations"] - plain.components["activations"] == 4 * T * f + T * h + 4 * T
    assert abs(e.peak_allocated_bytes - 14_233_080_320) / 14_233_080_320 < 0.001  # the H200 run


def test_llm_int8_needs_int8_weights():
    with pytest.raises(ValueError, match="weight_dtype"):
        Workload(mode="infer", weight_dtype="int4", quant_method="llm-int8")


HYBRIDS = ["qwen3.5-35b-a3b", "qwen3-next-80b-a3b", "nemotron-h-56b", "kimi-linear-48b-a3b", "deepseek-v3.2",
           "glm-5", "deepseek-v4-flash", "olmo-hybrid-7b"]


@pytest.mark.parametrize("model_id", HYBRIDS)
def test_per_kind_stage_sums_equal_the_layer_by_layer_sums(model_id):
    """extra_kv_bytes and recurrent_state_bytes over a contiguous stage count each registry kind's layers once
    (architectures.mixer_layers: layers, and those the window caps) and multiply; over any other iterable of layers
    they go layer by layer. Both give the same bytes on every stage split of the 2026 hybrids (DSA indexer keys,
    DeepSeek-V4's compressed caches, Gated DeltaNet / Mamba / KDA states)."""
    m = load_model(model_id).spec
    n = m.num_hidden_layers
    for pp in (1, 2, 3, 4, 8):
        bounds = [n * s // pp for s in range(pp + 1)]
        for a, b in zip(bounds, bounds[1:]):
            for batch, tokens in ((1, 4096), (3, 131_072 + 5)):
                assert inf.extra_kv_bytes(m, range(a, b), batch, tokens, "bf16") == inf.extra_kv_bytes(
                    m, list(range(a, b)), batch, tokens, "bf16")
                assert inf.recurrent_state_bytes(m, range(a, b), batch, 2) == inf.recurrent_state_bytes(
                    m, list(range(a, b)), batch, 2)
    whole = range(n)
    assert inf.extra_kv_bytes(m, whole, 1, 4096, "bf16") + inf.recurrent_state_bytes(m, whole, 1, 2) > 0
