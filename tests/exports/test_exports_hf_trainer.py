"""The TrainingArguments export is parsed by transformers itself (5.23): HfArgumentParser(TrainingArguments)
.parse_json_file builds the real TrainingArguments (its __post_init__ checks included)."""
import json

import pytest
import transformers.training_args as training_args
from transformers import HfArgumentParser, TrainingArguments

from calculator.exports import export
from tests.export_cases import TRAINING, model


@pytest.fixture(autouse=True)
def a_bf16_gpu(monkeypatch):
    """The exports are for GPU jobs: __post_init__ refuses bf16 where no bf16 GPU is found (this machine)."""
    monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda *a, **k: True)


def parse(text: str, tmp_path) -> TrainingArguments:
    path = tmp_path / "training_args.json"
    path.write_text(text, encoding="utf-8")
    (args,) = HfArgumentParser(TrainingArguments).parse_json_file(str(path), allow_extra_keys=False)
    return args


@pytest.mark.parametrize("case", list(TRAINING))
def test_every_training_case_parses(case, tmp_path):
    preset, w = TRAINING[case]
    args = parse(export(model(preset), w, "hf-trainer").text, tmp_path)
    assert args.per_device_train_batch_size == w.micro_batch
    assert args.gradient_accumulation_steps == w.parallel.microbatches


def test_zero3_runs_through_the_deepspeed_export(tmp_path):
    preset, w = TRAINING["zero3-dp8"]
    out = export(model(preset), w, "hf-trainer")
    args = parse(out.text, tmp_path)
    assert args.bf16 is True and args.activation_checkpointing is True
    assert args.optim == "adamw_torch_fused"
    assert args.deepspeed == json.loads(export(model(preset), w, "deepspeed").text)
    assert args.hf_deepspeed_config.config["zero_optimization"]["stage"] == 3


def test_fsdp2_stack_is_the_trainers_fsdp(tmp_path):
    preset, w = TRAINING["hsdp"]
    out = export(model(preset), w, "hf-trainer")
    args = parse(out.text, tmp_path)
    assert args.fsdp is True
    assert args.fsdp_config["version"] == 2 and args.fsdp_config["reshard_after_forward"] is True
    assert any("hybrid_shard is FSDP1 only" in line for line in out.warnings)
    # what the Trainer hands to accelerate's FullyShardedDataParallelPlugin
    assert args.fsdp_plugin_args["fsdp_version"] == 2
    assert str(args.fsdp_plugin_args["reshard_after_forward"]).lower() == "true"


def test_optimizer_kernels_and_adapters(tmp_path):
    preset, w = TRAINING["single-lora"]
    out = export(model(preset), w, "hf-trainer")
    args = parse(out.text, tmp_path)
    assert args.optim == "adamw_bnb_8bit" and args.use_liger_kernel is True
    assert any("LoraConfig(r=32" in line for line in out.warnings)  # PEFT lives in the script: said
    preset, w = TRAINING["tp8-pp2-dp4"]
    out = export(model(preset), w, "hf-trainer")
    text = "\n".join(out.warnings)
    assert "tp_plan" in text and "pipeline" in text and "selective" in text
