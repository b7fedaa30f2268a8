"""Measured vs estimated time on a real H200: each training case's steady-state step (`step2.seconds`) and each
generate() call (`seconds`), PyTorch 2.11 + transformers 5.17 eager code (shared/validation/gpu-h200/README.md).

    .venv/bin/python -m validation.gpu.timing_compare            # the table and the error per group
    .venv/bin/python -m validation.gpu.timing_compare --fit      # refit the efficiency constants on the FIT cases

The constants (calculator/timing/inputs.py defaults) are fitted on the training cases whose model is in
FIT_MODELS and held against every other case (models the fit never saw); see validation/CALIBRATION.md.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from functools import lru_cache
from pathlib import Path

from calculator.core.errors import InputError
from calculator.model.hf_config import spec_from_hf_config
from calculator.timing.step_time import estimate_time
from calculator.timing.inputs import TimingInputs
from calculator.core.workload import RECIPES, Workload

ROOT = Path(__file__).resolve().parents[2]
# New measurement files in the shared harness's jsonl format (first line: the environment), read if present
NEW_JSONL = (ROOT / "validation" / "gpu-h200-ours" / "measurements.jsonl",)
FIT_MODELS = ("llama-3.2-1b.json", "llama-3.1-8b.json", "qwen3-0.6b.json")  # the fit set; the rest is unseen
FIT_FOLDER = "h200/"  # tests/golden_gpu/h200: the shared cases the constants were fitted on
TRAINING = ("train", "lora", "qlora")
# Runs the engine has no input for: other kernels (Liger, torch.compile), a padding mask (SDPA leaves the flash
# kernel), DDP/FSDP2 wrappers at world size 1, prepare_model_for_kbit_training's fp32 upcast. Shown, not counted.
OUT_OF_SCOPE = ("impl", "padmask", "wrap", "kbit_prep")


def load_records() -> list[dict]:
    """Every real-GPU record (tests/golden_gpu/**, validation/gpu/goldens.py) plus NEW_JSONL files if present."""
    from validation.gpu.goldens import load_cases
    out = load_cases()
    for path in NEW_JSONL:
        if path.exists():
            for line in path.read_text().splitlines():
                rec = json.loads(line) if line.strip() else {}
                if "case" in rec:  # the first line of a measurement file is its environment
                    rec["_path"] = str(path.relative_to(ROOT))
                    out.append(rec)
    return out


def measured_seconds(rec: dict) -> float | None:
    if rec.get("status") != "ok":
        return None
    if rec["case"]["kind"] in TRAINING:
        return rec.get("step2", {}).get("seconds")
    return rec.get("seconds")


def inputs_of(rec: dict):
    """(ModelSpec, Workload) of a measured run, as a user would describe it."""
    case = rec["case"]
    cfg = dict(rec["config_full"])
    spec = spec_from_hf_config(cfg).spec
    attention = {"sdpa": "flash", "eager": "eager"}[case.get("attn", "sdpa")]
    common = dict(micro_batch=case["batch"], seq_len=case["seq"], attention=attention, gpu="h200")
    if case["kind"] in ("infer", "infer-quant"):
        quant = {"nf4": "nf4", "int8": "int8"}.get(case.get("quant", ""))
        return spec, Workload(mode="infer", gen_tokens=case.get("gen", 0), weight_dtype=quant,
                              precision=RECIPES["pure-bf16"][1], **common)
    precision = RECIPES[case.get("recipe", "pure-bf16")][1]
    extra = {}
    if case["kind"] in ("lora", "qlora"):
        extra = dict(finetune=case["kind"], lora_rank=16, lora_targets=case["lora"])
    return spec, Workload(mode="train", precision=precision, recompute=case.get("recompute", "none"),
                          optimizer=case.get("opt", "adamw"), optimizer_impl=case.get("opt_impl", "fused"),
                          **common, **extra)


def group_of(rec: dict) -> str:
    case = rec["case"]
    if any(case.get(k) for k in OUT_OF_SCOPE):
        return "out of scope"
    if not rec.get("_path", "").startswith(FIT_FOLDER):
        return "unseen (new cases)"
    if case["kind"] not in TRAINING:
        return "inference"
    return "fit" if case["config"] in FIT_MODELS else "unseen (other models)"


@lru_cache(maxsize=1)
def _prepared() -> tuple:
    out = []
    for rec in load_records():
        seconds = measured_seconds(rec)
        if seconds is None:
            continue
        try:
            model, work = inputs_of(rec)
        except (InputError, ValueError, KeyError):
            continue
        out.append((rec["id"], rec["case"]["kind"], group_of(rec), seconds, model, work))
    return tuple(out)


def comparisons(inputs: TimingInputs | None = None) -> list[dict]:
    """One row per measured case: id, kind, group, measured and estimated seconds, error (estimate/measured − 1)."""
    rows = []
    for case_id, kind, group, seconds, model, work in _prepared():
        try:
            est = estimate_time(model, work, inputs).step_time_s
        except InputError:
            continue
        rows.append({"id": case_id, "kind": kind, "group": group, "measured_s": seconds, "estimated_s": est,
                     "error": est / seconds - 1})
    return rows


def summary(rows: list[dict]) -> dict[str, dict]:
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["group"], []).append(abs(r["error"]))
    return {g: {"n": len(v), "median_abs_error": statistics.median(v), "worst_abs_error": max(v)}
            for g, v in by.items()}


# kernel_gap_us is not fitted (the data cannot tell it from the matmul efficiency): 2 µs, a typical launch gap
FITTED = ("matmul_efficiency", "attention_efficiency", "memory_efficiency", "host_op_us", "host_backward_op_us",
          "host_inference_op_us", "step_overhead_ms", "decode_step_overhead_ms")


def _loss(values: dict, groups=("fit",)) -> float:
    try:
        inputs = TimingInputs(**values)
    except ValueError:
        return float("inf")
    rows = [r for r in comparisons(inputs) if r["group"] in groups or (r["group"] == "inference"
                                                                      and "inference" in groups)]
    return sum(math.log(r["estimated_s"] / r["measured_s"]) ** 2 for r in rows) / max(1, len(rows))


def nelder_mead(f, x0: list[float], step: float = 0.25, iterations: int = 400) -> list[float]:
    """Minimise f from x0 (Nelder and Mead 1965: reflect, expand, contract, shrink a simplex of n + 1 points)."""
    n = len(x0)
    simplex = [list(x0)] + [[x + (step if i == j else 0.0) for j, x in enumerate(x0)] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        centroid = [sum(p[j] for p in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        reflected = [c + (c - x) for c, x in zip(centroid, worst)]
        fr = f(reflected)
        if fr < values[0]:
            expanded = [c + 2 * (c - x) for c, x in zip(centroid, worst)]
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = [c + 0.5 * (x - c) for c, x in zip(centroid, worst)]
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, p)] for p in simplex[1:]]
                values = [values[0]] + [f(p) for p in simplex[1:]]
    return simplex[min(range(n + 1), key=values.__getitem__)]


def fit(start: TimingInputs | None = None, iterations: int = 400) -> TimingInputs:
    """Fit FITTED on the fit cases (training) and the inference cases (for the no-grad operator cost and the decode
    step overhead): Nelder–Mead on the mean squared log error, in log space (every constant stays positive)."""
    start = start or TimingInputs()
    groups = ("fit", "inference")

    def loss(logs: list[float]) -> float:
        return _loss({k: math.exp(v) for k, v in zip(FITTED, logs)}, groups)

    best = nelder_mead(loss, [math.log(getattr(start, k)) for k in FITTED], iterations=iterations)
    return TimingInputs(**{k: math.exp(v) for k, v in zip(FITTED, best)})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="refit the constants on the fit cases first")
    ap.add_argument("--markdown", action="store_true", help="print the tables for validation/CALIBRATION.md")
    ap.add_argument("--write", action="store_true", help="rewrite those tables in validation/CALIBRATION.md")
    args = ap.parse_args(argv)
    inputs = fit() if args.fit else TimingInputs()
    if args.fit:
        print("fitted: " + ", ".join(f"{k}={getattr(inputs, k):.4g}" for k in FITTED))
    rows = comparisons(inputs)
    if args.markdown:
        print(markdown(rows))
        return
    if args.write:
        CALIBRATION.write_text(calibration_with(markdown(rows)))
        return
    print(f"{'case':<66} {'group':<22} {'measured s':>10} {'estimate s':>10} {'error':>7}")
    for r in sorted(rows, key=lambda r: (r["group"], r["id"])):
        print(f"{r['id']:<66} {r['group']:<22} {r['measured_s']:>10.4f} {r['estimated_s']:>10.4f} "
              f"{r['error']:>+7.1%}")
    for group, s in summary(rows).items():
        print(f"{group:<22} n={s['n']:>3}  median |error| {s['median_abs_error']:.1%}  worst {s['worst_abs_error']:.1%}")


CALIBRATION = ROOT / "validation" / "CALIBRATION.md"
BLOCK = ("<!-- timing-results: written by python -m validation.gpu.timing_compare --write -->\n", "<!-- /timing-results -->")


def markdown(rows: list[dict]) -> str:
    """The summary per group and the per-case table, as in validation/CALIBRATION.md."""
    out = ["| group | cases | median \\|error\\| | worst \\|error\\| |", "|---|---:|---:|---:|"]
    for group, s in summary(rows).items():
        out.append(f"| {group} | {s['n']} | {s['median_abs_error']:.1%} | {s['worst_abs_error']:.1%} |")
    out += ["", "| case | group | measured s | estimate s | error |", "|---|---|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r["group"], r["id"])):
        out.append(f"| {r['id']} | {r['group']} | {r['measured_s']:.4f} | {r['estimated_s']:.4f} | "
                   f"{r['error']:+.1%} |")
    return "\n".join(out) + "\n"


def calibration_with(tables: str) -> str:
    """validation/CALIBRATION.md with the timing block replaced by `tables`."""
    text = CALIBRATION.read_text()
    start = text.index(BLOCK[0]) + len(BLOCK[0])
    return text[:start] + tables + text[text.index(BLOCK[1], start):]


if __name__ == "__main__":
    main()
