"""RL post-training (calculator/stages/rl.py): the phases of one step per GPU, what offload and sleep move, the rollout's
KV demand against the engine's pool, and seed 002's worked example (validation/published/seed002.py)."""
import json

import pytest

from calculator import InputError, Workload, estimate
from calculator.model.presets import get_gpu, load_model
from calculator.stages.rl import BUCKETS, buckets
from validation.published import seed002

QWEN = load_model("qwen2.5-7b").spec


def phases(est):
    return {p.name: p for p in est.rl.phases}


def test_seed_8_card_phases_and_peak():
    est = seed002.ours("8-card")
    rl, ph = est.rl, phases(est)
    assert set(ph) == {"rollout", "scoring", "training"} and rl.peak_phase == "rollout"
    assert est.total_bytes == ph["rollout"].total_bytes == max(p.total_bytes for p in rl.phases)
    # 32 prompts × 8 samples over 4 engines of 2 GPUs: 64 sequences of 8,192 tokens per engine; per GPU each token
    # keeps 28 layers × 2 (K, V) × 2 of Qwen's 4 KV heads × 128 × 2 B
    assert (rl.sequences, rl.engines, rl.tokens_per_sample) == (256, 4, 8192)
    assert rl.kv_demand_bytes == 64 * 8192 * 28 * 2 * 2 * 128 * 2 == 15_032_385_536
    assert rl.share_at_once == 1.0  # the 0.7 pool holds every sequence at once
    # the pool grows with the fraction: at fraction_for_demand it would be exactly the demand
    sv = rl.rollout
    slope = sv.budget_bytes / sv.memory_fraction
    assert sv.kv_available_bytes + (rl.fraction_for_demand - sv.memory_fraction) * slope == pytest.approx(
        rl.kv_demand_bytes)


def test_offloaded_trainer_is_absent_from_the_rollout_and_the_asleep_engine_from_training():
    est = seed002.ours("8-card")
    ph = phases(est)
    roll, train = buckets(ph["rollout"].terms), buckets(ph["training"].terms)
    assert roll["Gradients"] == roll["Optimizer states"] == 0 and roll["KV cache"] == est.rl.rollout.kv_pool_bytes
    assert train["KV cache"] == 0 and train["Gradients"] > 0
    # the training phase is the trainer's own step plus the asleep engine's context and NCCL
    m, w = seed002.scenario("8-card")
    trainer = estimate(m, w.model_copy(update={"mode": "train", "seq_len": 8192, "engine": "hf"}), with_fits=False)
    engine_left = sum(t.bytes for t in ph["training"].terms if t.key.startswith("rollout."))
    assert ph["training"].total_bytes == trainer.total_bytes + engine_left
    assert engine_left == est.rl.rollout.non_torch_bytes + get_gpu("h100-sxm").cuda_context_bytes  # NCCL, context


def test_nothing_offloaded_keeps_everything_at_once():
    every = seed002.ours("8-card", all_resident=True)
    ph = phases(every)
    train = buckets(ph["training"].terms)
    assert train["KV cache"] == every.rl.rollout.kv_pool_bytes and train["Gradients"] > 0
    assert every.total_bytes > seed002.ours("8-card").total_bytes
    assert every.total_bytes > 85_520_809_984  # more than an H100 holds: the seed's additive reading would OOM


def test_rollout_apart_from_the_trainer():
    m, w = seed002.scenario("8-card")
    w = w.model_copy(update={"rl": w.rl.model_copy(update={"colocate": False, "rollout_gpus": 4})})
    est = estimate(m, w, with_fits=False)
    ph = phases(est)
    assert ph["rollout"].where == "rollout GPUs" and ph["training"].where == "trainer GPUs"
    assert buckets(ph["rollout"].terms)["Gradients"] == 0 and buckets(ph["training"].terms)["KV cache"] == 0
    assert est.rl.engines == 2 and est.rl.rollout_gpus == 4


