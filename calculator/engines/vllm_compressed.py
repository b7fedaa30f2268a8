"""vLLM 0.33's KV cache for DeepSeek-V4 (compressed attention, calculator/model/architectures/compressed.py): the
cache specs each layer kind registers, their page sizes, how vLLM packs them into KV-cache groups sharing one block
pool, and the blocks one request holds. Each rule cites the vllm 0.33.0 wheel file it follows.

Per layer (models/deepseek_v4/attention.py, compressor.py; v1/attention/backends/mla/sparse_swa.py), with the
default NVIDIA path (FlashMLA, or FlashInfer on SM12x: both keep the fp8_ds_mla layout, _select_dsv4_attn_cls):

    every layer     sliding-window keys   SlidingWindowMLASpec  block 64,  window W, 584 B a token
    CSA (ratio 4)   compressed KV         MLAAttentionSpec      block 256, one 584 B entry per 4 tokens
                    KV compressor state   SlidingWindowMLASpec  block 4,   window 8, fp32 2·2·head_dim a token
                    indexer keys          MLAAttentionSpec      block 256, one 132 B entry (fp8 + fp32 scale) per 4
                    indexer compressor    SlidingWindowMLASpec  block 4,   window 8, fp32 2·2·index_head_dim a token
    HCA (ratio 128) compressed KV         MLAAttentionSpec      block 256, one 584 B entry per 128 tokens
                    KV compressor state   SlidingWindowMLASpec  block 8,   window 128, fp32 2·head_dim a token

    page            = round_up(states per block × bytes per state, 576)   (v1/kv_cache_interface.py
                      AttentionSpec.unpadded_page_size_bytes, _apply_alignment_padding; 512 without fp8_ds_mla)
    groups          layers bucketed by spec type and block size; buckets with one layer per page size per repeat
                    split into groups of R repeats, R = _approximate_gcd(...)   (v1/core/kv_cache_planning.py
                    _get_packed_kv_cache_groups: the DeepSeek-V4 indexer backend asks for the block-outermost
                    BLHNC layout, v1/attention/backends/mla/indexer.py DeepseekV4IndexerBackend)
    bytes per block = the widest group's Σ pages     (kv_cache_planning.py _get_kv_cache_bytes_per_block)
    blocks / request = Σ groups max over its layers (full: ⌈L / block⌉; sliding: ⌈min(W − 1 + in-flight, L) /
                       block⌉ + 1)   (kv_cache_interface.py UniformTypeKVCacheSpecs.max_memory_usage_pages)

Cross-version check (not a 0.33 log, so no published row): vllm-project/recipes issue 762 (vLLM 0.25.0, 8 × B200,
DP8 + EP, DeepSeek-V4-Flash-0731, --gpu-memory-utilization 0.95 --max-num-batched-tokens 8192 --max-num-seqs 256
--block-size 256 --kv-cache-dtype fp8) logs 156.9× concurrency at 1M tokens over the 8 ranks, 19.6 a rank; this
layout with one batch in flight gives 20.2 (+3%), with 0.33's two (async scheduling) 14.0.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property, lru_cache

from calculator.memory.inference import with_kv_dtype
from calculator.core.errors import InputError
from calculator.engines.vllm_kv import max_in_flight_tokens, sliding_blocks_per_request

MLA_BLOCK = 256  # DeepseekV4 sparse MLA and indexer kernels: get_supported_kernel_block_sizes [256]
SWA_BLOCK = 64  # sparse_swa.py DeepseekV4SWACache block_size default (attention.py passes none)
PACKED_ALIGNMENT = 576  # fp8_ds_mla pages (attention.py / compressor.py / sparse_swa.py alignment=576)
PLAIN_ALIGNMENT = 512  # plain bf16 / fp8 rows (FlashInfer sparse, #44577)
INDEXER_QUANT_BLOCK = 128  # attention.py DeepseekV4Indexer.quant_block_size: one fp32 scale per 128 fp8 values
STATE_BYTES = 4  # compressor.py: state_dtype = torch.float32 (CompressorStateCache asserts it)
# GPUs whose default DeepSeek-V4 attention keeps the fp8_ds_mla layout: SM90 / SM100 (FlashMLA) and SM12x
# (FlashInfer SM120 attention, use_fp8_ds_mla_layout True) (models/deepseek_v4/nvidia/model.py _select_dsv4_attn_cls)
NVIDIA_DSV4 = ("h100", "h200", "h20", "h800", "gh200", "b200", "b300", "gb200", "gb300", "rtx-5090",
               "rtx-pro-6000", "dgx-spark")
OFF_PATH = ("vLLM's DeepSeek-V4 cache is read on its NVIDIA Hopper / Blackwell path (FlashMLA sparse, fp8_ds_mla "
            "layout); this GPU takes another (ROCm, or a pre-Hopper card FlashMLA does not run on), which was not "
            "read: the figures assume the same layout")


@dataclass(frozen=True)
class CacheSpec:
    """One cache one layer registers (its get_kv_cache_spec), as vLLM sizes it."""

    role: str  # swa, csa_kv, hca_kv, indexer, csa_state, indexer_state, hca_state
    layer: int
    sliding: bool  # SlidingWindowMLASpec (else MLAAttentionSpec, a FullAttentionSpec)
    block_size: int
    page_bytes: int
    window: int = 0

    @property
    def bucket(self) -> tuple:
        """What must match to share a group: spec type, block size and, for sliding specs, the window
        (UniformTypeKVCacheSpecs.is_uniform_type, SlidingWindowMLASpec.is_uniform_with_collection)."""
        return self.sliding, self.block_size, self.window

    def pages(self, max_len: int, in_flight: int) -> int:
        """Blocks one request of max_len tokens holds: FullAttentionSpec.max_memory_usage_bytes ⌈L / block⌉;
        SlidingWindowSpec.max_admission_blocks_per_request ⌈min(W − 1 + in-flight tokens, L) / block⌉ + 1."""
        if not self.sliding:
            return -(-max_len // self.block_size)
        return sliding_blocks_per_request(self.window, max_len, self.block_size, in_flight)


def round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def page_bytes(states: int, state_bytes: int, alignment: int) -> int:
    """num_heads (1) × states per block × bytes per state, padded up to the alignment (kv_cache_interface.py
    AttentionSpec.unpadded_page_size_bytes, _apply_alignment_padding)."""
    return round_up(states * state_bytes, alignment)


def packed_token_bytes(m) -> int:
    """One fp8_ds_mla entry: the NoPE part in fp8, the RoPE part in bf16, one UE8M0 scale byte per 64 NoPE values
    plus one pad byte: 448 + 128 + 8 = 584 B for head_dim 512 (attention.py state_content_bytes=584; compressor.py
    _token_stride = nope + 2·rope, _scale_dim = nope // 64 + 1)."""
    rope = m.compressed.rope_dim
    nope = m.head_dim - rope
    return nope + 2 * rope + nope // 64 + 1


def entry_bytes(m, packed: bool, elem: int) -> int:
    """A key entry: packed fp8_ds_mla, else head_dim in the cache dtype (MLA specs have no V: head_size_v = 0)."""
    return packed_token_bytes(m) if packed else m.head_dim * elem


def swa_spec(m, layer: int, packed: bool, elem: int) -> CacheSpec:
    """DeepseekV4SWACache.get_kv_cache_spec (sparse_swa.py): 64 tokens a block, window = sliding_window."""
    align = PACKED_ALIGNMENT if packed else PLAIN_ALIGNMENT
    return CacheSpec("swa", layer, True, SWA_BLOCK, page_bytes(SWA_BLOCK, entry_bytes(m, packed, elem), align),
                     m.compressed.window)


def compressed_kv_spec(m, layer: int, ratio: int, packed: bool, elem: int) -> CacheSpec:
    """DeepseekV4Attention.get_kv_cache_spec (attention.py): MLAAttentionSpec, block_size 256 tokens,
    tokens_per_state = the compress ratio, so 256 / ratio entries a block (KVCacheSpec.get_num_kernel_states)."""
    align = PACKED_ALIGNMENT if packed else PLAIN_ALIGNMENT
    role = "csa_kv" if ratio == 4 else "hca_kv"
    return CacheSpec(role, layer, False, MLA_BLOCK, page_bytes(MLA_BLOCK // ratio, entry_bytes(m, packed, elem),
                                                               align))


def indexer_entry_bytes(m) -> int:
    """The indexer's key: index_head_dim fp8 values + one fp32 scale per 128 (attention.py DeepseekV4Indexer
    k_cache_head_dim = 128 + 4 = 132; the MXFP4 cache, indexer_kv_dtype mxfp4, is not the default)."""
    d = m.compressed.index_head_dim
    return d + d // INDEXER_QUANT_BLOCK * 4


def indexer_spec(m, layer: int, ratio: int, packed: bool) -> CacheSpec:
    """DeepseekV4IndexerCache.get_kv_cache_spec (attention.py): uint8 entries, block 256, one per `ratio` tokens."""
    align = PACKED_ALIGNMENT if packed else PLAIN_ALIGNMENT
    return CacheSpec("indexer", layer, False, MLA_BLOCK, page_bytes(MLA_BLOCK // ratio, indexer_entry_bytes(m), align))


def compressor_state_spec(role: str, layer: int, head_dim: int, ratio: int, packed: bool) -> CacheSpec:
    """CompressorStateCache.get_kv_cache_spec (compressor.py): per token the fp32 kv and score states of coff series
    (coff = 2 with the overlapping CSA windows, else 1), state_dim = 2·coff·head_dim; window coff·ratio; block 4
    (ratio 4) or 8 (ratio 128) so that its page matches the KV page it shares a tensor with."""
    coff = 1 + (ratio == 4)
    block = {4: 4, 128: 8}.get(ratio)
    if block is None:
        raise InputError("engine", f"vLLM's DeepSeek-V4 compressor takes ratios 4 and 128, not {ratio} "
                                   "(compressor.py CompressorStateCache)")
    align = PACKED_ALIGNMENT if packed else PLAIN_ALIGNMENT
    return CacheSpec(role, layer, True, block, page_bytes(block, 2 * coff * head_dim * STATE_BYTES, align),
                     coff * ratio)


def layer_specs(m, layer: int, ratio: int, packed: bool, elem: int) -> list[CacheSpec]:
    """Every cache one decoder layer registers: the window's keys, and with a compressor its compressed KV and
    state; CSA (ratio 4) also its indexer's keys and state (attention.py: the indexer only where compress_ratio == 4;
    get_kv_cache_spec returns None for the attention itself when compress_ratio <= 1)."""
    out = [swa_spec(m, layer, packed, elem)]
    if ratio <= 1:
        return out
    out += [compressed_kv_spec(m, layer, ratio, packed, elem)]
    out += [compressor_state_spec("csa_state" if ratio == 4 else "hca_state", layer, m.head_dim, ratio, packed)]
    if ratio == 4:
        out += [indexer_spec(m, layer, ratio, packed),
                compressor_state_spec("indexer_state", layer, m.compressed.index_head_dim, ratio, packed)]
    return out


def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """The chunk d in [lower_bound, max] with the least Σ (⌈x / d⌉·d − x), ties to the larger d
    (kv_cache_planning.py _approximate_gcd)."""
    lo, hi = max(1, lower_bound), max(values)
    if lo > hi:
        return lo
    best, best_pad = lo, None
    for d in range(lo, hi + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = d, pad
    return best


def packed_groups(specs: list[CacheSpec]) -> list[tuple[CacheSpec, ...]]:
    """vLLM's KV-cache groups of mixed page sizes in a block-outermost layout (kv_cache_planning.py
    _get_packed_kv_cache_groups): specs bucketed by type; a bucket is balanced when each page size has as many
    layers; the repeats per group R = _approximate_gcd(balanced buckets' largest count per page size, at least the
    largest mixed balanced bucket's), a balanced bucket splits into ⌈count / R⌉ groups taking every n-th repeat,
    others stay whole (DeepSeek-V4 has no Mamba / circular-buffer bucket, so no state-bucket cap applies)."""
    buckets: dict[tuple, list[CacheSpec]] = {}
    for s in specs:
        buckets.setdefault(s.bucket, []).append(s)
    shaped = []
    for bucket in buckets.values():
        by_page: dict[int, list[CacheSpec]] = {}
        for s in bucket:
            by_page.setdefault(s.page_bytes, []).append(s)
        balanced = len({len(v) for v in by_page.values()}) == 1
        shaped.append((bucket, by_page, balanced, Counter(s.page_bytes for s in bucket).most_common(1)[0][1]))
    floor = max((most for _, by_page, bal, most in shaped if bal and len(by_page) > 1), default=0)
    repeats = approximate_gcd([most for *_, bal, most in shaped if bal], floor) if floor else None
    groups = []
    for bucket, by_page, balanced, most in shaped:
        n = -(-most // repeats) if balanced and repeats else 1
        if n == 1:
            groups.append(tuple(bucket))
            continue
        pattern = list(zip(*by_page.values()))
        groups += [tuple(s for rep in pattern[i::n] for s in rep) for i in range(n)]
    return groups


@dataclass(frozen=True)
class CompressedGroups:
    """DeepSeek-V4's groups on one GPU: global groups (every layer of the model) projected onto this GPU's layers
    (kv_cache_planning.py _project_kv_cache_groups_to_worker: a group keeps its per-request blocks whatever it
    holds here), with the KVGroups interface vllm.budget reads (bytes_per_block, blocks_per_request)."""

    groups: tuple[tuple[CacheSpec, ...], ...]  # global
    layers: frozenset[int]  # this GPU's layers
    in_flight: int
    kv_dtype: str  # vLLM's cache dtype string (fp8_ds_mla)
    # the widest group's pages on this GPU (block-outermost: every group's block has that stride; stride alignment 1
    # as no DeepSeek-V4 spec sets block_stride_alignment): stage_block_bytes
    bytes_per_block: int
    described: tuple[str, str]  # (per-layer caches, groups): notes' text (describe_specs)
    block_size: int = MLA_BLOCK
    full_groups: int = 0
    sliding_groups: int = 0
    read_path: bool = True  # the GPU takes the NVIDIA Hopper / Blackwell path read here

    def local(self, g: tuple[CacheSpec, ...]) -> tuple[CacheSpec, ...]:
        return tuple(s for s in g if s.layer in self.layers)

    @cached_property
    def group_heads(self) -> tuple[tuple[CacheSpec, int], ...]:
        """(a spec standing for a group, how many groups it stands for): a group is cut from one bucket
        (packed_groups), and a spec's pages read only its bucket (sliding, block size, window), so every layer of a
        group needs as many blocks, and so do groups of one bucket."""
        first = {}
        for g in self.groups:
            first.setdefault(g[0].bucket, [g[0], 0])[1] += 1
        return tuple((spec, n) for spec, n in first.values())

    @property
    def count(self) -> int:
        return len(self.groups)

    def group_pages(self, g: tuple[CacheSpec, ...], max_len: int) -> int:
        """UniformTypeKVCacheSpecs.max_memory_usage_pages: the most blocks any of its layers needs."""
        return max(s.pages(max_len, self.in_flight) for s in g)

    def blocks_per_request(self, max_len: int, block_size: int = 0, mbt: int = 0) -> int:
        """Σ over groups (kv_cache_utils.py get_max_concurrency_for_kv_cache_config; kv_cache_planning.py
        _max_memory_usage_bytes_from_groups) of the group's pages, which its first spec gives (group_heads).
        block_size / mbt: the KVGroups signature (the specs carry their own)."""
        return sum(n * s.pages(max_len, self.in_flight) for s, n in self.group_heads)

    @property
    def token_bytes(self) -> int:
        """What a long request's every further token costs: one block of the full-attention group per 256 tokens."""
        return -(-self.bytes_per_block // MLA_BLOCK)


def cache_dtype(w) -> tuple[str, int]:
    """(vLLM cache dtype, element bytes) on the fp8_ds_mla path: --kv-cache-dtype auto (the calculator's default
    model-dtype cache) or fp8 become fp8_ds_mla; anything else is refused as vLLM does (attention.py
    _resolve_dsv4_kv_cache_dtype)."""
    if w.kv_dtype in ("bf16", "fp8"):
        return "fp8_ds_mla", 1
    raise InputError("kv_dtype", f"DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got {w.kv_dtype} "
                                 "(vLLM attention.py _resolve_dsv4_kv_cache_dtype): use --kv-dtype fp8 or bf16 "
                                 "(vLLM's auto)")


def layout(m, w, layers: range, gpu, mbt: int) -> CompressedGroups:
    """vLLM's groups for DeepSeek-V4 on one GPU of pipeline stage `layers`."""
    w = with_kv_dtype(m, w)  # kv_dtype "auto" as the runtime picks it (memory.inference.kv_cache_dtype)
    if w.serving.block_size not in (None, MLA_BLOCK):
        raise InputError("serving.block_size", f"vLLM's DeepSeek-V4 sparse MLA kernels take block_size {MLA_BLOCK} "
                                               "only (get_supported_kernel_block_sizes)")
    ident = f"{gpu.id} {gpu.name}".lower()
    dtype, elem = cache_dtype(w)
    packed = dtype == "fp8_ds_mla"
    groups, described = model_groups(m, packed, elem)
    full = sum(1 for g in groups if not g[0].sliding)
    return CompressedGroups(groups, frozenset(layers), max_in_flight_tokens(mbt, w.parallel.pp), dtype,
                            stage_block_bytes(m, packed, elem, layers.start, layers.stop), described,
                            full_groups=full, sliding_groups=len(groups) - full,
                            read_path=any(k in ident for k in NVIDIA_DSV4))


@lru_cache(maxsize=1024)
def stage_block_bytes(m, packed: bool, elem: int, first: int, last: int) -> int:
    """bytes_per_block of the stage holding layers [first, last): the widest group's pages there."""
    here = range(first, last)
    return max(sum(s.page_bytes for s in g if s.layer in here) for g in model_groups(m, packed, elem)[0])


@lru_cache(maxsize=64)
def model_groups(m, packed: bool, elem: int) -> tuple[tuple[tuple[CacheSpec, ...], ...], tuple[str, str]]:
    """The model's global groups, every layer's specs packed, and their description (describe_specs): what a layout
    reads of the model alone, so a planner's grid builds them once."""
    specs = [s for i in range(m.num_hidden_layers) for s in layer_specs(m, i, ratio_of(m, i), packed, elem)]
    groups = tuple(packed_groups(specs))
    return groups, describe_specs(groups)


def ratio_of(m, i: int) -> int:
    """A layer's compress ratio (0: the window alone)."""
    from calculator.model.architectures.compressed import rate
    return rate(m, m.layer_kind(i).mixer)


def describe_group(g: tuple[CacheSpec, ...]) -> str:
    roles = Counter(s.role for s in g)
    parts = ", ".join(f"{n} {r}" for r, n in roles.items())
    return f"[{parts}: {sum(s.page_bytes for s in g):,} B a block]"


def describe_specs(groups: tuple[tuple[CacheSpec, ...], ...]) -> tuple[str, str]:
    """(each cache's page a block, each group's contents)."""
    pages = sorted({(s.role, s.block_size, s.page_bytes) for g in groups for s in g})
    return (", ".join(f"{r} {p:,} B / {b} tokens" for r, b, p in pages),
            "; ".join(describe_group(g) for g in groups))


def notes(cg: CompressedGroups, max_len: int) -> list[str]:
    off = [] if cg.read_path else [OFF_PATH]
    each, described = cg.described
    return [f"DeepSeek-V4 in vLLM 0.33 ({cg.kv_dtype}): per-layer caches {each} (models/deepseek_v4/attention.py, "
            "compressor.py; sparse_swa.py)",
            f"{cg.count} KV-cache groups sharing one pool, block-outermost (kv_cache_planning.py "
            f"_get_packed_kv_cache_groups): {described}; a block is the widest group, {cg.bytes_per_block:,} B",
            f"a request of {max_len:,} tokens holds {cg.blocks_per_request(max_len):,} blocks (sliding groups by "
            f"window − 1 + {cg.in_flight:,} in-flight tokens: async scheduling, (pp + 1) × max_num_batched_tokens)",
            *off]
