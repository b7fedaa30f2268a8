"""Text towers of vision-language models and decoder-only types added in group a (issue 21): each text model_type
(and the multimodal type whose text_config it is), mapped from the transformers 5.23 modeling file it mirrors
(cited per mapper). calculator.model.mappers.vlm_text merges these tables into its own; tests/model/mappers/
test_vlm_text_a.py holds each type to the real model's parameter and tensor counts (and validation/architectures
to one traced layer's saved activations and the cache).

MAPPERS: model_type -> mapper (cfg dict -> ModelSpec fields); SAME_BLOCKS: model_type -> an already mapped type whose
mapper reads it unchanged; TEXT_TYPES: outer multimodal type -> the text model_type its text_config holds (when the
text_config omits model_type); TIE_DEFAULTS: outer type -> its configuration class's tie_word_embeddings default
where the text class's differs; REFUSED: types mapped only to refuse them with the reason.

May import: calculator.core, calculator.model.config_read and the other mappers modules (not vlm_text).
"""
from __future__ import annotations

MAPPERS: dict = {}
SAME_BLOCKS: dict[str, str] = {}
TEXT_TYPES: dict[str, str] = {}
TIE_DEFAULTS: dict[str, bool] = {}
REFUSED: frozenset[str] = frozenset()
