"""vLLM 0.33's KV cache for DeepSeek-V4 (calculator/engines/vllm_compressed.py): each rule against the vllm 0.33.0
wheel file it follows, and the whole pool of a tiny DeepSeek-V4 config computed by hand."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calculator import InputError, Workload, estimate
from calculator.engines import vllm_compressed as vc
from calculator.model.hf_config import spec_from_hf_config

PRESETS = Path(__file__).resolve().parents[2] / "presets" / "models"


def _spec(name: str = "deepseek-v4-flash", **overrides):
    cfg = json.loads((PRESETS / f"{name}.json").read_text())
    cfg.update(overrides)
    return spec_from_hf_config(cfg).spec


# four layers: window only, CSA, HCA, CSA (the fifth ratio is the MTP layer's); small elsewhere
TINY = dict(num_hidden_layers=4, compress_ratios=[0, 4, 128, 4, 0], hidden_size=256, n_routed_experts=8,
            num_experts_per_tok=2, moe_intermediate_size=128, num_attention_heads=8, o_groups=2, q_lora_rank=128,
            o_lora_rank=64, index_n_heads=4, vocab_size=1024, num_hash_layers=1, max_position_embeddings=65536)


# ---- page sizes (v1/kv_cache_interface.py AttentionSpec.page_size_bytes, _apply_alignment_padding) ---------------
def test_fp8_ds_mla_entry_is_584_bytes():
    """attention.py state_content_bytes=584: 448 NoPE fp8 + 64 RoPE bf16 (128 B) + 7 UE8M0 scales + 1 pad."""
    assert vc.packed_token_bytes(_spec()) == 448 + 2 * 64 + 448 // 64 + 1 == 584


def test_each_cache_page_of_v4_flash():
    """page = round_up(states per block × bytes per state, 576) with fp8_ds_mla, per get_kv_cache_spec:
    sparse_swa.py DeepseekV4SWACache (64 tokens), attention.py DeepseekV4Attention (256 tokens / ratio entries),
    DeepseekV4IndexerCache (132 B entries), compressor.py CompressorStateCache (fp32 2·coff·head_dim, block 4 / 8)."""
    m = _spec()
    assert vc.swa_spec(m, 0, True, 1).page_bytes == vc.round_up(64 * 584, 576) == 37_440
    assert vc.compressed_kv_spec(m, 0, 4, True, 1).page_bytes == vc.round_up(64 * 584, 576) == 37_440
    assert vc.compressed_kv_spec(m, 0, 128, True, 1).page_bytes == vc.round_up(2 * 584, 576) == 1_728
    assert vc.indexer_entry_bytes(m) == 128 + 4
    assert vc.indexer_spec(m, 0, 4, True).page_bytes == vc.round_up(64 * 132, 576) == 8_640
    csa = vc.compressor_state_spec("csa_state", 0, 512, 4, True)
    assert (csa.block_size, csa.window, csa.page_bytes) == (4, 8, vc.round_up(4 * 2 * 2 * 512 * 4, 576)) \
        == (4, 8, 32_832)
    idx = vc.compressor_state_spec("indexer_state", 0, 128, 4, True)
    assert (idx.block_size, idx.window, idx.page_bytes) == (4, 8, vc.round_up(4 * 2 * 2 * 128 * 4, 576)) \
        == (4, 8, 8_640)
    hca = vc.compressor_state_spec("hca_state", 0, 512, 128, True)
    assert (hca.block_size, hca.window, hca.page_bytes) == (8, 128, vc.round_up(8 * 2 * 512 * 4, 576)) \
        == (8, 128, 32_832)
    # plain bf16 rows (FlashInfer sparse, not the default): head_dim × 2 B, 512-byte alignment
    assert vc.swa_spec(m, 0, False, 2).page_bytes == 64 * 512 * 2
    with pytest.raises(InputError, match="ratios 4 and 128"):
        vc.compressor_state_spec("x", 0, 512, 16, True)


def test_layer_specs_by_kind():
    """attention.py: every layer its window keys; ratio > 1 the compressed KV and its state; ratio 4 also the
    indexer's keys and state (get_kv_cache_spec returns None for the attention itself at ratio <= 1)."""
    m = _spec()
    roles = {r: [s.role for s in vc.layer_specs(m, 0, r, True, 1)] for r in (0, 4, 128)}
    assert roles == {0: ["swa"], 4: ["swa", "csa_kv", "csa_state", "indexer", "indexer_state"],
                     128: ["swa", "hca_kv", "hca_state"]}


