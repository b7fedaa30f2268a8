"""🤗 Accelerate config YAML for FSDP2 (or DDP when nothing is sharded): `accelerate launch --config_file
accelerate_fsdp2.yaml train.py`.

Keys, read in accelerate 1.15:
    compute_environment, distributed_type, mixed_precision, num_processes, num_machines, machine_rank, rdzv_backend,
    same_network, main_training_function, use_cpu, fsdp_config, parallelism_config, dynamo_config
                                        accelerate/commands/config/config_args.py (ClusterConfig; unknown keys rejected)
    fsdp_config.fsdp_version, fsdp_reshard_after_forward, fsdp_offload_params, fsdp_auto_wrap_policy,
    fsdp_activation_checkpointing, fsdp_state_dict_type, fsdp_cpu_ram_efficient_loading, fsdp_sync_module_states
                                        accelerate/utils/launch.py prepare_multi_gpu_env (→ FSDP_* environment) read by
                                        accelerate/utils/dataclasses.py FullyShardedDataParallelPlugin
    parallelism_config.parallelism_config_{dp_replicate,dp_shard,tp,cp}_size
                                        accelerate/utils/launch.py prepare_extend_env_parallelism_config →
                                        accelerate/parallelism_config.py ParallelismConfig
    dynamo_config.dynamo_backend, dynamo_use_regional_compilation
                                        accelerate/commands/config/cluster.py, utils/launch.py (ACCELERATE_DYNAMO_*)
FSDP2 (torch.distributed.fsdp.fully_shard): ZeRO-3 = reshard_after_forward true, ZeRO-2 = false; with no wrap class
named, accelerate wraps the model's `_no_split_modules` (its decoder layers).
"""
from __future__ import annotations

import json

from calculator import stacks
from calculator.exports.common import Export, Notes, common_training_notes, compute_dtype, gradient_accumulation

NAME = "accelerate"
LABEL = "Accelerate FSDP2 config (YAML)"
TARGET = "accelerate 1.15"
MODES = ("train", "rl")
GPUS_PER_NODE = 8


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a JSON string is a YAML double-quoted scalar


def to_yaml(d: dict, indent: int = 0) -> str:
    """Nested dicts of scalars as block YAML (what accelerate's `to_yaml_file` writes; no PyYAML needed)."""
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out.append(" " * indent + f"{k}:" + (" {}\n" if not v else "\n" + to_yaml(v, indent + 2)))
        else:
            out.append(" " * indent + f"{k}: {_scalar(v)}\n")
    return "".join(out)


def build(m, w) -> Export:
    notes = Notes()
    p, prec = w.parallel, w.precision
    resolved = stacks.resolve(w)
    if resolved not in ("fsdp2", "ddp", "hf-trainer"):
        notes.add(f"the estimate is for the {resolved} stack; re-estimate with stack fsdp2 for FSDP2's own buffers")
    world = p.world_size // p.pp  # no pipeline stages in accelerate (said below)
    sharded = p.zero > 0 or p.zero_shard_size is not None or p.offload_params or p.offload_optimizer
    if not sharded and (p.tp > 1 or p.cp > 1):  # accelerate/parallelism_config.py refuses TP/CP over pure DDP
        sharded = True
        notes.add("accelerate composes tensor / context parallelism only with FSDP: the data-parallel ranks are "
                  "written as an FSDP2 full shard (ZeRO-3), which holds less than the unsharded estimate")
    dtype = compute_dtype(w)
    mixed = {"bf16": "bf16", "fp16": "fp16"}.get(dtype, "no")
    if prec.params in ("bf16", "fp16") and prec.master_weights is None:
        mixed = "no"
        notes.add(f"pure {prec.params} training (no fp32 master): load the model in {prec.params} in the script; "
                  "accelerate's mixed precision would keep fp32 parameters")
    machines = world // GPUS_PER_NODE if world % GPUS_PER_NODE == 0 and world > GPUS_PER_NODE else 1
    cfg: dict = {"compute_environment": "LOCAL_MACHINE",
                 "distributed_type": "FSDP" if sharded else ("MULTI_GPU" if world > 1 else "NO"),
                 "mixed_precision": mixed, "num_machines": machines, "num_processes": world, "machine_rank": 0,
                 "main_training_function": "main", "rdzv_backend": "static", "same_network": True, "use_cpu": False}
    if sharded:
        stage = p.zero or 3
        if p.zero == 1:
            stage = 2
            notes.add("ZeRO-1 (optimizer state only) has no FSDP2 setting: written as reshard_after_forward false "
                      "(ZeRO-2: gradients sharded too)")
        offload = p.offload_params or p.offload_optimizer
        if p.offload_optimizer and not p.offload_params:
            notes.add("FSDP2's CPU offload (CPUOffloadPolicy) moves parameters and gradients with the optimizer "
                      "state: fsdp_offload_params true offloads more than optimizer-only offload")
        fsdp = {"fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "fsdp_reshard_after_forward": stage >= 3, "fsdp_offload_params": offload,
                "fsdp_activation_checkpointing": w.recompute == "full",
                "fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_cpu_ram_efficient_loading": True,
                "fsdp_sync_module_states": True}
        cfg["fsdp_config"] = fsdp
    elif w.recompute == "full":
        notes.add("full recompute without FSDP: model.gradient_checkpointing_enable() in the script")
    if w.recompute == "selective":
        notes.add("selective (attention-only) recompute: accelerate checkpoints whole decoder layers only")
    replicate, dp_shard = (p.dp, 1) if not sharded else (1, p.dp)
    if sharded and p.zero_shard_size:
        if p.zero_shard_size % p.cp or (p.dp * p.cp) % p.zero_shard_size:
            notes.add(f"zero_shard_size {p.zero_shard_size} is not a multiple of cp {p.cp} dividing dp × cp "
                      f"{p.dp * p.cp}: written as full sharding")
        else:
            replicate, dp_shard = p.dp * p.cp // p.zero_shard_size, p.zero_shard_size // p.cp
    if p.tp > 1 or p.cp > 1 or (sharded and replicate > 1):
        cfg["parallelism_config"] = {"parallelism_config_dp_replicate_size": replicate,
                                     "parallelism_config_dp_shard_size": dp_shard,
                                     "parallelism_config_tp_size": p.tp, "parallelism_config_cp_size": p.cp}
    if p.sequence_parallel:
        notes.add("Megatron-style sequence parallelism: accelerate's TP follows the model's tp_plan")
    if p.pp > 1:
        notes.add(f"pipeline parallelism {p.pp}: accelerate's FSDP2 has no pipeline stages (use torchtitan or "
                  f"Megatron-LM); written for the tp × dp × cp = {world} processes of one stage")
    if p.ep > 1:
        notes.add(f"expert parallelism {p.ep}: accelerate has no expert-parallel setting")
    if w.impl == "compile":
        cfg["dynamo_config"] = {"dynamo_backend": "INDUCTOR", "dynamo_use_regional_compilation": True}
    notes.add(f"micro-batch {w.micro_batch} and gradient accumulation {gradient_accumulation(w)} are set in the "
              "script (DataLoader batch_size, Accelerator(gradient_accumulation_steps=...))")
    notes.add(f"optimizer {w.optimizer} ({w.optimizer_impl}) is created in the script")
    common_training_notes(m, w, notes, compile_=True)
    head = f"# accelerate launch --config_file accelerate_fsdp2.yaml train.py  ({TARGET})\n" + notes.comment_block()
    return Export(NAME, TARGET, "accelerate_fsdp2.yaml", "application/yaml", head + to_yaml(cfg),
                  tuple(notes.lines))
