"""What a Megatron-Core GPT layer built from Transformer Engine modules saves for backward, and its loss head, read
from the sources (NVIDIA/Megatron-LM d98e8a64: megatron/core/models/gpt/gpt_layer_specs.py, transformer/attention.py,
transformer/mlp.py, transformer/moe/*, fusions/fused_bias_dropout.py, tensor_parallel/cross_entropy.py;
NVIDIA/TransformerEngine d0067d0d: pytorch/module/layernorm_linear.py, linear.py, grouped_linear.py,
pytorch/attention/dot_product_attention/backends.py). Used with stack megatron + impl megatron-te
(calculator/memory/megatron_core.applies); MLA and other token mixers keep calculator.impls.fused's layer.

Per layer (T local tokens, h_sp the h-wide width on this rank, e the activation dtype's bytes):
- qkv and fc1 are TELayerNormColumnParallelLinear: each keeps its input (the residual, e·T·h_sp), fp32 mu and
  rsigma per row (LayerNorm; rsigma only for RMSNorm) and the normalised GEMM input (e·T·h_sp; FP8: quantized);
- hidden dropout (bias-dropout-add after attention and after the MLP) keeps a 1-byte mask of T·h_sp each;
- attention: q, k, v are views of the fused qkv output (e·T·(qd + 2·kvd)); GQA's query is a reshaped copy
  (e·T·qd); RoPE (TE's fused kernel) writes new q and k; a q/k LayerNorm keeps its inputs and statistics and
  writes new q and k. TE's flash / cuDNN attention keeps q, k, v once: the views while they are the fused output's
  interleaved heads (MHA, no RoPE), else TE's contiguous copies, the fused output freed unless q/k norms keep it
  (calculator.impls.te_attention); the output (the projection's input), fp32 softmax statistics (4·a·T), and on
  Blackwell under deterministic training with dropout FlashAttention's own output too (micro-batch > 1); a kept
  fused output may hold the unsplit rest of its allocator block (calculator.impls.unsplit_block). Selective
  recompute keeps Megatron's q, k, v and recomputes the statistics. TE's unfused attention keeps the softmax
  output per score (e·b·a·s·s_kv), and with attention dropout its 1-byte mask and the dropped probabilities, and
  GQA's k and v repeated to every head;
- MLP: fc1's output (the fused bias-GELU / SwiGLU keeps its input, 2f wide when gated) and the activation's output
  (fc2's input; FP8: quantized) — e·T·(2f + f) gated, 2·e·T·f plain;
- MoE: the router's fp32 scores, map and probabilities, the grouped experts over the rows this GPU receives, the
  shared expert (calculator.memory.moe_dispatch).
"""
from __future__ import annotations

from calculator.impls.common import Head, HeadTerm
from calculator.impls.fused import fused_layer
from calculator.memory import activations as act
from calculator.memory import fp8 as fp8_rules
from calculator.memory import megatron_core as core
from calculator.memory import moe_dispatch as moe
from calculator.impls import megatron_offload as offload
from calculator.impls.megatron_offload import reload_line  # noqa: F401  (stages/training.py)
from calculator.impls import megatron_recompute as rc
from calculator.impls import te_attention, unsplit_block
from calculator.memory.fp8 import compute_capability


def _gemm_input(w, elements: int, e: int) -> int:
    """A GEMM input saved for the weight gradient: model dtype, or quantized under an FP8 recipe."""
    return fp8_rules.saved_input_bytes(w.fp8, elements) if w.fp8 != "none" else e * elements


def projection_input(w, e: int, T: int, qd: int, kernel_saves_it: bool) -> int:
    """What stays of the attention output handed to the output projection (TERowParallelLinear). In a bf16 run the
    projection saves that tensor for its weight gradient. Under an FP8 recipe it quantizes it and saves only the
    quantized copy (TransformerEngine 4220403e, pytorch/module/linear.py _linear_forward: `inputmat =
    input_quantizer(inputmat)`, `saved_inputmat = inputmat`; Megatron-LM d98e8a64 keeps no reference past the
    layer), so the model-dtype tensor stays only when the attention kernel saves it for its own backward —
    cuDNN's output is the tensor it returns; FlashAttention keeps its own and returns a new one at micro-batch > 1
    (the caller prices it); TE's ring: see ring_attention_saved; the unfused and the checkpointed (selective) core
    attention keep none."""
    if w.fp8 == "none":
        return e * T * qd
    return (e * T * qd if kernel_saves_it else 0) + fp8_rules.saved_input_bytes(w.fp8, T * qd)


