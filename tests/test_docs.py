"""Every command the README and docs/ show runs as shown (issue 20).

- Each line of a ```bash block exits 0; the ```text block right after it, if any, is in what it printed: each of
  its lines, in order, with "..." standing for lines left out.
- Each `python -m ...` command written inline in the prose exits 0 too.
- `bash scripts/run_app.sh`, as shown (with PORT=..., with more streamlit flags), starts the app: its health
  endpoint answers "ok". `bash scripts/test.sh` is the command running this test, so CI runs it; it is not run
  again from here.
A Hub id in a command is fetched from the suite's fake Hub on 127.0.0.1 (tests/hub_server.py), never the network.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hub_server import hub_root, hub_server  # noqa: F401  (fixtures, used by name)

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)
INLINE = re.compile(r"(?<!`)`((?:\.venv/bin/)?python3? -m [^`]+|(?:PORT=\d+ )?bash scripts/[^`]+)`(?!`)")
THE_CLI = "python -m calculator"  # the command line's name in prose; its sub-commands are shown in full
THE_TEST_COMMAND = "bash scripts/test.sh"


def _commands(path: Path) -> list[tuple[str, list[str] | None, str]]:
    """(command, expected output lines or None, where) for every command the file shows."""
    text = path.read_text()
    out = []
    blocks = list(FENCE.finditer(text))
    for i, block in enumerate(blocks):
        if block.group(1) != "bash":
            continue
        expected = None
        if i + 1 < len(blocks) and blocks[i + 1].group(1) == "text" and \
                not text[block.end():blocks[i + 1].start()].strip():
            expected = blocks[i + 1].group(2).rstrip("\n").split("\n")
        lines = [ln.strip() for ln in block.group(2).replace("\\\n", " ").split("\n") if ln.strip()]
        line_no = text[:block.start()].count("\n") + 2
        for ln in lines:
            out.append((ln, expected if len(lines) == 1 else None, f"{path.name}:{line_no}"))
    for m in INLINE.finditer(FENCE.sub("", text)):
        if m.group(1) != THE_CLI:
            out.append((m.group(1), None, f"{path.name} (inline)"))
    return out


ALL = [c for p in DOCS for c in _commands(p)]
APP = [c for c in ALL if "scripts/run_app.sh" in c[0]]
CLI = [c for c in ALL if "scripts/" not in c[0]]


def test_the_docs_show_commands_and_the_readme_its_two():
    shown = [c[0] for c in ALL]
    assert "bash scripts/run_app.sh" in shown and THE_TEST_COMMAND in shown
    assert "PORT=8600 bash scripts/run_app.sh" in shown  # how to change the port
    assert len(CLI) >= 20 and len(APP) >= 3


def _python(command: str) -> str:
    return re.sub(r"^(\.venv/bin/)?python3? ", shlex.quote(sys.executable) + " ", command)


def _run_shown(command: str, endpoint: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_ENDPOINT": endpoint, "LLM_MEM_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("HF_TOKEN", None)
    return subprocess.run(_python(command), shell=True, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240, executable="/bin/bash")


@pytest.fixture(scope="module")
def shown_runs(request, hub_server, tmp_path_factory):  # noqa: F811
    """{case id: future of its command's run} for the test_a_command_shown_runs cases this session runs, started
    two at a time (in their order) when the first of them asks: each command is an interpreter of its own, mostly
    import time, so the next one runs on the other core while a case waits for and checks its own (~32 s -> ~20 s).
    Each has its own empty cache directory, as each case's tmp_path was."""
    cases = [item for item in request.session.items
             if item.parent is request.node and getattr(item, "originalname", "") == "test_a_command_shown_runs"]
    with ThreadPoolExecutor(2) as pool:
        yield {item.callspec.id: pool.submit(_run_shown, item.callspec.params["command"], hub_server.url,
                                             tmp_path_factory.mktemp("cache"))
               for item in cases}
        pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("command,expected,where", CLI, ids=[f"{w}: {c[:60]}" for c, _, w in CLI])
def test_a_command_shown_runs(command, expected, where, shown_runs, request):
    r = shown_runs[request.node.callspec.id].result()
    assert r.returncode == 0, f"{where}: `{command}` exited {r.returncode}: {r.stderr[-1500:]}"
    if expected:
        printed = [ln.rstrip() for ln in r.stdout.split("\n")]
        at = 0
        for want in (ln.rstrip() for ln in expected):
            if want == "...":
                continue
            assert want in printed[at:], f"{where}: `{command}` no longer prints\n{want}\nafter line {at}:\n" \
                                          + "\n".join(printed[:40])
            at = printed.index(want, at) + 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The command as each test runs it -> (health answer, what went wrong): "PORT=8600 bash scripts/run_app.sh" runs as
# "bash scripts/run_app.sh" with PORT set to a free port, exactly what the plain command's test runs, so the second
# of the two reads the first one's answer instead of starting the same process again (~8 s). Either runs it alone.
_STARTED: dict[str, tuple[str, str]] = {}


@pytest.mark.parametrize("command", sorted({c for c, _, _ in APP}))
def test_the_app_command_starts_the_app(command):
    command = re.sub(r"PORT=\d+ ", "", command)
    if command not in _STARTED:
        _STARTED[command] = _start_and_ask_health(command)
    answer, failure = _STARTED[command]
    assert answer == "ok", f"`{command}` did not serve on its port: {failure}"


def _start_and_ask_health(command: str) -> tuple[str, str]:
    """Run `command` with PORT set to a free port until its health endpoint answers; (answer, failure detail)."""
    port = _free_port()
    env = {**os.environ, "PORT": str(port)}
    proc = subprocess.Popen(command, shell=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True, executable="/bin/bash")
    try:
        deadline, answer = time.monotonic() + 180, ""
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    answer = r.read().decode()
                    break
            except OSError:
                time.sleep(0.5)
        return answer, f"port {port}: " + (proc.stderr.read()[-1500:] if proc.poll() is not None else "timeout")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
