"""PyTorch DistributedDataParallel (torch/nn/parallel/distributed.py + torch/csrc/distributed/c10d/reducer.cpp).

At wrap time the Reducer allocates gradient buckets covering every parameter that requires a gradient
(`Reducer::initialize_buckets`: one flat tensor per bucket, in the parameters' dtype). With the defaults
(`find_unused_parameters=False`) the first iteration has ONE bucket holding every parameter (`_ddp_init_helper`:
`bucket_size_limits = [sys.maxsize]`); at iteration 2's forward (`_pre_forward` → `reducer._rebuild_buckets()`) it
is replaced by buckets of `bucket_cap_mb` = 25 MiB (1 MiB for the first) in gradient-ready order. Their sum is the
same: `after_build` of the H200 DDP cases holds exactly twice the parameter bytes. In backward each gradient is
copied into its bucket and all-reduced there, then copied back to `param.grad`:
- `gradient_as_bucket_view=False` (default): `param.grad` is a separate tensor, born in backward and freed by
  `zero_grad(set_to_none=True)` — the buckets are an extra gradient-sized buffer;
- `gradient_as_bucket_view=True`: `param.grad` is a view into its bucket — the buckets are the gradients.
Initialising the process group creates an NCCL communicator even at world size 1 (~0.5–0.6 GB outside PyTorch's
allocator on the H200).

The one bucket rebuild can hold the first iteration's flat bucket one iteration longer: see
`first_bucket_held_at_rebuild` (counted when `Workload.ddp_rebuild_peak` is set; a note otherwise). HF Trainer wraps
with find_unused_parameters = not gradient checkpointing (transformers trainer.py), and with it True DDP's first
buckets are already the 1 / 25 MiB ones and the Reducer never rebuilds (distributed.py compute_bucket_size_limits;
reducer.cpp should_rebuild_buckets): there is no first flat bucket to hold.
"""
from __future__ import annotations

from calculator.memory import lora
from calculator.model.architectures import idle_shapes, no_grad_moe_shapes, no_grad_of_stage
from calculator.stacks.common import TORCH_OPTIM, KeptDtype, NoGradRule, StackContext, StackMemory, fp32_kept, line

NAME = "ddp"
LABEL = "PyTorch DistributedDataParallel (gradient buckets allocated at wrap time)"
SOURCE = "ddp-buckets"
REBUILD_SOURCE = "ddp-rebuild-hold"


def NO_GRAD(w) -> NoGradRule:  # noqa: N802 - a stack's NO_GRAD rule, here depending on the workload
    """DDP's buckets cover every parameter that requires a gradient (Reducer::initialize_buckets), reached or not;
    with find_unused_parameters=True (HF Trainer without gradient checkpointing) the Reducer leaves a globally unused
    parameter's .grad None (reducer.cpp finalize_backward / copy_bucket_to_grad), so AdamW gives it no state. With
    gradient_as_bucket_view the gradients are the buckets, every parameter's included."""
    return NoGradRule(bool(w.ddp_bucket_view), False, "buckets hold every trainable parameter; " + TORCH_OPTIM.rule
                      + " (traced: tests/golden_stacks/deepseek-v4-tiny.json, params_without_grad)")


FP32_KEPT = KeptDtype(True, "DDP leaves the modules and their dtypes as they are (activations: the one-GPU ones) and "
                            "its Reducer groups parameters into buckets by (dtype, device) "
                            "(torch.distributed._compute_bucket_assignment_by_size, reducer.cpp "
                            "compute_bucket_assignment_by_size: one BucketKey per dtype and device), each bucket one "
                            "flat tensor of its parameters' dtype: the fp32-kept parameters get fp32 buckets, and the "
                            "buckets hold every parameter at its own dtype's bytes, the gradients term "
                            "(tests/golden_stacks/deepseek-v4-tiny.json)")


def warnings(m, w) -> tuple[str, ...]:
    """Training with gradient checkpointing where trainable parameters never get a gradient (a top-k indexer's,
    architectures.no_grad_parameters; modules built but never run, architectures.idle_shapes; or the adapters
    PEFT puts on its linears, lora.no_grad_adapter_params): HF Trainer then wraps DDP with
    find_unused_parameters=False (transformers trainer.py: `not model.is_activation_checkpointing`) and DDP raises
    at the second iteration (traced: tests/golden_stacks/deepseek-v4-tiny.json, ddp_checkpointing)."""
    if w.mode != "train" or w.recompute == "none" or (getattr(m, "layer_types", None) is None
                                                      and not idle_shapes(m) and not any(no_grad_moe_shapes(m))):
        return ()
    layers = range(m.num_hidden_layers)
    if w.finetune == "full":
        n, what = no_grad_of_stage(m, 0, m.num_hidden_layers, True)[0], "the indexers' (or idle modules' or experts')"
    else:
        n, what = lora.no_grad_adapter_params(m, w.lora_rank, w.lora_targets, layers)[0], "the indexers' adapters'"
    if not n:
        return ()
    return (f"DDP with gradient checkpointing: HF Trainer passes find_unused_parameters=False, and {what} {n:,} "
            f"parameters get no gradient, so DDP raises 'Expected to have finished reduction in the prior "
            f"iteration' at the second step; set ddp_find_unused_parameters=True (the run priced here)",)


