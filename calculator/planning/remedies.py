"""Remedies: when a job does not fit its GPU, what each lever (calculator.planning.levers) saves on the most loaded GPU,
re-estimated by the same engine, ranked by the bytes saved, with what it costs; then levers combined greedily
until the job fits the GPU's safe band (80% of what PyTorch can allocate, Fujii et al. 2024).

What "saved" measures (one number per mode, in bytes, so levers rank on one scale):
    training, transformers inference, RL   the nvidia-smi total of the most loaded GPU (the fit verdict's figure)
    vLLM / SGLang                         the KV shortfall: the KV cache the workload needs (its sequences at
                                           once, or one max_model_len sequence, whichever is more) minus what the
                                           engine's budget leaves for the pool — an engine fills its fraction of
                                           the GPU whatever the workload, so its total does not say what helps
Fits: the chosen GPU's fit verdict is "fits" (train / RL / generate(): total ≤ 80% of capacity; engines: it starts
and holds the workload's sequences at once).

The combination (combine) takes, round after round, from the cheapest tier that still saves anything
(calculator.planning.levers: same job, then offload, then more GPUs, then a different job) the lever that makes the job fit
with the fewest GPUs and the fastest step, or, when none does yet, the one that saves the most; it re-lists the
levers of the changed workload each round and stops when the job fits.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import ValidationError

from calculator.core.errors import InputError
from calculator.stages.estimate import estimate
from calculator.core.fit import SAFE_FRACTION
from calculator.planning.levers import TIERS, Lever, levers
from calculator.model.spec import ModelSpec
from calculator.core.workload import Workload

MAX_ROUNDS = 12


@dataclass(frozen=True)
class Remedy:
    """A workload with one lever (or several, combined) applied, as the engine estimates it."""

    lever: str
    change: str
    tier: int
    workload: Workload
    peak_allocated_bytes: int
    total_bytes: int
    saved_bytes: int  # on the measure of the mode (module docstring), against the current workload
    fits: bool | None  # None: no GPU chosen
    cost: dict[str, Any]
    url_query: str = ""
    estimate: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        return {"lever": self.lever, "change": self.change, "tier": TIERS[self.tier],
                "peak_allocated_bytes": self.peak_allocated_bytes, "total_bytes": self.total_bytes,
                "saved_bytes": self.saved_bytes, "fits": self.fits, "cost": self.cost, "url_query": self.url_query}


@dataclass(frozen=True)
class Combination:
    steps: tuple[Remedy, ...]  # each step's workload carries the steps before it
    fits: bool  # the last step fits (or, with no steps, the workload already does)

    @property
    def result(self) -> Remedy | None:
        return self.steps[-1] if self.steps else None

    def to_dict(self) -> dict:
        last = self.result
        out = {"levers": [s.change for s in self.steps], "fits": self.fits,
               "steps": [s.to_dict() for s in self.steps]}
        if last is not None:
            out.update(peak_allocated_bytes=last.peak_allocated_bytes, total_bytes=last.total_bytes,
                       saved_bytes=last.saved_bytes, cost=last.cost, url_query=last.url_query)
        return out


@dataclass(frozen=True)
class Advice:
    current: Remedy  # the workload as given (lever "current", nothing saved)
    gpu: str | None
    capacity_bytes: int | None
    budget_bytes: int | None  # the safe band: SAFE_FRACTION × capacity
    measure: str  # "total_bytes" or "kv_shortfall_bytes"
    remedies: tuple[Remedy, ...]  # each lever alone, most saved first
    combined: Combination

    def to_dict(self) -> dict:
        return {"gpu": self.gpu, "capacity_bytes": self.capacity_bytes, "budget_bytes": self.budget_bytes,
                "measure": self.measure, "current": self.current.to_dict(),
                "remedies": [r.to_dict() for r in self.remedies], "combined": self.combined.to_dict()}


def apply(w: Workload, updates: dict) -> Workload:
    """The workload with `updates` (nested Workload fields) applied, validated as a new Workload."""
    def merge(base: dict, upd: dict) -> dict:
        out = dict(base)
        for k, v in upd.items():
            out[k] = merge(base.get(k) or {}, v) if isinstance(v, dict) else v
        return out
    return Workload(**merge(w.model_dump(), updates))


def kv_shortfall_bytes(est, w: Workload) -> int:
    """Serving engines: KV bytes the workload needs beyond what the engine's budget leaves for its pool
    (negative: room to spare). Needed: the batch's sequences at once, or one max_model_len sequence (vLLM refuses
    to start without room for one), whichever is more."""
    sv = est.serving
    tokens = max(w.micro_batch * sv.tokens_per_seq, sv.configured_max_model_len)
    return tokens * sv.kv_bytes_per_token - sv.kv_available_bytes


def _serving(w: Workload) -> bool:
    return w.mode == "infer" and w.engine != "hf"


def measure_of(est, w: Workload) -> int:
    return kv_shortfall_bytes(est, w) if _serving(w) else est.total_bytes


def fits_on(est, w: Workload, gpu) -> bool | None:
    """The chosen GPU's fit verdict is "fits" (calculator.core.fit / engines / rl fit cards, for this GPU only)."""
    if gpu is None:
        return None
    if _serving(w):
        sv = est.serving
        return sv.starts and sv.max_concurrent_seqs >= w.micro_batch
    capacity = gpu.usable_bytes
    return est.total_bytes <= SAFE_FRACTION * capacity


