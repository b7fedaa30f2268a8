"""Megatron-Core's MoE host wait (calculator.timing.moe_sync): where the layers wait on the GPU, which recompute
replays the wait, the segments' arithmetic, the fitted host time less what a per-layer CUDA graph of the router and
the dispatcher's preprocess replays, and the per-local-expert GEMM launches — each hand-computed here."""
import pytest

from calculator.core.workload import Workload
from calculator.model.presets import load_model
from calculator.timing import moe_sync as S
from calculator.timing.inputs import TimingInputs
from calculator.timing.roofline import Op


def _op(name: str, phase: str, host_ops: int) -> Op:
    return Op(name, phase, "elementwise", 0.0, 0.0, host_ops, "", "")


# a MoE block as the fused (megatron-te) path counts it: router 8 / 16, grouped GEMMs 2 / 4, permute + combine 4 / 4
BLOCK = [_op("Router", "forward", 8), _op("Routed experts (grouped GEMM)", "forward", 2),
         _op("Expert dispatch, gate and combine", "forward", 4), _op("Router", "backward", 16),
         _op("Routed experts (grouped GEMM)", "backward", 4), _op("Expert dispatch, gate and combine", "backward", 4),
         _op("QKV projection", "forward", 50)]  # not the MoE block: left out
W = Workload(micro_batch=1, seq_len=4096, gpu="h100-sxm", impl="megatron-te")


def test_megatron_cores_moe_layers_wait_unless_graphed_or_padded_to_capacity():
    inputs = TimingInputs()
    assert S.syncs(W, inputs)  # alltoall: the splits copied to the host and waited on
    assert S.syncs(W.model_copy(update={"moe_dispatcher": "flex"}), inputs)  # DeepEP: the CPU waits in dispatch
    assert S.syncs(W.model_copy(update={"moe_dispatcher": "allgather"}), inputs)  # local_map.sum().cpu()
    assert not S.syncs(W.model_copy(update={"moe_pad_to_capacity": True, "moe_capacity_factor": 1.0}), inputs)
    assert S.syncs(W.model_copy(update={"moe_pad_to_capacity": True, "moe_capacity_factor": 1.0,
                                        "moe_dispatcher": "flex"}), inputs)  # DeepEP waits whatever the capacity
    assert not S.syncs(W, TimingInputs(full_iteration_cuda_graph=True))
    assert not S.syncs(W.model_copy(update={"impl": "hf"}), inputs)


def test_a_replay_of_the_dispatcher_replays_the_wait():
    assert S.replays_wait([_op("Expert dispatch, gate and combine", "recompute", 4)])
    assert not S.replays_wait([_op("Routed experts' activation", "recompute", 1),
                               _op("Attention core", "recompute", 1)])
    assert not S.replays_wait([])


def test_each_segment_costs_the_slower_of_its_gpu_and_host_time():
    # forward: GPU 3 ms, host 5 ms (host-bound); backward with its replay: GPU 6 ms, host 2 ms (GPU-bound)
    assert S.segment_columns((3e-3, 5e-3), (6e-3, 2e-3), replayed=False) == pytest.approx((5e-3, 3e-3, 5e-3))
    assert S.segment_columns((3e-3, 5e-3), (6e-3, 2e-3), replayed=True) == pytest.approx((11e-3, 9e-3, 7e-3))
    # the EP overlap's merged schedule: forward and backward between the same two waits, max(9, 7) ms
    assert S.segment_columns((3e-3, 5e-3), (6e-3, 2e-3), replayed=False, paired=True) == pytest.approx(
        (9e-3, 9e-3, 7e-3))


def test_the_captured_share_counts_the_router_and_the_preprocess_operators():
    inputs = TimingInputs(host_op_us=10.0, host_backward_op_us=5.0)
    # captured: router 8·10 + 16·5 + preprocess 2·10 = 180 µs
    # block: (8 + 2 + 4)·10 + (16 + 4 + 4)·5 + 20 = 280 µs
    assert S.MOE_PREPROCESS_OPS == 2
    assert S.moe_graph_captured_share(BLOCK, inputs) == pytest.approx(180 / 280)
    assert S.moe_graph_captured_share([_op("QKV projection", "forward", 50)], inputs) == 0.0


def test_the_per_expert_gemm_launches():
    inputs = TimingInputs(host_op_us=10.0, host_backward_op_us=5.0)
    # 8 local experts × 2 forward GEMMs · 10 µs = 160 µs; 8 × 4 backward GEMMs · 5 µs = 160 µs
    assert (S.MOE_EXPERT_FWD_OPS, S.MOE_EXPERT_BWD_OPS) == (2, 4)
    assert S.expert_launch_host_s(W, inputs, 8) == pytest.approx((160e-6, 160e-6))
    assert S.expert_launch_host_s(W.model_copy(update={"impl": "hf"}), inputs, 8) == (0.0, 0.0)
    assert S.expert_launch_host_s(W, TimingInputs(full_iteration_cuda_graph=True), 8) == (0.0, 0.0)
    m = load_model("qwen3-30b-a3b").spec  # 128 experts
    assert S.local_experts(m, Workload(micro_batch=1, seq_len=4096, gpu="h100-sxm", impl="megatron-te",
                                       parallel={"dp": 16, "ep": 16})) == 8


def test_the_moe_host_time_with_and_without_graphs():
    base = TimingInputs(host_op_us=10.0, host_backward_op_us=5.0)
    assert S.moe_layer_host_s(W, base, BLOCK) == S.MEGATRON_MOE_LAYER_HOST_S
    graphed = base.model_copy(update={"moe_router_cuda_graph": True})
    assert S.moe_layer_host_s(W, graphed, BLOCK) == pytest.approx(S.MEGATRON_MOE_LAYER_HOST_S * (1 - 180 / 280))
    full = graphed.model_copy(update={"full_iteration_cuda_graph": True})
    assert S.moe_layer_host_s(W, full, BLOCK) == 0.0
    assert S.moe_layer_host_s(W.model_copy(update={"impl": "hf"}), graphed, BLOCK) == 0.0
    given = graphed.model_copy(update={"moe_layer_host_ms": 3.0})
    assert S.moe_layer_host_s(W, given, BLOCK) == pytest.approx(3e-3)
