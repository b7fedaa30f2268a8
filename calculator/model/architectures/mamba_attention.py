"""Falcon-H1's layer: a Mamba-2 mixer and the model's softmax attention side by side on the same input — placeholder
of the architecture registry, filled in by the kind's own work (issue 21)."""
from __future__ import annotations

NAME = "mamba_attention"
LABEL = "Mamba-2 ∥ attention"
SOURCE = "mamba"
WITH_ATTENTION = True
