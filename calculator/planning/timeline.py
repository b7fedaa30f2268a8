"""The step timeline: the memory of each moment of a step on the most loaded GPU, as the engine sums it, and which
moment is the peak.

    training   model states → forward (tensors saved for backward) → backward peak → optimizer step
               (calculator.stages.training._stage_training: peak allocated = states + max(fwd/bwd, optimizer step))
    generate() weights loaded → prefill peak (last layer, whole prompt cached) → decode at token 1, gen/2, gen
               (calculator.stages.inference._stage_inference: peak = weights + max(prefill, decode at the last token))
    vLLM/SGLang weights loaded → profile run (the activation peak it measures) → serving (KV pool, CUDA graphs
               and a batch's activations, all inside the budget) (calculator/engines)
    RL         rollout → scoring → training, nvidia-smi totals per phase (calculator.stages.rl)

Bytes are allocated bytes (torch.cuda.memory_allocated at that moment) except RL, whose phases are totals.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Moment:
    name: str
    long_lived_bytes: int  # what stays for the whole step (weights, states, the KV cache so far)
    bytes: int  # everything at that moment (long-lived + working set)

    @property
    def working_bytes(self) -> int:
        return self.bytes - self.long_lived_bytes


@dataclass(frozen=True)
class Timeline:
    moments: tuple[Moment, ...]
    peak_index: int
    measure: str  # "peak_allocated_bytes" or "total_bytes" (RL)
    stage: int  # pipeline stage shown (the one with the highest allocated peak)

    @property
    def peak(self) -> Moment:
        return self.moments[self.peak_index]

    def to_dict(self) -> dict:
        return {"measure": self.measure, "stage": self.stage, "peak": self.peak.name,
                "moments": [{"name": m.name, "long_lived_bytes": m.long_lived_bytes, "bytes": m.bytes}
                            for m in self.moments]}


def _engine_moments(stage) -> tuple[Moment, ...]:
    by = {}
    for t in stage.terms:
        by[t.component] = by.get(t.component, 0) + t.bytes
    weights = by.get("weights", 0)
    profile = weights + by.get("activations", 0)
    return (Moment("weights loaded", weights, weights), Moment("profile run", weights, profile),
            Moment("serving: KV pool + CUDA graphs + a batch", weights + by.get("kv_cache", 0),
                   stage.peak_allocated_bytes))


def step_timeline(est) -> Timeline | None:
    """The timeline of an estimate (calculator.stages.estimate.Estimate); None when the engine has no phases for it
    (a generic network given as totals)."""
    if est.rl is not None:
        moments = tuple(Moment(p.name + (f" ({p.where})" if p.where != "every GPU" else ""),
                               sum(t.bytes for t in p.terms if t.component in ("weights", "master_weights",
                                                                               "gradients", "optimizer_states")),
                               p.total_bytes) for p in est.rl.phases)
        measure, stage_no = "total_bytes", 0
    else:
        stage = max(est.stages, key=lambda s: s.peak_allocated_bytes)
        stage_no = stage.stage
        measure = "peak_allocated_bytes"
        if est.serving is not None:
            moments = _engine_moments(stage)
        elif stage.phases:
            moments = tuple(Moment(n, long, total) for n, long, total in stage.phases)
        else:
            return None
    peak = max(range(len(moments)), key=lambda i: (moments[i].bytes, i))  # a tie: the later moment
    return Timeline(moments, peak, measure, stage_no)


OVERHEADS = ("fragmentation", "comm_buffers", "cuda_context")  # what nvidia-smi sees beyond allocated tensors
SHORT_NAMES = {"forward: tensors saved": "forward end", "backward: peak": "backward pass",
               "optimizer step": "optimizer step"}  # the training moments a chart shows (model states: in each)


@dataclass(frozen=True)
class LiveSet:
    """The terms on one GPU at one moment of the step, overheads included: `bytes` is what nvidia-smi would show
    then (at the peak: the stage's total)."""
    name: str  # the moment, short: "forward end", "backward pass", "optimizer step"; "peak" where the engine has
    terms: tuple  # no moments for this stage (its terms are already those of its peak: generate(), engines)
    is_peak: bool

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.terms)


def live_sets(stage) -> tuple[LiveSet, ...]:
    """The moments of a stage's step, each with the terms live at it (calculator/stages/moments.py; the sources of
    each lifetime are cited there): forward end, backward peak and optimizer step for a training stage, else one
    set, the stage's terms at its peak. The CUDA context and NCCL buffers are live at every moment; the allocator's
    fragmentation (reserved − allocated, which only grows) is counted at the peak, so the peak's set sums to the
    stage's total (the figure the page shows)."""
    overheads = tuple(t for t in stage.terms if t.component in OVERHEADS)
    if not stage.moments:
        name = max(stage.phases, key=lambda p: p[2])[0].replace(": ", " ") if stage.phases else "peak"
        return (LiveSet(name, tuple(stage.terms), True),)
    shown = [(n, terms) for n, terms in stage.moments if n in SHORT_NAMES]
    allocated = [sum(t.bytes for t in terms) for _, terms in shown]
    peak = max(range(len(shown)), key=lambda i: (allocated[i], i))  # a tie: the later moment (step_timeline)
    always = tuple(t for t in overheads if t.component != "fragmentation")
    return tuple(LiveSet(SHORT_NAMES[n], terms + (overheads if i == peak else always), i == peak)
                 for i, (n, terms) in enumerate(shown))


def term_moments(stage) -> dict[str, str]:
    """At which moment of the step each of the stage's terms (by key) is taken, for a table of the engine's terms:
    held all step, saved in forward and freed in backward, the backward's working set, the optimizer step's excess
    over the backward pass, the allocator's reserve at the peak. Where the engine has no moments: its peak."""
    sets = live_sets(stage)
    peak = next(s for s in sets if s.is_peak)
    if not stage.moments:
        return {t.key: peak.name for t in stage.terms}
    held = {t.key for n, terms in stage.moments if n == "model states" for t in terms}
    out = {}
    for t in stage.terms:
        if t.key in held or t.component in ("cuda_context", "comm_buffers"):
            out[t.key] = "all step"
        elif t.key == "transient.optimizer_step":
            out[t.key] = "optimizer step (its excess over the backward pass)"
        elif t.component == "fragmentation":
            out[t.key] = f"peak ({peak.name})"
        elif t.component in ("activations", "logits"):
            out[t.key] = "forward → backward (freed before the step)"
        else:
            out[t.key] = "backward pass"
    return out
