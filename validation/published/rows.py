"""One published row against the engine's estimate (validation/published/compare.py is the driver): the Comparison record,
the CSV reader, what the `unit` column means in bytes, the error bound of each group of comparable rows, and the
per-source / per-group summaries of the errors.

Error = (estimated - measured) / measured.
"""
from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

CSV_PATH = Path(__file__).resolve().parents[1] / "published.csv"

GIB, MIB, GB = 2**30, 2**20, 10**9

# What the `unit` column means, in bytes. "GB" alone is ambiguous and is resolved per source below.
UNITS = {
    "GB (GiB: bytes/1024^3)": GIB,
    "GB (GiB)": GIB,
    "GB (1e9)": GB,
    "MB (MiB)": MIB,
    "MB (MiB, >>20)": MIB,
}

# Error bounds (|error| %, per group of comparable rows). Each is the worst |error| measured by this module at the
# commit that recorded it plus a margin of 0.5-1 point, rounded up to a half point (validation/CALIBRATION.md,
# "Error bounds"). tests/validation/test_published.py holds every comparable row to its group's bound. Do not loosen a bound
# to make a regression pass: fix the engine or explain the new number in CALIBRATION.md.
ERROR_BOUNDS_PCT: dict[str, float] = {
    "Qwen2.5 BF16": 3.0,
    "Qwen2.5 GPTQ-Int8": 4.5,
    "Qwen2.5 GPTQ-Int4": 3.0,
    "Qwen2.5 AWQ": 2.5,
    "Qwen2.5 AWQ, load peak": 33.0,
    "litgpt LoRA bf16": 10.5,
    "litgpt QLoRA nf4": 16.0,
    "litgpt generate bf16": 1.0,
    "litgpt generate nf4, load peak": 20.0,
    "bert-large V100 nvidia-smi, weights only": 1.5,
    "DeepSpeed estimator ZeRO-3": 1.0,
    "torchao optimizer delta": 2.0,
}


@dataclass(frozen=True)
class Comparison:
    id: str
    source: str
    group: str  # comparable rows are bounded per group (ERROR_BOUNDS_PCT)
    model: str
    config: str  # the configuration in one line
    metric: str  # which engine output is compared: peak_allocated | total (nvidia-smi) | model_states | ...
    measured_bytes: int | None
    estimated_bytes: int | None
    error_pct: float | None
    comparable: bool
    why_not: str = ""  # why the row is not comparable
    note: str = ""  # known deviations, assumptions
    resolution_pct: float | None = None  # half the last printed digit of the published value, % of the value


def read_rows(path: Path = CSV_PATH) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def resolution_pct(value: str) -> float | None:
    x = number(value)
    if not x:
        return None
    decimals = len(value.split(".")[1]) if "." in value else 0
    return round(0.5 * 10 ** -decimals / x * 100, 3)


def measured_bytes(row: dict[str, str], unit_bytes: int | None = None) -> int | None:
    """The published value in bytes (None when it is not a number: OOM, an error message)."""
    x = number(row["value"])
    if x is None:
        return None
    unit = unit_bytes or UNITS.get(row["unit"])
    if unit is None:
        raise ValueError(f"row {row['id']}: unit {row['unit']!r} needs an explicit interpretation")
    return round(x * unit)


def error_pct(est: int | None, meas: int | None) -> float | None:
    if est is None or not meas:
        return None
    return round(100 * (est - meas) / meas, 3)


def gib(x: int | None) -> str:
    return "—" if x is None else f"{x / GIB:.3f}"


def _stats(items: list[Comparison]) -> dict:
    comp = [c for c in items if c.comparable and c.error_pct is not None]
    errs = [abs(c.error_pct) for c in comp]
    worst = max(comp, key=lambda c: abs(c.error_pct), default=None)
    return {
        "rows": len(items),
        "comparable": len(comp),
        "median_abs_error_pct": round(statistics.median(errs), 3) if errs else None,
        "worst_abs_error_pct": round(abs(worst.error_pct), 3) if worst else None,
        "worst_id": worst.id if worst else None,
        "mean_error_pct": round(statistics.fmean(c.error_pct for c in comp), 3) if comp else None,
    }


def summarize(comparisons: list[Comparison], key: str) -> list[dict]:
    names = list(dict.fromkeys(getattr(c, key) for c in comparisons))
    out = []
    for name in names:
        entry = {key: name, **_stats([c for c in comparisons if getattr(c, key) == name])}
        if key == "group" and name in ERROR_BOUNDS_PCT:
            entry["bound_pct"] = ERROR_BOUNDS_PCT[name]
        out.append(entry)
    return out
