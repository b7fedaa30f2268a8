"""Inference time: the prefill (time to first token) and the decode steps (time per output token) of generate().

Prefill runs every layer over the b·s prompt tokens and the LM head over the last token of each sequence
(generate() asks for logits_to_keep = 1). A decode step runs every layer over b tokens against the cache: each
linear reads its whole weight (the memory-bound regime of decoding; Pope et al. 2022, Efficiently Scaling Transformer
Inference §2), the attention reads the cached keys and values, and transformers' DynamicCache appends the new ones
with torch.cat, which reads and writes the whole cache of the layer again (cache_utils.py DynamicLayer.update).
Decode cost grows linearly with the cache, so the step at the mean cache length s + (gen − 1)/2 is the mean step.
"""
from __future__ import annotations

import numpy as np

from calculator.memory.activations import dims
from calculator.core.dtypes import DTYPE_BITS
from calculator.model import architectures
from calculator.model.spec import LayerKind, ModelSpec
from calculator.memory.inference import serving_weight_dtypes
from calculator.memory.parallel import stage_shards
from calculator.timing.roofline import Op, Rates
from calculator.timing.ops import head_forward, layer_forward, weight_bytes_per_element
from calculator.timing.comm_time import forward_comm
from calculator.timing.inputs import TimingInputs
from calculator.timing.rows import TimeEstimate, aggregate_rows, cost_per_million, op_seconds
from calculator.timing import train_ops as T
from calculator.core.workload import Workload


def layer_ops(m: ModelSpec, w: Workload, d, key: tuple, e_w: float, cached: int | None, phase: str) -> list[Op]:
    """One layer of a group's forward pass: prefill (cached=None) or a decode step against `cached` tokens, with
    the decode step's KV-cache append."""
    moe, window, mixer, ffn, slot = key
    m = m.ffn_of(LayerKind(mixer, ffn, slot))
    p = w.parallel
    eager = w.attention == "eager"
    keys = None if cached is None else (min(cached, window) if window else cached) + 1
    ops = in_phase(layer_forward(m, d, moe=moe, window=window, eager=eager, e_w=e_w, expert_tp=p.expert_tp, ep=p.ep,
                                 s_kv=keys, mixer=mixer, ffn=ffn), phase)
    # transformers' DynamicCache appends with torch.cat (the whole cache read and written again each step); vLLM and
    # SGLang write the new token's K and V into their paged pool in place (vLLM reshape_and_cache): no such copy
    if keys is not None and architectures.with_attention(mixer) and w.engine == "hf":
        e_kv = DTYPE_BITS[w.kv_dtype] / 8
        kv_heads = d.a if m.is_mla else d.kv
        cache = e_kv * d.b * keys * kv_heads * (m.head_size + m.v_head_size)
        copies = 2 * cache * (d.a / kv_heads if eager else 1)  # eager also expands the cache (repeat_kv)
        ops.append(Op("KV cache append (torch.cat)", phase, "elementwise", 0.0, 2 * cache + copies, 2,
                      "read + write the layer's cache, per step", "kv-cache"))
    return ops


