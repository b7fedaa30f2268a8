"""vLLM (V1 engine): the memory budget of one GPU and the KV pool it leaves, as vLLM computes them at start-up.

    budget      = gpu_memory_utilization × device total          (vllm/v1/worker/utils.py request_memory)
    KV pool     = budget − weights − profile-run activation peak − non-torch memory − CUDA-graph estimate
                                                                 (vllm/v1/worker/gpu_worker.py determine_available_memory)
    blocks      = KV pool // (block_size × KV bytes of one token × layers per group)
                                                                 (vllm/v1/core/kv_cache_planning.py)
    starts      iff one max_model_len request's blocks fit the pool less its null block
                                                                 (kv_cache_planning.py _check_enough_kv_cache_memory)

Sources read: vllm 0.33.0 and 0.11.0 wheels (the release the llm-d measurements ran). `RELEASES` holds what
differs between them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from calculator.memory import activations as act
from calculator.memory import inference as inf
from calculator.engines import states, towers, vllm_compressed, vllm_kv
from calculator.core.bounded_cache import get_or_build
from calculator.core.dtypes import nbytes
from calculator.core.errors import InputError
from calculator.engines.common import (GiB, Serving, StatePool, attention_tp, check_context, check_request_length,
                                       device_visible_bytes, kv_heads_on_gpu, kv_token_bytes, vllm_derived_max_len)
from calculator.engines.vllm_kv import DEFAULT_BLOCK_SIZE, MLA_BLOCK_SIZE, kv_groups, max_model_len_that_fits
from calculator.model.spec import LayerKind, ModelSpec

DEFAULT_UTILIZATION = 0.9  # vllm/config/cache.py CacheConfig.gpu_memory_utilization
PER_GRAPH_BYTES = 2**20  # vLLM's floor per captured graph (gpu_model_runner.py profile_cudagraph_memory)
DEFAULT_MAX_MODEL_LEN = 2048  # config/model.py _get_and_verify_max_len: no length key in the config


@dataclass(frozen=True)
class Release:
    """What changes between vLLM releases in the start-up memory arithmetic."""

    cudagraphs_in_budget: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default (on since v0.21.0)
    sampler_bytes_per_logit: float  # profile run's sampler working set per (request × vocab entry)
    sampler_basis: str
    large_gpu_tier: bool  # >= 160 GiB devices get 16384 batched tokens (added after 0.11)
    non_torch_tp1: int  # non-torch memory (cuBLAS workspaces, CUDA-graph pool bookkeeping) on one GPU
    non_torch_multi: int  # ... with NCCL communicators and custom all-reduce buffers (TP/PP > 1)
    # hybrids: prefix caching and the "align" mamba cache mode, the token report by concurrency (0.33); older
    # releases force prefix caching off for hybrids and report num_blocks // groups × block_size tokens
    # (vLLM 0.33 config/model.py is_prefix_caching_supported, MambaModelConfig.verify_and_update_config;
    # the older rule: HybridAttentionMambaModelConfig.verify_and_update_config at index commit 0144dd5b)
    hybrid_prefix_caching: bool = True
    # sliding-window caches reserve window − 1 + the tokens still in flight: (pp + 1) × max_num_batched_tokens with
    # async scheduling and the V2 model runner, both on by default in 0.33 (vllm_kv.max_in_flight_tokens); 0.11
    # reserved window − 1 + max_num_batched_tokens (its SlidingWindowSpec.max_memory_usage_bytes)
    async_in_flight: bool = True


NON_TORCH_BASIS = ("non-torch memory measured by vLLM 0.11 on H100 (llm-d empirical results: 0.13 GiB at TP=1, "
                   "0.54–0.55 GiB at TP=2)")
RELEASES: dict[str, Release] = {
    "0.33": Release(
        True, 14.0,
        "vllm 0.33 sampler warm-up (gpu_model_runner._dummy_sampler_run, topk_topp_sampler.py): bf16 logits 2 B, "
        "fp32 logits 4 B, probabilities 4 B, exponential noise 4 B per entry; the Triton top-k/top-p works in "
        "place (read from the code, not measured)",
        True, int(0.13 * GiB), int(0.55 * GiB)),
    "0.11": Release(
        False, 38.4,
        "measured: vLLM 0.11 on H100, Llama-3.1-8B: 4.76 GiB torch peak increase (llm-d) less the 8,192 dummy "
        "tokens' hidden states (0.06 GiB) over 1,024 requests × 128,256 vocab entries = 38.4 B; 28 B of it are the "
        "tensors the 0.11 sampler names (bf16 and fp32 logits, sorted values and int64 indices, two masks, top-p "
        "probabilities, the scattered result), the rest torch.sort's scratch",
        False, int(0.13 * GiB), int(0.55 * GiB), hybrid_prefix_caching=False, async_in_flight=False),
}
LATEST = "0.33"


def release(version: str | None) -> tuple[str, Release]:
    v = version or LATEST
    key = next((k for k in RELEASES if v == k or v.startswith(k + ".")), None)
    if key is None:
        from calculator.core.errors import InputError
        raise InputError("serving.version", f"vLLM {v!r} is not modelled; use one of {', '.join(RELEASES)}")
    return key, RELEASES[key]


def batch_defaults(visible: int, gpu_name: str, rel: Release) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) for `vllm serve` (usage context OPENAI_API_SERVER), by the device
    total and name (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults)."""
    if rel.large_gpu_tier and visible >= 160 * GiB:
        return 16384, 1024
    if visible >= 70 * GiB and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, blackwell: bool = False) -> list[int]:
    """CUDA-graph capture sizes: 1, 2, 4, multiples of 8 to 256, then of 16 up to min(2 × max_num_seqs, 512)
    (1024 on Blackwell), none above max_num_batched_tokens (vllm/config/vllm.py _set_cudagraph_sizes)."""
    return list(_capture_sizes(max_num_seqs, max_num_batched_tokens, blackwell))


