"""Communication time of a training step or a forward pass, per parallel group (formulas: calculator.timing.comm)."""
from __future__ import annotations

from calculator.timing import comm as C
from calculator.core.dtypes import DTYPE_BITS
from calculator.model.spec import ModelSpec
from calculator.timing.inputs import TimingInputs
from calculator.timing.rows import RooflineRow
from calculator.core.workload import Workload


def links(gpu, inputs: TimingInputs) -> tuple[C.Link, C.Link]:
    """(inside a node, across nodes), per direction, after the NCCL efficiency factor."""
    nv = inputs.nvlink_gbps * 1e9 if inputs.nvlink_gbps else (gpu.interconnect_bytes_per_s or 64e9) / 2
    name = (gpu.interconnect or "GPU link").split(" (")[0]
    return (C.Link(name, nv * inputs.comm_efficiency),
            C.Link("InfiniBand", inputs.ib_gbps * 1e9 * inputs.comm_efficiency))


def _row(group: str, collective: str, phase: str, size: float, n: int, calls: int, link: C.Link,
         latency: float):
    seconds = calls * C.collective_seconds(collective, size, n, link.bytes_per_s, latency)
    moved = calls * C.moved_bytes(collective, size, n)
    return RooflineRow(f"{group.upper()} {collective} ({link.name})", phase, 0.0, moved, 0.0, "communication",
                       seconds, 0, f"{calls} × {collective} of {size:,.0f} B over {n} ranks", "nccl-tests"), seconds


def _group_link(group: str, n: int, w: Workload, inputs: TimingInputs, gpu) -> C.Link:
    p = w.parallel
    intra, inter = links(gpu, inputs)
    stride = C.strides(p.tp, p.cp, p.dp)[group]
    return C.group_link(n, stride, inputs.gpus_per_node, intra, inter)