# ---- blocks a request holds (kv_cache_interface.py FullAttentionSpec / SlidingWindowSpec) ---------------------------
def test_pages_of_full_and_sliding_specs():
    full = vc.CacheSpec("csa_kv", 0, False, 256, 1)
    slide = vc.CacheSpec("csa_state", 0, True, 4, 1, window=8)
    assert full.pages(1000, 10**6) == -(-1000 // 256) == 4
    assert slide.pages(100_000, 16_384) == -(-(8 - 1 + 16_384) // 4) + 1 == 4_099
    assert slide.pages(10, 16_384) == -(-10 // 4) + 1 == 4  # never more than the request's length


def test_in_flight_tokens_with_async_scheduling():
    """config/vllm.py max_concurrent_batches: async scheduling (on by default) on the V2 runner, pp + 1 batches."""
    assert vc.max_in_flight_tokens(8192, 1) == 2 * 8192
    assert vc.max_in_flight_tokens(8192, 4) == 5 * 8192


# ---- groups (v1/core/kv_cache_planning.py _get_packed_kv_cache_groups, _approximate_gcd) ----------------------------
def test_approximate_gcd_least_padding_ties_to_larger():
    assert vc.approximate_gcd([43, 21, 20], 21) == 22  # pads 1 + 1 + 2 = 4 (21 pads 20 + 0 + 1)
    assert vc.approximate_gcd([4, 2, 1], 2) == 2
    assert vc.approximate_gcd([2, 3], 2) == 3  # 2 and 3 both pad 1; the larger wins
    assert vc.approximate_gcd([5], 9) == 9


def test_v4_flash_groups_and_block_bytes():
    """43 layers (2 window, 21 CSA, 20 HCA): 5 groups; the MLA bucket (CSA KV, indexer keys, HCA KV) is unbalanced so
    whole; R = _approximate_gcd([43, 21, 20], 21) = 22, so the 43 window caches split in 2; a block is the widest
    group: 21 × 37,440 + 21 × 8,640 + 20 × 1,728 = 1,002,240 B."""
    m = _spec()
    cg = vc.layout(m, Workload(mode="infer", engine="vllm"), range(43), _Gpu("b200"), 8192)
    sizes = sorted(sum(s.page_bytes for s in g) for g in cg.groups)
    assert sizes == sorted([22 * 37_440, 21 * 37_440, 21 * 37_440 + 21 * 8_640 + 20 * 1_728,
                            21 * 32_832 + 21 * 8_640, 20 * 32_832])
    assert cg.bytes_per_block == 1_002_240 and cg.count == 5
    # 1M tokens: MLA ⌈L/256⌉ + 2 window groups (⌈(127 + 16,384)/64⌉ + 1) + CSA states (⌈(7 + 16,384)/4⌉ + 1)
    # + HCA states (⌈(127 + 16,384)/8⌉ + 1)
    assert cg.blocks_per_request(1 << 20) == 4096 + 2 * 259 + 4099 + 2065


def test_v4_pro_groups_and_block_bytes():
    """61 layers (30 CSA, 31 HCA): R = _approximate_gcd([61, 30, 31], 30) = 31 (pads 1 + 1 + 0), so the window caches
    split 31 + 30; the MLA bucket is widest: 30 × 37,440 + 30 × 8,640 + 31 × 1,728 = 1,435,968 B."""
    m = _spec("deepseek-v4-pro")
    assert vc.approximate_gcd([61, 30, 31], 30) == 31
    cg = vc.layout(m, Workload(mode="infer", engine="vllm"), range(61), _Gpu("b200"), 8192)
    sizes = sorted(sum(s.page_bytes for s in g) for g in cg.groups)
    assert sizes == sorted([31 * 37_440, 30 * 37_440, 30 * 37_440 + 30 * 8_640 + 31 * 1_728,
                            30 * 32_832 + 30 * 8_640, 31 * 32_832])
    assert cg.bytes_per_block == 1_435_968


def test_pipeline_stage_projects_the_global_groups():
    """_project_kv_cache_groups_to_worker: a stage keeps every group (and its per-request blocks), its block the
    widest of its own layers' pages."""
    m = _spec()
    cg = vc.layout(m, Workload(mode="infer", engine="vllm", parallel={"pp": 2}), range(0, 22), _Gpu("b200"), 8192)
    assert cg.count == 5 and cg.in_flight == 3 * 8192
    assert cg.bytes_per_block == max(sum(s.page_bytes for s in g if s.layer < 22) for g in cg.groups)


def test_a_group_needs_the_blocks_of_any_one_of_its_layers():
    """UniformTypeKVCacheSpecs.max_memory_usage_pages is the most any layer of a group needs; a group is cut from one
    bucket (same type, block size and window), so its first spec stands for it (and for its bucket's other groups):
    the shortcut the planner's grids take equals the per-layer maximum at every length."""
    for name in ("deepseek-v4-flash", "deepseek-v4-pro"):
        for pp, layers in ((1, range(0, 61)), (4, range(15, 30))):
            cg = vc.layout(_spec(name), Workload(mode="infer", engine="vllm", parallel={"pp": pp}),
                           range(layers.start, min(layers.stop, 43 if "flash" in name else 61)), _Gpu("h200"), 8192)
            for n in (1, 63, 64, 65, 256, 8191, 100_000, 1 << 20, 13_308_445):
                assert cg.blocks_per_request(n) == sum(cg.group_pages(g, n) for g in cg.groups)
            assert cg.bytes_per_block == max(sum(s.page_bytes for s in cg.local(g)) for g in cg.groups)


class _Gpu:
    def __init__(self, ident: str):
        self.id = self.name = ident


# ---- the whole pool of a tiny config, by hand ------------------------------------------------------------------
def test_tiny_pool_by_hand():
    """Layers window, CSA, HCA, CSA. Buckets: 4 window caches (37,440 B); MLA {2 × 37,440, 2 × 8,640, 1 × 1,728}
    (unbalanced, whole: 93,888 B); CSA states {2 × 32,832, 2 × 8,640} (82,944 B); HCA state 32,832 B.
    R = _approximate_gcd([4, 2, 1], 2) = 2: the window caches split into 2 groups of 2 (74,880 B). A block is
    93,888 B. max_model_len 4,096, 2,048 batched tokens → 4,096 in flight: a request holds 2 × (4,096/64 + 1)
    + 4,096/256 + (4,096/4 + 1) + (4,096/8 + 1) = 130 + 16 + 1,025 + 513 = 1,684 blocks."""
    m = _spec(**TINY)
    w = Workload(mode="infer", engine="vllm", seq_len=1000, gen_tokens=24, gpu="h100-sxm",
                 serving={"max_model_len": 4096, "max_num_batched_tokens": 2048})
    sv = estimate(m, w, with_fits=False).serving
    bpb, per_req = 93_888, 2 * 65 + 16 + 1025 + 513
    assert sv.block_size == 256
    assert sv.kv_pool_blocks == sv.kv_pool_bytes // bpb
    assert sv.kv_pool_tokens == int(sv.kv_pool_blocks / per_req * 4096)
    per_seq = 2 * (-(-min(127 + 4096, 1024) // 64) + 1) + 4 + (-(-min(7 + 4096, 1024) // 4) + 1) \
        + (-(-min(127 + 4096, 1024) // 8) + 1)
    assert sv.max_concurrent_seqs == pytest.approx(sv.kv_pool_blocks / per_seq)
    assert sv.starts and sv.kv_bytes_per_token == -(-bpb // 256)
    assert any("5 KV-cache groups" in n for n in sv.notes)


def test_tiny_start_refused_like_vllm():
    """_check_enough_kv_cache_memory: one max_model_len request's blocks against the pool less the null block."""
    m = _spec(**TINY)
    first = estimate(m, Workload(mode="infer", engine="vllm", gpu="h100-sxm", serving={"memory_fraction": 0.05}),
                     with_fits=False).serving
    need = first.kv_pool_blocks and (6938 + 1) * 93_888  # 256 + 2 × 259 + 4,099 + 2,065 blocks at 65,536 tokens
    assert first.starts and first.configured_max_model_len == 65_536
    # a fraction that leaves the pool 1 MB short of one request and the null block
    short = (first.budget_bytes - first.kv_available_bytes + need - 2**20) / first.device_visible_bytes
    sv = estimate(m, Workload(mode="infer", engine="vllm", gpu="h100-sxm", serving={"memory_fraction": short}),
                  with_fits=False).serving
    assert 0 < sv.kv_available_bytes < need
    assert not sv.starts and "estimated maximum model length" in sv.start_error and sv.max_model_len < 65_536


def test_refusals():
    m = _spec(**TINY)
    with pytest.raises(InputError, match="fp8_ds_mla layout only supports fp8"):
        estimate(m, Workload(mode="infer", engine="vllm", gpu="h100-sxm", kv_dtype="int8"), with_fits=False)
    with pytest.raises(InputError, match="block_size 256 only"):
        estimate(m, Workload(mode="infer", engine="vllm", gpu="h100-sxm", serving={"block_size": 16}),
                 with_fits=False)
    # SGLang's own pools are modelled now (calculator/engines/sglang_compressed.py, test_sglang_compressed.py)
    sg = estimate(m, Workload(mode="infer", engine="sglang", gpu="h100-sxm"), with_fits=False).serving
    assert sg.block_size == 256
