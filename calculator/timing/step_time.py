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

import numpy as np

from calculator.timing import train_ops as T
from calculator.memory.activations import dims
from calculator.memory.inference import with_kv_dtype
from calculator.core.dtypes import DTYPE_BITS
from calculator.core.errors import InputError
from calculator.model.spec import ModelSpec
from calculator.memory.parallel import check_divisibility, stage_shards
from calculator.timing.efficiency import attention_efficiency, exp_rate, matmul_efficiency
from calculator.timing.pipeline_bubble import effective_chunks, exposed_p2p
from calculator.timing.roofline import Rates
from calculator.timing.inputs import TimingInputs
from calculator.timing.rows import TimeEstimate, aggregate_rows, cost_per_million, op_seconds
from calculator.timing import inference_time
from calculator.core.workload import Workload


def _bytes(dtype: str | None) -> float:
    return DTYPE_BITS[dtype] / 8 if dtype else 0.0


def rates_for(gpu, w: Workload, inputs: TimingInputs) -> tuple[Rates, float]:
    """(Rates of the matmul dtype, the FP32 peak for fp32 adapters) on `gpu`; InputError when a figure is missing.
    The GEMM dtype: TimingInputs.matmul_dtype, else FP8 under a Transformer Engine FP8 recipe (Workload.fp8), else
    the activations' dtype.
    The GEMM efficiency is the GPU generation's for that dtype (calculator.timing.efficiency); with FP8 GEMMs the
    attention kernel still runs at the activation dtype's peak (Transformer Engine's DotProductAttention in BF16), its
    softmax exponentials at the SFUs' rate (efficiency.exp_rate)."""
    dtype = T.gemm_dtype(w, inputs)
    fields = {"bf16": "dense_bf16_flops", "fp16": "dense_fp16_flops", "fp8": "dense_fp8_flops", "fp32": "fp32_flops"}
    peak = inputs.peak_tflops * 1e12 if inputs.peak_tflops else getattr(gpu, fields[dtype])
    if not peak:
        hint = " (no bf16 tensor cores: use fp16 activations)" if dtype == "bf16" else ""
        raise InputError("peak_tflops", f"the catalogue has no dense {dtype} FLOP/s for {gpu.name}{hint}; give "
                                        f"--peak-tflops")
    bw = inputs.memory_bandwidth_gbps * 1e9 if inputs.memory_bandwidth_gbps else gpu.memory_bandwidth_bytes_per_s
    if not bw:
        raise InputError("memory_bandwidth_gbps", f"the catalogue has no memory bandwidth for {gpu.name}")
    fp32 = gpu.fp32_flops or peak / 16
    attention_peak = 0.0
    if dtype == "fp8" and not inputs.peak_tflops:
        attention_peak = getattr(gpu, fields.get(w.precision.activations, "dense_bf16_flops")) or 0.0
    eff = matmul_efficiency(getattr(gpu, "id", None), dtype, inputs.matmul_efficiency)
    att = attention_efficiency(getattr(gpu, "id", None), w.impl, inputs.attention_efficiency)
    exps = exp_rate(getattr(gpu, "id", None), w.impl, getattr(gpu, "dense_bf16_flops", None))
    return Rates(peak, bw, eff, att, inputs.memory_efficiency, inputs.kernel_gap_us * 1e-6, attention_peak,
                 exps), fp32


def estimate_time(m: ModelSpec, w: Workload, inputs: TimingInputs | None = None, gpu=None) -> TimeEstimate:
    """Time, throughput, MFU and cost of `w` on `m` on the workload's GPU (or `gpu`). InputError on bad input."""
    from calculator.model.presets import get_gpu
    inputs = inputs or TimingInputs()
    if gpu is None:
        if not w.gpu:
            raise InputError("gpu", "the time estimate needs a GPU: choose one (--gpu)")
        gpu = get_gpu(w.gpu)
    check_divisibility(m, w)
    w = with_kv_dtype(m, w)  # kv_dtype "auto" as the runtime picks it
    r, fp32 = rates_for(gpu, w, inputs)
    if w.mode == "infer":
        return inference_time.estimate_inference_time(m, w, inputs, gpu, r, fp32)
    return _training(m, w, inputs, gpu, r, fp32)


