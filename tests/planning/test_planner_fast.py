"""The planner's fast byte model (calculator/planning/fast.py) equals estimate() byte for byte on a random sample of
layouts of every kind of job it covers, and says when it does not cover one."""
import random

import pytest

from calculator import Workload, estimate
from calculator.planning import fast as planner_fast
from calculator.planning.grid import layouts_of, workload_of
from calculator.model.presets import load_model

JOBS = [
    ("llama-3.1-70b", Workload(mode="infer", seq_len=131_072, gen_tokens=1_024, gpu="a100-40gb")),
    ("llama-3.1-8b", Workload(mode="infer", seq_len=8192, micro_batch=8, kv_dtype="fp8", gpu="h100-sxm")),
    ("qwen2.5-72b", Workload(mode="infer", seq_len=4096, weight_dtype="int4", quant_method="gptq", gpu="l40s")),
    ("qwen2.5-7b", Workload(mode="infer", seq_len=2048, weight_dtype="int4", quant_method="awq", attention="eager")),
    ("gemma-2-27b", Workload(mode="infer", seq_len=16384, micro_batch=2, gpu="h200")),  # sliding-window layers
    ("deepseek-v2-lite", Workload(mode="infer", seq_len=8192, gen_tokens=512, gpu="h100-sxm")),  # MLA + MoE
    ("mixtral-8x7b", Workload(mode="infer", seq_len=4096, micro_batch=4, gpu="a100-80gb",
                              overheads={"fragmentation_pct": 7.5, "cuda_context_bytes": 10**9})),
    ("llama-3.1-8b", Workload(mode="infer", seq_len=8192, gen_tokens=256, weight_dtype="fp8", gpu="h100-sxm")),
    ("qwen3-235b-a22b", Workload(mode="infer", seq_len=32768, gpu="b200",
                                 overheads={"include_comm_buffers": False, "cublas_workspace_bytes": 0})),
    # registry token mixers: Gated DeltaNet states, DSA indexer keys and scores, Mamba-2 states (stage contents
    # carry their kinds: architectures.mixer_layers)
    ("qwen3.5-397b-a17b", Workload(mode="infer", seq_len=65536, micro_batch=3, kv_dtype="fp8", gpu="b200")),
    ("glm-5", Workload(mode="infer", seq_len=16384, gen_tokens=64, gpu="h200", attention="eager",
                       overheads={"fragmentation_pct": 5.0})),
    ("nemotron-h-56b", Workload(mode="infer", seq_len=8192, micro_batch=8, gpu="h100-sxm")),
]


@pytest.mark.parametrize("name, w", JOBS, ids=[j[0] for j in JOBS])
def test_fast_totals_equal_estimate_byte_for_byte(name, w):
    m = load_model(name).spec
    layouts = [lay for n in (1, 2, 4, 8, 16, 24, 48, 64) for lay in layouts_of(m, w, n)]
    sample = random.Random(name).sample(layouts, min(25, len(layouts)))
    assert any(lay.pp_first for lay in layouts)  # uneven stages are in the grid
    total, peak, covered = planner_fast.totals(m, w, sample)
    assert covered.all()
    for i, lay in enumerate(sample):
        est = estimate(m, workload_of(w, lay), with_fits=False)
        assert (int(total[i]), int(peak[i])) == (est.total_bytes, est.peak_allocated_bytes), lay


def test_jobs_it_does_not_cover_fall_back_to_estimate():
    m = load_model("llama-3.1-8b").spec
    for w in (Workload(finetune="lora"), Workload(stack="ddp"), Workload(attention="sdpa"),
              Workload(optimizer="adamw-8bit"), Workload(padded_batch=True),
              Workload(precision={"params": "fp32", "grads": "fp32", "master_weights": None,
                                  "optimizer_states": "fp32", "activations": "bf16"}),  # autocast
              Workload(mode="infer", engine="vllm", gpu="h100-sxm"), Workload(mode="rl")):
        assert not planner_fast.covers(m, w)
        assert planner_fast.totals(m, w, list(layouts_of(m, Workload(mode="infer"), 2))) is None


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_a_vision_language_job_with_images_is_priced_by_estimate(mode):
    """Images add the vision tower's weights and activations and lengthen the language model's prompt
    (calculator/stages/vision.py), which the fast model does not price: with images_per_sample > 0 it does not cover
    the job, and the planner's plans are estimate()'s (Qwen3-VL-8B with two images: 1.5-1.8 GB per GPU more than the
    text-only sums in inference, 1.2-26 GB in training)."""
    from calculator.planning.planner import evaluate
    m = load_model("qwen3-vl-8b").spec
    w = Workload(mode=mode, seq_len=2048, images_per_sample=2, gpu="h100-sxm")
    assert not planner_fast.covers(m, w) and planner_fast.covers(m, w.model_copy(update={"images_per_sample": 0}))
    layouts = [lay for n in (1, 2, 8) for lay in layouts_of(m, w, n)][::7]
    plans = evaluate(m, w, layouts, 10**15, include_unfit=True)
    assert len(plans) == len(layouts)
    for plan in plans:
        est = estimate(m, workload_of(w, plan.layout), with_fits=False)
        assert (plan.total_bytes, plan.peak_allocated_bytes) == (est.total_bytes, est.peak_allocated_bytes)
        text_only = estimate(m, workload_of(w.model_copy(update={"images_per_sample": 0}), plan.layout),
                             with_fits=False)
        assert est.total_bytes > text_only.total_bytes


