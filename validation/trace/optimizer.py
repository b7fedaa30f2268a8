"""Optimizer states for validation/trace/accounting.py (protocol step 1 of validation/README.md): persistent gradients, an
optional master copy and an optimizer that has already taken one step; and the optimizer step itself (step 2b).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from validation.trace.models import DTYPES

RECIPES = {
    # name: (params_dtype, grads_dtype, master_dtype or None, optimizer_state_dtype)
    "mixed": ("bf16", "bf16", "fp32", "fp32"),
    "fp32": ("fp32", "fp32", None, "fp32"),
    "pure-bf16": ("bf16", "bf16", None, "bf16"),
}


@dataclass
class TrainStates:
    params: list
    master: list | None
    optimizer: torch.optim.Optimizer


def make_optimizer(opt_params, optimizer: str, foreach: bool):
    if optimizer == "adamw":
        return torch.optim.AdamW(opt_params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=foreach)
    if optimizer == "sgd-momentum":
        return torch.optim.SGD(opt_params, lr=1e-2, momentum=0.9, foreach=foreach)
    raise ValueError(f"unknown optimizer {optimizer!r}")


def build_train_states(model, recipe: str, optimizer: str, foreach: bool) -> TrainStates:
    """Params, persistent grads, optional fp32 master copy and an optimizer that has already taken one step."""
    _, grads_dtype, master_dtype, _ = RECIPES[recipe]
    params = list(model.parameters())
    for p in params:
        p.grad = torch.zeros_like(p, dtype=DTYPES[grads_dtype])
    return train_states(params, master_dtype, optimizer, foreach)


def reached_by_backward(model, tokens: int = 32) -> set[int]:
    """ids of the parameters a backward reaches: one forward and backward of `tokens` random tokens (labels = inputs)
    on the model's device, every gradient then dropped. What backward never reaches (a top-k indexer whose output
    is integer indices) keeps .grad None in a real step, so torch.optim gives it no state either."""
    from validation.trace.emulation import device_emulation
    device = next(model.parameters()).device
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(1)).to(device)
    with device_emulation(device.type):  # on the meta device as the measured step runs
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    reached = {id(p) for p in model.parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return reached


def build_reached_train_states(model, recipe: str, optimizer: str, foreach: bool) -> TrainStates:
    """build_train_states where only the parameters a backward reaches (reached_by_backward) get a persistent
    gradient and optimizer state, as in a real step; every parameter keeps its master copy (made at set-up). Each
    gradient in its parameter's dtype when that is fp32 (a low-precision model's fp32-kept modules), else the
    recipe's."""
    _, grads_dtype, master_dtype, _ = RECIPES[recipe]
    reached = reached_by_backward(model)
    params = list(model.parameters())
    for p in params:
        if id(p) in reached:
            p.grad = torch.zeros_like(p, dtype=torch.float32 if p.dtype == torch.float32 else DTYPES[grads_dtype])
    return train_states(params, master_dtype, optimizer, foreach)


def train_states(params: list, master_dtype: str | None, optimizer: str, foreach: bool) -> TrainStates:
    """The rest of protocol step 1 for `params`, whose persistent grads are already set (None: a parameter backward
    never reaches): a master copy in `master_dtype` (None: no master) and an optimizer over the master, or over the
    params, that has already taken one step with zero gradients (no state for a parameter without a gradient)."""
    master = None
    if master_dtype is not None:
        master = []
        for p in params:
            m = p.detach().to(DTYPES[master_dtype], copy=True)
            m.requires_grad_(True)
            master.append(m)
        opt_params = master
    else:
        opt_params = params
    opt = make_optimizer(opt_params, optimizer, foreach)
    # Initialise the optimizer state by taking one step with zero gradients.
    if master is not None:
        for p, m in zip(params, master):
            m.grad = torch.zeros_like(m) if p.grad is not None else None
    opt.step()
    if master is not None:
        for m in master:
            m.grad = None
    for p in params:
        if p.grad is not None:
            p.grad.zero_()
    return TrainStates(params, master, opt)


def optimizer_step(states: TrainStates) -> None:
    """Protocol step 2b.  With master weights: cast all grads to fp32 master grads at once (apex-O2 /
    `model_grads_to_master_grads` style), step the master, copy it back into the bf16 params, free the master
    grads.  Without: step the params directly.  Grads are then zeroed in place (set_to_none=False)."""
    if states.master is not None:
        for p, m in zip(states.params, states.master):
            m.grad = p.grad.to(m.dtype) if p.grad is not None else None
        states.optimizer.step()
        with torch.no_grad():
            for p, m in zip(states.params, states.master):
                p.copy_(m)
        for m in states.master:
            m.grad = None
    else:
        states.optimizer.step()
    for p in states.params:
        if p.grad is not None:
            p.grad.zero_()


def optimizer_state_tensors(opt) -> list:
    return [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