def layout_problem(p) -> str:
    if p.zero or p.offload_optimizer or p.offload_params:
        return "replicates parameters, gradients and optimizer state: ZeRO stages need stack deepspeed or fsdp2"
    if p.tp > 1 or p.pp > 1 or p.cp > 1 or p.ep > 1:
        return "is data parallelism only: tensor / pipeline / context / expert parallelism need stack megatron"
    return ""


def states_workload(w):
    return w


def first_bucket_held_at_rebuild(grad_bytes: int) -> int:
    """Bytes of the first iteration's flat bucket that can outlive DDP's bucket rebuild, up to iteration 2's
    forward/backward peak (PyTorch ≥ 2.8 over NCCL).

    - distributed.py `_ddp_init_helper`: with find_unused_parameters=False the first iteration has one bucket of
      every trainable parameter (`[sys.maxsize]`); reducer.cpp `rebuild_buckets` (called from `_pre_forward` of
      iteration 2) broadcasts the new bucket indices (`sync_bucket_indices`), then `initialize_buckets` drops the old
      buckets (`buckets_.clear()`) and allocates the new ones (`at::empty` per bucket).
    - ProcessGroupNCCL.cpp `collective()`: an async all-reduce (the Reducer's, via `_AllReduceBySumCommHook`) stashes
      its tensor on the Work's TensorShelf; only `WorkNCCL::wait()` unstashes it, and DDP waits on the Work's future
      instead (`finalize_backward`: `bucket.future_work->wait()`). The watchdog thread (`Watchdog::runLoop`, every
      `kWatchdogThreadSleepMillis` = 100 ms) moves a completed Work's shelf to `shelvesToUnstash_`, which the next
      collective's `workEnqueue` empties (pytorch/pytorch#148590, #150398).
    So the old flat bucket is freed at the rebuild only if the watchdog polled between iteration 1's all-reduce
    finishing on the GPU and the rebuild's broadcasts; otherwise it stays alive through iteration 2's forward and
    loss backward, until the first all-reduce enqueued after the next poll (bucket 0 of the rebuilt order, during the
    last decoder layer's backward). Whether it does depends on that window against the 100 ms poll: a timing, not a
    rule. Its size is every trainable parameter's gradient bytes."""
    return grad_bytes


def memory(ctx: StackContext) -> StackMemory:
    w = ctx.w
    groups = {"dp": 1} if w.parallel.dp * w.parallel.cp == 1 else {}
    bucket_bytes = ctx.grad_bytes + ctx.no_grad_bytes  # every trainable parameter, reached by backward or not
    held = first_bucket_held_at_rebuild(bucket_bytes)
    rebuild_note = (f"iteration 2 can also hold the first iteration's flat bucket ({held / 1e9:.2f} GB) through its "
                    f"forward and loss backward (NCCL's stash, freed by its watchdog: timing-dependent); "
                    f"--ddp-rebuild-peak counts it. Not under HF Trainer without gradient checkpointing: it passes "
                    f"find_unused_parameters=True (transformers trainer.py), so DDP buckets by 25 MiB from the start "
                    f"and never rebuilds (torch distributed.py compute_bucket_size_limits)")
    at_peak = ()
    if w.ddp_rebuild_peak:
        at_peak = (line("transient.ddp_rebuild_hold", "transient", "DDP's first-iteration bucket held past the rebuild",
                        held, "N_gpu × b_grad (one flat bucket of every trainable parameter)", f"{held:,} B",
                        REBUILD_SOURCE, "iteration 2 only: freed at the first all-reduce after the NCCL watchdog's "
                        "next poll; whether it is held depends on timing (the worst case is counted)"),)
        rebuild_note = "iteration 2's held first bucket is counted (transient)"
    if w.ddp_bucket_view:
        return StackMemory(grads_whole_step=True, nccl_communicators=groups, at_peak=at_peak,
                           gradient_note="views into DDP's buckets (gradient_as_bucket_view=True), allocated at wrap; "
                                         + rebuild_note)
    buckets = line("gradients.ddp_buckets", "gradients", f"DDP gradient buckets ({_bucket_dtypes(ctx)})",
                   bucket_bytes, "N_gpu × b_grad (every trainable parameter in some 25 MiB bucket of its dtype)",
                   _bucket_text(ctx), SOURCE, "allocated when the model is wrapped; held for the whole run; "
                   + rebuild_note)
    return StackMemory(grads_whole_step=not w.zero_grad_set_to_none, persistent=(buckets,), at_peak=at_peak,
                       nccl_communicators=groups)


def _kept(ctx: StackContext) -> int:
    """The fp32-kept parameters of this GPU's shard with a low-precision gradient rule (0 otherwise)."""
    if ctx.grad_dtype == "fp32" or ctx.w.finetune != "full":
        return 0
    return fp32_kept(ctx.m, ctx.shard.first_layer, ctx.shard.last_layer, ctx.shard.has_head)


def _bucket_dtypes(ctx: StackContext) -> str:
    """The buckets' dtypes: one set of buckets per parameter dtype (FP32_KEPT)."""
    return f"{ctx.grad_dtype} + fp32" if _kept(ctx) else ctx.grad_dtype


def _bucket_text(ctx: StackContext) -> str:
    """The buckets' bytes, split by dtype where the fp32-kept parameters have buckets of their own."""
    n32, total = _kept(ctx), ctx.grad_bytes + ctx.no_grad_bytes
    if not n32:
        return f"{total:,} B"
    return f"{total - 4 * n32:,} B {ctx.grad_dtype} + {n32:,} × 4 B fp32 (the fp32-kept parameters)"
