"""A vision-language model's tower in a training or generate() stage (issue 21), priced term by term.

With `images_per_sample` > 0 (0, the default, leaves every estimate as it was):
- the images' tokens join the language model's sequence: it runs seq_len + images × tokens per image, so its
  activations, logits and KV cache are priced at that length (lm_workload);
- the tower and projector (calculator/model/vision) are their own terms on the stage that holds the embedding:
  their weights (not in the language model's parameter count), and when `vision_tower` is "trained" their
  gradients, master weights and optimizer state (full fine-tuning: sharded like the model's dense parameters,
  held.py) or LoRA adapters on their linears (LoRA / QLoRA), and the activations the encoder saves for backward;
  a frozen tower runs without autograd and costs only its forward working set;
- generate() runs the tower once, in the prefill (its working set), with its weights loaded unquantized (vision
  towers stay in the model dtype in AWQ / GPTQ checkpoints: their quantization configs list them in
  modules_to_not_convert).
Transformers runs all images of a micro-batch through the tower in one call; the tower is not split by tensor
parallelism (transformers has no TP plan for it).
"""
from __future__ import annotations

from functools import lru_cache

from calculator.core import bounds as B
from calculator.core.dtypes import nbytes
from calculator.core.errors import InputError
from calculator.memory import inference as inf
from calculator.memory import model_states as tr
from calculator.memory.parallel import StageShard, in_flight_microbatches
from calculator.model.spec import ModelSpec
from calculator.model.vision import (adapted_linears, image_tokens, vision_parameters, vision_tensors)
from calculator.model.vision.saved import forward_peak_bytes, tower_saved_bytes
from calculator.stages.terms import TermList, dtype_bytes_text


def lm_workload(m: ModelSpec, w):
    """The workload the language model runs: its sequence lengthened by the images' tokens (the same object for the
    same inputs, so the stage caches keyed on it hit)."""
    if not w.images_per_sample:
        return w
    if m.vision is None:
        raise InputError("images_per_sample", f"{m.name} has no vision tower the engine reads (a mapped "
                                              f"vision-language config: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5, "
                                              f"GLM-4.1V/4.5V/4.6V, Gemma 3, Gemma 4, PaliGemma, Llama 4, "
                                              f"Mistral 3); set "
                                              f"images_per_sample to 0")
    return _lengthened(m, w)


def image_px(m: ModelSpec, w) -> int:
    return w.image_size or m.vision.default_image_px


@lru_cache(maxsize=256)
def _lengthened(m: ModelSpec, w):
    tokens = w.images_per_sample * image_tokens(m.vision, image_px(m, w), image_px(m, w)).lm_tokens
    if w.seq_len + tokens > B.MAX_TOKENS:
        raise InputError("images_per_sample", f"{w.seq_len:,} text + {tokens:,} image tokens exceed "
                                              f"{B.MAX_TOKENS:,} tokens")
    return w.model_copy(update={"seq_len": w.seq_len + tokens})


def _images_note(m: ModelSpec, w) -> str:
    px = image_px(m, w)
    it = image_tokens(m.vision, px, px)
    return (f"{w.images_per_sample} image(s) of {px}×{px} px per sequence: {it.patches:,} patches and "
            f"{it.lm_tokens:,} LM tokens each; the LM runs {w.seq_len:,} tokens (text + images), its activations, "
            f"logits and KV cache priced at that length; the tower is not in the model's parameter count")


