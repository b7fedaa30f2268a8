"""Serving engines: the memory budget a vLLM or SGLang server gives one GPU, and the KV pool it leaves.

`hf` (transformers generate(): the cache grows with the sequences) is calculator.stages.estimate's own inference path;
`vllm` and `sglang` preallocate a KV pool inside a memory fraction, so their question is not "how much memory"
but "how many tokens and sequences fit, and does it start". Each engine is one module with each rule cited to
the engine's source file: calculator/engines/vllm.py, calculator/engines/sglang.py.

May import: calculator.memory, calculator.model, calculator.core (never the stages that call it).
"""
from __future__ import annotations

from dataclasses import replace
from functools import partial

from calculator.engines import sglang, support, vllm
from calculator.engines.common import Serving, engine_weight_bytes
from calculator.core.errors import InputError
from calculator.core.fit import planned_fit
from calculator.core.result import Fit, StageEstimate, Term
from calculator.memory.inference import serving_mlp_weight_dtype, serving_weight_dtypes, with_kv_dtype

ENGINES = {"vllm": vllm, "sglang": sglang}
ENGINE_LABELS = {"hf": "transformers generate()", "vllm": "vLLM", "sglang": "SGLang"}


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _size(n: int) -> str:
    return _gib(n) if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _kv_substituted(sv: Serving) -> str:
    """The KV pool's formula with the budget's values (formatted when read: Term.substituted)."""
    if sv.engine != "vllm":
        return f"{_gib(sv.budget_bytes)} − {_gib(sv.weights_bytes)}"
    return (f"{sv.memory_fraction:g} × {_gib(sv.device_visible_bytes)} − {_gib(sv.weights_bytes)} − "
            f"{_gib(sv.activation_peak_bytes)} − {_gib(sv.non_torch_bytes)}"
            + (f" − {_gib(sv.cuda_graph_bytes)}" if sv.cuda_graphs_in_budget else ""))


def _gib_text(n: int) -> tuple:
    """_gib(n) formatted when read (Term.substituted's (template, *values))."""
    return "{:.2f} GiB", n / 2**30


def stage_terms(sv: Serving, context: int) -> tuple[Term, ...]:
    """The breakdown of one GPU: what the engine holds once it has started (the substituted texts formatted when
    read: the planner sums the bytes of thousands of them)."""
    src = f"{sv.engine}-budget"
    kv_formula = ("fraction × device total − weights − activation peak − non-torch − CUDA graphs"
                  if sv.engine == "vllm" else "fraction × free memory before loading − weights")
    kv_subst = partial(_kv_substituted, sv)
    act_label = ("Activation peak of the profile run" if sv.engine == "vllm"
                 else "Activations of one prefill chunk (in the reserve)")
    act_formula = ("max(forward at max_num_batched_tokens, hidden + sampler warm-up on max_num_seqs requests)"
                   if sv.engine == "vllm" else "forward working set at chunked_prefill_size")
    terms = [
        Term("weights", "weights", "Weights (as the engine loads them)", sv.weights_bytes,
             "quantized linears + other params + RoPE cos/sin cache (+ a VLM's vision tower on the first stage)",
             _gib_text(sv.weights_bytes), src),
        Term("activations.profile", "activations", act_label, sv.activation_peak_bytes, act_formula,
             ("{:,} tokens, {:,} sequences", sv.max_num_batched_tokens, sv.max_num_seqs), src),
        Term("kv_cache", "kv_cache", f"KV pool ({sv.kv_pool_tokens:,} tokens)", sv.kv_pool_bytes, kv_formula,
             kv_subst, src, f"{sv.kv_pool_blocks:,} blocks of {sv.block_size} tokens"),
    ]
    if sv.states is not None:
        terms[-1:] = state_terms(sv, terms[-1], src)
    if sv.cuda_graph_bytes:
        terms.append(Term("transient.cuda_graphs", "transient", f"CUDA graphs ({sv.cuda_graph_sizes} captures)",
                          sv.cuda_graph_bytes, "first capture's working set + 1 MiB per further graph",
                          _gib_text(sv.cuda_graph_bytes), src))
    if sv.non_torch_bytes:
        terms.append(Term("comm_buffers", "comm_buffers", "Non-torch memory (NCCL, all-reduce buffers)",
                          sv.non_torch_bytes, "measured constant", _gib_text(sv.non_torch_bytes), src))
    terms.append(Term("cuda_context", "cuda_context", "CUDA context", context, "C_ctx", f"{context:,} B",
                      "cuda-context"))
    return tuple(terms)


