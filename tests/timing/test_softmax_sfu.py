"""The softmax's exponentials priced at the SFUs' rate beside the attention kernel's tensor-core time
(calculator.timing.efficiency.exp_rate, roofline.softmax_seconds), on hand-computed cases."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from calculator.timing import roofline as R
from calculator.timing.efficiency import exp_rate
from calculator.timing.ops import backward_of
from calculator.timing.roofline import Op, Rates
from calculator.timing.train_ops import GPU, stats_many
from calculator.timing.inputs import TimingInputs


def test_exp_rate_is_the_mufu_share_of_the_bf16_peak():
    # B200: 16 MUFU / 8,192 tensor FLOPs per SM per clock; 2.25 PFLOP/s BF16 -> 4.39453125e12 exp/s
    assert exp_rate("b200", "megatron-te", 2.25e15) == pytest.approx(4.39453125e12)
    # Blackwell Ultra doubles the SFU: GB300 2.5 PFLOP/s × 32 / 8,192 = 9.765625e12
    assert exp_rate("gb300", "megatron-te", 2.5e15) == pytest.approx(9.765625e12)
    assert exp_rate("b300", "megatron-te", 2.25e15) == pytest.approx(8.7890625e12)
    # GB200 is Blackwell, not Blackwell Ultra: B200's 16 / 8,192 of its 2.5 PFLOP/s = 4.8828125e12
    assert exp_rate("gb200", "megatron-te", 2.5e15) == pytest.approx(4.8828125e12)
    # Hopper: 16 / 4,096 of 989.4 TFLOP/s = 3.8648e12 (NVIDIA's "3.9 TeraExponentials/s")
    assert exp_rate("h100-sxm", "megatron-te", 989.4e12) == pytest.approx(3.86484375e12)
    # not Megatron + TE's fused attention, or a GPU of no known generation: no separate term
    assert exp_rate("b200", "hf", 2.25e15) == 0.0
    assert exp_rate("a100", "megatron-te", 312e12) == 0.0


def test_flash_attention_counts_one_exponential_per_scored_pair_and_head():
    # batch 2, s = 8 causal: 8·9/2 = 36 pairs; 4 heads -> 2·4·36 = 288 exponentials
    op = R.flash_attention(2, 8, 4, 4, 16, 16, 2.0)
    assert op.exps == 288.0
    # the backward recomputes P = exp(S − L) once (FlashAttention-2 Algorithm 2): the same 288 beside 2.5× FLOPs
    bwd = backward_of(op)
    assert bwd.exps == 288.0 and bwd.flops == 2.5 * op.flops
    assert op.scaled(3).exps == 864.0 and op.scaled(0.0).exps == 0.0


def test_softmax_seconds_add_to_the_tensor_time():
    r = Rates(peak_flops=1e15, bandwidth=1e13, matmul_eff=0.5, attention_eff=0.5, memory_eff=1.0, exp_rate=2e12)
    op = Op("Attention core (FlashAttention)", "forward", "attention", 1e12, 1e6, 0, "", "", exps=4e9)
    # 1e12 / (1e15 × 0.5) = 2 ms of GEMMs + 4e9 / 2e12 = 2 ms of exponentials = 4 ms
    assert R.gpu_seconds(op, r) == pytest.approx(4e-3)
    assert R.softmax_seconds(op, r) == pytest.approx(2e-3)
    # without a rate the kernel is its tensor time alone; a GEMM carries no exponentials
    assert R.gpu_seconds(op, r._replace(exp_rate=0.0)) == pytest.approx(2e-3)
    gemm = op._replace(kind="matmul", name="QKV")
    assert R.softmax_seconds(gemm, r) == 0.0
    # the vectorised stats price it the same way (train_ops.stats_many, the planner's path)
    st = stats_many([[op, gemm]], r, 1e13, TimingInputs(), SimpleNamespace(s=8, s_kv=8))
    assert st[0, GPU] == pytest.approx(4e-3 + 2e-3)


def test_b200_attention_is_slower_than_gb300_per_tensor_flop():
    """A d = 128 forward does 2·(128 + 128) = 512 FLOPs per exponential: at the tensor peak its SFU time equals its
    tensor time on B200 (8,192 / 16 = 512 FLOPs per exponential issued) and is half of it on GB300 (8,192 / 32)."""
    per_flop = {g: peak / exp_rate(g, "megatron-te", peak) / 512 for g, peak in (("b200", 2.25e15), ("gb300", 2.5e15))}
    assert per_flop["b200"] == pytest.approx(1.0) and per_flop["gb300"] == pytest.approx(0.5)
