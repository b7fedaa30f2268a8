"""Attention-free state-space models (Mamba-2, Mamba-1, Falcon-Mamba) in the serving engines, and the hybrid rules
they share, checked by hand against the engines' source:

    SGLang 0.5.23 (the PyPI wheel, tag v0.5.23, sha256 00b3cd5b...; pure SSM serving came with sgl-project/sglang
    PR #34556): configs/model_config.py PURE_SSM_ARCHITECTURES, configs/mamba2.py / configs/mamba.py
    (full_attention_layer_ids = [], mamba2_cache_params), configs/hybrid_arch.py mamba2_config,
    configs/mamba_utils.py Mamba2StateShape.create / create_full_rank and mamba2_state_dtype,
    model_executor/pool_configurator.py DefaultPoolConfigurator (cell 0 -> _zero_kv_max_tokens),
    mem_cache/kv_cache_configurator.py _handle_max_mamba_cache, _calculate_mamba_ratio, resolve_max_num_reqs,
    utils/hf_transformers/common.py get_context_length, arg_groups/overrides.py _mamba_radix_cache_resolution.
    vLLM 0.33.0 (commit 4ba787ec9): model_executor/models/mamba2.py, mamba.py (IsAttentionFree),
    config/model.py is_prefix_caching_supported and _get_and_verify_max_len, model_executor/models/config.py
    MambaModelConfig, v1/kv_cache_interface.py MambaSpec, model_executor/layers/mamba/mamba_utils.py
    MambaStateDtypeCalculator._mamba_state_dtype.
"""
from types import SimpleNamespace

import pytest

from calculator import InputError, Workload, estimate
from calculator.engines import sglang, stage_terms
from calculator.model.hf_config import spec_from_hf_config

