"""Text towers of document, OCR and edge vision-language models (issue 21): each text model_type (and the multimodal
type whose text_config it is), mapped from the transformers 5.23 modeling file it mirrors (cited per mapper).
calculator.model.mappers.vlm_text merges these tables into its own; tests/model/mappers/test_vlm_ocr.py holds each
type to the real model's parameter and tensor counts (and validation/architectures to one traced layer's saved
activations and the cache).

MAPPERS: model_type -> mapper (cfg dict -> ModelSpec fields); SAME_BLOCKS: model_type -> an already mapped type whose
mapper reads it unchanged; TEXT_TYPES: outer multimodal type -> the text model_type its text_config holds (when the
text_config omits model_type); TIE_DEFAULTS: outer type -> its configuration class's tie_word_embeddings default
where the text class's differs; REFUSED: types mapped only to refuse them with the reason.

Here: Granite-4-Vision and Granite-Docling (Granite's layer), Cosmos3-Edge, PaddleOCR-VL, HunYuan-VL,
DeepSeek-OCR-2 and Unlimited-OCR (mapped; Unlimited-OCR's reference sliding-window layers refused). Every outer
class here ties its head by the same default as its text class (no TIE_DEFAULTS).

May import: calculator.core, calculator.model.config_read, calculator.model.variants (VariantSpec, as the package
allows) and the other mappers modules (not vlm_text).
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.config_read import (ConfigError, common_fields, get_bool, get_choice_list, get_int, get_str,
                                          llama_like_fields, router_group_fields)
from calculator.model.mappers.archs import DEEPSEEK_V2_VARIANT
from calculator.model.mappers.dsa import mlp_types
from calculator.model.variants import VariantSpec

# Granite-4-Vision (models/granite4_vision/modeling_granite4_vision.py Granite4VisionTextModel) and Granite-Docling
# (models/granite_docling/modeling_granite_docling.py GraniteDoclingTextModel, a GraniteModel): Granite's decoder
# layer, attention, MLP, RMSNorms, RoPE and multipliers (Granite4VisionText* are granite's classes renamed, line for
# line); their DeepStack adds projected image features into the image positions of a few layers' input, only when
# images are given (a masked_scatter / index_put outside the layers)
SAME_BLOCKS: dict[str, str] = {"granite4_vision_text": "granite", "granite4_vision": "granite",
                               "granite_docling_text": "granite", "granite_docling": "granite"}


def _head_dim(cfg: dict, f: dict, default: int) -> int:
    """head_dim as a LlamaConfig-style class reads it: its default when absent, hidden_size // heads when null."""
    if "head_dim" not in cfg:
        return get_int(cfg, "head_dim", default=default, hi=B.MAX_HEAD_DIM)
    return f["head_dim"] or f["hidden_size"] // f["num_attention_heads"]


def map_cosmos3_edge_text(cfg: dict) -> dict:
    """Cosmos3-Edge text tower (models/cosmos3_edge/modeling_cosmos3_edge.py Cosmos3EdgeTextModel): Llama's attention
    (Cosmos3EdgeTextAttention: q/k/v/o biased per attention_bias, head_dim default 128) and two RMSNorms, but
    Cosmos3EdgeTextMLP is a plain fc1 -> act -> fc2 (CLIPMLP's layout, biased per mlp_bias, hidden_act default
    "relu2"), as Arcee's up/down MLP. Its RoPE is Qwen3-VL's interleaved multimodal one, cos / sin computed once per
    forward from (3, b, s) positions in the model dtype (Cosmos3EdgeTextRotaryEmbedding), applied as Llama's.
    Cosmos3EdgeForConditionalGeneration never ties its lm_head (_tied_weights_keys = {}), whatever
    tie_word_embeddings says."""
    f = llama_like_fields(cfg)
    f.update(head_dim=_head_dim(cfg, f, 128), gated_mlp=False,
             hidden_act=get_str(cfg, "hidden_act", default="relu2"), tie_word_embeddings=False)
    return f


