"""Why the Hub client keeps its own HTTP layer (docs/architecture.md, "The Hub client"): a deadline per call.

Against the test suite's fake Hub on 127.0.0.1 (tests/hub_server.py), a response dripped one byte every 0.25 s:
huggingface_hub's `HfApi.model_info(timeout=1)` (httpx: the timeout bounds each read, not the call) against
calculator's `fetch_model(timeout=1)` (calculator/model/hub/http.py: one deadline shared by every request of a fetch).
Prints the seconds each took. Not a test.

    .venv/bin/python benchmarks/bench_hub_deadline.py
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def _timed(call) -> tuple[float, str]:
    start = time.monotonic()
    try:
        call()
        outcome = "returned"
    except Exception as exc:  # noqa: BLE001 - what each client ends with is the point
        outcome = type(exc).__name__
    return time.monotonic() - start, outcome


def main() -> int:
    from hub_repos import DRIP_HEADERS_REPO, build_hub_tree
    from hub_server import HubServer

    os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="bench-hf-home-")
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    from huggingface_hub import HfApi, __version__

    from calculator.model.hub.client import fetch_model
    root = Path(tempfile.mkdtemp(prefix="bench-hub-"))
    build_hub_tree(root)
    server = HubServer(root)
    try:
        bare = _timed(lambda: HfApi(endpoint=server.url).model_info(DRIP_HEADERS_REPO, timeout=1.0))
        ours = _timed(lambda: fetch_model(DRIP_HEADERS_REPO, endpoint=server.url, timeout=1.0, use_cache=False))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print("a Hub response dripped one byte every 0.25 s, timeout 1 s:")
    print(f"  huggingface_hub {__version__} HfApi.model_info   {bare[0]:5.1f} s  ({bare[1]})")
    print(f"  calculator fetch_model             {ours[0]:5.1f} s  ({ours[1]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