def ln_linear_saved(m, w, d) -> int:
    """One TELayerNormColumnParallelLinear: its input, fp32 statistics, its normalised output (the GEMM input)."""
    layernorm = m.norm_type == "layernorm"
    return d.e * d.T * d.h_sp + core.norm_stats(d.T, d.h_sp, d.h, layernorm) + _gemm_input(w, d.T * d.h_sp, d.e)


def ring_attention_saved(m, w, d) -> int:
    """Self-attention under context parallelism with TE's p2p ring (cp_comm_type p2p, a2a+p2p): the query as it
    enters the ring, the ring's K/V buffer and two output copies (core.cp_ring_saved), the fp32 statistics. The
    fused qkv output is kept only while the query is a view of it (MHA with learned positions) or q/k norms keep
    views of it; RoPE's or a q/k norm's new k goes into the ring buffer and is freed."""
    e, T = d.e, d.T
    gqa = d.qd > d.kvd
    rope = not m.learned_position_embeddings
    out = e * T * (d.qd + 2 * d.kvd) if m.qk_norm or not (rope or gqa) else 0
    if m.qk_norm:  # the norms keep their inputs (views of qkv) and statistics; the new q enters the ring
        out += (e * T * d.qd if gqa else 0) + 4 * T * (d.a + d.kv) * (2 if m.norm_type == "layernorm" else 1)
        out += e * T * d.qd
    elif rope or gqa:  # RoPE's new q, or GQA's reshaped query copy
        out += e * T * d.qd
    # the ring keeps its K/V buffer and `out_part`; cp_ring_saved's second output-sized tensor is taken as the
    # projection's model-dtype input, gone under FP8. Open: at TE 4220403e `out.to(fwd_nominal_dtype)` returns the
    # bf16 `out` itself, so the source does not show that second tensor; the bf16 CP rows need it (cp group 0.44%)
    # and the FP8 H100 row reads without it (M0229: +0.77% with it, +0.03% without)
    out += core.cp_ring_saved(e, T, d.qd, d.kvd) - e * T * d.qd + projection_input(w, e, T, d.qd, False)
    return out + 4 * d.a * T


def qkv_block_rest(e: int, T: int, d) -> int:
    """What the kept fused qkv output holds beyond its size (calculator.impls.unsplit_block): each layer frees
    residual-stream tensors of e·T·h_sp (the row-parallel output, bias-dropout-add's temporaries), the best fit for
    a qkv output a little smaller; a rest of at most 1 MiB stays with it (at TP 4 of the h = 512 CI model, 3 MiB in
    a 4 MiB block: 1 MiB per layer)."""
    return unsplit_block.kept_rest(e * T * (d.qd + 2 * d.kvd), e * T * d.h_sp)


def attention_saved(m, w, d) -> int:
    """Self-attention without its fused norm (see the module docstring)."""
    e, T = d.e, d.T
    gqa = d.qd > d.kvd
    if w.parallel.cp > 1 and w.cp_comm_type in ("p2p", "a2a+p2p") and w.attention != "eager" \
            and w.recompute != "selective":
        return ring_attention_saved(m, w, d)
    out = e * T * (d.qd + 2 * d.kvd)  # the fused qkv output, kept whole by the v (and k) views
    rope = not m.learned_position_embeddings
    selective = w.recompute == "selective"
    if m.qk_norm:  # q/k norms keep their inputs (views; GQA's reshaped query copy) and statistics
        out += (e * T * d.qd if gqa else 0) + 4 * T * (d.a + d.kv) * (2 if m.norm_type == "layernorm" else 1)
    if w.attention != "eager" and not selective:
        # TE's core attention: q, k, v once — views of the fused output (kept above) or TE's contiguous copies
        # (then the fused output goes unless q/k norms keep it); its output, the projection's input; fp32
        # statistics; FlashAttention's own output where it runs (calculator.impls.te_attention)
        if not m.qk_norm:
            out = 0 if (gqa or rope) else qkv_block_rest(e, T, d)
        else:
            out += qkv_block_rest(e, T, d)
        out += te_attention.qkv_kept(e, T, d.qd, d.kvd) + 4 * d.a * T
        backend = te_attention.attention_backend(compute_capability(w.gpu), w.deterministic, m.dropout)
        extra = te_attention.backend_extra(backend, e, T, d.qd, d.b)
        if extra:  # FlashAttention's own output, saved by flash-attn; the copy it returns goes to the projection
            return out + extra + projection_input(w, e, T, d.qd, False)
        return out + projection_input(w, e, T, d.qd, True)  # cuDNN saves the output it returns
    out += qkv_block_rest(e, T, d)
    if m.qk_norm:  # the norms write new q and k
        out += e * T * (d.qd + d.kvd)
    elif rope:  # fused RoPE writes new q and k (GQA's reshaped query copy is freed after it)
        out += e * T * (d.qd + d.kvd)
    elif gqa:  # the reshaped query copy is what attention keeps
        out += e * T * d.qd
    out += projection_input(w, e, T, d.qd, False)  # the attention output, the projection's input
    if w.attention != "eager":  # selective recompute: Megatron's checkpoint keeps q, k, v; statistics recomputed
        return out
    if gqa:  # unfused: k and v repeated to every head and kept by the two batched matmuls
        out += 2 * e * T * d.qd
    if not selective:
        scores = d.a * d.b * d.s * d.s_kv
        out += scores * (2 * e + 1 if m.dropout > 0 else e)
    return out


