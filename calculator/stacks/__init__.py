"""Training stacks: the software that runs the training step decides how gradients live and which buffers exist.
One module per stack; `estimate.py` asks the chosen one for its terms.

    hf-trainer  HF Trainer / accelerate / a plain PyTorch loop on one GPU        (hf_trainer.py)
    ddp         torch.nn.parallel.DistributedDataParallel                         (ddp.py)
    fsdp2       torch.distributed.fsdp.fully_shard with a MixedPrecisionPolicy    (fsdp2.py)
    deepspeed   DeepSpeed ZeRO stage 0–3                                          (deepspeed.py)
    megatron    Megatron-LM / Megatron-Core DDP with its gradient buffer          (megatron.py)
                Megatron-FSDP when Workload.megatron_fsdp names a sharding strategy  (megatron_fsdp.py)

The default follows the parallel layout (`default_stack`).

May import: calculator.memory, calculator.model, calculator.core.
"""
from __future__ import annotations

from functools import lru_cache
from types import ModuleType

from calculator.core.errors import InputError
from calculator.stacks import common, ddp, deepspeed, fsdp2, hf_trainer, megatron, megatron_fsdp

MODULES: dict[str, ModuleType] = {m.NAME: m for m in (hf_trainer, ddp, fsdp2, deepspeed, megatron)}
STACKS: tuple[str, ...] = tuple(MODULES)
# a stack's module for a workload field that switches its buffers: Megatron-LM with --use-megatron-fsdp
VARIANTS: dict[str, tuple[str, ModuleType]] = {"megatron": ("megatron_fsdp", megatron_fsdp)}
LABELS: dict[str, str] = {name: m.LABEL for name, m in MODULES.items()}


def default_stack(p) -> str:
    """The stack a layout is usually run with: an FSDP hybrid-shard group, or ZeRO-2/3 with pipeline parallelism
    (torchtitan composes FSDP2 with PP; DeepSpeed's PipelineEngine refuses it) → fsdp2; a ZeRO stage → deepspeed;
    tensor / pipeline / context / expert parallelism or Megatron's distributed optimizer → megatron; data
    parallelism alone → ddp; one GPU → hf-trainer."""
    if p.zero_shard_size or (p.pp > 1 and p.zero >= 2):
        return "fsdp2"
    if p.zero or p.offload_optimizer or p.offload_params:
        return "deepspeed"
    if p.tp > 1 or p.pp > 1 or p.cp > 1 or p.ep > 1 or p.distributed_optimizer:
        return "megatron"
    if p.dp > 1:
        return "ddp"
    return "hf-trainer"


def default_reason(p) -> str:
    """Why the default is what it is, for the page and the CLI."""
    name = default_stack(p)
    return {"fsdp2": "an FSDP hybrid-shard group, or ZeRO-2/3 with pipeline stages, is set", "deepspeed": "a ZeRO stage / offload is set",
            "megatron": "tensor, pipeline, context or expert parallelism (or the distributed optimizer) is set",
            "ddp": "data parallelism only", "hf-trainer": "one GPU"}[name]


def resolve(w) -> str:
    """The stack of a workload: its own, or the layout's default."""
    return getattr(w, "stack", None) or default_stack(w.parallel)


def module(w) -> ModuleType:
    name = _stack_and_problem(w.stack, w.parallel)[0]
    variant = VARIANTS.get(name)
    if variant is not None and getattr(w, variant[0]) != "none":
        return variant[1]
    return MODULES[name]


def check(w) -> None:
    """A stack that cannot run the layout is refused with what to change (InputError naming `stack`)."""
    name, problem = _stack_and_problem(w.stack, w.parallel)
    if problem:
        raise InputError("stack", f"{name} {problem}")


def check_model(m, w) -> None:
    """A stack whose handling of the model's fp32-kept parameters is not modelled (its FP32_KEPT) is refused
    (InputError naming `stack`): common.check_fp32_kept."""
    common.check_fp32_kept(m, w, module(w))


def model_as_run(m, w):
    """The model as the workload's stack trains it (common.model_as_run: FSDP2 and DeepSpeed cast the fp32-kept
    parameters to the compute dtype)."""
    return common.model_as_run(m, module(w))


@lru_cache(maxsize=256)
def _stack_and_problem(stack: str | None, p) -> tuple[str, str]:
    """(the stack of a workload with this `stack` and layout, why it cannot run the layout or "")."""
    name = stack or default_stack(p)
    return name, MODULES[name].layout_problem(p)
