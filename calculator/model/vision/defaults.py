"""Defaults of the transformers 5.23 vision configuration classes (for the fields a config leaves out, as transformers
itself fills them when it builds the model) and the image processor bounds the checkpoints ship; read by
calculator/model/vision/mapping.py.

May import: nothing of the calculator.
"""
from __future__ import annotations

QWEN2_5_VISION = {  # models/qwen2_5_vl/configuration_qwen2_5_vl.py Qwen2_5_VLVisionConfig
    "depth": 32, "hidden_size": 3584, "intermediate_size": 3420, "num_heads": 16, "in_channels": 3,
    "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
    "out_hidden_size": 3584, "fullatt_block_indexes": [7, 15, 23, 31]}
QWEN2_VISION = {  # models/qwen2_vl/configuration_qwen2_vl.py Qwen2VLVisionConfig (hidden_size: the merger's output)
    "depth": 32, "embed_dim": 1280, "hidden_size": 3584, "hidden_act": "quick_gelu", "mlp_ratio": 4,
    "num_heads": 16, "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}
GLM4V_VISION = {  # models/glm4v/configuration_glm4v.py Glm4vVisionConfig (= Glm4vMoeVisionConfig)
    "depth": 24, "hidden_size": 1536, "hidden_act": "silu", "attention_bias": False, "num_heads": 12,
    "in_channels": 3, "image_size": 336, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
    "out_hidden_size": 4096, "intermediate_size": 13696}
QWEN3_VISION = {  # models/qwen3_vl/configuration_qwen3_vl.py Qwen3VLVisionConfig (Qwen3.5's: no DeepStack)
    "depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "in_channels": 3,
    "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584,
    "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24]}
SIGLIP_VISION = {  # models/siglip/configuration_siglip.py SiglipVisionConfig
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
    "num_channels": 3, "image_size": 224, "patch_size": 16, "vision_use_head": True}
PALIGEMMA_VISION = {  # models/paligemma/configuration_paligemma.py PaliGemmaConfig.sub_configs_defaults
    **SIGLIP_VISION, "intermediate_size": 4096, "hidden_size": 1152, "patch_size": 14, "image_size": 224,
    "num_hidden_layers": 27, "num_attention_heads": 16, "vision_use_head": False}
PALIGEMMA_PROJECTION_DIM = 2048  # PaliGemmaConfig.projection_dim
LLAMA4_VISION = {  # models/llama4/configuration_llama4.py Llama4VisionConfig
    "hidden_size": 768, "intermediate_size": 5632, "num_hidden_layers": 34, "num_attention_heads": 16,
    "num_channels": 3, "image_size": 448, "patch_size": 14, "vision_output_dim": 7680, "pixel_shuffle_ratio": 0.5,
    "projector_input_dim": 4096, "projector_output_dim": 4096}
PIXTRAL_VISION = {  # models/pixtral/configuration_pixtral.py PixtralVisionConfig
    "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
    "num_channels": 3, "image_size": 1024, "patch_size": 16}
GEMMA4_VISION = {  # models/gemma4/configuration_gemma4.py Gemma4VisionConfig
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 16, "num_attention_heads": 12,
    "num_key_value_heads": 12, "head_dim": 64, "patch_size": 16, "pooling_kernel_size": 3,
    "position_embedding_size": 10240}
# Gemma4ImageProcessor(Pil).max_soft_tokens (image_processing_pil_gemma4.py): 280 by default, one of these
GEMMA4_SOFT_TOKENS = (70, 140, 280, 560, 1120)
INTERNVL_VISION = {  # models/internvl/configuration_internvl.py InternVLVisionConfig (InternVL3-1B-hf's tower)
    "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
    "attention_bias": False, "use_qk_norm": False, "hidden_act": "gelu", "norm_type": "layer_norm",
    "image_size": 448, "patch_size": 14, "num_channels": 3, "use_mask_token": False,
    "use_absolute_position_embeddings": True, "use_mean_pooling": True}
# GotOcr2ImageProcessor, InternVL's (models/auto/image_processing_auto.py): crop_to_patches (InternVLProcessor's
# default) into at most max_patches = 12 tiles of the tower's image_size, plus a thumbnail
INTERNVL_MAX_TILES = 12
CLIP_VISION = {  # models/clip/configuration_clip.py CLIPVisionConfig
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
    "num_channels": 3, "image_size": 224, "patch_size": 32, "hidden_act": "quick_gelu"}
LLAVA_ABSENT_VISION = {  # models/llava/configuration_llava.py LlavaConfig.sub_configs_defaults (CLIP ViT-L/14-336)
    **CLIP_VISION, "intermediate_size": 4096, "hidden_size": 1024, "patch_size": 14, "image_size": 336,
    "num_hidden_layers": 24, "num_attention_heads": 16}
SMOLVLM_VISION = {  # models/smolvlm/configuration_smolvlm.py SmolVLMVisionConfig (= Idefics3VisionConfig)
    "hidden_size": 1152, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 16,
    "num_channels": 3, "image_size": 224, "patch_size": 32, "hidden_act": "gelu_pytorch_tanh"}
MISTRAL3_ABSENT_VISION = {  # Mistral3Config.sub_configs_defaults: the vision config when the file has none
    **PIXTRAL_VISION, "patch_size": 14, "image_size": 1540, "head_dim": 64}
LARGE4_ABSENT_VISION = {  # MistralLarge4Config.sub_configs_defaults (models/mistral_large4/configuration_*.py)
    **PIXTRAL_VISION, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 30,
    "num_attention_heads": 16, "patch_size": 14, "image_size": 1540, "hidden_act": "silu"}

# Image processor pixel bounds the checkpoints ship (preprocessor_config.json "min_pixels"/"max_pixels", or
# "size": {"shortest_edge", "longest_edge"}), read by Qwen2VLImageProcessor's smart_resize
# (models/qwen2_vl/image_processing_pil_qwen2_vl.py). Qwen/Qwen2.5-VL-*-Instruct: 3,136 … 12,845,056 (the class
# default max is 1,003,520), and Qwen/Qwen2-VL-*-Instruct the same; Qwen/Qwen3-VL-*, Qwen/Qwen3.5-* and
# Qwen/Qwen3.6-*: 65,536 … 16,777,216.
QWEN2_5_PIXELS = (3136, 12_845_056)
# GLM's Glm4vImageProcessor (image_processing_pil_glm4v.py smart_resize) weighs an image as 2 frames × H × W against
# size {"shortest_edge", "longest_edge"}; zai-org's checkpoints ship 12,544 … 9,633,792 (GLM-OCR's
# preprocessor_config.json at 2e85a628 as quoted verbatim in a test of an indexed repository; 9,633,792 =
# 14²·2²·2·6,144: at most 6,144 image tokens), where the class default is 12,544 … 11,760,000
GLM4V_PIXELS = (12_544, 9_633_792)
QWEN3_PIXELS = (65_536, 16_777_216)
AYA_VISION = {  # models/aya_vision/configuration_aya_vision.py AyaVisionConfig.sub_configs_defaults (SigLIP-so400m)
    **SIGLIP_VISION, "hidden_size": 1152, "intermediate_size": 4304, "patch_size": 14, "image_size": 384,
    "num_hidden_layers": 26, "num_attention_heads": 14, "vision_use_head": False}
COHERE2_VISION = {  # models/cohere2_vision/configuration_cohere2_vision.py Cohere2VisionConfig.sub_configs_defaults
    **SIGLIP_VISION, "hidden_size": 1152, "intermediate_size": 3072, "image_size": 512, "num_hidden_layers": 27,
    "num_attention_heads": 12}
COHERE2_ALIGNMENT = 36864  # Cohere2VisionConfig.alignment_intermediate_size
LLAVA_NEXT_PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]  # LlavaNextConfig's default
ONEVISION_VISION = {  # models/llava_onevision/configuration_llava_onevision.py sub_configs_defaults (SigLIP-so400m)
    **SIGLIP_VISION, "hidden_size": 1152, "intermediate_size": 4304, "patch_size": 14, "image_size": 384,
    "num_hidden_layers": 26, "num_attention_heads": 16, "vision_use_head": False}
# LlavaOnevisionConfig's default image_grid_pinpoints: every (384·a, 384·b) for a, b in 1 … 6
ONEVISION_PINPOINTS = [[384 * a, 384 * b] for a in range(1, 7) for b in range(1, 7)]
KIMI_VISION = {  # models/kimi_k25/configuration_kimi_k25.py Kimi_K25VisionConfig (MoonViT)
    "patch_size": 14, "pos_emb_height": 64, "pos_emb_width": 64, "num_attention_heads": 16, "num_hidden_layers": 27,
    "hidden_size": 1152, "intermediate_size": 4304, "hidden_act": "gelu_pytorch_tanh", "merge_kernel_size": [2, 2]}
KIMI_PROJECTION = 1152  # Kimi_K25Config.projection_hidden_size
# image_processing_kimi_k25.py Kimi_K25ImageProcessor: max_patches, and size max_height (patches a side)
KIMI_MAX_PATCHES, KIMI_MAX_SIDE = 16384, 512