def mlp_saved(m, w, d, f: int) -> int:
    """Dense MLP: fc1 output (2f gated), the activation output as fc2's (possibly quantized) input."""
    return d.e * d.T * (2 * f if m.gated_mlp else f) + _gemm_input(w, d.T * f, d.e)


def moe_layer_saved(m, w, d) -> tuple[int, int]:
    """(the MoE block's pre-MLP norm part, the router + dispatcher + experts + shared expert) of one MoE layer."""
    p = w.parallel
    layernorm = m.norm_type == "layernorm"
    T = d.T * d.h_sp // d.h  # rows of this rank's sequence-parallel share
    norm = d.e * d.T * d.h_sp + core.norm_stats(d.T, d.h_sp, d.h, layernorm) + d.e * d.T * d.h_sp
    k, E, etp = m.num_experts_per_tok, m.num_experts, p.expert_tp
    R = moe.expert_rows(T, k, E, etp, w.moe_imbalance, w.moe_capacity_factor, w.moe_pad_to_capacity)
    f = m.expert_intermediate_size // etp
    experts = moe.experts_saved(R, d.h, f, m.gated_mlp, d.e,
                                _gemm_input(w, R * d.h, d.e) if w.fp8 != "none" else None)
    if w.fp8 != "none":  # fc2's input quantized
        experts += _gemm_input(w, R * f, d.e) - d.e * R * f
    experts += moe.weighted_activation_saved(R, f, m.gated_mlp, d.e)
    if rc.recomputes(w, "moe"):  # the whole MoE layer under tensor_parallel.checkpoint: its input is the norm's output
        return norm, 0
    if rc.recomputes(w, "moe_act"):
        experts -= rc.moe_act_freed(R, f, m.gated_mlp, d.e, _gemm_input(w, R * f, d.e))
    back = moe.rows_returned(T, k, E, w.moe_capacity_factor, w.moe_pad_to_capacity)
    total = experts + moe.router_saved(T, E, k) + moe.unpermute_saved(w.moe_dispatcher, w.deterministic, back, R,
                                                                      d.h, d.e)
    total += moe.dispatcher_saved(w.moe_dispatcher, T, E, p.ep * etp, p.ep)
    if (m.num_shared_experts or m.shared_expert_intermediate_size) and not rc.recomputes(w, "shared_experts"):
        width = (m.shared_expert_intermediate_size or m.num_shared_experts * m.expert_intermediate_size) // d.tp
        total += mlp_saved(m, w, d, width)
        if w.fp8 != "none":  # its fc1 (TEColumnParallelLinear) keeps a quantized copy of the norm's output, which
            total += fp8_rules.saved_input_bytes(w.fp8, d.T * d.h_sp)  # the router keeps in bf16 (norm above)
    return norm, total


def mla_value_copy_change(m, w, d) -> int:
    """Megatron's MLASelfAttention keeps a copy of the value alone (e·T·a·d_v) whatever the micro-batch:
    qkv_up_proj_and_rope_apply (megatron/core/transformer/multi_latent_attention.py, Megatron-LM adc69dba
    l.656-780) splits the kv up projection's output into k_no_pe and value; k_no_pe only feeds torch.cat (which
    saves nothing for backward) and value.contiguous() copies the strided split, so the core attention keeps the
    copy and the whole output is freed. transformers' eager matmul keeps that copy only at micro-batch > 1; at 1
    it keeps the whole output (activations.mla_attention_saved): −e·T·a·d_nope there. The unfused (eager) core
    only: the fused path keeps transformers' count."""
    return -d.e * d.T * d.a * m.qk_nope_head_dim if w.attention == "eager" and d.b == 1 else 0


