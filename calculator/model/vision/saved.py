"""Bytes a vision encoder block saves for backward, for the patches of one tower call (one micro-batch's images).

Ported from the transformers 5.23 modules named in calculator/model/vision/spec.py and held byte-exact to a trace of
the real modules on the CPU (tests/model/test_vision.py, validation/trace/saved_by_module.py). e: bytes of the
activation dtype; N: patches in the call; hv, fv, a: the tower's hidden and MLP widths and heads.

    LayerNorm(w)  e·N·w + st·N   (its input, and mean + rstd per row: st = 8 on CUDA (fp32), 2e on the CPU)
    RMSNorm(w)    (4 + e)·N·w + 4·N   (Qwen2.5-VL's and Pixtral's: the fp32 input, the normalised input, fp32 rstd)
    SigLIP / Llama 4 / SmolVLM  2·LN(hv) + 3e·N·hv (q/k/v, o and fc1 inputs) + 3e·N·hv (q, k, v) + 2e·N·fv (GELU
                        in, out)
    Qwen3-VL / Qwen3.5  2·LN(hv) + 3e·N·hv + 3e·N·hv (the fused qkv output, kept whole by v) + 2e·N·hv (rotated
                        q, k) + 2e·N·fv
    Qwen2-VL            2·LN(hv) + 3e·N·hv + 3e·N·hv + 2e·N·hv + 3e·N·fv (QuickGELU: fc1 out, its sigmoid, fc2 in)
    Qwen2.5-VL          2·RMS(hv) + 2e·N·hv + 3e·N·hv + 2e·N·hv + e·N·hv (proj input) + 4e·N·fv (SwiGLU)
    GLM-4V              as Qwen2.5-VL (its SwiGLU fv = out_hidden_size wide)
    Pixtral             2·RMS(hv) + 3e·N·hv + 3e·N·hv + 4e·N·fv (SwiGLU)
    InternVL            2·LN(hv) (or 2·RMS(hv)) + 3e·N·hv (q/k/v, projection_layer and fc1 inputs) + 3e·N·hv (q, k,
                        v) + 2e·N·hv (the attention and MLP outputs lambda_1 and lambda_2 scale) + 2e·N·fv (GELU in,
                        out); with use_qk_norm + 2·RMS(hv) (q_norm and k_norm over the whole width)
    Gemma 4             4·G(hv) + q_norm, k_norm: 2·(8·N·hv + 8·N·a + 4·d) + v_norm (no weight): 4·N·hv + 8·N·a
                        + 3e·N·hv (q/k/v, o and gate/up inputs) + 3e·N·hv (rotated q, k; v) + 4e·N·fv (GELU-tanh
                        gated MLP), with G(w) = 8·N·w + 8·N + 4·w: Gemma4RMSNorm keeps the fp32 copy of its input
                        and its normalised product, the fp32 mean square and its pow(−0.5), and weight.float(); the
                        rotary multiplies keep only cos and sin (shared: the first block's, 2e·N·d)
plus the attention core over each group of n tokens that attend to each other:
    eager   Σ (4 + e)·a·n² (fp32 softmax and its model-dtype copy; Llama 4's and InternVL's vision softmax stays
            in the model dtype: Σ e·a·n²)
    flash   Σ 4·a·n (FlashAttention-2 keeps q, k, v, the output and an fp32 logsumexp: no n² term) — the GPU path
            of attn_implementation="flash_attention_2", read from flash-attn's saved tensors, not traced here
    sdpa    as flash (measured on the CPU: SDPA's flash kernel keeps the output and an fp32 logsumexp); the Qwen
            towers then split q/k/v per image (or window) and torch.cat the outputs: + e·N·hv
Gemma 4 under SDPA: + Σ e·n² per block (each call turns the boolean padding mask into a float one, which SDPA keeps;
eager adds the encoder's float mask, saving nothing; counted even in the rare call with no padding, where transformers
passes no mask). N counts the padded patches: every image runs the processor's whole budget (tokens.py); flash's
Σ 4·a·n too, though FlashAttention-2 unpads to the real patches (≤ 4·a bytes per padding patch over).
The groups: one per image (Qwen3, SigLIP, Gemma 4), per tile (Llama 4), per attention window in Qwen2.5-VL's
windowed blocks (full per image in fullatt_block_indexes), and for Pixtral under eager / SDPA all images of the call
as ONE sequence with a block-diagonal mask ((ΣN)² scores; flash attends per image).
"""
from __future__ import annotations

