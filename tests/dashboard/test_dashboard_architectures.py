"""The Accuracy page's "Architectures: every model type, measured" section: it reads validation/architectures/
table.json (written by `python -m validation.architectures`) and lists every supported model_type with its checks,
plus the per-kind summary."""
from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from calculator.model.hf_config import SUPPORTED_MODEL_TYPES
from dashboard import accuracy as acc
from validation.architectures.summary import per_kind

APP = Path(__file__).resolve().parents[2] / "app.py"


@pytest.fixture(scope="module")
def accuracy_page() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("pages/accuracy.py").run()
    assert not at.exception, at.exception
    return at


def _frame(at, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_the_section_lists_every_supported_model_type(accuracy_page):
    assert any(h.value == "Architectures: every model type, measured" for h in accuracy_page.subheader)
    rows = _frame(accuracy_page, "Model type")
    assert sorted(rows["Model type"]) == sorted(SUPPORTED_MODEL_TYPES)
    assert rows["Parameters"].str.len().min() > 0 and rows["Cache after a prefill"].str.len().min() > 0
    assert rows["Activations (one layer per kind)"].str.len().min() > 0


def test_the_rows_and_the_summary_are_table_jsons(accuracy_page):
    table = acc.load_architectures()
    rows = _frame(accuracy_page, "Model type").set_index("Model type")
    for r in table["rows"]:
        p = r["parameters"]
        assert (rows.loc[r["model_type"], "Parameters"] == "exact") == bool(p.get("exact"))
    kinds = _frame(accuracy_page, "Exact layers")
    summary = per_kind(table)
    assert list(kinds["Kind"]) == [f"{g['role']}: {g['kind']}" for g in summary]
    assert list(kinds["Types"]) == [g["n_types"] for g in summary]
