"""Step time, tokens/s, MFU and cost of a training step or a generate() call on the chosen GPU, with the roofline
table of its operations (seed 003: FLOPs, bytes, intensity, memory- or compute-bound, time per operation).

    t_micro-batch = max(Σ GPU time of the operations, Σ host time of their operators) + exposed communication
    training step = t_micro-batch × (m + (p − 1)/v)  +  optimizer step  +  exposed DP communication  +  overhead
    generate()    = prefill (time to first token) + (gen − 1) × decode step (time per output token)

The host issues kernels asynchronously, so a stage is bound by the slower of the GPU and the host (the "overhead
bound" regime of eager PyTorch; He 2022, Making Deep Learning Go Brrrr). Pipeline bubble: (p − 1)/(v·m) of the ideal
time (Narayanan et al. 2021 §2.2). MFU counts the model's own FLOPs (causal attention, no recompute) against the
dense peak (Chowdhery et al. 2022, PaLM, appendix B; Korthikanti et al. 2022 for HFU with recompute).
"""
from __future__ import annotations

from dataclasses import replace

from calculator.timing import roofline as R
from calculator.memory.activations import dims
from calculator.core.dtypes import DTYPE_BITS
from calculator.core.errors import InputError
from calculator.model import architectures
from calculator.model.spec import ModelSpec
from calculator.memory.parallel import check_divisibility, stage_shards
from calculator.timing.roofline import Op, Rates
from calculator.timing.ops import (attention_core, backward_of, head_backward, head_forward, layer_forward,
                                 lora_backward, lora_forward, recomputed)
from calculator.timing.inputs import TimingInputs
from calculator.timing.rows import (RooflineRow, TimeEstimate, aggregate_rows, cost_per_million, host_seconds,
                                   op_seconds)
from calculator.timing import inference_time
from calculator.timing.comm_time import training_comm
from calculator.core.workload import Workload


def _bytes(dtype: str | None) -> float:
    return DTYPE_BITS[dtype] / 8 if dtype else 0.0


def rates_for(gpu, w: Workload, inputs: TimingInputs) -> tuple[Rates, float]:
    """(Rates of the matmul dtype, the FP32 peak for fp32 adapters) on `gpu`; InputError when a figure is missing."""
    dtype = inputs.matmul_dtype if inputs.matmul_dtype != "auto" else w.precision.activations
    field_name = {"bf16": "dense_bf16_flops", "fp16": "dense_fp16_flops", "fp8": "dense_fp8_flops",
                  "fp32": "fp32_flops"}[dtype]
    peak = inputs.peak_tflops * 1e12 if inputs.peak_tflops else getattr(gpu, field_name)
    if not peak:
        hint = " (no bf16 tensor cores: use fp16 activations)" if dtype == "bf16" else ""
        raise InputError("peak_tflops", f"the catalogue has no dense {dtype} FLOP/s for {gpu.name}{hint}; give "
                                        f"--peak-tflops")
    bw = inputs.memory_bandwidth_gbps * 1e9 if inputs.memory_bandwidth_gbps else gpu.memory_bandwidth_bytes_per_s
    if not bw:
        raise InputError("memory_bandwidth_gbps", f"the catalogue has no memory bandwidth for {gpu.name}")
    fp32 = gpu.fp32_flops or peak / 16
    return Rates(peak, bw, inputs.matmul_efficiency, inputs.attention_efficiency, inputs.memory_efficiency,
                 inputs.kernel_gap_us * 1e-6), fp32


def _layer_groups(m: ModelSpec, first: int, last: int) -> dict[tuple, int]:
    """Layers of a stage grouped by (MoE, sliding window, mixer kind, feed-forward kind) — layers in a group run
    the same operations."""
    groups: dict[tuple, int] = {}
    for i in range(first, last):
        kind = m.layer_kind(i)
        key = (m.layer_is_moe(i), m.sliding_window if m.layer_is_sliding(i) else None, kind.mixer, kind.ffn)
        groups[key] = groups.get(key, 0) + 1
    return groups


def _causal_share(op: Op, s: int, s_kv: int) -> float:
    """FLOPs of an operation a model needs: eager attention computes the whole square, causal needs half."""
    return op.flops * (R.causal_pairs(s) / (s * s_kv)) if op.name == "Attention core (eager)" else op.flops


