"""Export the plan: the current view as a ready-to-run config for the framework that runs it.

One module per format, each mapping the Workload's fields (stack, parallel degrees, ZeRO, offload, recompute,
precision, optimizer, micro-batch, sequence, serving-engine fields) to that framework's own keys, with the file the
key is defined in cited in the module. What a target cannot express is listed in `Export.warnings` (and as comments
in formats that have them), never dropped silently.

    deepspeed    DeepSpeed config JSON                           (deepspeed.py)
    accelerate   Accelerate FSDP2 config YAML                    (accelerate.py)
    torchtitan   torchtitan 0.3 torchrun line with overrides     (torchtitan.py)
    megatron     Megatron-LM pretrain_gpt.py arguments           (megatron.py)
    hf-trainer   transformers TrainingArguments JSON             (hf_trainer.py)
    vllm         vllm serve command                              (vllm.py)
    sglang       SGLang launch_server command                    (sglang.py)

The calculator page's URL format (page_keys.py) and a workload's link in it (page_link.py) are exports too.

May import: calculator.stacks, calculator.memory, calculator.model, calculator.core.
"""
from __future__ import annotations

from types import ModuleType

from calculator import stacks
from calculator.core.errors import InputError
from calculator.exports import accelerate, deepspeed, hf_trainer, megatron, sglang, torchtitan, vllm
from calculator.exports.common import Export
from calculator.model.spec import ModelSpec
from calculator.memory.parallel import check_divisibility

MODULES: dict[str, ModuleType] = {mod.NAME: mod for mod in (deepspeed, accelerate, torchtitan, megatron, hf_trainer,
                                                            vllm, sglang)}
FORMATS: tuple[str, ...] = tuple(MODULES)
LABELS: dict[str, str] = {name: mod.LABEL for name, mod in MODULES.items()}


def formats_for(mode: str) -> tuple[str, ...]:
    """The formats that launch a workload of this mode (training configs for train/rl, engines for infer/rl)."""
    return tuple(name for name, mod in MODULES.items() if mode in mod.MODES)


def export(m, w, fmt: str) -> Export:
    """The file `fmt` for this model and workload. A format that cannot launch the mode is an InputError."""
    if fmt not in MODULES:
        raise InputError("format", f"unknown export format {fmt!r}: choose one of {', '.join(FORMATS)}")
    mod = MODULES[fmt]
    if w.mode not in mod.MODES:
        kind = "a training config" if "train" in mod.MODES else "a serving engine's command"
        raise InputError("format", f"{fmt} is {kind}; for mode {w.mode} choose one of "
                                   f"{', '.join(formats_for(w.mode))}")
    if isinstance(m, ModelSpec):  # the layout the estimate accepts, and only that
        check_divisibility(m, w)
    if w.mode == "train":
        stacks.check(w)
        if isinstance(m, ModelSpec):
            stacks.check_model(m, w)
    return mod.build(m, w)


__all__ = ["Export", "FORMATS", "LABELS", "MODULES", "export", "formats_for"]
