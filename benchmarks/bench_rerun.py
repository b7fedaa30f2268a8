"""Server-side rerun time of the calculator page after one slider change, against bare Streamlit (not a test:
prints figures). Target: calculator page ≤ 1.3 × the same-widget bare page.

    .venv/bin/python benchmarks/bench_rerun.py [--runs 40]

Three pages, each run in Streamlit's AppTest (the in-process script runner: script execution, widget
registration, element serialization; no browser, no websocket):
- calculator: `app.py`, the page people open;
- same-widget bare page: one URL-bound widget per input of the calculator (every URL key in
  dashboard.inputs.state.PARAMS, of the kind the calculator uses for it: number_input, selectbox, radio, checkbox,
  slider, text_input, text_area), drawn with plain `st` calls in the sidebar, one stacked go.Bar figure with as
  many traces as the calculator's chart and the same number of st.metric. This is Streamlit's own floor for a
  page with these inputs; it uses none of our widget code;
- floor page: ../shared/bench/bare_floor_app.py (20 bound sliders, an 8-trace stacked bar, 5 metrics).
As in a real server each script is compiled once (AppTest alone would recompile it on every run), and the
three pages are interleaved so they see the same load on this shared 2-core box.
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
FLOOR = Path(os.environ.get("BARE_FLOOR_APP", ROOT.parent.parent / "shared" / "bench" / "bare_floor_app.py"))
if not FLOOR.exists():
    FLOOR = Path("/work/shared/bench/bare_floor_app.py")

# The bare page. Only data comes from the project (keys, kinds, defaults, options); the widgets are plain st calls.
BARE = '''
import plotly.graph_objects as go
import streamlit as st

INPUTS = {inputs!r}   # (key, widget kind, default, options or (lo, hi))
TRACES, METRICS = {traces}, {metrics}

st.set_page_config(layout="wide")
values = {{}}
with st.sidebar:
    for key, kind, default, extra in INPUTS:
        kw = dict(key=key, bind="query-params")
        if kind == "checkbox":
            values[key] = st.checkbox(key, value=default, **kw)
        elif kind == "selectbox":
            values[key] = st.selectbox(key, extra, index=extra.index(default) if default in extra else 0, **kw)
        elif kind == "radio":
            values[key] = st.radio(key, extra, index=extra.index(default), horizontal=True, **kw)
        elif kind == "text_area":
            values[key] = st.text_area(key, value=default, **kw)
        elif kind == "text_input":
            values[key] = st.text_input(key, value=default, **kw)
        elif kind == "slider":
            values[key] = st.slider(key, min_value=extra[0], max_value=extra[1], value=default, **kw)
        else:
            values[key] = st.number_input(key, min_value=extra[0], max_value=extra[1], value=default, **kw)
mbs = values["mbs"]
fig = go.Figure([go.Bar(name=f"c{{i}}", x=["per GPU"], y=[(i + 1) * mbs]) for i in range(TRACES)])
fig.update_layout(barmode="stack")
st.plotly_chart(fig)
cols = st.columns(METRICS)
for i, c in enumerate(cols):
    c.metric(f"m{{i}}", f"{{(i + 1) * mbs}} GB")
'''


def bare_inputs() -> list[tuple]:
    """One (key, kind, default, extra) per URL key of the calculator, with the widget kind the calculator draws."""
    from dashboard.inputs.state import PARAMS, options
    from dashboard.inputs.widgets import RADIOS, SLIDERS, TEXT_AREAS
    out = []
    for p in PARAMS:
        if p.kind == "bool":
            out.append((p.key, "checkbox", bool(p.default), None))
        elif p.kind == "choice":
            out.append((p.key, "radio" if p.key in RADIOS else "selectbox", p.default, list(options(p.key))))
        elif p.kind == "text":
            out.append((p.key, "text_area" if p.key in TEXT_AREAS else "text_input", p.default, None))
        else:
            cast = int if p.kind == "int" else float
            out.append((p.key, "slider" if p.key in SLIDERS else "number_input", p.default,
                        (cast(p.lo), cast(p.hi))))
    return out


def bare_page_source(traces: int, metrics: int) -> str:
    """The same-widget bare page's script."""
    return BARE.format(inputs=bare_inputs(), traces=traces, metrics=metrics)


def _keep_bytecode_between_runs() -> None:
    """AppTest compiles the page script afresh on every run; a real server compiles it once. Keep the bytecode, as
    the server does (applies to every page alike)."""
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


def _rerun_s(at, key: str, value: int) -> float:
    at.slider(key=key).set_value(value)
    t0 = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - t0
    assert not at.exception, at.exception
    return elapsed


def page_shape(at) -> tuple[dict, int, int]:
    """(bound widgets drawn by kind, chart traces, metrics) of a page after a run."""
    import json
    kinds: dict[str, int] = {}
    counts = {"metric": 0}
    traces = 0

    def walk(node):
        nonlocal traces
        for child in (node.children.values() if isinstance(getattr(node, "children", None), dict) else ()):
            walk(child)
        t = getattr(node, "type", None)
        if t in ("number_input", "selectbox", "radio", "checkbox", "slider", "text_input", "text_area"):
            kinds[t] = kinds.get(t, 0) + 1
        elif t == "metric":
            counts["metric"] += 1
        elif t == "plotly_chart":
            traces = len(json.loads(node.proto.spec)["data"])
    walk(at._tree)
    return kinds, traces, counts["metric"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args()
    import logging
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    os.chdir(ROOT)  # read .streamlit/config.toml like `streamlit run` from the repo root
    _keep_bytecode_between_runs()
    page = _session(ROOT / "app.py")
    drawn, traces, metrics = page_shape(page)
    with tempfile.TemporaryDirectory() as tmp:
        bare_script = Path(tmp) / "bare_page.py"
        bare_script.write_text(bare_page_source(traces, metrics))
        bare, floor = _session(bare_script), _session(FLOOR)
        bare_kinds, _, _ = page_shape(bare)
        times: dict[str, list[float]] = {"calculator": [], "bare": [], "floor": []}
        for i in range(args.runs):  # interleaved: the same machine load for all three
            times["bare"].append(_rerun_s(bare, "mbs", 2 + i % 8))
            times["calculator"].append(_rerun_s(page, "mbs", 2 + i % 8))
            times["floor"].append(_rerun_s(floor, "w0", 2 + i % 8))
    ms = {k: statistics.median(v) * 1000 for k, v in times.items()}
    print(f"calculator page: {sum(drawn.values())} bound widgets drawn at once {dict(sorted(drawn.items()))}, "
          f"{traces} chart traces, {metrics} metrics")
    print(f"same-widget bare page: {sum(bare_kinds.values())} bound widgets {dict(sorted(bare_kinds.items()))} "
          f"(one per URL key), {traces} traces, {metrics} metrics")
    print(f"rerun after a slider change, median of {args.runs}:")
    print(f"  calculator page        {ms['calculator']:7.1f} ms")
    print(f"  same-widget bare page  {ms['bare']:7.1f} ms")
    print(f"  bare_floor_app.py      {ms['floor']:7.1f} ms")
    print(f"calculator / same-widget bare: {ms['calculator'] / ms['bare']:.2f}x (target <= 1.3x)")
    print(f"calculator / bare floor:       {ms['calculator'] / ms['floor']:.2f}x")


if __name__ == "__main__":
    main()