def _per_gpu(n: int, on: bool, group: int) -> int:
    return -(-n // group) if on and group > 1 else n


def _weights(t: TermList, m: ModelSpec, w, prec_params: str, shard_weights: bool, group: int) -> None:
    vp = vision_parameters(m.vision)
    n = _per_gpu(vp.total, shard_weights, group)
    state = "trained" if w.vision_tower == "trained" and w.finetune == "full" else "frozen"
    if w.finetune == "qlora":  # bitsandbytes quantizes every nn.Linear but the LM head, the tower's included
        lin = vp.tower_linear + vp.projector_linear
        b = -(-(inf.quantized_weight_bytes(lin, "nf4", 64) + nbytes(vp.total - lin, prec_params)) //
              (group if shard_weights else 1))
        t.add("weights.vision", "weights", f"Vision tower + projector weights (NF4 linears, {prec_params} rest)", b,
              "N_linear × 0.5 B + ⌈N_linear/64⌉ × 4 B + N_other × b_param",
              f"{lin:,} × 0.5 B + absmax + {vp.total - lin:,} × {dtype_bytes_text(prec_params)}", "quantization",
              _images_note(m, w))
        return
    t.add("weights.vision", "weights", f"Vision tower + projector weights ({prec_params}, {state})",
          nbytes(n, prec_params), "(N_tower + N_projector) × b_param" + (" / d" if n != vp.total else ""),
          f"({vp.tower:,} + {vp.projector:,}) × {dtype_bytes_text(prec_params)}" + (
              f" / {group}" if n != vp.total else ""), "zero" if n != vp.total else "transformer-math",
          _images_note(m, w))


def _full_states(t: TermList, m: ModelSpec, w, ws) -> None:
    """Master weights, gradients and optimizer state of the trained tower (held.py's rules)."""
    p, prec, vp = ws.parallel, ws.precision, vision_parameters(m.vision)
    shapes = [x.shape for x in vision_tensors(m.vision)]
    n_o = _per_gpu(vp.total, p.zero >= 1 or p.distributed_optimizer, p.shard_group)
    n_g = _per_gpu(vp.total, p.zero >= 2, p.shard_group)
    if prec.master_weights:
        t.add("master_weights.vision", "master_weights", f"Vision tower master weights ({prec.master_weights})",
              tr.master_weight_bytes(n_o, prec.master_weights), "N_vision × b_master",
              f"{n_o:,} × {dtype_bytes_text(prec.master_weights)}", "mixed-precision")
    t.add("gradients.vision", "gradients", f"Vision tower gradients ({prec.grads})", tr.gradient_bytes(n_g, prec.grads),
          "N_vision × b_grad", f"{n_g:,} × {dtype_bytes_text(prec.grads)}", "transformer-math",
          "counted all step: when they are born in backward the tower's come last, once every LM gradient exists")
    frac = tr.adafactor_factored_fraction(shapes) if w.optimizer == "adafactor" else 1.0
    opt = tr.optimizer_state_bytes(n_o, vp.tensors, w.optimizer, prec.optimizer_states, frac)
    if w.optimizer == "adamw-8bit" and n_o == vp.total:  # exact, tensor by tensor (the maps are the LM's)
        opt = tr.bnb_adamw8bit_state_bytes(shapes) - tr.BNB_QMAP_BYTES
    t.add("optimizer_states.vision", "optimizer_states", f"Vision tower optimizer states ({w.optimizer})", opt,
          "per optimizer, N_vision", f"{n_o:,} params in {vp.tensors} tensors", "torch-adamw"
          if w.optimizer == "adamw" else ("bnb-8bit" if w.optimizer == "adamw-8bit" else "transformer-math"))


def _adapter_states(t: TermList, m: ModelSpec, w, ws) -> int:
    """LoRA adapters on the tower's linears (held.lora_model_states' rules); returns adapted linears per block."""
    p, prec = ws.parallel, ws.precision
    linears = adapted_linears(m.vision, w.lora_targets)
    n_t = sum(w.lora_rank * (x.shape[0] + x.shape[1]) for x in linears)
    fp32 = w.lora_adapter_dtype == "fp32"
    a_dtype, g_dtype, master = ("fp32", "fp32", None) if fp32 else (prec.params, prec.grads, prec.master_weights)
    n_o = _per_gpu(n_t, p.zero >= 1 or p.distributed_optimizer, p.shard_group)
    n_g = _per_gpu(n_t, p.zero >= 2, p.shard_group)
    t.add("weights.vision_adapters", "weights", f"Vision tower LoRA adapters (r = {w.lora_rank}, {a_dtype})",
          nbytes(n_t, a_dtype), "Σ_adapted r·(in + out) × b_adapter", f"{n_t:,} × {dtype_bytes_text(a_dtype)}",
          "lora", f"{len(linears)} linears of the tower and projector ({w.lora_targets})")
    if master:
        t.add("master_weights.vision", "master_weights", f"Vision adapter master weights ({master})",
              nbytes(n_o, master), "N_trainable × b_master", f"{n_o:,} × {dtype_bytes_text(master)}",
              "mixed-precision")
    t.add("gradients.vision", "gradients", f"Vision adapter gradients ({g_dtype})", nbytes(n_g, g_dtype),
          "N_trainable × b_grad", f"{n_g:,} × {dtype_bytes_text(g_dtype)}", "lora")
    t.add("optimizer_states.vision", "optimizer_states", f"Vision adapter optimizer states ({w.optimizer})",
          tr.optimizer_state_bytes(n_o, 2 * len(linears), w.optimizer, prec.optimizer_states), "per optimizer",
          f"{n_o:,} trainable params", "lora")
    return sum(1 for x in linears if x.name.startswith("blocks.0."))


def _offloaded(t: TermList, p, first: int) -> None:
    """ZeRO-Offload / FSDP CPUOffload (held.add_offload): the tower's master weights, gradients and optimizer state
    (and its weights with offload_params) live in host RAM like the model's."""
    if not (p.offload_optimizer or p.offload_params):
        return
    moved = {"master_weights", "optimizer_states", "gradients"} | ({"weights"} if p.offload_params else set())
    mine = t.items[first:]
    t.items = t.items[:first] + [x for x in mine if x.component not in moved]
    for term in (x for x in mine if x.component in moved):
        t.by_component[term.component] -= term.bytes
        t.host.append(term._replace(component="host", note="in host RAM (offloaded)"))


def training_terms(t: TermList, m: ModelSpec, shared, shard: StageShard, states: int) -> int:
    """Adds the tower's terms to a training stage; returns the long-lived bytes added (for the stage's states).
    `states`: the stage's long-lived bytes so far (what is above them is its forward/backward working set)."""
    w, ws = shared.w, shared.ws
    if not w.images_per_sample or not shard.has_embedding:
        return 0
    v, p, before, first = m.vision, ws.parallel, t.total(), len(t.items)
    trained = w.vision_tower == "trained"
    dtype = ws.precision.params if w.finetune == "full" else w.precision.params
    _weights(t, m, w, dtype, p.zero >= 3, p.shard_group)
    per_block = 0
    if trained and w.finetune == "full":
        _full_states(t, m, w, ws)
    elif trained:
        per_block = _adapter_states(t, m, w, ws)
    _offloaded(t, p, first)
    long_lived = t.total() - before
    working = before - states  # the stage's forward/backward working set so far
    px, e, call = image_px(m, w), shared.d.e, w.micro_batch * w.images_per_sample
    patches = call * image_tokens(v, px, px).patches
    src = "flash-attention" if w.attention != "eager" else "hf-eager-attention"
    if not trained:
        peak = forward_peak_bytes(v, call, px, e, w.attention)
        t.add("transient.vision_forward", "transient", "Frozen vision tower: its forward working set",
              max(0, peak - working), "max(0, tower forward peak − the stage's working set)",
              f"max(0, {peak:,} − {working:,}) B", src,
              f"{call} image(s), {patches:,} patches in one call, no autograd (≈: live tensors of the busiest "
              f"block); 0 when the LM's forward/backward needs more", keep=True)
        return long_lived
    flight = in_flight_microbatches(p, shard.stage, m.num_hidden_layers)
    blocks, outside = tower_saved_bytes(v, call, px, e, w.attention)
    lora = per_block * v.trained_layers * e * patches * w.lora_rank  # the blocks backward reaches
    if w.recompute == "full":  # transformers checkpoints every vision block too: each keeps its input
        kept = v.trained_layers * e * patches * v.hidden_size
        t.add("activations.vision", "activations", "Vision tower: block inputs (full recompute) + the rest",
              int(flight * (kept + outside)), "m_inflight × (L_vision × e·N·hv + outside the blocks)",
              f"{flight:g} × ({v.trained_layers} × {e} × {patches:,} × {v.hidden_size} + {outside:,}) B",
              "hf-checkpointing", f"{call} image(s), {patches:,} patches per micro-batch")
        one = blocks // max(1, v.trained_layers)  # its backward runs last, after the LM's working set is gone
        t.add("transient.vision_recompute", "transient", "One vision block recomputed during backward",
              max(0, one - working), "max(0, one block's saved tensors − the stage's working set)",
              f"max(0, {one:,} − {working:,}) B", "hf-checkpointing")
    else:
        t.add("activations.vision", "activations", "Vision tower activations (saved for backward)",
              int(flight * (blocks + outside + lora)), "m_inflight × (Σ_blocks A_block(N) + outside the blocks)",
              f"{flight:g} × ({blocks:,} + {outside:,}" + (f" + LoRA {lora:,}" if lora else "") + ") B", src,
              f"{call} image(s), {patches:,} patches per micro-batch; attention {w.attention} (groups: per image"
              + (", per window" if v.kind == "qwen2_5_vl" else "") + ")" + ("; ≈ LoRA inside the tower" if lora
                                                                          else ""))
    return long_lived


def inference_weights(t: TermList, m: ModelSpec, w, shard: StageShard) -> None:
    """The tower's weights in a generate() stage (before the stage reads its weights total)."""
    if w.images_per_sample and shard.has_embedding:
        _weights(t, m, w, w.precision.params, False, 1)


def inference_transient(t: TermList, m: ModelSpec, w, shard: StageShard, above_weights: int) -> None:
    """The tower's prefill working set, where it exceeds the stage's peak above its weights (the tower runs first,
    before any KV cache exists)."""
    if not (w.images_per_sample and shard.has_embedding):
        return
    call, px = w.micro_batch * w.images_per_sample, image_px(m, w)
    peak = forward_peak_bytes(m.vision, call, px, nbytes(1, w.precision.activations), w.attention)
    weights = t.by_component["weights"]
    t.phases.append((weights, weights + peak))
    t.add("transient.vision_prefill", "transient", "Vision tower forward at prefill", max(0, peak - above_weights),
          "max(0, tower forward peak − the stage's peak above its weights)",
          f"max(0, {peak:,} − {above_weights:,}) B", "flash-attention" if w.attention != "eager"
          else "hf-eager-attention", f"{call} image(s) of {px}×{px} px in one call, before the LM's prefill (≈: "
          f"live tensors of the busiest block); 0 when the LM's own peak is higher", keep=True)