def _train_stage_ops(m: ModelSpec, w: Workload, shard) -> list[Op]:
    """Every operation of one micro-batch on one GPU of a pipeline stage: forward, recompute, backward."""
    p, d = w.parallel, dims(m, w)
    e_w = d.e  # the matmuls read weights in the compute dtype (autocast copies of fp32 params)
    frozen = w.finetune != "full"
    eager = w.attention == "eager"
    ops: list[Op] = []
    for (moe, window, mixer, ffn), n in _layer_groups(m, shard.first_layer, shard.last_layer).items():
        fwd = layer_forward(m, d, moe=moe, window=window, eager=eager, e_w=e_w, expert_tp=p.expert_tp, ep=p.ep,
                            mixer=mixer, ffn=ffn)
        bwd = [backward_of(o, frozen and o.kind == "matmul") for o in fwd]
        if frozen:
            adapters = lora_forward(m, d, w.lora_rank, w.lora_targets, moe)
            fwd += adapters
            bwd += [lora_backward(adapters[0], m, d, w.lora_rank, w.lora_targets, moe)]
        ops += [o.scaled(n) for o in fwd]
        if w.recompute == "full":
            ops += [o.scaled(n) for o in recomputed(fwd)]
        elif w.recompute == "op":  # every other matmul and the SDPA kernel are saved: the rest is replayed
            ops += [o.scaled(n * (0.5 if o.kind == "matmul" else 0.0 if o.kind == "attention" else 1.0))
                    for o in recomputed(fwd)]
        elif w.recompute == "selective" and architectures.with_attention(mixer):
            ops.append(attention_core(m, d, window, eager).scaled(n, phase="recompute"))
        ops += [o.scaled(n) for o in bwd]
    n_linear = shard.layer_linear
    if frozen and w.finetune == "qlora":
        per_pass = 2.5 * n_linear  # bitsandbytes dequantize_4bit: read 0.5 B (+ absmax), write 2 B per weight
        ops.append(Op("NF4 dequantize", "forward", "elementwise", 0.0, per_pass, 2 * _linears_per_stage(m, shard),
                      "2.5 B per base weight per pass", "quantization"))
        ops.append(ops[-1]._replace(phase="backward"))
    if _bytes(w.precision.params) > d.e and not frozen:  # autocast: fp32 weights cast to the compute dtype
        cast = (_bytes(w.precision.params) + d.e) * n_linear
        passes = 2 if w.recompute == "full" else 1
        ops.append(Op("Weight casts (autocast)", "forward", "elementwise", 0.0, passes * cast,
                      passes * _linears_per_stage(m, shard), "(4 + e) B per weight per forward", "mixed-precision"))
        ops.append(ops[-1]._replace(phase="backward", bytes=cast, host_ops=_linears_per_stage(m, shard)))
    vocab = m.vocab_size // p.tp
    def held(o: Op) -> bool:
        return shard.has_embedding if o.name == "Embedding" else shard.has_head
    ops += [o for o in head_forward(m, d, e_w, vocab, d.T, with_loss=True) if held(o)]
    ops += [o for o in head_backward(m, d, e_w, vocab, frozen, _bytes(w.precision.grads)) if held(o)]
    return ops


def _linears_per_stage(m: ModelSpec, shard) -> int:
    per_layer = (2 if m.fused_qkv else 4) + (2 if m.fused_gate_up or not m.gated_mlp else 3)
    return per_layer * (shard.last_layer - shard.first_layer)


def _optimizer_op(w: Workload, n_params: int, n_tensors: int) -> Op:
    """One optimizer step over the parameters this GPU updates."""
    prec, impl = w.precision, w.optimizer_impl
    b_p, b_g, b_s = _bytes(prec.params), _bytes(prec.grads), _bytes(prec.optimizer_states)
    b_m = _bytes(prec.master_weights)
    if w.finetune != "full":  # PEFT's fp32 adapters are their own master copy
        b_p = b_g = b_s = 4.0
        b_m = 0.0
    o = w.optimizer
    if o == "adamw":
        per = R.adamw_bytes_per_param(b_p, b_g, b_s, b_m, impl)
    elif o == "adamw-8bit":
        per = 2 * (b_m or b_p) + b_g + 4 + (b_p if b_m else 0)
    elif o in ("sgd-momentum", "lion"):
        per = 2 * (b_m or b_p) + b_g + 2 * b_s + (b_p if b_m else 0)
    elif o == "adafactor":
        per = 2 * (b_m or b_p) + 4 * b_g + (b_p if b_m else 0)
    elif o == "sgd":
        per = 2 * (b_m or b_p) + b_g
    else:
        return Op("Optimizer step", "optimizer", "elementwise", 0.0, 0.0, 0, "no optimizer", "torch-adamw")
    launches = R.multi_tensor_launches(n_params, n_tensors)
    if o == "adamw-8bit":
        host = 2 * n_tensors  # bitsandbytes launches one kernel per parameter tensor
    elif impl == "fused":
        host = 2 + launches
    elif impl == "foreach":
        host = 12 * launches
    else:
        host = 12 * n_tensors
    return Op("Optimizer step", "optimizer", "elementwise", 12.0 * n_params, per * n_params, host,
              f"{per:g} B per parameter ({o}, {impl})", "torch-adamw")


