"""The accelerate export goes through accelerate's own path (1.15): ClusterConfig.from_yaml_file reads it, `accelerate
launch`'s argument merging and prepare_multi_gpu_env turn it into the launched processes' environment, and
FullyShardedDataParallelPlugin / ParallelismConfig read that environment as a training process does."""
import pytest
import yaml
from accelerate.commands.config.config_args import ClusterConfig
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.parallelism_config import ParallelismConfig
from accelerate.utils.dataclasses import FullyShardedDataParallelPlugin
from accelerate.utils.launch import prepare_multi_gpu_env

from calculator.exports import export
from calculator.exports.accelerate import to_yaml
from tests.export_cases import TRAINING, model


def launched_env(text: str, tmp_path) -> tuple[ClusterConfig, dict]:
    path = tmp_path / "accelerate.yaml"
    path.write_text(text, encoding="utf-8")
    cluster = ClusterConfig.from_yaml_file(str(path))  # rejects unknown top-level keys
    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    args, _, _ = _validate_launch_command(args)
    return cluster, (prepare_multi_gpu_env(args) if args.multi_gpu or args.use_fsdp else {})


@pytest.mark.parametrize("case", list(TRAINING))
def test_every_training_case_loads_and_launches(case, tmp_path, monkeypatch):
    preset, w = TRAINING[case]
    cluster, env = launched_env(export(model(preset), w, "accelerate").text, tmp_path)
    assert cluster.num_processes == w.parallel.world_size // w.parallel.pp
    assert cluster.mixed_precision in ("bf16", "no")
    if env.get("ACCELERATE_USE_PARALLELISM_CONFIG") == "true":  # the mesh covers exactly the launched processes
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert ParallelismConfig().total_size == cluster.num_processes


def test_zero3_is_fsdp2_full_shard_with_checkpointing(tmp_path, monkeypatch):
    preset, w = TRAINING["zero3-dp8"]
    cluster, env = launched_env(export(model(preset), w, "accelerate").text, tmp_path)
    assert str(cluster.distributed_type) == "DistributedType.FSDP"
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2
    assert plugin.reshard_after_forward is True
    assert plugin.activation_checkpointing is True
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_zero2_does_not_reshard_and_offload_is_on(tmp_path, monkeypatch):
    preset, w = TRAINING["pure-bf16-zero2"]
    out = export(model(preset), w, "accelerate")
    _, env = launched_env(out.text, tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert FullyShardedDataParallelPlugin().reshard_after_forward is False
    assert env["ACCELERATE_MIXED_PRECISION"] == "no"  # pure bf16: the model is loaded in bf16, said so
    assert any("pure bf16" in line for line in out.warnings)
    preset, w = TRAINING["offload"]
    _, env = launched_env(export(model(preset), w, "accelerate").text, tmp_path)
    monkeypatch.setenv("FSDP_OFFLOAD_PARAMS", env["FSDP_OFFLOAD_PARAMS"])
    assert FullyShardedDataParallelPlugin().cpu_offload is not None


def test_hybrid_shard_is_a_parallelism_config(tmp_path, monkeypatch):
    preset, w = TRAINING["hsdp"]  # 16 ranks sharded in groups of 8
    _, env = launched_env(export(model(preset), w, "accelerate").text, tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    pc = ParallelismConfig()
    assert (pc.dp_replicate_size, pc.dp_shard_size, pc.tp_size, pc.cp_size) == (2, 8, 1, 1)
    assert pc.total_size == 16


def test_tensor_parallel_and_what_accelerate_cannot_express(tmp_path, monkeypatch):
    preset, w = TRAINING["tp8-pp2-dp4"]  # no ZeRO, TP 8 over 4 data-parallel ranks, PP 2
    out = export(model(preset), w, "accelerate")
    cluster, env = launched_env(out.text, tmp_path)
    # accelerate refuses TP over pure DDP (parallelism_config.py): FSDP over the 4 ranks, and it says so
    assert str(cluster.distributed_type) == "DistributedType.FSDP"
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    pc = ParallelismConfig()
    assert (pc.dp_replicate_size, pc.dp_shard_size, pc.tp_size) == (1, 4, 8)
    text = "\n".join(out.warnings)
    assert "only with FSDP" in text
    assert "pipeline parallelism 2" in text and "selective" in text and "sequence parallelism" in text
    assert all(f"NOT EXPRESSED: {line}" in out.text for line in out.warnings)  # also as comments in the file


def test_yaml_writer_round_trips_through_pyyaml():
    d = {"a": "x: y", "b": True, "c": 3, "d": {"e": 0.5, "f": "no"}, "g": {}}
    assert yaml.safe_load(to_yaml(d)) == d
