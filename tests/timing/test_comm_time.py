"""The multi-GPU parts of the step time (issue 23): context-parallel attention pairs, which link each group uses,
the stacks' communication overlap, CP ring vs all-to-all, TP comm overlap, the MoE dispatchers, the GEMM
efficiency per GPU generation."""
import pytest

from calculator.core.workload import Workload
from calculator.model.presets import get_gpu, load_model
from calculator.timing import comm_time as CT
from calculator.timing import efficiency as E
from calculator.timing import roofline as R
from calculator.timing.inputs import TimingInputs
from calculator.timing.step_time import estimate_time

LLAMA = load_model("llama-3.1-8b").spec


def _train(**par) -> Workload:
    return Workload(seq_len=32768, gpu="b200", parallel=par)


def _rows(t, prefix: str):
    return [r for r in t.roofline if r.name.startswith(prefix)]


def test_a_context_parallel_rank_scores_its_share_of_the_causal_prefix():
    """Megatron's zigzag split: rank r holds chunks r and 2cp−1−r of s/(2cp) tokens, so its s/cp queries score
    s_local·(s+1)/2 pairs — cp times the s_local²/2 of attending to its own chunk only."""
    s, cp = 8192, 4
    local = s // cp
    c = s // (2 * cp)
    by_chunk = sum(c * j * c + c * (c + 1) / 2 for j in (1, 2 * cp - 2))  # chunks 1 and 2cp−2 (rank 1)
    assert R.context_parallel_pairs(local, s) == by_chunk == local * (s + 1) / 2
    assert R.context_parallel_pairs(s, s) == R.causal_pairs(s)
    one = estimate_time(LLAMA, _train(cp=1, dp=1))
    four = estimate_time(LLAMA, _train(cp=4, dp=1))
    core = lambda t: next(r.flops for r in t.roofline if r.name.startswith("Attention core")  # noqa: E731
                          and r.phase == "forward")
    assert core(four) == pytest.approx(core(one) / 4, rel=1e-3)  # the work splits evenly, it does not shrink 4×


def test_the_gradient_reduction_over_dp_and_cp_of_one_node_stays_on_nvlink():
    """TP1 × CP8 on 8 GPUs: the DP × CP group is the whole node (stride TP), never InfiniBand."""
    t = estimate_time(LLAMA, _train(cp=8, dp=1, distributed_optimizer=True))
    dp_rows = _rows(t, "DP ")
    assert dp_rows and all("NVLink" in r.name for r in dp_rows)
    two_nodes = estimate_time(LLAMA, _train(cp=8, dp=2, distributed_optimizer=True))
    assert all("InfiniBand" in r.name for r in _rows(two_nodes, "DP "))


def test_expert_parallel_ranks_stride_the_expert_tp():
    m = load_model("qwen3-30b-a3b").spec
    w = Workload(seq_len=4096, gpu="h100-sxm", parallel={"tp": 2, "dp": 8, "ep": 8, "etp": 1})
    assert all("NVLink" in r.name for r in _rows(estimate_time(m, w), "EP "))  # 8 ranks at stride 1: one node


def test_megatron_exposes_its_dp_traffic_unless_overlap_is_asked_for():
    w = _train(tp=2, dp=4, distributed_optimizer=True, num_microbatches=4)
    off = estimate_time(LLAMA, w)
    on = estimate_time(LLAMA, w, TimingInputs(overlap_grad_reduce=True, overlap_param_gather=True))
    assert off.step_time_s > on.step_time_s and off.comm_time_s > on.comm_time_s
    ddp = estimate_time(LLAMA, _train(dp=8))  # DDP overlaps its bucketed all-reduce by default
    forced = estimate_time(LLAMA, _train(dp=8), TimingInputs(overlap_grad_reduce=False))
    assert forced.step_time_s > ddp.step_time_s


def test_cp_all_to_all_is_exposed_where_the_ring_hides_under_attention():
    ring = estimate_time(LLAMA, _train(cp=4, dp=2))
    a2a = estimate_time(LLAMA, _train(cp=4, dp=2).model_copy(update={"cp_comm_type": "a2a"}))
    assert _rows(ring, "CP send/recv") and _rows(a2a, "CP all-to-all") and not _rows(a2a, "CP send/recv")
    assert a2a.comm_time_s > ring.comm_time_s


def test_tp_comm_overlap_hides_the_collectives_under_the_gemms():
    w = _train(tp=8, sequence_parallel=True)
    assert estimate_time(LLAMA, w, TimingInputs(tp_comm_overlap=True)).step_time_s < estimate_time(LLAMA, w).step_time_s


