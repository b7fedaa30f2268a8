"""The planner's fast byte model: the per-GPU totals of a whole grid of layouts at once, equal to estimate()'s byte
for byte where it applies (tests/planning/test_planner_fast.py checks a random sample of layouts).

Covered: inference with transformers generate() (engine "hf"), here; training, in calculator/planning/fast_training.py. Its per-stage sum (calculator/stages/estimate.py,
inference_stage + finish_stage) depends on the layout only through the pipeline stage's shard (TP, PP with its uneven
stages, EP, expert TP) and, for the NCCL buffers, the number of process groups of size > 1. So each distinct shard
is priced once per distinct stage content (layers, MoE and sliding-window layers, parameters) with the engine's
formula functions (stages.inference.inference_stage term by term without its formula text: weights with their
quantization scales, KV cache, the prefill / decode working set, cuBLAS workspace, the calibrated fragmentation
over the two phases, the CUDA context): what depends on the local shapes once per (TP, expert TP, CP), what
depends on the layers once per content (stage contents from Python prefix sums, kept per model and split; a model
whose middle layers are alike has three contents per split, not PP), all the grid's new contents in one numpy pass
where the weights and the cache are whole bytes (_stage_arrays; _stage_parts one by one otherwise). A layout is
then one dictionary look-up plus its communicators' bytes.

The serving engines vLLM / SGLang (a fit there is the engine starting and holding the batch, not a byte total):
serving_figures, estimate()'s figures per replica (the engine's own budget, calculator/engines) broadcast to every
layout of that replica (grid.replica_key: DP replicas are engines of their own).

A model whose layers mix registry token mixers (DSA, Gated DeltaNet, Mamba-2, KDA, short convolutions, ...) is
covered in inference: its stage contents carry their kinds (architectures.mixer_layers) and each is priced one by one
(_stage_parts) with the kinds' per-token caches, per-sequence states and prefill transients.

Not covered (planner.evaluate falls back to estimate() layout by layout): RL, the training layouts
calculator.planning.fast_training does not cover (its docstring), hybrid models in training, Gemma 3n / 4 and
DeepSeek-V4, vision-language jobs with images, generic networks and the textbook activation model.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import accumulate

import numpy as np

from calculator.memory import activations as act
from calculator.memory import inference as inf
from calculator.model import architectures
from calculator.model import parameters as params
from calculator.core.dtypes import DTYPE_BITS, nbytes
from calculator.core.fit import DEFAULT_CUBLAS_WORKSPACE_BYTES, DEFAULT_CUDA_CONTEXT_BYTES
from calculator.memory.parallel import kv_heads_per_rank
from calculator.model.spec import ModelSpec
from calculator.core.workload import Workload
from calculator.core.errors import InputError


def covers(m, w: Workload) -> bool:
    """Whether the fast model gives estimate()'s bytes for this job's layouts (training: for the layouts
    calculator.planning.fast_training.layout_covered accepts)."""
    from calculator.planning import fast_training
    if w.images_per_sample:
        return False  # a vision-language job: the tower's weights and activations, images lengthen the prompt
    if isinstance(m, ModelSpec) and _hybrid(m) and (w.mode != "infer" or m.gemma_next is not None
                                                    or m.compressed is not None):
        return False  # hybrid token mixers in training, Gemma 3n / 4, DeepSeek-V4: estimate() layout by layout
    if isinstance(m, ModelSpec) and w.mode != "infer" and (architectures.idle_shapes(m)
                                                           or any(architectures.no_grad_moe_shapes(m))):
        return False  # modules built but never run (MiMo's MTP block), experts a text step never reaches
        # (ERNIE-4.5-VL's vision experts): the stack's NoGradRule, estimate() does it
    return (isinstance(m, ModelSpec) and w.mode == "infer" and w.engine == "hf") or fast_training.covers(m, w)


def _hybrid(m: ModelSpec) -> bool:
    """Whether some layer's token mixer is a registry kind (calculator/model/architectures/: DSA, Gated DeltaNet,
    Mamba-2, ...) rather than softmax attention: its stages add the kinds' caches and states (_stage_parts)."""
    return m.layer_types is not None and any(k.mixer not in ("attention", "mla") for k, _ in params.layer_kinds(m))


