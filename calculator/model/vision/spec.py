"""VisionSpec: the vision encoder and projector of a vision-language model, read from its config.json.

One spec describes one of sixteen encoder kinds, each mirroring a transformers 5.23 module:

    qwen2_vl    models/qwen2_vl/modeling_qwen2_vl.py       Qwen2VisionTransformerPretrainedModel (LayerNorm,
                                                           QuickGELU MLP with biases, full attention, merger)
    qwen2_5_vl  models/qwen2_5_vl/modeling_qwen2_5_vl.py   Qwen2_5_VisionTransformerPretrainedModel (RMSNorm,
                                                           SwiGLU with biases, windowed attention, merger)
    qwen3_vl    models/qwen3_vl/modeling_qwen3_vl.py       Qwen3VLVisionModel (LayerNorm, GELU MLP, learned +
                models/qwen3_5/modeling_qwen3_5.py         rotary positions, merger, DeepStack mergers in
                                                           qwen3_vl / qwen3_vl_moe only); Qwen3_5VisionModel
    glm4v       models/glm4v/modeling_glm4v.py             Glm4vVisionModel (Conv3d patches, RMSNorm, learned
                models/glm4v_moe/modeling_glm4v_moe.py     positions resampled bicubically, SwiGLU blocks as
                                                           wide as the output, Conv2d downsample, gated merger;
                                                           GLM-4.1V / 4.5V / 4.6V)
    siglip      models/siglip/modeling_siglip.py           SiglipVisionModel + Gemma3MultiModalProjector
                models/gemma3/modeling_gemma3.py           (average pool to mm_tokens_per_image, RMSNorm, matmul)
    paligemma   models/siglip/modeling_siglip.py           SiglipVisionModel + PaliGemmaMultiModalProjector
                models/paligemma/modeling_paligemma.py     (one linear with a bias to projection_dim)
    llama4      models/llama4/modeling_llama4.py           Llama4VisionModel (unfold patches, CLS, pixel-shuffle
                                                           adapter) + Llama4MultiModalProjector
    pixtral     models/pixtral/modeling_pixtral.py         PixtralVisionModel + Mistral3MultiModalProjector
                models/mistral3/modeling_mistral3.py       (RMSNorm, learned 2×2 patch merger, two linears)
    gemma4      models/gemma4/modeling_gemma4.py           Gemma4VisionModel (linear patch embedder, 2-D position
                                                           table, q/k/v norms, sandwich RMSNorms, gated MLP, k×k
                                                           average pooler) + Gemma4MultimodalEmbedder (embed_vision)
    internvl    models/internvl/modeling_internvl.py       InternVLVisionModel (InternViT: CLS, learned positions,
                                                           LayerNorm or RMSNorm, optional q/k norms, layer-scale
                                                           lambdas, GELU MLP) + InternVLMultiModalProjector (pixel
                                                           shuffle, LayerNorm, two linears); 448² tiles; the
                                                           remote-code InternVLChatModel (internvl_chat: modeling_
                                                           intern_vit.py InternVisionModel, its qkv fused, and mlp1)
    smolvlm     models/smolvlm/modeling_smolvlm.py         SmolVLMVisionTransformer (SigLIP's blocks, positions
                models/idefics3/modeling_idefics3.py       bucketed per tile, post LayerNorm) + SmolVLMConnector
                                                           (pixel shuffle, one bias-free linear); Idefics3's alike
    clip        models/clip/modeling_clip.py               CLIPVisionModel (CLS, positions, pre and post LayerNorm,
                models/llava/modeling_llava.py             QuickGELU MLP) + LlavaMultiModalProjector (two linears
                models/llava_next/modeling_llava_next.py   over the chosen layers' hidden states; LLaVA-1.5, and
                                                           LLaVA-NeXT's anyres tiles with its image_newline;
                                                           VipLLaVA's projector_layernorm over five layers)
    aya         models/siglip/modeling_siglip.py           SiglipVisionModel + AyaVisionMultiModalProjector (pixel
                models/aya_vision/modeling_aya_vision.py   shuffle, LayerNorm, SwiGLU linears); GotOcr2 tiles
    cohere2     models/cohere2_vision/modeling_cohere2_vision.py  SiglipVisionModel (its post LayerNorm read) +
                                                           Cohere2VisionMultiModalProjector (pixel shuffle, SwiGLU
                                                           linears, no norm); the least-rescaling canvas of tiles
    onevision   models/llava_onevision/modeling_llava_onevision.py  SiglipVisionModel read before its post norm +
                                                           LLaVA's projector and image_newline over anyres tiles,
                                                           the unpadded grid shrunk to anyres_max_N tiles' worth
    kimi        models/kimi_k25/modeling_kimi_k25.py       Kimi_K25VisionModel (MoonViT: packed images, bicubic
                                                           learned positions, 2-D RoPE, final LayerNorm, 2×2 merge)
                                                           + Kimi_K25MultimodalProjection (pre_norm, two linears)

A field the config leaves out takes the transformers configuration class's default (the tables below, from each
configuration_*.py), as transformers itself does when it builds the model.
"""
from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from calculator.core import bounds as B
from calculator.core.hash_once import HashedOnce

