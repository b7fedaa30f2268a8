"""The terms live at each moment of a training step, as the engine sums the step (calculator.stages.training):

    model states     the long-lived terms (weights, master weights, gradients held all step, optimizer states,
                     the stack's persistent buffers, cuBLAS workspaces)
    forward end      + every tensor saved for backward (activations, the loss head's saved logits)
    backward peak    + the backward's working set: everything the stage prices for forward/backward
    optimizer step   + the step's temporaries and, where gradients are born in backward, every gradient: the
                     activations are freed by then (PyTorch frees saved tensors as backward consumes them)

The peak allocated of the stage is the highest of these (states + max(fwd/bwd, step)); each moment's terms sum to
its allocated bytes in the stage's timeline. Only allocated terms: the allocator's fragmentation, NCCL buffers and
the CUDA context are added by the reader (calculator.planning.timeline.live_sets).
"""
from __future__ import annotations

from calculator.core.result import ALLOCATED_COMPONENTS, Term

SAVED = frozenset({"activations", "logits"})  # what the forward leaves for the backward
WORKING = SAVED | {"transient"}  # components never held for the whole step


def training_moments(items: list, long_lived: list[int], born: int, step: int, step_note: str
                     ) -> tuple[tuple[str, tuple[Term, ...]], ...]:
    """(moment, terms live at it) for a training stage. `items`: the stage's terms before the optimizer step's
    excess is added; `long_lived`: the indices of those held all step; `born`: gradient bytes created in backward
    and freed after the step (0 where gradients live all step); `step`: the optimizer step's working set above the
    states (0 where the step runs off the GPU), `born` included."""
    keep = set(long_lived)
    states = tuple(x for i, x in enumerate(items) if i in keep and x.component in ALLOCATED_COMPONENTS)
    rest = [x for i, x in enumerate(items) if i not in keep and x.component in ALLOCATED_COMPONENTS]
    step_terms: tuple[Term, ...] = ()
    if step:
        at_step = born if born <= step else 0
        if at_step:
            step_terms += (Term("gradients.at_step", "gradients", "Gradients (all, until the step frees them)",
                                at_step, "every gradient born in backward", ("{:,} B", at_step), "torch-adamw",
                                "zero_grad(set_to_none=True) frees them after the step"),)
        if step - at_step:
            step_terms += (Term("transient.step", "transient", "Optimizer step temporaries", step - at_step,
                                "the optimizer's temporaries (+ upcast gradients)", ("{:,} B", step - at_step),
                                "torch-adamw", step_note),)
    return (("model states", states),
            ("forward: tensors saved", states + tuple(x for x in rest if x.component in SAVED)),
            ("backward: peak", states + tuple(rest)),
            ("optimizer step", states + step_terms))