TRAIN_JOBS = [
    ("llama-3.1-70b", Workload(seq_len=4096, micro_batch=4, gpu="h100-sxm")),
    ("llama-3.1-8b", Workload(seq_len=8192, micro_batch=2, attention="eager", optimizer_impl="foreach")),
    ("qwen2.5-7b", Workload(seq_len=4096, precision={"params": "bf16", "grads": "bf16", "master_weights": None,
                                                     "optimizer_states": "bf16"}, optimizer="sgd",
                            impl="liger", gpu="a100-80gb")),
    ("deepseek-v3", Workload(seq_len=4096, gpu="h200")),  # MLA + MoE, 61 layers: uneven stages, EP
    ("qwen3-235b-a22b", Workload(seq_len=4096, impl="megatron-te", optimizer="lion", gpu="b200",
                                 parallel={"distributed_optimizer": True},
                                 overheads={"fragmentation_pct": 5.0, "nccl_bytes_per_group": 10**8})),
    ("mixtral-8x7b", Workload(seq_len=2048, micro_batch=2, impl="compile", optimizer="sgd-momentum",
                              recompute="selective", gpu="h100-sxm", parallel={"num_microbatches": 16})),
    ("qwen2.5-14b", Workload(seq_len=8192, micro_batch=1, recompute="full", ds_auto_buckets=True,
                             optimizer_impl="foreach", gpu="a100-80gb")),  # ms-swift's ZeRO runs (HF "auto")
    ("gemma-2-9b", Workload(seq_len=8192, gpu="l40s", overheads={"include_comm_buffers": False,
                                                                  "cuda_context_bytes": 3 * 10**8})),
]


@pytest.mark.parametrize("name, w", TRAIN_JOBS, ids=[j[0] for j in TRAIN_JOBS])
def test_fast_training_totals_equal_estimate_byte_for_byte(name, w):
    m = load_model(name).spec
    layouts = [lay for n in (1, 4, 8, 16, 32, 64) for lay in layouts_of(m, w, n)]
    sample = random.Random(name).sample(layouts, min(30, len(layouts)))
    total, peak, covered = planner_fast.totals(m, w, sample)
    assert covered.sum() >= len(sample) - 3  # only one-GPU / plain-DP layouts (DDP, HF Trainer) are left out
    for i, lay in enumerate(sample):
        if covered[i]:
            est = estimate(m, workload_of(w, lay), with_fits=False)
            assert (int(total[i]), int(peak[i])) == (est.total_bytes, est.peak_allocated_bytes), lay


def test_llm_int8_inference_is_covered_too():
    m = load_model("llama-3.1-8b").spec
    w = Workload(mode="infer", seq_len=4096, weight_dtype="int8", quant_method="llm-int8", gpu="a100-40gb")
    layouts = [lay for n in (1, 2, 4, 8) for lay in layouts_of(m, w, n)]
    total, peak, covered = planner_fast.totals(m, w, layouts)
    for i, lay in enumerate(layouts):
        est = estimate(m, workload_of(w, lay), with_fits=False)
        assert (int(total[i]), int(peak[i])) == (est.total_bytes, est.peak_allocated_bytes), lay


