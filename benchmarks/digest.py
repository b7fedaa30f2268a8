"""A digest of many seeded estimates, to prove that a change moved no figure (not a test: it prints).

Each input is a model (a preset, a fuzzed custom spec, or a real config.json with a few fields changed; the pool is
frozen as it was before issue 21, so that a new preset or model type does not reshuffle the inputs) and a
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


# The model types whose written configs make the digest's config pool: those mapped before issue 21 (adding a
# supported type must not reshuffle which inputs the digest draws).
DIGEST_TYPES = (
    "arcee", "cohere", "cohere2", "cwm", "deepseek_v2", "deepseek_v3", "ernie4_5", "exaone4", "falcon", "gemma",
    "gemma2", "gemma3", "gemma3_text", "glm", "glm4", "gpt2", "gpt_bigcode", "gpt_neox", "gpt_oss", "granite",
    "granitemoe", "granitemoeshared", "helium", "hunyuan_v1_dense", "internlm3", "iquestcoder", "llama", "llama4",
    "llama4_text", "ministral", "ministral3", "mistral", "mixtral", "nemotron", "olmo2", "olmo3", "olmoe", "phi",
    "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "seed_oss", "smollm3", "stablelm", "starcoder2",
    "vaultgemma")
DIGEST_PRESETS = (
    "deepseek-r1", "deepseek-v2-lite", "deepseek-v3", "gemma-2-27b", "gemma-2-2b", "gemma-2-9b", "gemma-3-12b",
    "gemma-3-1b", "gemma-3-27b", "gemma-3-4b", "gpt-oss-120b", "gpt-oss-20b", "gpt2", "llama-3.1-405b",
    "llama-3.1-70b", "llama-3.1-8b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.3-70b", "llama-4-scout",
    "mistral-7b-v0.1", "mistral-nemo-12b", "mistral-small-24b", "mixtral-8x22b", "mixtral-8x7b", "olmo-2-7b",
    "phi-3-medium-4k", "phi-3-mini-4k", "phi-4", "pythia-1.4b", "qwen1.5-moe-a2.7b", "qwen2-57b-a14b", "qwen2.5-0.5b",
    "qwen2.5-1.5b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-3b", "qwen2.5-72b", "qwen2.5-7b", "qwen3-0.6b",
    "qwen3-1.7b", "qwen3-14b", "qwen3-235b-a22b", "qwen3-30b-a3b", "qwen3-32b", "qwen3-4b", "qwen3-8b",
    "smollm2-1.7b")

# the GPU catalogue's ids before issue 21 (the fit cards of GPUs added later are left out of the digest)
DIGEST_GPUS = ("a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h100-nvl", "h200", "b200", "b300", "mi300x",
               "mi325x", "mi355x", "l40s", "l4", "a10g", "rtx-4090", "rtx-5090", "v100-16gb", "v100-32gb", "rtx-a6000")


def _record(fn) -> object:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a refusal's text is part of the digest
        # the lists of supported model types and GPU ids in a refusal grow with every new mapper and GPU
        message = str(exc).split(" (supported: ")[0].split(" Valid ids: ")[0]
        return {"refused": type(exc).__name__, "message": message}


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
    specs = [load_model(m.id).spec for m in list_models() if m.id in DIGEST_PRESETS]
    configs = base_configs(DIGEST_TYPES, DIGEST_PRESETS)
    total = hashlib.sha256()
    lines, refused = [], 0
    for i in range(a.n):
        r = rng.random()
        if r < 0.15:
            kw = gen_custom_spec(rng)
            label, make = f"custom {kw}", (lambda kw=kw: ModelSpec(**kw))
        elif r < 0.3:
            text = mutate_config(rng, rng.choice(configs), DIGEST_TYPES)
            label, make = f"config {text[:120]!r}", (lambda t=text: spec_from_hf_config(parse_config_json(t)).spec)
        else:
            spec = rng.choice(specs)
            label, make = spec.name, (lambda s=spec: s)
        w = gen_workload(rng)

        def one():
            model = make()
            work = Workload(**w)
            d = estimate(model, work).to_dict()
            d["fits"] = [f for f in d["fits"] if f["gpu"] in DIGEST_GPUS]
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
