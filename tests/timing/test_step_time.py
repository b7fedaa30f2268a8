"""Step time, throughput, MFU and cost (calculator.timing.step_time) with hand-checked FLOP counts."""
import pytest

from calculator.core.errors import InputError
from calculator.model.parameters import count_parameters
from calculator.model.presets import get_gpu, load_model
from calculator.timing.step_time import cost_per_million, estimate_time
from calculator.timing.inputs import TimingInputs
from calculator.core.workload import RECIPES, Workload

PURE = RECIPES["pure-bf16"][1]
MATMULS = ("QKV projection", "Output projection", "MLP up/gate projections", "MLP down projection", "LM head")


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama-3.1-8b").spec


def _train(**kw):
    base = dict(mode="train", micro_batch=1, seq_len=4096, precision=PURE, gpu="h200")
    base.update(kw)
    return Workload(**base)


def test_dense_matmuls_are_six_n_d(llama8b):
    """Kaplan et al. / Narayanan et al.: a training step's matmuls are 6 · N · tokens, N without the embedding
    lookup and the norms (the untied LM head is a matmul): 8,030,261,248 − 525,336,576 − 266,240 parameters."""
    t = estimate_time(llama8b, _train())
    flops = sum(r.flops for r in t.roofline if r.name in MATMULS)
    c = count_parameters(llama8b)
    n_matmul = c.total - c.embedding - sum(layer.norms for layer in c.layers) - c.final_norm
    assert n_matmul == 7_504_658_432
    assert flops == 6 * n_matmul * 4096


def test_attention_flops_and_mfu(llama8b):
    t = estimate_time(llama8b, _train())
    fwd = next(r for r in t.roofline if r.name.startswith("Attention core") and r.phase == "forward")
    assert fwd.flops == 32 * 2 * 32 * (4096 * 4097 / 2) * 256  # layers · 2 · heads · causal pairs · (d_qk + d_v)
    bwd = next(r for r in t.roofline if r.name.startswith("Attention core") and r.phase == "backward")
    assert bwd.flops == 2.5 * fwd.flops
    model = 6 * 7_504_658_432 * 4096 + 3.5 * fwd.flops
    elementwise = sum(r.flops for r in t.roofline if r.name not in MATMULS and not r.name.startswith("Attention"))
    assert t.model_flops == pytest.approx(model + elementwise - next(
        r.flops for r in t.roofline if r.name == "Optimizer step"))
    assert t.mfu == pytest.approx(t.model_flops / (989.4e12 * t.step_time_s))
    assert 0.3 < t.mfu < 0.6  # the measured step (0.431 s) is 49% MFU


def test_full_recompute_replays_the_forward_but_the_last_matmul(llama8b):
    none = estimate_time(llama8b, _train())
    full = estimate_time(llama8b, _train(recompute="full"))
    fwd = sum(r.flops for r in none.roofline if r.phase == "forward" and r.name not in (
        "Embedding", "Final norm", "LM head", "Loss (fp32 cross entropy)", "MLP down projection"))
    re = sum(r.flops for r in full.roofline if r.phase == "recompute")
    assert re == pytest.approx(fwd - sum(  # half of the residual adds' (zero) FLOPs: nothing else differs
        r.flops for r in none.roofline if r.name == "Residual adds" and r.phase == "forward") / 2)
    assert full.step_time_s > none.step_time_s * 1.15
    assert full.model_flops == pytest.approx(none.model_flops)  # MFU ignores recomputation, HFU does not
    assert full.hfu > full.mfu


def test_tokens_per_second_and_cost(llama8b):
    t = estimate_time(llama8b, _train(micro_batch=2, parallel={"dp": 4, "num_microbatches": 3}),
                      TimingInputs(price_per_gpu_hour=2.0))
    assert t.tokens_per_step == 2 * 4096 * 3 * 4
    assert t.tokens_per_s == pytest.approx(t.tokens_per_step / t.step_time_s)
    assert t.cost_per_million_tokens == pytest.approx(2.0 * 4 * t.step_time_s / 3600 / t.tokens_per_step * 1e6)
    assert cost_per_million(3.0, 8, 1.0, 1e6) == pytest.approx(3.0 * 8 / 3600)
    assert cost_per_million(None, 8, 1.0, 1e6) is None


def test_pipeline_bubble_and_communication_rows(llama8b):
    t = estimate_time(llama8b, _train(parallel={"tp": 2, "pp": 2, "dp": 2, "num_microbatches": 8,
                                                "sequence_parallel": True}))
    assert t.bubble_fraction == pytest.approx(1 / 8)  # (p − 1) / m
    names = {r.name for r in t.roofline if r.bound == "communication"}
    assert "TP all-gather (NVLink 4)" in names and "TP reduce-scatter (NVLink 4)" in names
    assert "PP send/recv (NVLink 4)" in names and "DP all-reduce (NVLink 4)" in names
    # 16 layers per stage, 2 per layer forward (no recompute): 32 all-gathers of b·s·h bf16 over 2 ranks
    ag = next(r for r in t.roofline if r.name == "TP all-gather (NVLink 4)" and r.phase == "forward")
    assert ag.bytes == pytest.approx(32 * (2 * 4096 * 4096) / 2 * 8)  # × 8 micro-batches


def test_groups_beyond_a_node_use_infiniband(llama8b):
    t = estimate_time(llama8b, _train(parallel={"tp": 8, "dp": 4, "zero": 1, "sequence_parallel": True}))
    assert any(r.name.startswith("DP reduce-scatter (InfiniBand)") for r in t.roofline)
    assert any(r.name.startswith("TP all-gather (NVLink") for r in t.roofline)