def map_paddleocr_vl_text(cfg: dict) -> dict:
    """PaddleOCR-VL text tower (models/paddleocr_vl/modeling_paddleocr_vl.py PaddleOCRTextModel): ERNIE-4.5's
    tensors (PaddleOCRDecoderLayer, PaddleOCRMLP: every linear biased per use_bias; head_dim default 128, tied by
    default) with Qwen2-VL's RoPE instead of ERNIE's: PaddleOCRRotaryEmbedding computes the multimodal cos / sin once
    per forward and casts them to the model dtype, and PaddleOCRAttention (Qwen2.5-Omni's) rotates with Llama's
    apply_rotary_pos_emb (rotate_half, no fp32 copies), where ERNIE-4.5 interleaves fp32 tables in every layer
    (ernie4_5's fp32_rope)."""
    f = common_fields(cfg)
    bias = get_bool(cfg, "use_bias", False)
    f.update(head_dim=_head_dim(cfg, f, 128), qkv_bias=bias, o_bias=bias, mlp_bias=bias,
             tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", True),
             hidden_act=get_str(cfg, "hidden_act", default="silu"))
    return f


def map_hunyuan_vl_text(cfg: dict) -> dict:
    """HunYuan-VL text tower (models/hunyuan_vl/modeling_hunyuan_vl.py HunYuanVLTextModel): HunYuan-V1 dense's
    tensors (hunyuan_v1_dense: Llama's q/k/v/o per attention_bias, query_layernorm / key_layernorm of head_dim after
    RoPE; HunYuanVLMLP never biased), except that its apply_rotary_pos_emb rotates q and k in fp32: q.float(),
    k.float() and fp32 copies of cos and sin made in every layer (fp32_rope, as ERNIE-4.5's), cast back to the model
    dtype before the q/k norms. HunYuanVLRotaryEmbedding computes the multimodal tables (one section per
    mrope_section axis) once per forward in the model dtype."""
    f = llama_like_fields(cfg)
    f.update(qk_norm=True, mlp_bias=False, variant=VariantSpec(fp32_rope=True))
    return f


def _ocr_moe(cfg: dict, n: int) -> dict:
    f = common_fields(cfg)
    heads = f["num_attention_heads"]
    if f["hidden_size"] % heads:
        raise ConfigError(f"hidden_size: {f['hidden_size']} is not a multiple of num_attention_heads ({heads})")
    bias = get_bool(cfg, "attention_bias", False)
    f.update(family="deepseek", head_dim=f["hidden_size"] // heads, qkv_bias=bias, o_bias=bias,
             mlp_bias=get_bool(cfg, "mlp_bias", False), hidden_act=get_str(cfg, "hidden_act", default="silu"))
    if cfg.get("mlp_layer_types") is None:
        raise ConfigError("mlp_layer_types: DeepseekOcr2TextDecoderLayer reads one entry (\"dense\" or \"sparse\") "
                          "per layer and its configuration class derives none")
    ffn = mlp_types(cfg, n, [])
    f["ffn_types"] = ffn
    if "moe" not in ffn:
        return f
    experts = get_int(cfg, "n_routed_experts", default=64, hi=B.MAX_EXPERTS)
    f.update(num_experts=experts, num_experts_per_tok=get_int(cfg, "num_experts_per_tok", hi=experts),
             moe_intermediate_size=get_int(cfg, "moe_intermediate_size", default=1407, hi=B.MAX_FFN),
             num_shared_experts=get_int(cfg, "n_shared_experts", default=2, hi=B.MAX_SHARED_EXPERTS),
             variant=DEEPSEEK_V2_VARIANT)
    f.update(router_group_fields({**cfg, "topk_method": get_str(cfg, "topk_method", default="greedy")}, experts))
    return f


