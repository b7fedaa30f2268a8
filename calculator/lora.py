"""LoRA and QLoRA fine-tuning: which linears get adapters, how many trainable parameters that makes, and what
the frozen base changes in the saved activations.

Hu et al. 2021 (LoRA, §4.1): a frozen W gets a trainable update B·A with A: in×r and B: r×out, so an adapter
adds r·(in + out) parameters. Dettmers et al. 2023 (QLoRA, §3): the frozen base is stored in NF4 with one fp32
absmax per 64 weights; the adapters train in the compute dtype. PEFT (`peft.tuners.lora`) saves the adapter's
input x for A's gradient and A's output (r wide) for B's; a frozen linear without an adapter saves nothing of
its input, and a frozen norm weight does not keep the normalised input.
"""
from __future__ import annotations

from calculator.model import ModelSpec

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
                     tp: int, quantized_base: bool = False) -> tuple[int, int, int]:
    """Saved activations of a LoRA layer relative to full fine-tuning, as (norms delta, MLP delta, adapters):
    frozen norm weights keep no normalised copy; a pre-norm output is kept only if an adapted linear reads it;
    the down projection's input only if it is adapted; each adapter adds its r-wide A output (e·T·r).
    A 4-bit base (QLoRA) keeps every linear's input anyway: bitsandbytes' MatMul4Bit saves its input whenever it
    requires grad (validation/CALIBRATION.md, item 12)."""
    names = {n for n, _, _ in adapted_linears(m, targets, moe_layer)}
    # A frozen norm weight keeps no normalised copy: HF RMSNorm's model-dtype copy (e B), Gemma's fp32 one (4 B);
    # LayerNorm saves its input and statistics either way.
    per_norm = {"gemma": 4}.get(m.family, 0 if m.norm_type == "layernorm" else e)
    norms = -m.norms_per_layer * per_norm * T * h
    adapters = e * T * rank * len(names)
    if quantized_base:
        return norms, 0, adapters
    if not names & {"q_proj", "k_proj", "v_proj", "qkv_proj", "q_a_proj", "kv_a_proj_with_mqa"}:
        norms -= e * T * h  # no adapter reads the attention norm's output
    if not names & {"gate_proj", "up_proj", "gate_up_proj", "fc1"}:
        norms -= e * T * h  # ... nor the MLP norm's output
    mlp = 0
    if not moe_layer and not names & {"down_proj", "fc2"}:
        mlp -= e * T * (f // tp)  # the frozen down projection does not keep its input
    return norms, mlp, adapters
