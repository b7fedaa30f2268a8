"""Inference time: the prefill (time to first token) and the decode steps (time per output token) of generate().

Prefill runs every layer over the b·s prompt tokens and the LM head over the last token of each sequence
(generate() asks for logits_to_keep = 1). A decode step runs every layer over b tokens against the cache: each
linear reads its whole weight (the memory-bound regime of decoding; Pope et al. 2022, Efficiently Scaling Transformer
Inference §2), the attention reads the cached keys and values, and transformers' DynamicCache appends the new ones
with torch.cat, which reads and writes the whole cache of the layer again (cache_utils.py DynamicLayer.update).
Decode cost grows linearly with the cache, so the step at the mean cache length s + (gen − 1)/2 is the mean step.
"""
from __future__ import annotations

from calculator.memory.activations import dims
from calculator.core.dtypes import DTYPE_BITS
from calculator.model import architectures
from calculator.model.spec import ModelSpec
from calculator.memory.parallel import stage_shards
from calculator.timing.roofline import Op, Rates
from calculator.timing.ops import head_forward, layer_forward, weight_bytes_per_element
from calculator.timing.comm_time import forward_comm
from calculator.timing.inputs import TimingInputs
from calculator.timing.rows import TimeEstimate, aggregate_rows, cost_per_million, host_seconds, op_seconds
from calculator.core.workload import Workload


def _layer_windows(m: ModelSpec, first: int, last: int) -> dict[tuple, int]:
    """Layers of a stage grouped by (MoE, sliding window, mixer kind, feed-forward kind)."""
    groups: dict[tuple, int] = {}
    for i in range(first, last):
        kind = m.layer_kind(i)
        key = (m.layer_is_moe(i), m.sliding_window if m.layer_is_sliding(i) else None, kind.mixer, kind.ffn)
        groups[key] = groups.get(key, 0) + 1
    return groups


def _forward_ops(m: ModelSpec, w: Workload, d, shard, e_w: float, cached: int | None, phase: str) -> list[Op]:
    """The ops of one forward pass of a stage: prefill (cached=None) or a decode step against `cached` tokens."""
    p = w.parallel
    eager = w.attention == "eager"
    ops: list[Op] = []
    e_kv = DTYPE_BITS[w.kv_dtype] / 8
    for (moe, window, mixer, ffn), n in _layer_windows(m, shard.first_layer, shard.last_layer).items():
        keys = None if cached is None else (min(cached, window) if window else cached) + 1
        fwd = layer_forward(m, d, moe=moe, window=window, eager=eager, e_w=e_w, expert_tp=p.expert_tp, ep=p.ep,
                            s_kv=keys, mixer=mixer, ffn=ffn)
        ops += [o.scaled(n, phase=phase) for o in fwd]
        if keys is not None and architectures.with_attention(mixer):
            kv_heads = d.a if m.is_mla else d.kv
            cache = e_kv * d.b * keys * kv_heads * (m.head_size + m.v_head_size)
            copies = 2 * cache * (d.a / kv_heads if eager else 1)  # eager also expands the cache (repeat_kv)
            ops.append(Op("KV cache append (torch.cat)", phase, "elementwise", 0.0, n * (2 * cache + copies),
                          2 * n, "read + write the layer's cache, per step", "kv-cache"))
    if w.weight_dtype in ("nf4", "int8"):  # bitsandbytes dequantizes every weight before its matmul
        ops.append(Op("bitsandbytes dequantize", phase, "elementwise", 0.0, 2.5 * shard.layer_linear,
                      7 * (shard.last_layer - shard.first_layer), "read the packed weight, write it in bf16",
                      "quantization"))
    if shard.has_embedding or shard.has_head:
        e_head = DTYPE_BITS[w.precision.params] / 8
        head = head_forward(m, d, e_head, m.vocab_size // p.tp, d.b, with_loss=False)
        ops += [o._replace(phase=phase) for o in head
                if (o.name == "Embedding" and shard.has_embedding) or (o.name != "Embedding" and shard.has_head)]
    return ops


def estimate_inference_time(m: ModelSpec, w: Workload, inputs: TimingInputs, gpu, r: Rates, fp32: float):
    p = w.parallel
    d = dims(m, w)
    e_w = weight_bytes_per_element(w.weight_dtype or w.precision.params)
    shards = stage_shards(m, p)
    gen = w.gen_tokens
    mean_cache = w.seq_len + max(0, gen - 1) / 2
    d_dec = d._replace(s=1, T=d.b, s_kv=int(mean_cache))
    prefill_t = decode_t = 0.0
    prefill_ops: list[Op] = []
    decode_ops: list[Op] = []
    gpu_total = host_total = 0.0
    for shard in shards:  # one batch walks the stages one after the other
        pre = _forward_ops(m, w, d, shard, e_w, None, "prefill")
        pre_times = [op_seconds(o, r, fp32) for o in pre]
        pre_host = host_seconds(pre, inputs)
        prefill_t += max(sum(pre_times), pre_host)
        prefill_ops += pre
        if gen > 1:
            dec = _forward_ops(m, w, d_dec, shard, e_w, int(mean_cache), "decode")
            dec_times = [op_seconds(o, r, fp32) for o in dec]
            dec_host = host_seconds(dec, inputs)
            decode_t += max(sum(dec_times), dec_host)
            decode_ops += dec
            gpu_total += sum(dec_times) * (gen - 1)
            host_total += dec_host * (gen - 1)
        gpu_total += sum(pre_times)
        host_total += pre_host
    layers, moe_layers = m.num_hidden_layers, m.moe_layer_count
    comm_pre, t_comm_pre = forward_comm(m, w, inputs, gpu, d.T, "prefill", layers, moe_layers)
    comm_dec, t_comm_dec = forward_comm(m, w, inputs, gpu, d.b, "decode", layers, moe_layers)
    ttft = prefill_t + t_comm_pre + inputs.decode_step_overhead_ms * 1e-3
    tpot = decode_t + t_comm_dec + inputs.decode_step_overhead_ms * 1e-3 if gen > 1 else None
    total = ttft + (gen - 1) * tpot if tpot is not None else ttft
    rows = aggregate_rows(prefill_ops, [op_seconds(o, r, fp32) for o in prefill_ops], r, 1) + comm_pre
    if decode_ops:
        rows += aggregate_rows(decode_ops, [op_seconds(o, r, fp32) for o in decode_ops], r, 1) + comm_dec
    tokens = w.micro_batch * (gen if gen else w.seq_len) * p.dp
    flops = (sum(o.flops for o in prefill_ops) + (gen - 1) * sum(o.flops for o in decode_ops)
             if gen > 1 else sum(o.flops for o in prefill_ops))
    world = p.world_size
    mfu = flops / (r.peak_flops * p.pp * total) if total else 0.0
    notes = ("time per output token at the mean cache length; the decode step overhead is HF generate()'s "
             "per-token cost beyond its kernels",)
    return TimeEstimate("infer", gpu.id, total, tokens, tokens / total, mfu, mfu, flops * p.tp * p.dp,
                        gpu_total, host_total, t_comm_pre + max(0, gen - 1) * t_comm_dec, 0.0, world,
                        cost_per_million(inputs.price_per_gpu_hour, world, total, tokens), ttft_s=ttft,
                        tpot_s=tpot, roofline=tuple(rows), notes=notes)
