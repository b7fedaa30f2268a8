"""The dashboard's main page (app.py) under Streamlit's AppTest, for the tests/dashboard/test_app_*.py specifications: run it
from a link, read its headline metrics, breakdown table and chart, and check that they are the engine's numbers.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from calculator import estimate
from calculator.model.presets import load_model
from calculator.core.units import format_bytes
from calculator.core.workload import Workload
from tests.html_read import breakdown

APP = Path(__file__).resolve().parents[1] / "app.py"
GPU = "h100-sxm"  # the page's default GPU
LLAMA = load_model("llama-3.1-8b").spec  # the page's default model


def run(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def table_bytes(at: AppTest) -> list[int]:
    """The breakdown table's bytes per term; its last row is the total (checked against the terms' sum)."""
    table = breakdown(at)
    rows = [r["Bytes"] for r in table]
    assert table[-1]["Component"] == "Total" and rows[-1] == sum(rows[:-1])
    return rows[:-1]


def plotly_array(v):
    """A trace's values as a list: Plotly's JSON ships numeric arrays as base64 `bdata` with their dtype."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), v["dtype"]).tolist()
    return v


def chart(at: AppTest) -> dict:
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    return {"x": plotly_array(spec["data"][0]["x"]),
            "traces": {t["name"]: plotly_array(t["y"]) for t in spec["data"]}, "layout": spec["layout"]}


def assert_shows(at: AppTest, expected, unit: str = "GB") -> None:
    """The page's headline and every table row are the engine's numbers for these inputs."""
    m = metrics(at)
    assert m["Total per GPU"] == format_bytes(expected.total_bytes, unit)
    assert m["Peak allocated"] == format_bytes(expected.peak_allocated_bytes, unit)
    assert table_bytes(at) == [t.bytes for t in expected.terms]


BASE = estimate(LLAMA, Workload(gpu=GPU))
