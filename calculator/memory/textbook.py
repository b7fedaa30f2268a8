"""The two closed-form activation models beside the exact one (calculator/memory/activations.py): Korthikanti et al.
2022 ("textbook") and Fujii et al. 2024, per decoder layer; activations.py re-exports both."""
from __future__ import annotations

from calculator.model.spec import ModelSpec
from calculator.core.workload import Workload


def textbook_layer(m: ModelSpec, w: Workload) -> int:
    """Korthikanti et al. 2022 Eq. 1–4 (bf16): s·b·h·(34 + 5·a·s/h) per layer; selective drops 5·a·s/h;
    full recompute 2·s·b·h; with TP: sbh(10 + 24/t + 5as/(ht)), with TP+SP everything / t; CP divides s."""
    p = w.parallel
    s, b, h, a, t = w.seq_len // p.cp, w.micro_batch, m.hidden_size, m.num_attention_heads, p.tp
    sbh = s * b * h
    if w.recompute == "full":
        return 2 * sbh // (t if p.sequence_parallel else 1)
    attn = 0 if w.recompute == "selective" else 5 * a * s * s * b  # the 5·a·s/h term times s·b·h
    if p.sequence_parallel or t == 1:
        return (34 * sbh + attn) // t
    return 10 * sbh + (24 * sbh + attn) // t


def fujii_layer(m: ModelSpec, w: Workload, moe: bool) -> int:
    """Fujii et al. 2024 §3: s·b·h·(12 + 4k/a + 8f/h) bytes per layer (bf16, FlashAttention, SP), MoE FFN
    2·s·b·(h + 4·f_e·topk) in place of the dense FFN's 8·s·b·f; divided by t·c."""
    p = w.parallel
    s, b, h = w.seq_len, w.micro_batch, m.hidden_size
    attn_norms = s * b * (12 * h + 4 * h * m.kv_heads // m.num_attention_heads)
    if moe:
        ffn = 2 * s * b * (h + 4 * m.expert_intermediate_size * m.num_experts_per_tok)
    else:
        ffn = 8 * s * b * m.intermediate_size
    return (attn_norms + ffn) // (p.tp * p.cp)
