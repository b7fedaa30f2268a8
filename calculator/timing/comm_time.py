"""Communication time of a training step or a forward pass, per parallel group (formulas: calculator.timing.comm).

Training is written once for one layout or a whole grid (every argument a number or a numpy array of layouts):
`training_items` lists each group's collectives (size, ranks, calls, link), `item_seconds` prices them, and
`exposed_seconds` says how much of each group's time stays on the critical path. estimate_time() and the planner's
vectorised time model (calculator.planning.fast_time) both call these, so they agree by construction.

Rank layout (Megatron-Core's default order tp-cp-ep-dp-pp; megatron/core/parallel_state.py RankGenerator):
- TP ranks are consecutive (stride 1); CP ranks stride TP;
- the gradient reduction runs over the data-parallel × context-parallel group (dense parameters: dp·cp ranks at
  stride TP, spanning tp·cp·dp consecutive ranks) and the expert-data-parallel group (expert parameters:
  dp·cp·tp / (ep·etp) ranks at stride ep·etp, the same span): a job of one node never leaves NVLink;
- the expert-parallel group is laid out tp(=etp)-ep-dp-pp (RankGenerator for experts): EP ranks stride expert TP;
- PP ranks stride tp·cp·dp.
"""
from __future__ import annotations

import numpy as np

from calculator.timing import comm as C
from calculator.core.dtypes import DTYPE_BITS
from calculator.model.spec import ModelSpec
from calculator.timing.inputs import TimingInputs
from calculator.timing.rows import RooflineRow
from calculator.core.workload import Workload

GROUPS = ("tp", "ep", "pp", "cp", "dp")  # per micro-batch: tp, ep, pp, cp; per step: dp
DDP_BUCKET_BYTES = 25_000_000  # torch DDP bucket_cap_mb = 25 (the granularity of the overlapped reduction)


def nvlink_domain(gpu, inputs: TimingInputs) -> int:
    """GPUs that share one NVLink domain: TimingInputs.gpus_per_node, else 72 for an NVL72 rack (GB200 / GB300
    NVL72: one NVLink Switch domain of 72 GPUs, NVIDIA's GB300 NVL72 datasheet) and 8 for an HGX / DGX node."""
    if inputs.gpus_per_node:
        return inputs.gpus_per_node
    return 72 if "NVL72" in (getattr(gpu, "interconnect", "") or "") else 8


def links(gpu, inputs: TimingInputs) -> tuple[C.Link, C.Link]:
    """(inside a node, across nodes), per direction, after the NCCL efficiency factor."""
    nv = inputs.nvlink_gbps * 1e9 if inputs.nvlink_gbps else (gpu.interconnect_bytes_per_s or 64e9) / 2
    name = (gpu.interconnect or "GPU link").split(" (")[0]
    return (C.Link(name, nv * inputs.comm_efficiency),
            C.Link("InfiniBand", inputs.ib_gbps * 1e9 * inputs.comm_efficiency))


def _factor(collective: str, n):
    """Bytes each rank sends per byte of the collective's size (nccl-tests PERFORMANCE.md; calculator.timing.comm)."""
    n = np.asarray(n, dtype=np.float64)
    safe = np.maximum(n, 1.0)
    if collective == C.ALL_REDUCE:
        return 2 * (safe - 1) / safe
    if collective == C.P2P:
        return np.ones_like(safe)
    return (safe - 1) / safe