Kind = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v", "siglip", "paligemma", "llama4", "pixtral", "gemma4",
               "internvl", "smolvlm", "clip", "aya", "cohere2", "onevision", "kimi"]
# Decoder layers that get transformers' bidirectional image-block mask when a batch has images (token_type_ids
# become block_sequence_ids, masking_utils.blockwise_overlay): none, every layer (Gemma 3, PaliGemma), or the
# sliding-window ones (Gemma 4 with use_bidirectional_attention "vision")
BlockMask = Literal["none", "all", "sliding"]
FIXED_SIZE_KINDS = ("siglip", "paligemma", "llama4", "clip")  # every image (tile) resized to image_size²

QWEN_KINDS = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")  # dynamic resolution, Conv3d patches, merger
_PX = 1 << 16  # largest image side or patch the engine takes (pixels)


class VisionSpec(HashedOnce):
    """The vision tower (encoder) and projector of one model, with the image processor defaults its checkpoints
    ship (each cited where it is set: calculator/model/vision/defaults.py and mapping.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Kind
    model_type: str = Field(max_length=B.MAX_NAME_CHARS)  # the outer config's model_type
    hidden_size: int = Field(gt=0, le=B.MAX_HIDDEN, strict=True)
    intermediate_size: int = Field(gt=0, le=B.MAX_FFN, strict=True)
    num_layers: int = Field(gt=0, le=B.MAX_LAYERS, strict=True)
    num_heads: int = Field(gt=0, le=B.MAX_HEADS, strict=True)
    patch_size: int = Field(gt=0, le=_PX, strict=True)
    num_channels: int = Field(default=3, gt=0, le=64, strict=True)
    temporal_patch_size: int = Field(default=1, gt=0, le=64, strict=True)  # Qwen: a still image is 2 frames
    # Qwen merger / Mistral-3 patch merger / Gemma 4 pooling_kernel_size (each k×k group of patches → one token)
    spatial_merge_size: int = Field(default=1, gt=0, le=64, strict=True)
    # width the projector writes: the language model's hidden size (Qwen: vision_config.out_hidden_size)
    out_hidden_size: int = Field(gt=0, le=B.MAX_HIDDEN, strict=True)
    # SigLIP / Llama 4: the side every image (tile) is resized to; Pixtral: the processor's longest edge
    image_size: int = Field(default=0, ge=0, le=_PX, strict=True)
    # Qwen3-VL / Qwen3.5 num_position_embeddings, GLM-4V (image_size / P)²; Gemma 4 position_embedding_size (rows
    # per axis of its table)
    num_position_embeddings: int = Field(default=0, ge=0, le=B.MAX_POSITIONS, strict=True)
    deepstack_layers: tuple[int, ...] = Field(default=(), max_length=B.MAX_LAYERS)  # Qwen3-VL DeepStack mergers
    window_size: int = Field(default=0, ge=0, le=_PX, strict=True)  # Qwen2.5-VL attention window (pixels)
    full_attention_blocks: tuple[int, ...] = Field(default=(), max_length=B.MAX_LAYERS)  # Qwen2.5-VL
    use_head: bool = False  # SigLIP's attention-pooling head (False in Gemma 3 and PaliGemma)
    image_block_mask: BlockMask = "none"
    attention_bias: bool = False  # GLM-4V's qkv bias (the Qwen towers' fused qkv always has one)
    merger_intermediate_size: int = Field(default=0, ge=0, le=B.MAX_FFN, strict=True)  # GLM-4V's gated merger
    # Gemma 3 mm_tokens_per_image; Gemma 4 the image processor's max_soft_tokens (its patch budget / k²)
    tokens_per_image: int = Field(default=0, ge=0, le=_PX * _PX, strict=True)
    projector_input_dim: int = Field(default=0, ge=0, le=B.MAX_HIDDEN, strict=True)  # Llama 4 adapter
    projector_output_dim: int = Field(default=0, ge=0, le=B.MAX_HIDDEN, strict=True)
    vision_output_dim: int = Field(default=0, ge=0, le=B.MAX_HIDDEN, strict=True)
    pixel_shuffle_ratio: float = Field(default=0.5, gt=0, le=1, allow_inf_nan=False)
    feature_layers: int = Field(default=1, gt=0, le=B.MAX_LAYERS, strict=True)  # Mistral-3 vision_feature_layer
    projector_bias: bool = False  # Mistral-3 multimodal_projector_bias
    # image processor: Qwen's pixel bounds of smart_resize, Llama 4's tiles per image
    min_pixels: int = Field(default=0, ge=0, le=_PX * _PX, strict=True)
    max_pixels: int = Field(default=0, ge=0, le=_PX * _PX, strict=True)
    max_tiles: int = Field(default=16, gt=0, le=1024, strict=True)
    # InternViT (InternVLVisionConfig): norm_type "rms_norm", use_qk_norm, a final LayerNorm (use_mean_pooling
    # False), use_mask_token, use_absolute_position_embeddings
    rms_norm: bool = False
    qk_norm: bool = False
    final_norm: bool = False
    mask_token: bool = False
    positions: bool = True
    fused_qkv: bool = False  # the remote InternVisionModel's attn.qkv (one nn.Linear for q, k and v)
    thumbnail: bool = True  # InternVL's global thumbnail tile beside several (use_thumbnail)
    # LLaVA: the deepest hidden state the projector reads (hidden_states index: -1 the last layer's output, -2 the one
    # before: the last layer then runs but no gradient reaches it) and whether the CLS token goes with it ("full")
    feature_layer: int = Field(default=-1, ge=-B.MAX_LAYERS - 1, le=B.MAX_LAYERS, strict=True)
    keeps_cls: bool = False
    projector_norm: bool = False  # VipLLaVA's projector_layernorm over the concatenated layers
    llava_projector: bool = False  # Pixtral-12B (a pixtral tower in a llava config): LLaVA's two linears, no merger
    # Kimi-K2.5's image processor (navit_resize): the patch budget and the patches a side at most
    max_patches: int = Field(default=0, ge=0, le=1 << 30, strict=True)
    max_side_patches: int = Field(default=0, ge=0, le=1 << 20, strict=True)
    # LLaVA-NeXT: image_grid_pinpoints, the (height, width) canvases of its anyres tiling (empty: one fixed image)
    grid_pinpoints: tuple[tuple[int, int], ...] = Field(default=(), max_length=256)

    @model_validator(mode="after")
    def _check(self) -> "VisionSpec":
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be a multiple of num_heads ({self.num_heads})")
        if self.kind not in QWEN_KINDS + ("glm4v", "gemma4", "kimi") and self.image_size < self.patch_size:
            raise ValueError(f"image_size ({self.image_size}) must be at least patch_size ({self.patch_size})")
        if self.kind == "internvl" and (self.image_size // self.patch_size) % self.spatial_merge_size:
            raise ValueError(f"a tile's patch grid ({self.image_size // self.patch_size}) must be a multiple of the "
                             f"pixel shuffle's factor ({self.spatial_merge_size})")
        if self.kind == "gemma4" and (self.head_dim % 4 or not self.tokens_per_image):
            raise ValueError("a Gemma 4 tower needs a head_dim divisible by 4 (its axial rotary splits it in four) "
                             "and max_soft_tokens > 0")
        return self

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def trained_layers(self) -> int:
        """Encoder blocks backward reaches: those up to the hidden state the projector reads (LLaVA), else all."""
        if self.kind not in ("clip", "aya", "onevision", "pixtral"):
            return self.num_layers
        return max(0, min(self.num_layers, self.num_layers + 1 + self.feature_layer if self.feature_layer < 0
                          else self.feature_layer))

    @property
    def merged_width(self) -> int:
        """Width of one merged token before the projector's MLP (Qwen: hv·m²)."""
        return self.hidden_size * self.spatial_merge_size ** 2

    @property
    def default_image_px(self) -> int:
        """The side of a square image when the workload names none: the size every image is resized to (Gemma 3,
        Llama 4's tile), else 1024 px (our choice for dynamic-resolution families: a typical photo or screenshot
        after the client's downscale; Pixtral's class default longest edge is also 1024; Gemma 4 rescales any image
        to its patch budget)."""
        return self.image_size if self.kind in FIXED_SIZE_KINDS and not self.grid_pinpoints else 1024

    def masks_layer(self, sliding: bool) -> bool:
        """Whether a decoder layer (sliding-window or not) gets the image-block mask when the batch has images."""
        return self.image_block_mask == "all" or (self.image_block_mask == "sliding" and sliding)
