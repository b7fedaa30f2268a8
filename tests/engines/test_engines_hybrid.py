"""Hybrid (Mamba / linear-attention) and DSA models in the serving engines (calculator/engines/states.py, vllm_kv.py,
sglang.py), checked by hand against the rules of vLLM 0.33 and SGLang 0.5.23 (each cited in calculator/engines/)."""
import math
from pathlib import Path

import pytest

from calculator import Workload, estimate
from calculator.core.errors import InputError
from calculator.engines import sglang, states, stage_terms, vllm, vllm_kv
from calculator.memory.inference import with_kv_dtype
from calculator.model.hf_config import spec_from_hf_config
from calculator.model.presets import get_gpu, load_model

PRESETS = Path(__file__).resolve().parents[2] / "presets" / "models"
H200 = get_gpu("h200")
# SPEC §1.9: Qwen3-Next-80B-A3B (48 layers, every 4th full attention, 2 KV heads of 256; GDN 16 key / 32 value heads
# of 128, conv kernel 4), bf16
QWEN3_NEXT = {
    "model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120, "vocab_size": 151936,
    "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 512,
    "num_experts_per_tok": 10, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "max_position_embeddings": 262144, "torch_dtype": "bfloat16"}
POOL = 48_740_125_695  # SPEC §1.9's illustrative pool P (45.39 GiB)


def qwen3_next():
    return spec_from_hf_config(QWEN3_NEXT).spec


def preset(name):
    return load_model(str(PRESETS / f"{name}.json")).spec


def vllm_layout(m, tp=1, **serving):
    w = with_kv_dtype(m, Workload(mode="infer", engine="vllm", gpu="h200", parallel={"tp": tp}, serving=serving))
    layers = range(m.num_hidden_layers)
    split = states.split_layers(m, layers)
    token = vllm.kv_token_bytes(m, vllm.kv_heads_on_gpu(m, w), w.kv_dtype)
    return vllm_kv.layout(m, w, layers, split, token, H200, True)


def serve(m, engine="vllm", seq=32768, **kw):
    serving = kw.pop("serving", {})
    w = Workload(mode="infer", engine=engine, gpu="h200", seq_len=seq, serving=serving, **kw)
    return estimate(m, w, with_fits=False)


