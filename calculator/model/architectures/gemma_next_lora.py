"""LoRA / QLoRA on Gemma 3n and Gemma 4 decoder layers (PEFT 0.21.2 on transformers 5.23): which nn.Linear modules
each target set adapts, and what a layer with a frozen base saves for backward relative to full fine-tuning
(gemma_next_saved.py). Measured byte for byte with the real PEFT on tiny bf16 models on the CPU
(validation/trace/lora_hybrid.py, tests/golden_lora_hybrid/gemma*.json, tests/memory/test_lora_hybrid.py).

Targets (PEFT matches target_modules against the last component of a module's name, peft/tuners/tuners_utils.py
check_target_module_exists; "all-linear" is every nn.Linear but the output embedding, _maybe_include_all_linear_layers):
qv = q_proj, v_proj (a KV-shared layer has no v_proj, a Gemma-4 K = V layer neither); attention = q/k/v/o_proj;
all-linear also gate/up/down_proj, Gemma-4's router `proj` (its routed experts are 3-D parameters, not nn.Linear, and
gemma4 is not among PEFT's MoE conversions), Gemma-3n's AltUp modality_router, prediction_coefs, correction_coefs
(nn.Linear, modeling_gemma3n.py Gemma3nTextAltUp), LAuReL linear_left / linear_right, the PLE per_layer_input_gate and
per_layer_projection — and, outside the layers, per_layer_model_projection and Gemma-3n's altup_projections and
altup_unembed_projections (outer_linears).

Mechanisms (e bytes per activation element, T tokens): a frozen weighted norm keeps no normalised fp32 copy (−4·T·w,
the weight copy and the fp32 input stay: Gemma3nRMSNorm / Gemma4RMSNorm multiply by weight.float()); a frozen linear
keeps nothing of its input; a frozen parameter multiply keeps nothing of its other operand (AltUp's
correct_output_scale, Gemma-4's router scale and per_expert_scale); every running adapter keeps its r-wide A output
(e·T·r); Gemma-3n's correction_coefs adapter never runs in training: AltUp.correct calls F.linear(modalities,
self.correction_coefs.weight.clamp(...)) and PEFT's lora.Linear.weight is its base layer's (BaseTunerLayer.weight), so
its input is not kept either; modality_router runs twice per layer (predict and correct), two A outputs.
"""
from __future__ import annotations

from calculator.model.architectures.gemma_next import is_reuse, kv_heads_on_rank
from calculator.model.architectures import gemma_next_saved
from calculator.model.architectures.gemma_next_saved import norm_saved

PEFT_NAMES = {"qv": frozenset({"q_proj", "v_proj"}), "attention": frozenset({"q_proj", "k_proj", "v_proj", "o_proj"})}
BYPASSED = frozenset({"correction_coefs"})  # the adapter exists (trainable) but never runs (module docstring)
TWICE = frozenset({"modality_router"})  # called in AltUp.predict and AltUp.correct


def layer_linears(m, i: int) -> list[tuple[str, int, int]]:
    """(name, in, out) of every nn.Linear of decoder layer i, full widths."""
    g, h, a = m.gemma_next, m.hidden_size, m.num_attention_heads
    d, kv, f = g.head_dims[i], g.kv_heads[i], g.intermediate_sizes[i]
    out = [("q_proj", h, a * d)]
    if not is_reuse(m, i):
        out += [("k_proj", h, kv * d)] + ([] if g.k_eq_v[i] else [("v_proj", h, kv * d)])
    out += [("o_proj", a * d, h), ("gate_proj", h, f), ("up_proj", h, f), ("down_proj", f, h)]
    if g.moe_block and m.layer_kind(i).ffn == "moe":
        out.append(("proj", h, m.num_experts))
    n, r, p = g.altup_inputs, g.laurel_rank, g.ple_size
    if n:
        out += [("correction_coefs", n, n), ("prediction_coefs", n, n * n), ("modality_router", h, n)]
    if r:
        out += [("linear_left", h, r), ("linear_right", r, h)]
    if p:
        out += [("per_layer_input_gate", h, p), ("per_layer_projection", p, h)]
    return out


def adapted_linears(m, targets: str, i: int) -> list[tuple[str, int, int]]:
    """The linears of layer i that get an adapter under `targets`."""
    lins = layer_linears(m, i)
    return lins if targets == "all-linear" else [lin for lin in lins if lin[0] in PEFT_NAMES[targets]]


