"""short causal convolutions (LFM2) — placeholder of the architecture registry, filled in by the kind's own work (issue 21)."""
from __future__ import annotations

from pydantic import ConfigDict

from calculator.core.hash_once import HashedOnce

NAME = "short_conv"
LABEL = "short causal convolutions (LFM2)"
SOURCE = "short-conv"


class ShortConvSpec(HashedOnce):
    """The configuration of this kind of layer, as ModelSpec holds it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
