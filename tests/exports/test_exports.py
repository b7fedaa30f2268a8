"""The export registry and `python -m calculator export`: the same workload flags as estimate, one file out, what the
framework cannot express on stderr, bad input exit status 2 with one line."""
import json

import pytest

from calculator.cli.main import main
from calculator.exports import FORMATS, MODULES, export, formats_for
from tests.export_cases import SERVING, TRAINING, model


def test_formats_by_mode():
    assert formats_for("train") == ("deepspeed", "accelerate", "torchtitan", "megatron", "hf-trainer")
    assert formats_for("infer") == ("vllm", "sglang")
    assert formats_for("rl") == FORMATS  # the trainer's config and the rollout engine's command


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_module_cites_its_target_and_names_its_file(fmt):
    mod = MODULES[fmt]
    assert mod.TARGET and mod.__doc__ and len(mod.__doc__) > 300  # the keys and where they are defined
    preset, w = (TRAINING["zero3-dp8"] if "train" in mod.MODES else SERVING["vllm-tp4"])
    out = export(model(preset), w, fmt)
    assert out.format == fmt and out.target == mod.TARGET and out.text.endswith("\n")


def test_cli_prints_the_file_and_reports_what_is_not_expressed(capsys):
    rc = main(["export", "--model", "llama-3.1-8b", "--mode", "train", "--dp", "8", "--zero", "3", "--batch", "2",
               "--recompute", "selective", "--format", "deepspeed"])
    out, err = capsys.readouterr()
    assert rc == 0
    cfg = json.loads(out)
    assert cfg["zero_optimization"]["stage"] == 3 and cfg["train_micro_batch_size_per_gpu"] == 2
    assert "not expressed: selective recompute" in err


def test_cli_json_and_output_file(tmp_path, capsys):
    target = tmp_path / "serve.sh"
    rc = main(["export", "--model", "qwen3-8b", "--mode", "infer", "--engine", "vllm", "--tp", "2",
               "--gpu-memory-utilization", "0.8", "--format", "vllm", "--json", "--output", str(target)])
    assert rc == 0
    data = json.loads(target.read_text())
    assert data["format"] == "vllm" and data["filename"] == "vllm_serve.sh"
    assert "--gpu-memory-utilization 0.8" in data["text"] and "--tensor-parallel-size 2" in data["text"]
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("argv, message", [
    (["--mode", "infer", "--format", "megatron"], "error: format: megatron is a training config"),
    (["--mode", "train", "--format", "toml"], "error: --format: invalid choice: 'toml'"),
    (["--mode", "train"], "error: the following arguments are required: --format"),
    (["--mode", "train", "--tp", "3", "--format", "megatron"], "error: tp: tensor parallel size 3 must divide"),
    (["--mode", "train", "--zero", "2", "--stack", "megatron", "--format", "megatron"], "error: stack: megatron "),
])
def test_cli_bad_input_is_one_line_and_status_2(argv, message, capsys):
    rc = main(["export", "--model", "llama-3.1-8b", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(message) and err.count("\n") == 1


def test_an_rl_job_exports_the_trainer_and_the_rollout_engine():
    preset, w = SERVING["rl-rollout"]
    for fmt in FORMATS:
        out = export(model(preset), w, fmt)
        if fmt in ("vllm", "sglang"):
            assert "--tensor-parallel-size 2" in out.text or "--tp-size 2" in out.text  # rollout_tp
        else:
            assert any(line.startswith("RL job: this is the trainer only") for line in out.warnings)