def map_deepseek_ocr2_text(cfg: dict) -> dict:
    """DeepSeek-OCR-2 text tower (models/deepseek_ocr2/modeling_deepseek_ocr2.py DeepseekOcr2TextModel): DeepSeek-V2's
    decoder layer without MLA: DeepseekOcr2TextAttention is Llama's (q/k/v/o per attention_bias, heads of
    hidden_size // num_attention_heads whatever head_dim says, one shared cos / sin table per forward), and each
    layer's MLP is read from mlp_layer_types (required: DeepseekOcr2TextConfig derives none from
    first_k_dense_replace): a dense DeepseekV2MLP, or DeepseekV2Moe (DeepSeek-V2's fp32 softmax router, greedy or
    group_limited_greedy top-k never renormalised, grouped experts, n_shared_experts shared ones in one MLP)."""
    n = get_int(cfg, "num_hidden_layers", hi=B.MAX_LAYERS)
    f = _ocr_moe(cfg, n)
    if "moe" in f["ffn_types"] and not f["num_shared_experts"]:
        raise ConfigError("n_shared_experts: DeepseekOcr2TextMoe always builds its shared MLP "
                          "(moe_intermediate_size × n_shared_experts wide); 0 would build empty tensors")
    return f


RSWA = "reference_sliding_attention"


def map_unlimited_ocr_text(cfg: dict) -> dict:
    """Unlimited-OCR text tower (models/unlimited_ocr/modeling_unlimited_ocr.py UnlimitedOcrTextModel): DeepSeek-OCR-2's
    layers (map_deepseek_ocr2_text; UnlimitedOcrTextConfig derives mlp_layer_types from first_k_dense_replace,
    default 1, when absent), each attending as layer_types says. A full_attention layer is DeepSeek-OCR-2's own; a
    reference_sliding_attention layer (every layer by default) is refused: its cache
    (UnlimitedOcrDynamicReferenceSlidingWindowLayer) keeps every prefill token plus the last sliding_window decoded
    ones, and its mask lets each token see all prefill tokens and a window of later ones, which neither the engine's
    full nor its sliding attention is."""
    n = get_int(cfg, "num_hidden_layers", default=12, hi=B.MAX_LAYERS)
    types = get_choice_list(cfg, "layer_types", ("full_attention", RSWA))
    if types is None:
        types = [RSWA if cfg.get("sliding_window", 128) is not None else "full_attention"] * n
    if RSWA in types:
        raise ConfigError("model_type: Unlimited-OCR's reference sliding-window attention cannot be described "
                          "exactly yet: the calculator has no attention whose cache keeps every prefill token plus a "
                          "window of sliding_window decoded ones (UnlimitedOcrDynamicReferenceSlidingWindowLayer); "
                          "set layer_types to full_attention to price its layers as DeepSeek-OCR-2's")
    if len(types) != n:
        raise ConfigError(f"layer_types: has {len(types)} entries but num_hidden_layers is {n}")
    if cfg.get("mlp_layer_types") is None:
        first = get_int(cfg, "first_k_dense_replace", default=1, lo=0, hi=B.MAX_LAYERS)
        cfg = {**cfg, "mlp_layer_types": ["sparse" if i >= first else "dense" for i in range(n)]}
    defaults = dict(hidden_size=1280, intermediate_size=6848, num_attention_heads=10, vocab_size=129280,
                    moe_intermediate_size=896, num_experts_per_tok=6)
    return map_deepseek_ocr2_text({**defaults, **{k: v for k, v in cfg.items() if v is not None}})


MAPPERS: dict = {
    "cosmos3_edge_text": map_cosmos3_edge_text, "cosmos3_edge": map_cosmos3_edge_text,
    "paddleocr_vl_text": map_paddleocr_vl_text, "paddleocr_vl": map_paddleocr_vl_text,
    "hunyuan_vl_text": map_hunyuan_vl_text, "hunyuan_vl": map_hunyuan_vl_text,
    "deepseek_ocr2_text": map_deepseek_ocr2_text, "deepseek_ocr2": map_deepseek_ocr2_text,
    "unlimited_ocr_text": map_unlimited_ocr_text, "unlimited_ocr": map_unlimited_ocr_text,
}
TEXT_TYPES: dict[str, str] = {
    "granite4_vision": "granite4_vision_text", "granite_docling": "granite_docling_text",
    "cosmos3_edge": "cosmos3_edge_text", "paddleocr_vl": "paddleocr_vl_text", "hunyuan_vl": "hunyuan_vl_text",
    "deepseek_ocr2": "deepseek_ocr2_text", "unlimited_ocr": "unlimited_ocr_text",
}
TIE_DEFAULTS: dict[str, bool] = {}
REFUSED: frozenset[str] = frozenset()
