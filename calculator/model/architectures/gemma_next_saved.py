"""What a Gemma 3n / Gemma 4 decoder layer, and the model around its layers, saves for backward (transformers 5.23
models/gemma3n/modeling_gemma3n.py, models/gemma4/modeling_gemma4.py), in bytes; T tokens, e bytes per activation
element, widths on one rank. Measured byte for byte on tiny bf16 models on the CPU with eager attention
(tests/model/mappers/test_gemma_next.py with validation/trace/saved_by_module.py;
validation/architectures/table.json). FlashAttention / SDPA follow the engine's model of those kernels (not measured).

Building blocks:
- Gemma3nRMSNorm / Gemma4RMSNorm, x · pow(mean(x²) + eps, −0.5) · w in fp32: pow keeps its input and its result, so
  8 bytes per row beside the fp32 input and normalised copies (Gemma-3's norm keeps 4): 8·T·w + 8·T·rows; without a
  weight (v_norm, Gemma-4's router norm) the fp32 input only: 4·T·w + 8·T·rows. Each weighted norm also keeps an
  fp32 copy of its weight (4 B per element).
- eager attention: q, k, v as the core saves them, the output (o_proj's input), fp32 softmax and its cast. k and v
  are repeat_kv copies of a heads unless the layer has one KV head and one sequence (the expand stays a view), and a
  KV-shared layer's unexpanded k and v are its producer's (nothing of its own).
"""
from __future__ import annotations

from calculator.core.errors import InputError
from calculator.model.architectures.gemma_next import is_reuse, kv_heads_on_rank


def norm_saved(T: int, width: int, rows: int = 1) -> int:
    """A Gemma-3n / Gemma-4 RMSNorm with a weight: fp32 input and normalised copy, pow's input and result per row."""
    return 8 * T * width + 8 * T * rows


def unweighted_norm_saved(T: int, width: int, rows: int = 1) -> int:
    """The same norm without a weight (with_scale=False: v_norm, the MoE router's norm): fp32 input, two per row."""
    return 4 * T * width + 8 * T * rows


def attention_core_saved(d, w, a: int, hd: int, kv: int, reuse: bool, masked: bool) -> int:
    """q, k, v, the output and the kernel's own tensors of one layer (head_dim hd, kv heads on this rank).
    eager: e·T·qd + 2·e·T·K + e·T·qd + (4 + e)·a·b·s·s_kv with K = qd when repeat_kv copies (kv < a, unless kv = 1 at
    b = 1: a view), else kv·hd, 0 for a reuse layer's view of its producer's K/V;
    flash / SDPA: unexpanded K, fp32 logsumexp 4·a·T; SDPA copies K/V when the layer has a mask (the stage adds
    the copy beyond kv·hd, calculator.memory.sdpa; a reuse layer has its own copy: + 2·e·T·kv·hd here) or a head_dim
    above 256 (transformers integrations/sdpa_attention.py use_gqa_in_sdpa)."""
    e, T = d.e, d.T
    qd, kvd = a * hd, kv * hd
    selective = w.recompute == "selective"
    if w.attention == "eager" and not selective:
        expanded = kv < a and not (kv == 1 and d.b == 1)
        k = qd if expanded else (0 if reuse else kvd)
        return 2 * e * T * qd + 2 * e * T * k + (4 + e) * a * d.b * d.s * d.s_kv
    k = 0 if reuse else kvd
    copies = w.attention == "sdpa" and 1 < kv < a
    if copies and not masked and hd > 256:
        k = qd
    elif copies and masked and reuse:
        k = kvd
    return 2 * e * T * qd + 2 * e * T * k + (0 if selective else 4 * a * T)


def attention_saved(m, w, d, i: int) -> int:
    """Layer i's attention: q_norm (and k_norm, v_norm unless it reuses K/V), the core, and the fp32 copies of the
    q/k norm weights, 4·hd each."""
    g = m.gemma_next
    hd, kv, reuse = g.head_dims[i], kv_heads_on_rank(m, i, d.kv), is_reuse(m, i)
    T, a = d.T, d.a
    out = norm_saved(T, a * hd, a) + 4 * hd
    if not reuse:
        out += norm_saved(T, kv * hd, kv) + unweighted_norm_saved(T, kv * hd, kv) + 4 * hd
    return out + attention_core_saved(d, w, a, hd, kv, reuse, m.sdpa_mask_on(i, w))


def gemma3n_extras_saved(m, d) -> int:
    """A Gemma-3n layer beyond attention and MLP (Gemma3nTextDecoderLayer, Gemma3nTextAltUp,
    Gemma3nTextLaurelBlock): 8 h-wide norms (router_norm twice, input, post_laurel, post_attention, pre- and
    post-feedforward, post_per_layer_input) with their weight copies; 6 h-wide inputs (modality_router twice, q/k/v and
    LAuReL, MLP, scale_corrected_output, per_layer_input_gate); AltUp's n-stream predict input and repeated
    innovation 2·e·n·T·h, its coefficient operands e·T·n² + 8·T·n + 2·e·T·n + e·n·T and clamped weight e·n²;
    LAuReL's r-wide input; PLE's gelu input and output and projection input 3·e·T·p."""
    g, e, T, h = m.gemma_next, d.e, d.T, d.h
    n, r, p = g.altup_inputs, g.laurel_rank, g.ple_size
    return (8 * (norm_saved(T, h) + 4 * h) + 6 * e * T * h + 2 * e * n * T * h
            + e * T * n * n + 8 * T * n + 2 * e * T * n + e * n * T + e * n * n + e * T * r + 3 * e * T * p)


