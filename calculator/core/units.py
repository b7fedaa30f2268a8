"""Units are chosen only at display time: GB = 10^9 bytes, GiB = 2^30 bytes. Always say which."""
from __future__ import annotations

from typing import Literal

Unit = Literal["GB", "GiB", "MB", "MiB"]
UNIT_BYTES: dict[str, int] = {"GB": 10**9, "GiB": 2**30, "MB": 10**6, "MiB": 2**20}


def to_unit(n: int, unit: str = "GB") -> float:
    """Bytes as a float in `unit`."""
    return n / UNIT_BYTES[unit]


def format_bytes(n: int, unit: str = "GB", digits: int = 2) -> str:
    """'16.06 GB' — bytes formatted in the named unit."""
    return f"{n / UNIT_BYTES[unit]:,.{digits}f} {unit}"


def format_count(n: int) -> str:
    """8030261248 -> '8.03B'."""
    for div, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if abs(n) >= div:
            return f"{n / div:.2f}{suffix}"
    return str(n)