def stage_stats(m: ModelSpec, w: Workload, d, shard, r: Rates, fp32: float, inputs: TimingInputs,
                per_group=None):
    """The STATS vector (calculator.timing.train_ops) of one micro-batch on one GPU of a pipeline stage:
    Σ n × one layer of each group + the embedding / head it holds + its shard's own operations. `per_group`: a
    dict caching each group's stats for this local shape (shared by the stages of a layout)."""
    cache = per_group if per_group is not None else {}
    total = np.zeros(len(T.STATS))
    for key, n in T.layer_groups(m, shard.first_layer, shard.last_layer).items():
        st = cache.get(key)
        if st is None:
            st = cache[key] = T.layer_stats(m, w, d, key, r, fp32, inputs)
        total = total + n * st
    head = T.stats(T.head_ops(m, w, d, shard.has_embedding, shard.has_head), r, fp32, inputs, d)
    if shard.has_head:  # Megatron-Core's MTP block (train_ops.mtp_ops)
        head = head + T.mtp_stats(m, w, d, r, fp32, inputs)
    return total + head + T.stats(T.shard_ops(m, w, d, shard), r, fp32, inputs, d)


def compute_seconds(st):
    """A micro-batch's compute on a stage: the slower of the GPU and the host issuing its kernels (He 2022) over
    each stretch the host can run ahead in — the segments between Megatron-Core's MoE host waits (train_ops.SEG,
    calculator.timing.moe_sync), then the rest under one max:
        Σ max(G_seg, H_seg) + max(G − Σ G_seg, H − Σ H_seg)."""
    return st[T.SEG] + np.maximum(st[T.GPU] - st[T.SEG_GPU], st[T.HOST] - st[T.SEG_HOST])


def comm_columns(m: ModelSpec, w: Workload, d, shard, st, inputs: TimingInputs) -> dict:
    """The columns calculator.timing.comm_time prices for one layout (its critical stage `shard`, that stage's
    stats `st`); calculator.planning.fast_time builds the same columns as arrays over a grid."""
    from calculator.timing import overlap
    p, e = w.parallel, d.e
    full = w.finetune == "full"
    mtp = T.mtp_layer_counts(m, w)  # the MTP block's layer on the last stage
    n_dense, n_experts, b_g, b_p = shard.dense, shard.experts, _bytes(w.precision.grads), _bytes(w.precision.params)
    g_dense, g_experts = shard.dense * b_p, shard.experts * b_p  # what ZeRO-3 gathers each micro-batch
    if not full:  # adapters: fp32 gradients and optimizer; ZeRO-3 still gathers the frozen base
        from calculator.memory.lora import layers_adapter_params
        n_dense = layers_adapter_params(m, w.lora_rank, w.lora_targets,
                                        range(shard.first_layer, shard.last_layer))[0] // p.tp
        n_experts, b_g, b_p = 0, 4.0, 4.0
        g_dense += 4.0 * n_dense
    return {"tp": p.tp, "pp": p.pp, "dp": p.dp, "cp": p.cp, "ep": p.ep, "etp": p.expert_tp,
            "v": p.virtual_stages if p.schedule == "interleaved" else 1, "zero": p.zero,
            "plain_dp": int(p.zero == 0 and not p.distributed_optimizer),
            "sp": int(bool(p.sequence_parallel and p.tp > 1)), "full": int(w.recompute == "full"),
            "mb": p.microbatches, "layers": shard.last_layer - shard.first_layer + mtp[0] * shard.has_head,
            "moe_layers": shard.moe_layers + mtp[1] * shard.has_head,
            "n_dense": n_dense, "n_experts": n_experts, "b_g": b_g, "b_p": b_p, "gather_dense": g_dense,
            "gather_experts": g_experts,
            "act": e * d.T * d.h, "kv": e * d.T * d.kvd, "qkv_bytes": e * d.T * (d.qd + 2 * d.kvd),
            "q_bytes": e * d.T * d.qd, "ep_bytes": e * d.T * m.num_experts_per_tok * d.h if m.is_moe else 0.0,
            **routing_columns(m), "pp_bytes": e * d.T * d.h_sp, "fwd_t": st[T.FWD], "bwd_t": st[T.GPU] - st[T.FWD],
            "attn_t": st[T.ATTN], "gemm_t": st[T.GEMM], **comm_choices(w),
            "tp_overlap": inputs.tp_comm_overlap, "ep_overlap": inputs.ep_comm_overlap,
            "grad_overlap": overlap.grad_reduce_overlapped(w, inputs),
            "param_overlap": overlap.param_gather_overlapped(w, inputs)}


def routing_columns(m: ModelSpec) -> dict:
    """The router's columns for comm_time: the experts a token goes to, and the group limit on them
    (ModelSpec.router_groups / router_group_topk: comm_time.group_hit_probability)."""
    return {"top_k": m.num_experts_per_tok if m.is_moe else 0, "route_groups": m.router_groups,
            "route_topk": m.router_group_topk}


