"""Compressed attention, DeepSeek-V4's token mixer (DeepSeek-V4 report §2.3; transformers 5.23
models/deepseek_v4/modeling_deepseek_v4.py, cited below by class), in three kinds of layer, one per value of the
config's layer_types (compress_ratios 0 / 4 / 128 in a legacy config.json):

    compressed_window  "sliding_attention": the attention alone over a sliding window of keys
    compressed_sparse  "compressed_sparse_attention" (CSA): beside the window, one compressed KV entry per r = 4
                       tokens (two overlapping series, width 2r, stride r), of which a lightning indexer picks the
                       index_topk each query reads
    compressed_heavy   "heavily_compressed_attention" (HCA): beside the window, one entry per r' = 128 tokens, all read

DeepseekV4Attention (every kind): q_a_proj h → q_lora_rank, q_a_norm (RMSNorm), q_b_proj → heads·head_dim, an
unweighted per-head RMSNorm on q; kv_proj h → head_dim, kv_norm: ONE key head that is also the value (shared-KV MQA,
num_key_value_heads = 1); partial interleaved RoPE on the trailing rope dims of q and k, undone on the output;
a learned sink logit per head (sinks); the grouped low-rank output projection: o_a_proj, a DeepseekV4GroupedLinear
(an nn.Linear of in = heads·head_dim / o_groups, out = o_groups·o_lora_rank, applied per group with bmm), then
o_b_proj o_groups·o_lora_rank → h. No linear has a bias.
DeepseekV4HCACompressor: kv_proj, gate_proj h → head_dim, position_bias (r', head_dim), kv_norm (head_dim).
DeepseekV4CSACompressor: kv_proj, gate_proj h → 2·head_dim, position_bias (r, 2·head_dim), kv_norm (head_dim), and
its DeepseekV4Indexer: kv_proj, gate_proj h → 2·dI, position_bias (r, 2·dI), kv_norm (dI), q_b_proj q_lora_rank →
nI·dI, scorer.weights_proj h → nI. The rotary tables are buffers.

The model's other departures from the engine's layer are ModelSpec options, not this kind: hyper-connections
(hc_mult residual streams, hc_shapes below) and the MoE (hash-routed layers have the same learned gate weight as
top-k ones; their tid2eid table is a buffer).

Training (compressed_saved.py; calculator.memory.parallel.check_divisibility calls check_training) is modelled for
full fine-tuning with transformers' eager modules, no or full recompute, on one GPU (stack hf-trainer) or with pure
data parallelism (any dp; tp = pp = ep = cp = 1) under PyTorch DDP, FSDP2 or DeepSpeed ZeRO 1-3, held to the
CPU-traced goldens tests/golden/deepseek-v4-tiny__*, tests/golden_stacks/deepseek-v4-tiny-cast__* and the two-process
gloo trace tests/golden_stacks/deepseek-v4-tiny.json (validation/architectures/dsv4_stacks.py); the rest is refused
naming the field (TRAINING_MISSING here; Megatron by its stack's rule, calculator.stacks.common.check_fp32_kept).
What happens to the fp32-kept parameters (fp32_parameters) is the stack's FP32_KEPT rule: on one GPU and under DDP
they keep fp32 weights, gradients and optimizer states (calculator/stages/held.py _fp32_kept) and, under DDP, fp32
gradient buckets of their own; FSDP2 (after accelerate's fp32 upcast, gathered in MixedPrecisionPolicy's bf16) and
DeepSpeed's bf16 engine make them bf16 parameters like the rest, and the estimate runs on the model so changed
(CompressedSpec.fp32_kept False: compressed_saved's bf16-weight terms). Under HF Trainer's DDP
without gradient checkpointing (find_unused_parameters=True) the CSA indexers' parameters, which get no gradient,
are skipped; with gradient checkpointing it passes False and DDP raises at the second iteration unless
ddp_find_unused_parameters=True is set (traced in the golden).
"""
from __future__ import annotations

from pydantic import ConfigDict, Field

from calculator.core import bounds as B
from calculator.core.dtypes import nbytes
from calculator.core.errors import InputError
from calculator.core.hash_once import HashedOnce
from calculator.model.architectures.shapes import Shape, linear

SOURCE = "compressed-attention"
# a kind -> (the layer type config.json names, how the page names it)
KINDS = {"compressed_window": ("sliding_attention", "DeepSeek-V4 sliding-window attention"),
         "compressed_sparse": ("compressed_sparse_attention", "compressed sparse attention (CSA)"),
         "compressed_heavy": ("heavily_compressed_attention", "heavily compressed attention (HCA)")}