def training_items(c: dict) -> list[tuple]:
    """(group, collective, phase, size bytes, ranks, calls, span) of every collective of one training step on the
    critical GPU, per micro-batch (tp, ep, pp, cp) or per step (dp); span: consecutive ranks the group covers (it
    stays inside a node when span ≤ GPUs per node). `c`: the layout's columns (step_time.comm_columns)."""
    tp, pp, dp, cp, ep, etp = c["tp"], c["pp"], c["dp"], c["cp"], c["ep"], c["etp"]
    replay = 1 + c["full"]  # full recompute replays the forward's collectives (Korthikanti et al. 2022 §4.2.2)
    layers, moe = c["layers"], c["moe_layers"]
    sp = c["sp"]
    items = []
    # TP (Shoeybi et al. 2019 §3; Korthikanti et al. 2022 §4.2.2): 2 per layer forward, 2 backward; with sequence
    # parallelism each all-reduce is an all-gather + a reduce-scatter of the same size
    for phase, calls in (("forward", 2 * layers * replay), ("backward", 2 * layers)):
        items.append(("tp", C.ALL_GATHER, phase, c["act"], tp, calls * sp, tp))
        items.append(("tp", C.REDUCE_SCATTER, phase, c["act"], tp, calls * sp, tp))
        items.append(("tp", C.ALL_REDUCE, phase, c["act"], tp, calls * (1 - sp), tp))
    # EP (Lepikhin et al. 2020): dispatch + combine all-to-all per MoE layer, forward (replayed) and backward
    a2a_ep, ag_ep = 1 - c["ep_allgather"], c["ep_allgather"]
    for phase, calls in (("forward", moe * replay), ("backward", moe)):
        items.append(("ep", C.ALL_TO_ALL, phase, c["ep_bytes"], ep, 2 * calls * a2a_ep, ep * etp,
                      c.get("ep_network_share", 1.0)))
        # the allgather dispatcher: every rank gathers all T·ep tokens, and reduce-scatters the experts' output
        items.append(("ep", C.ALL_GATHER, phase, c["act"] * ep, ep, calls * ag_ep, ep * etp))
        items.append(("ep", C.REDUCE_SCATTER, phase, c["act"] * ep, ep, calls * ag_ep, ep * etp))
    # PP (Narayanan et al. 2021 §2.2): the activation forward and its gradient backward, per model chunk
    items.append(("pp", C.P2P, "forward", c["pp_bytes"], np.where(pp > 1, 2, 1), 2 * c["v"], pp * tp * cp * dp))
    # CP: ring (p2p, Liu et al. 2023): cp − 1 steps per layer passing K and V forward, K, V, dK, dV backward;
    # Ulysses (a2a, Jacobs et al. 2023): all-to-alls of q, k, v and of the output, forward and backward
    # Megatron's allgather CP: the whole sequence's K and V gathered per layer, their gradients reduce-scattered
    a2a, gather = c["cp_a2a"], c["cp_allgather"]
    ring = 1 - a2a - gather
    steps = (cp - 1) * layers
    items.append(("cp", C.P2P, "forward", 2 * c["kv"], np.where(cp > 1, 2, 1), steps * replay * ring, cp * tp))
    items.append(("cp", C.P2P, "backward", 4 * c["kv"], np.where(cp > 1, 2, 1), steps * ring, cp * tp))
    for phase, calls in (("forward", layers * replay), ("backward", layers)):
        items.append(("cp", C.ALL_TO_ALL, phase, c["qkv_bytes"], cp, calls * a2a, cp * tp))
        items.append(("cp", C.ALL_TO_ALL, phase, c["q_bytes"], cp, calls * a2a, cp * tp))
        items.append(("cp", C.ALL_GATHER if phase == "forward" else C.REDUCE_SCATTER, phase, 2 * c["kv"] * cp, cp,
                      calls * gather, cp * tp))
    # DP (Li et al. 2020; Rajbhandari et al. 2019 §7): dense gradients over dp·cp, expert gradients over the
    # expert-data-parallel group; ZeRO-1/2 and the distributed optimizer reduce-scatter + all-gather, ZeRO-3
    # gathers the parameters forward and backward and reduce-scatters the gradients every micro-batch
    span = tp * cp * dp
    edp = np.maximum(1, (dp * cp * tp) // np.maximum(1, ep * etp))
    z0 = c["plain_dp"]
    z12 = (1 - z0) * (c["zero"] < 3)
    z3 = (c["zero"] >= 3) * 1
    mb = c["mb"]
    for n_params, gathered, ranks in ((c["n_dense"], c["gather_dense"], dp * cp),
                                      (c["n_experts"], c["gather_experts"], edp)):
        grads, params = c["b_g"] * n_params, c["b_p"] * n_params  # gathered: every weight ZeRO-3 shards (bytes)
        items.append(("dp", C.ALL_REDUCE, "backward", grads, ranks, z0, span))
        items.append(("dp", C.REDUCE_SCATTER, "backward", grads, ranks, z12 + z3 * mb, span))
        items.append(("dp", C.ALL_GATHER, "optimizer", params, ranks, z12, span))
        items.append(("dp", C.ALL_GATHER, "forward", gathered, ranks, z3 * mb, span))
        items.append(("dp", C.ALL_GATHER, "backward", gathered, ranks, z3 * mb, span))
    return items


def item_seconds(item: tuple, intra: float, inter: float, gpus_per_node: int, latency_s: float):
    """Seconds of one item of training_items: calls × (latency + moved bytes / bus bandwidth) on its link (zero
    for a group of one rank or no calls). A ring collective spanning nodes runs at the network's pace; an
    all-to-all sends to the peers in its own node over NVLink while it sends to the others over the network, so
    it takes the longer of the two (all_to_all_seconds)."""
    _, collective, _, size, ranks, calls, span = item[:7]
    size = np.asarray(size, dtype=np.float64)
    inside = np.asarray(span) <= gpus_per_node
    if collective == C.ALL_TO_ALL:
        share = item[7] if len(item) > 7 else 1.0
        move = all_to_all_seconds(size, ranks, span, intra, inter, gpus_per_node, share)
    elif collective == C.P2P:
        move = size / np.where(inside, intra, inter)
    else:
        move = _factor(collective, ranks) * size / np.where(inside, intra, ring_network_bandwidth(
            ranks, span, intra, inter, gpus_per_node))
    return np.where((np.asarray(ranks) > 1) & (size > 0), calls * (latency_s + move), 0.0)


def ring_network_bandwidth(ranks, span, intra: float, inter: float, gpus_per_node: int):
    """Bus bandwidth of a ring collective (all-reduce, all-gather, reduce-scatter) whose ranks span nodes: NCCL
    runs one ring per channel and spreads the channels over the NICs of the group's GPUs in each node, so the
    traffic leaving a node goes out through all g = ranks × gpus_per_node / span of them at once (each DGX / HGX
    GPU has its own 400 Gb/s NIC: NVIDIA DGX H100 user guide, "8 × ConnectX-7"; nccl-tests PERFORMANCE.md: the bus
    bandwidth of a multi-node all-reduce is the node's network bandwidth, not one GPU's). g NICs, at most NVLink's
    pace: min(intra, g × inter). A group with one GPU per node (DP across nodes at TP = 8) gets one NIC."""
    n = np.maximum(np.asarray(ranks, dtype=np.float64), 1.0)
    g = np.clip(n * gpus_per_node / np.maximum(np.asarray(span, dtype=np.float64), 1.0), 1.0, n)
    return np.minimum(intra, g * inter)


def all_to_all_seconds(size, ranks, span, intra: float, inter: float, gpus_per_node: int, network_share=1.0):
    """An all-to-all of `size` bytes per rank over `ranks` ranks spread evenly over span / gpus_per_node nodes:
    g = ranks × gpus_per_node / span of them share a node; (g − 1)/n of the data goes over NVLink and (n − g)/n
    over each GPU's network link, at once (NCCL's all-to-all is point-to-point sends to every peer; nccl-tests
    PERFORMANCE.md) — the slower of the two. `network_share` scales the network part (a node-deduplicating
    dispatcher: dedup_network_share)."""
    n = np.maximum(np.asarray(ranks, dtype=np.float64), 1.0)
    g = np.clip(n * gpus_per_node / np.maximum(np.asarray(span, dtype=np.float64), 1.0), 1.0, n)
    return np.maximum(size * (g - 1) / n / intra, network_share * size * (n - g) / n / inter)


def dedup_network_share(top_k, nodes, groups=1, group_topk=1):
    """What a node-deduplicating MoE dispatcher sends over the network, as a share of what a plain all-to-all
    sends: DeepEP (and Megatron's flex dispatcher on it) sends a token once to each remote node hosting one of its
    experts and forwards it over NVLink there (DeepSeek-AI 2025, DeepEP README, "internode" kernels). With k
    experts routed uniformly over N nodes a token reaches each remote node with probability 1 − (1 − 1/N)^k, where
    the plain all-to-all sends k·(N − 1)/N copies. A group-limited router (`groups`, `group_topk`:
    group_hit_probability) caps that probability: it is the smaller of the two."""
    nodes = np.maximum(np.asarray(nodes, dtype=np.float64), 1.0)
    k = np.asarray(top_k, dtype=np.float64)
    plain = k * (nodes - 1) / nodes
    hit = 1 - (1 - 1 / nodes) ** k
    if groups > 1 and group_topk < groups:
        hit = np.minimum(hit, group_hit_probability(k, nodes, groups, group_topk))
    return np.where(plain > 0, (nodes - 1) * hit / np.maximum(plain, 1e-12), 1.0)


def group_hit_probability(top_k, nodes, groups: int, group_topk: int):
    """The probability that a token's experts reach a given node under group-limited routing: the E experts split
    into G equal groups laid out in order over the EP ranks (Megatron's expert placement: rank i holds experts
    i·E/ep …), and the token's top-k is taken from its M best groups only (Megatron-Core
    megatron/core/transformer/moe/moe_utils.py group_limited_topk, --moe-router-num-groups /
    --moe-router-group-topk: "device-limited routing"; DeepSeek-AI 2024, DeepSeek-V3 technical report §2.1.2
    "Node-Limited Routing ... each token will be sent to at most M nodes", M = 4 of n_group = 8). The M groups
    chosen uniformly (balanced routing): a node holding q = G/N whole groups is reached unless none of its groups
    is chosen, 1 − C(G − q, M)/C(G, M); a group spread over r = N/G nodes is chosen with probability M/G, and
    its node gets one of the token's k/M experts there with probability 1 − (1 − 1/r)^(k/M)."""
    nodes = np.maximum(np.asarray(nodes, dtype=np.float64), 1.0)
    g, m = float(groups), int(group_topk)
    q = g / nodes
    miss = np.ones_like(nodes)
    for i in range(m):  # hypergeometric: none of the node's q groups among the M chosen
        miss = miss * np.clip((g - q - i) / (g - i), 0.0, 1.0)
    # used where nodes > g only; clipped so that the other entries raise no invalid-power warning
    spread = (m / g) * (1 - np.clip(1 - g / nodes, 0.0, 1.0) ** (np.asarray(top_k, dtype=np.float64) / m))
    return np.where(nodes > g, spread, 1 - miss)


def exposed_seconds(c: dict, per_item: list, items: list) -> dict:
    """What stays on the critical path: per micro-batch for tp, ep, pp, cp, per step for dp.
    TP: all of it, or with TP comm overlap what the GEMMs do not cover (Transformer Engine userbuffers; Wang et al.
    2022, overlap by decomposition). EP and PP: all (exposed in Megatron's default schedule). CP ring: what the
    attention blocks it runs under do not cover; CP all-to-all: all. DP: with the stack's overlap, what the last
    micro-batch's backward (gradients) or the next forward (parameters) does not cover, at least one bucket
    (NeMo docs, communication_overlap.rst: "exposes only one DP communication chunk"); without it, all."""
    total = {g: 0.0 for g in GROUPS}
    parts: dict = {}
    for item, t in zip(items, per_item):
        g, coll, phase = item[0], item[1], item[2]
        if g == "cp" and coll == C.P2P:
            parts["ring"] = parts.get("ring", 0.0) + t
        elif g == "dp":
            key = "dp_gather_f" if (coll == C.ALL_GATHER and phase != "backward") else "dp_grad"
            parts[key] = parts.get(key, 0.0) + t
        else:
            total[g] = total[g] + t
    total["tp"] = np.where(c["tp_overlap"], np.maximum(0.0, total["tp"] - c["gemm_t"]), total["tp"])
    total["ep"] = np.where(c.get("ep_overlap", 0), ep_exposed_with_overlap(total["ep"], c["fwd_t"] + c["bwd_t"],
                                                                            c["mb"], c["pp"]), total["ep"])
    total["cp"] = total["cp"] + np.maximum(0.0, parts.get("ring", 0.0) - c["attn_t"])
    n_bytes = c["b_g"] * (c["n_dense"] + c["n_experts"])
    buckets = np.maximum(1.0, np.floor(n_bytes / DDP_BUCKET_BYTES))
    grad, gather = parts.get("dp_grad", 0.0), parts.get("dp_gather_f", 0.0)
    mb = c["mb"]
    z3 = c["zero"] >= 3
    # ZeRO-3 moves its traffic every micro-batch: overlap against that micro-batch's forward / backward
    hide_b = np.where(z3, c["bwd_t"] * mb, c["bwd_t"])
    hide_f = np.where(z3, c["fwd_t"] * mb, c["fwd_t"])
    grad_x = np.where(c["grad_overlap"], np.maximum(grad / buckets, grad - hide_b), grad)
    gather_x = np.where(c["param_overlap"], np.maximum(gather / buckets, gather - hide_f), gather)
    total["dp"] = grad_x + gather_x
    return total


def ep_exposed_with_overlap(ep, compute, mb, pp):
    """EP all-to-all seconds per micro-batch left exposed when Megatron overlaps them with another micro-batch's
    compute (--overlap-moe-expert-parallel-comm, Megatron-Bridge's moe_a2a_overlap: the forward of one micro-batch
    and the backward of another run as one merged schedule, each one's dispatch / combine under the other's
    attention and expert GEMMs; megatron/core/pipeline_parallel/combined_1f1b.py, DeepSeek-V3 technical report
    §3.2.1 "DualPipe ... overlap"): what the compute does not cover, max(0, ep − compute), on the paired
    micro-batches, and all of it on the ones with no partner — a stage's warm-up forwards and cool-down backwards,
    about min(m, p) of the m micro-batches (one at p = 1)."""
    unpaired = np.minimum(1.0, np.maximum(1.0, pp) / np.maximum(mb, 1.0))
    return unpaired * ep + (1 - unpaired) * np.maximum(0.0, ep - compute)


def training_comm(c: dict, gpu, inputs: TimingInputs):
    """(exposed seconds per group, the items, their seconds) for one layout or a grid (columns `c`)."""
    intra, inter = links(gpu, inputs)
    lat = inputs.collective_latency_us * 1e-6
    items = training_items(c)
    domain = nvlink_domain(gpu, inputs)
    share = np.where(c["ep_dedup"], dedup_network_share(c["top_k"], np.ceil(c["ep"] * c["etp"] / domain),
                                                        c.get("route_groups", 1), c.get("route_topk", 1)), 1.0)
    if np.any(c["ep_dedup"]):
        items = training_items(dict(c, ep_network_share=share))
    per = [item_seconds(it, intra.bytes_per_s, inter.bytes_per_s, domain, lat) for it in items]
    return exposed_seconds(c, per, items), items, per


def comm_rows(items: list, seconds: list, mb: int, gpu, inputs: TimingInputs) -> list[RooflineRow]:
    """Roofline rows of one layout's collectives (scalars), per step: micro-batch groups × mb."""
    intra, inter = links(gpu, inputs)
    rows = []
    for (group, coll, phase, size, ranks, calls, span, *_), t in zip(items, seconds):
        calls, ranks, t = int(calls), int(ranks), float(t)
        if calls <= 0 or ranks <= 1 or size <= 0:
            continue
        link = intra if span <= nvlink_domain(gpu, inputs) else inter
        times = 1 if group == "dp" else mb
        moved = calls * C.moved_bytes(coll, float(size), ranks) * times
        rows.append(RooflineRow(f"{group.upper()} {coll} ({link.name})", phase, 0.0, moved, 0.0, "communication",
                                t * times, 0, f"{calls * times} × {coll} of {float(size):,.0f} B over {ranks} ranks",
                                "nccl-tests"))
    return rows


def forward_items(c: dict, e: float, tokens, layers: int, moe_layers: int, hidden: int, top_k: int, phase: str):
    """training_items for one forward pass over `tokens` tokens (prefill or a decode step; numbers or arrays in
    `c`: tp, pp, ep, etp, dp): 2 TP all-reduces per layer, 2 EP all-to-alls per MoE layer, a PP send per stage
    boundary."""
    tp, pp, ep, etp, dp = c["tp"], c["pp"], c["ep"], c["etp"], c["dp"]
    act = e * np.asarray(tokens, dtype=np.float64) * hidden
    return [("tp", C.ALL_REDUCE, phase, act, tp, 2 * layers, tp),
            ("ep", C.ALL_TO_ALL, phase, act * top_k, ep, 2 * moe_layers, ep * etp),
            ("pp", C.P2P, phase, act, np.where(np.asarray(pp) > 1, 2, 1), np.asarray(pp) - 1, pp * tp * dp)]


def forward_seconds(items: list, gpu, inputs: TimingInputs) -> list:
    intra, inter = links(gpu, inputs)
    lat = inputs.collective_latency_us * 1e-6
    return [item_seconds(it, intra.bytes_per_s, inter.bytes_per_s, nvlink_domain(gpu, inputs), lat) for it in items]


def forward_comm(m: ModelSpec, w: Workload, inputs: TimingInputs, gpu, tokens: float, phase: str,
                 layers: int, moe_layers: int):
    """(rows, seconds) of the TP all-reduces, EP all-to-alls and PP sends of one forward pass over `tokens` tokens
    (prefill or a decode step)."""
    p = w.parallel
    c = {"tp": p.tp, "pp": p.pp, "ep": p.ep, "etp": p.expert_tp, "dp": p.dp}
    items = forward_items(c, DTYPE_BITS[w.precision.activations] / 8, tokens, layers, moe_layers if m.is_moe else 0,
                          m.hidden_size, m.num_experts_per_tok if m.is_moe else 0, phase)
    seconds = forward_seconds(items, gpu, inputs)
    return comm_rows(items, seconds, 1, gpu, inputs), float(sum(seconds))
