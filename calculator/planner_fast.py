"""The planner's fast byte model: the per-GPU totals of a whole grid of layouts at once, equal to estimate()'s byte
for byte where it applies (tests/test_planner_fast.py checks a random sample of layouts).

Covered: inference with transformers generate() (engine "hf"), here; training, in calculator/planner_fast_train.py. Its per-stage sum (calculator/estimate.py,
_stage_inference + _finish) depends on the layout only through the pipeline stage's shard (TP, PP with its uneven
stages, EP, expert TP) and, for the NCCL buffers, the number of process groups of size > 1. So each distinct shard
is priced once, stage by stage, by the engine's own stage function (estimate._stage_inference, without the NCCL
buffers), and the grid is then one numpy gather plus the communicators' bytes per layout.

Not covered (planner.evaluate falls back to estimate() layout by layout): RL, the training layouts
planner_fast_train does not cover (its docstring), the serving engines vLLM / SGLang (a fit there is the engine starting and holding the batch, not a byte total), generic
networks and the textbook activation model.
"""
from __future__ import annotations

import numpy as np

from calculator.model import ModelSpec
from calculator.parallel import stage_shards
from calculator.workload import Workload


def covers(m, w: Workload) -> bool:
    """Whether the fast model gives estimate()'s bytes for this job's layouts (training: for the layouts
    calculator.planner_fast_train.layout_covered accepts)."""
    from calculator import planner_fast_train
    return (isinstance(m, ModelSpec) and w.mode == "infer" and w.engine == "hf") or planner_fast_train.covers(m, w)


def _gpu(w: Workload):
    from calculator.estimate import _gpu as gpu_of
    return gpu_of(w.gpu)


def _stage_bytes(m: ModelSpec, w: Workload, par, shard, gpu) -> tuple[int, int]:
    """(total without NCCL buffers, peak allocated) of one inference stage: estimate.py's own _stage_inference on
    the layout's stage with the communicators left out (they are added per layout)."""
    from calculator.estimate import _stage_inference
    lw = w.model_copy(update={"parallel": par, "overheads": w.overheads.model_copy(
        update={"include_comm_buffers": False})})
    stage = _stage_inference(m, lw, shard, gpu)
    return stage.total_bytes, stage.peak_allocated_bytes


def totals(m, w: Workload, layouts) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(nvidia-smi total, peak allocated, covered) of the most loaded GPU of every layout, as numpy arrays; None
    where the fast model does not cover the job. The caller estimates the layouts not covered with estimate()."""
    if not covers(m, w) or not layouts:
        return None
    if w.mode == "train":
        from calculator import planner_fast_train
        return planner_fast_train.totals(m, w, layouts)
    from calculator.planner_grid import workload_of
    gpu = _gpu(w)
    keys: dict[tuple, int] = {}
    key_of = np.empty(len(layouts), dtype=np.int64)
    groups = np.empty(len(layouts), dtype=np.int64)
    per_key: list[tuple[int, int]] = []
    for i, lay in enumerate(layouts):
        key = (lay.tp, lay.pp, lay.ep, lay.etp, lay.pp_first, lay.pp_last)
        k = keys.get(key)
        if k is None:
            par = workload_of(w, lay).parallel
            stages = [_stage_bytes(m, w, par, s, gpu) for s in stage_shards(m, par)]
            k = keys[key] = len(per_key)
            per_key.append((max(t for t, _ in stages), max(p for _, p in stages)))
        key_of[i] = k
        groups[i] = (lay.tp > 1) + (lay.pp > 1) + (lay.dp * lay.cp > 1) + (lay.cp > 1) + (lay.ep > 1)
    table = np.array(per_key, dtype=np.int64)
    o = w.overheads
    comm = groups * o.nccl_bytes_per_group if o.include_comm_buffers else np.zeros(len(layouts), dtype=np.int64)
    return table[key_of, 0] + comm, table[key_of, 1], np.ones(len(layouts), dtype=bool)
