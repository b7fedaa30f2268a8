"""torchtitan 0.3.0 launch: `torchrun ... -m torchtitan.train --module <m> --config <fn>` plus command-line overrides.

torchtitan 0.3 has no TOML job file (≤ 0.2 had one): a job is a Python config function
(torchtitan/models/<module>/config_registry.py) and `<section>.<field>` overrides parsed by tyro
(torchtitan/config/manager.py ConfigManager.parse_args). Fields, read in the 0.3.0 wheel:
    training.local_batch_size, global_batch_size, seq_len, dtype, mixed_precision_param, enable_cpu_offload,
    disable_cuda_graphs                                         torchtitan/config/configs.py TrainingConfig
    parallelism.data_parallel_replicate_degree, data_parallel_shard_degree, fsdp_reshard_after_forward,
    tensor_parallel_degree, enable_sequence_parallel, pipeline_parallel_degree, pipeline_parallel_schedule,
    pipeline_parallel_microbatch_size, pipeline_parallel_first/last_stage_less_layers,
    pipeline_parallel_layers_per_stage, context_parallel_degree, expert_parallel_degree
                                                                torchtitan/config/configs.py ParallelismConfig
    compile.enable                                              torchtitan/config/configs.py CompileConfig
    optimizer.implementation                                    torchtitan/components/optimizer/optimizer.py
    activation-checkpoint:{none,selective,full}  (a tyro subcommand)
                                                                torchtitan/distributed/activation_checkpoint.py
Batch: local_batch_size is per data-parallel rank per accumulation step and is split into pipeline micro-batches of
pipeline_parallel_microbatch_size; global_batch_size / (local × data-parallel degree) is the accumulation
(torchtitan/trainer.py). Pipeline parallelism and expert parallelism need disable_cuda_graphs (Trainer.Config
_validate_cuda_graphs).
"""
from __future__ import annotations


from calculator import stacks
from calculator.exports.common import (Export, Notes, common_training_notes, global_batch, launcher,
                                       shell_command)
from calculator.memory.parallel import stage_layer_counts

NAME = "torchtitan"
LABEL = "torchtitan launch (command-line overrides)"
TARGET = "torchtitan 0.3.0"
MODES = ("train", "rl")

# Hub id -> (module, config function) in torchtitan 0.3.0's config registries (the function's hf_assets_path
# names the same checkpoint)
CONFIGS: dict[str, tuple[str, str]] = {
    "meta-llama/Llama-3.1-8B": ("llama3", "llama3_8b"), "meta-llama/Llama-3.1-70B": ("llama3", "llama3_70b"),
    "meta-llama/Llama-3.1-405B": ("llama3", "llama3_405b"), "Qwen/Qwen3-0.6B": ("qwen3", "qwen3_0_6b"),
    "Qwen/Qwen3-1.7B": ("qwen3", "qwen3_1_7b"), "Qwen/Qwen3-14B": ("qwen3", "qwen3_14b"),
    "Qwen/Qwen3-32B": ("qwen3", "qwen3_32b"), "Qwen/Qwen3-30B-A3B": ("qwen3", "qwen3_30b_a3b"),
    "deepseek-ai/DeepSeek-V3": ("deepseek_v3", "deepseek_v3_671b"),
    "openai/gpt-oss-20b": ("gpt_oss", "gpt_oss_20b"), "openai/gpt-oss-120b": ("gpt_oss", "gpt_oss_120b"),
}
SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B"}