def mla_attention_saved(m, w, d, hf_attention: int) -> int:
    """MLA: transformers' MLA tensors (calculator.memory.activations.mla_attention_saved) with Megatron's value copy
    (mla_value_copy_change), and TE's unfused core (the softmax output per score, and with dropout its mask and the
    dropped probabilities) in place of transformers' eager fp32 softmax and its cast."""
    kept = hf_attention + mla_value_copy_change(m, w, d)
    if w.attention != "eager" or w.recompute == "selective":
        return kept
    scores = d.a * d.b * d.s * d.s_kv
    return kept - (4 + d.e) * scores + scores * (2 * d.e + 1 if m.dropout > 0 else d.e)


def mla_fp8_change(m, w, d) -> int:
    """What an FP8 recipe changes in Megatron's MLASelfAttention (NVIDIA/Megatron-LM d98e8a64,
    gpt_layer_specs.py: input norm TENorm, down projections TELinear, up projections TELayerNormColumnParallelLinear
    with --qk-layernorm; multi_latent_attention.py), each TE linear saving its own quantized input (linear.py,
    layernorm_linear.py at TransformerEngine 4220403e): the two GEMMs on the input norm's output (q and kv down
    projections) keep a quantized copy each where bf16 kept one shared tensor — one more T·h_sp than
    ln_linear_saved's one; the up projections keep their normalised latents quantized —
    (e − 1)·T·(q_lora + kv_lora) less than the model-dtype outputs counted; the output projection its quantized
    input (projection_input: the unfused core keeps no output of its own, cuDNN's stays)."""
    if w.fp8 == "none":
        return 0
    e, T, vd = d.e, d.T, d.a * m.v_head_size
    latents = (m.q_lora_rank or 0) + (m.kv_lora_rank or 0)
    kernel_keeps = w.attention != "eager" and w.recompute != "selective"
    return (fp8_rules.saved_input_bytes(w.fp8, T * d.h_sp) + fp8_rules.saved_input_bytes(w.fp8, T * latents)
            - e * T * latents + projection_input(w, e, T, vd, kernel_keeps) - e * T * vd)


def layer(m, w, d, kind) -> act.LayerActivations:
    """One Megatron-Core decoder layer of `kind` (no recompute or selective; full recompute is the caller's), less
    what fine-grained activation offloading moves to the host (calculator.impls.megatron_offload)."""
    raw = _layer_kept(m, w, d, kind)
    if not w.offload_modules:
        return raw
    moved = offload.offloaded(m, w, d, kind, raw)
    return act.LayerActivations(raw.norms - moved.norms, raw.attention - moved.attention, raw.mlp - moved.mlp)


def offload_terms(t, m, w, d, shard, flight: float) -> int:
    """The offloading lines of a stage (megatron_offload.add_terms): the kept layer and the host copies; returns
    the 1F1B forward's bytes beside a reloaded layer above the stage's activations (megatron_offload.reload_moment)."""
    if not (w.offload_modules and core.applies(w)):
        return 0
    moved_of = lambda k: offload.offloaded(m, w, d, k, _layer_kept(m, w, d, k)).total  # noqa: E731
    offload.add_terms(t, m, w, shard, moved_of, flight)
    return offload.reload_moment(t, m, w, d, shard, moved_of, flight)


def _layer_kept(m, w, d, kind) -> act.LayerActivations:
    if kind.mixer not in ("attention", "mla"):
        base = fused_layer(m, w, d, kind)
        return base._replace(norms=base.norms + core.dropout_masks(d.T, d.h_sp, m.dropout))
    wa = rc.attention_workload(w)  # selective recompute reaches the attention core only with core_attn listed
    norms = ln_linear_saved(m, w, d) + core.dropout_masks(d.T, d.h_sp, m.dropout)
    layernorm = rc.recomputes(w, "layernorm")  # MLA's input norm and MoE's pre-MLP norm are TENorm modules
    if m.is_mla:
        attention = mla_attention_saved(m, wa, d, fused_layer(m, wa, d, kind).attention) + mla_fp8_change(m, wa, d)
        attention -= rc.mla_up_proj_freed(m, d) if rc.recomputes(w, "mla_up_proj") else 0
        norms -= rc.layernorm_freed(d, m.norm_type == "layernorm") if layernorm else 0
    else:
        attention = attention_saved(m, wa, d)
    if kind.ffn == "moe":
        moe_norm, mlp = moe_layer_saved(m, w, d)
        norms += moe_norm - (rc.layernorm_freed(d, m.norm_type == "layernorm") if layernorm else 0)
    else:
        if rc.recomputes(w, "mlp"):
            norms, mlp = norms + rc.mlp_checkpoint_input(d), 0
        else:
            norms, mlp = norms + ln_linear_saved(m, w, d), mlp_saved(m, w, d, d.f)
    return act.LayerActivations(norms, attention, mlp)


