"""python -m calculator.allocator.native: compile the C replay (calculator/allocator/native/allocator.c) for this interpreter.

Exits 0 with the built module's path; exits 1 with the reason when it cannot be built (no compiler, no Python
headers). The calculator then runs its pure Python replay, with the same results, a few milliseconds slower for a
model's first estimate.
"""
from __future__ import annotations

import sys

from calculator.allocator.native import build, load_from

if __name__ == "__main__":
    try:
        path = build()
        load_from(path)
    except (RuntimeError, ImportError, OSError) as exc:
        print(f"calculator.allocator.native: not built ({exc}); the pure Python replay will run", file=sys.stderr)
        sys.exit(1)
    print(path)
