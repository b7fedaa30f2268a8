"""The image, built and run (only where a Docker daemon answers; skipped with the reason otherwise — these
machines have the docker client but no daemon). With no network at all (`--network none`): Docker's own
HEALTHCHECK turns healthy; tini is PID 1 and every process runs as UID 10001; the code under /app belongs to root
and that user cannot change it; and the calculator and the Accuracy page render over Streamlit's websocket, driven
from inside the container by the load benchmark's protocol client (benchmarks/bench_load.py, fed on stdin).
Hardened as deploy/compose.yaml runs it (read-only root file system, tmpfs for /tmp and the home, no capabilities,
no new privileges, still no network): the calculator renders and its PDF report, chart included, is built with
no browser in the image; uploads are refused."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_load.py"


def _why_no_docker() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return "no docker client on PATH"
    try:
        info = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                              timeout=30)
    except subprocess.TimeoutExpired:
        return "docker info timed out"
    if info.returncode != 0:
        lines = (info.stderr or info.stdout).strip().splitlines()
        return "no Docker daemon: " + (lines[-1] if lines else f"docker info exited {info.returncode}")
    return None


NO_DOCKER = _why_no_docker()
pytestmark = pytest.mark.skipif(NO_DOCKER is not None, reason=str(NO_DOCKER))


def docker(*args: str, timeout: float = 120, stdin: str | None = None, check: bool = True):
    out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, input=stdin)
    if check and out.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out


@pytest.fixture(scope="module")
def image():
    tag = f"llm-gpu-mem-test:{uuid.uuid4().hex[:12]}"
    docker("build", "-t", tag, str(ROOT), timeout=1800)
    yield tag
    docker("rmi", "-f", tag, check=False)


@pytest.fixture(scope="module")
def container(image):
    name = f"llm-gpu-mem-test-{uuid.uuid4().hex[:12]}"
    docker("run", "-d", "--network", "none", "--name", name, image)
    try:
        deadline = time.monotonic() + 120
        probe = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4).read())"
        while docker("exec", name, "python", "-c", probe, check=False).stdout.strip() != "b'ok'":
            if time.monotonic() > deadline:
                logs = docker("logs", name, check=False)
                pytest.fail(f"the server in the container never answered /_stcore/health:\n{logs.stdout}{logs.stderr}")
            time.sleep(1)  # polling the server's start, not waiting on a result
        yield name
    finally:
        docker("rm", "-f", name, check=False)


def test_dockers_healthcheck_turns_healthy(container):
    deadline = time.monotonic() + 150  # the first check runs one interval (30 s) after the start
    while (status := docker("inspect", "-f", "{{.State.Health.Status}}", container).stdout.strip()) != "healthy":
        assert status in ("starting", "healthy"), status
        assert time.monotonic() < deadline, f"health status still {status}"
        time.sleep(2)


PROCESSES = """
import json, os
procs = []
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        cmd = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')
        uid = next(l.split()[1] for l in open(f'/proc/{pid}/status') if l.startswith('Uid:'))
    except OSError:
        continue
    procs.append({'pid': int(pid), 'cmd': [c.decode() for c in cmd if c], 'uid': int(uid)})
print(json.dumps(procs))
"""


def test_tini_is_pid_1_and_nothing_runs_as_root(container):
    procs = json.loads(docker("exec", container, "python", "-c", PROCESSES).stdout)
    by_pid = {p["pid"]: p for p in procs}
    assert by_pid[1]["cmd"][:2] == ["/usr/bin/tini", "--"]
    assert any("streamlit" in " ".join(p["cmd"]) and "app.py" in p["cmd"] for p in procs)
    assert {p["uid"] for p in procs} == {10001}
    assert docker("exec", container, "id", "-u").stdout.strip() == "10001"


READ_ONLY = """
import json, os, stat
bad = []
for d, dirs, files in os.walk('/app'):
    for path, want in [(d, 0o755)] + [(os.path.join(d, f), 0o644) for f in files]:
        st = os.stat(path)
        if st.st_uid != 0 or stat.S_IMODE(st.st_mode) != want or os.access(path, os.W_OK):
            bad.append([path, st.st_uid, oct(stat.S_IMODE(st.st_mode))])
try:
    open('/app/app.py', 'a').close()
    bad.append(['/app/app.py opened for writing'])
except PermissionError:
    pass
