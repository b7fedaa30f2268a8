"""One pipeline stage of a training step (calculator.stages.estimate assembles the stages):
model states (weights + master + gradients + optimizer, sharded by the layout and the stack)
  + max(forward/backward: saved activations + loss head + transients, optimizer step transients)
  + the stack's buffers at the peak; gradients born in backward where the stack frees them.
The states themselves (full, LoRA/QLoRA, CPU offload) are priced in calculator/stages/held.py."""

import operator
from functools import lru_cache, partial
from typing import NamedTuple

from calculator.memory import activations as act
from calculator.memory import autocast
from calculator.memory import fp8 as fp8_rules
from calculator.memory import sdpa
from calculator.memory import lora_moe
from calculator.memory import megatron_core
from calculator import impls
from calculator.memory import model_states as tr
from calculator.core.dtypes import nbytes
from calculator.model.spec import LayerKind, ModelSpec
from calculator.memory.parallel import (StageShard, in_flight_microbatches)
from calculator.model import parameters as params
from calculator.model.parameters import count_parameters
from calculator.core.result import StageEstimate
from calculator.core.workload import Workload
from calculator.stages import kinds, moments, pipeline, vision
from calculator.allocator import step_plan
from calculator.core.bounded_cache import get_or_build
from calculator.stacks.common import (StackContext, StackMemory, backward_peak, backward_point, layer_grad_params,
                                     tied_embedding_extra)
from calculator.impls.megatron_te_core import offload_terms, reload_line
from calculator.stages.held import fp32_not_upcast, lora_model_states, add_offload, states_for_stack
from calculator.stages.terms import LONG_LIVED, TermList, add_cublas_workspaces, finish_stage


class _Held(NamedTuple):
    """What a training stage holds for the whole step, the same for every batch and sequence: its terms so far
    (model states, offload, the stack's persistent buffers, cuBLAS workspaces), the bytes held, params updated by the
    optimizer, the largest tensor, the stack's memory and the gradients born in backward (0: held all step) with
    where they are (_born_gradients)."""
    items: tuple
    by_component: dict
    host: tuple
    states: int
    n_opt: int
    largest_tensor: int
    sm: StackMemory
    born: int
    born_layout: tuple | None


def _held_for_the_step(m: ModelSpec, shared, shard: StageShard, gpu) -> _Held:
    t = TermList()
    w, ws = shared.w, shared.ws
    p = ws.parallel
    if w.finetune == "full":
        terms, n_opt, largest_tensor, no_grad_bytes = states_for_stack(m, shared.stack, ws, shard)
        t.extend(terms)
    else:
        n_opt, largest_tensor, no_grad_bytes = lora_model_states(t, m, ws, shard, shared.stack)
    if p.offload_optimizer or p.offload_params:
        moves_gradients = getattr(shared.stack, "OFFLOAD_MOVES_GRADIENTS", True)
        add_offload(t, ws, shard, moves_gradients, 1.0 if moves_gradients else w.optimizer_offload_fraction)
    grads = born = t.by_component.get("gradients", 0)
    sm = shared.stack.memory(StackContext(m, ws, shard, grads, _grad_dtype(ws), w, no_grad_bytes))
    if sm.grads_whole_step:
        born = 0
        if sm.gradient_note:
            t.items = [x._replace(note=sm.gradient_note) if x.component == "gradients" else x for x in t.items]
    else:  # born in backward, freed after the step: counted where the backward is, not with the states
        t.items = [x for x in t.items if x.component != "gradients"]
        t.by_component["gradients"] = 0
    for x in sm.persistent:
        t.add(*x.__dict__.values())
    if w.activation_model != "textbook":  # the textbook model has a flat overhead instead
        add_cublas_workspaces(t, w, gpu, threads=2)
    states = t.total(LONG_LIVED) + sum(x.bytes for x in sm.persistent if x.component not in LONG_LIVED
                                       and x.component != "transient") + t.by_component.get("transient", 0)
    layout = _born_gradients(m, ws, shard, born) if born else None
    return _Held(tuple(t.items), t.by_component, tuple(t.host), states, n_opt, largest_tensor, sm, born, layout)