@pytest.mark.parametrize("prefix,block,page_bytes,blocks,req_long,tokens,req_4k,conc_4k", [
    (False, 544, 13_369_344, 3645, 482 + 3, 1_970_133, 8 + 3, 331.4),  # mamba_cache_mode none
    (True, 576, 14_155_776, 3443, 456 + 9, 1_940_993, 8 + 9, 202.5),  # align (FlashInfer GDN on the H200)
])
def test_qwen3_next_worked_example(prefix, block, page_bytes, blocks, req_long, tokens, req_4k, conc_4k):
    lay = vllm_layout(qwen3_next(), prefix_caching=prefix)
    g = lay.groups
    # a1 = 2 × 2 × 256 × 2 B; M = 3 × 8192 × 2 B (conv) + 32 × 128 × 128 × 2 B (bf16 SSM: no Qwen3-Next override)
    assert (lay.token_bytes, lay.state_page) == (2048, 1_097_728)
    assert lay.block_size == block and g.page_bytes == block * 2048
    # 12 attention + 36 GDN layers: groups of 12, one attention and three state groups, no padding
    assert (g.group_size, g.full_groups, g.state_groups) == (12, 1, 3)
    assert g.bytes_per_block == page_bytes
    n = POOL // g.bytes_per_block
    assert n == blocks
    assert g.blocks_per_request(262144, block, 8192) == req_long
    assert n / req_long == pytest.approx(7.52 if not prefix else 7.40, abs=0.005)
    assert int(n / req_long * 262144) == tokens  # "GPU KV cache size: N tokens"
    assert g.blocks_per_request(4096, block, 8192) == req_4k
    assert n / req_4k == pytest.approx(conc_4k, abs=0.05)
    # the largest max_model_len: bs × (⌊(P − B) / B⌋ − state blocks) with one attention group (≈ 1.98 M)
    largest = vllm.max_model_len_that_fits(g, POOL - g.bytes_per_block, block, 8192, 4_000_000)
    assert largest == block * ((POOL - g.bytes_per_block) // g.bytes_per_block - g.state_groups * g.state_blocks)
    assert 1.97e6 < largest < 1.99e6


@pytest.mark.parametrize("tp,none,align", [(2, 544, 576), (4, 272, 320), (8, 144, 192)])
def test_qwen3_next_block_size_by_tp(tp, none, align):
    # KV heads stay 1 (replicated) past TP 2, so a1 stays 1024 B while the state shrinks
    assert vllm_layout(qwen3_next(), tp, prefix_caching=False).block_size == none
    assert vllm_layout(qwen3_next(), tp).block_size == align


def test_fp32_ssm_state_and_the_triton_kernel():
    m = qwen3_next()
    fp32 = vllm_layout(m, prefix_caching=False, mamba_ssm_cache_dtype="fp32")
    assert (fp32.state_page, fp32.block_size) == (2_146_304, 1056)
    assert vllm_layout(m, mamba_ssm_cache_dtype="fp32").block_size == 1088
    # the Triton GDN prefill: no 64-token alignment and no checkpoint block (SPEC §6.2: block 544)
    triton = vllm_layout(m, gdn_prefill_backend="triton")
    assert (triton.block_size, triton.groups.state_blocks) == (544, 2)


def test_qwen3_5_27b_on_vllm_reports_state_slots_and_concurrency():
    m = preset("qwen3.5-27b")
    est = serve(m)
    sv, st = est.serving, est.serving.states
    # 16 attention layers (4 KV heads of 256, bf16): a1 = 4,096 B; 48 GDN layers: conv 3 × 10,240 × 2 B + recurrent
    # 48 × 128 × 128 × 4 B (Qwen3.5's config: mamba_ssm_dtype float32) = 3,207,168 B
    assert sv.kv_bytes_per_token == 16 * 4096
    assert (st.layers, st.attention_layers, st.kinds) == (48, 16, ("gated_deltanet",))
    assert (st.conv_dtype, st.ssm_dtype, st.layer_bytes) == ("bf16", "fp32", 3_207_168)
    assert sv.block_size == 64 * math.ceil(3_207_168 / (64 * 4096)) == 832  # align mode, FlashInfer on the H200
    block_bytes = 16 * 832 * 4096  # groups of 16 layers: 1 attention + 3 GDN
    assert sv.kv_pool_blocks == sv.kv_pool_bytes // block_bytes
    per_seq = math.ceil(32768 / 832) + 3 * 3  # 3 state groups × (2 + 1 checkpoint block)
    assert sv.max_concurrent_seqs == pytest.approx(sv.kv_pool_blocks / per_seq)
    assert st.slots_per_seq == 3 and st.slot_bytes == 3 * block_bytes
    assert st.max_running_seqs == min(1024, (sv.kv_pool_blocks - 1) // per_seq)
    assert st.slots == 3 * st.max_running_seqs and st.pool_bytes == st.slots * st.slot_bytes
    assert sv.kv_pool_tokens == int(sv.kv_pool_blocks / (math.ceil(262144 / 832) + 9) * 262144)
    d = sv.to_dict()
    assert d["states"]["slots"] == st.slots and d["states"]["kinds"] == ["gated_deltanet"]
    assert "states" not in serve(load_model("llama-3.1-8b").spec).serving.to_dict()  # plain models: keys as before


def test_vllm_0_11_turns_prefix_caching_off_for_hybrids():
    m = preset("qwen3.5-27b")
    sv = serve(m, serving={"version": "0.11"}).serving
    # 16 × ⌈M / (16 × a1)⌉, one state block a request, tokens reported as num_blocks // groups × block_size
    assert sv.block_size == 16 * math.ceil(3_207_168 / (16 * 4096)) == 784 and not sv.prefix_caching
    assert sv.states.slots_per_seq == 1
    assert sv.kv_pool_tokens == sv.kv_pool_blocks // 4 * 784


def test_qwen3_5_35b_a3b_state_and_tp():
    m = preset("qwen3.5-35b-a3b")
    one = serve(m).serving.states
    two = serve(m, parallel={"tp": 2}).serving.states
    # conv 3 × (2 × 16 × 128 + 32 × 128) × 2 B + recurrent 32 × 128 × 128 × 4 B; TP halves both
    assert one.layer_bytes == 3 * 8192 * 2 + 32 * 128 * 128 * 4 == 2 * two.layer_bytes
    bf16 = serve(m, serving={"mamba_ssm_cache_dtype": "bf16"}).serving
    assert bf16.states.layer_bytes == 3 * 8192 * 2 + 32 * 128 * 128 * 2
    assert bf16.max_concurrent_seqs > serve(m).serving.max_concurrent_seqs


def test_sglang_state_pool_by_hand():
    m = preset("qwen3.5-27b")
    sv = serve(m, engine="sglang").serving
    st = sv.states
    rest = sv.kv_available_bytes  # fraction × free before loading − weights
    per_req = 48 * 3_207_168  # conv bf16 + recurrent fp32 (SGLang's default and the config's mamba_ssm_dtype)
    assert st.slot_bytes == per_req
    slots = int((rest * 0.9 / 1.9 - per_req) // per_req)
    assert st.slots == slots and st.pool_bytes == (slots + 1) * per_req
    tokens = (rest - (slots + 1) * per_req) // (16 * 4096)  # the token pool over the attention layers only
    assert sv.kv_pool_tokens == tokens
    assert st.slots_per_seq == 5  # 3 + 2 tracking slots: extra_buffer (Qwen3.5's default)
    assert st.max_running_seqs == min(2048, tokens // 2, slots // 5)
    assert sv.max_concurrent_seqs == pytest.approx(min(tokens / 32768, st.max_running_seqs))
    assert sv.kv_pool_bytes == tokens * 16 * 4096 + st.pool_bytes
    terms = {t.key: t.bytes for t in stage_terms(sv, 0)}
    assert terms["kv_cache.state"] == st.pool_bytes and terms["kv_cache"] == tokens * 16 * 4096


def test_sglang_state_pool_settings():
    m = preset("qwen3.5-27b")
    off = serve(m, engine="sglang", serving={"prefix_caching": False}).serving.states
    assert off.slots_per_seq == 1
    fixed = serve(m, engine="sglang", serving={"max_mamba_cache_size": 100}).serving
    assert fixed.states.slots == 100 and fixed.states.max_running_seqs == 100 // 5
    lazy = serve(m, engine="sglang", serving={"mamba_radix_cache_strategy": "extra_buffer_lazy"}).serving
    assert lazy.states.slots_per_seq == 4
    more = serve(m, engine="sglang", serving={"mamba_full_memory_ratio": 2.0}).serving
    assert more.states.slots > fixed.states.slots and more.kv_pool_tokens < fixed.kv_pool_tokens
    running = serve(m, engine="sglang", serving={"prefix_caching": False, "max_num_seqs": 64}).serving.states
    assert running.slots == 64  # radix cache off: max_running_requests slots
    assert sglang.mamba_ratio(m, Workload().serving) == (5, "radix cache, extra_buffer")


def test_dsa_indexer_cache():
    try:
        m = preset("deepseek-v3.2")
    except Exception as exc:  # noqa: BLE001 - the DSA mapper is another part of issue 21
        pytest.skip(f"DeepSeek-V3.2 is not mapped here: {exc}")
    split = states.split_layers(m, range(m.num_hidden_layers))
    assert (split.indexed, split.extra_token_bytes) == (61, 61 * 132)  # fp8 keys + an fp32 scale per 128
    w = dict(weight_dtype="fp8", parallel={"tp": 8})
    sv = serve(m, **w).serving
    assert sv.kv_bytes_per_token == 61 * (1152 + 132) == 78_324 and sv.block_size == 64
    assert sv.kv_pool_blocks == sv.kv_pool_bytes // (64 * 78_324)
    fp8 = serve(m, kv_dtype="fp8", **w).serving  # fp8_ds_mla: 512 + 4 × 4 + 64 × 2 B
    assert fp8.kv_bytes_per_token == 61 * (656 + 132) == 48_068
    sg = serve(m, engine="sglang", **w).serving
    assert sg.kv_bytes_per_token == 78_324 and sg.block_size == 64 and sg.kv_pool_tokens % 64 == 0


def test_a_kind_without_serving_state_is_refused(monkeypatch):
    from calculator.model.architectures import gated_deltanet
    monkeypatch.delattr(gated_deltanet, "serving_state")
    with pytest.raises(InputError, match="not modelled"):
        states.split_layers(preset("qwen3.5-27b"), range(4))


def test_nemotron_h_state_in_fp32_and_padded_state_groups():
    m = preset("nemotron-3-nano-30b-a3b")  # 6 attention, 23 Mamba-2, the rest MoE blocks without a mixer
    lay = vllm_layout(m)
    sp, g = lay.split, lay.groups
    assert (len(sp.attention), len(sp.state), sp.kinds) == (6, 23, ("mamba",))
    assert (lay.conv_dtype, lay.ssm_dtype) == ("bf16", "fp32")  # NemotronHForCausalLMConfig: float32
    # groups of 6: one attention group and ⌈23 / 6⌉ = 4 state groups, the last padded
    assert (g.group_size, g.full_groups, g.state_groups, g.state_blocks) == (6, 1, 4, 2)
    assert lay.block_size == 16 * math.ceil(lay.state_page / (16 * lay.token_bytes))  # no GDN: alignment 16
    sv = serve(m).serving
    assert sv.states.slot_bytes == 4 * g.bytes_per_block and sv.kv_bytes_per_token == 6 * lay.token_bytes


def test_a_pipeline_stage_with_nothing_to_cache_is_refused_by_name():
    """Nemotron-H-56B at PP 118: a stage holding one MLP-only layer has neither attention nor a state, so vLLM has
    no KV cache to size on it (it divided by a zero block size); the refusal names the stage, as SGLang's names the
    missing layers. PP 59 (two layers a stage, each with a Mamba or attention layer) still computes."""
    m = load_model("nemotron-h-56b").spec
    w = Workload(mode="infer", engine="vllm", gpu="h200", seq_len=1024, parallel={"pp": 118})
    with pytest.raises(InputError, match="pipeline stage with layers 1-1 holds no attention or state layer"):
        estimate(m, w, with_fits=False)
    assert estimate(m, w.model_copy(update={"parallel": w.parallel.model_copy(update={"pp": 59})}),
                    with_fits=False).serving.kv_pool_blocks > 0
