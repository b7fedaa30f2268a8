"""Each content of pipeline stage is computed once: a later middle stage with the same layers and parameters is the
earlier one renumbered (inference) or computed when read (training, fewer micro-batches in flight); either way
it equals the stage computed on its own, and the most loaded stage is the one a full pass over every stage finds."""
from __future__ import annotations

import pytest

from calculator import Workload, estimate
from calculator.stages.inference import inference_stage
from calculator.stages.terms import gpu_of
from calculator.stages.training import training_stage
from calculator.memory.parallel import stage_shards
from calculator.model.presets import load_model
from calculator.core.result import LazyStage

CASES = [
    ("llama-3.1-70b", {"parallel": {"tp": 8, "pp": 16, "dp": 2, "zero": 1}}),
    ("llama-3.1-70b", {"parallel": {"tp": 4, "pp": 8, "num_microbatches": 32}, "recompute": "full"}),
    ("llama-3.1-70b", {"parallel": {"tp": 4, "pp": 4, "schedule": "interleaved", "virtual_stages": 2}}),
    ("deepseek-v3", {"parallel": {"tp": 8, "pp": 8, "dp": 4, "ep": 4, "etp": 1, "zero": 1, "pp_first_stage_layers": 7,
                                  "pp_last_stage_layers": 6}}),
    ("gemma-2-9b", {"parallel": {"pp": 6, "pp_first_stage_layers": 2}, "attention": "sdpa", "seq_len": 8192}),
    ("qwen2.5-7b", {"parallel": {"pp": 4}, "stack": "fsdp2", "finetune": "lora"}),
    ("llama-3.1-70b", {"mode": "infer", "seq_len": 32768, "parallel": {"tp": 2, "pp": 8}}),
    ("gemma-2-9b", {"mode": "infer", "seq_len": 16384, "parallel": {"pp": 7}}),
]


@pytest.mark.parametrize("model_id,workload", CASES)
def test_every_stage_equals_the_stage_computed_alone(model_id, workload):
    m, w = load_model(model_id).spec, Workload(**workload)
    est = estimate(m, w, with_fits=False)
    build = training_stage if w.mode == "train" else inference_stage
    alone = [build(m, w, s, gpu_of(w.gpu)) for s in stage_shards(m, w.parallel)]
    assert len(est.stages) == len(alone) > 1
    for got, want in zip(est.stages, alone):
        assert (got.force() if isinstance(got, LazyStage) else got) == want
    assert est.worst_stage == max(range(len(alone)), key=lambda i: alone[i].total_bytes)
    assert est.peak_allocated_bytes == max(s.peak_allocated_bytes for s in alone)


def test_a_training_pipeline_computes_three_stages_of_sixteen():
    m = load_model("llama-3.1-70b").spec
    est = estimate(m, Workload(parallel={"tp": 8, "pp": 16, "dp": 2, "zero": 1}), with_fits=False)
    computed = [s.stage for s in est.stages if not isinstance(s, LazyStage)]
    assert computed == [0, 1, 15]
    lazy = est.stages[7]
    assert lazy.total_bytes < est.stages[1].total_bytes and lazy.layers == (35, 40) and lazy.stage == 7