def head_ops(m: ModelSpec, w: Workload, d, embedding: bool, head: bool, phase: str) -> list[Op]:
    """The embedding (first stage) and the final norm + LM head on the last token (last stage)."""
    e_head = DTYPE_BITS[w.precision.params] / 8
    ops = head_forward(m, d, e_head, m.vocab_size // w.parallel.tp, d.b, with_loss=False)
    return in_phase([o for o in ops if (o.name == "Embedding" and embedding) or (o.name != "Embedding" and head)],
                    phase)


def in_phase(ops: list[Op], phase: str) -> list[Op]:
    """The operations in `phase` (Op._replace(phase=...) without its keyword handling: the planner's serving grids
    build these lists for every running batch)."""
    return [Op._make((o[0], phase) + o[2:]) for o in ops]


def dequantize_op(w: Workload, layers: int, layer_linear: int, phase: str) -> list[Op]:
    """bitsandbytes dequantizes every weight of the stage before its matmul (nf4 / int8 weights)."""
    if w.weight_dtype not in ("nf4", "int8"):
        return []
    return [Op("bitsandbytes dequantize", phase, "elementwise", 0.0, 2.5 * layer_linear, 7 * layers,
               "read the packed weight, write it in bf16", "quantization")]


def _stage(m: ModelSpec, w: Workload, d, shard, e_w: float, cached: int | None, phase: str, r: Rates, fp32: float,
           inputs: TimingInputs, cache: dict) -> np.ndarray:
    """STATS (calculator.timing.train_ops) of one forward pass of a stage: Σ n × one layer of each group + the
    stage's dequantize + its embedding / head."""
    total = np.zeros(len(T.STATS))
    for key, n in T.layer_groups(m, shard.first_layer, shard.last_layer).items():
        st = cache.get((key, phase))
        if st is None:
            st = cache[(key, phase)] = T.stats(layer_ops(m, w, d, key, e_w, cached, phase), r, fp32, inputs, d)
        total = total + n * st
    extra = dequantize_op(w, shard.last_layer - shard.first_layer, shard.layer_linear, phase) + head_ops(
        m, w, d, shard.has_embedding, shard.has_head, phase)
    return total + T.stats(extra, r, fp32, inputs, d)


def _stage_ops(m: ModelSpec, w: Workload, d, shard, e_w: float, cached: int | None, phase: str) -> list[Op]:
    """The operations of one forward pass of a stage, scaled by their layers (the roofline table's rows)."""
    ops: list[Op] = []
    for key, n in T.layer_groups(m, shard.first_layer, shard.last_layer).items():
        ops += [o.scaled(n) for o in layer_ops(m, w, d, key, e_w, cached, phase)]
    return ops + dequantize_op(w, shard.last_layer - shard.first_layer, shard.layer_linear, phase) + head_ops(
        m, w, d, shard.has_embedding, shard.has_head, phase)


def decode_dims(d, w: Workload) -> tuple:
    """(the decode step's dims, the mean cache length it attends over): s + (gen − 1)/2."""
    mean_cache = w.seq_len + max(0, w.gen_tokens - 1) / 2
    return d._replace(s=1, T=d.b, s_kv=int(mean_cache)), int(mean_cache)


def call_seconds(prefill_s, decode_s, comm_pre, comm_dec, gen: int, overhead_s: float):
    """(generate() seconds, time to first token, time per output token or None), on numbers or arrays."""
    ttft = prefill_s + comm_pre + overhead_s
    if gen <= 1:
        return ttft, ttft, None
    tpot = decode_s + comm_dec + overhead_s
    return ttft + (gen - 1) * tpot, ttft, tpot


def estimate_inference_time(m: ModelSpec, w: Workload, inputs: TimingInputs, gpu, r: Rates, fp32: float):
    p = w.parallel
    d = dims(m, w)
    e_w = weight_bytes_per_element(serving_weight_dtypes(m, w)[0])
    shards = stage_shards(m, p)
    gen = w.gen_tokens
    d_dec, mean_cache = decode_dims(d, w)
    pre_cache: dict = {}
    dec_cache: dict = {}
    pre = [_stage(m, w, d, s, e_w, None, "prefill", r, fp32, inputs, pre_cache) for s in shards]
    dec = [_stage(m, w, d_dec, s, e_w, mean_cache, "decode", r, fp32, inputs, dec_cache) for s in shards] \
        if gen > 1 else []
    # one batch walks the stages one after the other: each bound by the slower of its GPU and its host
    prefill_t = sum(max(s[T.GPU], s[T.HOST]) for s in pre)
    decode_t = sum(max(s[T.GPU], s[T.HOST]) for s in dec)
    layers, moe_layers = m.num_hidden_layers, m.moe_layer_count
    comm_pre, t_comm_pre = forward_comm(m, w, inputs, gpu, d.T, "prefill", layers, moe_layers)
    comm_dec, t_comm_dec = forward_comm(m, w, inputs, gpu, d.b, "decode", layers, moe_layers)
    total, ttft, tpot = call_seconds(prefill_t, decode_t, t_comm_pre, t_comm_dec, gen,
                                     inputs.decode_step_overhead_ms * 1e-3)
    steps = max(0, gen - 1)
    both = sum(pre) + steps * sum(dec) if dec else sum(pre)
    gpu_total, host_total = both[T.GPU], both[T.HOST]
    prefill_ops = [o for s in shards for o in _stage_ops(m, w, d, s, e_w, None, "prefill")]
    decode_ops = [o for s in shards for o in _stage_ops(m, w, d_dec, s, e_w, mean_cache, "decode")] if dec else []
    rows = aggregate_rows(prefill_ops, [op_seconds(o, r, fp32) for o in prefill_ops], r, 1) + comm_pre
    if decode_ops:
        rows += aggregate_rows(decode_ops, [op_seconds(o, r, fp32) for o in decode_ops], r, 1) + comm_dec
    tokens = w.micro_batch * (gen if gen else w.seq_len) * p.dp
    flops = both[T.HW_FLOPS]
    world = p.world_size
    mfu = flops / (r.peak_flops * p.pp * total) if total else 0.0
    notes = (("time per output token at the mean cache length; the decode step overhead is HF generate()'s "
              "per-token cost beyond its kernels",) if w.engine == "hf" else
             ("time per output token at the mean cache length; the batch is priced as one prefill and its decode "
              "steps, each with the host overhead per step measured on transformers' eager loop: "
              f"{ENGINE_NAMES.get(w.engine, w.engine)}'s scheduler (continuous batching, chunked prefill, CUDA "
              "graphs) is not modelled",))
    comm_s = t_comm_pre + steps * t_comm_dec
    comm = comm_parts(comm_pre, comm_dec, steps)
    bottleneck = INFERENCE_BOTTLENECKS[int(np.argmax(inference_parts(both, total, comm)))]
    return TimeEstimate("infer", gpu.id, total, tokens, tokens / total, mfu, mfu, flops * p.tp * p.dp,
                        gpu_total, host_total, comm_s, 0.0, world,
                        cost_per_million(inputs.price_per_gpu_hour, world, total, tokens), ttft_s=ttft,
                        tpot_s=tpot, roofline=tuple(rows), notes=notes, bottleneck=bottleneck)


ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
INFERENCE_BOTTLENECKS = ("compute", "memory", "host", "TP comm", "EP comm", "PP comm")


def comm_parts(comm_pre, comm_dec, steps: int) -> tuple[float, float, float]:
    """Seconds of TP, EP and PP communication over a generate() call (from forward_comm's rows)."""
    out = {"TP": 0.0, "EP": 0.0, "PP": 0.0}
    for rows, times_n in ((comm_pre, 1), (comm_dec, steps)):
        for row in rows:
            out[row.name.split(" ")[0]] += row.time_s * times_n
    return out["TP"], out["EP"], out["PP"]


def comm_arrays(m: ModelSpec, c: dict, e: float, tokens, gpu, inputs: TimingInputs, phase: str):
    """(TP, EP, PP) seconds of one forward pass for a grid of layouts (columns `c`; comm_time.forward_items)."""
    from calculator.timing.comm_time import forward_items, forward_seconds
    items = forward_items(c, e, tokens, m.num_hidden_layers, m.moe_layer_count if m.is_moe else 0, m.hidden_size,
                          m.num_experts_per_tok if m.is_moe else 0, phase)
    return tuple(forward_seconds(items, gpu, inputs))


def inference_parts(both, total, comm: tuple):
    """Seconds of a generate() call per INFERENCE_BOTTLENECKS entry: compute- and memory-bound kernels, the host
    (per-step overhead and dispatch beyond the GPU's time), each group's communication (numbers or arrays)."""
    gpu, compute = both[T.GPU], both[T.COMPUTE]
    tp, ep, pp = comm
    return (compute, gpu - compute, np.maximum(0.0, total - gpu - tp - ep - pp), tp, ep, pp)
