"""The estimate as a whole: the seeds' worked examples, model states per recipe, sharding, pipeline stages."""
import pytest

from calculator import GenericModel, InputError, Workload, estimate
from calculator.model.presets import load_model
from calculator.core.workload import RECIPES

GB, MiB = 1e9, 2**20
LLAMA8B = 8_030_261_248


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama-3.1-8b").spec


def test_seed_000_textbook_example(llama8b):
    """Seed 000: 8B·32L, bf16, Adam, selective recompute, s = 4096, textbook activations, flat 10% overhead."""
    w = Workload(mode="train", seq_len=4096, micro_batch=1, recompute="selective", activation_model="textbook",
                 zero_grad_set_to_none=False)  # the seed holds gradients for the whole step
    c = estimate(llama8b, w).components
    assert round(c["weights"] / GB, 1) == 16.1
    assert round(c["gradients"] / GB, 1) == 16.1
    assert round((c["master_weights"] + c["optimizer_states"]) / GB, 1) == 96.4  # "Adam 12N"
    assert round(c["activations"] / GB, 1) == 18.3
    assert round(c["framework_overhead"] / GB, 1) == 14.7
    assert round(estimate(llama8b, w).total_bytes / GB, 1) == 161.4


def test_seed_004_generic_network():
    """Seed 004: 20M params, batch 32, 1M activation elements per sample, fp32, no optimizer → 274.7 MiB."""
    w = Workload(mode="train", micro_batch=32, optimizer="none",
                 precision={"params": "fp32", "grads": "fp32", "master_weights": None, "activations": "fp32"})
    e = estimate(GenericModel(total_params=20_000_000, activation_elements_per_sample=1_000_000), w)
    assert e.peak_allocated_bytes == 288_000_000
    assert round(e.peak_allocated_bytes / MiB, 1) == 274.7
    assert e.components["weights"] == e.components["gradients"] == 80_000_000


@pytest.mark.parametrize("recipe,bytes_per_param", [("megatron", 18), ("mixed-bf16", 16), ("amp-fp32", 16),
                                                    ("pure-bf16", 8), ("fp32", 16)])
def test_recipes_bytes_per_param(llama8b, recipe, bytes_per_param):
    w = Workload(precision=RECIPES[recipe][1], zero_grad_set_to_none=False)  # gradients held for the whole step
    c = estimate(llama8b, w, with_fits=False).components
    states = c["weights"] + c["master_weights"] + c["gradients"] + c["optimizer_states"]
    assert states == bytes_per_param * LLAMA8B + 4 * 291  # + AdamW's 4-byte step per parameter tensor


@pytest.mark.parametrize("optimizer,state_bytes", [("sgd", 0), ("sgd-momentum", 4 * LLAMA8B), ("lion", 4 * LLAMA8B),
                                                   ("adamw", 8 * LLAMA8B + 4 * 291)])
def test_optimizer_state(llama8b, optimizer, state_bytes):
    c = estimate(llama8b, Workload(optimizer=optimizer), with_fits=False).components
    assert c["optimizer_states"] == state_bytes