def comm_choices(w: Workload) -> dict:
    """The job's context-parallel and MoE dispatch choices as comm_time columns (Workload.cp_comm_type, Megatron's
    --cp-comm-type: p2p ring, a2a Ulysses, allgather, a2a+p2p priced as the ring across its a2a groups;
    Workload.moe_dispatcher, --moe-token-dispatcher-type: alltoall, allgather, flex = DeepEP's node-deduplicated
    all-to-all)."""
    cp = getattr(w, "cp_comm_type", "p2p")
    moe = getattr(w, "moe_dispatcher", "alltoall")
    return {"cp_a2a": int(cp == "a2a"), "cp_allgather": int(cp == "allgather"),
            "ep_dedup": int(moe == "flex"), "ep_allgather": int(moe == "allgather")}


def step_seconds(compute_mb, exposed: dict, mb, pp, v, opt_t, overhead_s: float):
    """(step seconds, seconds per micro-batch, bubble fraction), on numbers or arrays:
        t_micro-batch = max(GPU, host) + exposed TP, EP, PP and CP communication
        step = t_micro-batch × (m + (p − 1)/v) + optimizer + exposed DP communication + overhead
    the 1F1B / interleaved bubble (p − 1)/(v·m) of the ideal time (Narayanan et al. 2021 §2.2), amortised over the
    m micro-batches like the once-per-step DP traffic."""
    t_mb = compute_mb + exposed["tp"] + exposed["ep"] + exposed["pp"] + exposed["cp"]
    bubble = np.where(pp > 1, (pp - 1) / (v * mb), 0.0)
    return t_mb * mb * (1 + bubble) + opt_t + exposed["dp"] + overhead_s, t_mb, bubble


