"""Published memory of whole training stacks (validation/published_stacks.csv, each row with its citation):
torchtitan's FSDP2 runs and ms-swift's DeepSpeed ZeRO-2/3 and Megatron-SWIFT runs, against the engine given the
same stack, implementation, recompute and layout on the command line:

    python -m calculator estimate --model llama-3.1-8b --mode train --stack fsdp2 --recipe mixed-bf16 --dp 8 \
        --zero 3 --batch 2 --seq 8192 --recompute op --impl compile --gpu h100-sxm

torchtitan logs `torch.cuda.memory_stats()["reserved_bytes.all.peak"]` (torchtitan/components/metrics.py,
DeviceMemoryMonitor) and ms-swift's trainer logs `memory(GiB)` = `torch.cuda.max_memory_reserved()`
(swift/trainers/mixin.py get_max_cuda_memory; swift/utils/torch_utils.py get_max_reserved_memory in later
releases): the engine's peak allocated + the caching allocator's reserved − allocated, without the CUDA context or
NCCL buffers, which live outside the allocator.

Columns beyond the layout: `unit` is the unit the source writes, `read_as` the unit the comparison takes (a row's
notes say why they differ); `figure` is "measured" (a rounded peak the source states) or "capacity" (the figure is
the card's whole memory: the run fit and the allocator filled it — an upper bound, also held to the 15%);
`comparable` "no" keeps a row in the table without holding it to the bound (CALIBRATION.md says why).

    .venv/bin/python -m validation.published.stacks
"""
from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

CSV_PATH = Path(__file__).resolve().parents[1] / "published_stacks.csv"
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
    figure: str = "measured"
    comparable: bool = True

    @property
    def error_pct(self) -> float:
        return 100 * (self.estimated - self.measured) / self.measured


def read_rows(path: Path = CSV_PATH) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def argv_of(row: dict[str, str]) -> list[str]:
    argv = ["estimate", "--model", row["model"], "--mode", "train", "--stack", row["stack"], "--recipe",
            row["recipe"], "--dp", row["dp"], "--zero", row["zero"], "--batch", row["micro_batch"], "--seq",
            row["seq_len"], "--recompute", row["recompute"], "--impl", row["impl"], "--gpu", row["gpu"]]
    if row.get("optimizer_impl"):
        argv += ["--optimizer-impl", row["optimizer_impl"]]
    for flag in ("tp", "ep", "etp"):
        if row.get(flag, "1") not in ("", "1"):
            argv += [f"--{flag}", row[flag]]
    for flag in ("sequence_parallel", "distributed_optimizer", "expandable_segments", "ds_auto_buckets"):
        if row.get(flag) == "true":
            argv.append("--" + flag.replace("_", "-"))
    return argv


def held_to_bound(row: dict[str, str]) -> bool:
    return row.get("comparable", "yes") == "yes"


def reserved_bytes(stage) -> int:
    """What max_memory_reserved reports: peak allocated + the allocator's reserved − allocated."""
    slack = sum(t.bytes for t in stage.terms if t.component == "fragmentation")
    return stage.peak_allocated_bytes + slack


def compare(rows: list[dict[str, str]] | None = None) -> list[StackRow]:
    from calculator import estimate
    from calculator.cli.main import build_inputs
    from calculator.cli.parser import build_parser
    out = []
    for row in rows if rows is not None else read_rows():
        argv = argv_of(row)
        model, workload, _ = build_inputs(build_parser().parse_args(argv))
        est = estimate(model, workload, with_fits=False)
        measured = int(float(row["value"]) * UNITS[row.get("read_as") or row["unit"]])
        out.append(StackRow(row["id"], row["source"], row["stack"], row["impl"], tuple(argv), measured,
                            reserved_bytes(est.stages[est.worst_stage]), row.get("figure", "measured"),
                            held_to_bound(row)))
    return out


def summary(rows: list[StackRow]) -> str:
    """Median and worst |error| of the rows held to the bound, per source family and overall."""
    lines = []
    families = {"torchtitan": [r for r in rows if r.id.startswith("tt-")],
                "ms-swift": [r for r in rows if r.id.startswith("sw-")], "all": rows}
    for name, group in families.items():
        errs = [abs(r.error_pct) for r in group if r.comparable]
        if errs:
            lines.append(f"{name}: {len(errs)} rows, median |error| {statistics.median(errs):.1f}%, worst "
                         f"{max(errs):.1f}% (bound {BOUND_PCT:g}% per row)")
    return "\n".join(lines)


def main() -> int:
    rows = compare()
    for r in rows:
        mark = "" if r.comparable else "  (not held to the bound)"
        print(f"{r.id:6} {r.stack:9} {r.impl:11} {r.figure:8} {r.measured / 2**30:6.1f} GiB  engine "
              f"{r.estimated / 2**30:6.1f} GiB  {r.error_pct:+6.1f}%{mark}   python -m calculator {' '.join(r.argv)}")
    print(summary(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
