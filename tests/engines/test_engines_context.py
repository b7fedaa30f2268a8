"""The longest context each serving engine accepts from a config (calculator/engines/common.py): vLLM 0.33's
_get_and_verify_max_len and SGLang 0.5's _derive_context_length. A longer max_model_len is refused as input, naming
the field, before any memory is priced; without one, the engine's default is that length."""
from __future__ import annotations

import pytest

from calculator import InputError, Workload, estimate
from calculator.engines.common import sglang_derived_context, vllm_derived_max_len
from calculator.model.hf_config import spec_from_hf_config
from calculator.model.presets import load_model

SMALL_LLAMA = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 4,
               "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000,
               "max_position_embeddings": 4096}


def _spec(**fields):
    return spec_from_hf_config({**SMALL_LLAMA, **fields}).spec


def _serve(m, engine: str, max_model_len: int | None = None):
    serving = {"max_model_len": max_model_len} if max_model_len else {}
    return estimate(m, Workload(mode="infer", engine=engine, gpu="h200", seq_len=1024, serving=serving)).serving


@pytest.mark.parametrize("rope, vllm, sglang", [
    (None, 4096, 4096),
    # linear / dynamic: the factor scales the length in both engines
    ({"type": "linear", "factor": 4.0}, 16384, 16384),
    ({"rope_type": "dynamic", "factor": 2.0}, 8192, 8192),
    # YaRN: vLLM takes max_position_embeddings as already scaled; SGLang too when the original length is named
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}, 4096, 4096),
    ({"rope_type": "yarn", "factor": 4.0}, 4096, 16384),
    # Llama 3's scaling is counted in max_position_embeddings by both
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 512, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0}, 4096, 4096),
])
def test_derived_length_by_rope_scaling(rope, vllm, sglang):
    m = _spec(**({"rope_scaling": rope} if rope else {}))
    assert (vllm_derived_max_len(m), sglang_derived_context(m)) == (vllm, sglang)
    # without --max-model-len the engine serves that length
    assert _serve(m, "vllm").configured_max_model_len == vllm
    assert _serve(m, "sglang").configured_max_model_len == sglang


def test_model_max_length_takes_over():
    """Command-R style: model_max_length above max_position_embeddings is the length both accept."""
    m = _spec(model_max_length=16384)
    assert vllm_derived_max_len(m) == sglang_derived_context(m) == 16384
    assert _serve(m, "vllm", 16384).configured_max_model_len == 16384


def test_nested_rope_parameters():
    """Per-layer-type RoPE (transformers 5 nested rope_parameters): vLLM scales by a linear set's factor except for
    Gemma 3, whose max_position_embeddings is scaled already; SGLang sees no top-level factor."""
    nested = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
              "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
    m = _spec(rope_parameters=nested)
    assert m.rope_nested and (vllm_derived_max_len(m), sglang_derived_context(m)) == (32768, 4096)
    gemma = load_model("gemma-3-1b").spec.model_copy(update={"rope_sets": (("linear", 8.0, None),)})
    assert vllm_derived_max_len(gemma) == gemma.max_position_embeddings


def test_gemma3_multimodal_serves_its_class_default_length():
    """The Hub's Gemma-3 4B/12B/27B configs leave max_position_embeddings to Gemma3TextConfig (131,072 in the real
    class) and write a flat linear ×8 rope_scaling, which transformers 5 (SGLang pins 5.19) nests per layer type:
    neither engine multiplies it, so both serve 131,072 tokens by default; vLLM on one H100 cannot hold a request
    of that length for the 27B (it names the longest that fits), SGLang starts with a pool below it."""
    from transformers import Gemma3TextConfig
    for name in ("gemma-3-4b", "gemma-3-12b", "gemma-3-27b"):
        m = load_model(name).spec
        assert m.max_position_embeddings == Gemma3TextConfig().max_position_embeddings == 131_072
        assert m.rope_sets == (("linear", 8.0, None),) and not m.rope_nested
        assert vllm_derived_max_len(m) == sglang_derived_context(m) == 131_072
    w = dict(mode="infer", gpu="h100-sxm")
    big = load_model("gemma-3-27b").spec
    vllm = estimate(big, Workload(engine="vllm", **w)).serving
    assert vllm.configured_max_model_len == 131_072 and not vllm.starts and 100_000 < vllm.max_model_len < 131_072
    assert "estimated maximum model length is" in vllm.start_error
    sglang = estimate(big, Workload(engine="sglang", **w)).serving
    assert sglang.configured_max_model_len == 131_072 and sglang.starts


