"""The load benchmark's protocol client (benchmarks/bench_load.py) against a real `streamlit run app.py` on
127.0.0.1: concurrent sessions open shared links and change inputs over Streamlit's websocket protocol, and every
rerun shows the engine's total for exactly those inputs; the load loop is bounded and counts what it did."""
from __future__ import annotations

import argparse
import asyncio
from concurrent.futures import ThreadPoolExecutor
import sys
from pathlib import Path
from urllib.parse import parse_qsl

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_load  # noqa: E402
from calculator.core.units import format_bytes  # noqa: E402
from dashboard.inputs import state  # noqa: E402

# (shared link, input changes made one at a time): widgets that are enabled in each mode
FLOWS = [
    ("", [("mbs", 2), ("seq", 8192), ("gpu", "a100-80gb"), ("rc", "selective"), ("tp", 2)]),
    ("model=qwen3-8b&mode=infer&seq=8192&gen=1024", [("mbs", 4), ("gen", 2048), ("kvdt", "fp8"), ("unit", "GiB")]),
    ("model=llama-3.1-70b&zero=3&dp=8&rc=full", [("zero", "2"), ("seq", 2048), ("dp", 16)]),
    ("model=mixtral-8x7b&ep=8&dp=8&zero=1", [("ep", 4), ("mbs", 2)]),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = bench_load.free_port()
    proc = bench_load.start_server(port, tmp_path_factory.mktemp("server") / "streamlit.log")
    yield f"ws://127.0.0.1:{port}", proc.pid
    proc.terminate()
    proc.wait(timeout=30)



def run_async(coro):
    """asyncio.run in a thread of its own: Playwright's sync API (tests/e2e) leaves an event loop running in the
    main thread, where asyncio.run refuses to start."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()

def engine_total(link: str, changes) -> str:
    """What the page must show: the engine's total for the link's values with the changes applied."""
    values = state.current_values({}, state.check_query_params(dict(parse_qsl(link))).values)
    values.update(changes)
    return format_bytes(state.compute(values).estimate.total_bytes, values["unit"])


async def _drive(url: str, link: str, changes) -> list[bench_load.Run]:
    async with bench_load.Session(url, timeout=120) as session:
        runs = [await session.open(link)]
        for key, value in changes:
            runs.append(await session.change(key, value))
    return runs


def test_concurrent_sessions_rerun_with_the_engines_total(server):
    url, _ = server

    async def all_flows():
        return await asyncio.gather(*(_drive(url, link, changes) for link, changes in FLOWS))
    for (link, changes), runs in zip(FLOWS, run_async(all_flows())):
        assert len(runs) == len(changes) + 1
        for i, run in enumerate(runs):
            assert run.errors == [], (link, changes[:i], run.errors)
            assert run.metrics[bench_load.TOTAL] == engine_total(link, changes[:i]), (link, changes[:i])
            assert run.seconds > 0
        assert "mbs" in runs[0].widgets and runs[0].widgets["mbs"][1] == "slider"
        assert runs[0].query_string.endswith("v=1")  # the page stamps the link format into the URL


def test_every_page_renders_over_the_websocket(server):
    url, _ = server

    async def page(name: str) -> bench_load.Run:
        async with bench_load.Session(url, timeout=120) as session:
            return await session.open("", name)
    accuracy = run_async(page("accuracy"))
    assert accuracy.errors == [] and int(accuracy.metrics["Measured cases"]) >= 100
    for name in ("planner", "compare", "formulas", "about"):
        assert run_async(page(name)).errors == [], name
    assert run_async(page("no-such-page")).errors  # the client does notice a page that is not there


def _args(**kw) -> argparse.Namespace:
    base = dict(sessions=3, changes=2, think=0.0, duration=60.0, timeout=120.0, page="")
    return argparse.Namespace(**{**base, **kw})


def test_load_counts_reruns_and_errors_and_samples_the_server(server):
    url, pid = server
    out, samples = run_async(bench_load.load(url, _args(), pid))
    assert out.errors == []
    assert len(out.open_s) == 3 and len(out.rerun_s) == 6
    assert samples and all(50 < mb < 4000 for mb in samples)  # the server's RSS, in MB
    assert len(out.last_runs) == 3 and all(run.metrics[bench_load.TOTAL] for _, _, run in out.last_runs)


def test_load_stops_by_itself_at_the_deadline(server):
    url, _ = server
    out, _ = run_async(bench_load.load(url, _args(changes=1000, duration=0.0), None))
    assert len(out.open_s) == 3 and out.rerun_s == []  # past the deadline no change starts


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert bench_load.pct(values, 50) == 50 and bench_load.pct(values, 95) == 95
    assert bench_load.pct([3.0, 1.0, 2.0], 50) == 2 and bench_load.pct([7.0], 95) == 7