def test_reference_reward_and_critic():
    m, w = seed002.scenario("8-card")
    base = phases(estimate(m, w, with_fits=False))
    w2 = w.model_copy(update={"rl": w.rl.model_copy(update={"reference_model": True, "reward_model": True,
                                                             "offload_aux": False})})
    ph = phases(estimate(m, w2, with_fits=False))
    ref = next(t for t in ph["training"].terms if t.key == "aux.reference")
    assert ref.bytes == -(-7_615_616_512 // 4) * 2  # bf16 copy sharded like the trainer (TP 4)
    assert ph["rollout"].total_bytes == base["rollout"].total_bytes + 2 * ref.bytes  # not offloaded: resident
    w3 = w.model_copy(update={"rl": w.rl.model_copy(update={"critic": True, "offload_train": False})})
    crit = phases(estimate(m, w3, with_fits=False))
    assert buckets(crit["training"].terms)["Optimizer states"] == 2 * buckets(base["training"].terms)[
        "Optimizer states"]


def test_engines_must_split_the_gpus_and_a_gpu_is_needed():
    m, w = seed002.scenario("8-card")
    with pytest.raises(InputError, match="rollout_tp"):
        estimate(m, w.model_copy(update={"rl": w.rl.model_copy(update={"rollout_tp": 3})}))
    with pytest.raises(InputError, match="gpu"):
        estimate(m, w.model_copy(update={"gpu": None}))


def test_seed_tables_beside_ours():
    # the seed's numbers, and the inconsistencies docs/seed-002-rl.md explains
    eight, four = seed002.seed_table("8-card"), seed002.seed_table("4-card")
    assert sum(eight[b] for b in BUCKETS) == pytest.approx(80.0) == eight["Total"]
    assert sum(four[b] for b in BUCKETS) == pytest.approx(72.2) != four["Total"]  # stated ~52
    # its KV is the MHA formula 2·L·hidden·seq·batch·2 B with batch = the 8 samples, in GiB
    assert round(2 * 28 * 3584 * 8192 * 8 * 2 / 2**30, 1) == eight["KV cache"]
    assert round(2 * 28 * 3584 * 4096 * 8 * 2 / 2**30, 2) == 12.25  # "~12.0": still 8 samples, not 4
    rows = {r[0]: r for r in seed002.table("8-card")}
    assert rows["Gradients"][3] == pytest.approx(7.6, abs=0.05)  # Megatron's fp32 main grads / TP 4
    assert rows["Model parameters"][2] == pytest.approx(7.65, abs=0.05)  # the rollout engine's bf16 copy / TP 2
    assert rows["Total"][2] == pytest.approx(63.0, abs=0.1)


def test_one_cli_call_per_configuration(capsys):
    from calculator.cli.main import main
    assert main(["estimate", "--config", str(seed002.SCENARIOS["8-card"]), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "rl" and out["rl"]["peak_phase"] == "rollout"
    assert [p["name"] for p in out["rl"]["phases"]] == ["rollout", "scoring", "training"]
    assert out["total_bytes"] == seed002.ours("8-card").total_bytes
    assert main(["estimate", "--model", "qwen2.5-7b", "--mode", "rl", "--gpu", "h100-sxm", "--tp", "4",
                 "--rollout-batch-size", "16", "--n-samples-per-prompt", "4", "--rollout-max-response-len", "4096",
                 "--no-offload-train"]) == 0
    assert "phase rollout" in capsys.readouterr().out


def test_peak_allocated_is_the_highest_phase_allocated_not_the_phase_with_the_highest_total():
    """benchmarks/fuzz.py found doubling the micro-batch lowered peak_allocated_bytes: at b = 16 the training
    phase has the highest total (its fragmentation) but the rollout's KV pool allocates more (GPT-2's 1,024
    positions: prompt + response within them, as the rollout engine requires)."""
    spec = load_model("gpt2").spec
    w = dict(mode="rl", optimizer="sgd-momentum", attention="eager", activation_model="fujii", gpu="h100-sxm",
             rl={"prompt_len": 256, "response_len": 768})
    small, big = (estimate(spec, Workload(micro_batch=b, **w)) for b in (64, 128))
    assert small.rl.peak_phase == "rollout"
    assert big.rl.peak_phase == "training" and big.total_bytes > small.total_bytes
    rollout_allocated = small.peak_allocated_bytes
    assert big.peak_allocated_bytes >= rollout_allocated


def test_rollout_longer_than_the_model_is_refused_naming_the_rl_lengths():
    """The rollout engine's max_model_len is prompt + response; past the model's 1,024 positions it refuses."""
    with pytest.raises(InputError) as refused:
        estimate(load_model("gpt2").spec, Workload(mode="rl", gpu="h100-sxm", rl={"prompt_len": 512,
                                                                                  "response_len": 1024}))
    assert refused.value.field == "rl.response_len" and "1,536 tokens is more than the 1,024" in str(refused.value)
