"""Run the H200 cases: `python -m validation.gpu.run --out DIR [--group main|own|all] [--only a,b] [--deadline S]`.

The orchestrator never touches CUDA. It starts worker processes (`--worker`) that append one JSON line per case
to `DIR/measurements.jsonl` as soon as the case ends (the first worker writes the environment line first; a case
that failed for a reason other than memory goes to `DIR/failures.jsonl` instead, so the measurements file holds
only `ok` and `oom` records, as the shared file does):
all `MAIN` cases share one worker, as the shared plain cases shared one process; every `OWN` case (DDP, FSDP2,
DeepSpeed, an allocator setting) gets its own. A worker that dies is restarted after the case it died in, which
is recorded as `status: "crashed"` with the end of its log. Nothing starts after the deadline; a summary table
is printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

MARGIN_S = 25  # a case is not started with less time than this left


MEASURED = ("ok", "oom")


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def load_done(path: Path) -> tuple[set, bool]:
    """Ids with a record in a measurements file or the failures file beside it; whether an env line is there."""
    found = rows(path) + rows(path.with_name("failures.jsonl"))
    return {r.get("id") for r in found if "id" in r}, any("env" in r for r in found)


# --------------------------------------------------------------------------------------------- worker (CUDA)

def run_one(c: dict) -> dict:
    from . import loops
    from . import protocol as P

    start = time.perf_counter()
    P.fresh_allocator()
    try:
        if c["kind"] == "infer":
            measured = loops.run_infer(c)
        elif c["kind"] == "trainer":
            measured = loops.run_trainer(c)
        elif c.get("wrap") == "deepspeed":
            from .deepspeed_case import run_deepspeed
            measured = run_deepspeed(c)
        else:
            measured = loops.run_train(c)
        measured["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - every failure becomes a record
        oom = "out of memory" in str(exc).lower()
        measured = {"status": "oom" if oom else "error", "error": str(exc)[:400]}
        if oom:
            measured["at_oom"] = P.snapshot()
        else:
            measured["traceback"] = traceback.format_exc()[-3000:]
        del exc
    record = {**measured, "id": c["id"], "case": c, "wall": round(time.perf_counter() - start, 2)}
    P.fresh_allocator()
    return record


def worker(args) -> int:
    from . import protocol as P
    from .cases import BY_ID

    out = Path(args.out) / "measurements.jsonl"
    if args.env:
        P.append_record(out, {"env": P.env_line()})
    for cid in args.ids.split(","):
        if time.time() > args.deadline_at - MARGIN_S:
            print(f"[worker] deadline: not starting {cid}", flush=True)
            break
        print(f"[worker] start {cid}", flush=True)
        c = json.loads(json.dumps(BY_ID[cid]))
        if P.TINY:  # CPU dry run: the same code paths on small shapes
            c.update(batch=min(c["batch"], 2), seq=min(c["seq"], 128), **({"gen": min(c["gen"], 3)} if "gen" in c else {}))
        record = run_one(c)
        P.append_record(out if record["status"] in MEASURED else out.with_name("failures.jsonl"), record)
        print(f"[worker] done {cid}: {record['status']} wall {record['wall']} s", flush=True)
    return 0


# ----------------------------------------------------------------------------------------------- orchestrator

def spawn(ids: list[str], args, deadline_at: float, env_first: bool, extra_env: dict) -> int | None:
    cmd = [sys.executable, "-m", __package__ + ".run", "--worker", "--out", args.out, "--ids", ",".join(ids),
           "--deadline-at", str(deadline_at)] + (["--env"] if env_first else [])
    env = {**os.environ, **extra_env, "PYTHONUNBUFFERED": "1"}
    with open(Path(args.out) / "log.txt", "a") as log:
        try:
            return subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=max(1.0, deadline_at - time.time())).returncode
        except subprocess.TimeoutExpired:
            return None


def log_tail(args, n: int = 3000) -> str:
    path = Path(args.out) / "log.txt"
    return path.read_text()[-n:] if path.exists() else ""


def append(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def run_group(todo: list[dict], args, deadline_at: float, separate: bool) -> None:
    out = Path(args.out) / "measurements.jsonl"
    remaining = [c for c in todo]
    failures: dict = {}  # wrap -> failed cases; after two, the rest of that wrap is skipped (a broken stack)
    while remaining and time.time() < deadline_at - MARGIN_S:
        if separate and failures.get(remaining[0].get("wrap"), 0) >= 2:
            print(f"[run] skipping {remaining[0]['id']}: two earlier {remaining[0].get('wrap')} cases failed")
            remaining = remaining[1:]
            continue
        batch = remaining[:1] if separate else remaining
        done, has_env = load_done(out)
        extra = {"PYTORCH_CUDA_ALLOC_CONF": batch[0]["alloc_conf"]} if batch[0].get("alloc_conf") else {}
        rc = spawn([c["id"] for c in batch], args, deadline_at, not has_env, extra)
        done, _ = load_done(out)
        missing = [c for c in batch if c["id"] not in done]
        if missing and rc != 0:
            dead, status = missing[0], "timeout" if rc is None else "crashed"
            append(out.with_name("failures.jsonl"), {"status": status, "error": f"worker exit code {rc}", "log_tail": log_tail(args),
                                  "id": dead["id"], "case": dead, "wall": None})
            done.add(dead["id"])
        if separate and any(r.get("id") == batch[0]["id"] for r in rows(out.with_name("failures.jsonl"))):
            failures[batch[0].get("wrap")] = failures.get(batch[0].get("wrap"), 0) + 1
        if rc is None:
            break
        remaining = [c for c in remaining if c["id"] not in done]
        if not separate and rc == 0:
            break  # the worker stopped at the deadline itself


def peak(row: dict) -> dict:
    if "step2" in row:
        return row["step2"]["step"]
    return row.get("end") or row.get("at_oom") or {}


def summary(path: Path) -> str:
    lines = [f"{'id':<72} {'status':>7} {'max_alloc GB':>12} {'max_res GB':>10} {'dev_used GB':>11} {'sec':>7}"]
    for row in rows(path) + rows(path.with_name("failures.jsonl")):
        if "env" in row:
            continue
        p = peak(row)
        sec = row.get("step2", {}).get("seconds", row.get("seconds"))
        lines.append(f"{row['id']:<72} {row['status']:>7} {p.get('max_allocated', 0) / 1e9:>12.3f} "
                     f"{p.get('max_reserved', 0) / 1e9:>10.3f} {p.get('device_used', 0) / 1e9:>11.3f} "
                     f"{sec if sec is None else round(sec, 3)!s:>7}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--group", choices=("main", "own", "all"), default="all")
    ap.add_argument("--only", help="comma-separated substrings of case ids")
    ap.add_argument("--deadline", type=float, default=560.0, help="seconds from now after which nothing starts")
    ap.add_argument("--skip-done", help="a measurements.jsonl of an earlier run: its ids are not run again")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    ap.add_argument("--deadline-at", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--env", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    from .cases import MAIN, OWN, needs_own_process

    groups = {"main": [MAIN], "own": [OWN], "all": [MAIN, OWN]}[args.group]
    if args.only:
        keys = args.only.split(",")
        groups = [[c for c in g if any(k in c["id"] for k in keys)] for g in groups]
    if args.skip_done:
        earlier = {r.get("id") for r in rows(Path(args.skip_done))}
        groups = [[c for c in g if c["id"] not in earlier] for g in groups]
    if args.list:
        print("\n".join(c["id"] for g in groups for c in g))
        return 0
    Path(args.out).mkdir(parents=True, exist_ok=True)
    out = Path(args.out) / "measurements.jsonl"
    deadline_at = time.time() + args.deadline
    for group in groups:
        separate = any(needs_own_process(c) for c in group)
        done, _ = load_done(out)
        run_group([c for c in group if c["id"] not in done], args, deadline_at, separate)
    done, _ = load_done(out)
    skipped = [c["id"] for g in groups for c in g if c["id"] not in done]
    report = summary(out) + (f"\nnot run (deadline): {', '.join(skipped)}" if skipped else "")
    (Path(args.out) / "summary.txt").write_text(report + "\n")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