TRAINING_MISSING = ("training DeepSeek-V4 is modelled for full fine-tuning on one GPU (stack hf-trainer) or with "
                    "data parallelism under PyTorch DDP, FSDP2 or DeepSpeed ZeRO (transformers' eager modules, a bf16 "
                    "or fp16 model, no recompute or full recompute: architectures/compressed_saved.py, held to "
                    "CPU-traced goldens); not yet {what}")


def check_training(w) -> None:
    """Refuse, naming the field, the DeepSeek-V4 training workloads the estimate has not been validated for
    (TRAINING_MISSING): LoRA / QLoRA (PEFT 0.21's all-linear LoRA fails on DeepseekV4GroupedLinear, traced on the
    CPU; other targets and the frozen base's saved tensors are not traced), selective or op-level recompute,
    pipeline, expert or context parallelism (each GPU would run part of the model: not traced; tensor parallelism
    is memory.parallel's refusal), another kernel implementation than transformers' own, attention other than
    eager (the only one transformers runs V4 with), fp32 weights or autocast (compressed_saved counts a
    low-precision model's fp32 copies), another activation model than the exact one. Data parallelism is the
    stack's question, its FP32_KEPT rule (calculator/stacks/common.py): DDP keeps every module and dtype as on one
    GPU, FSDP2 and DeepSpeed cast the fp32-kept parameters to bf16 (modelled on the cast model), Megatron is refused
    (check_fp32_kept)."""
    p = w.parallel
    refused = (("mode", w.mode != "train", f"mode = {w.mode}"),
               ("finetune", w.finetune != "full", f"{w.finetune}: PEFT (0.21) wraps o_a_proj, a "
                                                  "DeepseekV4GroupedLinear (an nn.Linear applied per group with bmm), "
                                                  "as a plain linear, and an all-linear adapter's output does not "
                                                  "match the grouped one's (the forward fails); other targets and the "
                                                  "frozen base's saved tensors are not traced"),
               ("attention", w.attention != "eager", f"attention = {w.attention} (transformers runs DeepSeek-V4 "
                                                     "with eager attention only: _supports_sdpa = _supports_flash_attn "
                                                     "= False; set attention to eager)"),
               ("recompute", w.recompute not in ("none", "full"), f"recompute = {w.recompute}"),
               ("impl", w.impl != "hf", f"impl = {w.impl}"),
               ("precision", w.precision.params not in ("bf16", "fp16") or (w.precision.activations or "bf16")
                not in ("bf16", "fp16"), "fp32 weights or activations (autocast)"),
               ("activation_model", w.activation_model != "exact", f"the {w.activation_model} activation model"))
    for field, bad, what in refused:
        if bad:
            raise InputError(field, TRAINING_MISSING.format(what=what))
    for field in ("pp", "ep", "cp"):
        if getattr(p, field) > 1:
            raise InputError(field, TRAINING_MISSING.format(
                what=f"{field} = {getattr(p, field)} (data parallelism only: every GPU runs the whole model)"))


