"""One link must not exhaust the server (issue 12): `/?model=config&cfg=<a config with 10^9 layers>` grew the
server from 216 MB to 4.16 GB in 125 s. Now the pasted config is refused by its bounds before any per-layer work:
in well under a second, with a few MB at most allocated, and the page says which field to change."""
from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from calculator.presets import load_model
from dashboard import state
from dashboard.safe_text import plain

APP = Path(__file__).resolve().parents[1] / "app.py"
HUGE = [{"num_hidden_layers": 1_000_000_000}, {"num_hidden_layers": 2**31}, {"hidden_size": 10**12},
        {"vocab_size": 10**15}, {"num_local_experts": 10**9, "model_type": "mixtral", "num_experts_per_tok": 2}]


def link(**fields) -> dict[str, str]:
    return {"model": "config", "cfg": json.dumps({**load_model("llama-3.1-8b").raw, **fields})}


@pytest.mark.parametrize("fields", HUGE, ids=lambda f: next(iter(f)))
def test_a_huge_config_in_a_link_is_refused_at_once_without_memory(fields):
    query = link(**fields)
    tracemalloc.start()
    start = time.perf_counter()
    values = {**state.DEFAULTS, **state.check_query_params(query).values}
    with pytest.raises(state.InputProblems) as refused:
        state.compute(values)
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert seconds < 1 and peak < 10 * 2**20, (seconds, peak)
    problem = refused.value.problems[0]
    assert problem.key == "cfg" and problem.message.startswith(tuple(fields))


def test_the_page_shows_the_refusal_and_no_numbers():
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in link(num_hidden_layers=1_000_000_000).items():
        at.query_params[k] = v
    start = time.perf_counter()
    at.run()
    assert not at.exception and time.perf_counter() - start < 30
    shown = " ".join(plain(e.value) for e in at.error)
    assert "num_hidden_layers: must be from 1 to 10,000, got 1,000,000,000" in shown
    assert not [m for m in at.metric if "Total" in m.label]
