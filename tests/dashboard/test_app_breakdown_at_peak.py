"""The calculator page's chart shows what is live at the peak (issue 24): its full-colour bar stacks to the total the
headline states, the step's other moments stand beside it, and the table says when each term is taken."""
from __future__ import annotations

import pytest

from calculator import estimate
from calculator.core.units import format_bytes
from calculator.core.workload import Workload
from tests.app_page import BASE, GPU, LLAMA, chart, metrics, run
from tests.html_read import breakdown


def _stacked(fig, i: int) -> float:
    return sum(y[i] for name, y in fig["traces"].items() if name != "total")


def test_the_peak_bar_stacks_to_the_headline_total():
    at = run()
    fig = chart(at)
    assert fig["x"] == ["forward end", "backward pass", "optimizer step<br>peak"]
    assert _stacked(fig, 2) == pytest.approx(BASE.total_bytes / 1e9)
    assert metrics(at)["Total per GPU"] == format_bytes(BASE.total_bytes, "GB")
    assert fig["traces"]["Activations"][2] == 0  # freed before the optimizer step
    assert fig["traces"]["Gradients"][2] > 10  # every bf16 gradient until the step frees it
    assert all(_stacked(fig, i) < _stacked(fig, 2) for i in (0, 1))


def test_full_recompute_visibly_changes_the_bars_and_the_chart_says_why_not_the_peak():
    base, full = chart(run()), chart(run({"rc": "full"}))
    assert full["traces"]["Activations"][1] < base["traces"]["Activations"][1] / 5
    assert _stacked(full, 1) < _stacked(base, 1) - 10
    assert _stacked(full, 2) == pytest.approx(_stacked(base, 2))
    title = full["layout"]["title"]["text"].replace("<br>", " ")
    assert "Peak at the optimizer step" in title and "not the peak" in title


def test_the_table_says_when_each_term_is_taken():
    at = run()
    rows = breakdown(at)
    at_moment = {r["Term"]: r["Taken at"] for r in rows}
    assert at_moment["Optimizer step beyond the fwd/bwd peak"].startswith("optimizer step")
    assert all(r["Taken at"] == "all step" for r in rows if r["Component"] in ("Weights", "Optimizer states"))
    assert any(v.startswith("forward → backward") for v in at_moment.values())
    assert "Taken at" in " ".join(c.value for c in at.caption)


def test_a_backward_peak_moves_with_recompute():
    q = {"ft": "lora", "seq": "8192"}
    base, full = chart(run(q)), chart(run({**q, "rc": "full"}))
    peak = next(i for i, x in enumerate(base["x"]) if x.endswith("peak"))
    assert base["x"][peak].startswith("backward pass")
    expected = estimate(LLAMA, Workload(gpu=GPU, finetune="lora", seq_len=8192, recompute="full"))
    assert max(_stacked(full, i) for i in range(3)) == pytest.approx(expected.total_bytes / 1e9)
    assert _stacked(full, 1) < _stacked(base, peak)