@pytest.mark.parametrize("engine, flag, env", [("vllm", "--max-model-len", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
                                               ("sglang", "--context-length",
                                                "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")])
def test_a_longer_max_model_len_is_refused_naming_the_field(engine, flag, env):
    m = load_model("llama-3.1-8b").spec  # llama3 RoPE: 131,072 in both
    assert _serve(m, engine, 131_072).configured_max_model_len == 131_072
    with pytest.raises(InputError) as refused:
        _serve(m, engine, 262_144)
    err = refused.value
    assert err.field == "serving.max_model_len"
    assert flag in err.message and env in err.message and "131,072 or less" in err.message


def test_deepseek_v4_past_its_million_tokens_is_refused_by_vllm():
    """Fuzz seed 37 #796: 13.3M tokens on DeepSeek-V4-Pro, which vLLM refuses (YaRN: 1,048,576 already scaled)."""
    m = load_model("deepseek-v4-pro").spec
    assert vllm_derived_max_len(m) == 1_048_576
    with pytest.raises(InputError, match="serving.max_model_len"):
        estimate(m, Workload(mode="infer", engine="vllm", gpu="h200", parallel={"tp": 8},
                             serving={"max_model_len": 13_308_445}))


def test_rope_caches_span_the_scaled_length_one_per_rotary_embedding():
    """cos/sin caches of rows × rotary_dim bf16 values: linear scaling spans max_position × factor rows
    (linear_scaling_rope.py), dynamic NTK too in SGLang only; Gemma 3 keeps a cache for its sliding layers and one
    for its full layers, the latter linear ×8 in vLLM (gemma3.py: each layer type's rope_parameters) and default in
    SGLang (gemma3_causal.py)."""
    from calculator.engines.common import rope_cache_bytes
    llama = load_model("llama-3.1-8b").spec  # llama3 scaling: max_position_embeddings rows
    assert rope_cache_bytes(llama, "vllm") == rope_cache_bytes(llama, "sglang") == 131_072 * 128 * 2
    linear = _spec(rope_scaling={"type": "linear", "factor": 4.0})  # head 64
    assert rope_cache_bytes(linear, "vllm") == rope_cache_bytes(linear, "sglang") == 4 * 4096 * 64 * 2
    dynamic = _spec(rope_scaling={"rope_type": "dynamic", "factor": 2.0})  # vLLM 0.33 keeps max_position rows
    assert (rope_cache_bytes(dynamic, "vllm"), rope_cache_bytes(dynamic, "sglang")) == (4096 * 128, 2 * 4096 * 128)
    # YaRN spans original × factor: Qwen2.5's long-context recipe (factor 4 over its 32,768) is 4× max_position
    qwen = _spec(max_position_embeddings=32768, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                               "original_max_position_embeddings": 32768})
    assert rope_cache_bytes(qwen, "vllm") == rope_cache_bytes(qwen, "sglang") == 131_072 * 64 * 2
    ds = load_model("deepseek-v3").spec  # 4,096 × 40: its max_position_embeddings, 64 rotary channels (MLA)
    assert rope_cache_bytes(ds, "vllm") == 163_840 * 64 * 2
    gemma = load_model("gemma-3-27b").spec  # head 128
    assert rope_cache_bytes(gemma, "vllm") == (131_072 + 8 * 131_072) * 128 * 2  # 288 MiB
    assert rope_cache_bytes(gemma, "sglang") == 2 * 131_072 * 128 * 2
    g4 = load_model("gemma-4-26b-a4b").spec  # sliding layers' head 256, global layers' 512 (proportional, whole head)
    assert rope_cache_bytes(g4, "vllm") == rope_cache_bytes(g4, "sglang") == 262_144 * (256 + 512) * 2
    small = load_model("gemma-3-1b").spec  # nested, both default: two caches of its 32,768 positions, head 256
    assert rope_cache_bytes(small, "vllm") == rope_cache_bytes(small, "sglang") == 2 * 32_768 * 256 * 2


def test_requests_longer_than_the_served_length():
    """vLLM rejects a prompt past max_model_len and clamps a longer output to what is left (get_max_tokens), so the
    sequence it holds is max_model_len long; SGLang rejects a prompt of the whole context and a prompt + output past
    it (_validate_one_request)."""
    m = _spec()  # 4,096 positions
    def serve(engine, seq, gen):
        return estimate(m, Workload(mode="infer", engine=engine, gpu="h200", seq_len=seq, gen_tokens=gen)).serving
    with pytest.raises(InputError, match="vLLM rejects a prompt of 4,097 tokens") as refused:
        serve("vllm", 4097, 0)
    assert refused.value.field == "seq_len" and "the most the model config allows" in refused.value.message
    clamped, exact = serve("vllm", 4000, 500), serve("vllm", 4000, 96)
    assert clamped.tokens_per_seq == exact.tokens_per_seq == 4096
    assert clamped.max_concurrent_seqs == exact.max_concurrent_seqs
    assert serve("sglang", 4095, 1).starts
    for seq, gen in ((4096, 0), (4000, 97)):
        with pytest.raises(InputError, match="SGLang rejects a request"):
            serve("sglang", seq, gen)
