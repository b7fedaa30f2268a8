"""Server load without browsers: N concurrent sessions speak Streamlit's own websocket protocol to a real
`streamlit run app.py` on 127.0.0.1, each opening a shared link and then changing one input at a time, the way the
browser does it, on the calculator, planner or compare page (--page mix: a third each). Not a test: prints rerun
latency (p50/p95), errors, server CPU per rerun and the server's RSS before, during and after the sessions
(benchmarks/bench_hosting.py runs it at 10, 25 and 50 sessions against one process and against replicas).

    .venv/bin/python benchmarks/bench_load.py                       # 50 sessions x 8 changes, ~5 s think time
    .venv/bin/python benchmarks/bench_load.py --sessions 50 --changes 8 --think 0   # every session flat out
    .venv/bin/python benchmarks/bench_load.py --url ws://127.0.0.1:8501 --sessions 1 --changes 0 --page accuracy

The protocol (Streamlit 1.67, streamlit/web/server/starlette/starlette_websocket.py and streamlit/proto/): one
websocket per session on /_stcore/stream (subprotocol "streamlit"); the client sends a BackMsg `rerun_script`
(a ClientState: the URL's query string, the page, and the widget values that changed), the server answers with
ForwardMsgs (new_session, navigation, one delta per element, ...) and ends each run with `script_finished`. A rerun's
latency is from sending `rerun_script` to its `script_finished`: the server's whole share of what a user waits for
(no browser rendering). An error is an exception element, an st.error, a missing "Total per GPU" on the calculator,
a closed socket or a rerun over --timeout. Everything is bounded: sessions x changes reruns at most, and no new
change starts after --duration seconds. Only loopback traffic.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

import websockets
from streamlit.proto.Alert_pb2 import Alert
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

ROOT = Path(__file__).resolve().parents[1]
TOTAL = "Total per GPU"  # the calculator page's headline metric

# What the sessions do: open one of a page's shared links, then change its inputs one at a time (widget key, new
# value; ("open", query) loads another link in the same session, as the compare page's "Add link" does).
LINKS = (
    "",
    "model=qwen3-8b&mode=infer&seq=8192&gen=1024",
    "model=llama-3.1-70b&zero=3&dp=8&rc=full",
    "model=mixtral-8x7b&ep=8&dp=8&zero=1",
    "model=qwen2.5-7b&ft=qlora&gpu=rtx-4090",
)
CHANGES = (("mbs", 2), ("seq", 8192), ("gpu", "a100-80gb"), ("rc", "selective"), ("mbs", 4), ("tp", 2),
           ("seq", 2048), ("unit", "GiB"))
_CMP = ("model=llama-3.1-8b", "model=llama-3.1-8b&ft=lora", "model=qwen3-8b&mode=infer&seq=8192",
        "model=llama-3.1-70b&zero=3&dp=8&rc=full", "model=qwen2.5-7b&ft=qlora&gpu=rtx-4090")
COMPARE = tuple(urlencode({"cmp": [_CMP[i], _CMP[(i + 1) % 5], _CMP[(i + 3) % 5]][:2 + i % 2]}, doseq=True)
                for i in range(5))
FLOWS = {
    "": (LINKS, CHANGES),
    "planner": (LINKS[:4], (("pgpus", 16), ("pmaxtp", 4), ("pgpus", 64), ("pmaxtp", 8), ("pgpus", 0), ("pgpus", 8))),
    "compare": (COMPARE, tuple(("open", q) for q in COMPARE[1:] + COMPARE[:1])),
}
PAGES = ("", "planner", "compare")  # --page mix: session i opens PAGES[i % 3]


# ---- one session -------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """What one script run showed: its latency, the metrics, the widgets it drew, and any errors."""
    seconds: float = 0.0
    metrics: dict[str, str] = field(default_factory=dict)
    widgets: dict[str, tuple[str, str]] = field(default_factory=dict)  # user key -> (widget id, element type)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # st.warning bodies (not errors: the page chose to warn)
    query_string: str = ""
    downloads: dict[str, str] = field(default_factory=dict)  # download button label -> deferred file id


class Session:
    """One browser tab's worth of protocol over one websocket."""

    def __init__(self, url: str, timeout: float = 60.0):
        self.url, self.timeout = url.rstrip("/") + "/_stcore/stream", timeout
        self.ws = None
        self.page_hash = ""
        self.query = ""
        self.session_id = ""  # the server's id of this session (new_session), for uploads and deferred files
        self.headers: dict[str, str] = {}  # sent with the websocket's handshake (a cookie: a sticky replica)
        self.widgets: dict[str, tuple[str, str]] = {}
        self.downloads: dict[str, str] = {}

    async def __aenter__(self) -> Session:
        self.ws = await websockets.connect(self.url, subprotocols=["streamlit"], max_size=None,
                                           open_timeout=self.timeout, additional_headers=self.headers)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.ws.close()

    async def open(self, query: str = "", page: str = "") -> Run:
        """Load the app at `/<page>?<query>`, as a browser does on its first message."""
        msg = BackMsg()
        msg.rerun_script.query_string = query
        msg.rerun_script.page_name = page
        self.query = query
        return await self._rerun(msg)

    async def change(self, key: str, value) -> Run:
        """Set one widget (by its key) to `value`, as the browser does after an interaction."""
        widget_id, kind = self.widgets[key]
        msg = BackMsg()
        client = msg.rerun_script
        # the frontend writes a bound widget's new value into the URL, and sends that URL with the rerun
        self.query = client.query_string = urlencode({**dict(parse_qsl(self.query)), key: str(value)})
        client.page_script_hash = self.page_hash
        state = client.widget_states.widgets.add()
        _set_widget_value(state, kind, value)
        state.id = widget_id
        return await self._rerun(msg)

    async def _rerun(self, msg: BackMsg) -> Run:
        run = Run()
        start = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        while True:  # a run that ends early for st.rerun() is followed by the real one
            fmsg = ForwardMsg()
            fmsg.ParseFromString(await asyncio.wait_for(self.ws.recv(), self.timeout))
            kind = fmsg.WhichOneof("type")
            if kind == "delta" and fmsg.delta.WhichOneof("type") == "new_element":
                _read_element(fmsg.delta.new_element, run)
            elif kind == "new_session":
                self.session_id = fmsg.new_session.initialize.session_id or self.session_id
            elif kind == "navigation":
                self.page_hash = fmsg.navigation.page_script_hash
            elif kind == "page_info_changed":
                self.query = run.query_string = fmsg.page_info_changed.query_string
            elif kind == "page_not_found":
                run.errors.append(f"page not found: {fmsg.page_not_found.page_name}")
            elif kind == "script_finished":
                status = fmsg.script_finished
                if status == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    continue
                if status == ForwardMsg.FINISHED_WITH_COMPILE_ERROR:
                    run.errors.append("script compile error")
                break
        run.seconds = time.perf_counter() - start
        self.widgets.update(run.widgets)
        self.downloads.update(run.downloads)
        return run