print(json.dumps(bad))
"""


def test_code_belongs_to_root_and_is_read_only_for_the_runtime_user(container):
    assert json.loads(docker("exec", container, "python", "-c", READ_ONLY).stdout) == []
    assert docker("exec", container, "touch", "/app/new-file", check=False).returncode != 0


def _render(container: str, *args: str) -> dict:
    out = docker("exec", "-i", container, "python", "-", "--url", "http://127.0.0.1:8501", "--think", "0",
                 "--settle", "0", "--json", *args, stdin=BENCH.read_text(), timeout=300)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    (rnd,) = report["rounds"]
    assert rnd["errors"] == 0, rnd["error_samples"]
    return rnd


def test_calculator_renders_offline_and_follows_input_changes(container):
    rnd = _render(container, "--sessions", "2", "--changes", "3")
    assert rnd["opens"] == 2 and rnd["reruns"] == 6
    for session in rnd["last"]:
        assert session["metrics"]["Total per GPU"].endswith(("GB", "GiB"))


def test_accuracy_page_renders_offline(container):
    rnd = _render(container, "--sessions", "1", "--changes", "0", "--page", "accuracy")
    metrics = rnd["last"][0]["metrics"]
    assert int(metrics["Measured cases"]) >= 100
    assert metrics["Model states"] == "exact"


# ---- hardened, as deploy/compose.yaml runs it ----------------------------------------------------------------
@pytest.fixture(scope="module")
def hardened(image):
    name = f"llm-gpu-mem-hardened-{uuid.uuid4().hex[:12]}"
    docker("run", "-d", "--network", "none", "--read-only", "--tmpfs", "/tmp", "--tmpfs",
           "/home/app:uid=10001,gid=10001", "--cap-drop", "ALL", "--security-opt", "no-new-privileges:true",
           "--name", name, image)
    try:
        deadline = time.monotonic() + 120
        probe = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4).read())"
        while docker("exec", name, "python", "-c", probe, check=False).stdout.strip() != "b'ok'":
            if time.monotonic() > deadline:
                logs = docker("logs", name, check=False)
                pytest.fail(f"the hardened container never answered /_stcore/health:\n{logs.stdout}{logs.stderr}")
            time.sleep(1)
        yield name
    finally:
        docker("rm", "-f", name, check=False)


# bench_load.py's client (fed on stdin, without its command line) asks for the PDF report as a browser does and
# reads the chart's text out of the PDF's content streams (the image has no PDF library: zlib is enough)
PDF_PROBE = """
import asyncio, json, os, re, urllib.request, zlib
from streamlit.proto.BackMsg_pb2 import BackMsg
async def report():
    async with Session("ws://127.0.0.1:8501", 120) as s:
        run = await s.open("model=qwen3-8b&mode=infer")
        msg = BackMsg()
        req = msg.backend_operation_request
        req.request_id, req.session_id = os.urandom(8).hex(), s.session_id
        req.deferred_file.file_id = run.downloads["One-page PDF report"]
        await s.ws.send(msg.SerializeToString())
        while True:
            f = ForwardMsg()
            f.ParseFromString(await s.ws.recv())
            if f.WhichOneof("type") == "backend_operation_response":
                url = f.backend_operation_response.deferred_file.url
                break
        pdf = urllib.request.urlopen("http://127.0.0.1:8501" + url, timeout=30).read()
        text = b"".join(zlib.decompress(m) for m in re.findall(rb"stream\r?\n(.*?)\r?\nendstream", pdf, re.S))
        print(json.dumps({"total": run.metrics.get(TOTAL), "pdf": pdf[:5].decode(),
                          "chart": [w for w in ("Weights", "KV cache", "80%: safe band") if w.encode() in text]}))
asyncio.run(report())
"""


def test_the_hardened_container_serves_the_calculator_and_its_pdf_report(hardened):
    client = BENCH.read_text().replace('if __name__ == "__main__":\n    main()', "") + PDF_PROBE
    out = docker("exec", "-i", hardened, "python", "-", stdin=client, timeout=300)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["total"].endswith(("GB", "GiB")) and got["pdf"] == "%PDF-"
    assert got["chart"] == ["Weights", "KV cache", "80%: safe band"]  # drawn by fpdf2: no browser in the image


def test_the_image_has_no_browser_and_refuses_uploads(hardened):
    found = docker("exec", hardened, "python", "-c", "import importlib.util as u, shutil; print(u.find_spec('kaleido'),"
                   " shutil.which('chromium'), shutil.which('chromium-browser'))").stdout.split()
    assert found == ["None", "None", "None"]
    shown = docker("exec", hardened, "streamlit", "config", "show").stdout
    assert "\nmaxUploadSize = 0\n" in shown