def test_zero3_moves_more_than_ddp(llama8b):
    ddp = estimate_time(llama8b, _train(parallel={"dp": 8}))
    z3 = estimate_time(llama8b, _train(parallel={"dp": 8, "zero": 3}))
    vol = lambda t: sum(r.bytes for r in t.roofline if r.bound == "communication")  # noqa: E731
    assert vol(z3) == pytest.approx(1.5 * vol(ddp), rel=0.01)  # ZeRO §7: 3Ψ against 2Ψ


def test_moe_counts_only_the_active_experts():
    m = load_model("qwen3-30b-a3b").spec
    t = estimate_time(m, _train(micro_batch=1, seq_len=2048))
    experts = next(r for r in t.roofline if r.name == "Routed experts (grouped GEMM)" and r.phase == "forward")
    h, f, k = m.hidden_size, m.moe_intermediate_size, m.num_experts_per_tok
    assert experts.flops == m.num_hidden_layers * 2 * 2048 * k * (h * 2 * f + f * h)


def test_inference_prefill_and_decode(llama8b):
    t = estimate_time(llama8b, Workload(mode="infer", micro_batch=1, seq_len=4096, gen_tokens=128,
                                        precision=PURE, gpu="h200"))
    assert t.ttft_s < t.step_time_s
    assert t.step_time_s == pytest.approx(t.ttft_s + 127 * t.tpot_s)
    # a decode step reads every weight at least once: 16 GB at 4.8 TB/s is ≥ 3.3 ms
    assert t.tpot_s > 2 * 8_030_261_248 / 4.8e12
    assert t.tokens_per_s == pytest.approx(128 / t.step_time_s)
    decode = [r for r in t.roofline if r.phase == "decode" and r.name == "MLP down projection"]
    assert decode and decode[0].bound == "memory"
    prefill = [r for r in t.roofline if r.phase == "prefill" and r.name == "MLP down projection"]
    assert prefill[0].bound == "compute"


def test_faster_gpu_is_faster(llama8b):
    h100 = estimate_time(llama8b, _train(gpu="h100-sxm"))
    b200 = estimate_time(llama8b, _train(gpu="b200"))
    assert b200.step_time_s < h100.step_time_s


def test_bad_or_missing_inputs_name_the_field(llama8b):
    with pytest.raises(InputError, match="gpu"):
        estimate_time(llama8b, _train(gpu=None))
    with pytest.raises(InputError, match="peak_tflops: .*V100"):
        estimate_time(llama8b, _train(gpu="v100-32gb"))
    fp16 = RECIPES["pure-bf16"][1].model_copy(update={"params": "fp16", "grads": "fp16", "optimizer_states": "fp16",
                                                      "activations": "fp16"})
    assert estimate_time(llama8b, _train(gpu="v100-32gb", precision=fp16)).step_time_s > 0
    with pytest.raises(ValueError):
        TimingInputs(matmul_efficiency=1.5)


def test_gpu_catalogue_has_speeds_with_sources():
    h200 = get_gpu("h200")
    assert h200.dense_bf16_flops == 989.4e12 and h200.dense_fp8_flops == 1978.9e12
    assert h200.memory_bandwidth_bytes_per_s == 4.8e12 and h200.interconnect_bytes_per_s == 900e9
    from calculator.model.presets import list_gpus
    for g in list_gpus():
        assert g.memory_bandwidth_bytes_per_s and g.speed_source.startswith("http") and g.speed_basis, g.id
        # a GPU whose maker publishes no FP16 tensor figure says so (DGX Spark: FP4 only); its time is refused
        assert g.dense_fp16_flops or "no BF16/FP16" in g.speed_basis, g.id
        if g.dense_fp8_flops:
            assert g.dense_fp8_flops == pytest.approx(2 * g.dense_fp16_flops, rel=0.02), g.id  # dense, not sparse


def test_the_experts_optimizer_step_is_sharded_over_the_expert_data_parallel_group():
    """Megatron's distributed optimizer shards the dense parameters over dp·cp and the routed experts over their
    expert-data-parallel group dp·cp·tp / (ep·etp): Qwen3-30B-A3B on 8 GPUs at TP2 DP4 EP8 keeps every one of a
    GPU's 16 experts × 48 layers whole (expert DP 1), at DP8 EP4 splits them over two ranks."""
    from calculator.core.workload import Parallelism
    from calculator.memory.parallel import stage_shards
    from calculator.timing.step_time import expert_dp, optimizer_params
    m = load_model("qwen3-30b-a3b").spec
    par = Parallelism(tp=2, dp=4, ep=8, etp=1, sequence_parallel=True, distributed_optimizer=True)
    shard = stage_shards(m, par)[0]
    assert shard.experts == 48 * 16 * 3 * 2048 * 768  # 16 local experts, gate / up / down of 2048 × 768
    assert expert_dp(4, 1, 2, 8, 1) == 1 and expert_dp(8, 1, 1, 4, 1) == 2
    n = optimizer_params(shard.dense, shard.experts, 4, 1, True)
    assert n == -(-shard.dense // 4) + shard.experts
    assert optimizer_params(shard.dense, shard.experts, 4, 1, False) == shard.total
    t = estimate_time(m, _train(gpu="h100-sxm", parallel=par))
    opt = next(r for r in t.roofline if r.name == "Optimizer step")
    assert opt.flops == 12.0 * n  # 12 FLOPs a parameter (train_ops.optimizer_op)
