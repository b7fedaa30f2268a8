"""calculator/stages/training.py: what a stage holds for the whole step is built once per model, shard and workload
but its batch and sequence (the _HELD cache), and never shared between workloads that hold different states."""
from unittest import mock

import pytest

from calculator import Workload, estimate
from calculator.stages import training as stage_training
from calculator.model.presets import load_model

LLAMA_8B = load_model("llama-3.1-8b").spec
QWEN3_06B = load_model("qwen3-0.6b").spec


def _stage(m, w):
    s = estimate(m, w, with_fits=False).stages[0]
    return s.terms, s.host_terms, s.phases, s.peak_allocated_bytes, s.total_bytes


def _fresh(m, w):
    with mock.patch.dict(stage_training._HELD, clear=True):
        return _stage(m, w)


def test_other_sequences_and_micro_batches_reuse_what_the_stage_holds():
    w = Workload(seq_len=2048, parallel={"tp": 2, "dp": 4, "zero": 1}, gpu="h100-sxm")
    with mock.patch.dict(stage_training._HELD, clear=True):
        first = _stage(LLAMA_8B, w)
        longer = _stage(LLAMA_8B, w.model_copy(update={"seq_len": 8192, "micro_batch": 2}))
        assert len(stage_training._HELD) == 1
    assert first == _fresh(LLAMA_8B, w)
    assert longer == _fresh(LLAMA_8B, w.model_copy(update={"seq_len": 8192, "micro_batch": 2}))
    assert longer[3] > first[3]


BASE = Workload(seq_len=2048, parallel={"dp": 8, "zero": 1}, gpu="h100-sxm")  # DeepSpeed ZeRO-1
DDP = Workload(seq_len=2048, parallel={"dp": 8}, gpu="h100-sxm")


@pytest.mark.parametrize("update", [
    {"optimizer": "sgd"},
    {"precision": {"params": "fp32", "grads": "fp32", "master_weights": None, "optimizer_states": "fp32",
                   "activations": "fp32"}},
    {"parallel": {"dp": 8, "zero": 2}},
    {"parallel": {"dp": 8, "zero": 1, "offload_optimizer": True}},
    {"parallel": {"dp": 8, "zero": 3}},
    {"gpu": "a100-80gb"},  # cuBLAS workspace 8.125 MiB instead of 32
    {"overheads": {"cublas_workspace_bytes": 1 << 20}},
    {"finetune": "lora"},
    {"finetune": "lora", "lora_rank": 64},
    {"ds_auto_buckets": True},
])
def test_a_workload_holding_other_states_does_not_reuse_them(update):
    other = Workload(**{**BASE.model_dump(), **update})
    with mock.patch.dict(stage_training._HELD, clear=True):
        base = _stage(LLAMA_8B, BASE)  # cached first
        got = _stage(LLAMA_8B, other)
        assert len(stage_training._HELD) == 2
    assert got == _fresh(LLAMA_8B, other) and got != base


@pytest.mark.parametrize("update", [{"zero_grad_set_to_none": False}, {"ddp_bucket_view": True},
                                    {"ddp_rebuild_peak": True}, {"stack": "fsdp2"}])
def test_a_ddp_workload_holding_other_states_does_not_reuse_them(update):
    other = DDP.model_copy(update=update)
    with mock.patch.dict(stage_training._HELD, clear=True):
        base = _stage(LLAMA_8B, DDP)
        got = _stage(LLAMA_8B, other)
        assert len(stage_training._HELD) == 2
    assert got == _fresh(LLAMA_8B, other) and got != base


def test_another_model_or_shard_does_not_reuse_them():
    w = Workload(seq_len=1024, parallel={"tp": 2})
    with mock.patch.dict(stage_training._HELD, clear=True):
        _stage(LLAMA_8B, w)
        assert _stage(QWEN3_06B, w) == _fresh(QWEN3_06B, w)
        four = w.model_copy(update={"parallel": w.parallel.model_copy(update={"tp": 4})})
        assert _stage(LLAMA_8B, four) == _fresh(LLAMA_8B, four)
        assert len(stage_training._HELD) == 3


def test_the_cache_is_bounded():
    with mock.patch.dict(stage_training._HELD, clear=True), mock.patch.object(stage_training, "_MAX_HELD", 3):
        for rank in (8, 16, 32, 64, 128):
            _stage(QWEN3_06B, Workload(seq_len=512, finetune="lora", lora_rank=rank))
        assert len(stage_training._HELD) == 3


@pytest.mark.parametrize("job", [
    {"parallel": {"dp": 8}},
    {"parallel": {"dp": 8}, "ddp_bucket_view": True, "ddp_rebuild_peak": True},
    {"parallel": {"dp": 8, "zero": 3}, "ds_auto_buckets": True},
    {"parallel": {"dp": 8, "zero": 2, "offload_optimizer": True}},
    {"stack": "fsdp2", "parallel": {"dp": 8, "zero": 3}},
    {"parallel": {"tp": 2, "pp": 2, "dp": 2}},
    {"finetune": "qlora", "kbit_prep": True},
    {"finetune": "lora", "parallel": {"dp": 4, "zero": 3}},
    {"zero_grad_set_to_none": False},
])
def test_what_a_stage_holds_never_depends_on_the_batch_or_the_sequence(job):
    """The premise of the _HELD key: built afresh at other batches and sequences, the held states are the same."""
    from calculator.stages import pipeline as pipeline_stages
    from calculator.memory.parallel import stage_shards
    w = Workload(seq_len=1024, **job)
    for shard in stage_shards(LLAMA_8B, w.parallel):
        built = [stage_training._held_for_the_step(LLAMA_8B, pipeline_stages.SharedByStages(LLAMA_8B, v), shard, None)
                 for v in (w, w.model_copy(update={"seq_len": 8192, "micro_batch": 4, "gen_tokens": 16}))]
        assert built[0] == built[1]
