"""Communication of each parallel group: bytes on the wire and seconds over NVLink or InfiniBand.

Collective times follow NCCL's bus-bandwidth model (nccl-tests doc/PERFORMANCE.md): an all-reduce of S bytes over n
ranks moves 2·(n−1)/n·S per rank, an all-gather or reduce-scatter (S = the full, gathered size) and an all-to-all
(n−1)/n·S, a point-to-point send S; time = latency + moved / bus bandwidth. A group whose ranks sit in one node
(ranks are laid out TP innermost, then CP, then DP, then PP — Megatron-LM's default order; `strides`) uses the
GPU-to-GPU link (NVLink: half the datasheet's two-way figure per direction); a group that spans nodes is limited by
each GPU's network link (InfiniBand). Each is scaled by the share of the link NCCL reaches (`comm_efficiency`).

Volumes per step, each with its source:
- TP (Shoeybi et al. 2019 §3; Korthikanti et al. 2022 §4.2.2): 2 all-reduces of b·s·h activations per layer forward
  and 2 backward (with sequence parallelism: all-gathers + reduce-scatters of the same total); one more pair per
  layer when full recompute replays the forward.
- DP (Li et al. 2020, PyTorch DDP; Rajbhandari et al. 2019, ZeRO §7): an all-reduce of the gradients per step;
  ZeRO-1/2 and Megatron's distributed optimizer a reduce-scatter of gradients + an all-gather of parameters (the same
  volume); ZeRO-3/FSDP all-gathers the parameters in forward and again in backward and reduce-scatters the
  gradients (1.5×), per micro-batch.
- PP (Narayanan et al. 2021 §2.2): one send of the b·s·h activation forward and one of its gradient backward per
  micro-batch and stage boundary.
- EP (Lepikhin et al. 2020, GShard): an all-to-all of the T·k routed token copies to dispatch and one to combine per
  MoE layer, forward and backward.
- CP (ring attention, Liu et al. 2023; Megatron-LM context parallelism): cp − 1 ring steps passing the local K and V
  per layer forward, and K, V and their gradients backward.
"""
from __future__ import annotations

from typing import NamedTuple

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, P2P = "all-reduce", "all-gather", "reduce-scatter", \
    "all-to-all", "send/recv"


def moved_bytes(collective: str, size: float, n: int) -> float:
    """Bytes each rank sends for a collective of `size` bytes over n ranks (nccl-tests PERFORMANCE.md)."""
    if n <= 1:
        return 0.0
    if collective == ALL_REDUCE:
        return 2 * (n - 1) / n * size
    if collective in (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL):
        return (n - 1) / n * size
    return float(size)  # point to point


def collective_seconds(collective: str, size: float, n: int, bus_bandwidth: float, latency_s: float,
                       calls: int = 1) -> float:
    """latency × calls + moved bytes / bus bandwidth (the α–β model NCCL's bus bandwidth is measured against)."""
    if n <= 1 or size <= 0:
        return 0.0
    return latency_s * calls + moved_bytes(collective, size, n) / bus_bandwidth


class Link(NamedTuple):
    name: str  # "NVLink" / "InfiniBand" / ...
    bytes_per_s: float  # per direction, after the efficiency factor


def group_link(size: int, stride: int, gpus_per_node: int, intra: Link, inter: Link) -> Link:
    """The link a group of `size` ranks spaced `stride` apart uses: inside one node when size·stride ≤ GPUs per node."""
    return intra if size * stride <= gpus_per_node else inter


class CommVolume(NamedTuple):
    """One kind of traffic of one group over one step, on one GPU."""

    group: str  # tp / cp / ep / dp / pp
    collective: str
    size: float  # bytes per call
    calls: int  # calls per step
    phase: str  # forward / backward / step
    overlap: str  # what compute may hide it: "" (exposed), "backward", "forward", "attention"


def strides(tp: int, cp: int, dp: int, expert_tp: int = 1) -> dict[str, int]:
    """Distance between consecutive ranks of each group in Megatron-Core's tp-cp-ep-dp-pp order
    (megatron/core/parallel_state.py RankGenerator): CP ranks stride TP; the data-parallel × context-parallel group
    that reduces the gradients strides TP (its ranks fill the tp·cp·dp block); the expert-parallel group, laid out
    by the expert rank generator (etp-ep-dp-pp), strides the expert TP; PP strides tp·cp·dp."""
    return {"tp": 1, "cp": tp, "ep": expert_tp, "dp": tp, "pp": tp * cp * dp}
