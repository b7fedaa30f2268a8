"""Every supported model_type measured against real transformers code at tiny widths (issue 21: "the Accuracy page
lists every architecture with its measured error"): `python -m validation.architectures` writes table.json.

- sources.py: the config each type is written from: the very configs the mapper tests build (tests/model/mappers/),
  loaded from those modules, not copied;
- measure.py: one type's parameter count (engine vs transformers' meta-device model), one layer's saved activations
  per layer kind (engine vs a CPU trace, validation/trace/saved_by_module.py) and the cache after a prefill;
- causal_lm.py: the real causal LM of a config (a Qwen VLM's conditional-generation model, where transformers
  registers no causal LM);
- summary.py: the per-kind summary of table.json (no torch: the dashboard reads it at page load).
- dsv4_golden.py: DeepSeek-V4's training goldens in tests/golden/ (a tiny model's whole step, the protocol of
  validation/trace/make_golden.py with from_pretrained's fp32-kept parameters).
"""
from __future__ import annotations

from pathlib import Path

TABLE = Path(__file__).resolve().parent / "table.json"