# state-spaces/mamba2-2.7b as transformers writes it: 64 layers, d = 2 × 2560 = 5120 in 80 heads of 64, N = 128, one
# group, conv kernel 4; no max_position_embeddings (nor any other length key)
MAMBA2_2_7B = {
    "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 2560, "num_hidden_layers": 64,
    "num_heads": 80, "head_dim": 64, "state_size": 128, "n_groups": 1, "expand": 2, "conv_kernel": 4,
    "vocab_size": 50288, "chunk_size": 256, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
# state-spaces/mamba-2.8b-hf: 64 layers, d = 5120, N = 16
MAMBA_2_8B = {
    "architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 2560, "num_hidden_layers": 64,
    "state_size": 16, "expand": 2, "conv_kernel": 4, "vocab_size": 50280, "time_step_rank": 160,
    "torch_dtype": "bfloat16"}
LAYERS = 64
# SGLang: conv (conv_dim / tp, K − 1) in bf16 (SGLANG_MAMBA_CONV_DTYPE) + SSM (heads / tp, head_dim, N) in fp32
SG_MAMBA2_LAYER = 3 * (5120 + 2 * 1 * 128) * 2 + 80 * 64 * 128 * 4  # 32,256 + 2,621,440 B
# Mamba-1 on the Mamba2 layout (create_full_rank): conv over d only, SSM (d, 1, N)
SG_MAMBA1_LAYER = 3 * 5120 * 2 + 5120 * 16 * 4


def spec(cfg, **extra):
    return spec_from_hf_config({**cfg, **extra}).spec


def serve(m, engine, seq=1024, gpu="h100-sxm", **kw):
    serving = kw.pop("serving", {})
    return estimate(m, Workload(mode="infer", engine=engine, gpu=gpu, seq_len=seq, serving=serving, **kw),
                    with_fits=False).serving


def test_sglang_serves_mamba2_with_a_state_pool_and_a_zero_byte_token_pool():
    sv = serve(spec(MAMBA2_2_7B), "sglang")
    st, rest = sv.states, sv.kv_available_bytes  # rest = fraction × free before loading − weights
    per_req = LAYERS * SG_MAMBA2_LAYER == 169_836_544 and LAYERS * SG_MAMBA2_LAYER
    assert (st.layer_bytes, st.slot_bytes, st.conv_dtype, st.ssm_dtype) == (SG_MAMBA2_LAYER, per_req, "bf16", "fp32")
    assert (st.layers, st.attention_layers, st.kinds) == (64, 0, ("mamba",))
    # _handle_max_mamba_cache: K = ⌊(rest × r / (1 + r) − per request) / per request⌋, r = 0.9; K + 1 slots allocated
    slots = int((rest * 0.9 / 1.9 - per_req) // per_req)
    assert st.slots == slots and st.pool_bytes == (slots + 1) * per_req
    # cell 0: max_total_num_tokens = context length = 2048 (no length key: get_context_length's default)
    assert (sv.kv_bytes_per_token, sv.kv_pool_tokens, sv.configured_max_model_len) == (0, 2048, 2048)
    assert sv.kv_pool_bytes == st.pool_bytes  # the token pool holds no bytes
    # radix cache on, no extra buffer: 3 slots a request; max_running = min(clamp(2048 / 2048 × 512, 2048, 4096),
    # tokens // 2, K // 3)
    assert st.slots_per_seq == 3
    assert st.max_running_seqs == min(2048, 2048 // 2, slots // 3)
    # the 2,048 tokens bound all running requests together: two of 1,024 tokens
    assert sv.max_concurrent_seqs == pytest.approx(min(2048 / 1024, st.max_running_seqs)) == 2.0
    assert sv.starts and sv.max_model_len == 2047  # min(context length, tokens) − 1
    # H100 SXM: mem_fraction_static 0.83, 178 slots of 162 MiB, 59 requests at once
    assert (sv.memory_fraction, st.slots, st.max_running_seqs) == (0.83, 178, 59)
    terms = {t.key: t.bytes for t in stage_terms(sv, 0)}
    assert terms["kv_cache"] == 0 and terms["kv_cache.state"] == st.pool_bytes
    assert any("stay unallocated" in n for n in sv.notes)


def test_sglang_mamba2_state_shards_with_tp():
    st = serve(spec(MAMBA2_2_7B), "sglang", parallel={"tp": 2}).states
    # one group, TP 2: groups padded to 2 (extra_groups_for_head_shards), one a rank; heads and d halved
    assert st.layer_bytes == 3 * (2560 + 2 * 1 * 128) * 2 + 40 * 64 * 128 * 4


@pytest.mark.parametrize("model_type,arch", [("mamba", "MambaForCausalLM"),
                                             ("falcon_mamba", "FalconMambaForCausalLM")])
def test_sglang_serves_mamba1_on_the_full_rank_layout(model_type, arch):
    m = spec(MAMBA_2_8B, model_type=model_type, architectures=[arch])
    sv = serve(m, "sglang")
    assert sv.starts and sv.states.layer_bytes == SG_MAMBA1_LAYER and sv.states.slot_bytes == LAYERS * SG_MAMBA1_LAYER
    assert sv.kv_pool_tokens == 2048


def test_sglang_context_length_and_pool_settings():
    m = spec(MAMBA2_2_7B)
    short = serve(m, "sglang", seq=512, serving={"max_model_len": 1024})
    assert (short.kv_pool_tokens, short.max_model_len, short.starts) == (1024, 1023, True)
    # a prompt of the whole context is rejected (tokenizer_manager.py _validate_one_request)
    with pytest.raises(InputError, match="SGLang rejects a request of 1,024 prompt"):
        serve(m, "sglang", serving={"max_model_len": 1024})
    # a --context-length above the derived 2048 is refused (model_config.py _derive_context_length)
    with pytest.raises(InputError, match="SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1") as refused:
        serve(m, "sglang", serving={"max_model_len": 4096})
    assert refused.value.field == "serving.max_model_len" and "2,048 or less" in str(refused.value)
    # a config with a length key: that many tokens
    assert serve(spec(MAMBA2_2_7B, max_position_embeddings=8192), "sglang").kv_pool_tokens == 8192
    fixed = serve(m, "sglang", serving={"max_mamba_cache_size": 30}).states
    assert (fixed.slots, fixed.max_running_seqs) == (30, 10)
    off = serve(m, "sglang", serving={"prefix_caching": False}).states  # radix cache off: one slot a request
    assert off.slots_per_seq == 1 and off.max_running_seqs == min(1024, off.slots)
    more = serve(m, "sglang", serving={"mamba_full_memory_ratio": 9.0}).states  # r / (1 + r) = 0.9 of the rest
    assert more.slots > 1.8 * serve(m, "sglang").states.slots
    bf16 = serve(m, "sglang", serving={"mamba_ssm_cache_dtype": "bf16"}).states  # --mamba-ssm-dtype bfloat16
    assert bf16.layer_bytes == 3 * 5376 * 2 + 80 * 64 * 128 * 2


def test_sglang_mamba_start_failures():
    m = spec(MAMBA2_2_7B)
    none = serve(m, "sglang", serving={"memory_fraction": 0.07})
    assert not none.starts and none.start_error.startswith("Not enough GPU memory for hybrid")
    two = serve(m, "sglang", serving={"memory_fraction": 0.08})  # 2 slots, 3 a request (resolve_max_num_reqs)
    assert (two.states.slots, two.starts) == (2, False) and "too small to serve any requests" in two.start_error
    full = serve(m, "sglang", serving={"max_mamba_cache_size": 2000})  # 2,001 × 162 MiB > the rest
    assert not full.starts and full.start_error.startswith("Loaded weights leave no GPU memory")


@pytest.mark.parametrize("model_type,ratio", [
    ("falcon_h1", 5), ("granitemoehybrid", 5), ("nemotron_h", 5), ("qwen3_next", 5), ("kimi_linear", 5),
    ("qwen3_5_moe", 5), ("bamba", 3), ("jamba", 3), ("mamba2", 3), ("lfm2", 3)])
def test_sglang_mamba_ratio_by_architecture(model_type, ratio):
    # _calculate_mamba_ratio: 3 + get_mamba_tracking_slots; "auto" resolves to extra_buffer (2 slots with the
    # overlap schedule) for archs in both _MAMBA_RADIX_CACHE_ARCHS and _MAMBA_EXTRA_BUFFER_ARCHS, else 0
    assert sglang.mamba_ratio(SimpleNamespace(model_type=model_type), Workload().serving)[0] == ratio


def test_vllm_serves_mamba2_with_one_state_block_a_request():
    m = spec(MAMBA2_2_7B)
    sv = serve(m, "vllm")
    st = sv.states
    # conv and SSM both in the model dtype (mamba_ssm_cache_dtype auto: the conv dtype)
    layer = 3 * 5376 * 2 + 80 * 64 * 128 * 2
    assert (st.layer_bytes, st.conv_dtype, st.ssm_dtype) == (layer, "bf16", "bf16")
    # one uniform MambaSpec group of all 64 layers, its page the state unpadded; attention-free: prefix caching
    # off by default, mamba_cache_mode none, one block a request
    assert sv.kv_pool_blocks == sv.kv_pool_bytes // (LAYERS * layer)
    assert not sv.prefix_caching and st.slots_per_seq == 1 and st.slot_bytes == LAYERS * layer
    assert sv.max_concurrent_seqs == sv.kv_pool_blocks
    assert st.max_running_seqs == min(1024, sv.kv_pool_blocks - 1)  # max_num_seqs 1024 on an H100
    # no length key: max_model_len 2048; any length fits, a given one is taken
    assert (sv.configured_max_model_len, sv.max_model_len, sv.starts) == (2048, 2048, True)
    assert serve(m, "vllm", serving={"max_model_len": 65536}).max_model_len == 65536
    # H100 SXM: 814 blocks of 82 MiB
    assert sv.kv_pool_blocks == 814
    fp32 = serve(m, "vllm", serving={"mamba_ssm_cache_dtype": "fp32"}).states
    assert fp32.layer_bytes == SG_MAMBA2_LAYER


def test_vllm_serves_mamba1():
    st = serve(spec(MAMBA_2_8B), "vllm").states
    assert st.layer_bytes == 3 * 5120 * 2 + 5120 * 16 * 2 and st.slots_per_seq == 1


def test_sglang_max_running_requests_per_dp_worker_is_at_least_one():
    # resolve_max_num_reqs: requested_per_worker = max(1, max_running_requests // attn_dp_size); radix cache off:
    # _handle_max_mamba_cache sizes max(1, max_running_requests // attn_dp_size) slots
    s = Workload(serving={"max_num_seqs": 2, "attention_dp": 4}).serving
    assert sglang.max_running(s, s.attention_dp, 10_000, 2048, 100, 3) == 1
    st = serve(spec(MAMBA2_2_7B), "sglang", parallel={"tp": 4},
               serving={"max_num_seqs": 2, "attention_dp": 4, "prefix_caching": False}).states
    assert (st.slots, st.max_running_seqs) == (1, 1)
