"""LoRA and QLoRA fine-tuning: which linears get adapters, how many trainable parameters that makes, and what
the frozen base changes in the saved activations.

Hu et al. 2021 (LoRA, §4.1): a frozen W gets a trainable update B·A with A: in×r and B: r×out, so an adapter
adds r·(in + out) parameters. Dettmers et al. 2023 (QLoRA, §3): the frozen base is stored in NF4 with one fp32
absmax per 64 weights; the adapters train in the compute dtype. PEFT (`peft.tuners.lora`) saves the adapter's
input x for A's gradient and A's output (r wide) for B's; a frozen linear without an adapter saves nothing of
its input, and a frozen norm weight does not keep the normalised input.
"""
from __future__ import annotations

from calculator.model.spec import ModelSpec

# target sets, by the names PEFT users pass as target_modules
TARGETS: dict[str, str] = {
    "qv": "q_proj, v_proj (the LoRA paper's default)",
    "attention": "q_proj, k_proj, v_proj, o_proj",
    "all-linear": "every linear of attention and the dense/shared MLP (PEFT 'all-linear'; routed experts excluded)",
}


def adapted_linears(m: ModelSpec, targets: str, moe_layer: bool) -> list[tuple[str, int, int]]:
    """(name, in, out) of the linears of one layer that get an adapter."""
    h, qd, kvd = m.hidden_size, m.q_dim, m.kv_dim
    if m.is_mla:
        a, ql, kvl, rope = m.num_attention_heads, m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
        q = [("q_a_proj", h, ql), ("q_b_proj", ql, a * m.head_size)] if ql else [("q_proj", h, a * m.head_size)]
        kv = [("kv_a_proj_with_mqa", h, kvl + rope), ("kv_b_proj", kvl, a * (m.qk_nope_head_dim + m.v_head_dim))]
        attention = {"qv": [q[-1], kv[-1]], "attention": q + kv + [("o_proj", a * m.v_head_dim, h)]}
    elif m.fused_qkv:
        fused = [("qkv_proj", h, qd + 2 * kvd)]
        attention = {"qv": fused, "attention": fused + [("o_proj", qd, h)]}
    else:
        attention = {"qv": [("q_proj", h, qd), ("v_proj", h, kvd)],
                     "attention": [("q_proj", h, qd), ("k_proj", h, kvd), ("v_proj", h, kvd), ("o_proj", qd, h)]}
    if targets != "all-linear":
        return attention[targets]
    if moe_layer:
        width = m.shared_expert_intermediate_size or m.num_shared_experts * m.expert_intermediate_size
    else:
        width = m.intermediate_size
    mlp: list[tuple[str, int, int]] = []
    if width:
        if m.fused_gate_up:
            mlp = [("gate_up_proj", h, 2 * width), ("down_proj", width, h)]
        elif m.gated_mlp:
            mlp = [("gate_proj", h, width), ("up_proj", h, width), ("down_proj", width, h)]
        else:
            mlp = [("fc1", h, width), ("fc2", width, h)]
    return attention["attention"] + mlp


def adapter_params(m: ModelSpec, rank: int, targets: str, moe_layer: bool) -> int:
    """Trainable parameters one layer's adapters add: Σ r·(in + out) (Hu et al. 2021 §4.1)."""
    return sum(rank * (i + o) for _, i, o in adapted_linears(m, targets, moe_layer))


def adapter_tensors(m: ModelSpec, targets: str, moe_layer: bool) -> int:
    """Parameter tensors of one layer's adapters (A and B per adapted linear)."""
    return 2 * len(adapted_linears(m, targets, moe_layer))


