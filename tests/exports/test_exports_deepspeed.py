"""The DeepSpeed export is parsed by DeepSpeed itself (deepspeed.runtime.config.DeepSpeedConfig, 0.19.8), at the
job's data-parallel world size, and says what DeepSpeed cannot express."""
import json

import pytest
from deepspeed.runtime import config as ds_config

from calculator.exports import export
from calculator.stacks import deepspeed as ds_stack
from tests.export_cases import TRAINING, model


def parse(text: str, world: int, monkeypatch) -> ds_config.DeepSpeedConfig:
    """DeepSpeedConfig as a rank of a `world`-rank data-parallel job sees it (no process group here)."""
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: world)
    return ds_config.DeepSpeedConfig(json.loads(text))


@pytest.mark.parametrize("case", list(TRAINING))
def test_every_training_case_parses(case, monkeypatch):
    preset, w = TRAINING[case]
    out = export(model(preset), w, "deepspeed")
    cfg = parse(out.text, w.parallel.dp, monkeypatch)
    assert cfg.train_micro_batch_size_per_gpu == w.micro_batch
    assert cfg.gradient_accumulation_steps == w.parallel.microbatches
    # DeepSpeed derives the global batch: micro × accumulation × data-parallel ranks
    assert cfg.train_batch_size == w.micro_batch * w.parallel.microbatches * w.parallel.dp


def test_zero3_keeps_the_buffer_sizes_the_estimate_assumed(monkeypatch):
    preset, w = TRAINING["zero3-dp8"]
    cfg = parse(export(model(preset), w, "deepspeed").text, 8, monkeypatch)
    z = cfg.zero_config
    assert cfg.zero_optimization_stage == 3
    assert z.reduce_bucket_size == ds_stack.REDUCE_BUCKET_SIZE
    assert z.prefetch_bucket_size == ds_stack.PREFETCH_BUCKET_SIZE
    assert z.max_live_parameters == ds_stack.MAX_LIVE_PARAMETERS
    assert z.sub_group_size == ds_stack.SUB_GROUP_SIZE
    assert z.overlap_comm is True and z.contiguous_gradients is True
    assert cfg.bfloat16_config.enabled and not cfg.float16_config.enabled
    assert cfg.optimizer_name == "adamw"


def test_offload_goes_to_the_cpu(monkeypatch):
    preset, w = TRAINING["offload"]
    cfg = parse(export(model(preset), w, "deepspeed").text, 4, monkeypatch)
    assert cfg.zero_config.offload_optimizer.device == "cpu"
    assert cfg.zero_config.offload_param.device == "cpu"


def test_pure_bf16_keeps_master_and_optimizer_state_in_bf16(monkeypatch):
    preset, w = TRAINING["pure-bf16-zero2"]
    cfg = parse(export(model(preset), w, "deepspeed").text, 2, monkeypatch)
    assert cfg.zero_optimization_stage == 2
    assert cfg.bfloat16_config.bf16_master_weights_and_grads is True
    assert cfg.bfloat16_config.bf16_optimizer_states is True


def test_tensor_parallel_and_what_deepspeed_cannot_express(monkeypatch):
    preset, w = TRAINING["tp8-pp2-dp4"]
    out = export(model(preset), w, "deepspeed")
    cfg = parse(out.text, 4, monkeypatch)
    assert cfg.tensor_parallel_config.autotp_size == 8
    assert cfg.zero_optimization_stage == 1  # Megatron's distributed optimizer, said so
    text = "\n".join(out.warnings)
    for expected in ("distributed optimizer written as ZeRO stage 1", "PipelineModule", "num_stages=2",
                     "selective", "sequence parallelism", "megatron stack"):
        assert expected in text


def test_unsupported_optimizer_and_adapters_are_reported(monkeypatch):
    preset, w = TRAINING["single-lora"]
    out = export(model(preset), w, "deepspeed")
    cfg = parse(out.text, 1, monkeypatch)
    assert cfg.optimizer_name is None  # no DeepSpeed optimizer for 8-bit AdamW ...
    text = "\n".join(out.warnings)
    assert "adamw-8bit: not a DeepSpeed optimizer" in text  # ... and it says so
    assert "LoraConfig(r=32" in text and "nf4" in text
    assert "Liger" in text and "expandable_segments:True" in text