_HELD: dict = {}  # (model, shard, the workload's fields but batch and tokens) -> _Held
_MAX_HELD = 256
_TOKEN_FIELDS = ("micro_batch", "seq_len", "gen_tokens")  # what _held_for_the_step never reads
_HELD_FIELDS = operator.attrgetter(*(f for f in Workload.model_fields if f not in _TOKEN_FIELDS))


def _held(m: ModelSpec, w, shard: StageShard, gpu) -> _Held:
    """_held_for_the_step, built once per model, shard and workload but its batch and sequence (a sweep over the
    sequence, the micro-batch solver and the dashboard's sequence slider reuse it)."""
    return get_or_build(_HELD, (m, shard, _HELD_FIELDS(w)),
                        lambda: _held_for_the_step(m, pipeline.shared_by_stages(m, w), shard, gpu), _MAX_HELD)


def training_stage(m: ModelSpec, w, shard: StageShard, gpu) -> StageEstimate:
    w = vision.lm_workload(m, w)  # a vision-language model's image tokens lengthen the LM's sequence
    held = _held(m, w, shard, gpu)
    t = TermList(held.items, held.by_component, held.host)
    states, n_opt, largest_tensor, sm, born = held.states, held.n_opt, held.largest_tensor, held.sm, held.born
    shared = pipeline.shared_by_stages(m, w)
    w, ws, d, code, stack = shared.w, shared.ws, shared.d, shared.code, shared.stack
    p = ws.parallel
    flight = in_flight_microbatches(p, shard.stage, m.num_hidden_layers)
    layers = range(shard.first_layer, shard.last_layer)
    n_moe, n_dense = shard.moe_layers, len(layers) - shard.moe_layers
    recompute_ws = loss_ws = 0
    dense_l = moe_l = head = None
    stage_kinds = params.stage_kinds(m, shard.first_layer, shard.last_layer)
    hybrid = kinds.is_hybrid(stage_kinds)
    if hybrid:
        kinds.check(m, w)
    if w.activation_model == "textbook":
        per = act.textbook_layer(m, w)
        t.add("activations.layers", "activations", "Activations (Korthikanti et al.)", int(flight * len(layers) * per),
              "m_inflight × L_stage × s·b·h·(34 + 5·a·s/h)" if w.recompute == "none" else
              ("m_inflight × L_stage × 34·s·b·h" if w.recompute == "selective" else "m_inflight × L_stage × 2·s·b·h"),
              ("{:g} × {} × {:,} B", flight, len(layers), per), "korthikanti")
    elif w.activation_model == "fujii":
        per_dense, per_moe = act.fujii_layer(m, w, False), act.fujii_layer(m, w, True) if n_moe else 0
        t.add("activations.layers", "activations", "Activations (Fujii et al.)",
              int(flight * (n_dense * per_dense + n_moe * per_moe)),
              "m_inflight × L_stage × s·b·h·(12 + 4k/a + 8f/h) / (t·c)",
              ("{:g} × ({} × {:,} + {} × {:,}) B", flight, n_dense, per_dense, n_moe, per_moe), "fujii")
    else:
        lora_ft = w.finetune != "full"
        # PEFT without checkpointing: the first layer's input does not require grad, so its first norm saves nothing
        first_discount = int(flight * code.first_layer_without_input_grad(m, d)) if (
            lora_ft and w.recompute not in ("full", "op") and shard.has_embedding) else 0
        masked = sdpa.masked_layers(m, w, layers)  # SDPA layers with a padding, sliding-window or image mask
        if hybrid:  # layers of several mixer kinds (calculator/stages/kinds.py)
            recompute_ws = kinds.layer_terms(t, m, w, d, shared, stage_kinds, flight, first_discount,
                                             _hybrid_sources(w, p))
        else:
            mixer = "mla" if m.is_mla else "attention"
            dense_l = shared.layer(LayerKind(mixer, "dense")) if n_dense else None
            moe_l = shared.layer(LayerKind(mixer, "moe")) if n_moe else None
            if w.recompute in ("full", "op"):
                if w.recompute == "full":
                    per = act.full_recompute_layer(d)
                    t.add("activations.layers", "activations", "Layer inputs (full recompute)",
                          int(flight * len(layers) * per), "m_inflight × L_stage × e·T·h",
                          ("{:g} × {} × {} × {:,} × {:,}", flight, len(layers), d.e, d.T, d.h_sp),
                          "pipeline-1f1b" if p.pp > 1 else "hf-checkpointing")
                else:
                    f8 = fp8_rules.float8_gemms(w)  # float8 linears: aten._scaled_mm, no GEMM output kept
                    per = act.op_selective_layer(m, d, float8=f8)
                    per_moe = act.op_selective_layer(m, d, moe=True, float8=f8) if n_moe else 0
                    t.add("activations.layers", "activations", "Layer inputs + kept matmul and SDPA outputs (op-level "
                          "selective AC)", int(flight * (n_dense * per + n_moe * per_moe)),
                          "m_inflight × L_stage × (e·T·(h + Σ every other mm output + qd) + 4·a·T)",
                          ("{:g} × ({} × {:,} + {} × {:,}) B", flight, n_dense, per, n_moe, per_moe),
                          "torchtitan-op-sac")
                if w.attention == "eager":
                    # the backward peaks in the attention's softmax backward: the layer's norms and attention part,
                    # plus fp32 gradients of the scores beyond the saved (4 + e) bytes per score
                    recompute_ws = max(x.norms + x.attention for x in (dense_l, moe_l) if x is not None) + (
                        (8 - d.e) * d.a * d.b * d.s * d.s_kv)
                else:
                    recompute_ws = max(x.total for x in (dense_l, moe_l) if x is not None)
                if masked:  # a masked layer recomputes SDPA's efficient kernel with its bias (the largest layer)
                    recompute_ws += sdpa.recomputed_layer_extra(d, m, w, masked, len(layers))
            else:
                attn_src = "mla" if m.is_mla else ("hf-eager-attention" if w.attention == "eager" else "flash-attention")
                code_src = impls.SOURCES[w.impl]
                sources = ("pipeline-1f1b" if p.pp > 1 else code_src, attn_src, "hf-moe" if n_moe else code_src)
                for i, (key, term_key, label) in enumerate(_ACTIVATION_PARTS):
                    per_dense = dense_l[i] if dense_l else 0  # LayerActivations = (norms, attention, mlp)
                    per_moe = moe_l[i] if moe_l else 0
                    total = int(flight * (n_dense * per_dense + n_moe * per_moe))
                    formula = _ACTIVATION_FORMULA[key].format(d.T)
                    if i == 0 and first_discount:
                        total -= first_discount
                        formula += " − first layer's input norm (no input grads)"
                    subst = (("{:g} × ({} × {:,} + {} × {:,}) B", flight, n_dense, per_dense, n_moe, per_moe) if n_moe
                             else ("{:g} × {} × {:,} B", flight, n_dense, per_dense))
                    t.add(term_key, "activations", label, total, formula, subst, sources[i], _exact_note(key, m, w))
        input_grads = not lora_ft or w.recompute in ("full", "op")  # HF enables input grads for checkpointing
        if shard.has_embedding:
            emb = act.embedding_saved(m, d, input_grads, w)
            if emb:
                t.add("activations.embedding", "activations", "Embedding dropout mask", int(flight * emb),
                      "m_inflight × T·h × 1 B", ("{:g} × {:,} B", flight, emb), "hf-llama")
        rotary = act.rotary_saved(m, d)
        if rotary:
            t.add("activations.rotary", "activations", "RoPE cos/sin tables", int(flight * rotary),
                  "m_inflight × 2·s·d_head·e",
                  ("{:g} × 2 × {:,} × {} × {}", flight, d.s, rotary // (2 * d.s * d.e), d.e),
                  "hf-llama")
        if w.attention == "eager" and w.recompute != "none" and not m.is_mla:
            mask = act.eager_mask_saved(d)
            t.add("activations.mask", "activations", "Causal mask (input of the recomputed calls)", int(flight * mask),
                  "m_inflight × e·b·s·s", ("{:g} × {} × {} × {:,} × {:,}", flight, d.e, d.b, d.s, d.s_kv),
                  "hf-checkpointing")
        elif masked and w.recompute == "full":
            n_masks = sdpa.mask_tensors(m, w, layers)
            t.add("activations.mask", "activations", "4-D attention masks (inputs of the recomputed calls)",
                  int(flight * n_masks * sdpa.mask_bytes(d)), "m_inflight × masks × 1 B × b·s·s",
                  ("{:g} × {} × {} × {:,} × {:,}", flight, n_masks, d.b, d.s, d.s_kv), "sdpa-mask")
        elif masked:
            per = sdpa.masked_layer_extra(d, m, w)
            t.add("activations.sdpa_mask", "activations", "SDPA with a mask: bias and repeated k/v per masked layer",
                  int(flight * masked * per), "m_inflight × L_masked × (e·b·s·s + e·T·2·(qd − kvd) if repeated)",
                  ("{:g} × {} × {:,} B", flight, masked, per), "sdpa-mask",
                  sdpa.mask_reason(m, w))
        if w.finetune == "full" and autocast.applies(w):
            head_w = -(-m.vocab_size * m.hidden_size // p.tp) if shard.has_head else 0
            copies = autocast.weight_copy_bytes(shard.layer_linear, head_w, d.e)
            t.add("activations.autocast_weights", "activations", "bf16 weight copies cached by autocast",
                  copies, "e × (N_layer_linear + V·h/t)", ("{} × ({:,} + {:,})", d.e, shard.layer_linear, head_w),
                  "torch-autocast", "kept by each linear from the forward to its backward")
        if shard.has_head and w.mtp_layers and megatron_core.applies(w):  # Megatron's MTP block, last stage
            from calculator.impls.megatron_te_core import mtp_saved
            mtp_layers, mtp_loss = mtp_saved(m, w, d, shared.layer)
            t.add("activations.mtp", "activations", f"MTP block ({w.mtp_layers} layers)", mtp_layers,
                  "n_mtp × (enorm + hnorm + eh_proj input + one decoder layer + final norm)",
                  ("{} × {:,} B", w.mtp_layers, mtp_layers // w.mtp_layers), "megatron-mtp")
            t.add("logits.mtp_loss", "logits", "MTP losses' saved logits", mtp_loss, "n_mtp × the main loss's saved",
                  ("{} × {:,} B", w.mtp_layers, mtp_loss // w.mtp_layers), "megatron-mtp")
        reload_ws = offload_terms(t, m, w, d, shard, flight)  # Megatron's fine-grained activation offloading
        head = code.head(m, w, d) if shard.has_head else None
        if head:
            for h in head.saved:
                t.add(f"logits.{h.key}", "logits", h.label, h.bytes, h.formula, h.substituted, h.source)
            loss_ws = head.transient
        # Backward peaks at the loss; with its head freed, in a recomputed layer or beside a reloaded one (offload)
        freed = t.by_component.get("logits", 0)
        if recompute_ws and recompute_ws - freed > loss_ws:
            t.add("transient.recompute", "transient", "One layer recomputed during backward", recompute_ws - freed,
                  "activations of one layer − the loss head's (freed by then)",
                  ("{:,} − {:,} B", recompute_ws, freed),
                  "hf-checkpointing", f"exceeds the loss backward's {loss_ws:,} B")
        elif reload_ws - freed > loss_ws:
            t.add(*reload_line(reload_ws, freed, loss_ws))
        elif loss_ws:
            t.add("transient.loss", "transient", head.transient_label, loss_ws, head.transient_formula,
                  head.transient_substituted, head.transient_source,
                  f"one recomputed layer needs {max(0, recompute_ws - freed):,} B" if recompute_ws else "")
    if w.finetune == "qlora":
        dq = 2 * params.largest_layer_linear(m) // p.tp
        t.add("transient.dequant", "transient", "bf16 dequantization of one 4-bit linear", dq,
              "2 B × max(in × out)", f"2 × {dq // 2:,}", "quantization",
              "bitsandbytes dequantizes each NF4 weight to bf16 for its matmul, one linear at a time")
    if w.activation_model != "textbook" and not (stack.NAME == "deepspeed" and p.shard_group == 1
                                                  and p.zero >= 3):
        for x in sm.at_peak:
            t.add(*x.__dict__.values())
    # The replayed loop is data parallel only (no 1F1B schedule, no TP/CP/EP buffers). It runs for one GPU and for a
    # stack the user names (--stack fsdp2 --dp 8); a layout over several GPUs with the default stack keeps the
    # calibrated shares: a replay costs tens of ms, too much for the planner's hundreds of layouts.
    if w.activation_model == "exact" and (dense_l or moe_l) and p.pp == p.tp == p.cp == p.ep == 1 and (
            p.world_size == 1 or w.stack is not None) and len(layers) <= step_plan.MAX_REPLAY_LAYERS:
        # the plan is a function of (model, workload, shard): replays are cached on that key, the plan built on a miss
        t.plan = ((m, w, shard), partial(step_plan.training_plan, m, w, ws, shard, d, dense_l or moe_l, head, sm,
                                         _grad_dtype(ws)))
    vision_first = len(t.items)
    states += vision.training_terms(t, m, shared, shard, states)  # the tower's states, activations or forward
    long_lived = [*range(len(held.items)), *(i for i in range(vision_first, len(t.items))
                                             if t.items[i].component not in moments.WORKING)]
    fwd_bwd = t.total() - states  # everything above the long-lived states during forward and backward
    saved = t.by_component.get("activations", 0) + t.by_component.get("logits", 0)
    if born:
        layer_acts = sum(x.bytes for x in t.items if x.key in _LAYER_ACTIVATION_KEYS)
        fwd_bwd = _gradients_born_in_backward(t, ws, shard, held, fwd_bwd, recompute_ws, flight, layer_acts,
                                              stack.SOURCE)
    at, x = backward_point(sm, t.by_component.get("activations", 0))  # the stack's own (Megatron-FSDP's buckets)
    if at > fwd_bwd:
        t.add(f"transient.{x.key}", "transient", x.label, at - fwd_bwd, f"{x.formula} − fwd/bwd working set",
              ("{:,} − {:,} B", at, fwd_bwd), x.source, x.note)
        fwd_bwd = at
    # Optimizer step: activations are freed; its temporaries can exceed the fwd/bwd peak.
    # PEFT's fp32 adapters are their own master copy: their fp32 gradients need no upcast
    fp32_adapters = w.finetune != "full" and w.lora_adapter_dtype == "fp32"
    chunk = min(n_opt, sm.step_chunk or n_opt)  # DeepSpeed ZeRO-3: one sub-group at a time
    step = 0 if (w.activation_model == "textbook" or p.offload_optimizer) else tr.optimizer_step_transient(
        chunk, largest_tensor, ws, upcast_grads=not fp32_adapters,
        cast_source=nbytes(chunk, _grad_dtype(ws)) if sm.step_flattens else 0) + born - fp32_not_upcast(m, ws, shard, stack)
    t.phases = [(states, states + fwd_bwd), (states, states + step)]
    t.timeline = [("model states", states, states), ("forward: tensors saved", states, states + saved),
                  ("backward: peak", states, states + fwd_bwd), ("optimizer step", states, states + step)]
    upcast = ws.precision.master_weights and ws.precision.grads != ws.precision.master_weights
    step_note = f"{w.optimizer_impl} optimizer step temporaries" + (" + fp32 upcast of the gradients" if upcast else "")
    t.moments = moments.training_moments(t.items, long_lived, born, step, step_note)
    if step > fwd_bwd:
        t.add("transient.optimizer_step", "transient", "Optimizer step beyond the fwd/bwd peak", step - fwd_bwd,
              "max(0, step temporaries − fwd/bwd working set)", ("{:,} − {:,} B", step, fwd_bwd), "torch-adamw",
              step_note + (" + every gradient (born in backward, freed after the step)" if born else ""))
    return finish_stage(t, w, shard, gpu, sm.nccl_communicators)


def _hybrid_sources(w, p) -> dict[str, str]:
    code = impls.SOURCES[w.impl]
    return {"full": "pipeline-1f1b" if p.pp > 1 else "hf-checkpointing", "norms": code, "mixer": "gated-deltanet",
            "ffn": code}


def _grad_dtype(w) -> str:
    return "fp32" if w.finetune != "full" and w.lora_adapter_dtype == "fp32" else w.precision.grads


@lru_cache(maxsize=256)
def _gradient_layout(m: ModelSpec, first: int, last: int, has_head: bool, has_embedding: bool, tp: int,
                     expert_split: int, per_param: float, tied_in_place: bool, grad_dtype: str) -> tuple[int, ...]:
    """(all layers', last layer's, LM head's, embedding's, tied-sum) gradient bytes of a stage on one GPU, at
    `per_param` bytes per parameter: what the backward peak needs of the gradients (none depends on the batch)."""
    layer_grads = [int(n * per_param) for n in layer_grad_params(m, first, last, tp, expert_split)]
    counts = count_parameters(m)
    head = (counts.final_norm + -(-(counts.lm_head or counts.embedding) // tp)) if has_head else 0
    emb = -(-counts.embedding // tp) if has_embedding and not (m.tie_word_embeddings and has_head) else 0
    tied = tied_embedding_extra(m, tp, grad_dtype, tied_in_place) if has_head and has_embedding else 0
    return sum(layer_grads), (layer_grads[-1] if layer_grads else 0), int(head * per_param), int(emb * per_param), tied


def _born_gradients(m: ModelSpec, w, shard: StageShard, grads: int) -> tuple[int, int, int, int, int]:
    """(all layers', last layer's, LM head's, embedding's, tied-sum) bytes of the `grads` gradient bytes a stage
    creates in backward: what the backward peak needs of them."""
    p = w.parallel
    per_param = grads / shard.total if shard.total else 0.0  # gradient bytes per parameter on this GPU
    n_layers = shard.last_layer - shard.first_layer
    if w.finetune == "full":
        return _gradient_layout(m, shard.first_layer, shard.last_layer, shard.has_head, shard.has_embedding, p.tp,
                                p.ep * p.expert_tp, per_param, w.precision.params == w.precision.activations,
                                _grad_dtype(w))
    g_last = grads // n_layers if n_layers else 0  # adapters only: spread over the layers
    return g_last * n_layers, g_last, 0, 0, 0


def _gradients_born_in_backward(t: TermList, w, shard: StageShard, held: _Held, loss_peak: int, recompute_ws: int,
                                flight: float, layer_total: int, source: str) -> int:
    """Gradients created in backward and freed after the step (stacks/common.backward_peak): the gradients line
    holds what is alive at the forward/backward peak beyond the loss backward (`layer_total`: the decoder layers'
    activations). Returns the new fwd/bwd peak."""
    n_layers = shard.last_layer - shard.first_layer
    g_layers, g_last, head_g, emb_g, tied = held.born_layout
    peak = backward_peak(loss_peak=loss_peak, activations=t.by_component.get("activations", 0),
                         layer_acts=layer_total // n_layers if n_layers else 0, n_layers=n_layers,
                         layer_grads=g_layers, last_layer_grads=g_last, head_grads=head_g, embedding_grads=emb_g,
                         tied_extra=tied, recompute_ws=int(flight * recompute_ws),
                         layer_backward=held.sm.layer_backward)
    t.add("gradients", "gradients", f"Gradients ({_grad_dtype(w)}) alive at the peak", peak.bytes - loss_peak,
          "max(loss, first layer, last layer, embedding backward) − loss backward",
          partial(_born_text, held.born, peak), source,
          "no gradient exists during the forward pass: each is born as its layer is back-propagated and "
          "zero_grad(set_to_none=True) frees all after the step", keep=True)
    return peak.bytes


_NOTES = {
    "norms": "each norm keeps its saved copies (fp32 where the model computes in fp32), and the two pre-norm "
             "outputs are saved as the inputs of q/k/v and of the MLP (the formula's A_norms)",
    "flash": "FlashAttention: q, k, v unexpanded (GQA), output, fp32 logsumexp — no s² term",
    "eager": "eager: expanded k/v and the a·b·s² scores in fp32 + model dtype",
    "sdpa": "SDPA: FlashAttention's tensors without a mask; a masked layer adds its bias and repeated k/v (below)",
    "selective": "selective recompute: the attention core is recomputed; its inputs q, k, v stay saved",
    "moe": "MoE: every token is copied to its top-k experts",
    "gated": "gated MLP: gate, up, activation and product (4·e·T·f)",
    "plain": "plain MLP: fc1 output and activation output",
}


_ACTIVATION_PARTS = (("norms", "activations.norms", "Activations: norms"),
                     ("attention", "activations.attention", "Activations: attention"),
                     ("mlp", "activations.mlp", "Activations: MLP"))
_LAYER_ACTIVATION_KEYS = frozenset({"activations.norms", "activations.attention", "activations.mlp",
                                    "activations.layers"})  # the decoder layers' activations (not embedding, masks)
_ACTIVATION_FORMULA = {k: f"m_inflight × L_stage × A_{k}(T={{:,}})" for k in ("norms", "attention", "mlp")}


def _born_text(grads: int, peak) -> str:
    where = ", ".join(f"{name} {b / 1e9:.2f} GB" for name, b in peak.positions)
    return f"{grads:,} B in all, born in backward; peak at the {peak.position} ({where})"


def _norms_note(m: ModelSpec, w) -> str:
    """The norms' note, its coefficient the one calculator.memory.activations uses: per HF RMSNorm (4 + e)·T·h + 4·T,
    two per layer, plus the two pre-norm outputs e·T·h each (e: bytes per activation element)."""
    plain = (m.gemma_next is None and m.variant is None and not m.zero_centered_norm and m.norm_type == "rmsnorm"
             and m.family not in ("gemma", "gpt_oss") and m.norms_per_layer == 2 and not m.parallel_residual
             and w.finetune == "full" and w.precision.params == w.precision.activations)  # no adapters, no autocast
    if not plain:
        return _NOTES["norms"]
    from calculator.core.dtypes import nbytes
    e = nbytes(1, w.precision.activations)
    return (f"HF RMSNorm keeps an fp32 copy of its input (4 B/elem) and the normalised input ({e} B), and the two "
            f"pre-norm outputs are saved as the inputs of q/k/v and of the MLP: 2·(4 + {e}) + 2·{e} = "
            f"{2 * (4 + e) + 2 * e}·s·b·h per layer ({w.precision.activations}; h/TP under sequence parallel), not "
            "the textbook 4")


def _exact_note(key: str, m: ModelSpec, w) -> str:
    if w.impl != "hf" and key in ("norms", "mlp") and not m.is_moe:
        return impls.FUSED_NOTES[key]
    if key == "norms":
        return _norms_note(m, w)
    if key == "attention":
        return _NOTES["selective" if w.recompute == "selective" else w.attention]
    if w.finetune != "full" and lora_moe.experts_adapted(m, w.lora_targets):  # PEFT all-linear reaches the experts
        return ("MoE: every token is copied to its top-k experts; PEFT's adapters on the experts fold into their "
                "weights: each MoE layer keeps W' = W + B·A, E·3·f·h·e (calculator/memory/lora_moe.py)")
    return _NOTES["moe" if m.is_moe else ("gated" if m.gated_mlp else "plain")]
