"""PyTorch scaled_dot_product_attention as transformers calls it (attention "sdpa", transformers' default on CUDA):
which kernel runs, and what a mask adds to what a layer keeps for backward.

Without a mask SDPA runs its FlashAttention kernel with `is_causal` and keeps what FlashAttention-2 keeps (q, k, v
unexpanded with `enable_gqa`, the output, an fp32 logsumexp): the "flash" terms. A mask is needed when
- the batch is padded (an attention_mask with zeros: transformers 5 masking_utils.sdpa_mask cannot drop it), or
- a sliding-window layer's window is not longer than the keys (Gemma-3's 512-token local layers at s = 4096;
  masking_utils._ignore_causal_mask_sdpa keeps the mask whenever kv_length >= the window: at s = W too), or
- the batch has images and the model ORs their bidirectional blocks into the causal mask (token_type_ids turned
  into block_sequence_ids: masking_utils.create_causal_mask sets allow_is_causal_skip = False, so sdpa_mask always
  materialises it): every layer of Gemma 3 (modeling_gemma3.py create_masks_for_vision_model) and PaliGemma
  (modeling_paligemma.py PaliGemmaModel.forward, the image + prefix block), Gemma 4's sliding layers with
  use_bidirectional_attention "vision" (modeling_gemma4.py create_masks_for_vision_model; VisionSpec.image_block_mask);
then (transformers integrations/sdpa_attention.py) GQA k and v are repeated to every query head (`use_gqa_in_sdpa`
needs no mask) and SDPA, which cannot run FlashAttention with a mask (aten/src/ATen/native/transformers/cuda/
sdp_utils.cpp), runs the memory-efficient kernel, which saves the mask converted to an additive bias in the query
dtype per layer (attention.cpp `convert_boolean_attn_mask`: at::where, b × 1 × s × s_kv; `preprocess_mask` only
expands it over the heads). Its logsumexp is FlashAttention's size.

transformers' own flash_attention_2 needs no mask: it unpads a padded batch and takes the window as an argument;
that is attention "flash". Measured on an H200 (tests/golden_gpu/h200): a padded Llama-3.2-1B batch to the byte, and
Gemma-3-1B's 22 local layers at s = 4096 (transformers and Liger) within 0.1%.
"""
from __future__ import annotations

from calculator.model.spec import ModelSpec


def masked_layers(m: ModelSpec, w, layers: range) -> int:
    """Decoder layers of `layers` whose SDPA call gets a mask (ModelSpec.sdpa_mask_on)."""
    if w.attention != "sdpa":
        return 0
    if w.padded_batch:
        return len(layers)
    return sum(1 for i in layers if m.sdpa_mask_on(i, w))


def mask_tensors(m: ModelSpec, w, layers: range) -> int:
    """Distinct 4-D boolean masks transformers builds for `layers` (one per attention type that needs one: the
    sliding-window mask, the full one of a padded batch or with images): with full recompute each is an input of
    every checkpointed layer, saved once."""
    kinds = {m.layer_is_sliding(i) for i in layers if m.sdpa_mask_on(i, w)}
    return len(kinds)


def mask_reason(m: ModelSpec, w) -> str:
    """Why SDPA gets a mask, for the term's note."""
    if w.padded_batch:
        return "padded batch"
    if w.images_per_sample and m.vision is not None and m.vision.image_block_mask != "none":
        return f"images' bidirectional blocks ({m.vision.image_block_mask} layers)"
    return f"sliding-window layers ({m.sliding_window:,} ≤ {w.seq_len:,})"


def mask_bytes(d) -> int:
    """One 4-D boolean mask: 1 B × b × s × s_kv."""
    return d.b * d.s * d.s_kv


def repeated_kv_extra(d, m: ModelSpec) -> int:
    """What `repeat_kv` adds to the saved k and v: e·T·2·(qd − kvd). None with one KV head per rank (MQA): the
    expand + reshape of a single head is a view, no copy (measured: Gemma-3-1B); none for MLA (no GQA)."""
    if m.is_mla or d.kv <= 1 or d.kv == d.a:
        return 0
    return d.e * d.T * 2 * (d.qd - d.kvd)


def masked_layer_extra(d, m: ModelSpec, w) -> int:
    """What one masked layer keeps beyond the FlashAttention kernel: the bias e·b·s·s_kv (recomputed with the
    kernel under selective recompute) and the repeated k, v, less o_proj's copy of the kernel's output that the
    unmasked layer keeps (output_copy, mla_output_copy): the memory-efficient kernel writes (b, s, a, d)
    (meta__efficient_attention_forward), which transformers' transpose(1, 2).contiguous() leaves uncopied (traced:
    Phi-3 with a window of 8 at s = 16, SDPA, 1,024 B = e·T·qd over before)."""
    bias = 0 if w.recompute == "selective" else d.e * d.b * d.s * d.s_kv
    return bias + repeated_kv_extra(d, m) - unmasked_output_copy(d, m, w)


