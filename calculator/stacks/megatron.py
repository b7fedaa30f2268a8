"""Megatron-LM / Megatron-Core DistributedDataParallel (megatron/core/distributed/param_and_grad_buffer.py,
distributed_data_parallel.py; megatron/core/optimizer/distrib_optimizer.py).

`_ParamAndGradBuffer` allocates one contiguous gradient buffer (`grad_data`, `torch.zeros(numel, grad_dtype)`)
for all parameters at model construction; every parameter's `main_grad` is a view into it, gradients are
accumulated there across micro-batches and it is never freed: gradients are held for the whole step. bf16
training forces fp32 accumulation and reduction (megatron/training/arguments.py: "bfloat16 requires gradient
accumulation and all-reduce to be done in fp32" → accumulate_allreduce_grads_in_fp32), so main grads are 4 B per
parameter. With the distributed optimizer the bf16 parameters also move into a contiguous `param_data` buffer (the
same bytes as the weights) and the fp32 master + Adam state is sharded over data parallelism; buckets are padded
to a multiple of lcm(dp, 128) elements (negligible).
"""
from __future__ import annotations

from calculator.memory.megatron_core import applies
from calculator.stacks import megatron_buffers
from calculator.stacks.common import KeptDtype, StackContext, StackMemory

# --optimizer-cpu-offload (Megatron-Core's HybridDeviceOptimizer, megatron/core/optimizer/cpu_offloading/): the fp32
# master weights and Adam state of the offloaded share live on the CPU; the DDP gradient buffer stays on the GPU
OFFLOAD_MOVES_GRADIENTS = False
NAME = "megatron"
LABEL = "Megatron-LM (persistent fp32 main-grad buffer, distributed optimizer)"
SOURCE = "megatron-grad-buffer"
FP32_KEPT = KeptDtype(False, "Megatron-LM trains its own model code, not the transformers modules whose saved "
                             "tensors and fp32-kept parameters the estimate traces "
                             "(architectures/compressed_saved.py): not modelled; use stack ddp, fsdp2 or deepspeed")


def layout_problem(p) -> str:
    if p.zero:
        return ("shards the optimizer with its distributed optimizer, not ZeRO stages: set distributed optimizer "
                "instead of zero, megatron_fsdp (optim / optim_grads / optim_grads_params: Megatron-FSDP, "
                "--use-megatron-fsdp) for ZeRO 1 / 2 / 3, or choose stack deepspeed / fsdp2")
    return ""


def states_workload(w):
    """bf16/fp16 parameters train with fp32 main gradients, or gradients in the parameters' dtype with
    --grad-reduce-in-bf16 (megatron/training/arguments.py: accumulate_allreduce_grads_in_fp32 = False). With the
    precision-aware optimizer TE's FusedAdam holds the master weights, counted by
    megatron_buffers.fused_adam_master instead of the master-weights term."""
    prec = states_precision(w)
    return w if prec is w.precision else w.model_copy(update={"precision": prec})


def states_precision(w):
    """The precision the model states are held in (see states_workload)."""
    prec = w.precision
    update = {}
    if prec.params in ("bf16", "fp16"):
        grads = "bf16" if prec.params == "bf16" and w.grad_reduce_in_bf16 else "fp32"
        if prec.grads != grads:
            update["grads"] = grads
    if megatron_buffers.fused_adam_holds_master(w) and prec.master_weights and not w.parallel.offload_optimizer:
        update["master_weights"] = None  # offloaded: the CPU optimizer keeps fp32 master weights (host RAM)
    return prec.model_copy(update=update) if update else prec


def memory(ctx: StackContext) -> StackMemory:
    """The gradient buffer; with impl megatron-te named too, Megatron-Core's and TE's own buffers
    (calculator/stacks/megatron_buffers.py)."""
    extra = megatron_buffers.persistent(ctx) if ctx.original is not None and applies(ctx.original) else ()
    return StackMemory(grads_whole_step=True, persistent=extra,
                       gradient_note="main_grad views into the contiguous gradient buffer, allocated at construction")