def _gpu(w: Workload):
    from calculator.stages.terms import gpu_of
    return gpu_of(w.gpu)


class _Shape:
    """What an inference stage's sum depends on besides its layers and parameters: the local shapes of one
    (TP, expert TP, CP), priced once by the engine's functions (EP changes the parameters, not these)."""

    def __init__(self, m: ModelSpec, w: Workload, par):
        self.tp = par.tp
        self.kvh = kv_heads_per_rank(m, par.tp)
        self.per_tok = inf.kv_bytes_per_token_per_layer(m, self.kvh, w.kv_dtype)
        d = act.dims(m, w.model_copy(update={"parallel": par}))
        rope = 0 if m.learned_position_embeddings else (m.qk_rope_head_dim if m.is_mla else m.head_size)
        wdt = w.weight_dtype or w.precision.params
        self.llm_int8 = w.quant_method == "llm-int8" and wdt == "int8"
        mlp = inf.prefill_mlp_phase(m, d.T, d.e, m.hidden_size, d.f, rope, par.expert_tp)
        if self.llm_int8 and m.gated_mlp and not m.is_moe:
            mlp += inf.llm_int8_mlp_extra(d.T, d.e, m.hidden_size, d.f, w.precision.activations == "fp16")
        attn = inf.prefill_attention_phase(m, d.T, d.e, m.hidden_size, d.qd, d.kvd, d.a, d.b, d.s, d.s_kv, rope,
                                           w.attention == "eager")
        self.mlp, self.attn, self.working = mlp, attn, max(mlp, attn)
        self.b, self.s, self.e = d.b, d.s, d.e
        self.decode = inf.decode_working_set(m, d.b, d.e, m.hidden_size, d.f, m.vocab_size // par.tp)


@lru_cache(maxsize=64)
def _cached_tokens(m: ModelSpec, total_tokens: int) -> tuple[int, ...]:
    """Tokens each decoder layer caches (calculator.memory.inference.cached_tokens)."""
    return tuple(inf.cached_tokens(m, i, total_tokens) for i in range(m.num_hidden_layers))


@lru_cache(maxsize=64)
def _cached_token_sums(m: ModelSpec, total_tokens: int) -> tuple[int, ...]:
    """Prefix sums of _cached_tokens."""
    return (0, *accumulate(_cached_tokens(m, total_tokens)))


class _Job:
    """What a stage's sum reads from the workload, read once per grid (_stage_parts runs for every stage content)."""

    def __init__(self, m: ModelSpec, w: Workload):
        self.wdt = w.weight_dtype or w.precision.params
        self.params_dtype, self.group_size, self.method = w.precision.params, w.quant_group_size, w.quant_method
        self.gptq = w.quant_method == "gptq" and self.wdt in ("int4", "int8")
        self.batch, self.seq_len, self.tokens = w.micro_batch, w.seq_len, w.seq_len + w.gen_tokens
        self.cached = _cached_token_sums(m, self.tokens)
        self.hybrid, self.kv_dtype, self.e_model = _hybrid(m), w.kv_dtype, nbytes(1, w.precision.activations)
        o = w.overheads
        self.frag = None if o.fragmentation_pct is not None else (o.fragmentation_states_pct / 100,
                                                                  o.fragmentation_working_pct / 100)


def _stage_parts(m: ModelSpec, job: _Job, shape: _Shape, first_layer: int, last_layer: int, total: int,
                 quantizable: int) -> tuple[int, int | None]:
    """(allocated bytes but the cuBLAS workspace, reserved bytes of the calibrated fragmentation model or None) of
    one inference stage (layers [first_layer, last_layer), `total` parameters of which `quantizable` in the layers'
    linears): stages.inference.inference_stage and stages.terms._overheads, term by term, without building the formula text
    (held equal by the tests)."""
    wdt = job.wdt
    n_layers = last_layer - first_layer
    qbytes = inf.quantized_weight_bytes(quantizable, wdt, job.group_size, job.method)
    if shape.llm_int8:  # bitsandbytes: an fp32 scale per output row
        out_rows = params.layer_linear_out_rows(m) * n_layers // (m.num_hidden_layers * shape.tp)
        qbytes = inf.llm_int8_weight_bytes(quantizable, out_rows)
    weights = qbytes + nbytes(total - quantizable, job.params_dtype)
    transient = 0
    if job.gptq:
        in_rows = params.layer_linear_in_rows(m) * n_layers // (m.num_hidden_layers * shape.tp)
        g_idx, kernel_buffer = inf.gptq_extras(in_rows, params.largest_layer_linear(m) // shape.tp, wdt)
        weights += g_idx
        transient += int(kernel_buffer)
    weights = int(weights)
    per_tok, batch = shape.per_tok, job.batch
    if type(per_tok) is int:  # exact in integers: Σ_layers b·c_i·p = b·p·Σ c_i
        cached = job.cached
        kv = batch * per_tok * (cached[last_layer] - cached[first_layer])
    else:  # fractional bytes per token: the engine's own float sum, layer by layer
        kv = int(sum(batch * c * per_tok for c in _cached_tokens(m, job.tokens)[first_layer:last_layer]))
    prompt_kv = n_layers * batch * job.seq_len * per_tok
    working = shape.working
    if job.hybrid:  # the registry kinds' per-token caches, per-sequence states and prefill transients
        layers = range(first_layer, last_layer)
        kv += inf.extra_kv_bytes(m, layers, batch, job.tokens, job.kv_dtype)
        state = inf.recurrent_state_bytes(m, layers, batch, job.e_model)
        prompt_kv = inf.attention_layers(m, layers) * batch * job.seq_len * per_tok + state
        kv += state
        working = max(shape.mlp, shape.attn + inf.mixers_prefill_transient(m, layers, shape.b, shape.s, shape.e))
    prefill_peak = prompt_kv + working
    decode_peak = kv + shape.decode
    working = int(max(prefill_peak, decode_peak) - kv)
    reserved = None
    if job.frag is not None:
        a, b = job.frag
        phases = ((weights + prompt_kv, weights + prefill_peak), (weights + kv, weights + decode_peak))
        reserved = int(max((alloc + a * long + b * (alloc - long), long, alloc) for long, alloc in phases)[0])
    return weights + kv + working + transient, reserved


def _on_gpu(w: Workload, gpu, allocated: np.ndarray, reserved: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(total without NCCL buffers, peak allocated) of priced stages on the workload's GPU: their cuBLAS workspace
    (allocated), the fragmentation (stages.terms._overheads: reserved − allocated, or a flat share) and the context;
    int64 arrays, the flat share in float64 as Python computes it."""
    o = w.overheads
    cublas = o.cublas_workspace_bytes if o.cublas_workspace_bytes is not None else (
        gpu.cublas_workspace_bytes if gpu is not None else DEFAULT_CUBLAS_WORKSPACE_BYTES)
    peak = allocated + int(cublas)
    frag = (peak * o.fragmentation_pct / 100).astype(np.int64) if reserved is None else np.maximum(0, reserved - peak)
    ctx = o.cuda_context_bytes if o.cuda_context_bytes is not None else (
        gpu.cuda_context_bytes if gpu is not None else DEFAULT_CUDA_CONTEXT_BYTES)
    return peak + frag + int(ctx), peak


def _whole_bytes(job: _Job, shape: _Shape) -> bool:
    """Whether _stage_arrays prices this shape's stages: weights in whole bytes per element without group scales,
    no LLM.int8 or GPTQ extras, whole bytes per cached token and integer working sets (the common case)."""
    return (not job.hybrid and not shape.llm_int8 and not job.gptq and job.wdt not in inf.GROUP_SCALE_BYTES
            and all(type(v) is int for v in (shape.per_tok, shape.working, shape.decode)))


def _stage_arrays(job: _Job, shapes: list[_Shape], stages: list[tuple]) -> tuple[np.ndarray, np.ndarray | None]:
    """_stage_parts of many stages at once (their shapes and (first layer, last layer, parameters, quantizable)),
    for the shapes _whole_bytes accepts: the same integer sums in int64, the fragmentation model's reserved bytes in
    float64 in Python's order of operations (exact below 2**53 bytes)."""
    first, last, total, quant = (np.array(col, dtype=np.int64) for col in zip(*stages))
    per_tok, work, dec = (np.array(col, dtype=np.int64) for col in zip(*[(s.per_tok, s.working, s.decode)
                                                                           for s in shapes]))
    weights = -(-quant * DTYPE_BITS[job.wdt] // 8) + -(-(total - quant) * DTYPE_BITS[job.params_dtype] // 8)
    cached = np.array(job.cached, dtype=np.int64)
    kv = job.batch * per_tok * (cached[last] - cached[first])
    prompt_kv = (last - first) * job.batch * job.seq_len * per_tok
    prefill_peak, decode_peak = prompt_kv + work, kv + dec
    allocated = weights + kv + (np.maximum(prefill_peak, decode_peak) - kv)
    if job.frag is None:
        return allocated, None
    a, b = job.frag
    phases = [(weights + long, weights + peak) for long, peak in ((prompt_kv, prefill_peak), (kv, decode_peak))]
    reserved = np.maximum(*(alloc + a * long + b * (alloc - long) for long, alloc in phases))
    return allocated, reserved.astype(np.int64)


def _price(m: ModelSpec, job: _Job, todo: dict) -> dict:
    """content -> (allocated, reserved or None) of every stage content in `todo` (content -> (shape, stage)):
    _stage_arrays where _whole_bytes, _stage_parts one by one otherwise."""
    out, whole = {}, []
    ok = {id(shape): _whole_bytes(job, shape) for shape, _ in todo.values()}
    for c, (shape, stage) in todo.items():
        if ok[id(shape)]:
            whole.append((c, shape, stage))
        else:
            out[c] = _stage_parts(m, job, shape, *stage)
    if whole:
        allocated, reserved = _stage_arrays(job, [s for _, s, _ in whole], [st for _, _, st in whole])
        res = [None] * len(whole) if reserved is None else reserved.tolist()
        out.update(zip((c for c, _, _ in whole), zip(allocated.tolist(), res)))
    return out


@lru_cache(maxsize=8)
def _priced(m: ModelSpec, w_without_gpu: Workload) -> dict:
    """Stage contents priced for a job, shared by every GPU the fit cards ask about (the GPU only adds its cuBLAS
    workspace and context); clear_cache() empties it."""
    return {}


def clear_cache() -> None:
    _priced.cache_clear()


def totals(m, w: Workload, layouts) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(nvidia-smi total, peak allocated, covered) of the most loaded GPU of every layout, as numpy arrays; None
    where the fast model does not cover the job. The caller estimates the layouts not covered with estimate()."""
    w = inf.with_kv_dtype(m, w)  # kv_dtype "auto" as the runtime picks it, as estimate() does
    if not covers(m, w) or not layouts:
        return None
    if w.mode == "train":
        from calculator.planning import fast_training
        return fast_training.totals(m, w, layouts)
    from calculator.planning.grid import workload_of
    gpu = _gpu(w)
    # content -> parts, shared by every GPU the fit cards ask about; shapes and stage bounds -> content
    priced = _priced(m, w.model_copy(update={"gpu": None}))
    per_key: dict[tuple, int] = {}  # layout's shape and split -> its row in `stages`
    stages: list[tuple] = []  # each key's stage contents
    todo: dict[tuple, tuple] = {}  # content -> (shape, stage) not yet priced
    for lay in layouts:
        key = (lay.tp, lay.pp, lay.ep, lay.etp, lay.pp_first, lay.pp_last)
        if key in per_key:
            continue
        per_key[key] = len(stages)
        contents = _contents(m, *key)
        stages.append(tuple(c for c, _ in contents))
        skey = ("shape", lay.tp, lay.etp or lay.tp, lay.cp)  # what _Shape reads of the layout (EP: no bytes here)
        shape = priced.get(skey)
        if shape is None:  # a stage's bytes depend on its shape and content only: price each once
            shape = priced[skey] = _Shape(m, w, workload_of(w, lay).parallel)
        for c, stage in contents:
            if c not in priced:
                todo[c] = (shape, stage)
    priced.update(_price(m, _Job(m, w), todo))
    used = list({c: None for row in stages for c in row})
    parts = [priced[c] for c in used]
    reserved = None if parts[0][1] is None else np.array([p[1] for p in parts], dtype=np.int64)
    on_gpu = _on_gpu(w, gpu, np.array([p[0] for p in parts], dtype=np.int64), reserved)
    stage_bytes = dict(zip(used, zip(*(a.tolist() for a in on_gpu))))
    worst = []  # per key: (nvidia-smi total, peak allocated) of its most loaded stage, and its largest peak
    for row in stages:
        got = [stage_bytes[c] for c in row]
        worst.append((max(got)[0], max(p for _, p in got)))
    o = w.overheads
    nccl = o.nccl_bytes_per_group if o.include_comm_buffers else 0
    total, peak = [], []
    for lay in layouts:
        tp, pp, ep = lay.tp, lay.pp, lay.ep
        most, top = worst[per_key[(tp, pp, ep, lay.etp, lay.pp_first, lay.pp_last)]]
        groups = (tp > 1) + (pp > 1) + (lay.dp * lay.cp > 1) + (lay.cp > 1) + (ep > 1)
        total.append(most + groups * nccl)
        peak.append(top)
    n = len(layouts)
    return np.array(total, dtype=np.int64), np.array(peak, dtype=np.int64), np.ones(n, dtype=bool)


@lru_cache(maxsize=4096)
def _contents(m: ModelSpec, tp: int, pp: int, ep: int, etp: int | None, first: int | None,
              last: int | None) -> tuple:
    """((TP, EP, expert TP, content), (first layer, last layer, parameters, quantizable)) of each distinct stage
    content of a split (calculator/planning/fast_stages.py: stage shards from prefix sums over the layers); what the
    model's layers give, whatever the workload, so kept between grids like the prefix sums."""
    from calculator.planning import fast_stages as fs
    if pp == 1:
        from calculator.memory.parallel import stage_shards
        from calculator.core.workload import Parallelism
        s = stage_shards(m, Parallelism(tp=tp, ep=ep, etp=etp))[0]
        return (((tp, ep, etp, "whole"), (s.first_layer, s.last_layer, s.total, s.layer_linear)),)
    bounds, prefix = fs.layer_bounds(m.num_hidden_layers, pp, first, last), fs.python_prefix(m, tp, ep, etp)
    out, seen = [], set()
    # the middle stages are even: from the layer where every middle layer is alike, one stands for all of them
    for s, _ in fs.stage_runs(pp, bounds, fs.uniform_from(m, tp, ep, etp)):
        a, b = bounds[s], bounds[s + 1]
        lo, hi = prefix[a], prefix[b]
        diff = (hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2], hi[3] - lo[3], hi[4] - lo[4], hi[5] - lo[5])
        c = (tp, ep, etp, b - a, s == 0, s == pp - 1) + diff + (
            (architectures.mixer_layers(m, a, b),) if m.layer_types is not None else ())
        if c not in seen:
            seen.add(c)
            out.append((c, (a, b, diff[0] + diff[1], diff[4])))
    return tuple(out)


def serving_figures(m, w: Workload, layouts) -> list[tuple | None]:
    """Per layout of a serving engine (vLLM / SGLang): (nvidia-smi total, peak allocated, whether the engine starts
    and holds the batch's sequences at once, the sequences its KV pool holds, the scheduler's cap), or None where the
    engine or the layout checks refuse it. estimate()'s figures once per replica (grid.replica_key), so the engine's
    budget (calculator/engines/vllm.py, sglang.py budget) runs once per replica shape and stage, whatever the DP
    replicas; without the Estimate itself (stages.estimate.engine_figures: each distinct stage budget's terms summed
    once, not a StageEstimate per pipeline stage)."""
    w = inf.with_kv_dtype(m, w)
    from calculator.planning.grid import replica_key, workload_of
    from calculator.stages.estimate import engine_figures
    from calculator.timing.serving_time import scheduler_cap
    per_replica: dict = {}
    out = []
    for lay in layouts:
        key = replica_key(w, lay)
        got = per_replica.get(key, ())
        if got == ():
            try:  # estimate()'s figures without the Estimate (stages.estimate.engine_figures)
                total, peak, sv = engine_figures(m, workload_of(w, lay))
            except InputError:
                got = None
            else:
                got = total, peak, engine_fits(sv, w), sv.max_concurrent_seqs, scheduler_cap(sv, w)
            per_replica[key] = got
        out.append(got)
    return out


def engine_fits(sv, w: Workload) -> bool:
    """A serving engine's layout fits when the engine starts and its KV pool holds the batch's sequences at once."""
    return sv.starts and sv.max_concurrent_seqs >= w.micro_batch