def recomputed_layer_extra(d, m: ModelSpec, w, masked: int, n_layers: int) -> int:
    """What the largest recomputed layer of a stage adds when `masked` of its `n_layers` layers get a mask: a masked
    layer's extra when every layer is masked, else the larger of a masked and an unmasked layer (never below 0)."""
    extra = masked_layer_extra(d, m, w)
    return extra if masked == n_layers else max(0, extra)


def unmasked_output_copy(d, m: ModelSpec, w) -> int:
    """o_proj's copy of the attention output an unmasked layer keeps (output_copy or mla_output_copy)."""
    return mla_output_copy(d, m, w) if m.is_mla else output_copy(d, m, w)


def output_copy(d, m: ModelSpec, w) -> int:
    """o_proj's own copy of the attention output when q reaches a FlashAttention kernel contiguous in (b, a, s, d)
    (ModelSpec.rope_concat), e·T·qd beside the output the kernel keeps. The kernel allocates its output like q
    (PyTorch's _scaled_dot_product_flash_attention: empty_like(query), torch/_meta_registrations.py; the CPU kernel
    too, traced; flash-attn 2.8.3's mha_fwd: empty_like(q), csrc/flash_attn/flash_api.cpp), so transformers'
    attn_output.transpose(1, 2).contiguous() (integrations/sdpa_attention.py) or .reshape (flash) copies it. None
    under eager (its matmul output is always copied: the o_proj input counted anyway), selective recompute (the
    kernel's output is recomputed), a padded batch (SDPA's efficient kernel writes (b, s, a, d),
    meta__efficient_attention_forward; flash_attention_2 unpads into new tensors), or a LoRA that leaves o_proj
    frozen (lora_targets qv: a frozen linear keeps no input, so the copy dies after o_proj; traced,
    tests/golden phi-3-mini-4k lora-qv flash)."""
    if not m.rope_concat or w.attention == "eager" or w.recompute == "selective" or w.padded_batch or \
            _o_proj_frozen(w):
        return 0
    return d.e * d.T * d.qd


def _o_proj_frozen(w) -> bool:
    """A LoRA of q and v only: o_proj's weight and adapters never need its input, so nothing keeps the copy."""
    return w.finetune != "full" and w.lora_targets == "qv"


def mla_output_copy(d, m: ModelSpec, w) -> int:
    """o_proj's own copy of an MLA layer's SDPA output, e·T·a·v_head_dim beside the output the kernel keeps, when SDPA
    runs its FlashAttention kernel: q·k and v head dims equal (sdp_utils.cpp check_head_dim_size_flash; else the
    memory-efficient kernel runs), no mask (not a padded batch), not recomputed (selective). DeepSeek's MLA
    (transformers models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3Attention.forward, and deepseek_v2's) builds
    q as torch.cat((q_pass, q_rot), dim=-1), contiguous in (b, a, s, d); the flash kernel allocates its output like
    q (torch/_meta_registrations.py meta__scaled_dot_product_flash_attention: empty_like(query); the CPU kernel too,
    traced by validation/architectures), so transformers' attn_output.transpose(1, 2).contiguous()
    (integrations/sdpa_attention.py) copies it. The efficient kernel writes (b, s, a, d) (meta__efficient_attention_
    forward), which the transpose makes contiguous without a copy."""
    if (not m.is_mla or w.attention != "sdpa" or w.recompute == "selective" or w.padded_batch
            or m.head_size != m.v_head_size or _o_proj_frozen(w)):
        return 0
    return d.e * d.T * d.a * m.v_head_size


def narrow_v(d, m: ModelSpec, expanded: bool) -> int:
    """What v heads narrower than q/k's take from the q, k, v and o_proj input that activations.softmax_attention_saved
    counts at head_dim: v (repeat_kv-expanded under eager) and the core's output, e·T·(kv + a)·(head_dim −
    v_head_dim) (MiMo-V2-Flash: models/mimo_v2_flash/modeling_mimo_v2_flash.py MiMoV2FlashAttention; not MLA)."""
    if m.is_mla or m.v_head_size == m.head_size:
        return 0
    return d.e * d.T * ((d.a if expanded else d.kv) + d.a) * (m.head_size - m.v_head_size)