def head(m, w, d) -> Head:
    """Final norm (input, statistics, output = the output layer's input) and the loss over the padded vocabulary."""
    v = core.padded_vocab(m.vocab_size, w.make_vocab_size_divisible_by, d.tp) // d.tp
    norm = d.e * d.T * d.h_sp + core.norm_stats(d.T, d.h_sp, d.h, m.norm_type == "layernorm") + d.e * d.T * d.h_sp
    saved, ws, f_saved, f_ws = core.loss_terms(w.cross_entropy_fusion, d.T, v, d.e)
    src = "megatron-cross-entropy" if w.cross_entropy_fusion == "none" else "megatron-fused-cross-entropy"
    label = {"none": "fp32 softmax saved by the vocab-parallel cross-entropy",
             "native": "fp32 softmax saved by the fused (native) cross-entropy",
             "te": "model-dtype logits holding their gradient (TE fused cross-entropy)"}[w.cross_entropy_fusion]
    terms = (HeadTerm("final_norm", "Final norm (input + statistics) + output-layer input", norm,
                      "e·T·h + 4·T (8·T LayerNorm) + e·T·h", f"{norm:,} B", "transformer-engine"),
             HeadTerm("loss", label, saved, f_saved, ("{} over V_pad/t = {:,} (T = {:,})", f_saved, v, d.T), src))
    buf = global_buffer(m, w, d)
    if buf:
        terms += (HeadTerm("global_buffer", "Megatron's global \"mpu\" all-gather buffer (kept for the run)", buf,
                           "max(e·T·h output layer (TP > 1, SP), e·T_sp·g·h allgather dispatcher)", f"{buf:,} B",
                           "megatron-global-buffer"),)
    return Head(
        terms,
        ws, "Loss backward beside the saved logits (model-dtype gradient; fp32 copy for the native fusion)",
        f_ws, ("{}, T = {:,}, V_pad/t = {:,}", f_ws, d.T, v), src, ws)


def global_buffer(m, w, d) -> int:
    """Megatron's global memory buffer "mpu" (megatron/core/utils.py GlobalMemoryBuffer): one tensor at the largest
    request of the sequence-parallel output layer's all-gather (core.sp_gather_buffer) and the allgather MoE
    dispatcher's token gather over expert-TP × EP (moe.allgather_buffer), kept for the run. Priced with the head,
    the stage that holds the output layer (a stage of MoE layers without the head keeps the dispatcher's part
    too, not counted there)."""
    p = w.parallel
    out = core.sp_gather_buffer(d.T, d.h, d.e, d.tp, d.h_sp < d.h)
    if m.is_moe:
        out = max(out, moe.allgather_buffer(w.moe_dispatcher, d.T * d.h_sp // d.h, p.ep * p.expert_tp, d.h, d.e))
    return out


def mtp_saved(m, w, d, layer_of) -> tuple[int, int]:
    """(layer part, loss part) of what the MTP block saves (megatron/core/transformer/multi_token_prediction.py), per
    micro-batch on the last stage: per MTP layer, enorm and hnorm keep their inputs and statistics, eh_proj keeps
    the concatenated 2h-wide input (quantized under FP8: multi_token_prediction.py runs the block in
    get_fp8_context), then one decoder layer of the model's last kind and a final norm whose output is the shared
    output layer's input; each layer's own logits go through the same loss as the main head, whose
    saved tensors wait for the backward beside the main loss's."""
    layernorm = m.norm_type == "layernorm"
    stats = core.norm_stats(d.T, d.h_sp, d.h, layernorm)
    per = (2 * (d.e * d.T * d.h_sp + stats) + _gemm_input(w, 2 * d.T * d.h_sp, d.e)  # eh_proj: TE, FP8 inside
           + layer_of(m.layer_kind(m.num_hidden_layers - 1)).total
           + 2 * d.e * d.T * d.h_sp + stats)
    v = core.padded_vocab(m.vocab_size, w.make_vocab_size_divisible_by, d.tp) // d.tp
    loss = core.loss_terms(w.cross_entropy_fusion, d.T, v, d.e)[0]
    return w.mtp_layers * per, w.mtp_layers * loss