def _read_element(element, run: Run) -> None:
    kind = element.WhichOneof("type")
    body = getattr(element, kind)
    if kind == "metric":
        run.metrics[body.label] = body.body
    elif kind == "exception":
        run.errors.append(f"exception {body.type}: {body.message}")
    elif kind == "alert" and body.format == Alert.ERROR:
        run.errors.append(f"st.error: {body.body}")
    elif kind == "alert" and body.format == Alert.WARNING:
        run.warnings.append(body.body)
    elif kind == "download_button" and body.deferred_file_id:
        run.downloads[body.label] = body.deferred_file_id
    elif getattr(body, "id", "").startswith("$$ID-"):
        user_key = body.id.split("-", 2)[2]  # $$ID-<hash>-<key>
        if user_key != "None":
            run.widgets[user_key] = (body.id, kind)


def _set_widget_value(state: WidgetState, kind: str, value) -> None:
    """The value field the frontend fills for each widget type (streamlit/elements/widgets/*.py value_type)."""
    if kind == "slider":
        state.double_array_value.data.append(float(value))
    elif kind == "number_input":
        if isinstance(value, int):
            state.int_value = value
        else:
            state.double_value = float(value)
    elif kind == "checkbox":
        state.bool_value = bool(value)
    elif kind in ("selectbox", "radio", "text_input", "text_area"):
        state.string_value = str(value)
    else:
        raise ValueError(f"no known value field for a {kind} widget")


# ---- the server and its process ---------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, log_path: Path, extra: tuple[str, ...] = (), env: dict | None = None) -> subprocess.Popen:
    """`streamlit run app.py` on 127.0.0.1:port (the flags the browser tests use), with `env` added to this
    process's environment; returns once it is healthy."""
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none", *extra], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"streamlit not healthy within 90 s; see {log_path}")


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MB (10^6 bytes), from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- the load -----------------------------------------------------------------------------------------------------
@dataclass
class Results:
    open_s: list[float] = field(default_factory=list)    # first load of each session
    rerun_s: list[float] = field(default_factory=list)   # each input change
    errors: list[str] = field(default_factory=list)
    last_runs: list[tuple[str, list, Run]] = field(default_factory=list)  # (link, changes made, last run)


