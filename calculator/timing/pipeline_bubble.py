"""The pipeline bubble of a layout whose virtual stages (model chunks) hold different numbers of layers
(calculator.memory.pipeline_split: the embedding and loss counted in the split, uneven first / last stages, a
Megatron layout string).

The interleaved 1F1B schedule (Narayanan et al. 2021 §2.2, Figure 4; megatron/core/pipeline_parallel/schedules.py
forward_backward_pipelining_with_interleaving) runs each micro-batch through every virtual stage: rank r runs its
v chunks for each of the m micro-batches, m·T_r in all, and waits while the first micro-batch's forward reaches it
and the last one's backward drains back — p − 1 chunk-steps of the other ranks, one chunk long each. With equal
chunks that chunk is T/v, and

    step = m·T + (p − 1)·T/v = T·m·(1 + (p − 1)/(v·m))

(the formula of calculator.timing.step_time.step_seconds). With unequal chunks the ranks advance in lock-step at
the pace of the slowest chunk, so

    step ≈ m·T_crit + (p − 1)·t_chunk,max

T_crit: the slowest rank's time per micro-batch (all its chunks); t_chunk,max: the slowest chunk. A rank's time
outside its decoder layers (the embedding, the LM head and loss, its shard's own operations) is spread over its
chunks in proportion to their layers, as the even formula does (T/v per chunk whatever the rank holds besides its
layers): a chunk of rank r holding L_rc of the rank's L_r layers takes T_r·L_rc/L_r. For an even split this is
T_r/v, and the bubble is exactly the even formula's; with v = 1 it is T_crit, the 1F1B bubble (p − 1)/m.

The step formula keeps its shape with an effective number of chunks v_eff = T_crit / t_chunk,max in place of v.

The interleaved schedule sends each chunk's activation (and receives its gradient) once per micro-batch and chunk,
2·v transfers (calculator.timing.comm_time). With Megatron-Core's overlap_p2p_comm (Parallelism.pp_overlap_p2p;
megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving: the next chunk's
receive and this chunk's send are posted before the compute and waited after it) they run under the rank's
compute, and a micro-batch exposes only what its compute does not cover: max(0, t_p2p − t_compute).
"""
from __future__ import annotations

from calculator.memory.pipeline_split import chunk_layer_counts, uneven_chunks, virtual_stages


def effective_chunks(layers: int, p, rank_seconds: list[float]) -> float:
    """v_eff = T_crit / t_chunk,max for the bubble (p − 1)/(v_eff·m); `rank_seconds`: each rank's time per
    micro-batch. The layout's v when its chunks are even."""
    v = virtual_stages(p)
    if p.pp == 1 or not uneven_chunks(p):
        return float(v)
    counts = chunk_layer_counts(layers, p)
    slowest = 0.0
    for t, row in zip(rank_seconds, counts):
        held = sum(row)
        slowest = max(slowest, t * max(row) / held if held else t / v)
    crit = max(rank_seconds)
    return crit / slowest if slowest > 0 else float(v)


def exposed_p2p(p2p_seconds: float, compute_seconds: float, p) -> float:
    """The pipeline send / receive time a micro-batch leaves exposed: all of it, or with overlap_p2p_comm under
    the interleaved schedule what the rank's compute of that micro-batch does not cover."""
    if p.pp > 1 and getattr(p, "pp_overlap_p2p", False) and virtual_stages(p) > 1:
        return max(0.0, p2p_seconds - compute_seconds)
    return p2p_seconds