def overrides(m, w, notes: Notes) -> list[str]:
    """The `--section.field value` overrides (and the activation-checkpoint subcommand, last)."""
    p, prec = w.parallel, w.precision
    args: list[str] = []

    def put(key: str, value) -> None:
        args.extend([f"--{key}", str(value)])

    # data parallelism: replicate (DDP) / shard (FSDP2) / both (HSDP); the FSDP mesh is dp_shard × cp
    replicate, shard = p.dp, 1
    if p.zero or p.offload_optimizer or p.offload_params:
        replicate, shard = 1, p.dp
        if p.zero_shard_size and p.zero_shard_size % p.cp == 0 and (p.dp * p.cp) % p.zero_shard_size == 0:
            replicate, shard = p.dp * p.cp // p.zero_shard_size, p.zero_shard_size // p.cp
        elif p.zero_shard_size:
            notes.add(f"zero_shard_size {p.zero_shard_size} is not a multiple of cp dividing dp × cp: full sharding")
        if p.zero == 1:
            notes.add("ZeRO-1 (optimizer state only) has no FSDP2 setting: written as fsdp_reshard_after_forward "
                      "never (ZeRO-2: gradients sharded too)")
        put("parallelism.fsdp_reshard_after_forward", "always" if p.zero >= 3 or p.zero == 0 else "never")
    put("parallelism.data_parallel_replicate_degree", replicate)
    put("parallelism.data_parallel_shard_degree", shard)
    if p.offload_optimizer or p.offload_params:
        args.append("--training.enable_cpu_offload")
        if not p.offload_params:
            notes.add("torchtitan's CPU offload moves parameters and gradients with the optimizer state")
    if p.distributed_optimizer and not p.zero:
        notes.add("Megatron's distributed optimizer: torchtitan shards with FSDP2 instead (set zero 1-3)")
    put("parallelism.tensor_parallel_degree", p.tp)
    if p.tp > 1:
        args.append("--parallelism." + ("enable_sequence_parallel" if p.sequence_parallel
                                        else "no_enable_sequence_parallel"))
    put("parallelism.context_parallel_degree", p.cp)
    put("parallelism.expert_parallel_degree", p.ep)
    if p.etp and p.etp != p.tp:
        notes.add(f"expert tensor parallelism {p.etp}: torchtitan 0.3 has no separate expert TP degree")
    put("parallelism.pipeline_parallel_degree", p.pp)
    local = w.micro_batch
    if p.pp > 1:
        put("parallelism.pipeline_parallel_schedule", SCHEDULES[p.schedule])
        put("parallelism.pipeline_parallel_microbatch_size", w.micro_batch)
        local = w.micro_batch * p.microbatches
        # torchtitan (distributed/pipeline_parallel.py): ceil((layers + first_less + last_less) / layers_per_stage)
        # stages, the first and last holding first_less / last_less layers fewer than the others
        v = p.virtual_stages if p.schedule == "interleaved" else 1
        if p.pp_embedding_in_split or p.pp_loss_in_split:  # Megatron's: the same as one layer fewer first / last
            e, lo = int(p.pp_embedding_in_split), int(p.pp_loss_in_split)
            per = (m.num_hidden_layers + e + lo) // (p.pp * v)
            counts = (per - e,) + (per,) * (p.pp - 2) + (per - lo,)
        elif p.pp_layout or (v > 1 and (p.pp_first_stage_layers or p.pp_last_stage_layers)):
            notes.add("a Megatron pipeline layout / uneven virtual stages: torchtitan sets only the first and last "
                      "stage's layers; give its module_fqns_per_model_part yourself")
            counts, per = None, m.num_hidden_layers // (p.pp * v)
        elif p.schedule == "interleaved":
            counts, per = None, m.num_hidden_layers // (p.pp * p.virtual_stages)
        else:
            counts = stage_layer_counts(m.num_hidden_layers, p)
            per = max(counts[1:-1]) if p.pp > 2 else max(counts)
        first_less, last_less = (0, 0) if counts is None else (per - counts[0], per - counts[-1])
        put("parallelism.pipeline_parallel_first_stage_less_layers", first_less)
        put("parallelism.pipeline_parallel_last_stage_less_layers", last_less)
        put("parallelism.pipeline_parallel_layers_per_stage", per)
    if p.pp > 1 or p.ep > 1:
        args.append("--training.disable_cuda_graphs")
    put("training.local_batch_size", local)
    put("training.global_batch_size", global_batch(w))
    put("training.seq_len", w.seq_len)
    # precision
    if prec.params == "bf16" and prec.master_weights is None:
        put("training.dtype", "bfloat16")  # parameters, gradients and optimizer state in bf16, no fp32 copy
        if prec.optimizer_states != "bf16":
            notes.add("training.dtype bfloat16 keeps the optimizer state in bf16 too")
    elif prec.params == "fp16" or prec.activations == "fp16":
        notes.add("fp16: torchtitan trains in bf16 or fp32 only")
    else:
        put("training.mixed_precision_param", "float32" if prec.activations == "fp32" else "bfloat16")
    if w.optimizer in ("adamw",):
        impl = w.optimizer_impl
        if prec.optimizer_states == "bf16" and prec.master_weights is not None:
            impl = "fused_opt_states_bf16"
        put("optimizer.implementation", impl)
    else:
        notes.add(f"optimizer {w.optimizer}: torchtitan 0.3 builds Adam, AdamW or Muon (the config function's "
                  "param_groups)")
    if w.impl == "compile":
        args.append("--compile.enable")
    if w.recompute == "selective":
        notes.add("torchtitan's selective checkpointing is per operator (saves matmul outputs), not the "
                  "attention-only recompute the estimate assumes")
    args.append("activation-checkpoint:" + w.recompute)
    return args


def build(m, w) -> Export:
    notes = Notes()
    name = getattr(m, "name", "")
    module, config = CONFIGS.get(name, ("MODULE", "CONFIG"))
    if name not in CONFIGS:
        notes.add(f"torchtitan 0.3 has no config function for {name or 'this model'}: replace MODULE / CONFIG "
                  "with the closest one in torchtitan/models/*/config_registry.py")
    stack = stacks.resolve(w)
    if stack not in ("fsdp2", "ddp", "hf-trainer"):
        notes.add(f"the estimate is for the {stack} stack; torchtitan runs FSDP2 / DDP with TP, PP, CP and EP: "
                  "re-estimate with stack fsdp2 for FSDP2's own buffers")
    args = overrides(m, w, notes)
    common_training_notes(m, w, notes, compile_=True, alloc_env=True)
    body = shell_command(launcher(w, f"-m torchtitan.train --module {module} --config {config}"), args)
    head = f"#!/usr/bin/env bash\n# {TARGET}: {LABEL}\n" + notes.comment_block()
    return Export(NAME, TARGET, "torchtitan_train.sh", "text/x-shellscript", head + body,
                  tuple(notes.lines))
