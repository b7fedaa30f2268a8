"""Physical bounds on every input and result: refused before any work, with the field and its allowed range."""
import time

import pytest
from pydantic import ValidationError

from calculator import GenericModel, InputError, Workload, estimate
from calculator.core import bounds as B
from calculator.model.spec import ModelSpec
from calculator.model.presets import load_model

SMALL = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512, vocab_size=1000)


def refusal(cls, **kw) -> tuple[str, str]:
    with pytest.raises(ValidationError) as info:
        cls(**kw)
    return B.describe(info.value, cls)


@pytest.mark.parametrize("field,value,allowed", [
    ("num_hidden_layers", 1_000_000_000, "1–10,000"), ("hidden_size", 2**21, "1–1,048,576"),
    ("vocab_size", 10**400, "1–134,217,728"), ("num_attention_heads", 0, "1–65,536"),
    ("intermediate_size", -5, "1–16,777,216"), ("num_experts", 2**21, "0–1,048,576"),
])
def test_model_sizes_are_bounded_and_the_message_names_field_and_range(field, value, allowed):
    where, msg = refusal(ModelSpec, **{**SMALL, field: value})
    assert where == field and f"allowed: {allowed}" in msg


@pytest.mark.parametrize("field,value,allowed", [
    ("seq_len", 99999999999999999999999, "1–67,108,864"), ("gen_tokens", 2**27, "0–67,108,864"),
    ("micro_batch", 0, "1–1,048,576"), ("lora_rank", 10**6, "1–65,536"),
])
def test_workload_sizes_are_bounded(field, value, allowed):
    where, msg = refusal(Workload, **{field: value})
    assert where == field and f"allowed: {allowed}" in msg


@pytest.mark.parametrize("field", ["tp", "dp", "cp", "ep", "etp", "virtual_stages"])
def test_every_parallel_degree_is_bounded(field):
    where, msg = refusal(Workload, parallel={field: 2**17})
    assert where == f"parallel.{field}" and "allowed: 1–65,536" in msg


def test_pipeline_stages_are_bounded_because_each_is_estimated():
    where, msg = refusal(Workload, parallel={"pp": 513})
    assert where == "parallel.pp" and "allowed: 1–512" in msg


@pytest.mark.parametrize("cls,kw", [(ModelSpec, {**SMALL, "num_hidden_layers": True}),
                                    (Workload, {"micro_batch": True}), (Workload, {"parallel": {"tp": True}}),
                                    (GenericModel, {"total_params": True, "activation_elements_per_sample": 0})])
def test_a_bool_is_not_an_integer(cls, kw):
    where, msg = refusal(cls, **kw)
    assert "valid integer" in msg and "got bool" in msg


@pytest.mark.parametrize("field", ["attn_logit_softcapping", "final_logit_softcapping", "dropout"])
def test_floats_are_finite(field):
    _, msg = refusal(ModelSpec, **{**SMALL, field: float("inf")})
    assert "finite" in msg or "less than" in msg


def test_a_billion_layers_is_refused_before_any_work():
    start = time.perf_counter()
    with pytest.raises(ValidationError):
        ModelSpec(**{**SMALL, "num_hidden_layers": 10**9})
    assert time.perf_counter() - start < 0.05


def test_the_largest_allowed_model_still_estimates_quickly():
    """The bounds keep the engine's own work small: 10,000 layers over 500 pipeline stages in a fraction of a
    second of CPU (0.24 s here; CPU time, not wall-clock, so other jobs on a shared machine do not fail it)."""
    spec = ModelSpec(**{**SMALL, "num_hidden_layers": B.MAX_LAYERS})
    start = time.process_time()
    e = estimate(spec, Workload(parallel={"pp": 500, "num_microbatches": 500}), with_fits=False)
    assert len(e.stages) == 500 and time.process_time() - start < 2


def test_a_result_beyond_the_physical_bound_is_refused_naming_the_inputs():
    spec = load_model("llama-3.1-8b").spec
    w = Workload(micro_batch=B.MAX_BATCH, seq_len=B.MAX_TOKENS, attention="eager")
    with pytest.raises(InputError) as info:
        estimate(spec, w)
    assert info.value.field == "workload"
    assert "micro_batch=1,048,576" in str(info.value) and "seq_len=67,108,864" in str(info.value)
    assert "1e+18" in str(info.value)


def test_generic_network_results_are_bounded_too():
    with pytest.raises(InputError, match="physical bound"):
        estimate(GenericModel(total_params=10**15, activation_elements_per_sample=10**15),
                 Workload(micro_batch=B.MAX_BATCH))


def test_peak_allocated_is_the_highest_over_pipeline_stages():
    """Issue 12 reproducer: gemma-3-1b inference, b = 8, gen 131,072, PP = 13: doubling the prompt moves the stage
    with the highest total; peak allocated must still be the highest allocated peak and never go down."""
    spec = load_model("gemma-3-1b").spec
    peaks = []
    for s in (512, 1024):
        e = estimate(spec, Workload(mode="infer", micro_batch=8, seq_len=s, gen_tokens=131_072, parallel={"pp": 13}),
                     with_fits=False)
        assert e.peak_allocated_bytes == max(st.peak_allocated_bytes for st in e.stages)
        peaks.append(e.peak_allocated_bytes)
    # at s = 1024 the highest total is stage 12 (1,185,306,880 B allocated), the highest allocated stage 2
    assert peaks == [1_236_041_728, 1_240_236_032]  # incl. the 32 MiB cuBLAS workspace (calculator/stacks, issue 13)
    assert e.worst_stage == 12 and e.peak.peak_allocated_bytes == 1_185_306_880
