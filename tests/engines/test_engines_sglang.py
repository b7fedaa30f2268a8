"""SGLang's static memory and token pool (calculator/engines/sglang.py), checked by hand against its rules."""
import pytest

from calculator import Workload, estimate
from calculator.engines import sglang
from calculator.model.presets import get_gpu, load_model

GiB, MiB = 2**30, 2**20
H100_VISIBLE = int(79.18 * GiB)
H100_SMI_MIB = 81559  # nvidia-smi memory.total, what SGLang's rule reads


def serve(model_id, gpu="h100-sxm", **kw):
    serving = kw.pop("serving", {})
    w = Workload(mode="infer", engine="sglang", gpu=gpu, serving=serving, **kw)
    return estimate(load_model(model_id).spec, w, with_fits=False).serving


def test_mem_fraction_static_default_on_h100_and_h200():
    # H100, TP 1: chunked prefill 8192, decode graphs to 256, 58 prefill graph buckets up to 8192
    assert len(sglang.prefill_graph_sizes(8192)) == 8 + 14 + 8 + 8 + 12 + 8
    reserved = 512 + 8192 * 1.5 + 1 / 8 * 1024 + 2 * 256 + 8 * 58  # = 13,904 MB
    frac, _ = sglang.mem_fraction_rule(H100_SMI_MIB, 1, 1, 8192, 256, False)
    assert frac == round((H100_SMI_MIB - reserved) / H100_SMI_MIB, 3) == 0.83
    # H200, TP 8: decode graphs to 512, tp·pp/8 × 1 GiB
    reserved = 512 + 8192 * 1.5 + 1024 + 2 * 512 + 8 * 58
    assert sglang.mem_fraction_rule(143771, 8, 1, 8192, 512, False)[0] == round((143771 - reserved) / 143771, 3)
    assert sglang.gpu_defaults(H100_SMI_MIB, 1) == (8192, 256)
    assert sglang.gpu_defaults(40960, 8) == (4096, 160)  # A100 40GB, TP >= 4
    assert sglang.gpu_defaults(183359, 1) == (16384, 512)  # B200


def test_llama_8b_pool_by_hand():
    sv = serve("llama-3.1-8b", seq_len=8000, gen_tokens=192)
    weights = 8_030_261_248 * 2 + 131072 * 128 * 2
    free_before_load = H100_VISIBLE - get_gpu("h100-sxm").cuda_context_bytes  # the catalogue's H100 context
    pool = int(free_before_load * 0.83) - weights
    assert (sv.memory_fraction, sv.weights_bytes, sv.kv_available_bytes) == (0.83, weights, pool)
    cell = 8 * (128 + 128) * 32 * 2  # KV heads × (head_dim + v_head_dim) × layers × 2 B
    assert sv.kv_pool_tokens == pool // cell and sv.block_size == 1
    assert sv.kv_pool_bytes == sv.kv_pool_tokens * cell
    assert sv.max_concurrent_seqs == pytest.approx(sv.kv_pool_tokens / 8192)


def test_set_fraction_and_dp_attention():
    sv = serve("llama-3.1-8b", serving={"memory_fraction": 0.7})
    assert sv.memory_fraction == 0.7 and sv.memory_fraction_rule == "set by you"
    # DP attention: attention TP = 4 / 2 = 2 ranks, so each GPU keeps 4 of 8 KV heads (twice TP=4's share)
    tp4 = serve("llama-3.1-8b", parallel={"tp": 4})
    dpa = serve("llama-3.1-8b", parallel={"tp": 4}, serving={"attention_dp": 2})
    assert dpa.kv_bytes_per_token == 2 * tp4.kv_bytes_per_token
    assert dpa.weights_bytes > tp4.weights_bytes  # attention weights sharded two ways, not four


def test_sliding_window_pool_keeps_fewer_tokens_per_sliding_layer():
    sv = serve("gemma-3-27b", seq_len=8000, gen_tokens=192)
    full_cell, swa_cell = sglang.cell_bytes(load_model("gemma-3-27b").spec,
                                            Workload(mode="infer", engine="sglang"), range(62))
    assert (full_cell, swa_cell) == (10 * 8192, 52 * 8192)  # per layer: 2 × 16 KV heads × 128 × 2 B
    assert sv.kv_pool_tokens == int(sv.kv_available_bytes / (full_cell + 0.8 * swa_cell))


def test_mla_cell_is_the_latent():
    sv = serve("deepseek-v3", gpu="h200", weight_dtype="fp8", parallel={"tp": 8})
    assert sv.kv_bytes_per_token == 61 * 576 * 2


def test_too_big_does_not_start():
    sv = serve("llama-3.3-70b")
    assert not sv.starts and sv.kv_pool_tokens == 0
    assert sv.start_error.startswith("Not enough memory. Please try to increase --mem-fraction-static")


def test_ep_across_data_parallel_ranks_is_read_as_sglangs_server():
    """SGLang keeps experts inside a server's TP group (arg_groups/parallel_hook.py), so TP1 × DP8 with EP8 is one
    server of --tp-size 8 with DP attention over 8 ranks: its defaults (memory fraction, decode graphs) read TP 8,
    as the same server written in SGLang's own terms (TP8, EP8, --attn-dp-size 8) does, and the layout reports 8
    attention-DP ranks."""
    from calculator.engines.common import sglang_server
    w = Workload(mode="infer", engine="sglang", gpu="h200", parallel={"dp": 8, "ep": 8, "etp": 1})
    assert sglang_server(w) == (8, 8)
    spread = serve("qwen3-30b-a3b", gpu="h200", parallel={"dp": 8, "ep": 8, "etp": 1})
    native = serve("qwen3-30b-a3b", gpu="h200", parallel={"tp": 8, "ep": 8, "etp": 1}, serving={"attention_dp": 8})
    # reserved MB: 512 + 1.5 × 8192 + 8/8 × 1024 + 2 × 512 + 8 × 58 prefill graphs + 512 × 8 × 4.5 (DP attention's
    # graph padding above a max batch of 300, memory_hook.py reserve_for_graph_mb)
    reserved = 512 + 1.5 * 8192 + 1024 + 2 * 512 + 8 * 58 + 512 * 8 * 4.5
    frac, _ = sglang.mem_fraction_rule(143771, 8, 1, 8192, 512, False, attn_dp=8)
    assert frac == round((143771 - reserved) / 143771, 3) == 0.765
    assert spread.memory_fraction == native.memory_fraction == frac
    assert spread.layout["attention_dp"] == native.layout["attention_dp"] == 8
    one_gpu_each = serve("qwen3-30b-a3b", gpu="h200", parallel={"dp": 8})  # no EP: eight TP-1 servers
    assert one_gpu_each.memory_fraction == sglang.mem_fraction_rule(143771, 1, 1, 8192, 256, False)[0]


def test_without_cuda_graphs_the_rule_reserves_no_graph_memory():
    """reserve_for_graph_mb counts decode graphs (2 × max batch) and prefill graphs (8 MB each) only when their
    backend is not disabled — the export writes --cuda-graph-backend-decode/prefill disabled for cuda_graphs off."""
    on = sglang.mem_fraction_rule(H100_SMI_MIB, 1, 1, 8192, 256, False)[0]
    off = sglang.mem_fraction_rule(H100_SMI_MIB, 1, 1, 8192, 256, False, graphs=False)[0]
    assert off == round((H100_SMI_MIB - (512 + 8192 * 1.5 + 1024 / 8)) / H100_SMI_MIB, 3) > on
    assert serve("qwen3-8b", serving={"cuda_graphs": False}).memory_fraction == off
