"""Published memory of whole training stacks (validation/published_stacks.csv: torchtitan's FSDP2 runs, each with
its citation) against the engine given the same stack, implementation and recompute on the command line:

    python -m calculator estimate --model llama-3.1-8b --mode train --stack fsdp2 --recipe mixed-bf16 --dp 8 \
        --zero 3 --batch 2 --seq 8192 --recompute op --impl compile --gpu h100-sxm

torchtitan logs `torch.cuda.memory_stats()["reserved_bytes.all.peak"]` (torchtitan/components/metrics.py,
DeviceMemoryMonitor): the engine's peak allocated + the caching allocator's reserved − allocated, without the CUDA
context or NCCL buffers, which live outside the allocator.

    .venv/bin/python -m validation.published_stacks
"""
from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

CSV_PATH = Path(__file__).resolve().parent / "published_stacks.csv"
UNITS = {"GiB": 2**30, "GB": 10**9}
BOUND_PCT = 15.0  # issue 13: each stack row within 15%


@dataclass(frozen=True)
class StackRow:
    id: str
    source: str
    stack: str
    impl: str
    argv: tuple[str, ...]
    measured: int
    estimated: int

    @property
    def error_pct(self) -> float:
        return 100 * (self.estimated - self.measured) / self.measured


def read_rows(path: Path = CSV_PATH) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def argv_of(row: dict[str, str]) -> list[str]:
    return ["estimate", "--model", row["model"], "--mode", "train", "--stack", row["stack"], "--recipe",
            row["recipe"], "--dp", row["dp"], "--zero", row["zero"], "--batch", row["micro_batch"], "--seq",
            row["seq_len"], "--recompute", row["recompute"], "--impl", row["impl"], "--gpu", row["gpu"]]


def reserved_bytes(stage) -> int:
    """What max_memory_reserved reports: peak allocated + the allocator's reserved − allocated."""
    slack = sum(t.bytes for t in stage.terms if t.component == "fragmentation")
    return stage.peak_allocated_bytes + slack


def compare(rows: list[dict[str, str]] | None = None) -> list[StackRow]:
    from calculator import estimate
    from calculator.cli import build_inputs
    from calculator.cli_parser import build_parser
    out = []
    for row in rows if rows is not None else read_rows():
        argv = argv_of(row)
        model, workload, _ = build_inputs(build_parser().parse_args(argv))
        est = estimate(model, workload, with_fits=False)
        measured = int(float(row["value"]) * UNITS[row["unit"]])
        out.append(StackRow(row["id"], row["source"], row["stack"], row["impl"], tuple(argv), measured,
                            reserved_bytes(est.stages[est.worst_stage])))
    return out


def main() -> int:
    rows = compare()
    for r in rows:
        print(f"{r.id:6} {r.stack:7} {r.impl:8} measured {r.measured / 2**30:6.1f} GiB  engine "
              f"{r.estimated / 2**30:6.1f} GiB  {r.error_pct:+6.1f}%   python -m calculator {' '.join(r.argv)}")
    errs = [abs(r.error_pct) for r in rows]
    print(f"median |error| {statistics.median(errs):.1f}%, worst {max(errs):.1f}% (bound {BOUND_PCT:g}% per row)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
