"""PyTorch FSDP2: `fully_shard` on every decoder layer and on the root, with
`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` over an fp32 model (torchtitan, accelerate's FSDP2).

torch/distributed/fsdp/_fully_shard/:
- _fsdp_param.py: each parameter is kept as its fp32 shard (a DTensor, 1/d of it): the shards are the master
  weights the optimizer updates — there is no separate bf16 copy between steps.
- _fsdp_param_group.py / _fsdp_collectives.py: before a unit runs, its shards are all-gathered into unsharded
  bf16 parameters (`param_dtype`); `reshard_after_forward=True` frees them after the unit's forward and gathers
  them again in backward, with the next unit prefetched; `foreach_reduce` casts the unit's unsharded bf16
  gradients to `reduce_dtype` fp32, reduce-scatters them and leaves fp32 gradient shards on the parameters.
- _fsdp_state.py (`_lazy_init`): the root unit (embeddings, final norm, LM head) is not resharded after forward
  (`post_forward_mesh_info = None`): its bf16 parameters stay gathered from the forward to the backward.
So the model states are fp32 shards + fp32 gradient shards + fp32 optimizer state; the gradient shards are born in
backward and freed by `zero_grad(set_to_none=True)`. At the loss backward the root unit's bf16 parameters are the
only gathered ones (H200: +0.52 GB over the one-GPU loop, Llama-3.2-1B's tied embedding); while a layer is
back-propagated its unit and the prefetched next one are gathered, and its bf16 gradients and their fp32 copy for
the reduce-scatter are alive. `zero = 2` is `reshard_after_forward=False`: every unit stays gathered.
"""
from __future__ import annotations

from calculator.core.dtypes import nbytes
from calculator.model.parameters import count_parameters
from calculator.stacks.common import (TORCH_OPTIM_STATES, KeptDtype, NoGradRule, StackContext, StackMemory,
                                      layer_grad_params, line)

NAME = "fsdp2"
LABEL = "PyTorch FSDP2 fully_shard (fp32 shards as master, bf16 units gathered per layer)"
SOURCE = "fsdp2"
NO_GRAD = NoGradRule(False, False, "FSDPParamGroup.post_backward reduce-scatters only the parameters whose unsharded "
                                   "gradient exists, so one backward never reaches keeps no sharded gradient; "
                                   + TORCH_OPTIM_STATES + " (traced: tests/golden_stacks/deepseek-v4-tiny.json)")
FP32_KEPT = KeptDtype(True, "fully_shard asserts one original dtype among a unit's trainable parameters "
                            "(_fsdp_param_group.py FSDPParamGroup._init_mp_dtypes: 'FSDP expects uniform original "
                            "parameter dtype', raised on the bf16 model as loaded), so accelerate upcasts every "
                            "trainable parameter to fp32 (utils/fsdp_utils.py fsdp2_prepare_model) and "
                            "MixedPrecisionPolicy(param_dtype=bf16) gathers the fp32-kept ones in bf16 like the "
                            "rest: fp32 shards of every parameter, the modules computing with bf16 hyper-connection, "
                            "sink and norm weights (F.linear's fp32 copy of each hyper-connection's fn, a bf16 sink "
                            "softmax: tests/golden_stacks/deepseek-v4-tiny.json)", casts=True)


def layout_problem(p) -> str:
    if p.zero == 1:
        return "shards parameters, gradients and optimizer state together: use zero 3 (or 2 for " \
               "reshard_after_forward=False)"
    return ""


def unit_dtype(w) -> str:
    """The dtype units are gathered in: the recipe's compute dtype (MixedPrecisionPolicy.param_dtype)."""
    return w.precision.params


def states_workload(w):
    """fp32 shards are the parameters (and the master); gradients are reduced in the master dtype."""
    prec = w.precision
    master = prec.master_weights or prec.params
    precision = prec.model_copy(update={"params": master, "grads": master if prec.master_weights else prec.grads,
                                        "master_weights": None})
    parallel = w.parallel.model_copy(update={"zero": 2 if w.parallel.zero == 2 else 3})
    return w.model_copy(update={"precision": precision, "parallel": parallel})


def memory(ctx: StackContext) -> StackMemory:
    m, w, shard = ctx.m, ctx.w, ctx.shard
    unit_dt = unit_dtype(ctx.original or w)
    p = w.parallel
    counts = count_parameters(m)
    root = 0
    if shard.has_embedding:  # with the modules built but never run (MiMo's MTP block is no decoder layer)
        root += -(-counts.embedding // p.tp) + counts.idle
    if shard.has_head:
        root += counts.final_norm + -(-(counts.lm_head or (counts.embedding if p.pp > 1 else 0)) // p.tp)
    layers = layer_grad_params(m, shard.first_layer, shard.last_layer, p.tp, p.ep * p.expert_tp)
    unit = max(layers, default=0)
    if p.zero == 2:  # reshard_after_forward=False: every unit stays gathered through the backward
        held = root + sum(layers)
        gathered = line("sharding.fsdp2_units", "sharding_buffers", f"All units gathered ({unit_dt}, no reshard)",
                        nbytes(held, unit_dt), "N_gpu × b_param (reshard_after_forward=False)",
                        f"{held:,} × {nbytes(1, unit_dt)} B", SOURCE)
        layer_bw = nbytes(unit, unit_dt) + nbytes(unit, w.precision.grads)
    else:
        gathered = line("sharding.fsdp2_root", "sharding_buffers", f"Root unit gathered ({unit_dt}: embeddings, "
                        "final norm, LM head)", nbytes(root, unit_dt), "N_root × b_param (root not resharded)",
                        f"{root:,} × {nbytes(1, unit_dt)} B", SOURCE,
                        "the root unit stays unsharded from its forward to its backward")
        # the unit being back-propagated + the prefetched next one, its bf16 gradients and their fp32 copy
        layer_bw = 2 * nbytes(unit, unit_dt) + nbytes(unit, unit_dt) + nbytes(unit, w.precision.grads)
    return StackMemory(grads_whole_step=not w.zero_grad_set_to_none, at_peak=(gathered,) if root or p.zero == 2
                       else (), layer_backward=layer_bw)