def _step_time(m, w: Workload, timing) -> float | None:
    if not isinstance(m, ModelSpec) or not w.gpu or w.mode == "rl":
        return None
    from calculator.timing.step_time import estimate_time
    try:
        return estimate_time(m, w, timing).step_time_s
    except InputError:  # no speed figures for this GPU, or a layout the time model does not cover
        return None


def _cost(text: str, base: Workload, w: Workload, base_time: float | None, time: float | None) -> dict[str, Any]:
    """GPUs, step time (calculator.timing.step_time) and the lever's own cost in words."""
    world_base, world = base.parallel.world_size, w.parallel.world_size
    if w.parallel.offload_optimizer or w.parallel.offload_params:
        time = None
        text += "; not in the step time (the time model leaves out the CPU side of offloading)"
    out: dict[str, Any] = {"text": text, "gpus": world, "extra_gpus": world - world_base,
                           "step_time_s": time, "step_time_ratio": (time / base_time) if time and base_time else None}
    if time and base_time:
        out["text"] += f"; step time ×{time / base_time:.2f} ({base_time:.3g} s → {time:.3g} s"
        out["text"] += f", on {world} GPUs)" if world != world_base else ")"
    elif world != world_base:
        out["text"] += f"; {world} GPUs instead of {world_base}"
    return out


class _Evaluator:
    """Estimates workloads for one model and GPU, remembering what it has seen (the combination re-lists levers)."""

    def __init__(self, m, gpu, timing, url_of: Callable[[Workload], str] | None):
        self.m, self.gpu, self.timing, self.url_of = m, gpu, timing, url_of
        self.seen: dict[Workload, tuple] = {}

    def run(self, w: Workload):
        """(estimate, measure, fits, step time) or None when the engine refuses the workload."""
        if w not in self.seen:
            try:
                est = estimate(self.m, w, with_fits=False)
                self.seen[w] = (est, measure_of(est, w), fits_on(est, w, self.gpu), _step_time(self.m, w, self.timing))
            except InputError:
                self.seen[w] = None
        return self.seen[w]

    def remedy(self, lv: Lever, base: Workload, w: Workload, base_measure: int, base_time: float | None
               ) -> Remedy | None:
        got = self.run(w)
        if got is None:
            return None
        est, meas, fits, time = got
        return Remedy(lv.lever, lv.change, lv.tier, w, est.peak_allocated_bytes, est.total_bytes, base_measure - meas,
                      fits, _cost(lv.cost, base, w, base_time, time),
                      self.url_of(w) if self.url_of else "", est)


