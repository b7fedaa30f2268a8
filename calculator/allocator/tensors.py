"""What the allocator replay of a training step is given: the step's tensors as byte sizes. ModelTensors are those
that depend only on the model, its layout and precision; a StepPlan adds the batch- and sequence-dependent ones.
Built by calculator/allocator/step_plan.py, ordered into allocations and frees by calculator/allocator/step_order.py."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True, eq=False)
class ModelTensors:
    """The step's tensors that depend on the model, its layout and precision only, not on the batch or sequence:
    built once per (model, shard, precision) and shared by every plan of it (compared by identity, so a plan's
    hash costs nothing for the hundreds of parameter tensors)."""

    weights: tuple[int, ...]  # every parameter tensor (and frozen base tensor), build order
    masters: tuple[int, ...]  # fp32 master copies, after the build
    layer_grads: tuple[tuple[int, ...], ...]  # per layer: its parameters' gradients (trainable only)
    head_grads: tuple[int, ...]  # LM head (untied) / final norm gradients
    embedding_grads: tuple[int, ...]
    model_order: tuple[int, ...]  # trainable tensors' gradient bytes in model.parameters() order
    layer_transient: tuple[int, ...]  # allocated and freed one at a time in each layer's forward and backward
    layer_gather: int  # FSDP2: the unit's gathered parameters during its forward and backward
    tied_sum: int  # tied embeddings: the embedding backward's V×h gradient and its sum with the head's
    periods: tuple[int, ...] = ()  # tensors per layer in `weights` and `masters` (dense, MoE): the build's repeats


class StepPlan(NamedTuple):
    """Everything the replay needs, as byte sizes (a tuple, cheap to hash: replays are cached by plan)."""

    tensors: ModelTensors
    persistent: tuple[int, ...]  # the stack's buffers allocated after the master weights and kept (DDP buckets)
    n_layers: int
    layer_saved: tuple[int, ...]  # one layer's saved tensors in allocation order (every layer saves the same)
    layer_grad_work: tuple[int, ...]  # input-gradient tensors alive while one layer is back-propagated
    recompute_input: int  # full recompute: the layer input each layer keeps (0: no recompute)
    head_saved: tuple[int, ...]  # final norm + LM-head input
    logits: tuple[int, int]  # (model-dtype logits, fp32 logits) bytes of transformers' loss; (0, 0): other head
    head_transient: int  # another head's working set at the loss (one tensor)
    hidden_grad: int  # e·T·h: the gradient flowing between layers
    state_per_grad: tuple[float, ...]  # optimizer state tensors per trainable tensor, bytes per gradient byte
    foreach_temp: float  # foreach: temporary bytes per gradient byte during the step (0: fused)
    grads_persist: bool  # gradients never freed (zero_grad(set_to_none=False), bucket views)
    softcap: bool = False  # final logit soft-capping (Gemma-2): logits / cap, tanh (saved), × cap
    # DeepSpeed ZeRO-3 steps one sub-group at a time (stacks/deepspeed.py): per sub-group, the bytes of its flattened
    # low-precision gradients, of their fp32 copy and of the optimizer's temporaries (its states: state_per_grad ×
    # the first)
    step_groups: tuple[tuple[int, int, int], ...] = ()
    init_transient: int = 0  # allocated and freed after the persistent buffers (ZeRO-3's init gradient buffer)
