"""Several replicas behind HAProxy (scripts/replicas.sh with the shipped deploy/haproxy.cfg; deploy/compose.yaml
runs the same configuration in containers), on 127.0.0.1: sessions spread over both replicas and each session's
reruns are right; a browser's cookie pins every later request to its replica (the PDF report, generated in the
session's process, downloads through the proxy); the compose file and the proxy's configuration are valid. The
live tests need Debian's haproxy (scripts/test.sh installs it) and skip without it; the compose file is checked with
`docker compose config` or `docker-compose config` where one is installed."""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[1]))
import st_client  # noqa: E402
from st_client import Session, bench_load, run_async  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HAPROXY = shutil.which("haproxy")
needs_haproxy = pytest.mark.skipif(HAPROXY is None, reason="no haproxy (apt-get install haproxy)")


@pytest.fixture(scope="module")
def replicas():
    port = bench_load.free_port()
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "replicas.sh")], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, env={**os.environ, "PORT": str(port), "REPLICAS": "2", "PYTHON": sys.executable},
                            start_new_session=True)
    line = proc.stdout.readline()  # "ready PORT proxy=PID replicas=PID:PORT,PID:PORT stats=SOCKET"
    if not line.startswith("ready"):
        proc.kill()
        pytest.fail(f"scripts/replicas.sh did not start: {line!r}")
    fields = dict(f.split("=", 1) for f in line.split()[2:])
    info = {"port": port, "proxy": int(fields["proxy"]), "stats": fields["stats"],
            "replicas": [tuple(map(int, r.split(":"))) for r in fields["replicas"].split(",")]}
    # a replica whose first health checks failed (still starting) stays DOWN in HAProxy until `rise` checks pass
    # (2 × inter 2 s), though it already answers: wait until the proxy itself counts both UP
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        servers = {n: r for n, r in stats(info["stats"]).items() if n.startswith("app")}
        if len(servers) == 2 and all(r["status"] == "UP" for r in servers.values()):
            break
        time.sleep(0.5)
    yield info
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def stats(sock_path: str) -> dict[str, dict[str, str]]:
    """HAProxy's `show stat` by server name (its CSV over the stats socket)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sock_path)
        s.sendall(b"show stat\n")
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    lines = raw.decode().lstrip("# ").splitlines()
    head = lines[0].split(",")
    rows = [dict(zip(head, ln.split(","))) for ln in lines[1:] if ln]
    return {r["svname"]: r for r in rows if r["pxname"] == "replicas"}


@needs_haproxy
def test_sessions_spread_over_the_replicas_and_rerun_right(replicas):
    url = f"ws://127.0.0.1:{replicas['port']}"

    async def go():
        sessions = [Session(url, timeout=120) for _ in range(6)]
        runs = []
        for s in sessions:  # one after the other: leastconn alternates between the two replicas
            await s.__aenter__()
            runs.append(await s.open(bench_load.LINKS[1]))
        runs += await asyncio.gather(*(s.change("mbs", 2) for s in sessions))
        for s in sessions:
            await s.__aexit__()
        return runs
    runs = run_async(go())
    assert all(not r.errors and r.metrics[bench_load.TOTAL] for r in runs)
    assert len({r.metrics[bench_load.TOTAL] for r in runs[6:]}) == 1  # the same inputs, the same total
    totals = {name: int(row["stot"]) for name, row in stats(replicas["stats"]).items() if name.startswith("app")}
    assert set(totals) == {"app1", "app2"} and all(n >= 3 for n in totals.values()), totals


@needs_haproxy
def test_a_browsers_cookie_keeps_its_requests_on_its_replica(replicas):
    port = replicas["port"]
    status, _, headers = st_client.http_get(port, "/")
    cookie = headers.get("set-cookie", "").split(";")[0]
    assert status == 200 and re.fullmatch(r"LLM_MEM_REPLICA=app[12]", cookie), headers
    pinned = cookie.split("=")[1]

    async def go():
        s = Session(f"ws://127.0.0.1:{port}", timeout=120)
        s.headers = {"Cookie": cookie}
        await s.__aenter__()
        run = await s.open("model=qwen3-8b&mode=infer")
        paths = [await s.download_url("One-page PDF report") for _ in range(3)]
        bodies = [await asyncio.to_thread(st_client.http_get, port, p, cookie) for p in paths]
        await s.__aexit__()
        return run, bodies
    before = {n: int(r["stot"]) for n, r in stats(replicas["stats"]).items() if n.startswith("app")}
    run, bodies = run_async(go())
    after = {n: int(r["stot"]) for n, r in stats(replicas["stats"]).items() if n.startswith("app")}
    assert not run.errors
    assert all(status == 200 and body.startswith(b"%PDF-") for status, body, _ in bodies)  # from the session's own
    other = "app2" if pinned == "app1" else "app1"                                          # process, every time
    assert after[other] == before[other] and after[pinned] > before[pinned]


def test_the_proxy_configuration_is_valid():
    text = (ROOT / "deploy" / "haproxy.cfg").read_text()
    assert "cookie LLM_MEM_REPLICA insert" in text and "balance leastconn" in text and "timeout tunnel" in text
    if HAPROXY is None:
        pytest.skip("no haproxy to check the file with")
    # haproxy -c resolves the server names: point them at 127.0.0.1 as scripts/replicas.sh does
    local = text.replace("app1:8501", "127.0.0.1:8601").replace("app2:8501", "127.0.0.1:8602")
    out = subprocess.run([HAPROXY, "-c", "-f", "/dev/stdin"], input=local, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_compose_file_runs_two_hardened_replicas_behind_the_proxy():
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"app1", "app2", "proxy"}
    for name in ("app1", "app2"):
        app = services[name]
        assert app["build"] == ".." and app["read_only"] is True and app["cap_drop"] == ["ALL"]
        assert app["environment"]["LLM_MEM_LEND_SERVER_TOKEN"] == "${LLM_MEM_LEND_SERVER_TOKEN:-0}"
    proxy = services["proxy"]
    assert proxy["volumes"] == ["./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro"]
    assert {s: c["condition"] for s, c in proxy["depends_on"].items()} == {"app1": "service_healthy",
                                                                            "app2": "service_healthy"}
    servers = re.findall(r"^\s*server (\S+) (\S+)", (ROOT / "deploy" / "haproxy.cfg").read_text(), re.M)
    assert servers == [("app1", "app1:8501"), ("app2", "app2:8501")]  # the compose services, on the image's port


def _compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


@pytest.mark.skipif(_compose_command() is None, reason="neither `docker compose` nor `docker-compose` is installed")
def test_docker_compose_accepts_the_file():
    out = subprocess.run([*_compose_command(), "-f", str(ROOT / "deploy" / "compose.yaml"), "config", "-q"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "HF_TOKEN": ""})
    assert out.returncode == 0, out.stdout + out.stderr
