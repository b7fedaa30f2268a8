"""Megatron-Core's precision-aware optimizer and bf16 gradient reduction (calculator/stacks/megatron.py
states_precision, calculator/stacks/megatron_buffers.py fused_adam_master), each against the source rule:
- megatron/training/arguments.py: bf16 training accumulates and reduces gradients in fp32 unless
  --grad-reduce-in-bf16 (accumulate_allreduce_grads_in_fp32 = False): the gradient buffer is 2 B per parameter;
- megatron/core/optimizer/distrib_optimizer.py: with --use-precision-aware-optimizer (no FP8, or delayed scaling)
  no fp32 master shard is built, TE's FusedAdam gets the bf16 shard and keeps master_param as int16 remainders
  (fused_adam.py _initialize_state, store_param_remainders): 2 B per parameter of the optimizer shard;
- Adam's moments in --exp-avg-dtype / --exp-avg-sq-dtype (precision.optimizer_states), fp32 without the flag."""
import pytest

from calculator import Workload
from calculator.core.errors import InputError
from calculator.core.workload import Precision
from calculator.model.presets import load_model
from calculator.stages.estimate import estimate

LLAMA = load_model("llama-3.2-1b").spec
MOE = load_model("deepseek-v2-lite").spec
PAR = {"tp": 2, "dp": 4, "sequence_parallel": True, "distributed_optimizer": True}
CORE = dict(stack="megatron", impl="megatron-te", gpu="h100-sxm", seq_len=2048, parallel=PAR)
BF16_MOMENTS = Precision(optimizer_states="bf16")


def _terms(m, w):
    return {t.key: t for t in estimate(m, w, with_fits=False).stages[0].terms}


def test_gradients_reduced_in_bf16_halve_the_gradient_buffer():
    fp32 = _terms(LLAMA, Workload(**CORE))["gradients"]
    bf16 = _terms(LLAMA, Workload(**CORE, grad_reduce_in_bf16=True))["gradients"]
    assert fp32.bytes == 2 * bf16.bytes and "bf16" in bf16.label


def test_fused_adam_keeps_master_weights_as_16_bit_remainders_of_the_shard():
    plain = _terms(LLAMA, Workload(**CORE))
    aware = _terms(LLAMA, Workload(**CORE, precision_aware_optimizer=True, precision=BF16_MOMENTS))
    # fp32 master shard (4 B) → int16 remainders (2 B) of the same distributed-optimizer shard
    assert aware["master_weights"].bytes * 2 == plain["master_weights"].bytes
    assert "remainders" in aware["master_weights"].label
    # Adam's two moments: fp32 → bf16
    assert plain["optimizer_states"].bytes - aware["optimizer_states"].bytes == \
        plain["master_weights"].bytes // 4 * 2 * 2
    assert aware["gradients"].bytes == plain["gradients"].bytes  # the gradient buffer stays fp32 without the flag


def test_expert_parameters_are_sharded_over_the_expert_data_parallel_group():
    par = dict(PAR, ep=8, etp=1)  # 8 GPUs: experts over dp·tp / (ep·etp) = 1 rank, dense over dp = 4
    w = Workload(**dict(CORE, parallel=par), precision_aware_optimizer=True)
    plain = _terms(MOE, Workload(**dict(CORE, parallel=par)))
    aware = _terms(MOE, w)
    assert aware["master_weights"].bytes * 2 == plain["master_weights"].bytes


def test_an_fp8_recipe_other_than_delayed_keeps_megatrons_fp32_master_shards():
    w = dict(CORE, gpu="b200", fp8="mxfp8", precision_aware_optimizer=True)
    t = _terms(LLAMA, Workload(**w))
    assert "remainders" not in t["master_weights"].label
    assert t["master_weights"].bytes == _terms(LLAMA, Workload(**dict(w, precision_aware_optimizer=False)))[
        "master_weights"].bytes


@pytest.mark.parametrize("update, field", [
    ({"precision_aware_optimizer": True, "parallel": dict(PAR, distributed_optimizer=False)},
     "precision_aware_optimizer"),
    ({"precision_aware_optimizer": True, "optimizer": "sgd"}, "precision_aware_optimizer"),
    ({"precision": BF16_MOMENTS}, "precision.optimizer_states"),
    ({"precision_aware_optimizer": True, "stack": "fsdp2"}, "precision_aware_optimizer"),
])
def test_what_megatron_refuses_is_named(update, field):
    with pytest.raises(InputError) as e:
        estimate(LLAMA, Workload(**dict(CORE, **update)), with_fits=False)
    assert e.value.field == field


def test_optimizer_cpu_offload_keeps_the_gradient_buffer_on_the_gpu():
    """--optimizer-cpu-offload (HybridDeviceOptimizer, megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py):
    the master weights and Adam state go to pinned host memory, gradients are copied out of the DDP buffer, which
    stays on the GPU — unlike ZeRO-Offload, whose gradients leave the GPU too."""
    plain = estimate(LLAMA, Workload(**CORE, precision_aware_optimizer=True), with_fits=False)
    off = estimate(LLAMA, Workload(**dict(CORE, parallel=dict(PAR, offload_optimizer=True)),
                                   precision_aware_optimizer=True), with_fits=False)
    on_gpu = {t.key: t.bytes for t in off.stages[0].terms}
    assert on_gpu["gradients"] == {t.key: t.bytes for t in plain.stages[0].terms}["gradients"]
    assert "master_weights" not in on_gpu and "optimizer_states" not in on_gpu
    assert "transient.grad_offload" not in on_gpu
    assert {t.key for t in off.stages[0].host_terms} == {"master_weights", "optimizer_states"}
    deepspeed = estimate(LLAMA, Workload(gpu="h100-sxm", seq_len=2048, parallel={"dp": 8, "zero": 2,
                                                                                "offload_optimizer": True}),
                         with_fits=False)
    assert "gradients" not in {t.key for t in deepspeed.stages[0].terms if t.bytes}  # ZeRO-Offload moves them


def test_the_export_adds_the_precision_aware_optimizer_that_cpu_offload_asserts():
    from calculator.exports import export
    w = Workload(**dict(CORE, parallel=dict(PAR, offload_optimizer=True)))
    text = export(LLAMA, w, "megatron").text
    assert "--optimizer-cpu-offload" in text and "--use-precision-aware-optimizer" in text


def test_the_offload_fraction_splits_master_weights_and_adam_state_between_host_and_gpu():
    """--optimizer-offload-fraction f (hybrid_optimizer.py _get_sub_optimizer_param_groups: parameters in order
    until f of the elements go to the CPU optimizer): f of the master weights and Adam state in host RAM, the rest
    on the GPU; the sum is the whole shard's."""
    def run(f):
        w = Workload(**dict(CORE, parallel=dict(PAR, offload_optimizer=True)), optimizer_offload_fraction=f)
        st = estimate(LLAMA, w, with_fits=False).stages[0]
        gpu = {t.key: t.bytes for t in st.terms}
        host = {t.key: t.bytes for t in st.host_terms}
        return gpu, host
    full_gpu, full_host = run(1.0)
    half_gpu, half_host = run(0.5)
    for key in ("master_weights", "optimizer_states"):
        assert key not in full_gpu and half_host[key] == full_host[key] // 2
        assert half_gpu[key] + half_host[key] == full_host[key]
    with pytest.raises(InputError) as e:
        estimate(LLAMA, Workload(**CORE, optimizer_offload_fraction=0.5), with_fits=False)
    assert e.value.field == "optimizer_offload_fraction"
