"""The step timeline (calculator.planning.timeline, from the phases the engine records): the moments of a step in order,
whose highest is the engine's own peak."""
from calculator import Workload, estimate
from calculator.model.spec import GenericModel
from calculator.model.presets import load_model
from calculator.planning.timeline import step_timeline

LLAMA_8B = load_model("llama-3.1-8b").spec


def _names(tl):
    return [m.name for m in tl.moments]


def test_training_moments_and_the_backward_peak():
    est = estimate(LLAMA_8B, Workload(mode="train", seq_len=8192, gpu="h100-sxm"))
    tl = step_timeline(est)
    assert _names(tl) == ["model states", "forward: tensors saved", "backward: peak", "optimizer step"]
    states, fwd, bwd, step = (m.bytes for m in tl.moments)
    assert tl.peak.name == "backward: peak" and bwd == est.peak_allocated_bytes
    assert states < fwd < bwd and states < step < bwd
    comps = est.components
    assert fwd - states == comps["activations"] + comps["logits"]  # what the forward saved for backward
    assert all(m.long_lived_bytes == states for m in tl.moments)


def test_short_sequences_peak_in_the_optimizer_step():
    # foreach AdamW keeps full-size temporaries: at 512 tokens the step outgrows the activations
    est = estimate(LLAMA_8B, Workload(mode="train", seq_len=512, optimizer_impl="foreach", gpu="h100-sxm"))
    tl = step_timeline(est)
    assert tl.peak.name == "optimizer step" and tl.peak.bytes == est.peak_allocated_bytes


def test_inference_prefill_then_decode_per_token():
    est = estimate(LLAMA_8B, Workload(mode="infer", seq_len=8192, gen_tokens=512, micro_batch=8, gpu="h100-sxm"))
    tl = step_timeline(est)
    assert _names(tl) == ["weights loaded", "prefill: peak", "decode: token 1", "decode: token 256",
                          "decode: token 512"]
    decode = [m.long_lived_bytes for m in tl.moments[2:]]
    assert decode == sorted(decode) and decode[0] < decode[-1]  # the cache grows token by token
    assert tl.moments[-1].long_lived_bytes - tl.moments[0].bytes == est.components["kv_cache"]
    assert tl.peak.bytes == est.peak_allocated_bytes


def test_every_pipeline_stage_and_engine_has_its_peak():
    for w in (Workload(mode="train", seq_len=4096, parallel={"pp": 4, "num_microbatches": 8}),
              Workload(mode="infer", seq_len=100, gen_tokens=0),
              Workload(mode="train", finetune="qlora", recompute="full"),
              Workload(mode="infer", engine="vllm", seq_len=8192, gpu="h100-sxm")):
        est = estimate(LLAMA_8B, w)
        tl = step_timeline(est)
        assert tl.peak.bytes == est.peak_allocated_bytes, w


def test_rl_phases_are_totals():
    est = estimate(LLAMA_8B, Workload(mode="rl", gpu="h100-sxm", parallel={"dp": 8, "zero": 3}))
    tl = step_timeline(est)
    assert _names(tl) == ["rollout", "scoring", "training"] and tl.measure == "total_bytes"
    assert tl.peak.name == est.rl.peak_phase and tl.peak.bytes == est.total_bytes


def test_a_generic_network_has_no_timeline():
    assert step_timeline(estimate(GenericModel(total_params=10**6, activation_elements_per_sample=10**5),
                                  Workload())) is None


def test_live_sets_sum_to_the_page_total_at_the_peak():
    """live_sets: each moment's terms, overheads included; the peak's set is the stage's total (what the page's
    headline and the chart's full-colour bar show), the others lower."""
    from calculator.planning.timeline import live_sets
    for w, peak in ((Workload(gpu="h100-sxm"), "optimizer step"),
                    (Workload(gpu="h100-sxm", recompute="full"), "optimizer step"),
                    (Workload(gpu="h100-sxm", finetune="lora", seq_len=8192), "backward pass")):
        est = estimate(LLAMA_8B, w, with_fits=False)
        sets = live_sets(est.peak)
        assert [s.name for s in sets] == ["forward end", "backward pass", "optimizer step"]
        top = next(s for s in sets if s.is_peak)
        assert top.name == peak and top.bytes == est.total_bytes
        assert all(s.bytes <= top.bytes for s in sets)
        assert all(any(t.component == "cuda_context" for t in s.terms) for s in sets)
    # no moments (generate(), engines): one set, the stage's own terms at its peak
    est = estimate(LLAMA_8B, Workload(mode="infer", seq_len=8192, gpu="h100-sxm"), with_fits=False)
    (only,) = live_sets(est.peak)
    assert only.is_peak and only.bytes == est.total_bytes and only.name == "prefill peak"


def test_term_moments_say_when_each_engine_term_is_taken():
    from calculator.planning.timeline import term_moments
    est = estimate(LLAMA_8B, Workload(gpu="h100-sxm"), with_fits=False)
    at = term_moments(est.peak)
    assert set(at) == {t.key for t in est.terms}
    assert at["weights"] == at["optimizer_states"] == "all step"
    assert at["activations.mlp"].startswith("forward → backward")
    assert at["transient.optimizer_step"].startswith("optimizer step")