def training_comm(m: ModelSpec, w: Workload, inputs: TimingInputs, gpu, d, shard, fwd_t: float, bwd_t: float):
    """(rows per micro-batch, their exposed seconds, rows per step, their exposed seconds) of a training step on the
    critical GPU. TP, EP and PP traffic sits on the critical path; CP's ring overlaps the attention, DP's the
    backward."""
    p, e = w.parallel, d.e
    lat = inputs.collective_latency_us * 1e-6
    layers = shard.last_layer - shard.first_layer
    moe_layers = shard.moe_layers
    rows, per_mb, per_step = [], 0.0, 0.0
    if p.tp > 1:
        link = _group_link("tp", p.tp, w, inputs, gpu)
        act = e * d.T * d.h
        fwd_calls = 2 * layers * (2 if w.recompute == "full" else 1)
        kind = C.ALL_GATHER if p.sequence_parallel else C.ALL_REDUCE
        for phase, calls in (("forward", fwd_calls), ("backward", 2 * layers)):
            if p.sequence_parallel:  # an all-gather and a reduce-scatter per all-reduce of the plain layout
                r1, t1 = _row("tp", C.ALL_GATHER, phase, act, p.tp, calls, link, lat)
                r2, t2 = _row("tp", C.REDUCE_SCATTER, phase, act, p.tp, calls, link, lat)
                rows += [r1, r2]
                per_mb += t1 + t2
            else:
                r1, t1 = _row("tp", kind, phase, act, p.tp, calls, link, lat)
                rows.append(r1)
                per_mb += t1
    if p.ep > 1 and moe_layers:
        link = _group_link("ep", p.ep, w, inputs, gpu)
        size = e * d.T * m.num_experts_per_tok * d.h
        for phase in ("forward", "backward"):
            r1, t1 = _row("ep", C.ALL_TO_ALL, phase, size, p.ep, 2 * moe_layers, link, lat)
            rows.append(r1)
            per_mb += t1
    if p.pp > 1:
        link = _group_link("pp", p.pp, w, inputs, gpu)
        size = e * d.T * d.h_sp
        r1, t1 = _row("pp", C.P2P, "forward", size, 2, 2, link, lat)  # receive activations, send gradients
        rows.append(r1)
        per_mb += t1
    if p.cp > 1:
        link = _group_link("cp", p.cp, w, inputs, gpu)
        kv = 2 * e * d.T * d.kvd
        ring = 0.0
        for phase, mult in (("forward", 1), ("backward", 2)):
            r1, t1 = _row("cp", C.P2P, phase, mult * kv, 2, (p.cp - 1) * layers, link, lat)
            rows.append(r1)
            ring += t1
        per_mb += max(0.0, ring - 0.5 * (fwd_t + bwd_t))  # the ring overlaps the attention blocks
    mb_rows, rows = rows, []
    dp = p.dp * p.cp
    if dp > 1:
        link = _group_link("dp", dp, w, inputs, gpu)
        b_g = DTYPE_BITS[w.precision.grads] / 8
        b_p = DTYPE_BITS[w.precision.params] / 8
        n = shard.total if w.finetune == "full" else 0
        if w.finetune != "full":
            from calculator.memory.lora import adapter_params
            n = sum(adapter_params(m, w.lora_rank, w.lora_targets, m.layer_is_moe(i))
                    for i in range(shard.first_layer, shard.last_layer)) // p.tp
            b_g = b_p = 4.0
        buckets = max(1, int(b_g * n // 25_000_000))  # DDP's 25 MB buckets
        mb = p.microbatches
        if p.zero >= 3:
            gather_f, tf = _row("dp", C.ALL_GATHER, "forward", b_p * n, dp, mb, link, lat)
            gather_b, tb = _row("dp", C.ALL_GATHER, "backward", b_p * n, dp, mb, link, lat)
            scatter, ts = _row("dp", C.REDUCE_SCATTER, "backward", b_g * n, dp, mb, link, lat)
            rows += [gather_f, gather_b, scatter]
            per_step += max(0.0, tf - fwd_t * mb) + max(0.0, tb + ts - bwd_t * mb)
        elif p.zero >= 1 or p.distributed_optimizer:
            scatter, ts = _row("dp", C.REDUCE_SCATTER, "backward", b_g * n / buckets, dp, buckets, link, lat)
            gather, tg = _row("dp", C.ALL_GATHER, "optimizer", b_p * n / buckets, dp, buckets, link, lat)
            rows += [scatter, gather]
            per_step += max(0.0, ts - bwd_t) + tg
        else:
            reduce, tr = _row("dp", C.ALL_REDUCE, "backward", b_g * n / buckets, dp, buckets, link, lat)
            rows.append(reduce)
            per_step += max(0.0, tr - bwd_t)  # DDP overlaps the bucketed all-reduce with the backward
    return mb_rows, per_mb, rows, per_step


def forward_comm(m: ModelSpec, w: Workload, inputs: TimingInputs, gpu, tokens: float, phase: str,
                 layers: int, moe_layers: int):
    """TP all-reduces and EP all-to-alls of one forward pass over `tokens` tokens (prefill or a decode step)."""
    p = w.parallel
    e = DTYPE_BITS[w.precision.activations] / 8
    lat = inputs.collective_latency_us * 1e-6
    rows, total = [], 0.0
    if p.tp > 1:
        link = _group_link("tp", p.tp, w, inputs, gpu)
        r1, t1 = _row("tp", C.ALL_REDUCE, phase, e * tokens * m.hidden_size, p.tp, 2 * layers, link, lat)
        rows.append(r1)
        total += t1
    if p.ep > 1 and moe_layers:
        link = _group_link("ep", p.ep, w, inputs, gpu)
        size = e * tokens * m.num_experts_per_tok * m.hidden_size
        r1, t1 = _row("ep", C.ALL_TO_ALL, phase, size, p.ep, 2 * moe_layers, link, lat)
        rows.append(r1)
        total += t1
    if p.pp > 1:
        link = _group_link("pp", p.pp, w, inputs, gpu)
        r1, t1 = _row("pp", C.P2P, phase, e * tokens * m.hidden_size, 2, p.pp - 1, link, lat)
        rows.append(r1)
        total += t1
    return rows, total
