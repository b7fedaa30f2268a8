"""Convert a real-GPU measurement file (one JSON object per line, the first line the environment) into one golden
record per case under tests/golden_gpu/<gpu>/ — the files tests/validation/test_golden_gpu.py holds the engine to.

    python -m validation.gpu.import_cases                       # the shared H200 cases -> tests/golden_gpu/h200/
    python -m validation.gpu.import_cases FILE --gpu h100-sxm --out tests/golden_gpu/h100-x/

A record is the measured case exactly as the harness wrote it (its protocol fields under `case`, the model under
`config_full`, every snapshot: `after_build`, `step1`, `step2`, `end`, `after_load`, `at_oom`, …) plus:
    env      the measurement environment (torch, CUDA, device, capacity PyTorch sees, memory used at init)
    gpu      the catalogue id of the GPU it ran on (presets/gpus.json)
    source   where the numbers come from (file, line) and the script that copied them
A run that ran out of memory (`status: "oom"`, `at_oom`) recorded no `config_full`: it gets the one of a finished
run of the same config file, named in `config_full_from`.
Numbers are copied, never edited. tests/golden_gpu/README.md describes the format for new harnesses.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED_H200 = ROOT.parent.parent / "shared" / "validation" / "gpu-h200" / "measurements.jsonl"
GOLDEN_GPU_DIR = ROOT / "tests" / "golden_gpu"


def read_measurements(path: Path) -> tuple[dict, list[tuple[int, dict]]]:
    """(environment, [(line number, case record)]) of a measurements.jsonl file."""
    env: dict = {}
    cases = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        if "env" in record and "case" not in record:
            env = record["env"]
        else:
            cases.append((number, record))
    return env, cases


def golden_record(record: dict, env: dict, gpu: str, source_file: str, line: int) -> dict:
    """One golden: the case as measured, with its environment and source."""
    out = {"id": record["id"], "gpu": gpu, "env": env,
           "source": {"file": source_file, "line": line, "imported_by": "validation/gpu/import_cases.py"}}
    out.update({k: v for k, v in record.items() if k != "id"})
    return out


def import_cases(path: Path, gpu: str, out_dir: Path, source_name: str) -> list[Path]:
    env, cases = read_measurements(path)
    configs = {r["case"]["config"]: (r["id"], r["config_full"]) for _, r in cases if "config_full" in r}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for line, record in cases:
        target = out_dir / f"{record['id']}.json"
        golden = golden_record(record, env, gpu, source_name, line)
        if "config_full" not in golden and golden["case"].get("config") in configs:
            # a run that ran out of memory recorded no model: it is the same config file as a finished run's
            sibling, config = configs[golden["case"]["config"]]
            golden["config_full"], golden["config_full_from"] = config, sibling
        target.write_text(json.dumps(golden, indent=1) + "\n")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=str(SHARED_H200), help="measurements.jsonl (default: the shared H200)")
    ap.add_argument("--gpu", default="h200", help="catalogue id of the GPU the cases ran on")
    ap.add_argument("--out", default=None, help="output folder (default tests/golden_gpu/<gpu>/)")
    args = ap.parse_args(argv)
    path = Path(args.file)
    out = Path(args.out) if args.out else GOLDEN_GPU_DIR / args.gpu
    name = ("shared/validation/gpu-h200/measurements.jsonl" if path.resolve() == SHARED_H200.resolve()
            else path.name)
    written = import_cases(path, args.gpu, out, name)
    print(f"{len(written)} cases -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