class CompressedSpec(HashedOnce):
    """DeepSeek-V4's attention in the config's own terms (DeepseekV4Config)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    q_lora_rank: int = Field(gt=0, le=B.MAX_HIDDEN, strict=True)
    o_groups: int = Field(gt=0, le=B.MAX_HEADS, strict=True)
    o_lora_rank: int = Field(gt=0, le=B.MAX_HIDDEN, strict=True)
    window: int = Field(gt=0, le=B.MAX_WINDOW, strict=True)  # sliding_window
    csa_rate: int = Field(gt=0, le=1 << 20, strict=True)  # compress_rates["compressed_sparse_attention"]
    hca_rate: int = Field(gt=0, le=1 << 20, strict=True)  # compress_rates["heavily_compressed_attention"]
    index_n_heads: int = Field(gt=0, le=B.MAX_HEADS, strict=True)
    index_head_dim: int = Field(gt=0, le=B.MAX_HEAD_DIM, strict=True)
    index_topk: int = Field(gt=0, le=1 << 30, strict=True)
    # the trailing channels of each head RoPE rotates: int(head_dim · partial_rotary_factor), the config's or
    # qk_rope_head_dim / head_dim (DeepseekV4Config.__post_init__)
    rope_dim: int = Field(default=64, ge=0, le=B.MAX_HEAD_DIM, strict=True)
    sinkhorn_iters: int = Field(default=20, ge=0, le=1 << 10, strict=True)  # hc_sinkhorn_iters
    # whether the parameters of _keep_in_fp32_modules_strict are fp32 while the step runs: True as from_pretrained
    # loads a bf16 / fp16 model (and as PyTorch DDP keeps it); False under a stack that casts every parameter to the
    # compute dtype (FSDP2's MixedPrecisionPolicy after accelerate's fp32 upcast, DeepSpeed's bf16 engine:
    # calculator/stacks/common.py KeptDtype), which the estimate runs on a copy of the model (stacks.model_as_run)
    fp32_kept: bool = Field(default=True, strict=True)


def rate(m, name: str) -> int:
    """Source tokens per compressed entry of a kind (0: no compressor)."""
    c = m.compressed
    return {"compressed_window": 0, "compressed_sparse": c.csa_rate, "compressed_heavy": c.hca_rate}[name]


def attention_shapes(m) -> list[Shape]:
    """DeepseekV4Attention's own tensors in registration order: q_a_proj, q_a_norm, q_b_proj, kv_proj, kv_norm,
    o_a_proj (g·dg, heads·head_dim / g), o_b_proj, sinks."""
    c, h, a, d = m.compressed, m.hidden_size, m.num_attention_heads, m.head_dim
    return (linear(h, c.q_lora_rank) + [(c.q_lora_rank,)] + linear(c.q_lora_rank, a * d) + linear(h, d) + [(d,)]
            + [(c.o_groups * c.o_lora_rank, a * d // c.o_groups)] + linear(c.o_groups * c.o_lora_rank, h) + [(a,)])


def compressor_shapes(m, name: str) -> list[Shape]:
    """The compressor's tensors: HCA kv_proj, gate_proj (h → d), position_bias (r', d), kv_norm; CSA the same at
    2·d wide (kv_norm stays d) plus its indexer's at dI, q_b_proj and scorer.weights_proj."""
    c, h, d, r = m.compressed, m.hidden_size, m.head_dim, rate(m, name)
    if name == "compressed_heavy":
        return 2 * linear(h, d) + [(r, d), (d,)]
    if name != "compressed_sparse":
        return []
    return 2 * linear(h, 2 * d) + [(r, 2 * d), (d,)] + indexer_shapes(m)


def indexer_shapes(m) -> list[Shape]:
    """A CSA layer's indexer (DeepseekV4Indexer): its own compressor at index_head_dim (kv_proj, gate_proj h → 2·dI,
    position_bias (r, 2·dI), kv_norm), q_b_proj (q latent → nI·dI) and scorer.weights_proj (h → nI). It returns
    top-k indices only, so none of these tensors ever gets a gradient (Kind.no_grad_shapes)."""
    c, h, r = m.compressed, m.hidden_size, m.compressed.csa_rate
    dI, nI = c.index_head_dim, c.index_n_heads
    return 2 * linear(h, 2 * dI) + [(r, 2 * dI), (dI,)] + linear(c.q_lora_rank, nI * dI) + linear(h, nI)


def tp_replicated_shapes(m, name: str) -> list[Shape]:
    """What tensor parallelism leaves whole on every rank of a compressed-attention layer: q_a_proj, q_a_norm, kv_proj
    (the one shared key-and-value head) and kv_norm, and the whole compressor with its indexer. vLLM 0.33
    models/deepseek_v4/attention.py (fused_wqa_wkv: MergedColumnParallelLinear with disable_tp; the Indexer's wq_b and
    weights_proj ReplicatedLinear), compressor.py (fused_wkv_wgate with disable_tp, ape, norm); SGLang 0.5.23
    models/deepseek_v4.py (wq_a / wkv or the fused wqkv_a: ReplicatedLinear), layers/attention/dsv4/compressor.py
    and indexer.py (ReplicatedLinear). Split by heads: q_b_proj, o_a_proj (by groups), o_b_proj and the sinks."""
    c, h, d = m.compressed, m.hidden_size, m.head_dim
    return linear(h, c.q_lora_rank) + [(c.q_lora_rank,)] + linear(h, d) + [(d,)] + compressor_shapes(m, name)


def hc_shapes(h: int, n: int) -> list[Shape]:
    """One DeepseekV4HyperConnection (attn_hc and ffn_hc in every decoder layer): fn ((2 + n)·n, n·h), base
    ((2 + n)·n), scale (3): the pre, post and comb weights of n = hc_mult streams from the flattened streams."""
    return [((2 + n) * n, n * h), ((2 + n) * n,), (3,)]


