"""The planner's vectorised time models (calculator.planning.fast_time for training, fast_infer_time for serving)
equal estimate_time() on random samples of layouts: step time, tokens/s, MFU, cost and the bottleneck."""
import random

import pytest

from calculator import Workload
from calculator.model.presets import load_model
from calculator.planning import fast_infer_time, fast_time
from calculator.planning.grid import layouts_of, workload_of
from calculator.timing.inference_time import INFERENCE_BOTTLENECKS
from calculator.timing.inputs import TimingInputs
from calculator.timing.step_time import BOTTLENECKS, estimate_time

TIMING = TimingInputs(price_per_gpu_hour=2.5)
TRAINING = [  # (model, job, GPUs, global batch)
    ("llama-3.1-8b", Workload(seq_len=8192, gpu="h100-sxm"), 16, None),
    ("llama-3.1-70b", Workload(seq_len=4096, micro_batch=4, gpu="b200"), 64, 512),
    ("deepseek-v3", Workload(seq_len=4096, gpu="h100-sxm"), 256, 1024),
    ("qwen3-30b-a3b", Workload(seq_len=4096, micro_batch=4, gpu="gb300", impl="megatron-te"), 32, 256),
    ("gemma-2-9b", Workload(seq_len=4096, gpu="h200", attention="eager"), 8, None),
    ("qwen2.5-7b", Workload(seq_len=4096, gpu="a100-80gb", stack="fsdp2", attention="sdpa", optimizer="adafactor"),
     16, 64),
]
SERVING = [
    ("llama-3.1-70b", Workload(mode="infer", seq_len=8192, gen_tokens=256, gpu="h100-sxm"), 16),
    ("deepseek-v3", Workload(mode="infer", seq_len=4096, gen_tokens=128, micro_batch=8, gpu="h200"), 32),
    ("gpt-oss-20b", Workload(mode="infer", seq_len=4096, gen_tokens=1, gpu="h100-sxm", weight_dtype="nf4"), 8),
]


def _close(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=1e-9)


@pytest.mark.parametrize("name,w,gpus,batch", TRAINING, ids=[t[0] for t in TRAINING])
def test_training_grid_equals_estimate_time(name, w, gpus, batch):
    m = load_model(name).spec
    layouts = list(layouts_of(m, w, gpus, global_batch=batch))
    got = fast_time.times(m, w, layouts, TIMING, batch)
    assert got is not None and len(got["step_time_s"]) == len(layouts)
    for i in random.Random(gpus).sample(range(len(layouts)), min(25, len(layouts))):
        t = estimate_time(m, workload_of(w, layouts[i], batch), TIMING)
        assert _close(got["step_time_s"][i], t.step_time_s), layouts[i]
        assert _close(got["tokens_per_s"][i], t.tokens_per_s) and _close(got["mfu"][i], t.mfu)
        assert _close(got["tokens_per_s_per_gpu"][i], t.tokens_per_s_per_gpu)
        assert _close(got["cost_per_million_tokens"][i], t.cost_per_million_tokens)
        assert BOTTLENECKS[got["bottleneck"][i]] == t.bottleneck, layouts[i]


def test_the_megatron_overlap_switches_agree_on_a_moe_grid():
    """EP all-to-all overlap and the full-iteration CUDA graph (TimingInputs) priced alike on a grid and alone."""
    m = load_model("qwen3-30b-a3b").spec
    w = Workload(seq_len=4096, gpu="h100-sxm", impl="megatron-te")
    timing = TimingInputs(ep_comm_overlap=True, full_iteration_cuda_graph=True)
    layouts = list(layouts_of(m, w, 16, global_batch=128))
    got = fast_time.times(m, w, layouts, timing, 128)
    for i in random.Random(3).sample(range(len(layouts)), min(15, len(layouts))):
        t = estimate_time(m, workload_of(w, layouts[i], 128), timing)
        assert _close(got["step_time_s"][i], t.step_time_s), layouts[i]


@pytest.mark.parametrize("name,w,gpus", SERVING, ids=[s[0] for s in SERVING])
def test_serving_grid_equals_estimate_time(name, w, gpus):
    m = load_model(name).spec
    layouts = list(layouts_of(m, w, gpus))
    got = fast_infer_time.times(m, w, layouts, TIMING)
    for i in random.Random(gpus).sample(range(len(layouts)), min(25, len(layouts))):
        t = estimate_time(m, workload_of(w, layouts[i]), TIMING)
        assert _close(got["step_time_s"][i], t.step_time_s), layouts[i]
        assert _close(got["tokens_per_s"][i], t.tokens_per_s) and _close(got["mfu"][i], t.mfu)
        assert INFERENCE_BOTTLENECKS[got["bottleneck"][i]] == t.bottleneck, layouts[i]


def test_jobs_the_model_does_not_cover_are_left_to_estimate_time():
    m = load_model("llama-3.1-8b").spec
    assert fast_time.times(m, Workload(finetune="lora", gpu="h100-sxm"), [object()]) is None
    assert fast_time.times(m, Workload(), [object()]) is None  # no GPU: no time


@pytest.mark.parametrize("name", ["deepseek-v3", "gemma-2-27b"])
def test_deep_serving_pipelines_with_mixed_layer_kinds_equal_estimate_time(name):
    """DeepSeek-V3's dense first layers and Gemma-2's alternating windows make middle stages differ (each its own
    row); the alike ones are one row counted per stage; shapes of one TP share the operation lists that do not read
    EP (DeepSeek-V3's dense group, the head) and price the expert group per EP."""
    m = load_model(name).spec
    w = Workload(mode="infer", seq_len=4096, gen_tokens=64, gpu="h200")
    layouts = [lay for n in (32, 64) for lay in layouts_of(m, w, n) if lay.pp >= 3]
    got = fast_infer_time.times(m, w, layouts, TIMING)
    for i in random.Random(name).sample(range(len(layouts)), min(20, len(layouts))):
        t = estimate_time(m, workload_of(w, layouts[i]), TIMING)
        assert _close(got["step_time_s"][i], t.step_time_s), layouts[i]
        assert _close(got["ttft_s"][i], t.ttft_s) and _close(got["tpot_s"][i], t.tpot_s), layouts[i]
        assert INFERENCE_BOTTLENECKS[got["bottleneck"][i]] == t.bottleneck, layouts[i]
