"""Server-side rerun time of the calculator page after a slider change, against a bare Streamlit page with the
same widgets and one go.Bar chart (the floor any page with these inputs pays). Not a test: prints the medians
and their ratio (target: main page ≤ 1.5 × bare page).

    .venv/bin/python benchmarks/bench_rerun.py [--runs 40]

Both pages run in Streamlit's AppTest (in-process script runner, no browser, no websocket), so the figures are
the Python work of one rerun: script execution, widget registration, element serialization.
"""
from __future__ import annotations

import argparse
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


def median_rerun_ms(script: Path, runs: int) -> float:
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(script), default_timeout=120)
    at.run()
    at.run()  # warm: imports, caches
    times = []
    for i in range(runs):
        slider = at.slider(key="mbs")
        slider.set_value(2 + i % 8)
        t0 = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - t0)
        assert not at.exception, at.exception
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args()
    import logging
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_page.py"
        bare.write_text(BARE)
        sys.path.insert(0, str(ROOT))
        bare_ms = median_rerun_ms(bare, args.runs)
    main_ms = median_rerun_ms(ROOT / "app.py", args.runs)
    print(f"calculator page rerun (median of {args.runs}): {main_ms:7.1f} ms")
    print(f"bare page rerun       (median of {args.runs}): {bare_ms:7.1f} ms")
    print(f"ratio: {main_ms / bare_ms:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