def state_terms(sv: Serving, kv: Term, src: str) -> list[Term]:
    """A hybrid's KV pool with its per-sequence states: vLLM draws them from the same blocks (the pool's term says
    how many); SGLang sizes a state pool first and the token pool from the rest (two terms)."""
    st = sv.states
    each = (f"{st.slots_per_seq} state slot(s) of {_size(st.slot_bytes)} a sequence ({st.layers} "
            f"{'/'.join(st.kinds)} layers, conv {st.conv_dtype}, recurrent {st.ssm_dtype})")
    if sv.engine == "vllm":
        return [Term(kv.key, kv.component, kv.label, kv.bytes, kv.formula, kv.substituted, kv.source,
                     f"{kv.note}; K/V of {st.attention_layers} attention layers and {each}: at most "
                     f"{st.max_running_seqs:,} sequences of {sv.tokens_per_seq:,} tokens hold {st.slots:,} slots "
                     f"({_gib(st.pool_bytes)})")]
    tokens_pool = max(sv.kv_pool_bytes - st.pool_bytes, 0)  # an engine that does not start holds no token pool
    return [Term(kv.key, kv.component, kv.label, tokens_pool,
                 "(fraction × free memory before loading − weights − state pool) // cell × cell",
                 f"{sv.kv_pool_tokens:,} tokens × {sv.kv_bytes_per_token:,} B", kv.source, kv.note),
            Term("kv_cache.state", "kv_cache", f"State pool ({st.slots:,} slots)", st.pool_bytes,
                 "(max_mamba_cache_size + 1) × one request's state", f"{st.slots + 1:,} × {_size(st.slot_bytes)}",
                 src, f"{each}: at most {st.max_running_seqs:,} requests at once")]


def _sums(sv: Serving, context: int, terms_of: dict) -> tuple[tuple[Term, ...], int, int]:
    """(terms, peak allocated, nvidia-smi total) of one GPU holding `sv`: the allocated components and every term
    summed. Equal stages share one Serving (run): their terms and sums are built once, kept in `terms_of`."""
    got = terms_of.get(id(sv))
    if got is None:
        terms = stage_terms(sv, context)
        allocated = sum(t.bytes for t in terms if t.component in ("weights", "activations", "kv_cache", "transient"))
        got = terms_of[id(sv)] = terms, allocated, sum(t.bytes for t in terms)
    return got


def _stage(sv: Serving, shard, context: int, terms_of: dict) -> StageEstimate:
    terms, allocated, total = _sums(sv, context, terms_of)
    return StageEstimate(shard.stage, (shard.first_layer, shard.last_layer), terms, allocated, total)


def _stage_content(m, shard, weights: int):
    """What an engine's budget of one pipeline stage depends on: its weights, whether it holds the head, and its
    layers. Where every layer is alike (no per-layer mixers, windows or Gemma-next sharing) the layers are just a
    count, so the equal middle stages of a split are budgeted once; else the stage's own layer range."""
    layers = shard.last_layer - shard.first_layer if _layers_alike(m) else (shard.first_layer, shard.last_layer)
    return weights, shard.has_head, layers


def _layers_alike(m) -> bool:
    """Every decoder layer alike for the engines' budgets: no per-layer mixers, windows or Gemma-next sharing."""
    return m.layer_types is None and m.gemma_next is None and not m.sliding_window


def run(m, w, shards, gpu) -> tuple[tuple[StageEstimate, ...], Serving]:
    """Every pipeline stage's engine budget; the serving figures are the stage with the fewest blocks (vLLM keeps
    the smallest block count of all workers, kv_cache_planning.get_kv_cache_configs)."""
    results, context = budgets(m, w, shards, gpu)
    terms_of: dict = {}
    stages = tuple(_stage(sv, sh, context, terms_of) for sv, sh in zip(results, shards))
    serving = min(results, key=lambda sv: sv.kv_pool_blocks)
    notes = tuple(n for n in (support.check(m, w), checkpoint_weights_note(m, w), checkpoint_kv_note(m, w)) if n)
    return stages, replace(serving, notes=notes + serving.notes) if notes else serving


def figures(m, w, shards, gpu) -> tuple[int, int, Serving]:
    """(nvidia-smi total of the most loaded GPU, the highest peak allocated, the serving figures): what run()'s
    stages and Serving give estimate() (Estimate.total_bytes, .peak_allocated_bytes, .serving), without a
    StageEstimate per pipeline stage — each distinct budget's terms summed once (_sums). The Serving lacks
    run()'s checkpoint-weights note (a text). The planner's serving grids (calculator.planning.fast.serving_figures)
    ask this of every replica; tests/planning/test_planner_serving_grid.py holds it equal to estimate()."""
    results, context = budgets(m, w, shards, gpu)
    terms_of: dict = {}
    sums = [_sums(sv, context, terms_of) for sv in {id(sv): sv for sv in results}.values()]
    return max(s[2] for s in sums), max(s[1] for s in sums), min(results, key=lambda sv: sv.kv_pool_blocks)


