"""Fit verdicts: how an estimate sits on each GPU of the catalogue (presets/gpus.json)."""
from __future__ import annotations

from typing import Iterable, Protocol

from calculator.core.result import Fit, StageEstimate

SAFE_FRACTION = 0.80  # Fujii et al. 2024: estimates under 80% of capacity did not OOM in 454 runs
DEFAULT_CUDA_CONTEXT_BYTES = 500 * 2**20  # when no GPU is chosen: CUDA 12 context + cuBLAS handles, ~0.5 GiB
# cuBLAS workspace per (handle, stream) on Hopper / Blackwell (aten/src/ATen/cuda/CublasHandlePool.cpp), used when no
# GPU is chosen; each GPU's own is in presets/gpus.json
DEFAULT_CUBLAS_WORKSPACE_BYTES = 32 * 2**20
FIT_CARD_GPUS = ("a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "mi300x")

# Components that shard across GPUs when more are added (ZeRO-3 / TP), for the "GPUs needed" figure.
SHARDABLE = ("weights", "master_weights", "gradients", "optimizer_states", "kv_cache")


class GPULike(Protocol):
    id: str
    name: str
    memory_bytes: int
    cuda_context_bytes: int


def verdict(used: int, capacity: int) -> str:
    """fits (≤ 80% of capacity), tight (80–100%), does not fit (> 100%)."""
    if used <= SAFE_FRACTION * capacity:
        return "fits"
    if used <= capacity:
        return "tight"
    return "does not fit"


def gpus_needed(shardable: int, fixed: int, outside: int, used: int, capacity: int, world_size: int,
                frag_pct: float) -> tuple[int | None, str]:
    """GPUs the job needs: its world size when it fits; otherwise the count N at which the shardable model states
    (weights, master, grads, optimizer, KV cache and the optimizer-step transient), spread evenly over N GPUs, leave
    the rest within the 80% safe band: (fixed + shardable·W/N)·(1 + frag) + outside ≤ 0.8·capacity, where
    `fixed` is the rest of the peak allocated and `outside` what the allocator does not see (context, NCCL).
    None when the unshardable part alone is too big."""
    if used <= capacity:
        return world_size, ""
    room = (SAFE_FRACTION * capacity - outside) / (1 + frag_pct / 100) - fixed
    if room <= 0:
        return None, "activations and overheads alone exceed 80% of this GPU: lower micro-batch or sequence"
    n = max(world_size, -(-int(shardable * world_size) // int(room)))
    return n, f"≈ {n} GPUs with the model states sharded {n} ways (ZeRO-3 / TP)"


def planned_fit(fit: Fit, plan, bound: int = 4096) -> Fit:
    """The fit card with the planner's answer for GPUs needed: the fewest GPUs of this kind a real layout fits on
    (calculator.planning.planner.gpus_needed), that layout named (Plan.card); None and a note when no layout of up to
    `bound` GPUs fits."""
    if plan is None and bound == 0:
        return fit._replace(gpus_needed=None, note=fit.note or "GPUs needed is not searched for models this deep "
                            "(the planner lays out at most 256 layers)")
    if plan is None:
        return fit._replace(gpus_needed=None, searched_gpus=bound,
                            note=fit.note or f"no layout of up to {bound:,} of these GPUs fits "
                            "the 80% safe band: lower the micro-batch or the sequence (or recompute more)")
    par = {"tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "cp": plan.cp, "ep": plan.ep, "etp": plan.etp,
           "zero": plan.zero, "pp_first_stage_layers": plan.pp_first_stage_layers,
           "pp_last_stage_layers": plan.pp_last_stage_layers, "recompute": plan.recompute,
           "micro_batch": plan.micro_batch}
    return fit._replace(gpus_needed=plan.gpus, layout=plan.card, layout_parallel=par, searched_gpus=bound)


def fits_for(stage: StageEstimate, gpus: Iterable[GPULike], world_size: int, context_override: int | None,
             frag_pct: float | None = None, needed=None, only: frozenset | None = None) -> tuple[Fit, ...]:
    """A fit card per GPU (of `only`, when given), re-pricing the CUDA context for each GPU unless the user fixed
    it. frag_pct: the fragmentation as a share of the peak allocated (default: the stage's own).
    needed(gpu) -> (Plan | None, bound): the planner's fewest GPUs for that GPU (without it, the sharding estimate
    of gpus_needed)."""
    comps = stage.components
    if frag_pct is None:
        peak = stage.peak_allocated_bytes
        frag_pct = 100 * comps["fragmentation"] / peak if peak else 0.0
    base = stage.total_bytes - comps["cuda_context"]
    shardable = sum(comps[c] for c in SHARDABLE) + sum(
        t.bytes for t in stage.terms if t.key == "transient.optimizer_step")
    fixed = stage.peak_allocated_bytes - shardable
    outside_base = base - stage.peak_allocated_bytes - comps["fragmentation"]
    out = []
    for g in gpus:
        if only is not None and g.id not in only:
            continue
        ctx = context_override if context_override is not None else g.cuda_context_bytes
        used, cap = base + ctx, getattr(g, "usable_bytes", g.memory_bytes)  # what PyTorch can allocate
        n, note = gpus_needed(shardable, fixed, outside_base + ctx, used, cap, world_size, frag_pct)
        fit = Fit(g.id, g.name, cap, used, cap - used, used / cap, verdict(used, cap), n, note)
        plan, bound = needed(g) if needed is not None else (None, None)
        if bound is None and needed is not None and fit.note:  # the card's search was too large (LoRA, a named
            # stack, ... on a large model, priced layout by layout) and the job does not fit as laid out
            out.append(fit._replace(gpus_needed=None, note="too many layouts to price for a card: the Planner "
                                    "page searches this job's layouts"))
        elif bound is None:
            out.append(fit)
        else:
            out.append(planned_fit(fit._replace(note=""), plan, bound))
    return tuple(out)
