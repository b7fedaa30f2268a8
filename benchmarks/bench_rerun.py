"""Server-side rerun time of the calculator page after a slider change, against a bare Streamlit page with the
same widgets and one go.Bar chart (the floor any page with these inputs pays). Not a test: prints the medians
and their ratio (target: main page ≤ 1.5 × bare page).

    .venv/bin/python benchmarks/bench_rerun.py [--runs 60]

Both pages run in Streamlit's AppTest (in-process script runner, no browser, no websocket), so the figures are
the Python work of one rerun: script execution, widget registration, element serialization. As in a real
server, each script is compiled once (AppTest alone would recompile it on every run).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BARE = '''
import plotly.graph_objects as go
import streamlit as st

from dashboard.state import PARAMS
from dashboard.widgets import field

st.set_page_config(layout="wide")
with st.sidebar:
    for p in PARAMS:
        if p.key != "unit":
            field(p.key, {})
field("unit", {})
mbs = st.session_state["mbs"]
fig = go.Figure([go.Bar(name=n, x=["per GPU"], y=[v * mbs]) for n, v in (("weights", 16), ("grads", 16),
                                                                       ("optimizer", 64), ("activations", 26))])
fig.update_layout(barmode="stack")
st.metric("Total per GPU", f"{(16 + 16 + 64 + 26) * mbs} GB")
st.plotly_chart(fig)
'''


def _keep_bytecode_between_runs() -> None:
    """AppTest compiles the page script afresh on every run (a new ScriptCache per run); a real server compiles
    it once. Keep the bytecode, as the server does, so the figures are the rerun work a server does: otherwise a
    long script pays compile time a server never pays again. Applies to both pages alike."""
    from streamlit.runtime.scriptrunner import script_cache
    compiled: dict[str, object] = {}
    original = script_cache.ScriptCache.get_bytecode

    def get_bytecode(self, script_path: str):
        key = os.path.abspath(script_path)
        if key not in compiled:
            compiled[key] = original(self, script_path)
        return compiled[key]
    script_cache.ScriptCache.get_bytecode = get_bytecode


def _session(script: Path):
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(script), default_timeout=120)
    at.run()
    at.run()  # warm: imports, caches
    return at


def _rerun_s(at, value: int) -> float:
    at.slider(key="mbs").set_value(value)
    t0 = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - t0
    assert not at.exception, at.exception
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=60)
    args = ap.parse_args()
    import logging
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    os.chdir(ROOT)  # read .streamlit/config.toml like `streamlit run` from the repo root
    _keep_bytecode_between_runs()
    with tempfile.TemporaryDirectory() as tmp:
        bare_script = Path(tmp) / "bare_page.py"
        bare_script.write_text(BARE)
        bare, page = _session(bare_script), _session(ROOT / "app.py")
        # Interleaved, so both pages see the same machine load (this box has 2 shared cores).
        bare_t, page_t = [], []
        for i in range(args.runs):
            bare_t.append(_rerun_s(bare, 2 + i % 8))
            page_t.append(_rerun_s(page, 2 + i % 8))
    main_ms, bare_ms = statistics.median(page_t) * 1000, statistics.median(bare_t) * 1000
    print(f"calculator page rerun (median of {args.runs}): {main_ms:7.1f} ms")
    print(f"bare page rerun       (median of {args.runs}): {bare_ms:7.1f} ms")
    print(f"ratio: {main_ms / bare_ms:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
