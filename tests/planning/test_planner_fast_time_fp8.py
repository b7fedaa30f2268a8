"""The planner's vectorised training time (calculator.planning.fast_time) equals estimate_time() with FP8 GEMMs:
the softmax's SFU time on B200 (efficiency.exp_rate) and torchtitan's op AC replaying every float8 GEMM
(train_ops.op_mode)."""
import dataclasses
import random

import pytest

from calculator import Workload
from calculator.model.presets import load_model
from calculator.planning import fast_time
from calculator.planning.grid import layouts_of, workload_of
from calculator.timing.inputs import TimingInputs
from calculator.timing.step_time import estimate_time

FP8 = TimingInputs(matmul_dtype="fp8")
JOBS = [("llama-3.1-8b", Workload(seq_len=8192, gpu="b200", impl="megatron-te"), 16),
        ("llama-3.1-8b", Workload(seq_len=8192, gpu="h200", stack="fsdp2", impl="compile", recompute="op"), 16)]


@pytest.mark.parametrize("name,w,gpus", JOBS, ids=["megatron-te-b200", "fsdp2-op-ac-h200"])
def test_fp8_training_grid_equals_estimate_time(name, w, gpus):
    m = load_model(name).spec
    layouts = list(layouts_of(m, w, gpus))
    if w.recompute == "op":  # the grid searches none / selective / full: price torchtitan's op AC on the same layouts
        layouts = [dataclasses.replace(lay, recompute="op") for lay in layouts]
    got = fast_time.times(m, w, layouts, FP8, None)
    assert got is not None
    sample = random.Random(gpus).sample(range(len(layouts)), min(20, len(layouts)))
    modes = set()
    for i in sample:
        lw = workload_of(w, layouts[i], None)
        modes.add(lw.recompute)
        t = estimate_time(m, lw, FP8)
        assert got["step_time_s"][i] == pytest.approx(t.step_time_s, rel=1e-9), layouts[i]
    assert modes == ({"op"} if w.recompute == "op" else modes)
