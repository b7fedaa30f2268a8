"""calculator/stages/held.py: the model states one GPU of a training stage holds for the whole step."""
from calculator import Workload
from calculator.memory.parallel import stage_shards
from calculator.model.presets import load_model
from calculator.stages.held import lora_model_states, add_offload, states_of_shard
from calculator.stages.terms import TermList

LLAMA_8B = load_model("llama-3.1-8b").spec
N_8B = 8_030_261_248  # sum(p.numel()) of transformers' LlamaForCausalLM built from the config


def _states(w: Workload) -> dict[str, int]:
    shard = stage_shards(LLAMA_8B, w.parallel)[0]
    terms, _, _ = states_of_shard(LLAMA_8B, w.parallel, w.precision, w.optimizer, shard)
    return {x.component: x.bytes for x in terms}


def test_mixed_precision_adamw_on_one_gpu_is_16_bytes_per_parameter():
    states = _states(Workload())
    n_tensors = stage_shards(LLAMA_8B, Workload().parallel)[0].tensors
    assert states["weights"] == 2 * N_8B  # bf16
    assert states["master_weights"] == 4 * N_8B  # fp32 master copy
    assert states["gradients"] == 2 * N_8B
    assert states["optimizer_states"] == 8 * N_8B + 4 * n_tensors  # m and v in fp32, one fp32 step per tensor


def test_zero_stages_shard_optimizer_then_gradients_then_weights_over_dp():
    dp = 8
    z1, z2, z3 = (_states(Workload(parallel={"dp": dp, "zero": z})) for z in (1, 2, 3))
    ceil = -(-N_8B // dp)
    assert (z1["master_weights"], z1["gradients"], z1["weights"]) == (4 * ceil, 2 * N_8B, 2 * N_8B)
    assert (z2["gradients"], z2["weights"]) == (2 * ceil, 2 * N_8B)
    assert z3["weights"] == 2 * ceil


def test_lora_trains_only_the_adapters_and_keeps_the_base_frozen():
    w = Workload(finetune="lora", lora_rank=16)
    t = TermList()
    n_trainable, largest, _ = lora_model_states(t, LLAMA_8B, w, stage_shards(LLAMA_8B, w.parallel)[0])
    by = t.by_component
    assert 0 < n_trainable < N_8B // 100
    assert by["gradients"] == 4 * n_trainable  # PEFT keeps the adapters (and their gradients) in fp32
    assert by["weights"] >= 2 * N_8B  # the frozen bf16 base plus the adapters
    assert largest == 16 * 14336  # rank × the widest adapted linear (the MLP's 14336)


def test_cpu_offload_moves_the_states_to_host_and_keeps_one_unit_of_gradients():
    w = Workload(parallel={"dp": 8, "zero": 3, "offload_optimizer": True, "offload_params": True})
    shard = stage_shards(LLAMA_8B, w.parallel)[0]
    t = TermList()
    t.extend(states_of_shard(LLAMA_8B, w.parallel, w.precision, w.optimizer, shard)[0])
    add_offload(t, w, shard)
    on_gpu = {x.component for x in t.items if x.bytes}
    assert on_gpu == {"transient"}
    assert {x.key for x in t.host} == {"weights", "master_weights", "gradients", "optimizer_states"}
    assert t.by_component["transient"] == 2 * shard.largest_unit  # bf16 gradients of the largest unit
