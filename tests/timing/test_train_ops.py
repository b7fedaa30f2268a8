"""The MoE layer's host wait (calculator.timing.train_ops.moe_layer_host_s): the fitted per-layer constant with
Megatron-Core's layers, less the share a per-layer CUDA graph of the router and the dispatcher's preprocess replays
(moe_graph_captured_share), plus the per-local-expert GEMM launches (moe_expert_launch_s), each hand-computed here;
none under a full-iteration graph or outside Megatron-Core."""
import pytest

from calculator.core.workload import Workload
from calculator.memory.activations import dims
from calculator.model.presets import load_model
from calculator.timing import train_ops as T
from calculator.timing.inputs import TimingInputs
from calculator.timing.roofline import Op


def _op(name: str, phase: str, host_ops: int) -> Op:
    return Op(name, phase, "elementwise", 0.0, 0.0, host_ops, "", "")


# a MoE block as the fused (megatron-te) path counts it: router 8 / 16, grouped GEMMs 2 / 4, permute + combine 4 / 4
BLOCK = [_op("Router", "forward", 8), _op("Routed experts (grouped GEMM)", "forward", 2),
         _op("Expert dispatch, gate and combine", "forward", 4), _op("Router", "backward", 16),
         _op("Routed experts (grouped GEMM)", "backward", 4), _op("Expert dispatch, gate and combine", "backward", 4),
         _op("QKV projection", "forward", 50)]  # not the MoE block: left out


def test_the_captured_share_counts_the_router_and_the_preprocess_operators():
    inputs = TimingInputs(host_op_us=10.0, host_backward_op_us=5.0)
    # captured: router 8·10 + 16·5 + preprocess 2·10 = 180 µs
    # block: (8 + 2 + 4)·10 + (16 + 4 + 4)·5 + 20 = 280 µs
    assert T.MOE_PREPROCESS_OPS == 2
    assert T.moe_graph_captured_share(BLOCK, inputs) == pytest.approx(180 / 280)
    assert T.moe_graph_captured_share([_op("QKV projection", "forward", 50)], inputs) == 0.0


def test_the_per_expert_gemm_launches():
    inputs = TimingInputs(host_op_us=10.0, host_backward_op_us=5.0)
    # 8 local experts × (2 forward GEMMs · 10 µs + 4 backward GEMMs · 5 µs) = 8 × 40 µs = 320 µs
    assert (T.MOE_EXPERT_FWD_OPS, T.MOE_EXPERT_BWD_OPS) == (2, 4)
    assert T.moe_expert_launch_s(inputs, 8) == pytest.approx(320e-6)
    m = load_model("qwen3-30b-a3b").spec  # 128 experts
    w = Workload(micro_batch=1, seq_len=4096, gpu="h100-sxm", impl="megatron-te",
                 parallel={"dp": 16, "ep": 16})
    assert T.local_experts(m, w) == 8
    assert T.moe_layer_host_s(w, inputs, BLOCK, 8) == pytest.approx(T.MEGATRON_MOE_LAYER_HOST_S + 320e-6)


def test_the_moe_host_wait_with_and_without_graphs():
    w = Workload(micro_batch=1, seq_len=4096, gpu="h100-sxm", impl="megatron-te")
    base = TimingInputs(host_op_us=10.0, host_backward_op_us=5.0)
    assert T.moe_layer_host_s(w, base, BLOCK) == T.MEGATRON_MOE_LAYER_HOST_S
    graphed = base.model_copy(update={"moe_router_cuda_graph": True})
    assert T.moe_layer_host_s(w, graphed, BLOCK) == pytest.approx(T.MEGATRON_MOE_LAYER_HOST_S * (1 - 180 / 280))
    full = graphed.model_copy(update={"full_iteration_cuda_graph": True})
    assert T.moe_layer_host_s(w, full, BLOCK) == 0.0
    assert T.moe_layer_host_s(w.model_copy(update={"impl": "hf"}), graphed, BLOCK) == 0.0
    given = graphed.model_copy(update={"moe_layer_host_ms": 3.0})
    assert T.moe_layer_host_s(w, given, BLOCK) == pytest.approx(3e-3)


def test_a_moe_layer_carries_the_wait_in_its_serial_column():
    m = load_model("qwen3-30b-a3b").spec
    w = Workload(micro_batch=1, seq_len=4096, gpu="h100-sxm", impl="megatron-te")
    d = dims(m, w)
    key = next(k for k in T.layer_groups(m, 0, m.num_hidden_layers) if k[0])
    base, _ = T.layer_parts(m, w, d, key)
    from calculator.model.presets import get_gpu
    from calculator.timing.step_time import rates_for
    for inputs in (TimingInputs(), TimingInputs(moe_router_cuda_graph=True)):
        r, fp32 = rates_for(get_gpu("h100-sxm"), w, inputs)
        st = T.layer_stats(m, w, d, key, r, fp32, inputs)
        assert st[T.SERIAL] == pytest.approx(T.moe_layer_host_s(w, inputs, base, T.local_experts(m, w)))
    share = T.moe_graph_captured_share(base, TimingInputs())
    assert 0 < share < 1
