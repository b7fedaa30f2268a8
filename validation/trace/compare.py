"""Compare the engine with every measured golden file (tests/golden/*.json, written by validation/trace/make_golden.py).
Needs only the engine (no torch): the app's Accuracy page and tests/validation/test_golden.py use it.

    .venv/bin/python -m validation.trace.compare        # prints the table: predicted vs measured, per component
"""
from __future__ import annotations

import json
import statistics
from functools import lru_cache
from pathlib import Path

from calculator import Workload, estimate
from calculator.model.hf_config import spec_from_hf_config

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "tests" / "golden"
RECIPES = {
    "mixed": dict(params="bf16", grads="bf16", master_weights="fp32", optimizer_states="fp32", activations="bf16"),
    "fp32": dict(params="fp32", grads="fp32", master_weights=None, optimizer_states="fp32", activations="fp32"),
    "pure-bf16": dict(params="bf16", grads="bf16", master_weights=None, optimizer_states="bf16", activations="bf16"),
    "bf16": dict(params="bf16", grads="bf16", master_weights=None, optimizer_states="bf16", activations="bf16"),
    "fp32-adapters": dict(params="bf16", grads="fp32", master_weights=None, optimizer_states="fp32",
                          activations="bf16"),
}
MODELLED_ATTENTION = ("flash", "eager")  # CPU SDPA kernels save other tensors than CUDA's; not modelled


def load_goldens() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(GOLDEN_DIR.glob("*.json"))]


@lru_cache(maxsize=1)
def summary() -> dict:
    """Per quantity: n, median and worst |error| % over the modelled cases, and the list of rows (for the app)."""
    rows = comparisons()
    by: dict[str, list[float]] = {}
    for _, k, _, _, err in rows:
        by.setdefault(k, []).append(abs(err))
    excluded = [g["id"] for g in load_goldens() if g["run"]["attention"] not in MODELLED_ATTENTION]
    return {
        "cases": len({r[0] for r in rows}),
        "architectures": sorted({g["model"]["model_type"] for g in load_goldens()}),
        "per_quantity": {k: {"n": len(v), "median_abs_error_pct": statistics.median(v),
                             "worst_abs_error_pct": max(v)} for k, v in by.items()},
        "rows": rows,
        "excluded": excluded,
    }


def workload_for(g: dict) -> Workload:
    run = g["run"]
    precision = dict(RECIPES[run.get("recipe") or "bf16"])
    if run["mode"] == "infer":
        precision = dict(RECIPES["bf16"], params=run.get("params_dtype", "bf16"),
                         activations=run.get("params_dtype", "bf16"))
    return Workload(
        mode=run["mode"], micro_batch=run["micro_batch"], seq_len=run["seq_len"], gen_tokens=run.get("gen_tokens", 0),
        precision=precision, optimizer=run.get("optimizer") or "adamw",
        optimizer_impl="foreach" if run.get("optimizer_foreach") else "for-loop",
        recompute=run.get("recompute") or "none", attention=run["attention"] if run["attention"] != "sdpa" else "flash",
        finetune=run.get("finetune", "full"), lora_rank=run.get("lora_rank", 16),
        lora_targets=run.get("lora_targets", "all-linear"),
        lora_adapter_dtype="fp32" if run.get("adapter_dtype") == "fp32" else "params",
        # the traced step zeroes gradients in place (validation/trace/optimizer.py: set_to_none=False) on the CPU:
        # no cuBLAS
        stack="hf-trainer", zero_grad_set_to_none=False, overheads={"cublas_workspace_bytes": 0})


def predicted(g: dict) -> dict[str, int]:
    """The engine's numbers for the quantities a golden file measures."""
    spec = spec_from_hf_config(g["model"]).spec
    est = estimate(spec, workload_for(g), with_fits=False)
    c = est.components
    out = {"parameters": est.parameters, "weights": c["weights"]}
    if g["run"].get("finetune", "full") != "full":  # the measured count includes the adapters
        from calculator.memory import lora
        n_moe = spec.moe_layer_count
        out["parameters"] += ((spec.num_hidden_layers - n_moe) * lora.adapter_params(spec, g["run"]["lora_rank"],
                                                                                     g["run"]["lora_targets"], False)
                              + n_moe * lora.adapter_params(spec, g["run"]["lora_rank"], g["run"]["lora_targets"], True))
    if g["run"]["mode"] == "train":
        out.update(master_weights=c["master_weights"], gradients=c["gradients"],
                   optimizer_states=c["optimizer_states"], activations=c["activations"] + c["logits"],
                   peak_allocated=est.peak_allocated_bytes)
    else:
        out.update(kv_cache=c["kv_cache"], peak_allocated=est.peak_allocated_bytes)
    return out


def measured(g: dict) -> dict[str, int]:
    m = g["measured"]
    out = {k: m[k] for k in ("parameters", "weights")}
    if g["run"]["mode"] == "train":
        out.update({k: m[k] for k in ("master_weights", "gradients", "optimizer_states", "activations",
                                      "peak_allocated")})
    else:
        out.update(kv_cache=m["kv_cache"], peak_allocated=m["weights"] + max(m["peak_prefill"], m["peak_decode"]))
    return out


def comparisons() -> list[tuple[str, str, int, int, float]]:
    """(case id, quantity, measured, predicted, error %) for every modelled golden case."""
    rows = []
    for g in load_goldens():
        if g["run"]["attention"] not in MODELLED_ATTENTION:
            continue
        meas, pred = measured(g), predicted(g)
        for k, v in meas.items():
            err = 100.0 * (pred[k] - v) / v if v else (0.0 if pred[k] == 0 else float("inf"))
            rows.append((g["id"], k, v, pred[k], err))
    return rows


def main() -> None:
    rows = comparisons()
    for case, k, v, p, err in rows:
        flag = "" if abs(err) <= 1 else "  <-- over 1%"
        if k not in ("parameters",):
            print(f"{case:<62} {k:<17} {v:>16,} {p:>16,} {err:+8.3f}%{flag}")
    by = {}
    for _, k, _, _, err in rows:
        by.setdefault(k, []).append(abs(err))
    print()
    for k, errs in by.items():
        print(f"{k:<17} n={len(errs):3d} median |err| {statistics.median(errs):7.3f}%  worst {max(errs):7.3f}%")


if __name__ == "__main__":
    main()
