"""What DeepSeek-V4 saves for backward in transformers 5.23 (models/deepseek_v4/modeling_deepseek_v4.py, eager
attention, no cache, a bf16 model loaded as from_pretrained loads it: the modules of _keep_in_fp32_modules_strict in
fp32: attn_hc, ffn_hc, hc_head, sinks, position_bias, q_a_norm, kv_norm and every norm), for b sequences of s tokens
(T = b·s), e = 2 bytes per activation (a bf16 or fp16 model: in fp32 the .float() copies are the tensors
themselves), each storage once.

layer(): one decoder layer, traced per module with validation/trace/saved_by_module.py on tiny models
(tests/model/mappers/test_deepseek_v4.py holds every term to it; architectures.layer_saved hands it to the training
stage). The rest of a training step, held to the whole-step goldens tests/golden/deepseek-v4-tiny__* (traced by
validation/architectures/dsv4_golden.py; tests/model/mappers/test_deepseek_v4_training.py term by term):
indexer_retained, the CSA indexer's scoring graph, allocated through the step (calculator/stages/kinds.py);
head, hc_head's collapse and the fp32-weight final norm, and hyper_head_backward, the backward's peak inside
hc_head's input_norm (calculator/impls/hf.py); checkpointed_input and checkpointed_shared, what full recompute keeps
(calculator/stages/kinds.py). The fp32-kept parameters' weights, gradients and optimizer states are
calculator/stages/held.py's. With those parameters in bf16 (CompressedSpec.fp32_kept False: FSDP2 and DeepSpeed
train them so, calculator/stacks/common.py KeptDtype) hyper_connection, hyper_head and attention() count what the
bf16 weights change (fp32 copies of the hyper-connection weights, a bf16 sink softmax), held to the cast goldens
tests/golden_stacks/deepseek-v4-tiny-cast__* (tests/model/mappers/test_deepseek_v4_cast.py). Modelled: full
fine-tuning on one GPU or data parallel under DDP, FSDP2 or DeepSpeed ZeRO, eager attention, no or full recompute,
a bf16 / fp16 model. Not modelled (compressed.check_training and the stacks' FP32_KEPT rules refuse them, naming the
field): LoRA / QLoRA, selective recompute, TP, pipeline stages, EP, CP, Megatron, fp32 weights or autocast.
Not counted: the model's buffers (tid2eid, RoPE inv_freq; 17,968 B of the tiny goldens).
Not validated: the working set of a layer recomputed in backward (the stage's generic rule, one layer's saved
tensors less the head's): the traced one is 0.52-0.56 MB (one CSA layer's backward temporaries) above it in the
tiny full-recompute goldens, whose peak is the optimizer step's.
"""
from __future__ import annotations

from calculator.model.architectures.compressed import rate


def fp32_weight_rmsnorm(T: int, width: int) -> int:
    """DeepseekV4RMSNorm with its fp32 weight: the fp32 input copy and normalised x, an fp32 rsqrt per row,
    8·T·w + 4·T (its output is the next linear's input, counted there)."""
    return 8 * T * width + 4 * T


def hyper_connection(m, T: int, e: int) -> int:
    """One DeepseekV4HyperConnection (attn_hc or ffn_hc) with its input_norm, n = hc_mult streams of h:
    input_norm keeps the fp32 flattened streams and an fp32 rsqrt per token (4·T·n·h + 4·T); F.linear(·, fn.float())
    its fp32 input (4·T·n·h); the fp32 (2 + n)·n mixes (one storage the pre / post / comb splits view); the
    sigmoids' outputs (4·T·n each, pre and post), the comb softmax's (4·T·n²), pre + eps (4·T·n); Sinkhorn-Knopp's
    2·iters − 1 divisions, each its numerator and column or row sums (4·T·(n² + n)); and the bf16 streams
    the collapse multiplies (e·T·n·h: the layer's input, or the streams after attention). With fn in the compute
    dtype (CompressedSpec.fp32_kept False) fn.float() is a new fp32 tensor F.linear keeps, 4·(2 + n)·n·n·h; its
    base and scale (a 0-dim slice each) add nothing (traced: tests/golden_stacks/deepseek-v4-tiny.json)."""
    n, h, iters = m.hc_mult, m.hidden_size, m.compressed.sinkhorn_iters
    divisions = max(2 * iters - 1, 1)
    fn_copy = 0 if m.compressed.fp32_kept else 4 * (2 + n) * n * n * h
    return (8 * T * n * h + 4 * T + 4 * T * (2 + n) * n + 12 * T * n + 4 * T * n * n
            + divisions * 4 * T * (n * n + n) + e * T * n * h + fn_copy)


def stream_mixing(m, T: int, e: int) -> int:
    """DeepseekV4DecoderLayer.forward after a block: post.to(dtype) · block output, and comb.to(dtype)ᵀ @ streams:
    the cast post and comb and the block's output, e·T·(n + n² + h) (the streams are the hyper-connection's)."""
    n = m.hc_mult
    return e * T * (n + n * n + m.hidden_size)


