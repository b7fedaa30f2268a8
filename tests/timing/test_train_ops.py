"""What a MoE layer adds to its STATS under Megatron-Core (calculator.timing.train_ops.moe_columns): the per-expert
GEMM launches and the fitted host time on the host, its forward as one segment between host waits, and its backward
with the replay as another when the recompute replays the dispatcher (calculator.timing.moe_sync)."""
import numpy as np
import pytest

from calculator.core.workload import Workload
from calculator.memory.activations import dims
from calculator.model.presets import get_gpu, load_model
from calculator.timing import moe_sync as S
from calculator.timing import train_ops as T
from calculator.timing.inputs import TimingInputs
from calculator.timing.step_time import compute_seconds, rates_for

M = load_model("qwen3-30b-a3b").spec  # 48 MoE layers, 128 experts


def _layer(w: Workload, inputs: TimingInputs):
    d = dims(M, w)
    key = next(k for k in T.layer_groups(M, 0, M.num_hidden_layers) if k[0])
    r, fp32 = rates_for(get_gpu(w.gpu), w, inputs)
    base, extra = T.layer_parts(M, w, d, key)
    return base, extra[T.op_mode(w, inputs)], T.layer_stats(M, w, d, key, r, fp32, inputs), (d, r, fp32)


def test_a_moe_layers_forward_is_one_segment_with_its_host_work():
    w = Workload(micro_batch=1, seq_len=4096, gpu="h100-sxm", impl="megatron-te", parallel={"dp": 16, "ep": 16})
    inputs = TimingInputs()
    base, replay, st, (d, r, fp32) = _layer(w, inputs)
    assert not S.replays_wait(replay)  # selective recompute's default replays the attention core only
    fwd = T.stats([o for o in base if o.phase == "forward"], r, fp32, inputs, d)
    plain = T.stats(base, r, fp32, inputs, d) + T.stats(replay, r, fp32, inputs, d)
    launch_f, launch_b = S.expert_launch_host_s(w, inputs, 8)  # 128 experts / EP 16
    host_f = fwd[T.HOST] + launch_f + S.MEGATRON_MOE_LAYER_HOST_S
    assert st[T.HOST] == pytest.approx(plain[T.HOST] + launch_f + launch_b + S.MEGATRON_MOE_LAYER_HOST_S)
    assert st[T.GPU] == pytest.approx(plain[T.GPU])
    assert (st[T.SEG], st[T.SEG_GPU], st[T.SEG_HOST]) == pytest.approx((max(fwd[T.GPU], host_f), fwd[T.GPU], host_f))
    # the micro-batch: the forward segment, then the backward under one max — never less than one max of the sums
    rest = max(st[T.GPU] - fwd[T.GPU], st[T.HOST] - host_f)
    assert compute_seconds(st) == pytest.approx(max(fwd[T.GPU], host_f) + rest)
    assert compute_seconds(st) >= max(st[T.GPU], st[T.HOST])


def test_full_recompute_replays_the_wait_in_the_backward():
    w = Workload(micro_batch=1, seq_len=4096, gpu="h100-sxm", impl="megatron-te", recompute="full",
                 parallel={"dp": 16, "ep": 16})
    base, replay, st, _ = _layer(w, TimingInputs())
    assert S.replays_wait(replay)
    assert st[T.SEG_GPU] == pytest.approx(st[T.GPU])  # forward + backward with its replay: the whole layer
    assert st[T.SEG_HOST] == pytest.approx(st[T.HOST])
    assert compute_seconds(st) == pytest.approx(st[T.SEG])


def test_no_segments_without_a_wait():
    for w, inputs in ((Workload(micro_batch=1, seq_len=4096, gpu="h100-sxm", impl="megatron-te"),
                       TimingInputs(full_iteration_cuda_graph=True)),
                      (Workload(micro_batch=1, seq_len=4096, gpu="h100-sxm", impl="hf"), TimingInputs())):
        _, _, st, _ = _layer(w, inputs)
        assert np.all(st[[T.SEG, T.SEG_GPU, T.SEG_HOST]] == 0.0)
        assert compute_seconds(st) == pytest.approx(max(st[T.GPU], st[T.HOST]))
