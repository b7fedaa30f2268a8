"""LoRA and QLoRA fine-tuning: which linears get adapters, how many trainable parameters that makes, and what
the frozen base changes in the saved activations.

Hu et al. 2021 (LoRA, §4.1): a frozen W gets a trainable update B·A with A: in×r and B: r×out, so an adapter
adds r·(in + out) parameters. Dettmers et al. 2023 (QLoRA, §3): the frozen base is stored in NF4 with one fp32
absmax per 64 weights; the adapters train in the compute dtype. PEFT (`peft.tuners.lora`) saves the adapter's
input x for A's gradient and A's output (r wide) for B's; a frozen linear without an adapter saves nothing of
its input, and a frozen norm weight does not keep the normalised input.
"""
from __future__ import annotations

from calculator.core.errors import InputError
from calculator.memory import lora_moe
from calculator.model import architectures
from calculator.model.spec import ModelSpec

# target sets, by the names PEFT users pass as target_modules
TARGETS: dict[str, str] = {
    "qv": "q_proj, v_proj (the LoRA paper's default)",
    "attention": "q_proj, k_proj, v_proj, o_proj",
    "all-linear": "every nn.Linear of the decoder layers (PEFT 'all-linear'); on the MoE types PEFT converts, the "
                  "routed experts and the router instead of the dense and shared MLPs",
}


# PEFT matches target_modules against the last component of each module's name (peft/tuners/tuners_utils.py,
# check_target_module_exists): these are the names each target set stands for in a kind of the architecture registry
PEFT_NAMES = {"qv": frozenset({"q_proj", "v_proj"}), "attention": frozenset({"q_proj", "k_proj", "v_proj", "o_proj"})}


# PEFT 0.21.2 refuses out_proj and conv1d as LoRA targets on these model types (peft/tuners/tuners_utils.py
# _check_lora_target_modules_mamba), so target_modules="all-linear" raises there
PEFT_MAMBA_TYPES = frozenset({"falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h"})


def check_targets(m: ModelSpec, targets: str) -> None:
    """Refuse what PEFT refuses: all-linear on its Mamba model types (out_proj is among the linears), and a target set
    that matches no linear of the model (PEFT: "Target modules ... not found in the base model")."""
    if targets == "all-linear" and m.model_type in PEFT_MAMBA_TYPES:
        raise InputError("lora_targets", f"PEFT 0.21 refuses LoRA on out_proj (and conv1d) of {m.model_type} models, "
                                         "so all-linear fails there: use qv or attention (the attention layers' "
                                         "projections)")
    if not layers_adapter_params(m, 1, targets, range(m.num_hidden_layers))[0]:
        raise InputError("lora_targets", f"no linear of {m.name} is named as the {targets} targets are "
                                         f"({TARGETS[targets]}): PEFT would find no target module; use all-linear")


def attention_linears(m: ModelSpec, targets: str) -> list[tuple[str, int, int]]:
    """(name, in, out) of the softmax attention's linears that get an adapter: q_proj, v_proj (and k_proj, o_proj), a
    fused qkv_proj, or MLA's projections (qv: the two up-projections; attention: all). Qwen3-Next / Qwen3.5's q_proj
    writes the query and its output gate (2·q_dim)."""
    h, qd, kvd = m.hidden_size, m.q_dim, m.kv_dim
    q_out = 2 * qd if m.attention_output_gate else qd
    if m.is_mla:
        a, ql, kvl, rope = m.num_attention_heads, m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
        q = [("q_a_proj", h, ql), ("q_b_proj", ql, a * m.head_size)] if ql else [("q_proj", h, a * m.head_size)]
        kv = [("kv_a_proj_with_mqa", h, kvl + rope), ("kv_b_proj", kvl, a * (m.qk_nope_head_dim + m.v_head_dim))]
        attention = {"qv": [q[-1], kv[-1]], "attention": q + kv + [("o_proj", a * m.v_head_dim, h)]}
    elif m.fused_qkv:
        fused = [("qkv_proj", h, qd + 2 * kvd)]
        attention = {"qv": fused, "attention": fused + [("o_proj", qd, h)]}
    else:
        attention = {"qv": [("q_proj", h, q_out), ("v_proj", h, kvd)],
                     "attention": [("q_proj", h, q_out), ("k_proj", h, kvd), ("v_proj", h, kvd), ("o_proj", qd, h)]}
    return attention["attention" if targets == "all-linear" else targets]


