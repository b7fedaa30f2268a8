"""The calculator page's breakdown table and formula panel, built once per distinct estimate and unit and kept in
small LRUs shared by every session (they are never mutated).
"""
from __future__ import annotations

import re

from dashboard.memo import LRU

_TABLES = LRU(256, max_bytes=16 * 2**20)  # HTML text: a few kB each
_FORMULAS = LRU(256, max_bytes=16 * 2**20)


def terms_key(est, unit: str) -> tuple:
    """What the table and the panel show: every term of the most loaded stage, the total, the unit."""
    return (tuple((t.key, t.component, t.label, t.bytes, t.formula, t.substituted, t.source, t.note)
                  for t in est.terms), est.total_bytes, unit)


def breakdown_rows(est, unit: str) -> list[dict]:
    """One row per term of the most loaded GPU, then the total row (what nvidia-smi shows)."""
    from calculator.core.result import COMPONENT_LABELS
    from calculator.core.units import format_bytes
    from calculator.planning.timeline import term_moments
    total = est.peak.total_bytes
    at = term_moments(est.peak)

    def share(n: int) -> str:
        return f"{n / total:.1%}" if total else ""
    rows = [{"Component": COMPONENT_LABELS.get(t.component, t.component), "Term": t.label, "Taken at": at[t.key],
             f"Memory ({unit})": format_bytes(t.bytes, unit), "Bytes": t.bytes, "Share": share(t.bytes)}
            for t in est.terms]
    rows.append({"Component": "Total", "Term": "per GPU (nvidia-smi)", "Taken at": "the peak",
                 f"Memory ({unit})": format_bytes(total, unit), "Bytes": total, "Share": share(total)})
    return rows


def breakdown_html(est, unit: str) -> str:
    """The breakdown table as one static HTML table (columns Component, Term, Taken at, Memory (unit), Bytes, Share; the
    last row the total), built once per distinct estimate and unit."""
    def build():
        from dashboard.views.html_blocks import table
        return table(breakdown_rows(est, unit), right=(f"Memory ({unit})", "Bytes", "Share"))
    return _TABLES.get_or_build(terms_key(est, unit), build)


def formula_markdown(est, unit: str) -> str:
    """Every term with its formula, the formula with values substituted, and its source: one Markdown text."""
    def build():
        from calculator.core.sources import SOURCES
        from calculator.core.units import format_bytes
        blocks = ["**Formula and source of every term**"]
        for t in est.terms:
            src = SOURCES.get(t.source)
            cite = f"[{src.title}]({src.url})" if src else f"`{t.source}`"
            blocks.append(f"**{t.label}** — {format_bytes(t.bytes, unit)} ({t.bytes:,} bytes)  \n"
                          f"`{t.formula}`  \n`= {t.substituted}`  \nSource: {cite}"
                          + (f" — {src.detail}" if src and src.detail else "")
                          + (f"  \n_{t.note}_" if t.note else ""))
        return "\n\n".join(blocks)
    return _FORMULAS.get_or_build(terms_key(est, unit), build)


# What each symbol of the formulas means (the legend under the formula panel lists those its formulas use).
SYMBOLS: dict[str, str] = {
    "N": "parameters", "N_gpu": "parameters held by this GPU", "N_dense": "dense parameters on this GPU",
    "N_experts": "expert parameters on this GPU", "N_linear": "parameters of the decoder layers' linears",
    "N_other": "the other parameters (embeddings, norms, head)", "N_trainable": "trainable (adapter) parameters",
    "d": "ZeRO / FSDP sharding group size", "d_exp": "sharding group of the expert parameters",
    "b_param": "bytes per parameter", "b_grad": "bytes per gradient", "b_master": "bytes per master weight",
    "b_opt": "bytes per optimizer-state element", "b_kv": "bytes per KV-cache element",
    "b_w": "bytes per quantized weight", "b_adapter": "bytes per adapter parameter",
    "b_act": "bytes per activation element", "n_tensors": "parameter tensors (one step counter each)",
    "m_inflight": "micro-batches whose activations a pipeline stage holds at once (1 without PP)",
    "L_stage": "decoder layers on this pipeline stage",
    "A_norms": "bytes the norms of one layer save for backward", "A_attention": "bytes attention saves per layer",
    "A_mlp": "bytes the MLP saves per layer", "e": "bytes per activation element (2 for bf16)",
    "T": "tokens per micro-batch on this GPU (b·s / (cp·tp with sequence parallel))",
    "s": "sequence length", "s_kv": "keys attended per query", "b": "micro-batch size", "h": "hidden size",
    "a": "attention heads", "k": "KV heads (top-k experts in MoE terms)", "f": "FFN (intermediate) size",
    "V": "vocabulary size", "t": "tensor-parallel degree", "c": "context-parallel degree",
    "p": "pipeline stages", "v": "virtual stages per GPU (interleaved)", "r": "LoRA rank",
    "U": "the largest FSDP / ZeRO-3 unit (parameters gathered at once)", "M": "the largest module",
    "φ": "factored optimizer elements per parameter", "C_ctx": "CUDA context", "W_cublas": "one cuBLAS workspace",
    "d_head": "head dimension", "E": "routed experts", "w": "sliding window",
    "frag%": "fragmentation share you set", "kv_heads": "KV heads on this GPU", "head_dim": "head dimension",
    "n_communicators": "NCCL communicators this GPU belongs to",
    "N_root": "parameters of FSDP's root unit (kept gathered)", "kv_lora_rank": "MLA's latent KV rank",
    "rope_dim": "MLA's rotary key dimension", "reduce_bucket_size": "DeepSpeed's gradient reduce bucket (elements)",
    "sub_group_size": "DeepSpeed's optimizer sub-group (elements)",
    "max_live": "DeepSpeed ZeRO-3's max live parameters (elements)",
    "prefetch_bucket": "DeepSpeed ZeRO-3's prefetch bucket (elements)",
    "max_num_batched_tokens": "vLLM's tokens per forward pass", "max_num_seqs": "vLLM's sequences per batch",
    "chunked_prefill_size": "SGLang's chunked-prefill tokens", "rows": "logit rows computed per chunk",
    "next_pow": "the next power of two", "in": "a linear's input features", "out": "a linear's output features",
    "B": "bytes",
}
_TOKEN = re.compile(r"[A-Za-zφ]+(?:_[A-Za-z]+)*%?")


def symbol_legend(est) -> str:
    """Markdown: the symbols the shown formulas use, each with its meaning."""
    used: dict[str, str] = {}
    for t in est.terms:
        own = _TERM_SYMBOLS.get(t.key, {})
        for tok in _TOKEN.findall(t.formula):
            if tok in own:
                used.setdefault(f"{tok} ({t.key})", own[tok])
            elif tok in SYMBOLS:
                used.setdefault(tok, SYMBOLS[tok])
    if not used:
        return ""
    return "**Symbols**: " + "; ".join(f"`{s}` {meaning}" for s, meaning in used.items()) + "."


# Symbols that mean something else inside one term's formula.
_TERM_SYMBOLS = {"fragmentation": {"a": "calibrated share of the long-lived states",
                                   "b": "calibrated share of the working set"}}
