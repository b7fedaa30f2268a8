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
