"""The torchtitan export is parsed the way torchtitan 0.3.0 parses a launch: tyro over its own config dataclasses
(TrainingConfig, ParallelismConfig, CompileConfig from torchtitan/config/configs.py and the activation-checkpoint
subcommand union from torchtitan/distributed/activation_checkpoint.py). The trainer's other sections (model,
dataloader, optimizer, ...) import CUDA-only packages, so the optimizer implementation is checked against the Literal
in torchtitan/components/optimizer/optimizer.py read from the installed source."""
import ast
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torchtitan
import tyro
from torchtitan.config.configs import CompileConfig, ParallelismConfig, TrainingConfig

from calculator.exports import export
from calculator.exports.torchtitan import CONFIGS
from tests.export_cases import TRAINING, command_args, model

ROOT = Path(torchtitan.__file__).parent
_spec = importlib.util.spec_from_file_location("torchtitan_ac", ROOT / "distributed" / "activation_checkpoint.py")
AC = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(AC)  # by path: torchtitan/distributed/__init__ imports spmd_types (CUDA builds only)


@dataclass(kw_only=True)
class Job:
    """The sections of torchtitan's Trainer.Config (torchtitan/trainer.py) that the export sets."""

    training: TrainingConfig = field(default_factory=TrainingConfig)
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    activation_checkpoint: AC.ActivationCheckpointingConfig = field(default_factory=AC.SelectiveAC.Config)
    compile: CompileConfig = field(default_factory=CompileConfig)


def optimizer_implementations() -> list[str]:
    tree = ast.parse((ROOT / "components" / "optimizer" / "optimizer.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "implementation":
            return [e.value for e in ast.walk(node.annotation) if isinstance(e, ast.Constant)]
    raise AssertionError("no implementation field in torchtitan's optimizer config")


def parse(text: str) -> tuple[Job, dict]:
    """(the parsed sections, the --module/--config/--optimizer values ConfigManager handles outside them)."""
    args = command_args(text, "torchtitan.train")
    outside = {}
    for key in ("--module", "--config", "--optimizer.implementation"):
        if key in args:
            i = args.index(key)
            outside[key] = args[i + 1]
            del args[i:i + 2]
    return tyro.cli(Job, args=args), outside


@pytest.mark.parametrize("case", list(TRAINING))
def test_every_training_case_parses(case):
    preset, w = TRAINING[case]
    job, outside = parse(export(model(preset), w, "torchtitan").text)
    p = w.parallel
    par = job.parallelism
    assert par.tensor_parallel_degree == p.tp and par.pipeline_parallel_degree == p.pp
    assert par.context_parallel_degree == p.cp and par.expert_parallel_degree == p.ep
    assert par.data_parallel_replicate_degree * par.data_parallel_shard_degree == p.dp
    assert job.training.seq_len == w.seq_len
    # the trainer's batch arithmetic (torchtitan/trainer.py): global / (local × dp) steps of accumulation, each local
    # batch split into pipeline micro-batches of pipeline_parallel_microbatch_size
    local = job.training.local_batch_size
    per_step = job.training.global_batch_size // (local * p.dp)
    micro = par.pipeline_parallel_microbatch_size if p.pp > 1 else local
    assert micro == w.micro_batch
    assert per_step * local // micro == p.microbatches
    if "--optimizer.implementation" in outside:
        assert outside["--optimizer.implementation"] in optimizer_implementations()
    recompute = {"none": type(None), "full": AC.FullAC.Config, "selective": AC.SelectiveAC.Config}[w.recompute]
    assert isinstance(job.activation_checkpoint, recompute)


def test_layout_fields():
    preset, w = TRAINING["tp8-pp2-dp4"]
    job, outside = parse(export(model(preset), w, "torchtitan").text)
    assert outside == {"--module": "llama3", "--config": "llama3_70b", "--optimizer.implementation": "fused"}
    par = job.parallelism
    assert par.enable_sequence_parallel is True
    assert par.pipeline_parallel_schedule == "1F1B" and par.pipeline_parallel_layers_per_stage == 40
    assert job.training.disable_cuda_graphs is True  # pipeline parallelism refuses CUDA graphs (Trainer.Config)
    preset, w = TRAINING["moe-ep"]
    job, _ = parse(export(model(preset), w, "torchtitan").text)
    assert job.parallelism.pipeline_parallel_schedule == "Interleaved1F1B"
    assert job.parallelism.pipeline_parallel_layers_per_stage == 8  # 32 layers over 2 ranks × 2 virtual stages


def test_sharding_precision_offload():
    preset, w = TRAINING["hsdp"]
    job, _ = parse(export(model(preset), w, "torchtitan").text)
    assert (job.parallelism.data_parallel_replicate_degree, job.parallelism.data_parallel_shard_degree) == (2, 8)
    assert job.parallelism.fsdp_reshard_after_forward == "always"
    preset, w = TRAINING["pure-bf16-zero2"]
    job, _ = parse(export(model(preset), w, "torchtitan").text)
    assert job.training.dtype == "bfloat16" and job.parallelism.fsdp_reshard_after_forward == "never"
    preset, w = TRAINING["offload"]
    job, _ = parse(export(model(preset), w, "torchtitan").text)
    assert job.training.enable_cpu_offload is True


def test_what_torchtitan_cannot_express():
    preset, w = TRAINING["single-lora"]
    out = export(model(preset), w, "torchtitan")
    text = "\n".join(out.warnings)
    assert "adamw-8bit" in text and "LoraConfig" in text and "Liger" in text
    assert out.text.splitlines()[-1].startswith("    activation-checkpoint:none")
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True torchrun" in out.text
    preset, w = TRAINING["mla-cp"]
    out = export(model(preset), w, "torchtitan")
    assert "deepseek-ai/DeepSeek-V2-Lite" not in CONFIGS  # deepseek_v3_16b is deepseek-moe-16b, not V2-Lite
    assert any("ZeRO-1" in line for line in out.warnings)
    assert any("no config function for deepseek-ai/DeepSeek-V2-Lite" in line for line in out.warnings)
    out = export(model("gemma-2-2b"), TRAINING["zero3-dp8"][1], "torchtitan")
    assert "--module MODULE --config CONFIG" in out.text and any("no config function" in x for x in out.warnings)


def test_uneven_first_and_last_stages():
    preset, w = TRAINING["uneven-pp16"]  # DeepSeek-V3: 61 layers = 2 + 14 × 4 + 3
    job, _ = parse(export(model(preset), w, "torchtitan").text)
    par = job.parallelism
    per = par.pipeline_parallel_layers_per_stage
    first, last = per - par.pipeline_parallel_first_stage_less_layers, per - par.pipeline_parallel_last_stage_less_layers
    assert (first, per, last) == (2, 4, 3)
    # torchtitan's stage count (distributed/pipeline_parallel.py): ceil((layers + first_less + last_less) / per)
    stages = -(-(61 + par.pipeline_parallel_first_stage_less_layers + par.pipeline_parallel_last_stage_less_layers)
               // per)
    assert stages == 16 == par.pipeline_parallel_degree


def test_a_different_stack_is_said():
    preset, w = TRAINING["zero3-dp8"]  # ZeRO-3 alone: the estimate's default stack is DeepSpeed
    assert any("estimate is for the deepspeed stack" in line for line in export(model(preset), w, "torchtitan").warnings)
    preset, w = TRAINING["hsdp"]  # stack fsdp2: nothing to say about the stack
    assert not any("stack" in line for line in export(model(preset), w, "torchtitan").warnings)
