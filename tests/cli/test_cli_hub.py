"""`python -m calculator estimate --model org/name` against a real Hub-like HTTP server on 127.0.0.1."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from hub_repos import GATED_REPO, GATED_TOKEN, PRIVATE_REPO, PRIVATE_TOKEN, QWEN3_8B, QWEN3_8B_PARAMETERS  # noqa: E402
from hub_server import HubServer, hub_root, hub_server, hub_url  # noqa: E402,F401  (fixtures are used by name)

ROOT = Path(__file__).resolve().parents[2]


def cli(args, endpoint, cache_dir, token=None):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN",)}
    env.update(HF_ENDPOINT=endpoint, LLM_MEM_CACHE_DIR=str(cache_dir))
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "calculator", "estimate", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=60)


def test_hub_model_by_id(hub_url, tmp_path):
    proc = cli(["--model", QWEN3_8B, "--mode", "infer", "--seq", "8192", "--json"], hub_url, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["parameters"] == QWEN3_8B_PARAMETERS  # architecture-derived count equals the checkpoint's
    assert out["model_source"] == {"origin": "hub", "label": QWEN3_8B, "checkpoint_parameters": QWEN3_8B_PARAMETERS,
                                   "warnings": []}
    assert out["components"]["kv_cache"] == 8192 * 36 * 4096  # head_dim 128, 8 kv heads, bf16


def test_hub_model_works_offline_from_the_cache(hub_root, tmp_path):
    server = HubServer(hub_root)
    assert cli(["--model", QWEN3_8B, "--json"], server.url, tmp_path).returncode == 0
    server.stop()  # the same endpoint now refuses connections
    proc = cli(["--model", QWEN3_8B, "--json"], server.url, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert any(w.startswith("offline: using cached config") for w in json.loads(proc.stdout)["model_source"]["warnings"])


def test_unknown_model_is_one_clear_line(hub_url, tmp_path):
    proc = cli(["--model", "nobody/no-such-model"], hub_url, tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: model: ") and "was not found" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_gated_model_needs_a_token_which_never_appears_in_output(hub_url, tmp_path):
    denied = cli(["--model", GATED_REPO], hub_url, tmp_path)
    assert denied.returncode == 2 and "HF_TOKEN" in denied.stderr
    ok = cli(["--model", GATED_REPO, "--json"], hub_url, tmp_path, token=GATED_TOKEN)
    assert ok.returncode == 0, ok.stderr
    assert GATED_TOKEN not in ok.stdout + ok.stderr
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert GATED_TOKEN not in f.read_text(errors="ignore")


def test_no_network_without_cache(tmp_path):
    proc = cli(["--model", QWEN3_8B], "http://127.0.0.1:9", tmp_path)
    assert proc.returncode == 2 and "cannot reach" in proc.stderr and "Traceback" not in proc.stderr


def test_a_private_model_cached_offline_is_served_only_with_its_own_token(hub_root, tmp_path):
    server = HubServer(hub_root)
    assert cli(["--model", PRIVATE_REPO, "--json"], server.url, tmp_path, token=PRIVATE_TOKEN).returncode == 0
    server.stop()  # offline: only the disk cache could answer
    for token in (None, GATED_TOKEN):
        proc = cli(["--model", PRIVATE_REPO, "--json"], server.url, tmp_path, token=token)
        assert proc.returncode == 2 and proc.stdout == "" and "no cached copy" in proc.stderr, proc.stderr
    proc = cli(["--model", PRIVATE_REPO, "--json"], server.url, tmp_path, token=PRIVATE_TOKEN)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model_source"]["warnings"][0].startswith("offline: using cached config")

