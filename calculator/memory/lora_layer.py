"""What a LoRA / QLoRA decoder layer saves for backward relative to full fine-tuning, by mechanism, for every kind of
layer (softmax attention, MLA, the token mixers of calculator/model/architectures/, dense and MoE feed-forwards),
traced with PEFT 0.21.2 on transformers 5.23 (validation/README.md section "LoRA"; hybrids and MoE:
validation/trace/lora_hybrid.py and tests/memory/test_lora_hybrid.py).

The mechanisms: a frozen linear keeps nothing of its input (only its weight); a frozen norm weight keeps no normalised
copy (lora.frozen_norm_copy); a norm output no adapted linear reads is not kept; every adapter keeps its r-wide A
output (e·T·r; with fp32 adapters its own fp32 copy of its input and an fp32 A output); each registry kind says what
its frozen parameters no longer need (`frozen_saved`) and which of its linears read the layer's input
(`READS_INPUT`); frozen routed experts keep no input, adapted ones keep their folded weights (lora_moe). Without
gradient checkpointing the frozen embedding's output does not require grad: the layers before the first adapted one
save nothing, and the first adapted one saves less (first_adapted_extra).
"""
from __future__ import annotations

from calculator.memory import lora, lora_moe
from calculator.model import architectures, variants
from calculator.model.spec import LayerKind, ModelSpec

# the softmax attention's linears that read the layer's normalised input
ATTENTION_READS = frozenset({"q_proj", "k_proj", "v_proj", "qkv_proj", "q_a_proj", "kv_a_proj_with_mqa"})
# the feed-forward's linears that read the post-attention norm's output (the router "gate" too, unless it reads an
# fp32 copy: lora_moe.fp32_router)
FFN_READS = frozenset({"gate_proj", "up_proj", "gate_up_proj", "fc1", "shared_expert_gate"})
DOWN = frozenset({"down_proj", "fc2"})


def _names(linears) -> set[str]:
    """The last component of each module name (PEFT matches target_modules against it)."""
    return {n.rsplit(".", 1)[-1] for n, _, _ in linears}


def _split(m: ModelSpec, targets: str, mixer: str) -> tuple[list, list]:
    """(the softmax attention's adapted linears, the registry kind's own adapted linears) of one token mixer."""
    if mixer == "none":
        return [], []
    att = lora.attention_linears(m, targets) if architectures.with_attention(mixer) else []
    return att, lora.mixer_linears(m, targets, mixer)[len(att):]


def _running(m: ModelSpec, w, mixer: str, own: list) -> list:
    """The kind's adapted linears whose adapters run and keep their A output (not bypassed, not under no_grad)."""
    if mixer not in architectures.MIXERS:
        return own
    mod = architectures.mixer(mixer)
    if not getattr(mod, "ADAPTERS_SAVE", True):
        return []
    bypassed = mod.bypassed_adapters(m, w) if hasattr(mod, "bypassed_adapters") and w is not None else frozenset()
    return [lin for lin in own if lin[0].rsplit(".", 1)[-1] not in bypassed]


def adapters_saved(linears, T: int, e: int, rank: int, tp: int, fp32_adapters: bool) -> int:
    """What the adapters themselves keep: the r-wide A output per adapter, e·T·r (B's input); fp32 adapters (PEFT's
    autocast_adapter_dtype) also their own fp32 copy of the input, 4·T·in, and an fp32 A output, 4·T·r."""
    if fp32_adapters:
        return 4 * T * sum(i for _, i, _ in linears) // tp + 4 * T * rank * len(linears)
    return e * T * rank * len(linears)


