"""Kimi Delta Attention — placeholder of the architecture registry, filled in by the kind's own work (issue 21)."""
from __future__ import annotations

from pydantic import ConfigDict

from calculator.core.hash_once import HashedOnce

NAME = "kda"
LABEL = "Kimi Delta Attention"
SOURCE = "kda"


class KDASpec(HashedOnce):
    """The configuration of this kind of layer, as ModelSpec holds it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
