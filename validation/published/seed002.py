"""Seed 002's RL worked example (Qwen-2.5-7B on H100) beside the engine's estimate of the same jobs.

    python -m validation.published.seed002        # both configurations, the seed's table beside ours, per GPU in GB

The seed's numbers are copied from shared/seeds/002 (its 8-card and 4-card tables). The inputs the seed states
and the ones it leaves out (taken from slime, the Megatron + SGLang framework whose flags it quotes) are in
presets/scenarios/seed-002-rl-*.json; the term-by-term discussion is docs/seed-002-rl.md.
"""
from __future__ import annotations

import json
from pathlib import Path

from calculator import Workload, estimate
from calculator.model.presets import load_model
from calculator.stages.rl import BUCKETS, buckets

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = {"8-card": ROOT / "presets/scenarios/seed-002-rl-8gpu.json",
             "4-card": ROOT / "presets/scenarios/seed-002-rl-4gpu.json"}


def seed_table(name: str) -> dict[str, float]:
    """The seed's per-GPU table, kept beside its inputs in presets/scenarios/ ("_seed_table_gb")."""
    return json.loads(SCENARIOS[name].read_text())["_seed_table_gb"]


def scenario(name: str) -> tuple:
    data = {k: v for k, v in json.loads(SCENARIOS[name].read_text()).items() if not k.startswith("_")}
    model = load_model(data.pop("model")).spec
    return model, Workload(**data)


def ours(name: str, all_resident: bool = False):
    """The engine's RL estimate of the seed's job; all_resident: nothing offloaded or asleep (the seed's sum)."""
    m, w = scenario(name)
    if all_resident:
        w = w.model_copy(update={"rl": w.rl.model_copy(update={"offload_train": False, "engine_sleep": False})})
    return estimate(m, w, with_fits=False)


def table(name: str) -> list[tuple[str, float, float, float]]:
    """(bucket, seed GB, ours at the peak phase GB, ours with everything resident GB)."""
    peak, every = ours(name), ours(name, all_resident=True)
    b_peak, b_all = buckets(peak.terms), buckets(every.terms)
    seed = seed_table(name)
    rows = [(k, seed[k], b_peak[k] / 1e9, b_all[k] / 1e9) for k in BUCKETS]
    rows.append(("Total", seed["Total"], peak.total_bytes / 1e9, every.total_bytes / 1e9))
    return rows


def main() -> None:
    for name in SCENARIOS:
        est = ours(name)
        rl = est.rl
        print(f"\n{name}: peak in the {rl.peak_phase} phase; KV demand {rl.kv_demand_bytes / 1e9:.2f} GB per GPU "
              f"({rl.sequences} sequences of {rl.tokens_per_sample:,} tokens), pool {rl.rollout.kv_pool_bytes / 1e9:.2f} GB")
        print(f"| component | seed | ours (peak phase) | ours (nothing offloaded) |")
        print("|---|---:|---:|---:|")
        for k, seed, a, b in table(name):
            print(f"| {k} | {seed:.1f} | {a:.1f} | {b:.1f} |")


if __name__ == "__main__":
    main()
