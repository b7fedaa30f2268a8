"""Megatron-Core's MoE layer synchronises the host with the GPU once per forward: the step is a sum of segments.

Where the host waits (Megatron-LM at d98e8a64, megatron/core/transformer/moe/):
- alltoall dispatcher (token_dispatcher.py MoEAlltoAllTokenDispatcher): preprocess() computes the tokens-per-expert
  counts and the all-to-all splits on the GPU and marks the earliest point that needs them on the host
  ("before_permutation_1" with a capacity factor or router padding, else "before_ep_alltoall" with EP or TP > 1,
  "before_permutation_2" with several local experts and no permute fusion, else "before_finish");
  _maybe_dtoh_and_synchronize() copies them to the host on a side stream and waits on its event
  (`self.d2h_event.synchronize()`) there, once, in dispatch_preprocess / token_dispatch / dispatch_postprocess.
  With --moe-pad-expert-input-to-capacity (drop_and_pad) the counts are host constants and no copy or wait is made.
- allgather dispatcher (MoEAllGatherTokenDispatcher.dispatch_postprocess): `self.local_map.sum(dim=0).long().cpu()`
  and `.sum().item()`.
- flex dispatcher: DeepEP's fused_dispatch (fused_a2a.py FusedDispatch.forward: "the CPU will wait for GPU's
  signal to arrive") returns the received counts as a host list, and _DeepepManager.
  get_permuted_hidden_states_by_experts calls `.tokens_per_expert.sum().item()`; HybridEP (_HybridEPManager.dispatch)
  waits unless a rank capacity factor or drop_and_pad fixes num_permuted_tokens ("CPU sync in dispatch").
- experts.py TEGroupedMLP.forward then hands Transformer Engine's GroupedLinear host token counts
  (`tokens_per_expert.tolist()`, its m_splits), already on the host after the dispatcher's wait.
The backward waits nowhere: the all-to-all's backward reuses the host splits saved in the forward, DeepEP's combine
and cached dispatch reuse the handle (FusedDispatch.backward, FusedCombine.backward), HybridEP's combine its handle;
a recompute that replays the MoE layer's forward (--recompute-granularity full, --recompute-modules moe) replays
its wait in the backward. A full-iteration CUDA graph needs the sync-free dispatch and removes it
(train_ops.graph_host_share).

So the host cannot run ahead past one wait: from one wait to the next the stage costs max(GPU, host) of what runs
between them, and the micro-batch is the sum of such segments (He 2022's overhead bound, per segment):

    t = Σ over MoE layers [max(G_f, H_f) + (max(G_b, H_b) if the backward replays the wait)]
        + max(G − Σ G_seg, H − Σ H_seg)

with one MoE layer's forward (G_f, H_f: from its wait to the next layer's, the layers alike) as a segment and, when
its forward is replayed in the backward, its backward with the replay (G_b, H_b) — under the EP overlap's merged
schedule, which pairs each layer's forward with another micro-batch's layer backward, the whole layer; the rest of
the micro-batch (the dense layers, the head, the backward) runs as before under one max. A MoE layer's host time beyond its counted
operators (the dispatcher's and Transformer Engine's Python, the wait's own latency) is the fitted
MEGATRON_MOE_LAYER_HOST_S, host time in its forward segment, with the per-expert GEMM launches (expert_launch_host_s).
"""
from __future__ import annotations

# Host seconds per MoE layer per micro-batch beyond its counted operators and per-expert launches (the dispatcher's
# and Transformer Engine's Python, the device-to-host copy and event wait), when none of the layer is graph-captured;
# host time of the layer's forward segment. Fitted on Megatron-Bridge's MoE rows (validation/published/throughput/
# --fit-moe, the fit rows only: a mechanism confined to the MoE layers leaves the dense rows and the efficiencies
# as they are), each row's per-layer MoE graphs read from its recipe (validation/published/throughput/recipes.py).
MEGATRON_MOE_LAYER_HOST_S = 0.00708

DISPATCH = "Expert dispatch, gate and combine"  # the dispatcher's operation (calculator.timing.ops)


def syncs(w, inputs) -> bool:
    """Whether the MoE layers wait on the GPU: Megatron-Core's (impl megatron-te), not under a full-iteration CUDA
    graph, and not the alltoall dispatcher padded to capacity (drop_and_pad: host constant counts)."""
    if w.impl != "megatron-te" or inputs.full_iteration_cuda_graph:
        return False
    padded = w.moe_pad_to_capacity and w.moe_dispatcher == "alltoall"
    return not padded


def replays_wait(replay) -> bool:
    """Whether what the recompute replays in the backward holds the dispatcher (so its wait)."""
    return any(o.name == DISPATCH for o in replay)


