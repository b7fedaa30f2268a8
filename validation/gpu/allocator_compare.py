"""The caching-allocator replay (calculator/allocator/reference.py over calculator/allocator/step_plan.py) against the real GPU: per
training golden, the measured reserved − allocated (`max_memory_reserved − max_memory_allocated` of the steady
step) beside the replayed one, and the memory outside PyTorch (`device_used − reserved`), with the one constant
that is fitted — the non-PyTorch share — fitted on some models and checked on the others.

    .venv/bin/python -m validation.gpu.allocator_compare            # per case, then the split
    .venv/bin/python -m validation.gpu.allocator_compare --markdown # the tables of validation/CALIBRATION.md
"""
from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

from validation.gpu.goldens import TRAINING_KINDS, engine_inputs, load_cases, measured_snapshot

# The split by model: the non-PyTorch constant is fitted on the Llama runs and checked on every other model
FIT_MODELS = ("llama-3.1-8b", "llama-3.2-1b")


@dataclass(frozen=True)
class SlackRow:
    id: str
    model: str
    measured_slack: int
    replayed_slack: int | None
    outside: int  # device_used − reserved: CUDA context, cuBLAS/cuDNN handles, NCCL (outside the allocator)
    measured_smi: int
    engine_peak: int | None
    stack: str


def rows() -> list[SlackRow]:
    from calculator import estimate
    out = []
    for r in load_cases():
        snap = measured_snapshot(r)
        if snap is None:
            continue
        try:
            m, w = engine_inputs(r)
            est = estimate(m, w, with_fits=False)
            stage = est.stages[est.worst_stage]
            slack = sum(t.bytes for t in stage.terms if t.component == "fragmentation")
            peak = est.peak_allocated_bytes
        except Exception:  # a run the engine cannot describe yet (tests/validation/test_golden_gpu.py lists why)
            slack = peak = None
        out.append(SlackRow(r["id"], r["case"]["config"].removesuffix(".json"),
                            snap["max_reserved"] - snap["max_allocated"], slack, snap["device_used"] - snap["reserved"],
                            snap["device_used"], peak, r["case"].get("wrap", "") or r["case"]["kind"]))
    return out


def outside_constant(selected: list[SlackRow]) -> int:
    """The non-PyTorch share: median of device_used − reserved over single-process runs without NCCL."""
    return int(statistics.median(r.outside for r in selected if r.stack not in ("ddp", "fsdp2")))


def smi_errors(selected: list[SlackRow], outside: int, use_replay: bool = True) -> list[float]:
    """|error| % of peak allocated + slack + outside against nvidia-smi (engine's peak, replayed slack)."""
    out = []
    for r in selected:
        if r.engine_peak is None or r.replayed_slack is None or r.stack in ("ddp", "fsdp2"):
            continue
        total = r.engine_peak + (r.replayed_slack if use_replay else 0) + outside
        out.append(abs(100 * (total - r.measured_smi) / r.measured_smi))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="caching-allocator replay vs the real GPU")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    all_rows = rows()
    training = [r for r in all_rows if r.id.split("_")[0] in TRAINING_KINDS and r.replayed_slack is not None]
    sep = "|" if args.markdown else " "
    if args.markdown:
        print("| run | measured reserved − allocated (GB) | replayed (GB) | outside PyTorch (GB) |\n|---|---:|---:|---:|")
    for r in training:
        print(f"{sep} {r.id:<70} {sep} {r.measured_slack / 1e9:6.2f} {sep} {r.replayed_slack / 1e9:6.2f} {sep} "
              f"{r.outside / 1e9:5.3f} {sep}" if args.markdown else
              f"{r.id:<70} {r.measured_slack / 1e9:6.2f} {r.replayed_slack / 1e9:6.2f} {r.outside / 1e9:6.3f}")
    fit = [r for r in all_rows if r.model in FIT_MODELS]
    held = [r for r in all_rows if r.model not in FIT_MODELS]
    c_fit, c_all = outside_constant(fit), outside_constant(all_rows)
    print()
    print(f"non-PyTorch share fitted on {', '.join(FIT_MODELS)} ({len(fit)} runs): {c_fit:,} B; on all: {c_all:,} B")
    for name, sel in (("fitted models", fit), ("held-out models", held)):
        e = smi_errors(sel, c_fit)
        e0 = smi_errors(sel, c_fit, use_replay=False)
        print(f"{name:<16} n={len(e):3d}  nvidia-smi median |err| {statistics.median(e):5.2f}%  worst {max(e):6.2f}%"
              f"   (without the replay: median {statistics.median(e0):5.2f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
