"""HF Trainer / accelerate / a plain PyTorch loop on one GPU.

    loss = model(**batch).loss; loss.backward(); optimizer.step(); optimizer.zero_grad(set_to_none=True)

Gradients do not exist during the forward pass: each is created by its parameter's AccumulateGrad node when the
backward reaches it (torch/csrc/autograd/functions/accumulate_grad.h) and all are freed by
`zero_grad(set_to_none=True)` (torch/optim/optimizer.py: the default since PyTorch 2.0; transformers
trainer.py calls `model.zero_grad()` after each optimizer step, which sets them to None the same way). So the
forward/backward peak — usually the loss backward — holds no gradient, and the optimizer step holds them all
(`common.backward_peak`). With `zero_grad(set_to_none=False)` they are zeroed in place and live for the whole
step. The default optimizer is torch.optim.AdamW(fused=True) (transformers' `adamw_torch_fused`), which keeps no
temporaries. Measured on an H200: tests/golden_gpu/h200/train_*, trainer_*.
"""
from __future__ import annotations

from calculator.stacks.common import TORCH_OPTIM, KeptDtype, StackContext, StackMemory

NAME = "hf-trainer"
LABEL = "HF Trainer / accelerate / plain PyTorch loop on one GPU (gradients freed after each step)"
SOURCE = "hf-trainer-grads"
NO_GRAD = TORCH_OPTIM  # the indexers' parameters: no .grad, no AdamW state
FP32_KEPT = KeptDtype(True, "each parameter keeps its dtype: AccumulateGrad gives it a gradient of that dtype and "
                            "torch.optim.AdamW's exp_avg / exp_avg_sq are zeros_like of it (stages/held.py "
                            "_fp32_kept), held to the CPU-traced goldens tests/golden/deepseek-v4-tiny__*")


def layout_problem(p) -> str:
    if p.world_size > 1 or p.zero or p.offload_optimizer or p.offload_params:
        return ("runs on one GPU without sharding; on several GPUs the HF Trainer wraps the model in DDP, FSDP or "
                "DeepSpeed: choose stack ddp, fsdp2 or deepspeed")
    return ""


def states_workload(w):
    return w


def memory(ctx: StackContext) -> StackMemory:
    return StackMemory(grads_whole_step=not ctx.w.zero_grad_set_to_none)
