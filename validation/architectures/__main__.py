"""python -m validation.architectures [TYPE ...]: measure every supported model_type (or the ones named, merged into
the existing table), write validation/architectures/table.json and print it with the per-kind summary."""
from __future__ import annotations

import json
import sys

from . import TABLE
from .run import meta, rows
from .summary import rows_text, summary_markdown


def main(argv: list[str]) -> None:
    named = [a for a in argv if not a.startswith("-")]
    measured = rows(named) if named else rows()
    if named and TABLE.exists():  # a partial run replaces only its types' rows
        old = {r["model_type"]: r for r in json.loads(TABLE.read_text())["rows"]}
        old.update({r["model_type"]: r for r in measured})
        measured = [old[t] for t in sorted(old)]
    table = dict(meta=meta(), rows=sorted(measured, key=lambda r: r["model_type"]))
    TABLE.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
    print(rows_text(table))
    print()
    print(summary_markdown(table))


if __name__ == "__main__":
    main(sys.argv[1:])
