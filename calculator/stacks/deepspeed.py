"""DeepSpeed ZeRO (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py; defaults from deepspeed/runtime/zero/config.py,
DeepSpeed 0.19): bf16 parameters, fp32 master partition + optimizer state sharded over data parallelism.

Buffers besides the model states, with DeepSpeed's defaults (`reduce_bucket_size` = 5e8 elements,
`contiguous_gradients` = true, `overlap_comm` = false for stages 1–2 and true for stage 3,
`stage3_prefetch_bucket_size` = 5e7, `stage3_max_live_parameters` = 1e9, `sub_group_size` = 1e9):
- stages 1–2: `setup_buckets` allocates the gradient reduction (IPG) bucket, `reduce_bucket_size` elements in the
  gradient dtype (two with `overlap_comm`), when the backward starts and frees it after (`_release_ipg_buffers`).
  Stage 1 keeps every gradient in `param.grad` until the step; stage 2 copies each reduced gradient into the
  contiguous `grads_in_partition` (1/d of them) and frees it. The step flattens the partition's gradients and casts
  them to fp32 (`single_grad_partition`), the engine's gradient upcast.
- stage 3: the IPG bucket is allocated once at init (`reduce_bucket_size` elements, persistent); gradients live in
  `grad_partitions_flat_buffer` (1/d, persistent); parameters are gathered module by module with up to
  `stage3_prefetch_bucket_size` elements prefetched ahead. `initialize_optimizer_states` allocates an fp32 buffer
  of the largest sub-group (min(N/d, sub_group_size) elements) as the fp32 partitions' `.grad` and sets every
  `.grad` back to None before it returns (so since DeepSpeed 0.3.13, ZeRO-Infinity): freed at init, it only
  leaves a cached block. The step runs one sub-group at a time (`step` → `_prepare_fp32_grad_for_sub_group`):
  that sub-group's gradients are flattened into one bf16 copy, cast to an fp32 copy (the bf16 one freed), the
  optimizer steps it and `_release_sub_group` drops it — so the step's upcast and optimizer temporaries cover one
  sub-group, not the whole partition.
A ds_config with "auto" buckets (`Workload.ds_auto_buckets`) gets the values HF's integration writes, scaled to the
model (transformers/integrations/deepspeed.py `trainer_config_finalize`: reduce_bucket_size = h², stage-3
prefetch = int(0.9·h²); its persistence threshold 10·h keeps only norms and biases gathered: not counted); without
it, DeepSpeed's own defaults.
"""
from __future__ import annotations

from calculator.core.dtypes import nbytes
from calculator.model.parameters import count_parameters
from calculator.stacks.common import KeptDtype, StackContext, StackMemory, line

NAME = "deepspeed"
LABEL = "DeepSpeed ZeRO 1/2/3 (reduce bucket, contiguous gradients, stage-3 prefetch)"
SOURCE = "deepspeed-zero"
FP32_KEPT = KeptDtype(True, "with bf16 or fp16 enabled the engine casts every floating parameter to that dtype "
                            "(runtime/engine.py DeepSpeedEngine._configure_distributed_model → "
                            "_cast_module_mixed_precision; data_types.keep_in_fp32_modules keeps buffers only, "
                            "runtime/keep_in_fp32.py): the fp32-kept parameters are bf16 parameters like the rest, "
                            "with bf16 gradients and ZeRO's fp32 master partition, and the modules compute with them "
                            "in bf16", casts=True)

REDUCE_BUCKET_SIZE = 500_000_000  # elements (config.py: reduce_bucket_size)
PREFETCH_BUCKET_SIZE = 50_000_000  # elements (stage3_prefetch_bucket_size)
MAX_LIVE_PARAMETERS = 1_000_000_000  # elements (stage3_max_live_parameters)
SUB_GROUP_SIZE = 1_000_000_000  # elements (sub_group_size)
OVERLAP_COMM_STAGE_1_2 = False  # config.py overlap_comm_valid: true only for stage 3


def layout_problem(p) -> str:
    if p.pp > 1 and p.zero >= 2:  # deepspeed/runtime/pipe/engine.py: PipelineEngine asserts stage < 2
        return ("cannot combine ZeRO-2/3 with pipeline parallelism (its PipelineEngine refuses it): use zero 1 "
                "with pp, or pp 1")
    return ""


def states_workload(w):
    return w


def reduce_bucket_size(m, w) -> int:
    """Elements of the gradient reduce (IPG) bucket: h² with HF's "auto", else DeepSpeed's default."""
    return m.hidden_size ** 2 if w.ds_auto_buckets else REDUCE_BUCKET_SIZE


def prefetch_bucket_size(m, w) -> int:
    """Elements ZeRO-3 prefetches ahead: int(0.9·h²) with HF's "auto", else DeepSpeed's default."""
    return int(0.9 * m.hidden_size ** 2) if w.ds_auto_buckets else PREFETCH_BUCKET_SIZE


def largest_module(m, tp: int) -> int:
    """The largest single module (a linear, the embedding or the LM head): what ZeRO-3 gathers at once."""
    return -(-count_parameters(m).largest_module // tp)


def memory(ctx: StackContext) -> StackMemory:
    m, w = ctx.m, ctx.w
    p, prec = w.parallel, w.precision
    g = ctx.grad_dtype
    reduce = reduce_bucket_size(m, ctx.original or w)
    auto = " (HF auto: h²)" if w.ds_auto_buckets else ""
    if p.zero >= 3:
        bucket = line("sharding.ds_reduce_bucket", "sharding_buffers", f"ZeRO-3 gradient reduce bucket ({g})",
                      nbytes(reduce, g), f"reduce_bucket_size{auto} × b_grad (allocated at init)",
                      ("{:,} × {} B", reduce, nbytes(1, g)), SOURCE)
        sub_group = min(-(-ctx.shard.total // p.shard_group), SUB_GROUP_SIZE)
        module = largest_module(m, p.tp)
        b = nbytes(1, prec.params)
        gather = line("sharding.gather", "sharding_buffers", "Gathered largest module and its unsharded gradient",
                      2 * nbytes(module, prec.params), "M × b_param + M × b_param (M = largest module; autograd's "
                      "gradient is in the parameter's dtype until it is reduce-scattered)",
                      ("2 × {:,} × {} B", module, b), SOURCE)
        ahead = max(0, min(MAX_LIVE_PARAMETERS, module + prefetch_bucket_size(m, w)) - module)
        prefetch = line("sharding.prefetch", "sharding_buffers", "Prefetched parameters (stage3_prefetch_bucket_size)",
                        nbytes(ahead, prec.params), "min(max_live − M, prefetch_bucket) × b_param",
                        ("{:,} × {} B", ahead, b), SOURCE)
        return StackMemory(grads_whole_step=True, persistent=(bucket,), at_peak=(gather, prefetch),
                           step_chunk=SUB_GROUP_SIZE, step_flattens=True,
                           init_transient=nbytes(sub_group, prec.master_weights or "fp32"))
    buffers = 2 if OVERLAP_COMM_STAGE_1_2 else 1
    ipg = line("sharding.ds_reduce_bucket", "sharding_buffers", f"ZeRO gradient reduce bucket ({g})",
               buffers * nbytes(reduce, g), f"reduce_bucket_size{auto} × b_grad (during backward)",
               ("{:,} × {} B", reduce, nbytes(1, g)), SOURCE, "setup_buckets → _release_ipg_buffers")
    return StackMemory(grads_whole_step=True, at_peak=(ipg,) if p.zero else ())
