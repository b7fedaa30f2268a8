"""The planner's fast byte model: the per-GPU totals of a whole grid of layouts at once, equal to estimate()'s byte
for byte where it applies (tests/test_planner_fast.py checks a random sample of layouts).

Covered: inference with transformers generate() (engine "hf"), here; training, in calculator/planner_fast_train.py. Its per-stage sum (calculator/estimate.py,
_stage_inference + _finish) depends on the layout only through the pipeline stage's shard (TP, PP with its uneven
stages, EP, expert TP) and, for the NCCL buffers, the number of process groups of size > 1. So each distinct shard
is priced once per distinct stage content (layers, MoE and sliding-window layers, parameters) with the engine's
formula functions (estimate._stage_inference term by term without its formula text: weights with their
quantization scales, KV cache, the prefill / decode working set, cuBLAS workspace, the calibrated fragmentation
over the two phases, the CUDA context), and the grid is then one numpy gather plus the communicators' bytes per
layout.

Not covered (planner.evaluate falls back to estimate() layout by layout): RL, the training layouts
planner_fast_train does not cover (its docstring), the serving engines vLLM / SGLang (a fit there is the engine starting and holding the batch, not a byte total), generic
networks and the textbook activation model.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from calculator import activations as act
from calculator import inference as inf
from calculator import parameters as params
from calculator.dtypes import nbytes
from calculator.hardware import DEFAULT_CUBLAS_WORKSPACE_BYTES, DEFAULT_CUDA_CONTEXT_BYTES
from calculator.parallel import kv_heads_per_rank
from calculator.model import ModelSpec
from calculator.workload import Workload


def covers(m, w: Workload) -> bool:
    """Whether the fast model gives estimate()'s bytes for this job's layouts (training: for the layouts
    calculator.planner_fast_train.layout_covered accepts)."""
    from calculator import planner_fast_train
    return (isinstance(m, ModelSpec) and w.mode == "infer" and w.engine == "hf") or planner_fast_train.covers(m, w)


def _gpu(w: Workload):
    from calculator.estimate import _gpu as gpu_of
    return gpu_of(w.gpu)


def _stage_parts(m: ModelSpec, w: Workload, par, shard) -> tuple[int, int | None]:
    """(allocated bytes but the cuBLAS workspace, reserved bytes of the calibrated fragmentation model or None) of
    one inference stage: estimate.py's _stage_inference and _overheads, term by term, without building the formula
    text (5-10× faster; held equal by the tests)."""
    wdt = w.weight_dtype or w.precision.params
    n_layers = shard.last_layer - shard.first_layer
    layers = range(shard.first_layer, shard.last_layer)
    quantizable = shard.layer_linear
    qbytes = inf.quantized_weight_bytes(quantizable, wdt, w.quant_group_size, w.quant_method)
    llm_int8 = w.quant_method == "llm-int8" and wdt == "int8"
    if llm_int8:  # bitsandbytes: an fp32 scale per output row
        out_rows = params.layer_linear_out_rows(m) * n_layers // (m.num_hidden_layers * par.tp)
        qbytes = inf.llm_int8_weight_bytes(quantizable, out_rows)
    weights = qbytes + nbytes(shard.total - quantizable, w.precision.params)
    transient = 0
    if w.quant_method == "gptq" and wdt in ("int4", "int8"):
        in_rows = params.layer_linear_in_rows(m) * n_layers // (m.num_hidden_layers * par.tp)
        g_idx, kernel_buffer = inf.gptq_extras(in_rows, params.largest_layer_linear(m) // par.tp, wdt)
        weights += g_idx
        transient += int(kernel_buffer)
    weights = int(weights)
    kvh = kv_heads_per_rank(m, par.tp)
    kv = int(inf.kv_cache_bytes(m, layers, w.micro_batch, w.seq_len + w.gen_tokens, kvh, w.kv_dtype))
    per_tok = inf.kv_bytes_per_token_per_layer(m, kvh, w.kv_dtype)
    lw = w.model_copy(update={"parallel": par})
    d = act.dims(m, lw)
    rope = 0 if m.learned_position_embeddings else (m.qk_rope_head_dim if m.is_mla else m.head_size)
    mlp = inf.prefill_mlp_phase(m, d.T, d.e, m.hidden_size, d.f, rope, par.expert_tp)
    if llm_int8 and m.gated_mlp and not m.is_moe:
        mlp += inf.llm_int8_mlp_extra(d.T, d.e, m.hidden_size, d.f, w.precision.activations == "fp16")
    attn = inf.prefill_attention_phase(m, d.T, d.e, m.hidden_size, d.qd, d.kvd, d.a, d.b, d.s, d.s_kv, rope,
                                       w.attention == "eager")
    prompt_kv = n_layers * w.micro_batch * w.seq_len * per_tok
    prefill_peak = prompt_kv + max(mlp, attn)
    decode_peak = kv + inf.decode_working_set(m, d.b, d.e, m.hidden_size, d.f, m.vocab_size // par.tp)
    working = int(max(prefill_peak, decode_peak) - kv)
    reserved = None
    if w.overheads.fragmentation_pct is None:
        a, b = w.overheads.fragmentation_states_pct / 100, w.overheads.fragmentation_working_pct / 100
        phases = [(weights + prompt_kv, weights + prefill_peak), (weights + kv, weights + decode_peak)]
        reserved = int(max((alloc + a * long + b * (alloc - long), long, alloc) for long, alloc in phases)[0])
    return weights + kv + working + transient, reserved


def _on_gpu(w: Workload, gpu, parts: tuple[int, int | None]) -> tuple[int, int]:
    """(total without NCCL buffers, peak allocated) of a priced stage on the workload's GPU: its cuBLAS workspace
    (allocated), the fragmentation (estimate._overheads: reserved − allocated, or a flat share) and the context."""
    allocated, reserved = parts
    o = w.overheads
    cublas = o.cublas_workspace_bytes if o.cublas_workspace_bytes is not None else (
        gpu.cublas_workspace_bytes if gpu is not None else DEFAULT_CUBLAS_WORKSPACE_BYTES)
    peak = allocated + int(cublas)
    frag = int(peak * o.fragmentation_pct / 100) if reserved is None else max(0, reserved - peak)
    ctx = o.cuda_context_bytes if o.cuda_context_bytes is not None else (
        gpu.cuda_context_bytes if gpu is not None else DEFAULT_CUDA_CONTEXT_BYTES)
    return peak + frag + int(ctx), peak


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
    if not covers(m, w) or not layouts:
        return None
    if w.mode == "train":
        from calculator import planner_fast_train
        return planner_fast_train.totals(m, w, layouts)
    from calculator import planner_stages as stages
    from calculator.planner_grid import workload_of
    gpu = _gpu(w)
    keys: dict[tuple, int] = {}
    # (tp, ep, etp, stage content) -> parts; layout key -> its distinct stage contents
    priced = _priced(m, w.model_copy(update={"gpu": None}))
    key_of = np.empty(len(layouts), dtype=np.int64)
    groups = np.empty(len(layouts), dtype=np.int64)
    per_key: list[tuple[int, int]] = []
    for i, lay in enumerate(layouts):
        key = (lay.tp, lay.pp, lay.ep, lay.etp, lay.pp_first, lay.pp_last)
        k = keys.get(key)
        if k is None:
            contents = priced.get(key)
            if contents is None:  # a stage's bytes depend on its content only: price each content once
                par = workload_of(w, lay).parallel
                bounds = stages.boundaries(m, lay) if lay.pp > 1 else [0, m.num_hidden_layers]
                contents = priced[key] = []
                for s in range(lay.pp):
                    c = (lay.tp, lay.ep, lay.etp) + stages.content(m, lay, s, bounds)
                    if c not in priced:
                        priced[c] = _stage_parts(m, w, par, stages.shard(m, lay, s, bounds))
                    if c not in contents:
                        contents.append(c)
            worst = (0, 0)
            best_peak = 0
            for c in contents:
                stage_bytes = _on_gpu(w, gpu, priced[c])
                worst = max(worst, stage_bytes)
                best_peak = max(best_peak, stage_bytes[1])
            k = keys[key] = len(per_key)
            per_key.append((worst[0], best_peak))
        key_of[i] = k
        groups[i] = (lay.tp > 1) + (lay.pp > 1) + (lay.dp * lay.cp > 1) + (lay.cp > 1) + (lay.ep > 1)
    table = np.array(per_key, dtype=np.int64)
    o = w.overheads
    comm = groups * o.nccl_bytes_per_group if o.include_comm_buffers else np.zeros(len(layouts), dtype=np.int64)
    return table[key_of, 0] + comm, table[key_of, 1], np.ones(len(layouts), dtype=bool)