def segment_columns(fwd, bwd, replayed: bool, paired: bool = False) -> tuple[float, float, float]:
    """(Σ max(GPU, host) of the layer's segments, their GPU seconds, their host seconds) from the (GPU, host)
    seconds of one MoE layer's forward `fwd` and of its backward with the replay `bwd`. `paired`: the EP overlap's
    merged schedule (--overlap-moe-expert-parallel-comm: models/common/model_chunk_schedule_plan.py
    TransformerLayerSchedulePlan.run(f_layer, b_layer) runs one layer's forward beside another micro-batch's layer
    backward, combined_1f1b.py), so one wait per forward-and-backward pair: the whole layer is one segment."""
    if paired:
        return (max(fwd[0] + bwd[0], fwd[1] + bwd[1]), fwd[0] + bwd[0], fwd[1] + bwd[1])
    parts = [fwd] + ([bwd] if replayed else [])
    return (sum(max(g, h) for g, h in parts), sum(g for g, _ in parts), sum(h for _, h in parts))


def moe_layer_host_s(w, inputs, ops=None) -> float:
    """Host seconds a MoE layer adds to each micro-batch with Megatron-Core's layers (none for the others):
    MEGATRON_MOE_LAYER_HOST_S less the share a per-layer CUDA graph of the router and the dispatcher's preprocess
    replays (moe_graph_captured_share of the layer's operations `ops`, forward and backward); none under a
    full-iteration graph. TimingInputs.moe_layer_host_ms overrides."""
    if inputs.moe_layer_host_ms is not None:
        return inputs.moe_layer_host_ms * 1e-3
    if inputs.full_iteration_cuda_graph:  # sync-free dispatch replayed from the graph: no host wait
        return 0.0
    if w.impl != "megatron-te":
        return 0.0
    captured = moe_graph_captured_share(ops or [], inputs) if inputs.moe_router_cuda_graph else 0.0
    return MEGATRON_MOE_LAYER_HOST_S * (1.0 - captured)


# Megatron's grouped experts (TEGroupedMLP, --moe-grouped-gemm) hand Transformer Engine's GroupedLinear the
# tokens-per-expert as host integers (experts.py: `tokens_per_expert.tolist()`, its m_splits): fc1 and fc2 run one
# GEMM per local expert, their backward a data- and a weight-gradient GEMM each, all issued by the host after the
# dispatcher's wait — operators per local expert, forward and backward.
MOE_EXPERT_FWD_OPS, MOE_EXPERT_BWD_OPS = 2, 4


def local_experts(m, w) -> int:
    """Routed experts one GPU holds: experts / EP."""
    return m.num_experts // max(1, w.parallel.ep) if m.is_moe else 0


def expert_launch_host_s(w, inputs, experts: int) -> tuple[float, float]:
    """Host seconds of the per-expert GEMMs of one MoE layer and micro-batch under Megatron-Core, (forward,
    backward): experts × MOE_EXPERT_FWD_OPS × host_op_us and experts × MOE_EXPERT_BWD_OPS × host_backward_op_us
    (none under a full-iteration graph or outside Megatron-Core)."""
    if w.impl != "megatron-te" or inputs.full_iteration_cuda_graph:
        return 0.0, 0.0
    return (experts * MOE_EXPERT_FWD_OPS * inputs.host_op_us * 1e-6,
            experts * MOE_EXPERT_BWD_OPS * inputs.host_backward_op_us * 1e-6)


# The MoE block's operations (calculator.timing.ops: the router, the grouped GEMMs, the dispatch / gate / combine)
MOE_ROUTER, MOE_BLOCK = "Router", ("Router", "Routed experts (grouped GEMM)", DISPATCH)
# Of the dispatch's forward operators (roofline.HOST_OPS["moe_expert"]), those Megatron's MoELayer.preprocess()
# runs: the tokens-per-expert count (histc) and the all-to-all splits (cumsum)
MOE_PREPROCESS_OPS = 2


def moe_graph_captured_share(ops, inputs) -> float:
    """Share of the MoE block's host time a per-layer CUDA graph of the router and the dispatcher's preprocess
    replays with one launch (Megatron-Core --cuda-graph-impl transformer_engine --cuda-graph-modules moe_router
    moe_preprocess: "moe_router" captures _forward_mlp() up to MoELayer.router(), "moe_preprocess" captures
    MoELayer.preprocess(), transformer_config.py; the graph's backward is replayed too). Host time per operator
    as everywhere (TimingInputs.host_op_us forward, host_backward_op_us backward), the preprocess's
    MOE_PREPROCESS_OPS forward operators counted in the block:
        (router forward + backward + preprocess) / (the block's forward + backward + preprocess)."""
    def host(o) -> float:
        return o.host_ops * (inputs.host_backward_op_us if o.phase == "backward" else inputs.host_op_us)
    block = [o for o in ops if o.name in MOE_BLOCK and o.phase in ("forward", "backward")]
    if not block:
        return 0.0
    preprocess = MOE_PREPROCESS_OPS * inputs.host_op_us
    captured = sum(host(o) for o in block if o.name == MOE_ROUTER) + preprocess
    total = sum(host(o) for o in block) + preprocess
    return captured / total if total > 0 else 0.0