async def one_session(url: str, index: int, args, deadline: float, out: Results, page: str = "",
                      link: str | None = None) -> None:
    """Open a link, then make `args.changes` input changes, each after an exponentially distributed think time
    of mean `args.think` (seeded per session: sessions do not move in lockstep, and runs repeat)."""
    page = PAGES[index % len(PAGES)] if page == "mix" else page
    links, changes = FLOWS.get(page, (LINKS, CHANGES))
    link = links[index % len(links)] if link is None else link
    think = random.Random(index)
    done: list = []
    await asyncio.sleep(getattr(args, "ramp", 0.0) * index / max(args.sessions, 1))  # arrivals spread over --ramp
    try:
        async with Session(url, args.timeout) as s:
            run = await s.open(link, page)
            out.open_s.append(run.seconds)
            out.errors += [f"session {index} open: {e}" for e in run.errors + _missing_total(run, page)]
            for i in range(args.changes):
                if time.monotonic() > deadline:
                    break
                if args.think:
                    await asyncio.sleep(think.expovariate(1 / args.think))
                key, value = changes[(index + i) % len(changes)]
                run = await (s.open(value, page) if key == "open" else s.change(key, value))
                done.append((key, value))
                out.rerun_s.append(run.seconds)
                out.errors += [f"session {index} {key}={value}: {e}" for e in run.errors + _missing_total(run, page)]
            out.last_runs.append((link, done, run))
    except (OSError, asyncio.TimeoutError, websockets.WebSocketException, KeyError) as exc:
        out.errors.append(f"session {index}: {type(exc).__name__}: {exc}")


def _missing_total(run: Run, page: str) -> list[str]:
    return [f"no '{TOTAL}' metric"] if not page and TOTAL not in run.metrics else []


def pids_of(pid) -> tuple[int, ...]:
    """A server: one pid, several (replicas: their RSS and CPU are summed), or none."""
    return () if not pid else (pid,) if isinstance(pid, int) else tuple(pid)


async def load(url: str, args, server_pid=None) -> tuple[Results, list[float]]:
    """All sessions at once; samples the server's RSS (summed over its processes) every 0.25 s while they run."""
    out, samples, pids = Results(), [], pids_of(server_pid)
    deadline = time.monotonic() + args.duration
    tasks = [asyncio.create_task(one_session(url, i, args, deadline, out, args.page)) for i in range(args.sessions)]
    while not all(t.done() for t in tasks):
        if pids:
            samples.append(sum(rss_mb(p) for p in pids))
        await asyncio.wait(tasks, timeout=0.25)
    return out, samples


def pct(values: list[float], q: float) -> float:
    """The q-th percentile by nearest rank (NaN for no values)."""
    if not values:
        return float("nan")
    return sorted(values)[max(0, math.ceil(q / 100 * len(values)) - 1)]


def ms(v: float) -> str:
    return f"{v * 1000:7.0f} ms"


