"""Megatron-Core's fine-grained activation offloading (--fine-grained-activation-offloading --offload-modules;
NVIDIA/Megatron-LM d98e8a64: megatron/core/pipeline_parallel/fine_grained_activation_offload.py, the modules' call
sites in transformer/transformer_layer.py, attention.py, multi_latent_attention.py, moe/experts.py). Used by
calculator.impls.megatron_te_core (stack megatron + impl megatron-te) and calculator.stages.training.

Each listed module opens an offload group around its forward (FineGrainedActivationOffloadingInterface): the
tensors autograd saves inside it go through saved_tensors_hooks (PipelineOffloadManager.on_save_for_backward), and
at the group's commit (ChunkOffloadHandler.bulk_offload_group) every one of at least min_offloaded_tensor_size =
1,048,576 elements (tensor_need_offloading_checker) is copied to pinned host memory and leaves the GPU; the
`forced_released_tensors` of the commit (the module's input) are freed too. In backward each group comes back just
before its module's backward (bulk_reload: the group being back-propagated, and the one before it in flight).

What stays on the GPU (post_warmup_callback, should_bulk_offload): the first training iteration is a warmup that
offloads everything and records the groups; from the second on, the last group of each module name in the chunk
that runs backward first (the first micro-batch's last model chunk of this rank) is kept — one layer's groups, the
"offload margin" — and so is the last group of each name of any chunk that is next in the backward queue when it
runs forward (on the last stage: its last model chunk, back-propagated right after). activation_offload_fraction
(1.0) and delta_offload_bytes_across_pp_ranks (0) keep their defaults here.

The reload side (lines at 4e85d74ae9, the CI runs' commit; unchanged at d98e8a64): each group's backward start
(on_group_start_backward, 1040) bulk-reloads the top of the chunk's stack of offloaded groups (bulk_reload 979,
bulk_reload_group 901), and once that stack is empty it reloads the next backward chunk's last layer, group by
group, if that chunk has run its forward (pre_reload_last_layer 923). After warmup the kept margin is not on the
stack, so the reloads run one layer ahead: when a chunk's backward ends, the next one's last layer is already
back on the GPU — and in the 1F1B steady state (more than one micro-batch in flight) a forward runs before that
backward, its core attention's working set beside the reloaded layer (reload_moment). A reloaded group holds one
GPU tensor per saved tag (offload 738, reload 752: one pinned copy and one new tensor each): a tensor two autograd
nodes saved comes back twice (saved_twice), and the q, k, v the core attention saved come back though the
mla_up_proj checkpoint discarded them in forward (qkv_back). In warmup the stack pointer is not ahead (nothing is
kept) and groups mostly come back on demand (tensor_pop 850), one tensor at a time.

Per group, in the terms calculator.impls.megatron_te_core counts for one layer (T tokens, e the activation bytes):
attn_norm — the layer's input (the residual stream) when the input norm is a module of its own (MLA's TENorm; the
TE spec fuses the others into linear_qkv: IdentityOp, skipped); qkv_linear — the attention's input and the QKV
projections' saved tensors; core_attn — what the core keeps (q, k, v, scores or statistics); attn_proj — the output
projection's input; mlp_norm — a MoE layer's pre-MLP norm input (dense TE layers fuse it: skipped); expert_fc1 —
the routed rows fc1 keeps; moe_act — the activation's input (fc1's output). Not modelled (refused in
calculator.memory.megatron_core): FP8 recipes (quantized saved inputs), CUDA graphs, fused_group_mlp.
"""
from __future__ import annotations

from calculator.core.result import Term
from calculator.impls import megatron_recompute as rc
from calculator.memory import activations as act
from calculator.memory import moe_dispatch as moe

MIN_ELEMENTS = 1024 * 1024  # transformer_config.py min_offloaded_tensor_size


def _big(nbytes: int, e: int) -> int:
    """A tensor is offloaded only from MIN_ELEMENTS elements (tensor_need_offloading_checker)."""
    return nbytes if nbytes >= MIN_ELEMENTS * e else 0


def attn_norm_group(m, w, d) -> int:
    """attn_norm (transformer_layer.py _run_input_layernorm, committed after the attention's bias-dropout-add with
    the residual force-released): the input norm's saved input, the layer's e·T·h_sp input (its checkpoint's input
    under layernorm recompute); only where the input norm is its own module (MLA)."""
    return _big(d.e * d.T * d.h_sp, d.e) if "attn_norm" in w.offload_modules and m.is_mla else 0


