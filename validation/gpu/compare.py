"""The engine against every real-GPU golden (tests/golden_gpu/**): peak allocated
(`torch.cuda.max_memory_allocated` of the run's peak snapshot) and nvidia-smi (the driver's used memory), per case,
per group (stack / implementation / kind) and overall. Needs only the engine.

    .venv/bin/python -m validation.gpu.compare             # per case, then per group
    .venv/bin/python -m validation.gpu.compare --groups    # per group only
    .venv/bin/python -m validation.gpu.compare --argv ID   # the CLI command the engine is given for one case
    .venv/bin/python -m validation.gpu.compare --write     # write validation/gpu_comparison.json (the Accuracy page)
    .venv/bin/python -m validation.gpu.compare --check     # exit 1 if the committed JSON is not what this gives now

Error = (engine − measured) / measured, in %; negative = the engine is low.
"""
from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from functools import lru_cache

from validation.gpu.goldens import GOLDEN_GPU_DIR, engine_inputs, full_argv, group_of, load_cases, measured

JSON_PATH = GOLDEN_GPU_DIR.parents[1] / "validation" / "gpu_comparison.json"


@dataclass(frozen=True)
class Row:
    id: str
    group: str
    measured_peak: int | None
    measured_smi: int | None
    engine_peak: int | None
    engine_smi: int | None
    error: str = ""  # why the engine could not describe the run (an input it does not have yet)

    @property
    def peak_err_pct(self) -> float | None:
        if self.engine_peak is None or not self.measured_peak:
            return None
        return 100 * (self.engine_peak - self.measured_peak) / self.measured_peak

    @property
    def smi_err_pct(self) -> float | None:
        if self.engine_smi is None or not self.measured_smi:
            return None
        return 100 * (self.engine_smi - self.measured_smi) / self.measured_smi


def compare(record: dict) -> Row:
    from calculator import estimate
    meas = measured(record) or {}
    try:
        model, workload = engine_inputs(record)
        est = estimate(model, workload, with_fits=False)
        engine_peak, engine_smi, error = est.peak_allocated_bytes, est.total_bytes, ""
    except SystemExit as exc:  # argparse on an unknown flag
        engine_peak = engine_smi = None
        error = f"CLI rejected the flags ({exc})"
    except Exception as exc:  # CliError, InputError, ConfigError, ValidationError: the message names the field
        engine_peak = engine_smi = None
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return Row(record["id"], group_of(record), meas.get("peak_allocated"), meas.get("nvidia_smi"),
               engine_peak, engine_smi, error)


@lru_cache(maxsize=1)
def rows() -> tuple[Row, ...]:
    return tuple(compare(r) for r in load_cases())


def stats(values: list[float]) -> dict:
    a = [abs(v) for v in values]
    return {"n": len(a), "median": statistics.median(a) if a else None, "worst": max(a) if a else None}