def budgets(m, w, shards, gpu) -> tuple[list[Serving], int]:
    """(each pipeline stage's engine budget, in the shards' order: equal stages share one Serving; the CUDA context
    bytes): the engine's checks, then its budget once per distinct stage content (_stage_content); kv_dtype "auto"
    as the engine picks it (memory.inference.kv_cache_dtype)."""
    w = with_kv_dtype(m, w)
    if gpu is None:
        raise InputError("gpu", f"the {ENGINE_LABELS[w.engine]} budget is a fraction of the GPU's memory: pick a "
                                "GPU (--gpu)")
    ad = w.serving.attention_dp
    if ad > 1 and w.engine != "sglang":
        raise InputError("serving.attention_dp", "DP attention (--attention-dp) is SGLang's; with vLLM give "
                                                 "--dp replicas and --ep for the experts")
    if w.parallel.tp % ad:
        raise InputError("serving.attention_dp", f"--attention-dp {ad} must divide --tp {w.parallel.tp}")
    support.check(m, w)  # refuses a model the engine cannot load (its note: run())
    engine = ENGINES[w.engine]
    context = w.overheads.cuda_context_bytes if w.overheads.cuda_context_bytes is not None else gpu.cuda_context_bytes
    results, same, weights_of, of_shard = [], {}, {}, {}
    alike = _layers_alike(m)
    for sh in shards:
        # what the weights and the content read of a shard, so a split's equal middle stages cost one look-up each
        seen = (sh.total, sh.layer_linear, sh.experts, sh.has_head) + (
            (sh.last_layer - sh.first_layer,) if alike and ad == 1 else (sh.first_layer, sh.last_layer))
        sv = of_shard.get(seen)
        if sv is None:
            # the weights read the shard's parameter counts (and with DP attention its layers)
            counts = (sh.total, sh.layer_linear, sh.experts, sh.has_embedding) + (
                (sh.first_layer, sh.last_layer) if ad > 1 else ())
            weights = weights_of.get(counts)
            if weights is None:
                weights = weights_of[counts] = engine_weight_bytes(m, w, sh, ad)
            key = _stage_content(m, sh, weights)
            if key not in same:
                same[key] = engine.budget(m, w, sh, gpu, weights)
            sv = of_shard[seen] = same[key]
        results.append(sv)
    return results, context


def checkpoint_weights_note(m, w) -> str:
    """What the weights were priced in when the checkpoint's quantization chose it (serving_weight_dtypes)."""
    if w.weight_dtype is not None or not (m.checkpoint_weight_dtype or m.checkpoint_mlp_weight_dtype
                                          or (w.expert_weight_dtype is None and m.checkpoint_expert_weight_dtype)):
        return ""
    wdt, edt = serving_weight_dtypes(m, w)
    mdt = serving_mlp_weight_dtype(m, w)
    mlp = f", dense MLPs and shared experts {mdt}" if mdt != wdt else ""
    return (f"weights as the checkpoint stores them (its quantization_config), which {ENGINE_LABELS[w.engine]} "
            f"loads as they are: decoder linears {wdt}{mlp}, routed experts {edt}; the weight dtype inputs price "
            "others")


def checkpoint_kv_note(m, w) -> str:
    """The KV cache dtype when it is the one the checkpoint's quantization config names (memory.inference.
    kv_cache_dtype: what the engine picks at --kv-cache-dtype auto)."""
    if not m.checkpoint_kv_dtype or w.kv_dtype != m.checkpoint_kv_dtype:
        return ""
    return (f"KV cache {w.kv_dtype}: the checkpoint's quantization config names an {w.kv_dtype} KV cache, which "
            f"{ENGINE_LABELS[w.engine]} uses at --kv-cache-dtype auto (its default); --kv-dtype bf16 prices the other")


def fit_cards(m, w, shards, gpus, needed=None, only: frozenset | None = None) -> tuple[Fit, ...]:
    """Per GPU (of `only`, when given): the engine started on that GPU. fits: it starts and holds the batch's
    sequences at once; tight: it starts but fewer sequences fit (the rest wait in the queue); does not fit: it
    refuses to start."""
    out = []
    for g in gpus:
        if only is not None and g.id not in only:
            continue
        stages, sv = run(m, w, shards, g)
        used = max(s.total_bytes for s in stages)
        if not sv.starts:
            verdict, note = "does not fit", sv.start_error.split(". ")[0]
        elif sv.max_concurrent_seqs < w.micro_batch:
            verdict, note = "tight", f"{sv.max_concurrent_seqs:.1f} of {w.micro_batch} sequences at once"
        else:
            verdict, note = "fits", f"{sv.max_concurrent_seqs:.1f} sequences of {sv.tokens_per_seq:,} tokens"
        cap = getattr(g, "usable_bytes", g.memory_bytes)  # the card's figures against what PyTorch can allocate,
        # as the training cards (calculator.core.fit.fits_for); the verdict is the engine's own (it starts or not)
        fit = Fit(g.id, g.name, cap, used, cap - used, used / cap, verdict,
                  w.parallel.world_size if sv.starts else None, note)
        out.append(planned_fit(fit, *needed(g)) if needed is not None else fit)
    return tuple(out)


def fits_callable(m, w, shards, gpus, needed=None):
    """needed(gpu) -> (Plan | None, bound): the planner's fewest GPUs of that kind (calculator.planning.planner.gpus_needed)."""
    return partial(fit_cards, m, w, shards, gpus, needed)