def _candidates(ev: _Evaluator, w: Workload, est, base: Workload, base_measure: int, base_time) -> list[Remedy]:
    """Every lever of `w`, estimated; savings and cost counted against `base`."""
    out = []
    for lv in levers(ev.m if isinstance(ev.m, ModelSpec) else None, w, est):
        try:
            changed = apply(w, lv.updates)
        except ValidationError:
            continue
        if changed == w:
            continue
        r = ev.remedy(lv, base, changed, base_measure, base_time)
        if r is not None:
            out.append(r)
    return out


def combine(ev: _Evaluator, current: Remedy) -> Combination:
    """Greedy: each round the lever saving the most within the cheapest tier that still saves, until it fits."""
    base, w, est = current.workload, current.workload, current.estimate
    steps: list[Remedy] = []
    base_measure = current.saved_bytes + measure_of(est, base)  # current.saved_bytes is 0
    base_time = current.cost.get("step_time_s")
    best_measure = base_measure
    if current.fits is not False:  # it fits already, or there is no GPU to fit
        return Combination((), bool(current.fits))
    for _ in range(MAX_ROUNDS):
        if steps and steps[-1].fits:
            break
        cands = [r for r in _candidates(ev, w, est, base, base_measure, base_time)
                 if base_measure - r.saved_bytes < best_measure]
        if not cands:
            break
        tier = min(r.tier for r in cands)
        in_tier = [r for r in cands if r.tier == tier]
        fitting = [r for r in in_tier if r.fits]
        # one that fits: the fewest GPUs, then the fastest step, then the least drastic; else the most saved
        pick = min(fitting, key=lambda r: (r.cost["gpus"], r.cost["step_time_s"] or float("inf"), r.saved_bytes)) \
            if fitting else max(in_tier, key=lambda r: r.saved_bytes)
        steps.append(pick)
        w, est, best_measure = pick.workload, pick.estimate, base_measure - pick.saved_bytes
    return Combination(tuple(steps), bool(steps) and bool(steps[-1].fits))


def advise(m, w: Workload, *, timing=None, url_of: Callable[[Workload], str] | None = None) -> Advice:
    """Every lever for `w` on `m`, each re-estimated and ranked by the bytes it saves on the most loaded GPU, and a
    greedy combination that fits the workload's GPU. `url_of(workload)`: the query string that opens the calculator
    on a workload (calculator.exports.page_link.url_query); `timing`: calculator.timing.inputs.TimingInputs."""
    gpu = None
    if w.gpu:
        from calculator.model.presets import get_gpu
        gpu = get_gpu(w.gpu)
    ev = _Evaluator(m, gpu, timing, url_of)
    got = ev.run(w)
    if got is None:  # let the engine say what is wrong with the input itself
        estimate(m, w, with_fits=False)
    est, meas, fits, time = got
    current = Remedy("current", "as given", 0, w, est.peak_allocated_bytes, est.total_bytes, 0, fits,
                     {"text": "", "gpus": w.parallel.world_size, "extra_gpus": 0, "step_time_s": time,
                      "step_time_ratio": 1.0 if time else None}, url_of(w) if url_of else "", est)
    ranked = sorted(_candidates(ev, w, est, w, meas, time), key=lambda r: (-r.saved_bytes, r.tier, r.change))
    ranked = [r for r in ranked if r.saved_bytes > 0]
    capacity = None
    if gpu is not None:
        capacity = gpu.usable_bytes
    return Advice(current, w.gpu, capacity, int(SAFE_FRACTION * capacity) if capacity else None,
                  "kv_shortfall_bytes" if _serving(w) else "total_bytes", tuple(ranked), combine(ev, current))
