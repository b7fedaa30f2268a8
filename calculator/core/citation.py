"""A source a formula cites: what it is, where to read it, and which section, equation or file holds the formula."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    title: str
    url: str
    detail: str  # section / equation / file that holds the formula
