"""vLLM's KV-cache layout on one GPU: the block size, the KV-cache groups of layers that share one pool of blocks, the
blocks one request holds, and the longest max_model_len that fits, for plain, sliding-window, DSA and hybrid
(Mamba / linear-attention) models.

    block_size (hybrid)  = A × ⌈M / (A × a1)⌉: one attention page holds one state page M (a1: one token's K/V in one
                           layer; A: the kernel alignment)   (platforms/interface.py Platform._align_hybrid_block_size)
    groups               layers bucketed by kind, group_size = min(bucket), max when max < 1.5 × min
                                                 (v1/core/kv_cache_planning.py _get_kv_cache_groups_uniform_page_size)
    blocks per request   = Σ attention groups ⌈L / block⌉ + sliding groups (⌈min(window − 1 + in flight, L) / block⌉ + 1)
                           + state groups × (1 with prefix caching off; 2 + C on)
                                                 (v1/kv_cache_interface.py *Spec.max_memory_usage_bytes)

Sources: the vllm 0.33.0 wheel, each rule's file and function cited beside it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import lcm

from calculator.engines import states
from calculator.model.architectures.gemma_next import vllm_token_bytes
from calculator.core.errors import InputError

DEFAULT_BLOCK_SIZE = 16  # vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
MLA_BLOCK_SIZE = 64  # FlashMLA's only kernel block size (vllm/v1/attention/backends/mla/flashmla.py)
FA_KERNEL_BLOCK = 16  # FlashAttention's smallest kernel block, MultipleOf(16)
MLA_HYBRID_ALIGNMENT = 128  # _align_hybrid_block_size: an MLA hybrid aligns its block to at least 128 tokens
# v1/attention/backends/gdn_attn.py FLASHINFER_GDN_CHECKPOINT_ALIGNMENT: the FlashInfer GDN prefill kernel checkpoints
# the state every 64 tokens, so a prefix-cached hybrid's block is a multiple of it
GDN_CHECKPOINT_ALIGNMENT = 64
HOPPER = ("h100", "h200", "h20", "h800", "gh200")  # SM90: FlashInfer's GDN prefill is the default there


@dataclass(frozen=True)
class KVGroups:
    """vLLM's KV-cache groups of one GPU: every group has `group_size` layers and draws blocks from one pool
    (kv_cache_planning.py _get_kv_cache_groups_uniform_page_size)."""

    page_bytes: int  # one block of one layer
    group_size: int
    full_groups: int
    sliding_groups: int
    window: int
    state_groups: int = 0  # groups of layers that keep a state per sequence (MambaSpec)
    state_blocks: int = 0  # blocks a request holds in each state group
    extra_block_bytes: int = 0  # DSA: one block of each layer's indexer cache, in the same group as its MLA
    # tokens per block of the full / sliding groups when their pages were unified by a larger block (0: block_size;
    # Gemma 4: gemma_next_groups)
    full_block: int = 0
    sliding_block: int = 0

    @property
    def bytes_per_block(self) -> int:
        return self.page_bytes * self.group_size + self.extra_block_bytes

    @property
    def count(self) -> int:
        return self.full_groups + self.sliding_groups + self.state_groups

    def blocks_per_request(self, max_len: int, block_size: int, in_flight: int) -> int:
        """Full attention: ⌈len / block⌉ (FullAttentionSpec); sliding window: ⌈min(window − 1 + in-flight tokens
        (max_in_flight_tokens; max_num_batched_tokens before 0.33), len) / block⌉ + 1 (SlidingWindowSpec.max_admission_blocks_per_request); state: state_blocks whatever the
        length (MambaSpec.max_memory_usage_bytes); summed over groups."""
        full = -(-max_len // (self.full_block or block_size))
        slide = sliding_blocks_per_request(self.window, max_len, self.sliding_block or block_size, in_flight) \
            if self.window else 0
        return self.full_groups * full + self.sliding_groups * slide + self.state_groups * self.state_blocks


def sliding_blocks_per_request(window: int, max_len: int, block_size: int, in_flight: int) -> int:
    """Blocks a sliding-window layer group holds for one request at admission: ⌈min(W − 1 + in-flight tokens, L) /
    block⌉ + 1 — the window's last W − 1 tokens, the tokens scheduled but not yet computed, and one block the window
    straddles (vllm/v1/kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request)."""
    return -(-min(window - 1 + in_flight, max_len) // block_size) + 1


def _group_size(counts: list[int]) -> int:
    """The smallest bucket, or the largest when it is under 1.5 × the smallest."""
    size = min(counts)
    return max(counts) if max(counts) < 1.5 * size else size


@lru_cache(maxsize=4096)
def sliding_count(m, layers: range) -> int:
    """Sliding-window layers among `layers` (what the model's layers give, so kept per model and range)."""
    return sum(1 for i in layers if m.layer_is_sliding(i) and m.sliding_window)


def kv_groups(m, layers: range, token_bytes: int, block_size: int, hybrid: bool = True) -> KVGroups:
    """Group the layers: one group when all are alike; full + sliding layers in groups of the smaller count (the
    larger when it is under 1.5 × the smaller), the last group of a kind padded. Without the hybrid allocator
    sliding layers are kept whole like full ones (unify_hybrid_kv_cache_specs)."""
    page = block_size * token_bytes
    n_slide = sliding_count(m, layers) if hybrid else 0
    n_full = len(layers) - n_slide
    if not n_slide or not n_full:
        return KVGroups(page, len(layers), int(n_full > 0), int(n_slide > 0), m.sliding_window if n_slide else 0)
    size = _group_size([n_full, n_slide])
    return KVGroups(page, size, -(-n_full // size), -(-n_slide // size), m.sliding_window or 0)


def gemma_next_groups(m, layers: range, tp: int, elem_bytes: float, block_size: int) -> tuple[KVGroups, int]:
    """Gemma 3n / 4 in vLLM: (the groups, one token's K/V over `layers`). KV-shared layers get no KV cache spec
    (v1/worker/gpu_model_runner.py get_kv_cache_spec skips a layer with kv_sharing_target_layer_name); full and
    sliding layers may differ in head_dim and KV heads (Gemma 4), so their pages are unified (unified_groups)."""
    tokens = {i: vllm_token_bytes(m, i, tp, elem_bytes) for i in layers}
    own = [i for i in layers if tokens[i]]
    return unified_groups(m, own, tokens, block_size, m.sliding_window, "Gemma"), sum(tokens[i] for i in own)


def layer_type_groups(m, layers: range, tp: int, elem_bytes: float, block_size: int) -> tuple[KVGroups, int]:
    """MiMo-V2-Flash in vLLM (model_executor/models/mimo_v2_flash.py MiMoV2Attention): full layers keep
    num_key_value_heads, sliding ones swa_num_key_value_heads with per_layer_sliding_window = sliding_window_size
    (transformers' sliding_window − 1), each Attention(head_size_v=v_head_dim); one token of a layer is
    max(kv / tp, 1) · (head_dim + v_head_dim) · e (v1/kv_cache_interface.py real_page_size_bytes); the two page
    sizes unified as Gemma 4's (unified_groups)."""
    tokens = {i: int(max((m.swa_num_key_value_heads if m.layer_is_sliding(i) else m.kv_heads) // tp, 1)
                     * (m.head_size + m.v_head_size) * elem_bytes) for i in layers}
    return unified_groups(m, list(layers), tokens, block_size, m.sliding_window - 1, "MiMo"), sum(tokens.values())


def unified_groups(m, own: list[int], tokens: dict[int, int], block_size: int, window: int, what: str) -> KVGroups:
    """Full and sliding layers whose pages differ: the smaller page gets a larger block (v1/core/kv_cache_utils.py
    unify_kv_cache_spec_page_size: block × max page / page; NotImplementedError when the page does not divide the
    largest), then grouped as kv_groups does."""
    sliding = [i for i in own if m.layer_is_sliding(i)]
    full = [i for i in own if not m.layer_is_sliding(i)]
    per_kind = [{tokens[i] for i in kind} for kind in (full, sliding)]
    if any(len(t) > 1 for t in per_kind):
        raise InputError("engine", f"vLLM: {what} layers of one attention type with different head sizes are not "
                                   "modelled")
    pages = [block_size * t.pop() if t else 0 for t in per_kind]
    top = max(pages)
    if any(p and top % p for p in pages):
        raise InputError("engine", f"vLLM cannot unify KV pages of {pages[0]:,} and {pages[1]:,} B "
                                   "(unify_kv_cache_spec_page_size: NotImplementedError)")
    blocks = [block_size * top // p if p else 0 for p in pages]
    size = _group_size([n for n in (len(full), len(sliding)) if n] or [1])
    return KVGroups(top, size, -(-len(full) // size), -(-len(sliding) // size), window if sliding else 0,
                    full_block=blocks[0], sliding_block=blocks[1])


def max_in_flight_tokens(mbt: int, pp: int) -> int:
    """Tokens scheduled but not yet freed, which a sliding-window cache keeps beside its window (vLLM 0.33
    v1/kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request): max_concurrent_batches ×
    max_num_batched_tokens, with async scheduling and the V2 model runner (both on by default) pp + 1 batches
    (config/vllm.py max_concurrent_batches, max_in_flight_tokens)."""
    return (pp + 1) * mbt


def max_model_len_that_fits(groups: KVGroups, usable: int, block_size: int, in_flight: int, cap: int) -> int:
    """vLLM's estimate_max_model_len: the largest length whose request fits `usable` bytes (binary search; a
    request's blocks never shrink as it grows, so when `cap` fits the search would end there)."""
    def fits(n: int) -> bool:
        return groups.blocks_per_request(n, block_size, in_flight) * groups.bytes_per_block <= usable
    if not fits(1):
        return 0
    if fits(cap):
        return cap
    lo, hi = 1, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


# ---- hybrid and DSA layouts ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """A non-plain model's layout on one GPU: the groups, the block size and how the state fits a page."""

    groups: KVGroups
    block_size: int
    split: states.LayerSplit
    token_bytes: int  # a1: one token's K/V in one attention layer
    state_page: int = 0  # M: one request's state in one layer, unpadded
    conv_dtype: str = ""
    ssm_dtype: str = ""
    dtype_basis: str = ""
    mode: str = "none"  # mamba_cache_mode: "none" (prefix caching off) or "align"
    alignment: int = 0  # A
    checkpoint_blocks: int = 0  # C

    @property
    def padding_pct(self) -> float:
        return 100 * (self.groups.page_bytes - self.state_page) / self.state_page if self.state_page else 0.0


def gdn_flashinfer(w, gpu, split: states.LayerSplit, m) -> bool:
    """Whether Gated DeltaNet prefills with FlashInfer's kernel (qwen_gdn_linear_attn.py _resolve_gdn_prefill_backend:
    the default on SM90; on SM100/SM120 only with key_head_dim 128 and CUDA ≥ 13, so "auto" takes Triton there)."""
    if "gated_deltanet" not in split.kinds:
        return False
    backend = w.serving.gdn_prefill_backend
    if backend != "auto":
        return backend == "flashinfer"
    ident = f"{gpu.id} {gpu.name}".lower()
    return any(h in ident for h in HOPPER)


def layout(m, w, layers: range, split: states.LayerSplit, token_bytes: int, gpu, modern: bool) -> Layout:
    """The groups and block size of a model with state layers (Mamba, GDN, ...) or DSA indexer caches. `modern`:
    vLLM ≥ 0.33's rule (prefix caching on hybrids, align mode); else the older one (block = 16 × ⌈M / (16 × a1)⌉,
    prefix caching off: HybridAttentionMambaModelConfig.verify_and_update_config)."""
    s = w.serving
    base = s.block_size or (MLA_BLOCK_SIZE if m.is_mla else DEFAULT_BLOCK_SIZE)
    n_full = len(split.attention) - len(split.sliding)
    if not split.state:  # DSA: MLA and indexer specs are one uniform-type group (UniformTypeKVCacheSpecs.from_specs)
        if split.indexed and split.sliding:
            raise InputError("engine", "vLLM: a DSA model with sliding-window layers is not modelled")
        size = _group_size([n for n in (n_full, len(split.sliding)) if n] or [1])
        groups = KVGroups(base * token_bytes, size, -(-n_full // size), -(-len(split.sliding) // size),
                          m.sliding_window if split.sliding else 0, extra_block_bytes=base * split.extra_token_bytes)
        return Layout(groups, base, split, token_bytes)
    if split.indexed:
        raise InputError("engine", "vLLM: a model with both DSA indexer caches and state layers is not modelled")
    tp = w.parallel.tp
    pages = []
    for kind in split.kinds:
        conv_dt, ssm_dt, basis = states.vllm_dtypes(m, w, kind)
        pages.append(states.layer_state_bytes(m, kind, tp, conv_dt, ssm_dt))
    page = max(pages)  # one page size for every state layer (get_mamba_state_shape_from_config: one shape a model)
    flashinfer = modern and s.prefix_caching and gdn_flashinfer(w, gpu, split, m)
    if modern:
        mode = "align" if s.prefix_caching else "none"
        align = max(MLA_BLOCK_SIZE if m.is_mla else FA_KERNEL_BLOCK, base)
        if m.is_mla:
            align = max(align, MLA_HYBRID_ALIGNMENT)
        if flashinfer:
            align = lcm(align, GDN_CHECKPOINT_ALIGNMENT)
    else:
        mode, align = "none", FA_KERNEL_BLOCK
    block = max(base, align * -(-page // (align * token_bytes))) if token_bytes else base
    checkpoint = int(flashinfer)
    state_blocks = 1 if mode == "none" else 2 + checkpoint  # MambaSpec.max_memory_usage_bytes, S = 0
    buckets = [n for n in (n_full, len(split.sliding), len(split.state)) if n]
    size = _group_size(buckets)
    groups = KVGroups(block * token_bytes if token_bytes else page, size, -(-n_full // size),
                      -(-len(split.sliding) // size), m.sliding_window if split.sliding else 0,
                      -(-len(split.state) // size), state_blocks)
    return Layout(groups, block, split, token_bytes, page, conv_dt, ssm_dt, basis, mode, align, checkpoint)


def notes(lay: Layout) -> list[str]:
    """What the layout log lines of vLLM say, in words."""
    g, sp = lay.groups, lay.split
    if not sp.state and not sp.indexed:
        return []
    if not sp.state:
        out = [f"DSA: {sp.indexed} indexer caches of {sp.extra_token_bytes // max(sp.indexed, 1)} B per token "
               "(fp8 keys + fp32 scales; DeepseekV32IndexerCache) share the MLA layers' block group"]
        if sp.indexer_unknown:
            out.append(f"{sp.indexer_unknown} indexer caches not counted: their vLLM layout was not read")
        return out
    page = (f"block_size {lay.block_size}: one attention page ({g.page_bytes:,} B) holds one layer's state "
            f"({lay.state_page:,} B: conv {lay.conv_dtype}, recurrent {lay.ssm_dtype}, {lay.dtype_basis}), padded "
            f"{lay.padding_pct:.2f}% (alignment {lay.alignment}; platforms/interface.py _align_hybrid_block_size)")
    if not lay.token_bytes:  # attention-free: one uniform MambaSpec group, its page the state itself
        page = (f"no attention layer: a page is one layer's state ({lay.state_page:,} B: conv {lay.conv_dtype}, "
                f"recurrent {lay.ssm_dtype}, {lay.dtype_basis}), unpadded (kv_cache_planning.py "
                "_get_kv_cache_groups_uniform_spec)")
    return [f"hybrid: {states.describe(sp)} → {g.full_groups + g.sliding_groups} attention + {g.state_groups} state "
            f"groups of {g.group_size} layers sharing one pool (kv_cache_planning.get_kv_cache_groups)", page,
            f"mamba_cache_mode {lay.mode}: each request holds {g.state_blocks} block(s) in each state group"
            + (f" (incl. {lay.checkpoint_blocks} prefill-checkpoint block: FlashInfer GDN)" if lay.checkpoint_blocks
               else "") + " whatever its length (MambaSpec.max_memory_usage_bytes)"]
