"""Properties that must hold for every input (hypothesis)."""
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calculator import InputError, Workload, estimate
from calculator.presets import load_model

MODELS = ["llama-3.1-8b", "qwen3-30b-a3b", "gemma-2-9b", "gpt2", "deepseek-v3", "phi-3-mini-4k"]
SPECS = {m: load_model(m).spec for m in MODELS}

workloads = st.fixed_dictionaries({
    "mode": st.sampled_from(["train", "infer"]),
    "micro_batch": st.integers(1, 8),
    "seq_len": st.sampled_from([256, 1024, 4096, 8192]),
    "gen_tokens": st.integers(0, 2048),
    "optimizer": st.sampled_from(["adamw", "adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion", "none"]),
    "optimizer_impl": st.sampled_from(["fused", "foreach", "for-loop"]),
    "recompute": st.sampled_from(["none", "selective", "full"]),
    "attention": st.sampled_from(["flash", "eager"]),
    "activation_model": st.sampled_from(["exact", "textbook", "fujii"]),
    "kv_dtype": st.sampled_from(["bf16", "fp8", "int4"]),
    "weight_dtype": st.sampled_from([None, "int4", "nf4", "fp8"]),
    "finetune": st.sampled_from(["full", "full", "lora", "qlora"]),
    "lora_targets": st.sampled_from(["qv", "attention", "all-linear"]),
    "parallel": st.fixed_dictionaries({
        "tp": st.sampled_from([1, 2, 4]), "pp": st.sampled_from([1, 2]), "dp": st.sampled_from([1, 2, 8]),
        "cp": st.sampled_from([1, 2]), "zero": st.integers(0, 3), "sequence_parallel": st.booleans(),
        "num_microbatches": st.sampled_from([None, 4]), "offload_optimizer": st.booleans()}),
})


def safe_estimate(model, w):
    try:
        return estimate(SPECS[model], Workload(**w), with_fits=False)
    except InputError:
        return None


settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


@given(st.sampled_from(MODELS), workloads)
def test_no_negative_or_nan_figure(model, w):
    e = safe_estimate(model, w)
    if e is None:
        return
    for stage in e.stages:
        for t in stage.terms:
            assert isinstance(t.bytes, int) and t.bytes >= 0 and not math.isnan(t.bytes)
        assert stage.total_bytes >= stage.peak_allocated_bytes > 0


@given(st.sampled_from(MODELS), workloads, st.sampled_from(["micro_batch", "seq_len", "gen_tokens"]))
def test_more_batch_or_sequence_never_lowers_memory(model, w, field):
    a = safe_estimate(model, w)
    bigger = dict(w, **{field: w[field] * 2 if field != "gen_tokens" else w[field] + 512})
    b = safe_estimate(model, bigger)
    if a is None or b is None:
        return
    assert b.peak_allocated_bytes >= a.peak_allocated_bytes
    assert b.total_bytes >= a.total_bytes


@given(st.sampled_from(MODELS), workloads, st.integers(0, 2))
def test_next_zero_stage_never_raises_per_gpu_memory(model, w, zero):
    w = dict(w, mode="train", stack="deepspeed", parallel=dict(w["parallel"], zero=zero))
    lower = safe_estimate(model, w)
    higher = safe_estimate(model, dict(w, parallel=dict(w["parallel"], zero=zero + 1)))
    if lower is None or higher is None:
        return
    lc, hc = lower.components, higher.components
    states = ("weights", "master_weights", "gradients", "optimizer_states")
    assert sum(hc[k] for k in states) <= sum(lc[k] for k in states)
    if 1 <= zero and zero + 1 < 3:  # stage 1 adds DeepSpeed's reduce bucket, ZeRO-3 its gather buffers
        assert higher.peak_allocated_bytes <= lower.peak_allocated_bytes


@given(st.sampled_from(["llama-3.1-8b", "qwen3-30b-a3b"]), st.sampled_from([2, 4, 8]),
       st.sampled_from(["tp", "pp", "ep"]))
def test_tp_pp_ep_shard_model_states_by_their_degree(model, degree, kind):
    spec = SPECS[model]
    if kind == "ep" and not spec.is_moe:
        return
    if kind == "pp" and spec.num_hidden_layers % degree:
        return
    base = estimate(spec, Workload(), with_fits=False)
    par = {"tp": {"tp": degree}, "pp": {"pp": degree, "num_microbatches": degree},
           "ep": {"ep": degree, "dp": degree}}[kind]
    e = estimate(spec, Workload(parallel=par), with_fits=False)
    total_weights = sum(s.components["weights"] for s in e.stages)
    if kind == "ep":
        # routed experts shard by ep; attention, norms and embeddings stay whole
        assert e.components["weights"] < base.components["weights"]
        assert e.components["weights"] > base.components["weights"] / degree
    elif kind == "pp":
        assert total_weights >= base.components["weights"]
        assert max(s.components["weights"] for s in e.stages) < base.components["weights"] / degree * 1.6
    else:
        # norms and the MoE router are replicated across TP ranks
        assert base.components["weights"] / degree <= e.components["weights"] <= base.components["weights"] / degree * 1.01