def estimate_time(m: ModelSpec, w: Workload, inputs: TimingInputs | None = None, gpu=None) -> TimeEstimate:
    """Time, throughput, MFU and cost of `w` on `m` on the workload's GPU (or `gpu`). InputError on bad input."""
    from calculator.model.presets import get_gpu
    inputs = inputs or TimingInputs()
    if gpu is None:
        if not w.gpu:
            raise InputError("gpu", "the time estimate needs a GPU: choose one (--gpu)")
        gpu = get_gpu(w.gpu)
    check_divisibility(m, w)
    r, fp32 = rates_for(gpu, w, inputs)
    if w.mode == "infer":
        return inference_time.estimate_inference_time(m, w, inputs, gpu, r, fp32)
    return _training(m, w, inputs, gpu, r, fp32)


def _training(m: ModelSpec, w: Workload, inputs: TimingInputs, gpu, r: Rates, fp32: float) -> TimeEstimate:
    p, d = w.parallel, dims(m, w)
    mb = p.microbatches
    host_s = inputs.host_op_us * 1e-6
    stages = []
    for shard in stage_shards(m, p):
        ops = _train_stage_ops(m, w, shard)
        times = [op_seconds(o, r, fp32) for o in ops]
        gpu_t = sum(times)
        host_t = host_seconds(ops, inputs)
        fwd_t = sum(t for o, t in zip(ops, times) if o.phase == "forward")
        bwd_t = sum(t for o, t in zip(ops, times) if o.phase != "forward")
        stages.append((shard, ops, times, gpu_t, host_t, fwd_t, bwd_t))
    crit = max(stages, key=lambda s: max(s[3], s[4]))
    shard, ops, times, gpu_t, host_t, fwd_t, bwd_t = crit
    mb_comm, per_mb_exposed, step_comm, step_exposed = training_comm(m, w, inputs, gpu, d, shard, fwd_t, bwd_t)
    comm_ops = [replace(c, bytes=c.bytes * mb, time_s=c.time_s * mb) for c in mb_comm] + step_comm
    t_mb = max(gpu_t, host_t) + per_mb_exposed
    v = p.virtual_stages if p.schedule == "interleaved" else 1
    bubble = (p.pp - 1) / (v * mb) if p.pp > 1 else 0.0
    pipe = t_mb * mb * (1 + bubble)
    n_opt = -(-shard.total // (p.shard_group if (p.zero >= 1 or p.distributed_optimizer) else 1))
    if w.finetune != "full":
        from calculator.memory.lora import adapter_params
        n_opt = sum(adapter_params(m, w.lora_rank, w.lora_targets, m.layer_is_moe(i))
                    for i in range(shard.first_layer, shard.last_layer)) // p.tp
    opt = _optimizer_op(w, n_opt, shard.tensors)
    if p.offload_optimizer:
        # the step runs on the host: nothing of it on the GPU
        opt = opt._replace(name="Optimizer step (CPU, offloaded)", flops=0.0, bytes=0.0, host_ops=0)
    opt_t = max(op_seconds(opt, r, fp32), opt.host_ops * host_s)
    step = pipe + opt_t + step_exposed + inputs.step_overhead_ms * 1e-3
    rows = aggregate_rows(ops, times, r, mb) + aggregate_rows([opt], [op_seconds(opt, r, fp32)], r, 1) + comm_ops
    model_flops = sum(_causal_share(o, d.s, d.s_kv) for s in stages for o in s[1]
                      if o.phase in ("forward", "backward")) * mb
    hw_flops = sum(o.flops for s in stages for o in s[1]) * mb
    peak_all = r.peak_flops * p.pp * step
    tokens = w.micro_batch * w.seq_len * mb * p.dp
    world = p.world_size
    notes = _notes(w, gpu_t, host_t)
    return TimeEstimate("train", gpu.id, step, tokens, tokens / step, model_flops / peak_all, hw_flops / peak_all,
                        model_flops * p.tp * p.cp * p.dp, gpu_t * mb, host_t * mb, step_exposed + per_mb_exposed * mb,
                        bubble, world, cost_per_million(inputs.price_per_gpu_hour, world, step, tokens),
                        roofline=tuple(rows), notes=notes)


def _notes(w: Workload, gpu_t: float, host_t: float) -> tuple[str, ...]:
    out = []
    if host_t > gpu_t:
        out.append(f"host-bound: the host dispatches operators for {host_t * 1e3:.1f} ms per micro-batch while the "
                   f"GPU needs {gpu_t * 1e3:.1f} ms (eager PyTorch; larger batches, torch.compile or CUDA graphs help)")
    if w.parallel.offload_optimizer:
        out.append("optimizer offloaded to the CPU: its time on the host is not modelled")
    return tuple(out)