def test_adamw_8bit_state_is_two_bytes_plus_block_scales(llama8b):
    c = estimate(llama8b, Workload(optimizer="adamw-8bit"), with_fits=False).components
    # bitsandbytes: per tensor 2·n + 8·⌈n/256⌉ (every Llama-3.1-8B tensor has ≥ 4096 elements, all divisible by 256)
    # + its two 256-entry fp32 quantization maps; no step tensors (calculator/training.bnb_adamw8bit_state_bytes)
    assert c["optimizer_states"] == 2 * (LLAMA8B + 4 * -(-LLAMA8B // 256)) + 2048


def test_adafactor_keeps_factored_second_moment(llama8b):
    c = estimate(llama8b, Workload(optimizer="adafactor"), with_fits=False).components
    assert 0 < c["optimizer_states"] < 0.01 * 4 * LLAMA8B


def test_megatron_distributed_optimizer_is_6_plus_12_over_d(llama8b):
    w = Workload(precision=RECIPES["megatron"][1], parallel={"dp": 8, "distributed_optimizer": True})
    c = estimate(llama8b, w, with_fits=False).components
    assert c["weights"] + c["gradients"] == 6 * LLAMA8B
    assert c["master_weights"] + c["optimizer_states"] == pytest.approx(12 * LLAMA8B / 8, rel=1e-6)


@pytest.mark.parametrize("zero,sharded", [(0, set()), (1, {"master_weights", "optimizer_states"}),
                                          (2, {"master_weights", "optimizer_states", "gradients"}),
                                          (3, {"master_weights", "optimizer_states", "gradients", "weights"})])
def test_zero_stages_shard_by_dp(llama8b, zero, sharded):
    one = estimate(llama8b, Workload(stack="deepspeed"), with_fits=False).components
    c = estimate(llama8b, Workload(stack="deepspeed", parallel={"dp": 8, "zero": zero}), with_fits=False).components
    for k in ("weights", "master_weights", "gradients"):
        assert c[k] == (pytest.approx(one[k] / 8, rel=1e-6) if k in sharded else one[k])


def test_zero3_adds_the_gather_of_the_largest_module_and_its_prefetch(llama8b):
    """DeepSpeed ZeRO-3 gathers module by module, up to stage3_prefetch_bucket_size (5e7) elements ahead; its
    reduce bucket (5e8 elements) is held for the run; the fp32 gradient buffer initialize_optimizer_states allocates
    is freed before it returns (stage3.py), so it is no term."""
    e = estimate(llama8b, Workload(parallel={"dp": 8, "zero": 3}), with_fits=False)
    terms = {t.key: t.bytes for t in e.terms}
    embedding = 128256 * 4096  # the largest module (the LM head is the same size)
    assert terms["sharding.gather"] == 2 * (2 * embedding)  # the module and its gradient, bf16
    assert terms["sharding.prefetch"] == 2 * 50_000_000  # stage3_prefetch_bucket_size elements ahead, bf16
    assert terms["sharding.ds_reduce_bucket"] == 2 * 500_000_000
    assert "sharding.ds_fp32_grad" not in terms


def test_tensor_parallel_shards_model_states(llama8b):
    one = estimate(llama8b, Workload(), with_fits=False).components
    tp = estimate(llama8b, Workload(parallel={"tp": 8}), with_fits=False).components
    assert tp["weights"] == pytest.approx(one["weights"] / 8, rel=0.001)


def test_pipeline_reports_every_stage_and_first_stage_holds_p_microbatches(llama8b):
    w = Workload(parallel={"pp": 4, "num_microbatches": 8})
    e = estimate(llama8b, w, with_fits=False)
    assert len(e.stages) == 4
    acts = [s.components["activations"] for s in e.stages]
    assert acts[0] > acts[1] > acts[2] > acts[3]
    assert acts[0] == 4 * acts[3]  # p − r micro-batches in flight
    assert e.stages[-1].components["logits"] > 0 and e.stages[0].components["logits"] == 0


def test_interleaved_schedule_first_stage_factor(llama8b):
    base = estimate(llama8b, Workload(parallel={"pp": 4, "num_microbatches": 16}), with_fits=False)
    inter = estimate(llama8b, Workload(parallel={"pp": 4, "num_microbatches": 16, "schedule": "interleaved",
                                                 "virtual_stages": 2}), with_fits=False)
    a0 = base.stages[0].components["activations"]
    # Megatron: × (1 + (p − 1)/(p·v)) = 1.375 for p = 4, v = 2
    assert inter.stages[0].components["activations"] == pytest.approx(a0 * 1.375, rel=1e-4)


def test_expert_parallel_shards_routed_experts_only():
    m = load_model("mixtral-8x7b").spec
    one = estimate(m, Workload(), with_fits=False).components["weights"]
    ep = estimate(m, Workload(parallel={"dp": 8, "ep": 8}), with_fits=False).components["weights"]
    experts = 32 * 8 * 3 * 4096 * 14336 * 2
    assert one - ep == pytest.approx(experts * 7 / 8, rel=1e-9)


@pytest.mark.parametrize("parallel,field", [({"tp": 3}, "tp"), ({"pp": 5}, "pp"), ({"cp": 3}, "cp"),
                                            ({"pp": 4, "num_microbatches": 2}, "num_microbatches"),
                                            ({"ep": 2}, "ep")])
def test_degrees_that_do_not_divide_are_errors(llama8b, parallel, field):
    with pytest.raises(InputError) as err:
        estimate(llama8b, Workload(seq_len=4095 if field == "cp" else 4096, parallel=parallel))
    assert err.value.field == field


def test_heads_must_divide_hidden():
    from calculator import ModelSpec
    with pytest.raises(ValueError, match="divisible"):
        ModelSpec(hidden_size=4096, num_hidden_layers=2, num_attention_heads=3, intermediate_size=1, vocab_size=8)


def test_totals_and_components_add_up(llama8b):
    e = estimate(llama8b, Workload(parallel={"tp": 2, "dp": 4, "zero": 1}, gpu="h100-sxm"))
    allocated = {"weights", "master_weights", "gradients", "optimizer_states", "activations", "logits",
                 "kv_cache", "transient", "sharding_buffers"}
    assert e.peak_allocated_bytes == sum(v for k, v in e.components.items() if k in allocated)
    assert e.total_bytes == sum(e.components.values())
    assert all(isinstance(t.bytes, int) and t.bytes >= 0 for t in e.terms)


def test_every_term_cites_a_known_source(llama8b):
    from calculator.core.sources import SOURCES
    for w in (Workload(), Workload(mode="infer"), Workload(activation_model="textbook"),
              Workload(parallel={"dp": 8, "zero": 3, "tp": 2}), Workload(recompute="full")):
        for t in estimate(llama8b, w).terms:
            assert t.source in SOURCES, t
            assert t.formula and t.substituted


def test_fit_cards_cover_the_required_gpus(llama8b):
    e = estimate(llama8b, Workload(mode="infer", seq_len=8192))
    ids = {f.gpu for f in e.fits}
    assert {"a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "mi300x"} <= ids
    h100 = next(f for f in e.fits if f.gpu == "h100-sxm")
    assert h100.verdict == "fits" and h100.gpus_needed == 1
    assert h100.headroom_bytes == h100.capacity_bytes - h100.used_bytes


def test_training_70b_on_one_gpu_does_not_fit_and_says_how_many():
    """The card's count is the planner's (tests/planning/test_planner.py checks it is the fewest); recompute lowers it."""
    m = load_model("llama-3.1-70b").spec
    full = estimate(m, Workload(seq_len=4096, recompute="full")).fits_on(["h100-sxm"])[0]
    none = estimate(m, Workload(seq_len=4096)).fits_on(["h100-sxm"])[0]
    assert full.verdict == none.verdict == "does not fit"
    assert 1 < full.gpus_needed < none.gpus_needed and full.layout and none.layout


def test_full_recompute_reduces_activations_and_reports_the_recompute_transient(llama8b):
    none = estimate(llama8b, Workload(seq_len=4096), with_fits=False).components
    full = estimate(llama8b, Workload(seq_len=4096, recompute="full"), with_fits=False)
    assert full.components["activations"] < none["activations"] / 10
    # the backward peaks at the loss (8·T·V at a 128k vocabulary), which exceeds one recomputed layer
    loss = next(t for t in full.terms if t.key == "transient.loss")
    assert loss.bytes == 8 * 4096 * 128256 and "recomputed layer" in loss.note
    # eager attention at 8k tokens: the recomputed layer's softmax backward (fp32 score gradients) dominates
    eager = estimate(load_model("mistral-7b-v0.1").spec, Workload(seq_len=8192, attention="eager",
                                                                 recompute="full"), with_fits=False)
    assert any(t.key == "transient.recompute" for t in eager.terms)


def test_cpu_offload_moves_grads_master_and_optimizer_to_host(llama8b):
    base = estimate(llama8b, Workload(parallel={"dp": 8, "zero": 2}), with_fits=False)
    off = estimate(llama8b, Workload(parallel={"dp": 8, "zero": 2, "offload_optimizer": True}), with_fits=False)
    c, h = off.components, off.peak
    assert c["master_weights"] == c["optimizer_states"] == c["gradients"] == 0
    moved = sum(base.components[k] for k in ("master_weights", "optimizer_states", "gradients"))
    assert h.host_bytes == moved
    assert c["weights"] == base.components["weights"]
    assert not any(t.key == "transient.optimizer_step" for t in off.terms)  # the step runs on the CPU
    assert off.total_bytes < base.total_bytes


def test_parameter_offload_needs_zero3_and_keeps_only_the_gathered_units(llama8b):
    with pytest.raises(ValueError, match="zero = 3"):
        Workload(parallel={"dp": 8, "zero": 2, "offload_params": True})
    e = estimate(llama8b, Workload(parallel={"dp": 8, "zero": 3, "offload_optimizer": True, "offload_params": True}),
                 with_fits=False)
    assert e.components["weights"] == 0 and e.components["sharding_buffers"] > 0
    assert e.peak.host_bytes == pytest.approx(LLAMA8B * 16 / 8, rel=0.001)  # 2 + 2 + 4 + 8 B/param over 8 ranks


def test_a_sequence_past_learned_positions_is_flagged():
    """GPT-2's 1,024 learned positions (wpe): transformers indexes them by position, so a longer sequence fails
    before the memory priced here is used; the estimate says so (training counts the sequence, generate() the prompt
    and the generated tokens)."""
    gpt2 = load_model("gpt2").spec
    def flagged(**kw):
        return any("learned positions" in x for x in estimate(gpt2, Workload(gpu="h100-sxm", **kw)).warnings)
    assert flagged(seq_len=1025) and not flagged(seq_len=1024)
    assert flagged(mode="infer", seq_len=1000, gen_tokens=25) and not flagged(mode="infer", seq_len=1000, gen_tokens=24)
    llama = load_model("llama-3.2-1b").spec  # RoPE: no table to run past
    assert not any("learned positions" in x for x in estimate(llama, Workload(seq_len=200_000, gpu="h200")).warnings)