@pytest.mark.parametrize("name, mode", [("deepseek-v3", "train"), ("deepseek-v3", "infer"), ("gemma-2-27b", "infer")])
def test_deep_pipelines_with_mixed_layer_kinds_are_exact(name, mode):
    """DeepSeek-V3's first three layers are dense and Gemma-2 alternates sliding and global layers: middle stages
    differ, so a later one can be the most loaded; the fast model looks at every distinct stage."""
    m = load_model(name).spec
    w = Workload(mode=mode, seq_len=4096, gpu="h200")
    layouts = [lay for lay in layouts_of(m, w, 64, search="layout") if lay.pp >= 8]
    sample = random.Random(name + mode).sample(layouts, min(12, len(layouts)))
    total, peak, covered = planner_fast.totals(m, w, sample)
    for i, lay in enumerate(sample):
        if covered[i]:
            est = estimate(m, workload_of(w, lay), with_fits=False)
            assert (int(total[i]), int(peak[i])) == (est.total_bytes, est.peak_allocated_bytes), lay


def test_stage_runs_stand_one_middle_stage_for_the_alike_ones():
    """From the first layer where every middle layer is alike (uniform_from), one middle stage stands for the rest;
    the stages before it one by one; uneven middle sizes are never merged."""
    from calculator.planning.fast_stages import stage_runs, uniform_from
    assert stage_runs(1, (0, 61), 3) == [(0, 1)]
    assert stage_runs(8, (0, 8, 16, 24, 32, 40, 48, 56, 61), 3) == [(0, 1), (1, 6), (7, 1)]
    assert stage_runs(8, (0, 2, 4, 6, 8, 10, 12, 14, 16), 5) == [(0, 1), (1, 1), (2, 1), (3, 4), (7, 1)]
    assert stage_runs(4, (0, 2, 5, 7, 9), 1) == [(0, 1), (1, 1), (2, 1), (3, 1)]
    assert uniform_from(load_model("deepseek-v3").spec, 8, 8, 1) == 3  # three dense layers, then MoE
    assert uniform_from(load_model("llama-3.1-8b").spec, 1, 1, None) == 1


@pytest.mark.parametrize("name, w", [JOBS[0], JOBS[5], JOBS[6], ("deepseek-v3", Workload(mode="infer", gpu="h200"))])
def test_stage_arrays_equal_stage_parts_on_every_layout(name, w, monkeypatch):
    """The stages priced together in numpy (fast._stage_arrays) give _stage_parts' bytes on every layout of a grid,
    not only a sample: the same totals with every stage priced one by one."""
    m = load_model(name).spec
    layouts = [lay for n in (1, 2, 4, 8, 16, 32, 64, 128) for lay in layouts_of(m, w, n)]
    planner_fast.clear_cache()
    together = planner_fast.totals(m, w, layouts)
    planner_fast.clear_cache()
    monkeypatch.setattr(planner_fast, "_whole_bytes", lambda job, shape: False)
    one_by_one = planner_fast.totals(m, w, layouts)
    planner_fast.clear_cache()
    assert all((a == b).all() for a, b in zip(together, one_by_one))


SWEEP = [Workload(mode="infer", seq_len=8192, micro_batch=2, gpu="h100-sxm"),
         Workload(mode="infer", seq_len=4096, weight_dtype="int4", quant_method="awq", gpu="a100-80gb"),
         Workload(seq_len=4096, gpu="h200"),
         Workload(seq_len=2048, micro_batch=2, recompute="full", gpu="b200"),
         Workload(seq_len=4096, precision={"params": "bf16", "grads": "bf16", "master_weights": None,
                                           "optimizer_states": "bf16"}, gpu="h100-sxm")]


def test_every_preset_the_fast_model_covers_equals_estimate():
    """Every preset model under five jobs (inference in bf16 and AWQ int4, training mixed, with full recompute and in
    pure bf16): on a sample of layouts of 1-32 GPUs, each layout the fast model says it covers is estimate()'s bytes
    exactly (MiMo-V2-Flash's sliding layers with their own head layout were 127-255 MB low in training: not
    covered since)."""
    from calculator.core.errors import InputError
    from calculator.model.presets import list_models
    compared = 0
    for info in list_models():
        m = load_model(info.id).spec
        for k, w in enumerate(SWEEP):
            if not planner_fast.covers(m, w):
                continue
            try:
                layouts = [lay for n in (1, 2, 8, 32) for lay in layouts_of(m, w, n)]
            except InputError:
                continue
            sample = random.Random(f"{info.id}/{k}").sample(layouts, min(12, len(layouts)))
            total, peak, covered = planner_fast.totals(m, w, sample)
            for i in covered.nonzero()[0]:
                est = estimate(m, workload_of(w, sample[i]), with_fits=False)
                assert (int(total[i]), int(peak[i])) == (est.total_bytes, est.peak_allocated_bytes), (info.id, k,
                                                                                                       sample[i])
                compared += 1
    assert compared > 3000
