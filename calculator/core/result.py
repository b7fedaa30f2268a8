"""The result of an estimate: plain, immutable objects with integer bytes, each term carrying its formula,
the formula with values substituted, and a source key (see calculator.core.sources.SOURCES).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Literal, NamedTuple

# Components every estimate reports (zero where absent), in stacking order for charts.
COMPONENTS: tuple[str, ...] = (
    "weights", "master_weights", "gradients", "optimizer_states", "activations", "logits", "kv_cache",
    "transient", "sharding_buffers", "comm_buffers", "fragmentation", "cuda_context", "framework_overhead",
)

COMPONENT_LABELS: dict[str, str] = {
    "weights": "Weights",
    "master_weights": "Master weights",
    "gradients": "Gradients",
    "optimizer_states": "Optimizer states",
    "activations": "Activations",
    "logits": "Logits & loss",
    "kv_cache": "KV cache",
    "transient": "Transient working set",
    "sharding_buffers": "ZeRO-3 / FSDP gather buffers",
    "comm_buffers": "NCCL communication buffers",
    "fragmentation": "Allocator fragmentation",
    "cuda_context": "CUDA context",
    "framework_overhead": "Framework overhead (flat %)",
}

# Which components `torch.cuda.max_memory_allocated()` sees; the rest only nvidia-smi does.
ALLOCATED_COMPONENTS = frozenset(COMPONENTS[:9])


class _TermFields(NamedTuple):
    key: str
    component: str
    label: str
    bytes: int
    formula: str
    text: Any  # the substituted formula: a str, or (template, *values) / a function formatted on first read
    source: str
    note: str = ""


def _text(text) -> str:
    if text.__class__ is str:
        return text
    if text.__class__ is tuple:
        return text[0].format(*text[1:])
    return text()


class Term(_TermFields):
    """One line of the breakdown (a NamedTuple: cheap to build, immutable): key (unique id, e.g.
    "optimizer_states"), component (one of COMPONENTS), label, integer bytes, formula (with named symbols),
    substituted (the same with values), source (key into calculator.core.sources.SOURCES), note.

    The engine may give `substituted` as (template, *values) or as a function: the text is formatted when read,
    so the sums, the planner and the fit cards never format numbers nobody shows. Iteration, equality, _asdict
    and _replace see the text."""

    __slots__ = ()
    _fields = ("key", "component", "label", "bytes", "formula", "substituted", "source", "note")

    @property
    def substituted(self) -> str:
        return _text(self[5])

    def __iter__(self):
        return iter((self[0], self[1], self[2], self[3], self[4], _text(self[5]), self[6], self[7]))

    def __eq__(self, other) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, tuple) else NotImplemented

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return "Term(" + ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self)) + ")"


@dataclass(frozen=True)
class StageEstimate:
    """Memory of one GPU in one pipeline stage."""

    stage: int
    layers: tuple[int, int]  # [first, last) decoder layers held by this stage
    terms: tuple[Term, ...]
    peak_allocated_bytes: int
    total_bytes: int
    host_terms: tuple[Term, ...] = ()  # what CPU offload keeps in host RAM for this GPU's rank (not GPU memory)
    # The step's moments, in order, as the engine sums them: (name, long-lived bytes, allocated bytes); the
    # highest allocated is the peak (calculator.planning.timeline). Empty where the engine has no phases (generic network).
    phases: tuple[tuple[str, int, int], ...] = ()
    # The allocated terms live at each of those moments (training: calculator/stages/moments.py; empty elsewhere):
    # what calculator.planning.timeline.live_sets reads to show the step moment by moment.
    moments: tuple[tuple[str, tuple[Term, ...]], ...] = field(default=(), repr=False)

    @property
    def host_bytes(self) -> int:
        return sum(t.bytes for t in self.host_terms)

    @cached_property
    def components(self) -> dict[str, int]:
        out = dict.fromkeys(COMPONENTS, 0)
        for t in self.terms:
            out[t.component] += t.bytes
        return out


class LazyStage:
    """A pipeline stage the engine computes on first read: a middle stage whose layers, parameters and layer kinds
    equal those of an earlier stage's (calculator/stages/pipeline.py) holds fewer micro-batches in flight and so no
    more memory; its figures are built only when something reads them. Reads like the StageEstimate it becomes."""

    __slots__ = ("stage", "layers", "_build", "_real")

    def __init__(self, stage: int, layers: tuple[int, int], build: Callable[[], StageEstimate]):
        self.stage, self.layers, self._build, self._real = stage, layers, build, None

    def force(self) -> StageEstimate:
        if self._real is None:
            self._real, self._build = self._build(), None
        return self._real

    def __getattr__(self, name: str):
        return getattr(self.force(), name)

    def __eq__(self, other) -> bool:
        return self.force() == (other.force() if isinstance(other, LazyStage) else other)

    def __hash__(self) -> int:
        return hash(self.force())

    def __repr__(self) -> str:
        return repr(self.force())

    def __reduce__(self):
        real = self.force()
        return StageEstimate, tuple(getattr(real, f) for f in StageEstimate.__dataclass_fields__)


Verdict = Literal["fits", "tight", "does not fit"]


class Fit(NamedTuple):
    """How the estimate sits on one GPU model."""

    gpu: str
    name: str
    capacity_bytes: int
    used_bytes: int
    headroom_bytes: int  # negative when it does not fit
    utilization: float
    verdict: Verdict
    gpus_needed: int | None  # fewest GPUs of this kind a real layout of the job fits on (planner); None: none
    note: str = ""
    layout: str = ""  # the planner's layout at gpus_needed, e.g. "TP8 × PP2" ("" when none)
    layout_parallel: dict | None = None  # its degrees (tp, pp, dp, cp, ep, etp, zero, pp_first/last_stage_layers)
    searched_gpus: int | None = None  # the planner searched layouts of up to this many GPUs (None: no search)


@dataclass(frozen=True)
class Estimate:
    """Per-GPU memory of the most loaded GPU, plus every pipeline stage."""

    model_name: str
    mode: str
    parameters: int
    active_parameters: int
    stages: tuple[StageEstimate, ...]
    worst_stage: int
    fit_cards: Callable[[], tuple[Fit, ...]] | None = field(default=None, repr=False, compare=False)
    warnings: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    serving: Any = None  # calculator.engines.common.Serving when a serving engine (vLLM / SGLang) is modelled
    rl: Any = None  # calculator.stages.rl.RLResult in mode "rl": the rollout and training phases

    @cached_property
    def fits(self) -> tuple[Fit, ...]:
        """Fit cards for every GPU of the catalogue, computed on first use."""
        return self.fit_cards() if self.fit_cards else ()  # the planner's answers are cached: no search twice

    def fits_on(self, gpu_ids) -> tuple[Fit, ...]:
        """The fit cards of these GPUs only, in that order (unknown ids left out), each computed once: a card's
        "GPUs needed" is a planner search, so a page that shows six cards pays for six, not the catalogue."""
        if "fits" in self.__dict__:
            by_gpu = {f.gpu: f for f in self.fits}
            return tuple(by_gpu[g] for g in gpu_ids if g in by_gpu)
        known = self.__dict__.setdefault("_fits_by_gpu", {})
        missing = frozenset(g for g in gpu_ids if g not in known)
        if missing and self.fit_cards:
            for f in self.fit_cards(only=missing):
                known[f.gpu] = f
        return tuple(known[g] for g in gpu_ids if g in known)

    @property
    def peak(self) -> StageEstimate:
        return self.stages[self.worst_stage]

    @property
    def terms(self) -> tuple[Term, ...]:
        return self.peak.terms

    @property
    def components(self) -> dict[str, int]:
        return self.peak.components

    @property
    def peak_allocated_bytes(self) -> int:
        """The highest allocated peak over the pipeline stages (what torch.cuda.max_memory_allocated reports on the
        busiest GPU); not always the stage with the highest nvidia-smi total, whose fragmentation may differ. A
        LazyStage is left out: the earlier stage of its content holds at least as much."""
        return max(s.peak_allocated_bytes for s in self.stages if not isinstance(s, LazyStage))

    @property
    def total_bytes(self) -> int:
        return self.peak.total_bytes

    def to_dict(self) -> dict:
        """A JSON-ready dict (the CLI's --json output and the app's JSON export)."""
        return {
            "model": self.model_name,
            "mode": self.mode,
            "parameters": self.parameters,
            "active_parameters": self.active_parameters,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "total_bytes": self.total_bytes,
            "worst_stage": self.worst_stage,
            "components": self.components,
            "terms": [t._asdict() for t in self.terms],
            "stages": [
                {"stage": s.stage, "layers": list(s.layers), "peak_allocated_bytes": s.peak_allocated_bytes,
                 "total_bytes": s.total_bytes, "components": s.components, "host_bytes": s.host_bytes}
                for s in self.stages
            ],
            "host_bytes": self.peak.host_bytes,
            "host_terms": [t._asdict() for t in self.peak.host_terms],
            "fits": [f._asdict() for f in self.fits],
            "warnings": list(self.warnings),
            "assumptions": list(self.assumptions),
            **({"serving": self.serving.to_dict()} if self.serving is not None else {}),
            **({"rl": self.rl.to_dict()} if self.rl is not None else {}),
        }