def lora_layer_delta(m: ModelSpec, targets: str, moe_layer: bool, T: int, e: int, rank: int, h: int, f: int,
                     tp: int, eager: bool = False, fp32_adapters: bool = False, base_keeps_inputs: bool = False,
                     kind: LayerKind | None = None, d=None, w=None) -> tuple[int, int, int]:
    """Saved activations of one LoRA layer of `kind` (default: softmax attention with a dense or MoE feed-forward)
    relative to full fine-tuning, its input requiring grad, as (norms delta, feed-forward delta, token-mixer delta:
    the adapters, the frozen q/k norms and the mixer's frozen parameters). `d` and `w` (the local Dims and the
    Workload) are needed for the kinds of the registry and the experts' parallel split.
    Norms: −copy·T·h per norm (lora.frozen_norm_copy), −e·T·h per pre-norm output no adapted linear reads.
    Attention: q/k norms −copy·T·(qd + kvd); under eager attention a frozen o_proj's input −e·T·qd (flash keeps it
    as its output); MLA: the q_a / kv_a norms' copies −copy·T·(q_lora + kv_lora), the inputs of q_b_proj and
    kv_b_proj unless adapted −e·T·q_lora, −e·T·kv_lora. A registry kind: −kind.frozen_saved. Dense MLP: the down
    projection's input unless adapted −e·T·f; MoE: the shared expert's down input likewise, the routed experts
    (lora_moe: frozen −e·k·T·(h + f), adapted + their folded weights) and the router (lora_moe.router_delta).
    A 4-bit base (QLoRA) is such a frozen linear too: since bitsandbytes 0.45 `MatMul4Bit.forward` stores
    `ctx.tensors = (None, B)` — the packed weight only (bitsandbytes/autograd/_functions.py; 0.42 stored the input
    too). Measured with bitsandbytes 0.50 on an H200 (tests/golden_gpu/h200/qlora_*): QLoRA keeps the LoRA
    activations, to within 0.3% of the peak. `base_keeps_inputs` (bitsandbytes before 0.43,
    Workload.qlora_keeps_inputs): every 4-bit linear keeps its input, so only the norm copies and the adapters
    change. Routed experts are 3-D parameters, not nn.Linear: bitsandbytes leaves them in the model dtype."""
    kind = kind or LayerKind("mla" if m.is_mla else "attention", "moe" if moe_layer else "dense")
    moe = kind.ffn == "moe"
    att_lin, own_lin = _split(m, targets, kind.mixer)
    ffn_lin = lora.ffn_linears(m, moe, targets) if targets == "all-linear" and kind.ffn != "none" else []
    att_names, own_names, ffn_names = _names(att_lin), _names(own_lin), _names(ffn_lin)
    # the router's adapter is folded into its weight (lora_moe.router_delta): no A output of its own
    running = att_lin + _running(m, w, kind.mixer, own_lin) + [lin for lin in ffn_lin if lin[0] != "gate"]
    copy = lora.frozen_norm_copy(m, e)
    n_norms = 1 if kind.mixer == "none" or kind.ffn == "none" else m.norms_per_layer
    norms = -n_norms * copy * T * h
    softmax = kind.mixer in architectures.SOFTMAX_ATTENTION or architectures.with_attention(kind.mixer)
    qk_norms = copy * T * (m.q_dim + m.kv_dim) // tp if softmax and m.qk_norm and not m.is_mla else 0
    mixer = adapters_saved(running, T, e, rank, tp, fp32_adapters) - qk_norms
    if base_keeps_inputs:
        return norms, 0, mixer
    mod = architectures.mixer(kind.mixer) if kind.mixer in architectures.MIXERS else None
    reads = set() if fp32_adapters else att_names | own_names | ffn_names  # fp32 adapters read their own copies
    if kind.mixer != "none" and not reads & (ATTENTION_READS if softmax else set()) and not (
            mod is not None and reads & getattr(mod, "READS_INPUT", frozenset())):
        norms -= e * T * h  # no adapter reads the mixer norm's output
    shared = (m.shared_expert_intermediate_size or m.num_shared_experts * m.expert_intermediate_size) if moe else 0
    experts = moe and lora_moe.experts_adapted(m, targets)
    if kind.ffn != "none":
        router_reads = "gate" in reads and not lora_moe.fp32_router(m)
        kept_in_full = not (moe and m.variant is not None and not variants.moe_input_kept(m.variant, bool(shared)))
        if not (reads & FFN_READS or router_reads) and kept_in_full:
            norms -= e * T * h  # ... nor the feed-forward norm's output
    if softmax:
        mixer += _attention_frozen(m, T, e, tp, eager, att_names, copy)
    if mod is not None and hasattr(mod, "frozen_saved"):  # a kind without it: counted as its full fine-tuning
        mixer -= mod.frozen_saved(m, d, w, frozenset(own_names))
    mlp = 0
    etp, ep = (w.parallel.expert_tp, w.parallel.ep) if w is not None else (1, 1)
    if kind.ffn == "dense" and not reads & DOWN:
        mlp -= e * T * (f // tp)  # the frozen down projection does not keep its input
    elif moe:
        if shared and not reads & DOWN:
            mlp -= e * T * (shared // tp)  # nor the shared expert's
        mlp += (lora_moe.adapted_experts_saved(m, e, etp, ep, rank, fp32_adapters) if experts
                else -lora_moe.frozen_experts_saved(m, T, e, etp))
        mlp += lora_moe.router_delta(m, T, h, e, experts)
    return norms, mlp, mixer


def _attention_frozen(m: ModelSpec, T: int, e: int, tp: int, eager: bool, names: set[str], copy: int) -> int:
    """The softmax attention's tensors a frozen base no longer keeps (negative): under eager attention the frozen
    o_proj's input (−e·T·qd; flash keeps it as its output); MLA's q_a / kv_a norm copies and the inputs of a frozen
    q_b_proj / kv_b_proj (measured on kimi_linear and deepseek_v32, validation/trace/lora_hybrid.py)."""
    out = 0
    if not m.is_mla:
        return -(e * T * m.q_dim // tp) if eager and "o_proj" not in names else 0
    a, ql, kvl = m.num_attention_heads // tp, m.q_lora_rank or 0, m.kv_lora_rank
    out -= copy * T * (ql + kvl)
    if ql and "q_b_proj" not in names:
        out -= e * T * ql
    if "kv_b_proj" not in names:
        out -= e * T * kvl
    if eager and "o_proj" not in names:
        out -= e * T * a * m.v_head_size
    return out


# ---- the layers before the first adapted one ------------------------------------------------------------------------

def layer_adapted(m: ModelSpec, targets: str, kind: LayerKind, w=None) -> bool:
    """Whether a layer of `kind` runs an adapter (one whose output joins the residual stream with a gradient)."""
    att, own = _split(m, targets, kind.mixer)
    ffn = lora.ffn_linears(m, kind.ffn == "moe", targets) if targets == "all-linear" and kind.ffn != "none" else []
    return bool(att or _running(m, w, kind.mixer, own) or ffn or (
        kind.ffn == "moe" and lora_moe.experts_adapted(m, targets)))


def first_adapted_layer(m: ModelSpec, targets: str, w=None) -> int:
    """Index of the first decoder layer that runs an adapter (num_hidden_layers if none does): without gradient
    checkpointing the frozen embedding's output does not require grad, so the layers before it save nothing
    (measured: a Gated DeltaNet, Mamba, short-convolution or lightning layer before the first attention layer under
    the qv / attention targets, validation/trace/lora_hybrid.py)."""
    seen: dict = {}
    for i in range(m.num_hidden_layers):
        kind = m.layer_kind(i)
        if kind not in seen:
            seen[kind] = layer_adapted(m, targets, kind, w)
        if seen[kind]:
            return i
    return m.num_hidden_layers


def first_adapted_extra(m: ModelSpec, w, d, kind: LayerKind) -> int:
    """What the first adapted layer saves less than lora_layer_delta's layer (its input needs no gradient), beyond
    its first norm's copies (the implementation's first_layer_without_input_grad): with k_proj not adapted (qv), k
    needs no gradient, so the k norm keeps nothing (4·T·kvd + 4·T·kv, + 4·head_dim zero-centred) and under eager
    attention q is not saved (e·T·qd); a kind beside the attention (Falcon-H1's Mamba-2) without adapters of its own
    saves nothing at all. Measured on qwen3_5, lfm2, bamba, jamba, minimax, falcon_h1 (validation/trace/lora_hybrid.py).
    A kind whose own linears are only partly adapted (KDA under qv / attention) saves less still: not modelled."""
    if m.gemma_next is not None:  # hook: Gemma 3n / 4 (architectures/gemma_next_lora.py)
        return architectures.gemma_next_lora.first_layer_saved_less(m, w, d, kind) - lora.first_layer_without_input_grad(
            m, d.T, d.h_sp)
    targets, e, T, tp = w.lora_targets, d.e, d.T, d.tp
    att, own = _split(m, targets, kind.mixer)
    names = _names(att)
    out = 0
    if att and not m.is_mla and not m.fused_qkv and "k_proj" not in names:
        if m.qk_norm:
            out += 4 * T * m.kv_dim // tp + 4 * T * (m.kv_heads // tp or 1) + (4 * m.head_size if m.zero_centered_norm
                                                                                else 0)
        if w.attention == "eager" and w.recompute != "selective":
            out += e * T * m.q_dim // tp
    if att and m.is_mla:  # a frozen q_a / kv_a projection's output needs no gradient: its norm keeps nothing
        out += sum(4 * T * width + 4 * T for name, width in (("q_a_proj", m.q_lora_rank), ("kv_a_proj_with_mqa",
                                                                                           m.kv_lora_rank))
                   if width and name not in names)
    if kind.mixer in architectures.MIXERS and architectures.with_attention(kind.mixer) and not _running(
            m, w, kind.mixer, own):
        mod = architectures.mixer(kind.mixer)
        frozen = mod.frozen_saved(m, d, w, frozenset(_names(own))) if hasattr(mod, "frozen_saved") else 0
        out += mod.saved(m, d, w) - frozen
    return out
