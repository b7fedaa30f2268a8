"""DeepSpeed config JSON (the `--deepspeed ds_config.json` of deepspeed / HF Trainer / accelerate launches).

Keys, read in DeepSpeed 0.19.8:
    train_micro_batch_size_per_gpu, gradient_accumulation_steps   deepspeed/runtime/config.py (train_batch_size is
        left out: DeepSpeed derives it as micro × accumulation × data-parallel world size, _set_batch_related_parameters)
    bf16.enabled, bf16.bf16_master_weights_and_grads, bf16.bf16_optimizer_states, fp16.enabled
                                                              deepspeed/runtime/precision_config.py
    torch_autocast.enabled / dtype                            deepspeed/runtime/config.py (get_torch_autocast_*)
    data_types.grad_accum_dtype                               deepspeed/runtime/constants.py GRAD_ACCUM_DTYPE
    optimizer.type / params                                   deepspeed/runtime/config.py DEEPSPEED_OPTIMIZERS (other
        names fall through to torch.optim in engine._configure_basic_optimizer)
    zero_optimization.stage, reduce_bucket_size, contiguous_gradients, overlap_comm, stage3_prefetch_bucket_size,
        stage3_max_live_parameters, sub_group_size           deepspeed/runtime/zero/config.py
    zero_optimization.offload_optimizer / offload_param .device, .pin_memory
                                                              deepspeed/runtime/zero/offload_config.py
    tensor_parallel.autotp_size                               deepspeed/runtime/tensor_parallel/config.py
The ZeRO buffer sizes are written out at the values the estimate assumed (calculator/stacks/deepspeed.py), so the
run allocates what was estimated.
"""
from __future__ import annotations

import json

from calculator import stacks
from calculator.exports.common import Export, Notes, common_training_notes, gradient_accumulation
from calculator.stacks import deepspeed as ds_stack

NAME = "deepspeed"
LABEL = "DeepSpeed config (JSON)"
TARGET = "DeepSpeed 0.19.8"
MODES = ("train", "rl")

OPTIMIZER_TYPES = {"adamw": ("AdamW", {}), "sgd": ("SGD", {"lr": 1e-3}), "sgd-momentum": ("SGD", {"lr": 1e-3,
                   "momentum": 0.9}), "lion": ("Lion", {})}


def build(m, w) -> Export:
    notes = Notes()
    p, prec = w.parallel, w.precision
    if stacks.resolve(w) != NAME:
        notes.add(f"the estimate is for the {stacks.resolve(w)} stack; re-estimate with stack deepspeed for "
                  "DeepSpeed's own buffers")
    cfg: dict = {"train_micro_batch_size_per_gpu": w.micro_batch,
                 "gradient_accumulation_steps": gradient_accumulation(w)}
    # precision
    if prec.params == "bf16":
        cfg["bf16"] = {"enabled": True}
        if prec.master_weights is None:
            cfg["bf16"]["bf16_master_weights_and_grads"] = True
            if prec.optimizer_states == "bf16":
                cfg["bf16"]["bf16_optimizer_states"] = True
    elif prec.params == "fp16":
        cfg["fp16"] = {"enabled": True}
    elif prec.params == "fp32" and prec.activations in ("bf16", "fp16"):
        cfg["torch_autocast"] = {"enabled": True, "dtype": {"bf16": "bfloat16", "fp16": "float16"}[prec.activations]}
    elif prec.params != "fp32":
        notes.add(f"{prec.params} parameters: DeepSpeed trains in fp32, fp16 or bf16")
    if prec.params in ("bf16", "fp16") and prec.grads == "fp32":
        cfg["data_types"] = {"grad_accum_dtype": "fp32"}
    if prec.params == "fp16" and prec.master_weights is None:
        notes.add("fp16 without fp32 master weights: DeepSpeed's fp16 optimizer always keeps an fp32 master copy")
    if prec.optimizer_states == "bf16" and prec.master_weights is not None:
        notes.add("bf16 optimizer state over fp32 master weights: DeepSpeed keeps optimizer state in the master dtype")
    # optimizer
    if w.optimizer in OPTIMIZER_TYPES:
        kind, params = OPTIMIZER_TYPES[w.optimizer]
        cfg["optimizer"] = {"type": kind, "params": params} if params else {"type": kind}
    elif w.optimizer == "none":
        notes.add("no optimizer: DeepSpeed's engine is built without one (forward + backward only)")
    else:
        notes.add(f"{w.optimizer}: not a DeepSpeed optimizer; pass it as the client optimizer to "
                  "deepspeed.initialize(optimizer=...) and set zero_allow_untested_optimizer")
    if w.optimizer_impl != "fused" and w.optimizer in OPTIMIZER_TYPES:
        notes.add(f"optimizer implementation {w.optimizer_impl}: DeepSpeed uses its fused (or CPU) Adam")
    # ZeRO
    stage = p.zero
    if p.distributed_optimizer and stage == 0:
        stage = 1
        notes.add("Megatron's distributed optimizer written as ZeRO stage 1 (both shard the fp32 master weights "
                  "and optimizer state over data parallelism)")
    zero: dict = {"stage": stage}
    if stage:
        zero.update(reduce_bucket_size=ds_stack.reduce_bucket_size(m, w), contiguous_gradients=True,
                    overlap_comm=stage >= 3 or ds_stack.OVERLAP_COMM_STAGE_1_2)
    if stage >= 3:
        zero.update(stage3_prefetch_bucket_size=ds_stack.prefetch_bucket_size(m, w),
                    stage3_max_live_parameters=ds_stack.MAX_LIVE_PARAMETERS, sub_group_size=ds_stack.SUB_GROUP_SIZE)
    if p.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if p.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    cfg["zero_optimization"] = zero
    if prec.master_weights is None and prec.params == "bf16" and stage == 0:
        notes.add("bf16 master weights and gradients need a ZeRO stage in DeepSpeed (bf16_master_weights_and_grads "
                  "is a ZeRO optimizer option)")
    if p.zero_shard_size:
        notes.add(f"hybrid sharding over groups of {p.zero_shard_size}: DeepSpeed has no HSDP group (MiCS was "
                  "removed; ZeRO++ hpZ keeps a secondary copy instead)")
    # parallelism beyond data parallelism
    if p.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": p.tp}
    if p.sequence_parallel:
        notes.add("Megatron-style sequence parallelism: AutoTP has no sequence-parallel switch")
    if p.pp > 1:
        notes.add(f"pipeline parallelism is built in the script: deepspeed.pipe.PipelineModule(layers, "
                  f"num_stages={p.pp})" + (f", {p.virtual_stages} virtual stages per rank not supported"
                                            if p.virtual_stages > 1 else ""))
    if p.cp > 1:
        notes.add(f"context parallelism {p.cp}: DeepSpeed-Ulysses is set up in the script "
                  f"(sequence_parallel_size={p.cp} with an mpu)")
    if p.ep > 1:
        notes.add(f"expert parallelism {p.ep}: set in the model code, deepspeed.moe.layer.MoE(ep_size={p.ep})")
    if w.recompute != "none":
        notes.add(f"{w.recompute} recompute is enabled in the model (model.gradient_checkpointing_enable() or "
                  "deepspeed.checkpointing.checkpoint), not by this file"
                  + ("; DeepSpeed has no selective (attention-only) policy" if w.recompute == "selective" else ""))
    common_training_notes(m, w, notes)
    return Export(NAME, TARGET, "ds_config.json", "application/json", json.dumps(cfg, indent=2) + "\n",
                  tuple(notes.lines))
