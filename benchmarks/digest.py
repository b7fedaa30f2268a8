"""A digest of many seeded estimates, to prove that a change moved no figure (not a test: it prints).

Each input is a model (a preset, a fuzzed custom spec, or a real config.json with a few fields changed) and a
fuzzed workload (benchmarks/fuzz_inputs.py, hostile values included). For each, it records estimate().to_dict()
(terms, stages, fit cards with the planner's GPUs needed, serving and RL), the step-time estimate when the
workload has one, or the refusal's message, and hashes it. Run it before and after a change and compare:

    .venv/bin/python benchmarks/digest.py --out /tmp/before.txt
    .venv/bin/python benchmarks/digest.py --out /tmp/after.txt && diff /tmp/before.txt /tmp/after.txt
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"
os.environ["LLM_MEM_CACHE_DIR"] = tempfile.mkdtemp(prefix="digest-hub-cache-")


def _engine():
    """The engine's entry points (one place to name them)."""
    from calculator import Workload, estimate
    from calculator.model.hf_config import parse_config_json, spec_from_hf_config
    from calculator.model.spec import ModelSpec
    from calculator.model.presets import list_models, load_model
    from calculator.timing.step_time import estimate_time
    return Workload, estimate, ModelSpec, list_models, load_model, parse_config_json, spec_from_hf_config, \
        estimate_time


def _record(fn) -> object:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a refusal's text is part of the digest
        return {"refused": type(exc).__name__, "message": str(exc)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="-", help="one line per input: index, digest, label")
    a = ap.parse_args(argv)
    from fuzz_inputs import base_configs, gen_custom_spec, gen_workload, mutate_config
    Workload, estimate, ModelSpec, list_models, load_model, parse_config_json, spec_from_hf_config, \
        estimate_time = _engine()
    rng = random.Random(a.seed)
    specs = [load_model(m.id).spec for m in list_models()]
    configs = base_configs()
    total = hashlib.sha256()
    lines, refused = [], 0
    for i in range(a.n):
        r = rng.random()
        if r < 0.15:
            kw = gen_custom_spec(rng)
            label, make = f"custom {kw}", (lambda kw=kw: ModelSpec(**kw))
        elif r < 0.3:
            text = mutate_config(rng, rng.choice(configs))
            label, make = f"config {text[:120]!r}", (lambda t=text: spec_from_hf_config(parse_config_json(t)).spec)
        else:
            spec = rng.choice(specs)
            label, make = spec.name, (lambda s=spec: s)
        w = gen_workload(rng)

        def one():
            model = make()
            work = Workload(**w)
            d = estimate(model, work).to_dict()
            if work.mode != "rl" and work.engine == "hf":
                d["time"] = _record(lambda: estimate_time(model, work).to_dict())
            return d
        rec = _record(one)
        refused += isinstance(rec, dict) and "refused" in rec
        h = hashlib.sha256(json.dumps(rec, sort_keys=True, default=str).encode()).hexdigest()[:16]
        total.update(h.encode())
        lines.append(f"{i}\t{h}\t{label[:100]}")
    out = "\n".join(lines) + "\n"
    if a.out == "-":
        sys.stdout.write(out)
    else:
        Path(a.out).write_text(out)
    print(f"{a.n} inputs, {a.n - refused} computed, {refused} refused, digest {total.hexdigest()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