def hc_head_shapes(h: int, n: int) -> list[Shape]:
    """DeepseekV4HyperHead (the model's hc_head, collapsing the streams before the final norm): hc_fn (n, n·h),
    hc_base (n), hc_scale (1)."""
    return [(n, n * h), (n,), (1,)]


def fp32_parameters(m, layers, with_head: bool) -> int:
    """Parameters of `layers` (and of hc_head and the final norm with the head) that from_pretrained keeps in fp32
    in a bf16 model (DeepseekV4PreTrainedModel._keep_in_fp32_modules_strict: attn_hc, ffn_hc, hc_head, sinks,
    position_bias and every norm, "norm" matching all of them): per layer both hyper-connections, the two layer
    norms, q_a_norm, kv_norm, the sinks, and the compressor's position_bias and kv_norm (CSA: its indexer's too).
    0 when the stack runs them in the compute dtype (CompressedSpec.fp32_kept False)."""
    c, h, n, d = m.compressed, m.hidden_size, m.hc_mult, m.head_dim
    if not c.fp32_kept:
        return 0
    per = {}
    for name in KINDS:
        r = rate(m, name)
        compressor = {"compressed_heavy": r * d + d,
                      "compressed_sparse": r * 2 * d + d + r * 2 * c.index_head_dim + c.index_head_dim}.get(name, 0)
        hc = 2 * ((2 + n) * n * (n * h + 1) + 3) if n else 0
        per[name] = hc + 2 * h + c.q_lora_rank + d + m.num_attention_heads + compressor
    total = sum(per[m.layer_kind(i).mixer] for i in layers)
    return total + ((n * n * h + n + 1 if n else 0) + h if with_head else 0)


def indexer_fp32_parameters(m, layers) -> int:
    """Of fp32_parameters, the CSA indexers' (their compressor's position_bias and kv_norm: r·2·dI + dI per CSA
    layer), which get no gradient (indexer_shapes); 0 when none are kept in fp32."""
    c = m.compressed
    if c is None or not c.fp32_kept:
        return 0
    csa = sum(m.layer_kind(i).mixer == "compressed_sparse" for i in layers)
    return csa * (c.csa_rate * 2 * c.index_head_dim + c.index_head_dim)


