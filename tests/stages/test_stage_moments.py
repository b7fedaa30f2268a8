"""The terms live at each moment of a training step (calculator/stages/moments.py): each moment's terms sum to its
allocated bytes in the stage's timeline, the activations are gone at the optimizer step, and every gradient born in
backward is there."""
from __future__ import annotations

import pytest

from calculator import Workload, estimate
from calculator.model.presets import load_model

LLAMA_8B = load_model("llama-3.1-8b").spec

CASES = [dict(), dict(recompute="full"), dict(recompute="selective"), dict(finetune="lora"),
         dict(finetune="qlora", recompute="full"), dict(seq_len=8192, optimizer_impl="foreach"),
         dict(parallel={"dp": 8, "zero": 3}), dict(parallel={"dp": 8, "zero": 1}), dict(parallel={"tp": 2}),
         dict(parallel={"pp": 4, "num_microbatches": 8}), dict(stack="fsdp2", parallel={"dp": 8, "zero": 3}),
         dict(stack="deepspeed", parallel={"dp": 4, "zero": 3}), dict(parallel={"dp": 2, "zero": 2,
                                                                               "offload_optimizer": True}),
         dict(stack="megatron", parallel={"tp": 2, "dp": 2}), dict(activation_model="textbook"),
         dict(activation_model="fujii")]


@pytest.mark.parametrize("kw", CASES)
def test_each_moments_terms_sum_to_its_allocated_bytes(kw):
    est = estimate(LLAMA_8B, Workload(gpu="h100-sxm", **kw), with_fits=False)
    for s in est.stages:
        timeline = {name: allocated for name, _long, allocated in s.phases}
        names = [name for name, _terms in s.moments]
        assert names == ["model states", "forward: tensors saved", "backward: peak", "optimizer step"]
        for name, terms in s.moments:
            assert sum(t.bytes for t in terms) == timeline[name], (kw, s.stage, name)
        assert max(timeline.values()) == s.peak_allocated_bytes


@pytest.mark.parametrize("name, kw", [("qwen3.5-27b", dict(images_per_sample=2)),
                                      ("qwen3.5-27b", dict(images_per_sample=1, vision_tower="trained")),
                                      ("qwen3-30b-a3b", dict()), ("nemotron-h-56b", dict(parallel={"tp": 4}))])
def test_vision_moe_and_hybrid_stages_too(name, kw):
    est = estimate(load_model(name).spec, Workload(seq_len=1024, **kw), with_fits=False)
    timeline = {n: allocated for n, _long, allocated in est.peak.phases}
    for n, terms in est.peak.moments:
        assert sum(t.bytes for t in terms) == timeline[n], (name, kw, n)


def test_the_optimizer_step_holds_every_gradient_and_no_activation():
    est = estimate(LLAMA_8B, Workload(gpu="h100-sxm"), with_fits=False)  # the page's default view
    moments = dict(est.peak.moments)
    step, backward = moments["optimizer step"], moments["backward: peak"]
    assert not any(t.component in ("activations", "logits") for t in step)
    grads = sum(t.bytes for t in step if t.component == "gradients")
    assert grads == 2 * est.parameters  # bf16 gradients of every parameter, until the step frees them
    assert sum(t.bytes for t in backward if t.component == "activations") > 20 * 10**9
    assert est.peak.moments and not estimate(LLAMA_8B, Workload(mode="infer"), with_fits=False).peak.moments