@lru_cache(maxsize=256)
def _capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, blackwell: bool) -> tuple[int, ...]:
    top = min(2 * max_num_seqs, 1024 if blackwell else 512)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
    return tuple(s for s in sizes if s <= min(top, max_num_batched_tokens))


@lru_cache(maxsize=256)
def _full_sizes(sizes: tuple[int, ...], max_num_seqs: int) -> tuple[int, ...]:
    """The capture sizes that also get a full graph: the decode batches, at most max_num_seqs (FULL_AND_PIECEWISE)."""
    return tuple(x for x in sizes if x <= max_num_seqs)


_FORWARD_PEAKS: dict = {}


def forward_peak(m: ModelSpec, w, tokens: int) -> int:
    """Working set of one forward over `tokens` tokens without a KV cache (the profile run): the larger of the
    attention and MLP phases of calculator.memory.inference, per TP rank. Kept by what it reads of the workload
    (TP, expert TP, the activation dtype; _forward_peak): every budget of a planner's grid asks for the same few."""
    p = w.parallel
    key = (m, p.tp, p.expert_tp, w.precision.activations, tokens)
    return get_or_build(_FORWARD_PEAKS, key, lambda: _forward_peak(m, w, tokens), 4096)


def clear_cache() -> None:
    """Empty forward_peak's cache (benchmarks time the engine cold)."""
    _FORWARD_PEAKS.clear()


def _forward_peak(m: ModelSpec, w, tokens: int) -> int:
    """forward_peak computed: the workload at `tokens` tokens of one sequence, without CP or sequence parallelism
    (activations.dims reads no more of it than forward_peak's key)."""
    wl = w.model_copy(update={"seq_len": tokens, "micro_batch": 1,
                              "parallel": w.parallel.model_copy(update={"cp": 1, "sequence_parallel": False})})
    d = act.dims(m, wl)
    rope = 0 if m.learned_position_embeddings else (m.qk_rope_head_dim if m.is_mla else m.head_size)
    mlp = inf.prefill_mlp_phase(m, d.T, d.e, m.hidden_size, d.f, rope, w.parallel.expert_tp)
    # the sliding layers' own heads (Step-3.5): the larger of the two layers' attention phases
    views = (m,) if m.swa_num_attention_heads is None else (m, m.attention_of(LayerKind("attention", "dense", 1)))
    attn = max(inf.prefill_attention_phase(v, x.T, x.e, v.hidden_size, x.qd, x.kvd, x.a, x.b, x.s, x.s_kv, rope, False)
               for v, x in ((v, act.dims(v, wl)) for v in views))
    return max(mlp, attn)


def sampler_peak(m: ModelSpec, requests: int, rel: Release) -> int:
    """The sampler warm-up on `requests` dummy requests over the whole vocabulary: every TP rank all-gathers the
    logits and samples (vllm/model_executor/layers/logits_processor.py), so TP does not divide it."""
    return int(requests * m.vocab_size * rel.sampler_bytes_per_logit)


