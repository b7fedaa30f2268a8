"""Regenerate environment.csv from a clone of NVIDIA/Megatron-LM (run from the repository root):

    .venv/bin/python -m validation.published.megatron_ci.environment_from_git /path/to/Megatron-LM

For each row of rows.csv it walks the history of the row's golden-value file back from d98e8a64 to the commit
that last changed its memory values (`mem-max-allocated-bytes`, `mem-allocated-bytes`; later commits that only
touched other metrics keep the run that produced them), and reads that commit's date and, at it, the CI container
(docker/.ngc_version.dev), the Transformer Engine pin (uv.lock) and the test's CUBLAS_WORKSPACE_CONFIG
(ENV_VARS of its model_config.yaml; empty when unset).
"""
from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

from validation.published.megatron_ci import CSV_PATH, read_rows

HEAD = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
ENV_PATH = CSV_PATH.with_name("environment.csv")
FIELDS = ["row_id", "memory_commit", "memory_date", "container", "transformer_engine", "cublas_workspace_config"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True).stdout


def _memory_values(repo: Path, commit: str, path: str):
    try:
        j = json.loads(_git(repo, "show", f"{commit}:{path}"))
    except ValueError:
        return None
    return tuple(json.dumps(j.get(k, {}).get("values"), sort_keys=True)
                 for k in ("mem-max-allocated-bytes", "mem-allocated-bytes"))


def environment(repo: Path, row: dict) -> dict:
    path = re.search(r"Megatron-LM (\S+\.json)", row["source"]).group(1)
    log = [line.split()[0] for line in _git(repo, "log", "--format=%H", HEAD, "--", path).splitlines() if line]
    recorded, current = log[0], _memory_values(repo, log[0], path)
    for commit in log[1:]:
        if _memory_values(repo, commit, path) != current:
            break
        recorded = commit
    te = re.search(r'name = "transformer-engine"\nversion = "([^"]+)"', _git(repo, "show", f"{recorded}:uv.lock"))
    config = _git(repo, "show", f"{recorded}:{path.rsplit('/', 1)[0]}/model_config.yaml")
    cublas = re.search(r"CUBLAS_WORKSPACE_CONFIG:\s*(\S+)", config)
    return {"row_id": row["row_id"], "memory_commit": recorded[:10],
            "memory_date": _git(repo, "show", "-s", "--format=%cs", recorded).strip(),
            "container": _git(repo, "show", f"{recorded}:docker/.ngc_version.dev").strip(),
            "transformer_engine": te.group(1) if te else "",
            "cublas_workspace_config": cublas.group(1).strip("'\"") if cublas else ""}  # YAML quotes off


def main(repo: str) -> int:
    rows = [environment(Path(repo), r) for r in read_rows()]
    with ENV_PATH.open("w", newline="", encoding="utf-8") as fh:
        out = csv.DictWriter(fh, FIELDS)
        out.writeheader()
        out.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