def gemma4_extras_saved(m, d) -> int:
    """A Gemma-4 layer beyond attention and MLP (Gemma4TextDecoderLayer): the four h-wide norms (and
    post_per_layer_input_norm with PLE) with their weight copies, the inputs of q/k/v and of the MLP, and with PLE
    the gate's input e·T·h and its gelu input, output and projection input 3·e·T·p."""
    p, e, T, h = m.gemma_next.ple_size, d.e, d.T, d.h
    norms = 4 + (1 if p else 0)
    return norms * (norm_saved(T, h) + 4 * h) + 2 * e * T * h + ((e * T * h + 3 * e * T * p) if p else 0)


def mlp_saved(m, d, i: int) -> int:
    """The gated MLP of width f_i (gate, up, gelu, product: 4·e·T·f); Gemma-3n's activation sparsity also keeps the
    gate output read by std() (e·T·f), the std (e·T) and a 0-dim multiplier (2 B)."""
    f, e, T = m.gemma_next.intermediate_sizes[i] // d.tp, d.e, d.T
    return 4 * e * T * f + ((e * T * f + e * T + 2) if m.gemma_next.sparse[i] else 0)


def moe_block_saved(m, d, etp: int) -> int:
    """Gemma-4's MoE block beside the MLP (Gemma4TextRouter, Gemma4TextExperts as transformers' grouped_mm): three
    norms with weight copies, the router's unweighted norm, its scaled output and projection input, fp32 softmax
    4·T·E, top-k indices 8·T·k, the renormalisation 4·T·k + 4·T, the per-expert scale 4·T·k + e·T·k, and the experts,
    S = T·k: e·S·(4·fm + 2·h) + 28·S + 4·E."""
    e, T, h = d.e, d.T, d.h
    E, k, fm = m.num_experts, m.num_experts_per_tok, m.expert_intermediate_size // etp
    S = T * k
    router = unweighted_norm_saved(T, h) + 2 * e * T * h + 4 * T * E + 8 * T * k + 4 * T * k + 4 * T + 4 * T * k \
        + e * T * k
    return 3 * (norm_saved(T, h) + 4 * h) + router + e * S * (4 * fm + 2 * h) + 28 * S + 4 * E


def layer_saved(m, w, d, kind) -> tuple[int, int, int]:
    """(norms and the per-layer extras, attention, MLP and MoE block) one layer of `kind` saves for backward, as
    transformers' own modules run (impl "hf"), with full fine-tuning (LoRA / QLoRA: gemma_next_lora.layer_delta)."""
    if w.impl != "hf":
        raise InputError("impl", f"{w.impl} kernels are not modelled for Gemma 3n / Gemma 4 layers: use hf")
    i = kind.slot
    extras = gemma3n_extras_saved(m, d) if m.gemma_next.generation == "3n" else gemma4_extras_saved(m, d)
    mlp = mlp_saved(m, d, i) + (moe_block_saved(m, d, w.parallel.expert_tp) if kind.ffn == "moe" else 0)
    return extras, attention_saved(m, w, d, i), mlp


# ---- outside the layers --------------------------------------------------------------------------------------------

def embedding_side_saved(m, d) -> int:
    """Before the first layer (Gemma3nTextModel / Gemma4TextModel.forward, get_per_layer_inputs,
    project_per_layer_inputs): with PLE the embeddings (e·T·h, read by the projection), per_layer_projection_norm over
    [T, L, p] with its weight copy and the per-layer inputs [T, L, p] every layer reads; Gemma-3n also the clipped
    copy of the ids for the per-layer table (8·T), AltUp's n − 1 embedding and unembedding projections with their
    magnitudes, 2·(n − 1)·(2·e·T·h + 2·e·T) + 4·e·T, and the last layer's n streams the unembedding reads, e·n·T·h.
    The batch's own ids are not counted (calculator.memory.activations.embedding_saved)."""
    g, e, T, h, L = m.gemma_next, d.e, d.T, d.h, m.num_hidden_layers
    p, n = g.ple_size, g.altup_inputs
    out = (e * T * h + norm_saved(T, L * p, L) + 4 * p + e * T * L * p) if p else 0
    if g.generation == "3n":
        out += 8 * T + 2 * (n - 1) * (2 * e * T * h + 2 * e * T) + 4 * e * T + e * n * T * h
    return out


def rotary_saved(m, d) -> int:
    """RoPE cos and sin [1, s, d_type] of each attention type (full and sliding layers have their own), saved once by
    the first layer of the type: Σ_types 2·e·s·d_type."""
    dims = {}
    for i in range(m.num_hidden_layers):
        dims.setdefault(m.layer_is_sliding(i), m.gemma_next.head_dims[i])
    return sum(2 * d.e * d.s * hd for hd in dims.values())


def final_norm_saved(m, d) -> int:
    """The final norm (8 bytes per row and its weight copy) and its output, the LM head's input."""
    return norm_saved(d.T, d.h) + 4 * d.h + d.e * d.T * d.h