def qkv_linear_group(m, w, d) -> tuple[int, int]:
    """(norms part, attention part) of qkv_linear (attention.py SelfAttention.forward / multi_latent_attention.py
    MLASelfAttention.forward around get_query_key_value_tensors). Standard attention: TE's fused norm + qkv linear
    keeps the layer's input and the normalised GEMM input (2·e·T·h_sp). MLA: the input norm's output, which the down
    projections keep and the commit force-releases (already freed under layernorm recompute), and the latents'
    saved tensors — the checkpoint's inputs e·T·(q_lora + kv_lora) under mla_up_proj, else the latent norms' saved
    tensors (activations.mla_attention_saved's low-rank part)."""
    if "qkv_linear" not in w.offload_modules:
        return 0, 0
    e, T = d.e, d.T
    h_in = _big(e * T * d.h_sp, e)
    if not m.is_mla:
        return 2 * h_in, 0
    norms = 0 if rc.recomputes(w, "layernorm") else h_in
    ql, kvl = m.q_lora_rank or 0, m.kv_lora_rank or 0
    if rc.recomputes(w, "mla_up_proj"):
        return norms, _big(e * T * ql, e) + _big(e * T * kvl, e)
    q = act.rmsnorm_saved(T, ql, e) + e * T * ql if ql else 0
    return norms, q + act.rmsnorm_saved(T, kvl, e) + e * T * kvl


def attn_proj_group(m, w, d) -> int:
    """attn_proj (the output projection, its input force-released at the commit): the attention output it keeps,
    e·T·a·d_v (MLA) or e·T·qd."""
    if "attn_proj" not in w.offload_modules:
        return 0
    return _big(d.e * d.T * (d.a * m.v_head_size if m.is_mla else d.qd), d.e)


def core_attn_group(m, w, d, attention: int) -> int:
    """core_attn (the core attention under its group, query force-released with key and value): all the attention
    part keeps beyond the qkv_linear and attn_proj groups' tensors — q, k, v, the scores (unfused) or the softmax
    statistics. Nothing under core_attn recompute (the checkpointed core runs outside the group)."""
    if "core_attn" not in w.offload_modules or rc.recomputes(w, "core_attn"):
        return 0
    return max(0, attention - qkv_linear_group(m, w, d)[1] - attn_proj_group(m, w, d))


def moe_groups(m, w, d) -> tuple[int, int]:
    """(norms part, MoE part) of a MoE layer: mlp_norm (transformer_layer.py _forward_pre_mlp_layernorm, committed
    after the MLP's bias-dropout-add) the pre-MLP norm's e·T·h_sp input; expert_fc1 (experts.py TEGroupedMLP.forward)
    the R routed rows fc1 keeps, e·R·h; moe_act its activation's input, fc1's e·R·(2f gated, f) output (the
    checkpoint's input under moe_act recompute); R the rows this rank's experts receive (moe_dispatch.expert_rows)."""
    mods, p = w.offload_modules, w.parallel
    norm = _big(d.e * d.T * d.h_sp, d.e) if "mlp_norm" in mods else 0
    R = moe.expert_rows(d.T * d.h_sp // d.h, m.num_experts_per_tok, m.num_experts, p.expert_tp, w.moe_imbalance,
                        w.moe_capacity_factor, w.moe_pad_to_capacity)
    f = m.expert_intermediate_size // p.expert_tp
    fc1 = _big(d.e * R * d.h, d.e) if "expert_fc1" in mods else 0
    act_in = _big(d.e * R * (2 * f if m.gated_mlp else f), d.e) if "moe_act" in mods else 0
    return norm, fc1 + act_in


def offloaded(m, w, d, kind, layer) -> act.LayerActivations:
    """What one layer's groups move to the host, by part of `layer` (megatron_te_core.layer's LayerActivations
    before offloading): attn_norm and qkv_linear's input parts from the norms, the attention groups from the
    attention, the MoE groups from the MoE part and its norm."""
    if not w.offload_modules or kind.mixer not in ("attention", "mla"):
        return act.LayerActivations(0, 0, 0)
    qkv_norms, qkv_attn = qkv_linear_group(m, w, d)
    attention = qkv_attn + core_attn_group(m, w, d, layer.attention) + attn_proj_group(m, w, d)
    moe_norm, moe_part = moe_groups(m, w, d) if kind.ffn == "moe" and not rc.recomputes(w, "moe") else (0, 0)
    norms = attn_norm_group(m, w, d) + qkv_norms + moe_norm
    return act.LayerActivations(min(norms, layer.norms), min(attention, layer.attention), min(moe_part, layer.mlp))


def saved_twice(m, w, d) -> int:
    """TE's unfused core attention (UnfusedDotProductAttention: the fused causal softmax saves its output, and with
    attention dropout 0 torch's dropout returns that same tensor, which the probs·V bmm saves too): two saved tags,
    two pinned copies, two tensors reloaded — e·b·a·s·s_kv more than the layer offloaded."""
    if "core_attn" not in w.offload_modules or rc.recomputes(w, "core_attn") or w.attention != "eager":
        return 0
    return d.e * d.b * d.a * d.s * d.s_kv if m.dropout == 0 else 0


def qkv_back(m, w, d) -> int:
    """The query, key and value the core attention saved (q, k: e·T·a·d_qk each; the contiguous value e·T·a·d_v):
    under mla_up_proj the checkpoint discards them in forward (megatron_recompute.mla_up_proj_freed), but the
    core_attn group copied them to the host first, and its reload brings them back."""
    if "core_attn" not in w.offload_modules or rc.recomputes(w, "core_attn") or not m.is_mla:
        return 0
    return d.e * d.T * d.a * (2 * m.head_size + m.v_head_size) if rc.recomputes(w, "mla_up_proj") else 0