def group_summary(selected: tuple[Row, ...] | None = None) -> dict[str, dict]:
    """Per group: cases, compared, median and worst |error| of peak allocated and of nvidia-smi."""
    out: dict[str, dict] = {}
    for row in (rows() if selected is None else selected):
        g = out.setdefault(row.group, {"cases": 0, "peak": [], "smi": []})
        g["cases"] += 1
        if row.peak_err_pct is not None:
            g["peak"].append(row.peak_err_pct)
        if row.smi_err_pct is not None:
            g["smi"].append(row.smi_err_pct)
    return {k: {"cases": v["cases"], "peak": stats(v["peak"]), "smi": stats(v["smi"])} for k, v in sorted(out.items())}


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def build() -> dict:
    """What the Accuracy page shows: per group and per case, the engine against the GPU (errors in %)."""
    all_rows = rows()
    groups = [{"group": name, "cases": g["cases"], "peak_n": g["peak"]["n"],
               "peak_median_pct": _round(g["peak"]["median"]), "peak_worst_pct": _round(g["peak"]["worst"]),
               "smi_n": g["smi"]["n"], "smi_median_pct": _round(g["smi"]["median"]),
               "smi_worst_pct": _round(g["smi"]["worst"])} for name, g in group_summary().items()]
    peak = stats([r.peak_err_pct for r in all_rows if r.peak_err_pct is not None])
    smi = stats([r.smi_err_pct for r in all_rows if r.smi_err_pct is not None])
    groups.append({"group": "all", "cases": len(all_rows), "peak_n": peak["n"],
                   "peak_median_pct": _round(peak["median"]), "peak_worst_pct": _round(peak["worst"]),
                   "smi_n": smi["n"], "smi_median_pct": _round(smi["median"]), "smi_worst_pct": _round(smi["worst"])})
    cases = [{"id": r.id, "group": r.group, "measured_peak": r.measured_peak, "engine_peak": r.engine_peak,
              "peak_err_pct": _round(r.peak_err_pct), "measured_smi": r.measured_smi, "engine_smi": r.engine_smi,
              "smi_err_pct": _round(r.smi_err_pct), "error": r.error} for r in all_rows]
    return {"about": "The engine against the real-GPU goldens (tests/golden_gpu): peak allocated vs "
                     "torch.cuda.max_memory_allocated, total vs nvidia-smi (device used). error = (engine − "
                     "measured) / measured × 100.",
            "generated_by": "python -m validation.gpu.compare --write", "groups": groups, "cases": cases}


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v:+.2f}%"


def _abs(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="engine vs real-GPU goldens")
    ap.add_argument("--groups", action="store_true", help="per-group table only")
    ap.add_argument("--argv", metavar="ID", help="print the CLI command for one case")
    ap.add_argument("--write", action="store_true", help=f"write {JSON_PATH.name}")
    ap.add_argument("--check", action="store_true", help=f"exit 1 if {JSON_PATH.name} is stale")
    args = ap.parse_args(argv)
    if args.write or args.check:
        text = dumps(build())
        if args.check:
            same = JSON_PATH.exists() and JSON_PATH.read_text() == text
            print(f"{JSON_PATH.name}: {'up to date' if same else 'stale: run --write'}")
            return 0 if same else 1
        JSON_PATH.write_text(text)
        print(f"wrote {JSON_PATH}")
        return 0
    if args.argv:
        record = next(r for r in load_cases() if r["id"] == args.argv)
        print("python -m calculator " + " ".join(full_argv(record)))
        return 0
    all_rows = rows()
    if not args.groups:
        print(f"{'case':<72} {'meas peak GB':>12} {'engine':>9} {'err':>8}   {'meas smi GB':>11} {'engine':>9} {'err':>8}")
        for r in all_rows:
            gb = lambda v: "—" if v is None else f"{v / 1e9:.2f}"  # noqa: E731
            line = (f"{r.id:<72} {gb(r.measured_peak):>12} {gb(r.engine_peak):>9} {_pct(r.peak_err_pct):>8}   "
                    f"{gb(r.measured_smi):>11} {gb(r.engine_smi):>9} {_pct(r.smi_err_pct):>8}")
            print(line + (f"   [{r.error}]" if r.error else ""))
        print()
    print(f"{'group (stack / impl / kind)':<40} {'cases':>5} {'peak n':>6} {'median':>8} {'worst':>8}   "
          f"{'smi median':>10} {'worst':>8}")
    for name, g in group_summary().items():
        print(f"{name:<40} {g['cases']:>5} {g['peak']['n']:>6} {_abs(g['peak']['median']):>8} "
              f"{_abs(g['peak']['worst']):>8}   {_abs(g['smi']['median']):>10} {_abs(g['smi']['worst']):>8}")
    peak = stats([r.peak_err_pct for r in all_rows if r.peak_err_pct is not None])
    smi = stats([r.smi_err_pct for r in all_rows if r.smi_err_pct is not None])
    print(f"{'all':<40} {len(all_rows):>5} {peak['n']:>6} {_abs(peak['median']):>8} {_abs(peak['worst']):>8}   "
          f"{_abs(smi['median']):>10} {_abs(smi['worst']):>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