def _rope_tables(rows: int, rd: int, e: int) -> int:
    """apply_rotary_pos_emb's repeat_interleave'd cos and sin, which the fp32 multiplies keep: 2·rows·rd·e."""
    return 2 * rows * rd * e


def attention(m, name: str, b: int, s: int, e: int) -> int:
    """DeepseekV4Attention and its compressor:
    q_a_proj's input e·T·h, q_a_norm, q_b_proj's input e·T·ql, q_b_norm (unweighted, per head: the fp32 copy and
    rsqrt, the rsqrt cast back and its bf16 input, (4 + e)·T·a·(d + 1)), kv_norm; the RoPE tables of three calls
    (q, kv, the output's inverse rotation: position_ids of batch 1, s·rd each); eager_attention_forward over
    L = s + entries keys: the roped q e·T·a·d, torch.matmul's copies of the repeated k and v 2·e·b·a·L·d (b > 1;
    at b = 1 the K = V storage e·L·d), the max's int64 indices
    8·b·a·s, the fp32 softmax over [scores | sink] (the sinks are fp32: torch.cat promotes) 4·b·a·s·(L + 1) and
    its bf16 cast e·b·a·s·L (with bf16 sinks, CompressedSpec.fp32_kept False: a bf16 softmax e·b·a·s·(L + 1),
    whose slice the matmul reads without a cast); o_a_proj's regrouped input e·T·a·d, o_b_proj's e·T·g·dg.
    HCA compressor (entries = ⌊s/r⌋ > 0): the fp32 gate softmax 4·b·s'·d and its cast e·b·s'·d (s' = entries·r),
    the kv_proj output it weights (the whole storage, e·T·d), kv_norm, the RoPE tables of the entries' positions
    (per sequence). CSA: the overlapping windows' new_kv e·b·entries·2r·d, the fp32 softmax and its cast over them,
    kv_norm, the entries' RoPE tables; its indexer hands on only top-k indices: its graph is freed at once."""
    c, h, a, d = m.compressed, m.hidden_size, m.num_attention_heads, m.head_dim
    T, rd, r = b * s, c.rope_dim, rate(m, name)
    entries = s // r if r else 0
    keys = s + entries
    own = (e * T * h + fp32_weight_rmsnorm(T, c.q_lora_rank) + e * T * c.q_lora_rank
           + (4 + e) * T * a * (d + 1) + fp32_weight_rmsnorm(T, d) + 3 * _rope_tables(s, rd, e))
    # repeat_kv of the single K = V head is a stride-0 view; torch.matmul folds it into bmm's batch with a copy
    # of k and one of v unless the batch folds as a view (b = 1 or one head): then the kv storage, once
    kv = e * b * keys * d if b == 1 or a == 1 else 2 * e * b * a * keys * d
    softmax = (4 * b * a * s * (keys + 1) + e * b * a * s * keys if c.fp32_kept else e * b * a * s * (keys + 1))
    core = e * T * a * d + kv + 8 * b * a * s + softmax
    out = e * T * a * d + e * T * c.o_groups * c.o_lora_rank
    if not entries:
        return own + core + out
    rows = b * entries
    compressor = fp32_weight_rmsnorm(rows, d) + _rope_tables(rows, rd, e)
    if name == "compressed_heavy":
        compressor += (4 + e) * rows * r * d + e * T * d
    else:
        compressor += (4 + 2 * e) * rows * 2 * r * d
    return own + core + out + compressor


def moe(m, T: int, e: int) -> int:
    """DeepseekV4SparseMoeBlock: the router (top-k or hash: the same learned gate) keeps its input e·T·h,
    sqrt(softplus(logits))'s input and output 2·e·T·E, the gather's int64 indices 8·T·k, the gathered weights and
    their sum e·T·(k + 1); the grouped_mm experts per routed pair (S = T·k): the gathered input and expert output
    e·S·2h, the clamped SwiGLU (gate_up, the clamped gate, its SiLU, the clamped up, the product) e·S·6f, the
    routing weights e·S, three int64 index vectors 24·S, the int32 offsets 4·E; the shared DeepseekV4MLP
    (one, of moe_intermediate_size f): both clamps' inputs, the SiLU's input and output, the clamped up, the
    product, 6·e·T·f (its input is the router's)."""
    k, E, f, h = m.num_experts_per_tok, m.num_experts, m.expert_intermediate_size, m.hidden_size
    S = T * k
    router = e * T * h + 2 * e * T * E + 8 * T * k + e * T * (k + 1)
    experts = e * S * (2 * h + 6 * f) + e * S + 24 * S + 4 * E
    return router + experts + 6 * e * T * f


