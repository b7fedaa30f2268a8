"""Megatron-FSDP (calculator/stacks/megatron_fsdp.py), each buffer against its rule in Megatron-LM d98e8a64
megatron/core/distributed/fsdp/src/megatron_fsdp/:
- param_and_grad_buffer.py _init_each_parameter_group_buffers: optim shards the main weights (and Adam's state),
  optim_grads also the main grads, optim_grads_params also the model weights, over the data-parallel group;
- AllGatherPipeline.reset(preserve_non_fsdp_units=True): the modules outside the TransformerLayer units stay
  gathered, in the parameters' dtype;
- GradReducePipeline: the unsharded gradient buckets wait (queue of ≥ 1e9 elements) for the end of the backward;
- --fp8-param-gather: the TE linears' model-weight buffer is 1 B ("float8"), their main grads bf16 under auto."""
import pytest

from calculator import Workload, stacks
from calculator.core.errors import InputError
from calculator.memory.megatron_core import padded_vocab
from calculator.model.parameters import count_parameters
from calculator.model.presets import load_model
from calculator.stacks import megatron, megatron_fsdp
from calculator.stages.estimate import estimate

LLAMA = load_model("llama-3.2-1b").spec  # tied embeddings, vocabulary 128,256
PAR = {"tp": 2, "dp": 4, "sequence_parallel": True}
FP32_MAIN = dict(params="bf16", grads="fp32", master_weights="fp32", optimizer_states="fp32")
CORE = dict(stack="megatron", impl="megatron-te", gpu="h100-sxm", seq_len=2048, parallel=PAR, precision=FP32_MAIN,
            megatron_fsdp="optim_grads_params")


def _stage(w, m=LLAMA):
    return estimate(m, Workload(**w), with_fits=False).stages[0]


def _terms(w, m=LLAMA):
    return {t.key: t.bytes for t in _stage(w, m).terms}


def _per_gpu(m=LLAMA) -> int:
    """Parameters of one TP rank of the one pipeline stage (the engine's StageShard.total)."""
    from calculator.memory.parallel import stage_shards
    return stage_shards(m, Workload(**CORE).parallel)[0].total


def test_the_workload_field_selects_the_megatron_fsdp_module():
    assert stacks.module(Workload(**CORE)) is megatron_fsdp
    assert stacks.module(Workload(**dict(CORE, megatron_fsdp="none"))) is megatron
    assert "megatron_fsdp" not in stacks.STACKS  # still stack megatron: the variant is the buffers


@pytest.mark.parametrize("strategy, stage", [("no_shard", 0), ("optim", 1), ("optim_grads", 2),
                                             ("optim_grads_params", 3)])
