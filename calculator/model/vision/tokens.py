"""One image of H × W pixels → the encoder's sequences (patches) → the language model's tokens, per family, as the
transformers 5.23 image processors and processors compute them (ported in our own words; tests/model/test_vision.py
runs the real PIL processors where they run without torchvision).

    Qwen2-VL / Qwen2.5-VL / Qwen3-VL / Qwen3.5  qwen2_vl/image_processing_pil_qwen2_vl.py smart_resize: each side
        rounded to a multiple of P·m, scaled down (floor) into max_pixels or up (ceil) into min_pixels;
        N = (H'/P)·(W'/P) patches of C·temporal·P² values (a still image is repeated to 2 frames: grid_t = 1); the
        merger turns each m×m group into one token: N/m², plus <|vision_start|> and <|vision_end|>
        (processing_qwen2_vl.py).
    GLM-4.1V / 4.5V / 4.6V  glm4v/image_processing_pil_glm4v.py smart_resize: as Qwen's, a side under P·m scaled up
        first and the area counted over 2 frames; the processor wraps the N/m² <|image|> tokens in
        <|begin_of_image|> … <|end_of_image|> (processing_glm4v.py).
    Gemma 3  image_processing_pil_gemma3.py: every image resized to image_size² (pan-and-scan off, the default):
        N = (image_size/P)² = 4096; Gemma3MultiModalProjector average-pools to mm_tokens_per_image = 256;
        processing_gemma3.py writes "\\n\\n<start_of_image>" + 256 × <image_soft_token> + "<end_of_image>\\n\\n"
        (each "\\n\\n" one token): 260 tokens.
    PaliGemma 1 / 2  siglip/image_processing_pil_siglip.py: every image resized to image_size² (224, 448 or 896);
        N = (image_size/P)² patches, each one token (no pooling); processing_paligemma.py build_string_from_input
        writes image_seq_length × <image> before the bos and the prefix: N tokens.
    Llama 4  image_processing_llama4.py get_best_fit over canvases of a×b tiles (a·b ≤ max_patches = 16) of
        image_size² (336²): the smallest upscale, else the least downscale, ties to the smallest area; a global tile
        is added when a·b > 1; each tile is one encoder sequence of (336/14)² + 1 (CLS) = 577; pixel shuffle
        (ratio 0.5) leaves 144 <|patch|> tokens per tile; processing_llama4.py _prompt_split_image adds
        <|image_start|>, <|image|>, <|image_end|> and a separator after each tile (x) and each row (y).
    Mistral 3 (Pixtral)  pixtral/image_processing_pil_pixtral.py: scaled down (never up) so the longest side ≤
        longest_edge, each side rounded up to a multiple of P·m (processing_pixtral.py passes patch_size·m);
        N = (H/P)·(W/P); the patch merger leaves (H/(P·m))·(W/(P·m)) tokens, and the processor adds one
        [IMG_BREAK] per row ([IMG_END] after the last): rows·(cols + 1).
    Gemma 4  gemma4/image_processing_pil_gemma4.py get_aspect_ratio_preserving_size: up or down to the patch
        budget max_patches = max_soft_tokens·k² (280·9 = 2520), aspect kept, each side floored to a multiple of
        k·P (48) (a side that floors to 0 becomes k·P, the other ⌊long/short⌋·k·P, at most (max_patches/k²)·k·P);
        every image is padded to max_patches patches, which the encoder runs (the padding masked in attention);
        the pooler averages each k×k group: real patches / k² soft tokens; processing_gemma4.py
        replace_image_token writes <boi> + soft tokens + <eoi>.
    InternVL  got_ocr2/image_processing_pil_got_ocr2.py (InternVL's processor, crop_to_patches): the a×b canvas of
        image_size² tiles (a·b ≤ max_patches = 12) whose aspect ratio is closest to the image's, a tie going to the
        later (larger) canvas while the image's area exceeds half the canvas's; a thumbnail tile is added when
        a·b > 1; each tile is one encoder sequence of (image_size/P)² + 1 (CLS), the CLS dropped and the pixel
        shuffle leaving (image_size/P)²/m² = 256 tokens; processing_internvl.py wraps each image's tiles' tokens
        in <img> … </img>.
    Aya Vision  the tiles of InternVL's rule (GotOcr2ImageProcessor, crop_to_patches) of (image_size/P)² patches each (no
        CLS), the pixel shuffle leaving (image_size/P)²/s² tokens; processing_aya_vision.py counts tokens·tiles + 3 +
        (tiles − 1): its start, end and global markers and a TILE_i before each other tile.
    Command A Vision  cohere2_vision/image_processing_cohere2_vision.py get_optimal_tiled_canvas: of the a×b
        canvases of image_size² tiles (a·b ≤ 12, by tile count), the one needing the least upscaling, else the least
        downscaling (the first on a tie), and a thumbnail beside several; processing_cohere2_vision.py writes <boi>,
        each tile's tokens and a line break, <eoi>.
    SmolVLM / Idefics3  smolvlm/image_processing_pil_smolvlm.py: the longest side rescaled to size.longest_edge
        (4 × the tile: what the HuggingFaceTB and Idefics3 checkpoints ship, max_image_size = the tower's
        image_size), at most 4096, the shorter side even; each side then rounded up to whole tiles
        (resize_for_vision_encoder) and split into rows × cols tiles plus a global tile when larger than one;
        every tile (image_size/P)² patches, the pixel shuffle leaving (image_size/P)²/s² tokens;
        processing_smolvlm.py writes <fake_token_around_image><row_r_col_c> before each tile's tokens, a newline
        after each row, and "\n<fake_token_around_image><global-img>" + tokens + "<fake_token_around_image>" (the
        last row's newline and this one merge into one "\n\n" token); an unsplit image: fake, global, tokens, fake.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

from calculator.model.vision.spec import QWEN_KINDS, VisionSpec


class ImageTokens(NamedTuple):
    sequences: tuple[int, ...]  # the encoder's sequence length of each piece of the image (Llama 4: each tile)
    merged: int  # tokens the projector hands the language model (image features)
    lm_tokens: int  # tokens the image adds to the language model's sequence (features + the processor's markers)

    @property
    def patches(self) -> int:
        return sum(self.sequences)


def smart_resize(h: int, w: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2VLImageProcessor's resize: sides rounded to multiples of `factor`, the area brought into bounds."""
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb = max(factor, math.floor(h / beta / factor) * factor)
        wb = max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def glm_smart_resize(h: int, w: int, factor: int, min_pixels: int, max_pixels: int,
                     frames: int = 2) -> tuple[int, int]:
    """Glm4vImageProcessor's resize (glm4v/image_processing_pil_glm4v.py smart_resize, num_frames = temporal_factor
    = 2 for a still image): a side below `factor` scaled up first, the area of 2 frames brought into bounds."""
    if h < factor or w < factor:
        scale = max(factor / h, factor / w)
        h, w = int(h * scale), int(w * scale)
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if frames * hb * wb > max_pixels:
        beta = math.sqrt(frames * h * w / max_pixels)
        hb = max(factor, math.floor(h / beta / factor) * factor)
        wb = max(factor, math.floor(w / beta / factor) * factor)
    elif frames * hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (frames * h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def llama4_canvas(h: int, w: int, tile: int, max_tiles: int) -> tuple[int, int]:
    """(rows, cols) of tiles get_best_fit picks for an h × w image (resize_to_max_canvas False)."""
    options = [(a, n // a) for n in range(max_tiles, 0, -1) for a in range(1, n + 1) if n % a == 0]
    scales = [(min(b * tile / w, a * tile / h), a, b) for a, b in options]
    up = [s for s, _, _ in scales if s >= 1]
    chosen = min(up) if up else max(s for s, _, _ in scales)
    return min(((a * b, a, b) for s, a, b in scales if s == chosen))[1:]


def pixtral_size(h: int, w: int, longest_edge: int, unit: int) -> tuple[int, int]:
    """PixtralImageProcessor's resize: scaled down into longest_edge, sides rounded up to multiples of `unit`."""
    ratio = max(h / longest_edge, w / longest_edge)
    if ratio > 1:
        h, w = int(math.floor(h / ratio)), int(math.floor(w / ratio))
    return (h - 1) // unit * unit + unit, (w - 1) // unit * unit + unit


def gemma4_size(h: int, w: int, patch: int, max_patches: int, k: int) -> tuple[int, int]:
    """Gemma4ImageProcessor's get_aspect_ratio_preserving_size (the patch budget, sides multiples of k·P)."""
    factor = math.sqrt(max_patches * patch * patch / (h * w))
    side = k * patch
    th, tw = int(math.floor(factor * h / side)) * side, int(math.floor(factor * w / side)) * side
    longest = (max_patches // (k * k)) * side
    if th == 0:
        th, tw = side, min(int(math.floor(w / h)) * side, longest)
    elif tw == 0:
        tw, th = side, min(int(math.floor(h / w)) * side, longest)
    return th, tw


def internvl_canvas(h: int, w: int, tile: int, max_tiles: int) -> tuple[int, int]:
    """(columns, rows) of tiles GotOcr2ImageProcessor's get_optimal_tiled_canvas picks (min_patches 1): the
    arrangements by tile count, the closest aspect ratio, a tie to the later one while h·w > ½·tile²·a·b."""
    options = sorted(((c, r) for c in range(1, max_tiles + 1) for r in range(1, max_tiles + 1) if c * r <= max_tiles),
                     key=lambda g: g[0] * g[1])
    best, best_diff = (1, 1), float("inf")
    for c, r in options:
        diff = abs(w / h - c / r)
        if diff < best_diff:
            best, best_diff = (c, r), diff
        elif diff == best_diff and h * w > 0.5 * tile * tile * c * r:
            best = (c, r)
    return best


def cohere2_canvas(h: int, w: int, tile: int, max_tiles: int) -> tuple[int, int]:
    """(columns, rows) of Cohere2VisionImageProcessor's canvas for an h × w image."""
    options = sorted(((c, r) for c in range(1, max_tiles + 1) for r in range(1, max_tiles + 1) if c * r <= max_tiles),
                     key=lambda g: g[0] * g[1])
    scales = [min(c * tile / w, r * tile / h) for c, r in options]
    if all(s < 1 for s in scales):
        return options[scales.index(max(scales))]
    up = [s if s >= 1 else 1e10 for s in scales]
    return options[up.index(min(up))]


def best_resolution(h: int, w: int, pins) -> tuple[int, int]:
    """image_processing_utils.select_best_resolution: the (height, width) canvas keeping the most of the image's
    pixels, then wasting the fewest."""
    best, most, waste = pins[0], 0, float("inf")
    for ph, pw in pins:
        scale = min(pw / w, ph / h)
        effective = min(int(w * scale) * int(h * scale), w * h)
        if effective > most or (effective == most and ph * pw - effective < waste):
            best, most, waste = (ph, pw), effective, ph * pw - effective
    return best


def llava_next_tokens(v: VisionSpec, h: int, w: int) -> ImageTokens:
    """LLaVA-NeXT and -OneVision (llava_next/ and llava_onevision/processing_*.py _get_number_of_features,
    modeling_llava_next.py image_size_to_num_patches): the base image and the best canvas's (H/S)·(W/S) tiles of
    S = image_size, each one encoder sequence of (S/P)² + 1 (SigLIP: no CLS); the prompt keeps the base's (S/P)²
    tokens (the CLS under "full" too) and the canvas's rows × cols of patches less the padding its aspect ratio
    leaves, with one newline token per row."""
    s, p = v.image_size, v.patch_size
    bh, bw = best_resolution(h, w, v.grid_pinpoints)
    sh, sw = bh // s, bw // s
    rows, cols = (s // p) * sh, (s // p) * sw
    if w / h > cols / rows:
        rows -= (rows - int(round(h * (cols / w), 7))) // 2 * 2
    else:
        cols -= (cols - int(round(w * (rows / h), 7))) // 2 * 2
    n = (s // p) ** 2
    tiles = 1 + sh * sw
    if v.kind == "onevision":  # SigLIP: no CLS; anyres_max_N shrinks a grid past 1.1 × N tiles' worth (interpolate)
        ratio = math.sqrt(rows * cols / (v.max_tiles * n))
        if ratio > 1.1:
            rows, cols = int(rows // ratio), int(cols // ratio)
        return ImageTokens((n,) * tiles, tiles * n, rows * cols + rows + n)
    return ImageTokens((n + 1,) * tiles, tiles * (n + v.keeps_cls), rows * cols + rows + n + v.keeps_cls)


def kimi_size(h: int, w: int, patch: int, merge: int, max_patches: int, max_side: int) -> tuple[int, int]:
    """Kimi_K25ImageProcessor's navit_resize: never upscaled, scaled into the patch budget and max_side patches a
    side, then padded up to multiples of merge·patch; the padded (height, width)."""
    ph, pw = max(1.0, h // patch), max(1.0, w // patch)
    scale = min(1.0, math.sqrt(max_patches / (ph * pw)), max_side * patch / h, max_side * patch / w)
    nh, nw = min(max(1, int(h * scale)), max_side * patch), min(max(1, int(w * scale)), max_side * patch)
    f = merge * patch
    return (f - nh % f) % f + nh, (f - nw % f) % f + nw


SMOLVLM_MAX_SIDE = 4096  # image_processing_smolvlm.py MAX_IMAGE_SIZE


def smolvlm_grid(h: int, w: int, tile: int) -> tuple[int, int]:
    """(rows, cols) of the tiles SmolVLMImageProcessor splits an h × w image into ((0, 0): not split)."""
    longest = 4 * tile
    if w >= h:  # _resize_output_size_rescale_to_max_len, then _resize_output_size_scale_below_upper_bound
        w2, h2 = longest, int(longest / (w / h))
        h2 += h2 % 2
    else:
        h2, w2 = longest, int(longest * (w / h))
        w2 += w2 % 2
    h2, w2 = max(h2, 1), max(w2, 1)
    ratio = w2 / h2
    if w2 >= h2 and w2 > SMOLVLM_MAX_SIDE:
        w2, h2 = SMOLVLM_MAX_SIDE, int(SMOLVLM_MAX_SIDE / ratio)
    elif h2 > w2 and h2 > SMOLVLM_MAX_SIDE:
        h2, w2 = SMOLVLM_MAX_SIDE, int(SMOLVLM_MAX_SIDE * ratio)
    h2, w2 = max(h2, 1), max(w2, 1)
    ratio = w2 / h2  # resize_for_vision_encoder: whole tiles
    if w2 >= h2:
        w3 = math.ceil(w2 / tile) * tile
        h3 = math.ceil(int(w3 / ratio) / tile) * tile
    else:
        h3 = math.ceil(h2 / tile) * tile
        w3 = math.ceil(int(h3 * ratio) / tile) * tile
    if h3 > tile or w3 > tile:
        return (h3 - tile) // tile + 1, (w3 - tile) // tile + 1
    return 0, 0


@lru_cache(maxsize=1024)
def image_tokens(v: VisionSpec, height: int, width: int) -> ImageTokens:
    """Patches and language-model tokens of one image of `height` × `width` pixels."""
    p, m, k = v.patch_size, v.spatial_merge_size, v.kind
    if k in QWEN_KINDS + ("glm4v",):
        resize = glm_smart_resize if k == "glm4v" else smart_resize
        hh, ww = resize(height, width, p * m, v.min_pixels, v.max_pixels)
        n = (hh // p) * (ww // p)
        return ImageTokens((n,), n // (m * m), n // (m * m) + 2)
    if k == "siglip":
        return ImageTokens(((v.image_size // p) ** 2,), v.tokens_per_image, v.tokens_per_image + 4)
    if k == "paligemma":  # PaliGemmaProcessor: image_seq_length × <image> before the bos and the prefix, no markers
        return ImageTokens((v.tokens_per_image,), v.tokens_per_image, v.tokens_per_image)
    if k == "llama4":
        a, b = llama4_canvas(height, width, v.image_size, v.max_tiles)
        tiles = a * b + (1 if a * b > 1 else 0)
        per_tile = int((v.image_size // p) ** 2 * v.pixel_shuffle_ratio ** 2)
        markers = 3 + (a * b if a * b > 1 else 0)  # start, <|image|>, end; x separators + y separators
        return ImageTokens(((v.image_size // p) ** 2 + 1,) * tiles, tiles * per_tile, tiles * per_tile + markers)
    if k in ("internvl", "aya", "cohere2"):
        canvas = cohere2_canvas if k == "cohere2" else internvl_canvas
        c, r = canvas(height, width, v.image_size, v.max_tiles)
        tiles = c * r + (1 if c * r > 1 and v.thumbnail else 0)
        per_tile = (v.image_size // p) ** 2 // (m * m)
        if k in ("aya", "cohere2"):  # Aya: <|START_OF_IMG|>, TILE_i before each other tile, TILE_GLOBAL,
            # <|END_OF_IMG|>; Command A Vision: <boi>, a line break after each tile, <eoi>
            return ImageTokens(((v.image_size // p) ** 2,) * tiles, tiles * per_tile, tiles * (per_tile + 1) + 2)
        return ImageTokens(((v.image_size // p) ** 2 + 1,) * tiles, tiles * per_tile, tiles * per_tile + 2)
    if k in ("clip", "onevision") and v.grid_pinpoints:
        return llava_next_tokens(v, height, width)
    if k == "kimi":  # one packed sequence of the padded patches; the 2 × 2 merge; <|media_pad|> per token, no markers
        hh, ww = kimi_size(height, width, p, m, v.max_patches, v.max_side_patches)
        n = (hh // p) * (ww // p)
        return ImageTokens((n,), n // (m * m), n // (m * m))
    if k == "onevision":  # a SigLIP tower in a llava config: every image resized to image_size², no CLS
        n = (v.image_size // p) ** 2
        return ImageTokens((n,), n, n)
    if k == "clip":  # CLIPImageProcessor: shortest side to image_size, centre crop; CLS dropped unless "full"
        n = (v.image_size // p) ** 2
        return ImageTokens((n + 1,), n + v.keeps_cls, n + v.keeps_cls)
    if k == "smolvlm":
        rows, cols = smolvlm_grid(height, width, v.image_size)
        n, per = (v.image_size // p) ** 2, (v.image_size // p) ** 2 // (m * m)
        tiles = rows * cols + 1
        markers = 3 + (2 * rows * cols + rows if rows else 0)  # fake, <row_r_col_c>; newlines; fake, global, fake
        return ImageTokens((n,) * tiles, tiles * per, tiles * per + markers)
    if k == "gemma4":
        budget = v.tokens_per_image * m * m
        hh, ww = gemma4_size(height, width, p, budget, m)
        soft = (hh // p) * (ww // p) // (m * m)
        return ImageTokens((budget,), soft, soft + 2)
    hh, ww = pixtral_size(height, width, v.image_size, p * m)
    rows, cols = hh // (p * m), ww // (p * m)
    return ImageTokens(((hh // p) * (ww // p),), rows * cols, rows * (cols + 1))


def qwen_windows(v: VisionSpec, n_patches_side_h: int, n_patches_side_w: int) -> tuple[int, ...]:
    """Qwen2.5-VL's attention windows over one image's h × w patch grid (vision_utils.get_vision_window_index):
    windows of (window_size / P / m)² merged units, edge windows smaller; lengths in patches."""
    m = v.spatial_merge_size
    win = max(1, v.window_size // m // v.patch_size)
    lh, lw = n_patches_side_h // m, n_patches_side_w // m
    return tuple(min(win, lh - r) * min(win, lw - c) * m * m for r in range(0, lh, win) for c in range(0, lw, win))


def square_grid(v: VisionSpec, px: int) -> tuple[int, int]:
    """Qwen's patch grid (rows, cols) of a square image of `px` pixels."""
    f = v.patch_size * v.spatial_merge_size
    hh, ww = smart_resize(px, px, f, v.min_pixels, v.max_pixels)
    return hh // v.patch_size, ww // v.patch_size
