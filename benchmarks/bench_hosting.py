"""The hosting benchmark (docs/hosting.md): benchmarks/bench_load.py's sessions on the calculator, planner and
compare pages (--page mix), at 10, 25 and 50 sessions, against one `streamlit run app.py` and against replicas
behind HAProxy (scripts/replicas.sh), both on 127.0.0.1 and both started here. Each level: sessions arrive over
--ramp s, change an input every ~--think s (exponential), --changes times; then the server's RSS --settle s after
they closed. Prints one table row per server and level: rerun p50 / p95, errors, RSS at the start, peak,
--settle s after, memory per session, server CPU; --json for the raw reports. Not a test.

    .venv/bin/python benchmarks/bench_hosting.py                            # both, 10/25/50, ~12 minutes
    .venv/bin/python benchmarks/bench_hosting.py --servers one --levels 10 --settle 5 --changes 2
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_load  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def start_one(log_dir: Path) -> tuple[str, tuple[int, ...], callable]:
    port = bench_load.free_port()
    proc = bench_load.start_server(port, log_dir / f"one_{port}.log")

    def stop():
        proc.terminate()
        proc.wait(timeout=30)
    return f"ws://127.0.0.1:{port}", (proc.pid,), stop


def start_replicas(replicas: int) -> tuple[str, tuple[int, ...], callable]:
    if shutil.which("haproxy") is None:
        sys.exit("the replicas need haproxy: apt-get install haproxy")
    port = bench_load.free_port()
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "replicas.sh")], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "PORT": str(port), "REPLICAS": str(replicas),
                                 "PYTHON": sys.executable})
    line = proc.stdout.readline()
    if not line.startswith("ready"):
        os.killpg(proc.pid, signal.SIGTERM)
        sys.exit(f"scripts/replicas.sh did not start: {line!r}")
    fields = dict(f.split("=", 1) for f in line.split()[2:])
    pids = (int(fields["proxy"]), *(int(r.split(":")[0]) for r in fields["replicas"].split(",")))

    def stop():
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    return f"ws://127.0.0.1:{port}", pids, stop


def run_levels(name: str, base: str, pids: tuple[int, ...], args, processes: int = 1) -> list[dict]:
    rss = lambda: sum(bench_load.rss_mb(p) for p in pids)  # noqa: E731
    idle = rss()
    # each page once in every process (leastconn spreads sessions that arrive together): the first runs pay the
    # imports, which are not what a session costs
    warm = argparse.Namespace(**{**vars(args), "sessions": 3 * processes, "changes": 1, "think": 0, "ramp": 0})
    asyncio.run(bench_load.load(base, warm, None))
    rows = []
    for level in args.levels:
        level_args = argparse.Namespace(**{**vars(args), "sessions": level})
        rnd = bench_load.one_round(base, level_args, pids)
        rnd.update(server=name, sessions=level, rss_idle_mb=idle)
        rows.append(rnd)
        print(row_text(rnd, args.settle), flush=True)
    return rows


HEADER = ("| server | sessions | reruns | errors | rerun p50 | rerun p95 | RSS start → peak | RSS {settle:g} s after "
          "| per session | server CPU |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def row_text(r: dict, settle: float) -> str:
    return (f"| {r['server']} | {r['sessions']} | {r['reruns']} | {r['errors']} | {r['rerun_p50_s'] * 1000:.0f} ms "
            f"| {r['rerun_p95_s'] * 1000:.0f} ms | {r['rss_start_mb']:.0f} → {r['rss_peak_mb']:.0f} MB "
            f"| {r['rss_settled_mb']:.0f} MB | {r['per_session_mb']:.1f} MB "
            f"| {r['server_cpu_share']:.2f} cores |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default="one,replicas", help="one, replicas, or both (comma-separated)")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[10, 25, 50])
    ap.add_argument("--page", default="mix", help="bench_load's --page (mix: calculator, planner, compare)")
    ap.add_argument("--changes", type=int, default=6)
    ap.add_argument("--think", type=float, default=3.0)
    ap.add_argument("--ramp", type=float, default=10.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--settle", type=float, default=60.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    log_dir = Path(os.environ.get("TMPDIR", "/tmp"))
    print(f"{os.cpu_count()} CPUs, load average {Path('/proc/loadavg').read_text().split()[0]} at the start; "
          f"{args.changes} changes per session, think {args.think:g} s, arrivals over {args.ramp:g} s, "
          f"page {args.page}")
    print(HEADER.format(settle=args.settle), flush=True)
    rows = []
    for name in args.servers.split(","):
        base, pids, stop = start_one(log_dir) if name == "one" else start_replicas(args.replicas)
        label = "one process" if name == "one" else f"{args.replicas} replicas + HAProxy"
        try:
            rows += run_levels(label, base, pids, args, 1 if name == "one" else args.replicas)
        finally:
            stop()
        time.sleep(2)
    print(f"load average {Path('/proc/loadavg').read_text().split()[0]} at the end")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
