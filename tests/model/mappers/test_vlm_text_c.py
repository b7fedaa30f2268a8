"""Group c's text towers and decoder types (calculator/model/mappers/vlm_text_c.py): the config.json transformers
5.23 writes maps, and the engine's parameter and tensor counts equal the real model's, built from that config on the
meta device. SIZES and written_config are read by validation/architectures/sources.py too."""
from __future__ import annotations

SIZES: dict[str, dict] = {}


def written_config(model_type: str, **overrides):
    """(config.json as transformers 5.23 writes it, the config of the model to build)."""
    raise KeyError(model_type)
