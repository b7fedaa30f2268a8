"""A GPU's experts compute the routed pairs of T·etp / tp tokens (calculator.timing.ops.expert_rows): under TP the
MoE layer holds T / tp tokens per GPU (Megatron-Core's dispatchers: num_local_tokens = S/TP·B,
megatron/core/transformer/moe/token_dispatcher.py) and the expert-TP group gathers etp of them before GEMMs of width
f / etp, so every etp gives the same expert FLOPs per GPU, and MFU follows tokens/s."""
import pytest

from calculator import Workload
from calculator.memory.activations import dims
from calculator.model.presets import load_model
from calculator.timing import train_ops as T
from calculator.timing.inputs import TimingInputs
from calculator.timing.ops import expert_rows
from calculator.timing.step_time import estimate_time

DSV3 = load_model("deepseek-v3").spec


def test_rows_are_the_gpus_own_tokens_times_the_expert_tp_group():
    assert expert_rows(4096, 4, 4) == 4096  # etp = tp: all T, as the layer's other linears
    assert expert_rows(4096, 4, 1) == 1024  # etp = 1: the GPU's own T / tp
    assert expert_rows(4096, 4, 2) == 2048
    assert expert_rows(4096, 1, 1) == 4096


def _expert_flops(etp):
    w = Workload(seq_len=4096, gpu="h100-sxm", parallel=dict(tp=4, dp=64, ep=64, zero=3, etp=etp))
    d = dims(DSV3, w)
    moe = next(k for k in T.layer_groups(DSV3, 0, 61) if k[0])
    return sum(o.flops for o in T.layer_ops(DSV3, w, d, moe, TimingInputs())
               if o.name == "Routed experts (grouped GEMM)")


def test_expert_flops_per_gpu_do_not_depend_on_the_expert_tp():
    # 2·(T/tp)·k·(h·2f + f·h) forward, f = 2048, h = 7168, k = 8, T = 4096, tp = 4; backward twice that
    assert _expert_flops(1) == pytest.approx(_expert_flops(4), rel=1e-12)
    assert _expert_flops(2) == pytest.approx(_expert_flops(4), rel=1e-12)
    assert _expert_flops(1) == pytest.approx(3 * 2 * 1024 * 8 * (7168 * 2 * 2048 + 2048 * 7168), rel=1e-12)


def test_mfu_follows_tokens_per_second_across_expert_tp():
    times = [estimate_time(DSV3, Workload(seq_len=4096, gpu="h100-sxm", recompute="full",
                                          parallel=dict(tp=4, dp=64, ep=64, zero=3, etp=etp))) for etp in (1, 4)]
    ratio_mfu = times[0].mfu / times[1].mfu
    ratio_tps = times[0].tokens_per_s / times[1].tokens_per_s
    assert ratio_mfu == pytest.approx(ratio_tps, rel=0.01)  # was 2.4× apart: etp 1 priced all T at full width
