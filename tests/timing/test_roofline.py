"""The FLOP, byte and roofline rules of calculator.timing.roofline, checked against hand calculations."""
import pytest

from calculator.timing import roofline as R
from calculator.timing.comm import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, P2P, collective_seconds, moved_bytes
from calculator.timing.roofline import Op, Rates

H200 = Rates(peak_flops=989.4e12, bandwidth=4.8e12, matmul_eff=1.0, attention_eff=1.0, memory_eff=1.0)


def test_linear_is_two_flops_per_weight_per_token():
    # 4096 tokens through a 4096 x 14336 linear: 2 · 4096 · 4096 · 14336
    assert R.linear_flops(4096, 4096, 14336) == 2 * 4096 * 4096 * 14336 == 481_036_337_152


def test_linear_bytes_read_input_and_weight_write_output():
    # bf16: 2 B × 4096 tokens × (4096 in + 1024 out) + 2 B × 4096 × 1024 weights
    assert R.linear_bytes(4096, 4096, 1024, 2, 2) == 2 * 4096 * 5120 + 2 * 4096 * 1024 == 50_331_648


def test_causal_pairs_and_sliding_window():
    assert R.causal_pairs(4) == 10  # 1 + 2 + 3 + 4
    assert R.causal_pairs(6, window=2) == 3 + 4 * 2  # rows 1, 2 (1 + 2), then 2 keys for each of 4 rows
    assert R.causal_pairs(4, window=8) == 10


def test_flash_attention_forward_matches_flashattention2_count():
    # FlashAttention-2 §4.1: 4·s²·d·heads forward, halved when causal (s = 4096, d = 128, 32 heads, batch 1)
    op = R.flash_attention(1, 4096, 32, 8, 128, 128, 2)
    assert op.flops == 2 * 32 * (4096 * 4097 / 2) * 256
    assert op.flops == pytest.approx(4 * 4096**2 * 128 * 32 / 2, rel=3e-4)
    # bytes: q, k, v (GQA: 8 kv heads), o in bf16, fp32 logsumexp
    assert op.bytes == 2 * 4096 * (32 * 128 + 8 * 256 + 32 * 128) + 4 * 32 * 4096


def test_flash_backward_is_two_and_a_half_forward():
    from calculator.timing.ops import backward_of
    fwd = R.flash_attention(2, 2048, 16, 8, 128, 128, 2)
    assert backward_of(fwd).flops == 2.5 * fwd.flops


def test_matmul_backward_twice_forward_or_once_when_frozen():
    from calculator.timing.ops import backward_of
    fwd = R.linear("x", 1024, 512, 256, 2, 2)
    assert backward_of(fwd).flops == 2 * fwd.flops
    assert backward_of(fwd, frozen=True).flops == fwd.flops


def test_eager_attention_scores_the_whole_square():
    op = R.eager_attention(1, 1024, 1024, 8, 8, 64, 64, 2)
    assert op.flops == 2 * 8 * 1024 * 1024 * 128
    # 8e + 8 = 24 bytes per score in bf16 (QKᵀ, scale, mask, fp32 softmax, cast, PV read)
    assert R.eager_score_bytes_forward(2) == 24


def test_rmsnorm_bytes_per_element():
    assert R.rmsnorm_bytes(1, 2) == 36  # 28 + 4e
    assert R.rmsnorm_bytes(1, 2, gemma=True) == 40  # 36 + 2e
    assert R.layernorm_bytes(10, 2) == 40


def test_adamw_bytes_per_parameter():
    # fused, pure bf16: read p, g, m, v, write p, m, v = 7 × 2 B
    assert R.adamw_bytes_per_param(2, 2, 2, 0, "fused") == 14
    # foreach: 4·b_p + 2·b_g + 14·b_s
    assert R.adamw_bytes_per_param(2, 2, 2, 0, "foreach") == 8 + 4 + 28
    # fused with an fp32 master: master r/w 8, grad 2, fp32 m, v r/w 16, then bf16 params written 2
    assert R.adamw_bytes_per_param(2, 2, 4, 4, "fused") == 8 + 2 + 16 + 2


def test_multi_tensor_launches():
    assert R.multi_tensor_launches(65536 * 320 * 10, 5) == 10
    assert R.multi_tensor_launches(1000, 100) == 3  # 36 tensors per launch


def test_ridge_point_and_bound_on_h200():
    assert H200.ridge == pytest.approx(206.125)
    decode = R.linear("decode", 1, 4096, 4096, 2, 2)  # one token: every weight read for 2 FLOPs
    prefill = R.linear("prefill", 4096, 4096, 4096, 2, 2)
    assert decode.intensity == pytest.approx(2 * 4096 * 4096 / (2 * 8192 + 2 * 4096 * 4096))
    assert R.bound(decode, H200) == "memory"
    assert R.bound(prefill, H200) == "compute"


def test_roofline_time_is_the_slower_bound_plus_kernel_gaps():
    op = Op("x", "forward", "matmul", 989.4e12, 4.8e12 / 2, 3, "", "")
    assert R.gpu_seconds(op, H200) == pytest.approx(1.0)  # compute: 1 s; memory: 0.5 s
    gapped = H200._replace(kernel_gap_s=1e-3)
    assert R.gpu_seconds(op, gapped) == pytest.approx(1.003)


def test_nccl_bus_bandwidth_volumes():
    # nccl-tests PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and all-to-all (n-1)/n, send S
    assert moved_bytes(ALL_REDUCE, 1e9, 8) == pytest.approx(1.75e9)
    assert moved_bytes(ALL_GATHER, 1e9, 8) == pytest.approx(0.875e9)
    assert moved_bytes(ALL_TO_ALL, 1e9, 4) == pytest.approx(0.75e9)
    assert moved_bytes(P2P, 1e9, 2) == 1e9
    assert moved_bytes(ALL_REDUCE, 1e9, 1) == 0
    # 1 GB all-reduce over 8 GPUs at 100 GB/s bus bandwidth, 10 µs latency
    assert collective_seconds(ALL_REDUCE, 1e9, 8, 100e9, 10e-6) == pytest.approx(0.01751)