def outer_linears(m, targets: str) -> list[tuple[str, int, int]]:
    """Adapted nn.Linear modules outside the layers (all-linear only): per_layer_model_projection h → L·p
    (Gemma3nTextModel / Gemma4TextModel), altup_projections and altup_unembed_projections, (n − 1) of h → h each."""
    if targets != "all-linear":
        return []
    g, h = m.gemma_next, m.hidden_size
    out = [("per_layer_model_projection", h, m.num_hidden_layers * g.ple_size)] if g.ple_size else []
    if g.altup_inputs > 1:
        out += [("altup_projections", h, h)] * (g.altup_inputs - 1) + [("altup_unembed_projections", h, h)] * (
            g.altup_inputs - 1)
    return out


def _adapters(linears, T: int, e: int, rank: int, tp: int, fp32: bool) -> int:
    """What the running adapters keep: e·T·r each (B's input); fp32 adapters (PEFT's autocast_adapter_dtype) their own
    fp32 copy of the input 4·T·in and an fp32 A output 4·T·r (calculator.memory.lora_layer.adapters_saved)."""
    if fp32:
        return sum(4 * T * i // tp + 4 * T * rank for _, i, _ in linears)
    return e * T * rank * len(linears)


def layer_delta(m, w, d, kind) -> tuple[int, int, int]:
    """(norms and per-layer extras, attention, MLP and MoE block) a LoRA / QLoRA layer of `kind`, its input requiring
    grad, saves relative to full fine-tuning (module docstring). With Workload.qlora_keeps_inputs (bitsandbytes before
    0.43) the 4-bit linears keep their inputs: only the norms, the parameter multiplies and the adapters change."""
    g, i = m.gemma_next, kind.slot
    e, T, h, tp, rank = d.e, d.T, d.h, d.tp, w.lora_rank
    fp32 = w.lora_adapter_dtype == "fp32"
    keeps = w.finetune == "qlora" and w.qlora_keeps_inputs
    adapted = adapted_linears(m, w.lora_targets, i)
    names = {n for n, _, _ in adapted}
    reads = set() if fp32 else names  # fp32 adapters read their own fp32 copies

    def dropped(name: str) -> bool:  # a frozen linear's input: not kept unless an adapter (or the 4-bit base) reads it
        return not keeps and name not in reads

    running = [lin for lin in adapted if lin[0] not in BYPASSED] + [lin for lin in adapted if lin[0] in TWICE]
    moe = kind.ffn == "moe"
    n_norms = (8 if g.generation == "3n" else 4 + (1 if g.ple_size else 0)) + (3 if moe else 0)
    norms = -n_norms * 4 * T * h
    if dropped("q_proj") and dropped("k_proj") and dropped("v_proj") and dropped("linear_left"):
        norms -= e * T * h  # input_layernorm's output
    if dropped("gate_proj") and dropped("up_proj"):
        norms -= e * T * h  # pre_feedforward_layernorm's output
    hd, kv, a = g.head_dims[i], kv_heads_on_rank(m, i, d.kv), d.a
    attention = -4 * T * a * hd - (0 if is_reuse(m, i) else 4 * T * kv * hd)  # q_norm, k_norm copies
    if w.attention == "eager" and w.recompute != "selective" and dropped("o_proj"):
        attention -= e * T * a * hd  # o_proj's input (flash / SDPA keep it as the kernel's output)
    attention += _adapters(running, T, e, rank, tp, fp32)
    mlp = -e * T * (g.intermediate_sizes[i] // tp) if dropped("down_proj") else 0
    if moe:
        k, fm = m.num_experts_per_tok, m.expert_intermediate_size // w.parallel.expert_tp
        mlp -= e * k * T * (h + fm)  # frozen routed experts: the gathered tokens and the down projection's input
        mlp -= e * T * h + 4 * T * k  # router: scale's operand (the normed input), per_expert_scale's (fp32 weights)
        if dropped("proj"):
            mlp -= e * T * h  # the router projection's input
    n, r, p = g.altup_inputs, g.laurel_rank, g.ple_size
    if n:
        norms -= e * T * h + e * T * n  # scale_corrected_output's input; correction_coefs' input (bypassed)
        if dropped("modality_router"):
            norms -= 2 * e * T * h
        if dropped("prediction_coefs"):
            norms -= e * T * n
    if r and dropped("linear_right"):
        norms -= e * T * r
    if p:
        if dropped("per_layer_input_gate"):
            norms -= e * T * h
        if dropped("per_layer_projection"):
            norms -= e * T * p
        if not any(lin[0] == "per_layer_model_projection" for lin in outer_linears(m, w.lora_targets)):
            norms -= e * T * p  # gelu's output: the per-layer inputs need no gradient
    return norms, attention, mlp


def first_layer_saved_less(m, w, d, kind) -> int:
    """What the first layer (every target set adapts q_proj: always layer 0) saves less than layer_delta's layer, its
    input not requiring grad (PEFT without checkpointing): input_layernorm keeps nothing (4·T·h + 8·T + 4·h); with
    k_proj frozen (qv) k needs no gradient: k_norm keeps nothing (4·T·kv·d + 8·T·kv + 4·d) and eager attention does
    not save q (e·T·a·d); Gemma-3n without adapted AltUp projections (not all-linear) also: the first router_norm and
    post_laurel_norm keep nothing (4·T·h + 8·T + 4·h each) and AltUp.predict keeps neither its tanh output (4·T·n) nor
    its matmul operands (e·n·T·h + e·T·n²). A Gemma-4 K = V layer first with k_proj frozen is not modelled (its V needs
    no gradient either; layer 0 is a sliding layer in every published config). Gemma-3n under all-linear: nothing
    (its adapted altup_projections make the streams require grad), measured."""
    g, i = m.gemma_next, kind.slot
    e, T, h = d.e, d.T, d.h
    n = g.altup_inputs
    if n > 1 and outer_linears(m, w.lora_targets):
        return 0  # the adapted altup_projections: the streams the first layer reads require grad
    whole_norm = first_norm_unsaved(T, h)
    out = whole_norm
    names = {n for n, _, _ in adapted_linears(m, w.lora_targets, i)}
    if not is_reuse(m, i) and "k_proj" not in names:
        hd, kv = g.head_dims[i], kv_heads_on_rank(m, i, d.kv)
        out += norm_saved(T, kv * hd, kv) + 4 * hd - 4 * T * kv * hd
        if w.attention == "eager" and w.recompute != "selective":
            out += e * T * d.a * hd
    if n:
        out += 2 * whole_norm + 4 * T * n + e * n * T * h + e * T * n * n
    return out


def first_norm_unsaved(T: int, h: int) -> int:
    """A Gemma 3n / 4 RMSNorm with a frozen weight whose input needs no gradient keeps nothing: its fp32 input, two
    per row and the weight copy, 4·T·h + 8·T + 4·h beyond the normalised copy (the same bytes the frozen final norm
    keeps when its input does need a gradient)."""
    return norm_saved(T, h) + 4 * h - 4 * T * h



def embedding_side_saved(m, d, targets: str, rank: int) -> int:
    """gemma_next_saved.embedding_side_saved with a frozen base and the embedding's output not requiring grad (LoRA
    without checkpointing), measured (validation/trace/lora_hybrid.py, outside the layers): the frozen per-layer table
    keeps no clipped ids; the per-layer inputs [T, L, p] every layer's PLE multiply reads, e·T·L·p; with the
    projection adapted (all-linear) also its input e·T·h, its A output e·T·r and per_layer_projection_norm's input
    (fp32 copy, two per row, weight copy: norm_saved − 4·T·L·p + 4·p). Gemma-3n: the unembedding of the last layer's n
    streams (e·n·T·h) with its magnitudes, (n − 1)·(2·e·T·h + 2·e·T) + 2·e·T; under all-linear also the embedding side's
    (n − 1)·(2·e·T·h + 2·e·T) + e·T (the target magnitude of the embeddings, which need no gradient, is kept by
    the multiply alone) and each adapted projection's A output e·T·r (modeling_gemma3n.py Gemma3nTextModel.forward)."""
    g, e, T, h, L = m.gemma_next, d.e, d.T, d.h, m.num_hidden_layers
    p, n = g.ple_size, g.altup_inputs
    adapted = bool(outer_linears(m, targets))
    out = 0
    if p:
        out += e * T * L * p
        if adapted:
            out += e * T * h + e * T * rank + norm_saved(T, L * p, L) + 4 * p - 4 * T * L * p
    if g.generation == "3n" and n > 1:
        out += e * n * T * h + (n - 1) * (2 * e * T * h + 2 * e * T) + 2 * e * T
        if adapted:
            out += (n - 1) * (2 * e * T * h + 2 * e * T) + e * T + 2 * (n - 1) * e * T * rank + (
                0 if p else e * T * h)
    return out


def layer_saved(m, w, d, kind) -> tuple[int, int, int]:
    """gemma_next_saved.layer_saved, plus layer_delta under LoRA / QLoRA."""
    parts = gemma_next_saved.layer_saved(m, w, d, kind)
    if w.finetune == "full":
        return parts
    return tuple(x + y for x, y in zip(parts, layer_delta(m, w, d, kind)))


def embedding_saved(m, d, output_requires_grad: bool, w=None) -> int:
    """Outside the layers, before the first: gemma_next_saved.embedding_side_saved, or embedding_side_saved above under
    LoRA / QLoRA without input grads."""
    if w is not None and w.finetune != "full" and not output_requires_grad:
        return embedding_side_saved(m, d, w.lora_targets, w.lora_rank)
    return gemma_next_saved.embedding_side_saved(m, d)