def layer(m, name: str, b: int, s: int, e: int) -> tuple[int, int, int]:
    """(norms and hyper-connections, attention, feed-forward) one layer of the kind saves: the two fp32-weight
    layer norms, both hyper-connections and the two stream mixings; attention(); moe()."""
    T = b * s
    norms = 2 * fp32_weight_rmsnorm(T, m.hidden_size) + 2 * hyper_connection(m, T, e) + 2 * stream_mixing(m, T, e)
    return norms, attention(m, name, b, s, e), moe(m, T, e)


def indexer_retained(m, name: str, b: int, s: int, e: int) -> int:
    """What a CSA layer's DeepseekV4Indexer leaves allocated from its forward to the end of the step, though the
    backward never reaches it (its top-k indices carry no gradient): its compressor's fp32 gate softmax, the cast
    and new_kv, (4 + 2·e)·b·E·2r·dI, kv_norm (fp32 weight), the RoPE tables of the entries (per sequence) and of
    the queries (position_ids of batch 1); DeepseekV4IndexerScorer's q.float() 4·T·nI·dI, the fp32 compressed
    keys torch.matmul broadcasts over the queries (its storage at b = 1, a copy 4·T·dI·E otherwise), and the ReLU's
    output 4·T·nI·E. E = ⌊s/r⌋ entries. Measured as live storage (validation/trace/accounting.py), which
    saved_by_module's per-module trace does not hold. 0 for the other kinds and before a window closes."""
    c, r = m.compressed, rate(m, name)
    entries = s // r if r else 0
    if name != "compressed_sparse" or not entries:
        return 0
    dI, nI, rd, T, rows = c.index_head_dim, c.index_n_heads, c.rope_dim, b * s, b * entries
    keys = 4 * rows * dI if b == 1 else 4 * T * dI * entries
    return ((4 + 2 * e) * rows * 2 * r * dI + fp32_weight_rmsnorm(rows, dI) + _rope_tables(rows, rd, e)
            + _rope_tables(s, rd, e) + 4 * T * nI * dI + keys + 4 * T * nI * entries)


def hyper_head(m, T: int, e: int) -> int:
    """DeepseekV4HyperHead (hc_head): input_norm's fp32 flattened streams and rsqrt (4·T·n·h + 4·T), F.linear's
    fp32 normalised input (4·T·n·h), the fp32 mixes, sigmoid output and pre + eps (12·T·n), and the bf16 streams
    the collapse multiplies (e·T·n·h). With its weights in the compute dtype (CompressedSpec.fp32_kept False)
    hc_fn.float() and hc_scale.float() are new fp32 tensors F.linear and the mul keep, 4·(n·n·h + 1)."""
    n, h = m.hc_mult, m.hidden_size
    copies = 0 if m.compressed.fp32_kept else 4 * (n * n * h + 1)
    return 8 * T * n * h + 4 * T + 12 * T * n + e * T * n * h + copies


def head(m, T: int, e: int) -> int:
    """Before the loss: hc_head (hyper_head, with hc_mult > 1: DeepseekV4Model.forward calls it then), the
    fp32-weight final norm (DeepseekV4RMSNorm) and its output, the LM head's input e·T·h."""
    return (hyper_head(m, T, e) if m.hc_mult else 0) + fp32_weight_rmsnorm(T, m.hidden_size) + e * T * m.hidden_size


def checkpointed_input(m, T: int, e: int) -> int:
    """What a checkpointed DeepseekV4DecoderLayer (a GradientCheckpointingLayer) keeps: its input, the
    [b, s, hc_mult, h] streams, e·T·n·h (DeepseekV4Model.forward expands the embedding into them with
    .contiguous())."""
    return e * T * max(m.hc_mult, 1) * m.hidden_size


def checkpointed_shared(m, s: int, e: int) -> int:
    """What every checkpointed DeepseekV4DecoderLayer also receives and so keeps once for the step: the model's
    position_embeddings (DeepseekV4Model.forward: "main" and "compress", each cos and sin of s × rope_dim / 2,
    interleaved RoPE, position_ids of batch 1, model dtype) and position_ids (int64, 8·s)."""
    return 2 * 2 * s * (m.compressed.rope_dim // 2) * e + 8 * s


def hyper_head_backward(m, T: int, e: int) -> int:
    """Live in DeepseekV4HyperHead's backward at its peak, inside input_norm's (DeepseekV4UnweightedRMSNorm,
    autograd through pow, mean, rsqrt and mul): the streams' gradient from the collapse, cast to their dtype
    (e·T·n·h); F.linear's fp32 gradient of the normalised input and the pow / mean backward's fp32 temporaries and
    their product (5 × 4·T·n·h); input_norm's saved fp32 input (4·T·n·h). Everything else the head saved (the loss,
    the final norm, hc_head's other tensors) is freed by then: (e + 24)·T·n·h in all, traced
    (validation/architectures/dsv4_golden.py: backward peak at that mul)."""
    return (e + 24) * T * m.hc_mult * m.hidden_size