def test_an_all_to_all_across_nodes_sends_only_the_remote_share_over_the_network():
    n, g = 16, 8
    t = CT.all_to_all_seconds(1e9, n, 16, 100e9, 10e9, g)
    assert t == pytest.approx(max(1e9 * 7 / 16 / 100e9, 1e9 * 8 / 16 / 10e9))
    assert CT.all_to_all_seconds(1e9, 8, 8, 100e9, 10e9, 8) == pytest.approx(1e9 * 7 / 8 / 100e9)
    # DeepEP: k = 8 experts over 2 nodes reach the other node once: 1 − (1/2)^8 of a copy, not 8 × 1/2
    assert CT.dedup_network_share(8, 2) == pytest.approx((1 - 0.5 ** 8) / 4)


def test_an_nvl72_rack_is_one_nvlink_domain():
    assert CT.nvlink_domain(get_gpu("gb300"), TimingInputs()) == 72
    assert CT.nvlink_domain(get_gpu("gb200"), TimingInputs()) == 72
    assert CT.nvlink_domain(get_gpu("b200"), TimingInputs()) == 8
    assert CT.nvlink_domain(get_gpu("b200"), TimingInputs(gpus_per_node=4)) == 4


def test_gemm_efficiency_per_generation_and_dtype():
    assert E.matmul_efficiency("h200", "bf16", 0.8) == 0.8  # the H200 fit is the reference
    assert E.matmul_efficiency("b200", "fp8", 0.8) == E.GEMM_EFFICIENCY[("blackwell", "fp8")]
    assert E.matmul_efficiency("b200", "fp8", 0.4) == pytest.approx(E.GEMM_EFFICIENCY[("blackwell", "fp8")] / 2)
    assert E.matmul_efficiency("a100-80gb", "bf16", 0.7) == 0.7  # other generations: the input as given
    assert all(0.3 < v <= 0.9 for v in E.GEMM_EFFICIENCY.values())
    fp8 = estimate_time(LLAMA, Workload(seq_len=8192, gpu="h100-sxm"), TimingInputs(matmul_dtype="fp8"))
    bf16 = estimate_time(LLAMA, Workload(seq_len=8192, gpu="h100-sxm"))
    attention = lambda t: sum(r.time_s for r in t.roofline if r.name.startswith("Attention core"))  # noqa: E731
    assert attention(fp8) == pytest.approx(attention(bf16))  # FP8 GEMMs, BF16 attention
    assert fp8.step_time_s < bf16.step_time_s


def test_every_step_names_its_bottleneck():
    assert estimate_time(LLAMA, Workload(seq_len=4096, gpu="h200")).bottleneck in ("compute", "memory", "host")
    deep = estimate_time(LLAMA, _train(pp=4, dp=2, num_microbatches=4))
    assert deep.bottleneck in ("compute", "bubble") and deep.bubble_fraction == pytest.approx(3 / 4)


def test_a_ring_across_nodes_runs_over_every_nic_of_its_gpus_in_a_node():
    """NCCL spreads a ring's channels over the NICs of the group's GPUs in each node: a DP group of 64 at TP1
    (8 GPUs a node) gets 8 NICs, one at TP8 (one GPU a node) gets one; never faster than NVLink."""
    nv, ib = 360e9, 40e9
    assert CT.ring_network_bandwidth(64, 64, nv, ib, 8) == pytest.approx(8 * ib)
    assert CT.ring_network_bandwidth(8, 64, nv, ib, 8) == pytest.approx(ib)
    assert CT.ring_network_bandwidth(64, 64, 300e9, ib, 8) == pytest.approx(300e9)


def test_ep_overlap_hides_the_all_to_alls_under_another_micro_batchs_compute():
    """--overlap-moe-expert-parallel-comm: what the compute does not cover stays, and all of it on the unpaired
    warm-up / cool-down micro-batches (min(m, p) of m)."""
    assert CT.ep_exposed_with_overlap(0.05, 0.2, 64, 1) == pytest.approx(0.05 / 64)
    assert CT.ep_exposed_with_overlap(0.3, 0.2, 64, 4) == pytest.approx(4 / 64 * 0.3 + 60 / 64 * 0.1)
    moe = load_model("qwen3-30b-a3b").spec
    w = Workload(seq_len=4096, gpu="h100-sxm", impl="megatron-te", parallel={"ep": 16, "dp": 16,
                                                                           "num_microbatches": 8})
    off, on = estimate_time(moe, w), estimate_time(moe, w, TimingInputs(ep_comm_overlap=True))
    assert on.step_time_s < off.step_time_s and on.comm_time_s < off.comm_time_s


def test_a_full_iteration_cuda_graph_leaves_no_host_time():
    moe = load_model("qwen3-30b-a3b").spec
    w = Workload(seq_len=4096, gpu="b200", impl="megatron-te", parallel={"ep": 8, "dp": 8})
    eager, graph = estimate_time(moe, w), estimate_time(moe, w, TimingInputs(full_iteration_cuda_graph=True))
    assert graph.host_time_s == 0 and graph.step_time_s < eager.step_time_s
