"""Sweeps: the memory of the most loaded GPU, component by component, as one input varies — micro-batch, sequence
length, or GPU count (data parallel with ZeRO-3 for training, tensor parallel for inference) — against the GPU's
capacity and its 80% safe band (Fujii et al. 2024). Every point is the engine's own estimate; a point the engine
refuses (a degree that does not divide, a sequence CP cannot split) carries the engine's message instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from calculator.core.errors import InputError
from calculator.stages.estimate import estimate
from calculator.core.fit import SAFE_FRACTION
from calculator.model.spec import ModelSpec
from calculator.core.result import COMPONENTS
from calculator.core.workload import Workload

AXES = {"micro_batch": "micro-batch size", "seq_len": "sequence length (tokens)", "gpus": "GPUs"}
MAX_POINTS = 16


@dataclass(frozen=True)
class Point:
    x: int
    peak_allocated_bytes: int | None
    total_bytes: int | None
    components: dict[str, int] = field(default_factory=dict)
    fits: bool | None = None
    error: str = ""
    layout: str = ""  # gpus axis: the layout at this point


@dataclass(frozen=True)
class Sweep:
    axis: str
    label: str
    how: str  # how the axis changes the workload, in words
    current: int  # the workload's own value on this axis
    points: tuple[Point, ...]
    capacity_bytes: int | None
    budget_bytes: int | None

    def rows(self) -> list[dict]:
        """One row per point (the CSV): the axis value, totals, verdict and every component in bytes."""
        out = []
        for p in self.points:
            row = {self.axis: p.x, "layout": p.layout, "peak_allocated_bytes": p.peak_allocated_bytes,
                   "total_bytes": p.total_bytes, "fits_safe_band": p.fits, "error": p.error}
            row.update({c: p.components.get(c) if p.total_bytes is not None else None for c in COMPONENTS})
            out.append(row)
        return out

    def to_dict(self) -> dict:
        return {"axis": self.axis, "label": self.label, "how": self.how, "current": self.current,
                "capacity_bytes": self.capacity_bytes, "budget_bytes": self.budget_bytes, "points": self.rows()}


def _powers(lo: int, hi: int) -> list[int]:
    out, x = [], lo
    while x <= hi and len(out) < MAX_POINTS:
        out.append(x)
        x *= 2
    return out


def default_values(m, w: Workload, axis: str) -> list[int]:
    """Powers of two around the workload's own value (which is always included)."""
    if axis == "micro_batch":
        values = _powers(1, max(64 if w.mode == "train" else 256, 2 * w.micro_batch))
        now = w.micro_batch
    elif axis == "seq_len":
        values = _powers(512, max(131072, 2 * w.seq_len))
        now = w.seq_len
    elif axis == "gpus":
        if w.mode == "train" or w.mode == "rl":
            values, now = _powers(1, 256), w.parallel.dp
        else:
            heads = m.num_attention_heads if isinstance(m, ModelSpec) else 1
            values, now = [t for t in (1, 2, 4, 8, 16, 32, 64) if heads % t == 0], w.parallel.tp
    else:
        raise InputError("axis", f"sweep over one of {', '.join(AXES)}, not {axis!r}")
    return sorted(set(values) | {now})


def _changed(w: Workload, axis: str, x: int) -> tuple[Workload, str]:
    p = w.parallel
    if axis == "micro_batch":
        return w.model_copy(update={"micro_batch": x}), ""
    if axis == "seq_len":
        return w.model_copy(update={"seq_len": x}), ""
    if w.mode in ("train", "rl"):
        zero = p.zero if p.zero else 3
        par = p.model_copy(update={"dp": x, "zero": zero if x > 1 else p.zero})
        return w.model_copy(update={"parallel": par}), f"TP{p.tp} × PP{p.pp} × DP{x}, ZeRO-{par.zero}"
    par = p.model_copy(update={"tp": x})
    return w.model_copy(update={"parallel": par}), f"TP{x} × PP{p.pp}"


def sweep(m, w: Workload, axis: str, values: list[int] | None = None) -> Sweep:
    """The memory of `w` on `m` at each value of `axis` ("micro_batch", "seq_len" or "gpus")."""
    if axis not in AXES:
        raise InputError("axis", f"sweep over one of {', '.join(AXES)}, not {axis!r}")
    values = values or default_values(m, w, axis)
    if any(v < 1 for v in values):
        raise InputError("values", "sweep values must be whole numbers of at least 1")
    capacity = None
    if w.gpu:
        from calculator.model.presets import get_gpu
        g = get_gpu(w.gpu)
        capacity = g.usable_bytes
    points = []
    for x in values:
        try:
            changed, layout = _changed(w, axis, x)
            changed = Workload(**changed.model_dump())  # validated like any input
            est = estimate(m, changed, with_fits=False)
        except (InputError, ValueError) as exc:
            points.append(Point(x, None, None, error=str(exc).splitlines()[0]))
            continue
        fits = None if capacity is None else est.total_bytes <= SAFE_FRACTION * capacity
        points.append(Point(x, est.peak_allocated_bytes, est.total_bytes, dict(est.components), fits, "", layout))
    if axis == "gpus":
        how = ("data parallel with ZeRO-3 / FSDP full shard (the stage set, if any), other degrees as set"
               if w.mode in ("train", "rl") else "tensor parallel, other degrees as set")
        current = w.parallel.dp if w.mode in ("train", "rl") else w.parallel.tp
    else:
        how, current = "other inputs as set", getattr(w, axis)
    return Sweep(axis, AXES[axis], how, current, tuple(points), capacity,
                 int(SAFE_FRACTION * capacity) if capacity else None)