def reloaded(m, w, d, moved: int) -> int:
    """One layer back on the GPU (bulk_reload_group): what it offloaded, plus saved_twice and qkv_back."""
    return moved + saved_twice(m, w, d) + qkv_back(m, w, d)


def forward_attention(m, w, d) -> int:
    """A layer's forward at its core attention, beyond what the stage counts for the layer once its groups are
    offloaded: q, k and v (MLA: the up-projection's q and k, its whole kv output, the contiguous value —
    multi_latent_attention.py; else the fused qkv output), and under TE's unfused attention the scores (the baddbmm
    output, alive to the function's end) beside the softmax output, 2·e·b·a·s·s_kv."""
    e, T, a = d.e, d.T, d.a
    if m.is_mla:
        qkv = e * T * a * (2 * m.head_size + m.qk_nope_head_dim + 2 * m.v_head_size)
    else:
        qkv = e * T * (d.qd + 2 * d.kvd)
    return qkv + (2 * e * d.b * a * d.s * d.s_kv if w.attention == "eager" else 0)


def reload_moment(t, m, w, d, shard, moved_of, flight: float) -> int:
    """The 1F1B forward beside a reloaded layer, as bytes above the stage's activations (the caller compares it,
    less the freed loss head, with the loss backward): the next backward chunk's last layer reloaded (the largest
    kind's `reloaded`) and the forward's attention working set (forward_attention), less the kept margin and the
    MTP block (both back-propagated by then). Only with more than one micro-batch in flight (flight > 1): a stage
    that runs each backward right after its forward (the last stage without virtual stages) never pre-reloads,
    the next chunk has not run its forward yet."""
    layers = range(shard.first_layer, shard.last_layer)
    if not w.offload_modules or flight <= 1 or not layers:
        return 0
    kinds = {m.layer_kind(i) for i in layers}
    back = max(reloaded(m, w, d, moved_of(k)) for k in kinds)
    fwd = forward_attention(m, w, d) if any(k.mixer in ("attention", "mla") for k in kinds) else 0
    held = sum(x.bytes for x in t.items if x.key in ("activations.offload_kept", "activations.mtp"))
    return back + fwd - held


def reload_line(ws: int, freed: int, loss_ws: int) -> tuple:
    """The transient line (TermList.add's arguments) when reload_moment's forward beats the loss backward."""
    return ("transient.offload_reload", "transient", "1F1B forward beside the next backward's reloaded layer",
            ws - freed, "reloaded layer + forward attention − kept margin − MTP block − loss head",
            ("{:,} − {:,} B", ws, freed), "megatron-fine-grained-offload",
            f"exceeds the loss backward's {loss_ws:,} B")


# What the comparison with Megatron-LM's own CI says (validation/published/megatron_ci, group "offload"): with the
# reload moment priced the four offloading runs peak 4.5-7.3% (0.3-0.6 GB) above this estimate (15-21% before)
UNDER_NOTE = ("approximate: Megatron-LM's CI runs with offloading peak 4.5-7.3% (0.3-0.6 GB) above this estimate; "
              "0.1 GB of it static after each step, the rest not yet identified in the sources "
              "(docs/validation.md, group offload)")


def kept_kind(m, w, shard):
    """The kind of the layer whose groups stay (the margin): the MTP block's layer (the model's last kind) on the
    stage that holds it, else the stage's last decoder layer."""
    return m.layer_kind(m.num_hidden_layers - 1 if shard.has_head and w.mtp_layers else shard.last_layer - 1)


def add_terms(t, m, w, shard, moved_of, flight: float) -> None:
    """The stage's offloading lines (moved_of(kind): one layer's offloaded bytes): on the GPU the margin — one
    layer's groups kept (post_warmup_callback) — and in pinned host memory (OffloadTensorPool) the groups of every
    layer of every micro-batch in flight but that one."""
    layers = range(shard.first_layer, shard.last_layer)
    mtp = w.mtp_layers if shard.has_head else 0
    if not w.offload_modules or len(layers) + mtp == 0:
        return
    kept = moved_of(kept_kind(m, w, shard))
    t.add("activations.offload_kept", "activations", "Offload margin: one layer's groups kept on the GPU", kept,
          "the last group of each offloaded module in the first chunk back-propagated", ("{:,} B", kept),
          "megatron-fine-grained-offload", UNDER_NOTE)
    per = {k: moved_of(k) for k in {m.layer_kind(i) for i in layers}}
    total = int(flight * sum(per[m.layer_kind(i)] for i in layers))
    host = total + (mtp - 1) * kept if mtp else total - kept
    if host > 0:
        t.host.append(Term("host.offloaded_activations", "host", "Offloaded activations (pinned host memory)",
                           host, "m_inflight × Σ layers' offloaded groups − the kept layer (+ MTP layers but one)",
                           f"{flight:g} × {len(layers)} layers' groups, {kept:,} B kept",
                           "megatron-fine-grained-offload", "in host RAM (offloaded)"))