def test_each_strategy_shards_the_buffers_of_its_zero_stage(strategy, stage):
    n, d = _per_gpu(), 4
    t = _terms(dict(CORE, megatron_fsdp=strategy))
    assert t["weights"] == 2 * (-(-n // d) if stage >= 3 else n)  # model-weight buffer, bf16
    assert t["gradients"] == 4 * (-(-n // d) if stage >= 2 else n)  # main-grad buffer, fp32
    assert t["master_weights"] == 4 * (-(-n // d) if stage >= 1 else n)  # main-weight buffer, fp32
    n_opt = -(-n // d) if stage >= 1 else n
    assert 2 * 4 * n_opt <= t["optimizer_states"] <= 2 * 4 * n_opt + 4 * 1000  # Adam's m, v (+ its step counters)


def test_main_grads_follow_the_precision_not_megatrons_fp32_rule():
    bf16 = _terms(dict(CORE, precision=dict(FP32_MAIN, grads="bf16")))
    assert bf16["gradients"] == 2 * -(-_per_gpu() // 4)


def test_modules_outside_the_units_stay_gathered_in_the_weights_dtype():
    counts = count_parameters(LLAMA)
    rows = padded_vocab(LLAMA.vocab_size, 128, 2) - LLAMA.vocab_size
    table = -(-(counts.embedding + rows * LLAMA.hidden_size) // 2)  # tied: one table, split by TP
    t = _terms(CORE)
    assert t["sharding.mfsdp_non_units"] == 2 * (table + counts.final_norm)
    for strategy in ("no_shard", "optim", "optim_grads"):  # the model-weight buffer is unsharded: nothing gathered
        assert "sharding.mfsdp_non_units" not in _terms(dict(CORE, megatron_fsdp=strategy))


def test_an_untied_output_layer_is_gathered_with_the_embedding():
    m = LLAMA.model_copy(update={"tie_word_embeddings": False})
    rows = padded_vocab(m.vocab_size, 128, 2) - m.vocab_size
    table = -(-(m.vocab_size + rows) * m.hidden_size // 2)
    assert _terms(CORE, m)["sharding.mfsdp_non_units"] == 2 * (2 * table + count_parameters(m).final_norm)


def test_vocabulary_padding_rows_are_sharded_like_the_model():
    rows = padded_vocab(LLAMA.vocab_size, 1000, 2) - LLAMA.vocab_size  # 128,256 → 130,000: 1,744 rows
    n = rows * LLAMA.hidden_size // 2
    per = -(-n // 4)
    w = dict(CORE, make_vocab_size_divisible_by=1000)
    # weights 2 B, main grads 4 B, main weights 4 B, Adam m and v 4 B each, all over dp = 4
    assert rows == 1744 and _terms(w)["weights.vocab_padding"] == per * (2 + 4 + 4 + 8)
    assert _terms(dict(w, megatron_fsdp="optim"))["weights.vocab_padding"] == n * (2 + 4) + per * (4 + 8)


def _ctx(w, m=LLAMA):
    from calculator.memory.parallel import stage_shards
    from calculator.stacks.common import StackContext
    shard = stage_shards(m, w.parallel)[0]
    return StackContext(m, megatron_fsdp.states_workload(w), shard, 0, w.precision.grads, original=w)


def test_gradient_buckets_alive_at_the_end_of_the_backward():
    w = Workload(**CORE)
    end = megatron_fsdp.backward_end(_ctx(w))
    assert end.bytes == 4 * _per_gpu() and end.component == "transient"  # every group's fp32 bucket
    for strategy in ("no_shard", "optim"):  # gradients not sharded: accumulated in the persistent buffer
        assert megatron_fsdp.backward_end(_ctx(w.model_copy(update={"megatron_fsdp": strategy}))) is None


def test_units_gathered_again_for_the_backward_with_the_output_layers_gradient():
    w = Workload(**CORE)
    from calculator.stacks.common import layer_grad_params
    units = sum(layer_grad_params(LLAMA, 0, LLAMA.num_hidden_layers, 2, 1))  # 16 layers, all within 5e8 elements
    head = padded_vocab(LLAMA.vocab_size, 128, 2) // 2 * LLAMA.hidden_size  # tied: bf16 in AccumulateGrad
    gather = megatron_fsdp.backward_gather(_ctx(w))
    assert units < 5e8 and gather.bytes == 2 * units + 2 * head and gather.component == "activations"
    assert megatron_fsdp.backward_gather(_ctx(w.model_copy(update={"megatron_fsdp": "optim_grads"}))) is None


def test_the_end_of_the_backward_is_a_peak_of_its_own_when_activations_are_small():
    st = _stage(dict(CORE, seq_len=256))  # 1.2 B parameters over TP 2: 2.5 GB of fp32 buckets, small activations
    t = {x.key: x for x in st.terms}
    assert t["transient.mfsdp_grad_buckets"].bytes > 0 and "transient.mfsdp_backward_gather" not in t
    assert st.peak_allocated_bytes - _states(st) == 4 * _per_gpu()


def test_the_backward_gather_is_a_peak_of_its_own_beside_long_activations():
    w = dict(CORE, precision=dict(FP32_MAIN, grads="bf16"))  # bf16 buckets: the end of the backward is lower
    st = _stage(w)
    t = {x.key: x for x in st.terms}
    assert "transient.mfsdp_grad_buckets" not in t and t["transient.mfsdp_backward_gather"].bytes > 0
    acts = sum(x.bytes for x in st.terms if x.component == "activations")
    assert st.peak_allocated_bytes - _states(st) == acts + megatron_fsdp.backward_gather(_ctx(Workload(**w))).bytes


def _states(st) -> int:
    return sum(x.bytes for x in st.terms if x.component in (
        "weights", "master_weights", "gradients", "optimizer_states", "sharding_buffers")) + sum(
        x.bytes for x in st.terms if x.key in ("transient.te_workspace", "transient.te_dummy_wgrad", "transient.cublas"))


def test_fp8_parameters_hold_one_byte_shards_and_bf16_main_grads_under_auto():
    fp32_model = dict(params="fp32", grads="fp32", master_weights="fp32", optimizer_states="fp32",
                      activations="fp32")
    w = dict(CORE, gpu="b200", fp8="current", fp8_param_gather=True, precision=fp32_model)
    t = _terms(w)
    from calculator.memory.parallel import stage_shards
    lin = stage_shards(LLAMA, Workload(**w).parallel)[0].layer_linear
    assert t["weights.fp8_params"] == -(4 - 1) * -(-lin // 4)  # fp32 → 1 B per element of the shard
    assert t["gradients.fp8_params"] == -(4 - 2) * -(-lin // 4)  # fp32 → bf16 main grads of the FP8 groups
    assert "gradients.fp8_params" not in _terms(dict(w, precision=FP32_MAIN))  # bf16 model: bf16 is not auto's fp32


def test_megatron_fsdp_needs_stack_megatron_and_impl_megatron_te():
    with pytest.raises(InputError) as e:
        _stage(dict(CORE, stack="fsdp2", impl="hf"))
    assert e.value.field == "megatron_fsdp"


@pytest.mark.parametrize("update, field", [({"mtp_layers": 1}, "mtp_layers"),
                                           ({"precision_aware_optimizer": True}, "precision_aware_optimizer"),
                                           ({"parallel": dict(PAR, offload_optimizer=True)},
                                            "parallel.offload_optimizer")])
def test_what_megatron_fsdp_does_not_price_is_refused(update, field):
    with pytest.raises(InputError) as e:
        _stage(dict(CORE, **update))
    assert e.value.field == field


def test_a_zero_stage_under_stack_megatron_points_at_megatron_fsdp():
    with pytest.raises(InputError) as e:
        _stage(dict(CORE, megatron_fsdp="none", parallel=dict(PAR, zero=3)))
    assert e.value.field == "stack" and "megatron_fsdp" in str(e.value)