def mixer_linears(m: ModelSpec, targets: str, mixer: str = "attention") -> list[tuple[str, int, int]]:
    """(name, in, out) of one token mixer's linears that get an adapter. Softmax attention: attention_linears; a kind
    of the registry: its own nn.Linear modules (calculator.model.architectures, `linears`) whose names PEFT matches —
    all of them for all-linear, only those named q_proj / k_proj / v_proj / o_proj otherwise (Kimi's KDA, MiniMax-M3's
    indexer), so a Gated DeltaNet, Mamba or short-convolution layer gets none — plus the attention's when the kind
    runs beside it (Falcon-H1, DSA)."""
    if mixer in architectures.SOFTMAX_ATTENTION:
        return attention_linears(m, targets)
    if mixer == "none":
        return []
    own = architectures.mixer(mixer).linears(m)
    if targets != "all-linear":
        own = [lin for lin in own if lin[0].rsplit(".", 1)[-1] in PEFT_NAMES[targets]]
    return (attention_linears(m, targets) if architectures.with_attention(mixer) else []) + own


def ffn_linears(m: ModelSpec, moe_layer: bool, targets: str = "all-linear") -> list[tuple[str, int, int]]:
    """(name, in, out) of the feed-forward's nn.Linear modules that all-linear adapts: the dense MLP's, or an MoE
    layer's shared expert's and its shared_expert_gate (Qwen2-MoE / Qwen3-Next: h → 1). The routed experts are fused
    3-D parameters in transformers 5, not nn.Linear: PEFT reaches them (and the router, here ("gate", h, E)) only on
    lora_moe.PEFT_MOE_TYPES, where the dense and shared MLPs get no adapter instead (lora_moe.dense_mlp_adapted)."""
    h = m.hidden_size
    if moe_layer:
        width = m.shared_expert_intermediate_size or m.num_shared_experts * m.expert_intermediate_size
    else:
        width = m.intermediate_size
    out: list[tuple[str, int, int]] = []
    if moe_layer and lora_moe.experts_adapted(m, targets):
        out.append(("gate", h, m.num_experts))
    if moe_layer and width and m.shared_expert_gate:
        out.append(("shared_expert_gate", h, 1))
    if not width or not lora_moe.dense_mlp_adapted(m, targets):
        return out
    if m.fused_gate_up:
        return out + [("gate_up_proj", h, 2 * width), ("down_proj", width, h)]
    if m.gated_mlp:
        return out + [("gate_proj", h, width), ("up_proj", h, width), ("down_proj", width, h)]
    return out + [("fc1", h, width), ("fc2", width, h)]


def adapted_linears(m: ModelSpec, targets: str, moe_layer: bool, mixer: str = "attention",
                    ffn: str | None = None) -> list[tuple[str, int, int]]:
    """(name, in, out) of the linears of one layer (its token mixer of kind `mixer`, its feed-forward of kind `ffn`:
    dense, moe or none) that get an adapter."""
    ffn = ffn or ("moe" if moe_layer else "dense")
    out = mixer_linears(m, targets, mixer)
    if targets == "all-linear" and ffn != "none":
        out += ffn_linears(m, ffn == "moe", targets)
    return out


