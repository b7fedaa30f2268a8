"""The engine against every measured golden case (tests/golden/*.json, traced by validation/trace/make_golden.py from real
transformers code): model states and the KV cache to the byte, activations and peak within 1%."""
from __future__ import annotations

import pytest

from validation.trace.compare import MODELLED_ATTENTION, load_goldens, measured, predicted, summary

GOLDENS = load_goldens()
MODELLED = [g for g in GOLDENS if g["run"]["attention"] in MODELLED_ATTENTION]
EXACT = ("parameters", "weights", "master_weights", "gradients", "optimizer_states", "kv_cache")
WITHIN_1_PERCENT = ("activations", "peak_allocated")


def test_the_matrix_is_large_enough():
    assert len(GOLDENS) >= 60
    assert len({g["model"]["model_type"] for g in GOLDENS}) >= 6
    assert {g["run"]["mode"] for g in GOLDENS} == {"train", "infer"}
    assert {g["run"]["recompute"] for g in GOLDENS if g["run"]["mode"] == "train"} >= {"none", "selective", "full"}


@pytest.mark.parametrize("golden", MODELLED, ids=[g["id"] for g in MODELLED])
def test_engine_matches_measurement(golden):
    meas, pred = measured(golden), predicted(golden)
    for k in EXACT:
        if k in meas:
            assert pred[k] == meas[k], k
    for k in WITHIN_1_PERCENT:
        if k in meas:
            assert pred[k] == pytest.approx(meas[k], rel=0.01), k


def test_summary_reports_every_quantity_within_the_bar():
    s = summary()
    assert s["cases"] == len(MODELLED) and len(s["architectures"]) >= 6
    for quantity, row in s["per_quantity"].items():
        assert row["worst_abs_error_pct"] <= (0.0 if quantity in EXACT else 1.0), quantity
    assert all("sdpa" in case for case in s["excluded"])