from calculator.model.vision.spec import QWEN_KINDS, VisionSpec
from calculator.model.vision.tokens import image_tokens, qwen_windows, square_grid

CUDA_LN_STATS = 8  # nn.LayerNorm's fp32 mean and rstd per row on CUDA


def _ln(n: int, width: int, e: int, st: int) -> int:
    return e * n * width + st * n


def _rms(n: int, width: int, e: int) -> int:
    return (4 + e) * n * width + 4 * n


def _gemma_rms(n: int, width: int) -> int:
    """Gemma4RMSNorm (modeling_gemma4.py) on a bf16 / fp16 input: fp32 input and normalised copies, fp32 mean square
    and its pow(−0.5) per row, weight.float()."""
    return 8 * n * width + 8 * n + 4 * width


def attention_groups(v: VisionSpec, grids: tuple[tuple[int, int], ...], sequences: tuple[int, ...], block: int,
                     attention: str) -> tuple[int, ...]:
    """The lengths of the token groups that attend to each other in encoder block `block` for one call: `sequences`
    per image (or tile), `grids` the (rows, cols) patch grid of each image (Qwen2.5-VL's windows need it)."""
    if v.kind == "qwen2_5_vl" and block not in v.full_attention_blocks and v.window_size:
        return tuple(n for gh, gw in grids for n in qwen_windows(v, gh, gw))
    if v.kind == "pixtral" and attention != "flash":
        return (sum(sequences),)
    return sequences


def block_saved_bytes(v: VisionSpec, groups: tuple[int, ...], e: int, attention: str,
                      ln_stats: int = CUDA_LN_STATS) -> int:
    """Bytes one encoder block saves for backward for a call whose attention groups are `groups` (their sum: the
    call's patches)."""
    n, hv, fv, a, k = sum(groups), v.hidden_size, v.intermediate_size, v.num_heads, v.kind
    if attention == "eager":
        per_score = e if k in ("llama4", "internvl") else 4 + e
        core = sum(per_score * a * g * g for g in groups)
    else:
        core = sum(4 * a * g for g in groups)
        if k == "gemma4" and attention == "sdpa":
            core += sum(e * g * g for g in groups)  # the float copy of the boolean padding mask, per call
        if k in QWEN_KINDS + ("glm4v", "kimi") and attention == "sdpa":
            core += e * n * hv  # the per-image (or per-window) outputs torch.cat'ed into a new tensor
    if k == "kimi":  # q, k, v apart: their input, the rotated q and k (fp32 in the rotation, kept in the model
        # dtype), v, proj's and fc1's inputs
        return 2 * _ln(n, hv, e, ln_stats) + 6 * e * n * hv + 2 * e * n * fv + core
    if k in ("qwen2_5_vl", "glm4v"):  # GLM-4V's block: Qwen2.5-VL's without the biases (fv = out_hidden_size)
        return 2 * _rms(n, hv, e) + 8 * e * n * hv + 4 * e * n * fv + core
    if k == "qwen3_vl":
        return 2 * _ln(n, hv, e, ln_stats) + 8 * e * n * hv + 2 * e * n * fv + core
    if k in ("qwen2_vl", "clip"):  # QuickGELU keeps fc1's output and its sigmoid, fc2 the product (CLIP: SigLIP's
        # attention; Qwen2-VL: Qwen3-VL's, 2e·N·hv more for its rotated q and k)
        return 2 * _ln(n, hv, e, ln_stats) + (6 if k == "clip" else 8) * e * n * hv + 3 * e * n * fv + core
    if k == "pixtral":
        return 2 * _rms(n, hv, e) + 6 * e * n * hv + 4 * e * n * fv + core
    if k == "internvl":
        norms = 2 * (_rms(n, hv, e) if v.rms_norm else _ln(n, hv, e, ln_stats)) + (2 * _rms(n, hv, e) if v.qk_norm
                                                                                     else 0)
        return norms + 8 * e * n * hv + 2 * e * n * fv + core
    if k == "gemma4":
        qkv_norms = 2 * (8 * n * hv + 8 * n * a + 4 * v.head_dim) + 4 * n * hv + 8 * n * a
        return 4 * _gemma_rms(n, hv) + qkv_norms + 6 * e * n * hv + 4 * e * n * fv + core
    return 2 * _ln(n, hv, e, ln_stats) + 6 * e * n * hv + 2 * e * n * fv + core  # siglip, llama4