def layer_adapted_linears(m: ModelSpec, targets: str, i: int) -> list[tuple[str, int, int]]:
    """adapted_linears of decoder layer i, by its kind (ModelSpec.layer_kind); a Gemma 3n / 4 layer by its own
    (architectures/gemma_next_lora.py: per-layer dims, AltUp, LAuReL, PLE, the MoE router)."""
    if m.gemma_next is not None:  # hook: each layer its own kind
        return architectures.gemma_next_lora.adapted_linears(m, targets, m.layer_kind(i).slot)
    kind = m.layer_kind(i)
    return adapted_linears(m.ffn_of(kind), targets, kind.ffn == "moe", kind.mixer, kind.ffn)


def adapter_params(m: ModelSpec, rank: int, targets: str, moe_layer: bool, mixer: str = "attention",
                   ffn: str | None = None) -> int:
    """Trainable parameters one layer's adapters add: Σ r·(in + out) (Hu et al. 2021 §4.1), plus the routed experts'
    where PEFT adapts them (lora_moe.expert_adapter_params)."""
    experts = lora_moe.expert_adapter_params(m, rank) if _experts(m, targets, moe_layer, ffn) else 0
    return sum(rank * (i + o) for _, i, o in adapted_linears(m, targets, moe_layer, mixer, ffn)) + experts


def adapter_tensors(m: ModelSpec, targets: str, moe_layer: bool, mixer: str = "attention",
                    ffn: str | None = None) -> int:
    """Parameter tensors of one layer's adapters (A and B per adapted linear or expert parameter)."""
    return 2 * len(adapted_linears(m, targets, moe_layer, mixer, ffn)) + (4 if _experts(m, targets, moe_layer, ffn)
                                                                           else 0)


def _experts(m: ModelSpec, targets: str, moe_layer: bool, ffn: str | None) -> bool:
    return (ffn or ("moe" if moe_layer else "dense")) == "moe" and lora_moe.experts_adapted(m, targets)


def layer_adapter_params(m: ModelSpec, rank: int, targets: str, i: int) -> int:
    """Trainable parameters of decoder layer i's adapters, by its kind."""
    return layers_adapter_params(m, rank, targets, range(i, i + 1))[0]


def outer_adapter_params(m: ModelSpec, rank: int, targets: str) -> tuple[int, int]:
    """(trainable parameters, tensors) of adapters outside the decoder layers: Gemma 3n / 4 under all-linear
    (per_layer_model_projection, AltUp's projections: architectures/gemma_next_lora.outer_linears); none otherwise."""
    if m.gemma_next is None:
        return 0, 0
    lins = architectures.gemma_next_lora.outer_linears(m, targets)
    return sum(rank * (i + o) for _, i, o in lins), 2 * len(lins)


def layer_adapter_tensors(m: ModelSpec, rank: int, targets: str, i: int) -> list[int]:
    """Elements of decoder layer i's adapter tensors, A then B per adapted linear, then the experts' (ParamWrapper)."""
    if m.gemma_next is not None:  # hook: Gemma 3n / 4
        return [n for _, a, o in layer_adapted_linears(m, targets, i) for n in (rank * a, rank * o)]
    kind = m.layer_kind(i)
    out = [n for _, a, o in layer_adapted_linears(m, targets, i) for n in (rank * a, rank * o)]
    return out + (lora_moe.expert_adapter_tensors(m, rank) if _experts(m, targets, False, kind.ffn) else [])


def layers_adapter_params(m: ModelSpec, rank: int, targets: str, layers) -> tuple[int, int]:
    """(trainable parameters, parameter tensors) of the adapters of decoder layers `layers`, each by its kind."""
    if m.gemma_next is not None:  # hook: Gemma 3n / 4, layer by layer
        lins = [lin for i in layers for lin in layer_adapted_linears(m, targets, i)]
        return sum(rank * (i + o) for _, i, o in lins), 2 * len(lins)
    counts: dict = {}
    for i in layers:
        kind = m.layer_kind(i)
        counts[kind] = counts.get(kind, 0) + 1
    params = sum(n * adapter_params(m.ffn_of(k), rank, targets, k.ffn == "moe", k.mixer, k.ffn)
                 for k, n in counts.items())
    tensors = sum(n * adapter_tensors(m, targets, k.ffn == "moe", k.mixer, k.ffn) for k, n in counts.items())
    return params, tensors