def linears(m, name: str) -> list[tuple[str, int, int]]:
    """(module name, in_features, out_features) of the layer's nn.Linear modules, the output projection last
    (o_a_proj as the nn.Linear it subclasses: its weight is that shape, applied per group)."""
    c, h, a, d = m.compressed, m.hidden_size, m.num_attention_heads, m.head_dim
    out = [("q_a_proj", h, c.q_lora_rank), ("q_b_proj", c.q_lora_rank, a * d), ("kv_proj", h, d)]
    if name == "compressed_heavy":
        out += [("compressor.kv_proj", h, d), ("compressor.gate_proj", h, d)]
    elif name == "compressed_sparse":
        dI, nI = c.index_head_dim, c.index_n_heads
        out += [("compressor.kv_proj", h, 2 * d), ("compressor.gate_proj", h, 2 * d),
                ("indexer.kv_proj", h, 2 * dI), ("indexer.gate_proj", h, 2 * dI),
                ("indexer.q_b_proj", c.q_lora_rank, nI * dI), ("weights_proj", h, nI)]
    return out + [("o_a_proj", a * d // c.o_groups, c.o_groups * c.o_lora_rank),
                  ("o_b_proj", c.o_groups * c.o_lora_rank, h)]


def window_tokens(m, tokens: int) -> int:
    """Tokens the sliding-window part keeps: the last window − 1 (DynamicSlidingWindowLayer.update keeps
    full[:, :, -sliding_window + 1:]; all of them at a window of 1)."""
    w = m.compressed.window
    return tokens if w == 1 else min(tokens, w - 1)


def cache_bytes(m, name: str, batch: int, tokens: int, dtype: str) -> int:
    """What one layer's cache holds after `tokens` tokens (a prefill, or a prefill and decode steps; the tensors'
    own sizes), for `batch` sequences, head_dim d, r = the kind's rate:
    - window: the last W − 1 keys, which are also the values. "sliding_attention" layers get transformers'
      DynamicSlidingWindowLayer, whose update is handed kv twice and keeps two copies, 2·b·min(T, W − 1)·d·e;
      DeepseekV4HCACache / DeepseekV4CSACache keep one (self.values = self.keys), b·min(T, W − 1)·d·e.
    - HCA: compressed_kv["compressor"], ⌊T/r⌋ entries of d; buffer_kv / buffer_gate, the T mod r projected tokens
      of the window not yet closed (d each): b·e·d·(⌊T/r⌋ + 2·(T mod r)).
    - CSA: the same for the compressor at 2·d wide buffers and for the indexer at dI (2·dI buffers), plus each
      one's overlap_kv / overlap_gate, the last closed window's first series (r rows of d, resp. dI), once a window
      has closed; overlap_gate is in fp32 (it is the gate plus position_bias, a parameter transformers keeps fp32:
      _keep_in_fp32_modules_strict).
    After a prefill the window and the buffers are views of the prefill's full projections (the storage of all T
    tokens stays allocated until the first decode step replaces them); counted here, as everywhere in the
    engine, is what the tensors hold. Held to the real cache by tests/model/mappers/test_deepseek_v4.py."""
    d, e, T = m.head_dim, nbytes(1, dtype), tokens
    kept = window_tokens(m, T)
    if name == "compressed_window":
        return int(2 * batch * kept * d * e)
    r = rate(m, name)
    entries, rest = divmod(T, r)
    widths = [d] if name == "compressed_heavy" else [d, m.compressed.index_head_dim]
    total = batch * kept * d * e
    for width in widths:
        series = 1 if name == "compressed_heavy" else 2  # CSA projects both overlapping series
        total += batch * e * width * (entries + 2 * series * rest)
        if name == "compressed_sparse" and entries:
            total += batch * r * width * (e + 4)
    return int(total)


def linear_flops_per_token(m, name: str, context: int | None = None) -> float:
    """Forward FLOPs per query beyond the linears over `context` tokens before it: scores and weighted sum over the
    window's keys (K = V, head_dim wide) and the compressed entries it reads (HCA: all ⌊T/r'⌋; CSA: at most
    index_topk), 4·heads·head_dim per key, plus the CSA indexer's scoring, 2·nI·(dI + 1) per compressed entry.
    Without `context`: the window alone."""
    a, d, c = m.num_attention_heads, m.head_dim, m.compressed
    ctx = context or c.window
    keys = min(ctx, c.window)
    r = rate(m, name)
    entries = ctx // r if r else 0
    if name == "compressed_sparse":
        return 4.0 * a * d * (keys + min(entries, c.index_topk)) + 2.0 * c.index_n_heads * (
            c.index_head_dim + 1) * entries
    return 4.0 * a * d * (keys + entries)


class Kind:
    """One kind of compressed-attention layer, with the registry's interface (architectures/__init__.py)."""

    SOURCE = SOURCE
    WITH_ATTENTION = False  # the layer is its own attention: DeepseekV4Attention, not the engine's
    READS_INPUT: frozenset[str] = frozenset()

    def __init__(self, name: str):
        self.NAME = name
        self.LAYER_TYPE, self.LABEL = KINDS[name]

    def shapes(self, m) -> list[Shape]:
        return attention_shapes(m) + compressor_shapes(m, self.NAME)

    def tp_replicated_shapes(self, m) -> list[Shape]:
        return tp_replicated_shapes(m, self.NAME)

    def no_grad_shapes(self, m) -> list[Shape]:
        """A CSA layer's indexer (indexer_shapes); HCA and sliding layers have none."""
        return indexer_shapes(m) if self.NAME == "compressed_sparse" else []

    def linears(self, m) -> list[tuple[str, int, int]]:
        return linears(m, self.NAME)

    def state_bytes(self, m, batch: int, model_dtype_bytes: float) -> int:
        """Nothing whatever the length: the whole cache grows with the tokens (cache_bytes)."""
        return 0

    def cache_bytes(self, m, batch: int, tokens: int, dtype: str) -> int:
        return cache_bytes(m, self.NAME, batch, tokens, dtype)

    def linear_flops_per_token(self, m, context: int | None = None) -> float:
        return linear_flops_per_token(m, self.NAME, context)

    def saved(self, m, d, w) -> int:  # never asked: architectures.layer_saved counts the whole layer
        raise InputError("mode", TRAINING_MISSING.format(what="this path"))

    def frozen_saved(self, m, d, w, adapted: frozenset[str]) -> int:
        raise InputError("finetune", TRAINING_MISSING.format(what="LoRA / QLoRA"))


KIND_OBJECTS = {name: Kind(name) for name in KINDS}