def lora_layer_delta(m: ModelSpec, targets: str, moe_layer: bool, T: int, e: int, rank: int, h: int, f: int,
                     tp: int, eager: bool = False, fp32_adapters: bool = False,
                     base_keeps_inputs: bool = False) -> tuple[int, int, int]:
    """Saved activations of a LoRA layer relative to full fine-tuning, as (norms delta, MLP delta, attention delta:
the adapters less the frozen q/k norms),
    traced with peft 0.21 on transformers 5.23 (validation/README.md, LoRA):
    frozen norm weights keep no normalised copy (−e·T·h per RMSNorm, −4·T·h for Gemma's fp32 one; the per-head q and
    k norms of Qwen3 / Gemma-3 likewise, −e·T·(qd + kvd): H200 Qwen3-8B LoRA q,v +3.57% → 0.0%); a pre-norm
    output is kept only if an adapted linear reads it; the down projection's input only if it is adapted; under
    eager attention the o_proj input only if o_proj is adapted (flash keeps it as its output); each adapter adds
    its r-wide A output (e·T·r). fp32 adapters (PEFT's default autocast_adapter_dtype) save their own fp32 copy of
    each input instead (4·T·in) and an fp32 A output (4·T·r).
    A 4-bit base (QLoRA) is such a frozen linear too: since bitsandbytes 0.45 `MatMul4Bit.forward` stores
    `ctx.tensors = (None, B)` — the packed weight only, which the input gradient dequantizes again
    (bitsandbytes/autograd/_functions.py; 0.42 stored `(A, B)`, the input too). Measured with bitsandbytes 0.50 on
    an H200 (tests/golden_gpu/h200/qlora_*): QLoRA keeps the LoRA activations, to within 0.3% of the peak.
    `base_keeps_inputs` (bitsandbytes before 0.43, Workload.qlora_keeps_inputs): every 4-bit linear keeps its input,
    so the norm outputs, the o_proj and the down-projection inputs all stay alive."""
    adapted = adapted_linears(m, targets, moe_layer)
    names = {n for n, _, _ in adapted}
    norms = -m.norms_per_layer * frozen_norm_copy(m, e) * T * h
    # Qwen3 / Gemma-3 per-head q and k norms are frozen too: saved with the attention (activations.qk_norm_saved),
    # so their copy comes off the attention term
    qk_norms = frozen_norm_copy(m, e) * T * (m.q_dim + m.kv_dim) // tp if m.qk_norm and not m.is_mla else 0
    adapters = e * T * rank * len(names) - qk_norms
    if fp32_adapters:
        adapters = 4 * T * sum(i for _, i, _ in adapted) // tp + 4 * T * rank * len(names) - qk_norms
    if base_keeps_inputs:
        return norms, 0, adapters
    reads_attn_norm = bool(names & {"q_proj", "k_proj", "v_proj", "qkv_proj", "q_a_proj", "kv_a_proj_with_mqa"})
    reads_mlp_norm = bool(names & {"gate_proj", "up_proj", "gate_up_proj", "fc1"})
    reads_down = bool(names & {"down_proj", "fc2"})
    if fp32_adapters:  # the adapters read their own fp32 copies, not the model-dtype tensors
        reads_attn_norm = reads_mlp_norm = reads_down = False
    if not reads_attn_norm and not m.is_mla:
        norms -= e * T * h  # no adapter reads the attention norm's output
    if not reads_mlp_norm:
        norms -= e * T * h  # ... nor the MLP norm's output
    mlp = 0
    if not moe_layer and not reads_down:
        mlp -= e * T * (f // tp)  # the frozen down projection does not keep its input
    if eager and "o_proj" not in names and not m.is_mla:
        adapters -= e * T * m.q_dim // tp  # a frozen o_proj keeps nothing of its input
    return norms, mlp, adapters


def frozen_norm_copy(m: ModelSpec, e: int) -> int:
    """Bytes per element a transformers norm stops saving when its weight is frozen: the normalised copy the weight
    multiply keeps for the weight's gradient (RMSNorm e B, Gemma's fp32 one 4 B; LayerNorm none)."""
    return {"gemma": 4}.get(m.family, 0 if m.norm_type == "layernorm" else e)


def first_layer_without_input_grad(m: ModelSpec, T: int, h: int) -> int:
    """Bytes the first layer does not save when its input does not require grad (PEFT without gradient
    checkpointing): its first norm keeps no fp32 copy and no rsqrt (RMSNorm 4·T·h + 4·T; Gemma + 4·h; LayerNorm
    its 8·T statistics)."""
    if m.norm_type == "layernorm":
        return 8 * T
    return 4 * T * h + 4 * T + (4 * h if m.family == "gemma" else 0)


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