def budget(m: ModelSpec, w, shard, gpu, weights: int) -> Serving:
    """vLLM's start-up arithmetic for one GPU of pipeline stage `shard`."""
    w = inf.with_kv_dtype(m, w)  # kv_dtype "auto" as the runtime picks it (memory.inference.kv_cache_dtype)
    s, p = w.serving, w.parallel
    check_context(s.max_model_len, vllm_derived_max_len(m), "vllm")  # before anything: vLLM's config refuses it
    version, rel = release(s.version)
    visible, basis = device_visible_bytes(gpu)
    util = s.memory_fraction if s.memory_fraction is not None else DEFAULT_UTILIZATION
    mbt_default, seqs_default = batch_defaults(visible, gpu.name, rel)
    mbt = s.max_num_batched_tokens or mbt_default
    max_seqs = s.max_num_seqs or seqs_default
    requested = math.ceil(visible * util)
    requests = min(max_seqs, mbt)
    fwd = forward_peak(m, w, mbt)
    hidden = mbt * m.hidden_size * 2
    act_peak = max(fwd, hidden + sampler_peak(m, requests, rel)) if shard.has_head else fwd
    multi = p.tp > 1 or p.pp > 1
    non_torch = rel.non_torch_multi if multi else rel.non_torch_tp1
    sizes = _capture_sizes(max_seqs, mbt, "b200" in gpu.id or "b300" in gpu.id) if s.cuda_graphs else ()
    full_sizes = _full_sizes(sizes, max_seqs)
    graphs = 0
    if sizes:  # FULL_AND_PIECEWISE: piecewise graphs for every size, full graphs for decode batches
        graphs = (forward_peak(m, w, sizes[-1]) + (len(sizes) - 1) * PER_GRAPH_BYTES
                  + forward_peak(m, w, full_sizes[-1]) + (len(full_sizes) - 1) * PER_GRAPH_BYTES)
    in_budget = graphs if rel.cudagraphs_in_budget else 0
    kv_pool = requested - weights - act_peak - non_torch - in_budget

    layers = range(shard.first_layer, shard.last_layer)
    token = kv_token_bytes(m, kv_heads_on_gpu(m, w), w.kv_dtype) if m.compressed is None else 0
    split = states.split_layers(m, layers) if m.compressed is None else None
    free = attention_free(m, split) if split is not None else False
    if m.compressed is not None:  # DeepSeek-V4: its own specs and packed groups (calculator/engines/vllm_compressed.py)
        groups = vllm_compressed.layout(m, w, layers, gpu, mbt)
        block, lay, kv_token = groups.block_size, None, groups.token_bytes
    elif m.gemma_next is not None or m.swa_num_key_value_heads is not None:  # hook: head sizes per layer type
        block, lay = s.block_size or DEFAULT_BLOCK_SIZE, None  # (Gemma 3n / 4: KV-shared layers allocate nothing)
        by_type = vllm_kv.gemma_next_groups if m.gemma_next is not None else vllm_kv.layer_type_groups  # MiMo-V2
        groups, kv_token = by_type(m, layers, attention_tp(w), nbytes(1, w.kv_dtype), block)
    elif split.plain:
        block = s.block_size or (MLA_BLOCK_SIZE if m.is_mla else DEFAULT_BLOCK_SIZE)
        groups, lay, kv_token = kv_groups(m, layers, token, block), None, token * len(layers)
    else:  # state layers (Mamba, GDN, ...) or DSA indexer caches: calculator/engines/vllm_kv.py
        if split.indexed:
            token = states.ds_mla_token_bytes(m, w.kv_dtype, token)
        if free and s.prefix_caching:  # attention-free: prefix caching off by default, so mamba_cache_mode none
            w = w.model_copy(update={"serving": s.model_copy(update={"prefix_caching": False})})
        lay = vllm_kv.layout(m, w, layers, split, token if split.attention else 0, gpu, rel.hybrid_prefix_caching)
        block, groups = lay.block_size, lay.groups
        kv_token = token * len(split.attention) + split.extra_token_bytes
    prefix = s.prefix_caching and (lay is None or not split.state or rel.hybrid_prefix_caching) and not free
    if groups.bytes_per_block <= 0:  # e.g. a pipeline stage of Nemotron-H's MLP-only layers: nothing to cache
        raise InputError("pp", f"vLLM: pipeline stage with layers {layers.start}-{layers.stop - 1} holds no "
                               "attention or state layer, so it has no KV cache to size; pick a pipeline size "
                               "whose every stage holds one")
    blocks = max(kv_pool, 0) // groups.bytes_per_block
    model_max = vllm_derived_max_len(m) or (DEFAULT_MAX_MODEL_LEN if free else w.seq_len + w.gen_tokens)
    configured = s.max_model_len or model_max
    check_request_length(w, configured, "vllm")
    per_seq = min(w.seq_len + w.gen_tokens, configured)  # a longer request's output is clamped (get_max_tokens)
    in_flight = vllm_kv.max_in_flight_tokens(mbt, w.parallel.pp) if rel.async_in_flight else mbt
    per_req = groups.blocks_per_request(configured, block, in_flight)
    concurrency = blocks / per_req if per_req else 0.0
    usable = kv_pool - groups.bytes_per_block  # the null block BlockPool holds back
    largest = max_model_len_that_fits(groups, usable, block, in_flight, max(configured, model_max)) if kv_pool > 0 else 0
    starts, error = kv_pool > 0 and largest >= configured, ""
    if kv_pool <= 0:
        error = ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                 "initializing the engine.")
    elif not starts:
        need = per_req * groups.bytes_per_block
        error = (f"To serve at least one request with the model's max seq len ({configured}), ({need / GiB:.2f} GiB "
                 f"KV cache is needed, which is larger than the available KV cache memory ({usable / GiB:.2f} GiB). "
                 f"Based on the available memory, the estimated maximum model length is {largest}.")
    seq_blocks = groups.blocks_per_request(per_seq, block, in_flight)
    pool_tokens = int(concurrency * configured)  # "GPU KV cache size" (kv_cache_utils.get_kv_cache_capacity)
    if lay is not None and split.state and not rel.hybrid_prefix_caching:  # older: num_blocks // groups × block
        pool_tokens = blocks // groups.count * block
    notes = [f"device total {visible / GiB:.2f} GiB ({basis})",
             f"sampler warm-up: {rel.sampler_basis}", NON_TORCH_BASIS,
             towers.tower_note(m, w, shard, attention_tp(w))]
    if graphs and not rel.cudagraphs_in_budget:
        notes.append(f"vLLM {version} captures CUDA graphs after sizing the pool: their ~{graphs / GiB:.2f} GiB "
                     "come out of the (1 − gpu_memory_utilization) headroom")
    if lay is not None:
        notes.extend(vllm_kv.notes(lay))
        if split.state and s.prefix_caching and not prefix and not free:
            notes.append(f"vLLM {version} turns prefix caching off for hybrid models")
    if free:
        notes.append("attention-free model (IsAttentionFree): prefix caching off unless --enable-prefix-caching "
                     "(config/model.py is_prefix_caching_supported; on, align mode holds 2 state blocks a request), "
                     "one state block a request whatever its length, so any max_model_len fits; with no length "
                     f"key in the config max_model_len defaults to {DEFAULT_MAX_MODEL_LEN} "
                     "(config/model.py _get_and_verify_max_len) and a longer one is taken as given")
    if prefix:
        notes.append("prefix caching on: requests sharing a prompt prefix share its blocks, so more of them fit "
                     "than max_concurrent_seqs (which assumes no sharing)")
    if m.compressed is not None:
        notes.extend(vllm_compressed.notes(groups, configured))
    elif groups.sliding_groups and groups.full_groups:
        notes.append(f"hybrid allocator: {groups.full_groups} full + {groups.sliding_groups} sliding-window groups "
                     f"of {groups.group_size} layers")
    return Serving(
        "vllm", version, util, "set by you" if s.memory_fraction is not None else "vLLM default (0.9)",
        visible, requested, weights, act_peak, non_torch, graphs, max(kv_pool, 0), kv_pool, kv_token, block,
        blocks, pool_tokens, per_seq, blocks / seq_blocks if seq_blocks else 0.0, configured,
        largest, starts, error, mbt, max_seqs, prefix, len(sizes) + len(full_sizes), bool(in_budget),
        {"tp": p.tp, "pp": p.pp, "dp": p.dp, "ep": p.ep, "kv_heads_per_gpu": kv_heads_on_gpu(m, w)},
        tuple(n for n in notes if n),
        state_pool(lay, blocks, seq_blocks, max_seqs) if lay is not None and split.state else None)


def attention_free(m: ModelSpec, split: states.LayerSplit) -> bool:
    """Mamba2ForCausalLM / MambaForCausalLM / FalconMambaForCausalLM (IsAttentionFree): state layers only."""
    return bool(split.state) and not split.attention and m.gemma_next is None


def state_pool(lay: vllm_kv.Layout, blocks: int, seq_blocks: int, max_seqs: int) -> StatePool:
    """The states of a hybrid in vLLM: no pool of their own, a slot is one block in each state group; requests run
    at once: min(max_num_seqs, (num_blocks − the null block) // blocks per request) (vLLM 0.33
    v1/core/kv_cache_utils.py get_max_concurrency_for_kv_cache_config)."""
    g = lay.groups
    running = min(max_seqs, (blocks - 1) // seq_blocks) if seq_blocks and blocks > 0 else 0
    slots = running * g.state_blocks
    slot = g.state_groups * g.bytes_per_block
    return StatePool(
        "vLLM: state blocks in the KV pool (v1/kv_cache_interface.py MambaSpec)", len(lay.split.state),
        len(lay.split.attention), lay.split.kinds, lay.conv_dtype, lay.ssm_dtype, lay.state_page, slot,
        g.state_blocks, slots, slots * slot, running)
