"""Which communication a training stack overlaps with compute, by default (TimingInputs overrides each).

- Megatron-LM / Megatron-Core: --overlap-grad-reduce and --overlap-param-gather are off unless asked for
  (megatron/core/distributed/distributed_data_parallel_config.py: overlap_grad_reduce = False,
  overlap_param_gather = False): the gradient reduce-scatter (all-reduce without the distributed optimizer) runs
  after the last backward and the parameter all-gather after the optimizer step, both on the critical path.
- PyTorch DDP overlaps its bucketed all-reduce with the backward (Li et al. 2020, PyTorch Distributed, §3.2.3).
- FSDP2 (fully_shard) prefetches the next unit's all-gather during the current unit's compute and reduce-scatters on
  a separate stream (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py): both overlapped.
- DeepSpeed: overlap_comm is off for ZeRO-1/2 and on for ZeRO-3 (deepspeed/runtime/zero/config.py,
  DeepSpeedZeroConfig.overlap_comm_valid: None → stage == 3).
"""
from __future__ import annotations

from calculator.stacks import resolve


def grad_reduce_overlapped(w, inputs) -> bool:
    """Whether the gradient reduction hides behind the backward (the stack's default unless set)."""
    if inputs.overlap_grad_reduce is not None:
        return inputs.overlap_grad_reduce
    return _stack_default(w)


def param_gather_overlapped(w, inputs) -> bool:
    """Whether the parameter all-gather (distributed optimizer / ZeRO) hides behind the next forward."""
    if inputs.overlap_param_gather is not None:
        return inputs.overlap_param_gather
    return _stack_default(w)


def _stack_default(w) -> bool:
    stack = resolve(w)
    if stack == "megatron":
        return False
    if stack == "deepspeed":
        return w.parallel.zero >= 3
    return True  # ddp, fsdp2, hf-trainer (nothing to reduce on one GPU)
