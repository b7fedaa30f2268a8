"""dashboard.accuracy: the About page finds the validation summary under tests/golden/ in any of its forms."""
from __future__ import annotations

import json

from dashboard.accuracy import load_summary


def test_nothing_there(tmp_path):
    assert load_summary(tmp_path / "missing") is None
    (tmp_path / "golden.json").write_text("{}")  # not a summary
    assert load_summary(tmp_path) is None


def test_markdown(tmp_path):
    (tmp_path / "validation-summary.md").write_text("| model | error |\n|---|---|\n| a | 3% |\n")
    s = load_summary(tmp_path)
    assert s.kind == "markdown" and "3%" in s.data


def test_csv(tmp_path):
    (tmp_path / "summary.csv").write_text("model,measured,estimated\nllama,10,11\n")
    s = load_summary(tmp_path)
    assert s.kind == "table" and s.data == [{"model": "llama", "measured": "10", "estimated": "11"}]


def test_json_rows_mapping_and_bad_files(tmp_path):
    (tmp_path / "a_summary.json").write_text("{broken")
    (tmp_path / "b_summary.json").write_text(json.dumps({"rows": [{"model": "x", "error_pct": 2.5}]}))
    s = load_summary(tmp_path)
    assert s.kind == "table" and s.data == [{"model": "x", "error_pct": 2.5}]
    (tmp_path / "b_summary.json").write_text(json.dumps({"median_error_pct": 4.1, "runs": 12}))
    s = load_summary(tmp_path)
    assert s.kind == "mapping" and s.data["runs"] == 12