def no_grad_adapter_params(m: ModelSpec, rank: int, targets: str, layers) -> tuple[int, int]:
    """(parameters, tensors) of the adapters of `layers` that never get a gradient: those on a linear whose weight is
    one of its kind's no_grad_shapes (a top-k indexer's: DSA's wq_b / wk / weights_proj under all-linear, MiniMax-M3's
    q_proj / k_proj): the adapter computes inside what backward never reaches. Σ r·(in + out), 2 tensors each."""
    params = tensors = 0
    for mixer, n in architectures.stage_mixers(m, layers).items():
        if not hasattr(architectures.mixer(mixer), "no_grad_shapes"):
            continue
        frozen = {tuple(x) for x in architectures.mixer(mixer).no_grad_shapes(m)}
        att = len(attention_linears(m, targets)) if architectures.with_attention(mixer) else 0
        own = [lin for lin in mixer_linears(m, targets, mixer)[att:] if (lin[2], lin[1]) in frozen]
        params += n * sum(rank * (i + o) for _, i, o in own)
        tensors += n * 2 * len(own)
    return params, tensors


def frozen_norm_copy(m: ModelSpec, e: int) -> int:
    """Bytes per element a transformers norm stops saving when its weight is frozen: the normalised copy the weight
    multiply keeps for the weight's gradient — RMSNorm e B; 4 B for the norms that multiply the weight in fp32
    (Gemma's and GPT-OSS's, the zero-centred (1 + w) one of Qwen3-Next / Qwen3.5 / Nemotron-H, a variant's
    fp32_weight RMSNorm: measured −4·T·h per norm, validation/trace/lora_hybrid.py); LayerNorm none."""
    if m.family in ("gemma", "gpt_oss") or m.zero_centered_norm or (
            m.variant is not None and m.variant.norm == "fp32_weight"):
        return 4
    return 0 if m.norm_type == "layernorm" else e


def first_layer_without_input_grad(m: ModelSpec, T: int, h: int) -> int:
    """Bytes the first layer does not save when its input does not require grad (PEFT without gradient
    checkpointing): its first norm keeps no fp32 copy and no rsqrt (RMSNorm 4·T·h + 4·T; Gemma and the zero-centred
    norm + 4·h, their fp32 (1 + w); LayerNorm its 8·T statistics)."""
    if m.norm_type == "layernorm":
        return 8 * T
    if m.gemma_next is not None:  # hook: Gemma 3n / 4's norm keeps 8 B per row (architectures/gemma_next_lora.py)
        return architectures.gemma_next_lora.first_norm_unsaved(T, h)
    return 4 * T * h + 4 * T + (4 * h if m.family == "gemma" or m.zero_centered_norm else 0)


def frozen_head_saved(m: ModelSpec, T: int, h: int) -> int:
    """Final norm with a frozen weight and a frozen LM head: only the norm's fp32 input copy and rsqrt
    (RMSNorm 4·T·h + 4·T; Gemma + 4·h; LayerNorm 8·T) — no normalised copy, no LM-head input."""
    return first_layer_without_input_grad(m, T, h)


def kbit_prepared(w):
    """The workload as `peft.prepare_model_for_kbit_training` leaves it (peft/utils/other.py: every fp16/bf16
    parameter that is not a `Params4bit` gets `param.data = param.data.to(torch.float32)`): the embeddings, norms
    and LM head are fp32, so the embedding output, the residual stream, the norms and the logits are fp32 too
    (bitsandbytes' `Linear4bit.forward` casts its input to the compute dtype and its output back to the input's
    dtype, bitsandbytes/nn/modules.py). Only QLoRA is prepared; anything else is returned unchanged."""
    if not (w.kbit_prep and w.finetune == "qlora"):
        return w
    prec = w.precision.model_copy(update={"params": "fp32", "activations": "fp32"})
    return w.model_copy(update={"precision": prec})