def _rope(v: VisionSpec, n: int, e: int) -> int:
    """The rotary cos and sin the first block saves (shared by the others): fp32 in the Qwen towers, the model
    dtype in Pixtral's; Llama 4's complex frequencies are a buffer-derived constant the trace does not count."""
    if v.kind in QWEN_KINDS + ("glm4v",):
        return 2 * 4 * n * v.head_dim
    return 2 * e * n * v.head_dim if v.kind in ("pixtral", "gemma4") else 0


def outside_saved_bytes(v: VisionSpec, images: int, per_image: tuple[int, ...], merged: int, e: int, attention: str,
                        ln_stats: int = CUDA_LN_STATS) -> int:
    """What the trained tower saves outside its blocks for one call of `images` equal images (each of `per_image`
    encoder sequences and `merged` projector tokens): the patch embedding's input, positions, the rotary tables, final
    norms, and the projector (merger, DeepStack mergers, pooling, adapter), traced like the blocks."""
    hv, c, p = v.hidden_size, v.num_channels, v.patch_size
    n = images * sum(per_image)  # encoder tokens of the call
    m_tok = images * merged  # projector output tokens
    k = v.kind
    if k == "glm4v":  # conv input, post_conv_layernorm, the rotary tables; the position table's fp32 copy and the
        # sampling grid grid_sample keeps (fp32, 2 per patch); post_layernorm, the downsample's input; the merger: proj,
        # post_projection_norm and GELU inputs, gate/up input, SiLU input and output, up output, down input
        o, ctx = v.out_hidden_size, v.merger_intermediate_size
        return e * n * c * v.temporal_patch_size * p * p + 2 * _rms(n, hv, e) + _rope(v, n, e) + \
            4 * v.num_position_embeddings * hv + 8 * n + e * n * hv + 4 * e * m_tok * o + ln_stats * m_tok + \
            4 * e * m_tok * ctx
    if k in QWEN_KINDS:
        x = e * n * c * v.temporal_patch_size * p * p + _rope(v, n, e) + 3 * e * n * hv  # conv input; merger MLP
        if k == "qwen2_vl":  # the merger's LayerNorm ln_q
            return x + _ln(n, hv, e, ln_stats)
        if k == "qwen2_5_vl":  # window_index and its inverse (int64 per merged unit); RMSNorm ln_q
            return x + 16 * (n // v.spatial_merge_size ** 2) + _rms(n, hv, e)
        x += 48 * n + _ln(n, hv, e, ln_stats)  # 4 bilinear position indices (int64) and weights (fp32) per patch
        return x + len(v.deepstack_layers) * (3 * e * n * hv + ln_stats * (n // v.spatial_merge_size ** 2))
    if k == "siglip":  # conv input, post_layernorm, the pool's input, Gemma RMSNorm (fp32 in/out, rstd, 1 + w), matmul
        return e * n * c * p * p + _ln(n, hv, e, ln_stats) + e * n * hv + 8 * m_tok * hv + 4 * m_tok + 4 * hv + \
            e * m_tok * hv
    if k == "paligemma":  # conv input, post_layernorm, the projector linear's input
        return e * n * c * p * p + _ln(n, hv, e, ln_stats) + e * n * hv
    if k == "gemma4":  # Gemma4VisionModel: input_proj's input, x/y positions (int64) and the padding mask, the rotary
        # tables; the pooler's fp32 one-hot weights (budget × max_soft_tokens per image) and its output mask;
        # std_scale.float(); embed_vision's weightless RMSNorm (fp32 input, 2 fp32 per row) and its linear's input
        pooled = images * v.tokens_per_image
        return e * n * c * p * p + 17 * n + _rope(v, n, e) + 4 * n * v.tokens_per_image + pooled + 4 * hv + \
            4 * m_tok * hv + 8 * m_tok + e * m_tok * hv
    if k == "internvl":  # per tile: the conv's input (no CLS), the final LayerNorm (use_mean_pooling False); the
        # projector's LayerNorm over hv·m², linear_1's input, GELU's input, linear_2's input
        n_p, hm = n - images * len(per_image), v.merged_width
        return e * n_p * c * p * p + (_ln(n, hv, e, ln_stats) if v.final_norm else 0) + 2 * e * m_tok * hm + \
            ln_stats * m_tok + 2 * e * m_tok * v.out_hidden_size
    if k == "kimi":  # the conv's input; F.embedding_bag's bicubic taps (16 int64 indices and 16 weights a patch) and
        # its two int64 per bag, the frame index; the rotary tables (fp32); final_layernorm; the merge's gather index;
        # the projector's pre_norm, in_proj's and GELU's inputs, out_proj's input (traced)
        return e * n * c * p * p + 16 * (8 + e) * n + 24 * n + 2 * 4 * n * v.head_dim + _ln(n, hv, e, ln_stats) + \
            8 * n + _ln(n, hv, e, ln_stats) + 3 * e * m_tok * v.merged_width
    if k == "onevision":  # the conv's input (post_layernorm's output unread: freed); the projector: linear_1's input
        # (the chosen hidden state, or the layers' torch.cat), GELU's and linear_2's inputs
        return e * images * len(per_image) * c * v.image_size ** 2 + e * m_tok * hv * v.feature_layers + \
            2 * e * m_tok * v.out_hidden_size
    if k in ("aya", "cohere2"):  # the conv's input; Aya: post_layernorm's output is not what the projector reads
        # (freed), its projector's LayerNorm over hv·s² and linear_1's input; Command A Vision: post_layernorm, and
        # linear_1's input (the pixel-shuffled rows, copied); then linear_1's output whole (SiLU keeps its gate half,
        # the product its other half, both views), SiLU's output, linear_2's input
        x = e * images * len(per_image) * c * v.image_size ** 2 + 2 * e * m_tok * v.merger_intermediate_size
        if k == "aya":
            return x + 2 * e * m_tok * v.merged_width + ln_stats * m_tok
        return x + _ln(n, hv, e, ln_stats) + e * m_tok * v.merged_width
    if k == "clip":  # the conv's input, pre_layrnorm (with the CLS); the projector: linear_1's input (the chosen
        # hidden states without their CLS: F.linear's reshape copies the sliced view; several layers' torch.cat),
        # GELU's and linear_2's inputs
        vip = (e * m_tok * hv * v.feature_layers + ln_stats * m_tok) if v.projector_norm else 0  # its LayerNorm
        return e * images * len(per_image) * c * v.image_size ** 2 + _ln(n, hv, e, ln_stats) + vip + \
            e * m_tok * hv * v.feature_layers + 2 * e * m_tok * v.out_hidden_size
    if k == "smolvlm":  # per tile: the conv's input (the whole tile², past the last patch too), the int64 position ids
        # the embedding keeps, post_layernorm; the connector's linear input (the pixel-shuffled hv·s² rows)
        tiles = images * len(per_image)
        return tiles * e * c * v.image_size ** 2 + 8 * n + _ln(n, hv, e, ln_stats) + e * m_tok * v.merged_width
    if k == "llama4":  # per tile: unfolded patches, pre/post LayerNorm (with CLS), adapter fc1 in, GELU/fc2, GELU/proj
        n_p = n - images * len(per_image)  # the CLS token is dropped before the adapter
        return e * n_p * c * p * p + 2 * _ln(n, hv, e, ln_stats) + e * n_p * hv + e * m_tok * 2 * (
            v.projector_input_dim + v.projector_output_dim)
    mask = e * n * n if attention == "sdpa" else 0  # Pixtral's block-diagonal mask, kept once by SDPA
    # Mistral 3's projector: its RMSNorm and the patch merger's input; Pixtral-12B's (LLaVA's): neither
    mistral3 = 0 if v.llava_projector else _rms(n, hv, e) + e * n * hv
    return e * n * c * p * p + _rope(v, n, e) + _rms(n, hv, e) + mistral3 + \
        e * m_tok * hv * v.feature_layers + 2 * e * m_tok * v.out_hidden_size + mask


def tower_saved_bytes(v: VisionSpec, images: int, px: int, e: int, attention: str,
                      ln_stats: int = CUDA_LN_STATS) -> tuple[int, int]:
    """(every block's, the rest's) bytes a trained tower saves for one call of `images` square images of `px`
    pixels (a micro-batch's images: transformers runs them through the tower in one call)."""
    it = image_tokens(v, px, px)
    sequences = it.sequences * images
    grids = (square_grid(v, px),) * images if v.kind == "qwen2_5_vl" else ()
    full = sum(1 for i in set(v.full_attention_blocks) if i < v.num_layers) if v.kind == "qwen2_5_vl" else 0
    per = [block_saved_bytes(v, attention_groups(v, grids, sequences, i, attention), e, attention, ln_stats)
           for i in ((v.full_attention_blocks[0], -1) if full else (-1,))]  # -1: a block outside the full ones
    blocks = full * per[0] + (v.trained_layers - full) * per[-1]  # LLaVA: the blocks up to its feature layer
    return blocks, outside_saved_bytes(v, images, it.sequences, it.merged, e, attention, ln_stats)


def forward_peak_bytes(v: VisionSpec, images: int, px: int, e: int, attention: str) -> int:
    """≈ the most a forward pass of the tower without autograd holds at once (a frozen tower while training, or
    generate()'s prefill): the processor's fp32 pixels, and in the busiest block the residual stream and its normed
    copy plus, per phase, q, k, v and the attention output (Qwen: the fp32 rotary copies of q and k, Gemma 4: its
    norms' fp32 copies; Gemma 4 eager / SDPA: its padding mask, n² per image in the model dtype; eager: the
    scores and their softmax over each group; Pixtral eager / SDPA: its (ΣN)² mask) or the MLP's hidden tensors
    (gated or QuickGELU: 3·fv, else 2·fv). An estimate of the live tensors, not a trace: it only matters under eager
    attention, where the scores dominate."""
    it = image_tokens(v, px, px)
    sequences = it.sequences * images
    n, hv, fv, a, k = sum(sequences), v.hidden_size, v.intermediate_size, v.num_heads, v.kind
    grids = (square_grid(v, px),) * images if k == "qwen2_5_vl" else ()
    block = v.full_attention_blocks[0] if k == "qwen2_5_vl" and v.full_attention_blocks else 0
    groups = attention_groups(v, grids, sequences, block, attention)
    attn = 6 * e * n * hv + (8 * n * hv if k in QWEN_KINDS + ("glm4v", "gemma4") else 0)
    if attention == "eager":
        attn += sum((2 * e if k in ("llama4", "internvl") else 4 + e) * a * g * g for g in groups)
    else:
        attn += 4 * a * n
    if k == "pixtral" and attention != "flash":
        attn += e * n * n
    if k == "gemma4" and attention != "flash":  # the padding mask, as a float tensor per image
        attn += sum(e * g * g for g in groups)
    mlp = 2 * e * n * hv + (3 if k in ("qwen2_vl", "qwen2_5_vl", "glm4v", "pixtral", "gemma4") else 2) * e * n * fv
    return 4 * n * v.num_channels * v.temporal_patch_size * v.patch_size ** 2 + max(attn, mlp)