def one_round(base: str, args, pid=None) -> dict:
    """One load; with the server's pid(s): its CPU per run, RSS at the start, peak, closed and --settle s later,
    and the memory per session (peak over start, divided by the sessions)."""
    pids = pids_of(pid)
    rss = lambda: sum(rss_mb(p) for p in pids)  # noqa: E731
    cpu0, rss0, t0 = sum(cpu_seconds(p) for p in pids), rss() if pids else 0.0, time.perf_counter()
    out, samples = asyncio.run(load(base, args, pids))
    wall = time.perf_counter() - t0
    runs = len(out.rerun_s) + len(out.open_s)
    rnd = {"wall_s": wall, "reruns": len(out.rerun_s), "opens": len(out.open_s), "errors": len(out.errors),
           "error_samples": out.errors[:5], "throughput_per_s": runs / wall,
           "rerun_p50_s": pct(out.rerun_s, 50), "rerun_p95_s": pct(out.rerun_s, 95),
           "rerun_max_s": max(out.rerun_s, default=float("nan")),
           "open_p50_s": pct(out.open_s, 50), "open_p95_s": pct(out.open_s, 95),
           "loadavg_1min": float(Path("/proc/loadavg").read_text().split()[0]),
           "last": [{"link": link, "changes": done, "metrics": run.metrics} for link, done, run in out.last_runs]}
    if pids:
        cpu, peak = sum(cpu_seconds(p) for p in pids) - cpu0, max(samples, default=rss())
        rnd.update(server_cpu_per_run_ms=cpu / max(runs, 1) * 1000, server_cpu_share=cpu / wall, rss_start_mb=rss0,
                   rss_peak_mb=peak, rss_closed_mb=rss(), per_session_mb=(peak - rss0) / max(args.sessions, 1))
        time.sleep(args.settle)
        rnd["rss_settled_mb"] = rss()
    return rnd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--changes", type=int, default=8, help="input changes per session after the first load")
    ap.add_argument("--think", type=float, default=5.0,
                    help="mean seconds a session waits before each change (exponential; 0: flat out)")
    ap.add_argument("--ramp", type=float, default=0.0, help="seconds over which the sessions arrive (0: at once)")
    ap.add_argument("--duration", type=float, default=300.0, help="no new change starts after this many seconds")
    ap.add_argument("--timeout", type=float, default=60.0, help="a rerun slower than this is an error")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the whole load (RSS after each round)")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds to wait after the sessions close")
    ap.add_argument("--page", default="", help="url path of the page the sessions open (default: calculator; "
                                               "mix: calculator, planner and compare)")
    ap.add_argument("--url", help="an already running server (http://127.0.0.1:PORT); else one is started")
    ap.add_argument("--pid", type=int, action="append", default=[], help="with --url: a server process to measure")
    ap.add_argument("--server-arg", action="append", default=[], help="extra `streamlit run` flag (repeatable)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()

    proc = None
    if args.url:
        base = args.url.replace("http://", "ws://").rstrip("/")
        if not base.startswith(("ws://127.0.0.1:", "ws://localhost:")):
            sys.exit("--url must be a loopback address (ws:// or http://127.0.0.1:PORT)")
    else:
        port = free_port()
        proc = start_server(port, Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_load_{port}.log",
                            tuple(args.server_arg))
        base = f"ws://127.0.0.1:{port}"
    pids = (proc.pid,) if proc else tuple(args.pid)
    report: dict = {"sessions": args.sessions, "changes": args.changes, "think_s": args.think, "rounds": []}
    try:
        if pids:
            report["rss_idle_mb"] = sum(rss_mb(p) for p in pids)
            warm = argparse.Namespace(**{**vars(args), "sessions": 1, "changes": 0, "think": 0, "ramp": 0})
            asyncio.run(load(base, warm, None))  # the first run pays the imports; not measured
            report["rss_warm_mb"] = sum(rss_mb(p) for p in pids)
        for _ in range(args.rounds):
            report["rounds"].append(one_round(base, args, pids))
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
    print(json.dumps(report) if args.json else "\n".join(report_lines(report, args)))


def report_lines(report: dict, args) -> list[str]:
    out = [f"{args.sessions} sessions x {args.changes} changes, think time mean {args.think:g} s, "
           f"{'page /' + args.page if args.page else 'calculator page'}"]
    if "rss_idle_mb" in report:
        out.append(f"server RSS: idle {report['rss_idle_mb']:.0f} MB, after one warm-up session "
                   f"{report['rss_warm_mb']:.0f} MB")
    for i, r in enumerate(report["rounds"], 1):
        out += [f"round {i}: {r['reruns']} reruns + {r['opens']} first loads in {r['wall_s']:.1f} s "
                f"({r['throughput_per_s']:.1f} runs/s), errors {r['errors']}; machine load average "
                f"{r['loadavg_1min']:.1f} on {os.cpu_count()} CPUs",
                f"  rerun latency   p50 {ms(r['rerun_p50_s'])}   p95 {ms(r['rerun_p95_s'])}   max {ms(r['rerun_max_s'])}",
                f"  first load      p50 {ms(r['open_p50_s'])}   p95 {ms(r['open_p95_s'])}"]
        if "rss_peak_mb" in r:
            out += [f"  server CPU {r['server_cpu_per_run_ms']:.0f} ms per run, {r['server_cpu_share']:.2f} cores busy",
                    f"  server RSS {r['rss_start_mb']:.0f} MB at the start, peak {r['rss_peak_mb']:.0f} MB "
                    f"({r['per_session_mb']:.1f} MB per session), sessions closed {r['rss_closed_mb']:.0f} MB, "
                    f"{args.settle:g} s later {r['rss_settled_mb']:.0f} MB"]
        out += [f"  error: {e}" for e in r["error_samples"]]
    return out


if __name__ == "__main__":
    main()
