"""Print the Qwen (v1) rows: published, engine, error (validation/published/qwen_v1/__init__.py)."""
from __future__ import annotations

import statistics

from validation.published.qwen_v1 import comparisons
from validation.published.rows import gib

rows = comparisons()
for c in rows:
    err = "—" if c.error_pct is None else f"{c.error_pct:+.1f}%"
    print(f"{c.id:20} {gib(c.measured_bytes):>9} {gib(c.estimated_bytes):>9} {err:>8}  "
          f"{'' if c.comparable else '(not comparable) '}{c.config}")
errs = [abs(c.error_pct) for c in rows if c.comparable]
print(f"comparable: {len(errs)}, median |error| {statistics.median(errs):.1f}%, worst {max(errs):.1f}%")
