"""🤗 transformers `TrainingArguments` as JSON: `HfArgumentParser(TrainingArguments).parse_json_file(...)` or
`TrainingArguments(**json.load(...))`.

Fields, read in transformers 5.23 (transformers/training_args.py TrainingArguments; optimizer names from
OptimizerNames in the same file): output_dir, per_device_train_batch_size, gradient_accumulation_steps, bf16, fp16,
activation_checkpointing, optim, optim_args, torch_compile, use_liger_kernel, deepspeed (a config dict: the DeepSpeed
export, calculator/exports/deepspeed.py), fsdp (true) with fsdp_config {"version": 2, "reshard_after_forward",
"cpu_offload", "activation_checkpointing"} (TrainingArguments._process_fsdp_args → accelerate's
FullyShardedDataParallelPlugin; the string forms "full_shard auto_wrap" are deprecated in 5.23).
The Trainer keeps no separate fp32 master copy of its own: `bf16=True` autocasts a model loaded in fp32 (PyTorch
AMP, 16 B/param with Adam) or in bf16 (pure bf16).
"""
from __future__ import annotations

import json

from calculator import stacks
from calculator.exports import deepspeed as ds_export
from calculator.exports.common import Export, Notes, common_training_notes, gradient_accumulation

NAME = "hf-trainer"
LABEL = "transformers TrainingArguments (JSON)"
TARGET = "transformers 5.23"
MODES = ("train", "rl")

OPTIM = {("adamw", "fused"): "adamw_torch_fused", ("adamw", "foreach"): "adamw_torch",
         ("adamw", "for-loop"): "adamw_torch", "adamw-8bit": "adamw_bnb_8bit", "sgd": "sgd", "sgd-momentum": "sgd",
         "adafactor": "adafactor", "lion": "lion_32bit"}


def build(m, w) -> Export:
    notes = Notes()
    p, prec = w.parallel, w.precision
    stack = stacks.resolve(w)
    args: dict = {"output_dir": "outputs", "per_device_train_batch_size": w.micro_batch,
                  "gradient_accumulation_steps": gradient_accumulation(w)}
    dtype = prec.params if prec.params in ("bf16", "fp16") else prec.activations
    if dtype in ("bf16", "fp16"):
        args[dtype] = True
    uses_ds = stack == "deepspeed" or (p.zero and stack not in ("fsdp2",))
    uses_fsdp = stack == "fsdp2"
    if prec.params in ("bf16", "fp16") and not (uses_ds or uses_fsdp):
        notes.add(f"load the model in {prec.params} (torch_dtype=torch.{'bfloat16' if prec.params == 'bf16' else 'float16'})"
                  + ("; the Trainer keeps no fp32 master copy (mixed precision with fp32 weights: load in fp32)"
                     if prec.master_weights else ""))
    key = (w.optimizer, w.optimizer_impl) if w.optimizer == "adamw" else w.optimizer
    if key in OPTIM:
        args["optim"] = OPTIM[key]
        if w.optimizer == "sgd-momentum":
            args["optim_args"] = "momentum=0.9"
        if w.optimizer == "adamw" and w.optimizer_impl == "for-loop":
            notes.add("AdamW for-loop: pass optim_args or a custom optimizer; adamw_torch is the foreach path")
    else:
        notes.add(f"optimizer {w.optimizer}: the Trainer always builds one (pass optimizers=(opt, None) to skip)")
    if w.recompute == "full":
        args["activation_checkpointing"] = True  # 5.23 name (gradient_checkpointing is its deprecated alias)
    elif w.recompute == "selective":
        notes.add("selective (attention-only) recompute: the Trainer checkpoints whole decoder layers only")
    if w.impl == "liger":
        args["use_liger_kernel"] = True
    if w.impl == "compile":
        args["torch_compile"] = True
    if uses_ds:
        ds = ds_export.build(m, w)
        args["deepspeed"] = json.loads(ds.text)
        for line in ds.warnings:  # the Trainer sets recompute itself (gradient_checkpointing)
            if not (w.recompute == "full" and "recompute" in line):
                notes.add(line)
    elif uses_fsdp:
        if p.zero == 1:
            notes.add("ZeRO-1 has no FSDP setting: written as reshard_after_forward false (ZeRO-2)")
        if p.zero_shard_size:
            notes.add(f"hybrid sharding over {p.zero_shard_size} ranks: the Trainer's FSDP2 shards over all ranks "
                      "(its hybrid_shard is FSDP1 only); written as a full shard")
        args["fsdp"] = True
        args["fsdp_config"] = {"version": 2, "reshard_after_forward": p.zero != 1 and p.zero != 2,
                               "cpu_offload": p.offload_optimizer or p.offload_params}
        if w.recompute == "full":  # FSDP's own checkpoint wrapper (the Trainer warns against the model's under FSDP)
            args["fsdp_config"]["activation_checkpointing"] = True
            del args["activation_checkpointing"]
    elif stack not in ("hf-trainer", "ddp"):
        notes.add(f"the estimate is for the {stack} stack; the Trainer runs DDP, FSDP or DeepSpeed")
    if w.ddp_bucket_view:
        notes.add("DDP gradient_as_bucket_view: not a TrainingArguments field")
    if p.tp > 1:
        notes.add(f"tensor parallelism {p.tp}: from_pretrained(..., tp_plan='auto') under torchrun, not a "
                  "TrainingArguments field")
    if p.pp > 1 or p.cp > 1 or p.ep > 1:
        notes.add("pipeline / context / expert parallelism: the Trainer has no setting for them")
    notes.add(f"sequences of {w.seq_len} tokens: the tokenizer's max_length / packing in the script")
    common_training_notes(m, w, notes, liger=True, compile_=True)
    return Export(NAME, TARGET, "training_args.json", "application/json", json.dumps(args, indent=2) + "\n",
                  tuple(notes.lines))
