"""Find the validation summary another engineer writes under tests/golden/ (the About page shows it).

Accepted, first found wins: a file whose name contains "summary" with extension .md (shown as Markdown),
.json (a list of row objects, or an object of key -> value) or .csv (a table)."""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "tests" / "golden"


@dataclass(frozen=True)
class Summary:
    path: Path
    kind: str  # "markdown" | "table" | "mapping"
    data: Any


def load_summary(golden_dir: Path = GOLDEN_DIR) -> Summary | None:
    if not golden_dir.is_dir():
        return None
    for path in sorted(golden_dir.rglob("*")):
        if not path.is_file() or "summary" not in path.name.lower():
            continue
        suffix = path.suffix.lower()
        try:
            if suffix == ".md":
                return Summary(path, "markdown", path.read_text(encoding="utf-8"))
            if suffix == ".csv":
                with path.open(newline="", encoding="utf-8") as fh:
                    return Summary(path, "table", list(csv.DictReader(fh)))
            if suffix == ".json":
                data = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(data, list):
                    return Summary(path, "table", data)
                if isinstance(data, dict):
                    rows = next((v for v in data.values() if isinstance(v, list)
                                 and v and all(isinstance(r, dict) for r in v)), None)
                    return Summary(path, "table", rows) if rows is not None and len(data) == 1 else \
                        Summary(path, "mapping", data)
        except (OSError, ValueError, csv.Error):
            continue
    return None