def expert_dp(dp, cp, tp, ep, etp):
    """Ranks an expert's parameters are replicated over, the expert-data-parallel group: dp·cp·tp / (ep·etp)
    (Megatron-Core parallel_state: the expert model-parallel group of ep·etp ranks is carved out of the tp·cp·dp
    ranks of a pipeline stage; calculator.stages.held shards the experts' optimizer state over the same group)."""
    return np.maximum(1, (np.asarray(dp) * cp * tp) // np.maximum(1, np.asarray(ep) * etp))


def optimizer_params(dense, experts, dense_group, expert_group, sharded):
    """Parameters one GPU's optimizer step updates (numbers or arrays): with the distributed optimizer or ZeRO
    the dense ones sharded over dp·cp and the routed experts over their expert-data-parallel group (Megatron-Core
    megatron/core/optimizer/__init__.py get_megatron_optimizer: the expert parameters get their own optimizer,
    its data_parallel_group the intra_expt_dp_group): ⌈dense / dense_group⌉ + ⌈experts / expert_group⌉;
    otherwise all of them."""
    split = np.ceil(np.asarray(dense) / dense_group) + np.ceil(np.asarray(experts) / expert_group)
    return np.where(sharded, split, np.asarray(dense) + np.asarray(experts))


BOTTLENECKS = ("compute", "memory", "host", "TP comm", "EP comm", "PP comm", "CP comm", "DP comm", "bubble",
               "optimizer")


def bottleneck_parts(st, exposed: dict, mb, t_mb, bubble, opt_t):
    """Seconds per step each BOTTLENECKS entry takes on the critical path (numbers or arrays); the largest names
    what bounds the step."""
    gpu, compute = st[T.GPU], st[T.COMPUTE]
    return (compute * mb, (gpu - compute) * mb, (compute_seconds(st) - gpu) * mb, exposed["tp"] * mb,
            exposed["ep"] * mb, exposed["pp"] * mb, exposed["cp"] * mb, exposed["dp"] + 0.0,
            t_mb * mb * bubble, opt_t + 0.0)


def _training(m: ModelSpec, w: Workload, inputs: TimingInputs, gpu, r: Rates, fp32: float) -> TimeEstimate:
    p, d = w.parallel, dims(m, w)
    mb = p.microbatches
    cache: dict = {}
    shards = stage_shards(m, p)
    stats = [stage_stats(m, w, d, shard, r, fp32, inputs, cache) for shard in shards]
    from calculator.timing.comm_time import comm_rows, training_comm

    def stage_comm(i: int):
        c = comm_columns(m, w, d, shards[i], stats[i], inputs)
        exposed, items, per = training_comm(c, gpu, inputs)
        exposed = {k: float(v) for k, v in exposed.items()}
        exposed["pp"] = exposed_p2p(exposed["pp"], float(c["fwd_t"] + c["bwd_t"]), p)  # overlap_p2p_comm
        return exposed, items, per
    # the critical stage: the longest micro-batch, its compute and exposed TP, EP, PP and CP communication (a stage
    # with fewer layers but the head and an MTP block can out-compute one whose MoE layers out-communicate it)
    comms = [stage_comm(i) for i in range(len(shards))]
    crit = max(range(len(shards)), key=lambda i: float(compute_seconds(stats[i])) + sum(
        comms[i][0][g] for g in ("tp", "ep", "pp", "cp")))
    shard, st = shards[crit], stats[crit]
    exposed, items, per = comms[crit]
    edp = expert_dp(p.dp, p.cp, p.tp, p.ep, p.expert_tp)
    sharded = p.zero >= 1 or p.distributed_optimizer
    n_opt = int(optimizer_params(shard.dense, shard.experts, p.shard_group, edp, sharded))
    if w.finetune != "full":
        from calculator.memory.lora import layers_adapter_params
        n_opt = layers_adapter_params(m, w.lora_rank, w.lora_targets,
                                      range(shard.first_layer, shard.last_layer))[0] // p.tp
    opt = T.optimizer_op(w, n_opt, shard.tensors)
    opt_t = float(T.optimizer_seconds(w, n_opt, shard.tensors, r, inputs.host_op_us * 1e-6))
    if p.offload_optimizer:  # the step runs on the host: nothing of it on the GPU
        opt = opt._replace(name="Optimizer step (CPU, offloaded)", flops=0.0, bytes=0.0, host_ops=0)
        opt_t = 0.0
    # the bubble's chunks: v, or T_crit / the slowest chunk where they hold unequal layers (pipeline_bubble)
    v = effective_chunks(m.num_hidden_layers, p, [float(compute_seconds(s)) for s in stats])
    step, t_mb, bubble = step_seconds(compute_seconds(st), exposed, mb, p.pp, v, opt_t,
                                      inputs.step_overhead_ms * 1e-3)
    step, t_mb, bubble = float(step), float(t_mb), float(bubble)
    parts = bottleneck_parts(st, exposed, mb, t_mb, bubble, opt_t)
    ops = T.shard_ops(m, w, d, shard) + T.head_ops(m, w, d, shard.has_embedding, shard.has_head)
    ops += T.mtp_ops(m, w, d, inputs) if shard.has_head else []
    for key, n in T.layer_groups(m, shard.first_layer, shard.last_layer).items():
        ops = [o.scaled(n) for o in T.layer_ops(m, w, d, key, inputs)] + ops
    times = [op_seconds(o, r, fp32) for o in ops]
    rows = (aggregate_rows(ops, times, r, mb) + aggregate_rows([opt], [op_seconds(opt, r, fp32)], r, 1)
            + comm_rows(items, per, mb, gpu, inputs))
    model_flops = sum(s[T.MODEL_FLOPS] for s in stats) * mb
    hw_flops = sum(s[T.HW_FLOPS] for s in stats) * mb
    peak_all = r.peak_flops * p.pp * step
    tokens = w.micro_batch * w.seq_len * mb * p.dp
    world = p.world_size
    comm_exposed = exposed["dp"] + (exposed["tp"] + exposed["ep"] + exposed["pp"] + exposed["cp"]) * mb
    return TimeEstimate("train", gpu.id, step, tokens, tokens / step, model_flops / peak_all, hw_flops / peak_all,
                        model_flops * p.tp * p.cp * p.dp, st[T.GPU] * mb, st[T.HOST] * mb, comm_exposed,
                        bubble, world, cost_per_million(inputs.price_per_gpu_hour, world, step, tokens),
                        roofline=tuple(rows), notes=_notes(w, st[T.GPU], st[T.HOST]),
                        bottleneck=BOTTLENECKS[int(np.argmax(parts))])


def _notes(w: Workload, gpu_t: float, host_t: float) -> tuple[str, ...]:
    out = []
    if host_t > gpu_t:
        out.append(f"host-bound: the host dispatches operators for {host_t * 1e3:.1f} ms per micro-batch while the "
                   f"GPU needs {gpu_t * 1e3:.1f} ms (eager PyTorch; larger batches, torch.compile or CUDA graphs help)")
    if w.parallel.offload_optimizer:
        out.append("optimizer offloaded to the CPU: its time on the host is not modelled")
    return tuple(out)
