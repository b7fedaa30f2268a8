"""Median time of one estimate() call (not a test: prints figures). Target: ≤ 50 µs.

    .venv/bin/python benchmarks/bench_estimate.py
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calculator import Workload, estimate
from calculator.presets import load_model

CASES = {
        "llama-3.1-8b train + fit cards": ("llama-3.1-8b", Workload(seq_len=4096, gpu="h100-sxm"), True),
    "llama-3.1-70b tp8 pp4 zero1": ("llama-3.1-70b", Workload(parallel={"tp": 8, "pp": 4, "dp": 4, "zero": 1}), True),
    "deepseek-v3 ep": ("deepseek-v3", Workload(parallel={"tp": 8, "pp": 1, "dp": 32, "ep": 32, "zero": 1}), True),
    "llama-3.1-8b infer 32k": ("llama-3.1-8b", Workload(mode="infer", seq_len=32768), True),
}


SEQS = (1024, 2048, 3072, 4096, 6144, 8192)  # vary the input so no memoized result is reused between calls


def median_us(fn, repeat: int = 2000) -> float:
    """Median µs of fn(seq) over `repeat` calls, cycling the sequence length."""
    for i in range(200):
        fn(SEQS[i % len(SEQS)])
    samples = []
    for i in range(repeat):
        seq = SEQS[i % len(SEQS)]
        t0 = time.perf_counter_ns()
        fn(seq)
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1000


if __name__ == "__main__":
    for label, (model_id, w, fits) in CASES.items():
        spec = load_model(model_id).spec
        workloads = {s: w.model_copy(update={"seq_len": s}) for s in SEQS}
        call = median_us(lambda s: estimate(spec, workloads[s], with_fits=fits))
        line = f"{label:<34} estimate() median {call:7.1f} µs"
        if fits:  # fit cards are computed on first access of .fits
            line += f"   + .fits (19 GPUs) median {median_us(lambda s: estimate(spec, workloads[s]).fits):7.1f} µs"
        print(line)
