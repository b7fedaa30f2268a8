"""Mamba-2 and Mamba-1 (state-space) token mixers — placeholder of the architecture registry, filled in by the kind's own work (issue 21)."""
from __future__ import annotations

from pydantic import ConfigDict

from calculator.core.hash_once import HashedOnce

NAME = "mamba"
LABEL = "Mamba-2 and Mamba-1 (state-space) token mixers"
SOURCE = "mamba"


class MambaSpec(HashedOnce):
    """The configuration of this kind of layer, as ModelSpec holds it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
