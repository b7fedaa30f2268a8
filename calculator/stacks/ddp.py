"""PyTorch DistributedDataParallel (torch/nn/parallel/distributed.py + torch/csrc/distributed/c10d/reducer.cpp).

At wrap time the Reducer allocates gradient buckets covering every parameter that requires a gradient
(`Reducer::initialize_buckets`: one flat tensor per bucket, in the parameters' dtype; `bucket_cap_mb` = 25 MiB per
bucket and 1 MiB for the first only changes how they are cut, not their sum). They live as long as the model:
`after_build` of the H200 DDP cases holds exactly twice the parameter bytes. In backward each gradient is copied
into its bucket and all-reduced there, then copied back to `param.grad`:
- `gradient_as_bucket_view=False` (default): `param.grad` is a separate tensor, born in backward and freed by
  `zero_grad(set_to_none=True)` — the buckets are an extra gradient-sized buffer;
- `gradient_as_bucket_view=True`: `param.grad` is a view into its bucket — the buckets are the gradients.
Initialising the process group creates an NCCL communicator even at world size 1 (~0.5–0.6 GB outside PyTorch's
allocator on the H200).
"""
from __future__ import annotations

from calculator.stacks.common import StackContext, StackMemory, line

NAME = "ddp"
LABEL = "PyTorch DistributedDataParallel (gradient buckets allocated at wrap time)"
SOURCE = "ddp-buckets"


def layout_problem(p) -> str:
    if p.zero or p.offload_optimizer or p.offload_params:
        return "replicates parameters, gradients and optimizer state: ZeRO stages need stack deepspeed or fsdp2"
    if p.tp > 1 or p.pp > 1 or p.cp > 1 or p.ep > 1:
        return "is data parallelism only: tensor / pipeline / context / expert parallelism need stack megatron"
    return ""


def states_workload(w):
    return w


def memory(ctx: StackContext) -> StackMemory:
    w = ctx.w
    groups = {"dp": 1} if w.parallel.dp * w.parallel.cp == 1 else {}
    if w.ddp_bucket_view:
        return StackMemory(grads_whole_step=True, nccl_communicators=groups,
                           gradient_note="views into DDP's buckets (gradient_as_bucket_view=True), allocated at wrap")
    buckets = line("gradients.ddp_buckets", "gradients", f"DDP gradient buckets ({ctx.grad_dtype})", ctx.grad_bytes,
                   "N_gpu × b_grad (every trainable parameter in some 25 MiB bucket)",
                   f"{ctx.grad_bytes:,} B", SOURCE, "allocated when the model is wrapped; held for the whole run")
    return StackMemory(grads_whole_step=not w.zero_grad_set_to_none, persistent=(buckets,),
                       nccl_communicators=groups)
