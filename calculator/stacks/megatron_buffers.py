"""Megatron-Core + Transformer Engine buffers held for the whole step, beyond the model states the engine already
counts (stack megatron with impl megatron-te; calculator/memory/megatron_core.applies). One function per buffer,
each citing its source (keys in calculator/core/megatron_sources.py):

- TE's cuBLASLt workspaces (transformer_engine/pytorch/cpp_extensions/gemm.py);
- TE's dummy weight gradients under gradient-accumulation fusion (transformer_engine/pytorch/module/base.py);
- the rows Megatron pads the vocabulary with (megatron/training/tokenizer/tokenizer.py), in the embedding and the
  output layer, with their gradients, master weights and Adam state;
- FP8 weight copies cached between micro-batches and FP8 scaling state (calculator/memory/fp8.py); the weights
  kept in FP8 with --fp8-param-gather;
- the MTP block's parameters, gradients and optimizer state on the last pipeline stage
  (megatron/core/transformer/multi_token_prediction.py).
"""
from __future__ import annotations

from calculator.core.dtypes import nbytes
from calculator.memory import fp8 as fp8_rules
from calculator.memory import megatron_core as core
from calculator.model.parameters import count_parameters, kind_params
from calculator.stacks.common import Line, StackContext, line


def te_workspace(ctx: StackContext) -> Line:
    w = ctx.original
    n_bytes, n = core.te_workspace_bytes(w.gpu, ctx.shard.experts > 0 and w.moe_grouped_gemm, w.tp_comm_overlap)
    return line("transient.te_workspace", "transient", f"TE cuBLASLt workspaces ({n})", n_bytes,
                "n × (32 MiB + 1 KiB) (4 MiB before Hopper)", ("{} × {:,} B", n, n_bytes // n), "te-workspace",
                "one for TE's GEMMs, + 4 for the grouped GEMM streams with MoE experts, + 3 for userbuffers "
                "(--tp-comm-overlap)")


def dummy_wgrads(ctx: StackContext) -> Line | None:
    w = ctx.original
    if not w.gradient_accumulation_fusion or ctx.shard.last_layer == ctx.shard.first_layer:
        return None
    p = w.parallel
    e = nbytes(1, w.precision.params)
    n_bytes, n = core.dummy_wgrad_bytes(ctx.m, p.tp, p.expert_tp, e)
    return line("transient.te_dummy_wgrad", "transient", f"TE dummy weight gradients ({n} shapes)", n_bytes,
                "Σ over distinct local weight shapes of rows × cols × b_param", ("{} shapes, {:,} B", n, n_bytes),
                "te-dummy-wgrad", "gradient-accumulation fusion writes into main_grad; TE keeps one dummy wgrad per "
                "(shape, dtype) for the run (--no-gradient-accumulation-fusion removes it)")


def fused_adam_holds_master(w) -> bool:
    """TE's FusedAdam keeps the master weights itself (master_weights=True, master_weight_dtype=main_params_dtype)
    under the precision-aware optimizer unless an FP8 recipe other than delayed scaling makes Megatron build fp32
    master shards (megatron/core/optimizer/optimizer_config.py use_precision_aware_optimizer_no_fp8_or_ds_fp8;
    megatron/core/optimizer/distrib_optimizer.py: shard_main_param = None, FusedAdam gets the bf16 shards)."""
    return w.precision_aware_optimizer and w.fp8 in ("none", "delayed")


def master_bytes_per_param(w) -> tuple[int, str]:
    """(bytes per parameter, what they are) of the master weights of workload `w` as given. Under TE's FusedAdam with
    bf16 weights and fp32 master weights only the fp32 value's low 16 bits are stored, as int16, beside the bf16
    weight that holds the high 16 (transformer_engine/pytorch/optimizers/fused_adam.py _initialize_state:
    store_param_remainders, Megatron-Core's default with TE ≥ 2.1: optimizer_config.py store_param_remainders)."""
    prec = w.precision
    if not prec.master_weights:
        return 0, ""
    if fused_adam_holds_master(w) and prec.params == "bf16" and prec.master_weights == "fp32":
        return 2, "fp32 as int16 remainders"
    return nbytes(1, prec.master_weights), prec.master_weights


def fused_adam_master(ctx: StackContext) -> list[Line]:
    """The master weights TE's FusedAdam holds for this GPU's shard of the distributed optimizer (dense parameters
    over dp·cp, routed experts over the expert-data-parallel group), in place of the master-weights term."""
    w = ctx.original
    if not fused_adam_holds_master(w) or w.parallel.offload_optimizer:  # offloaded: the CPU optimizer holds them
        return []
    b, what = master_bytes_per_param(w)
    if not b:
        return []
    n = _optimizer_shard(w.parallel, ctx.shard.dense, ctx.shard.experts)
    return [line("master_weights", "master_weights", f"Master weights ({what}, TE FusedAdam)", n * b,
                 "N_opt × b_master", ("{:,} × {} B", n, b), "te-fused-adam",
                 "--use-precision-aware-optimizer: TE's FusedAdam keeps them; with bf16 weights only the fp32 "
                 "value's low 16 bits (store_param_remainders)")]


def _optimizer_shard(p, dense: int, experts: int) -> int:
    """Parameters of this GPU's distributed-optimizer shard: dense over dp·cp, experts over the expert-DP group."""
    if not p.distributed_optimizer:
        return dense + experts
    expert_group = max(1, (p.dp * p.cp * p.tp) // (p.ep * p.expert_tp))
    return -(-dense // (p.dp * p.cp)) + -(-experts // expert_group)


def _state_lines(ctx: StackContext, key: str, label: str, dense: int, experts: int, source: str) -> list[Line]:
    """Weights, fp32 main grads, master weights and optimizer state of `dense` + `experts` parameters on this GPU,
    as the states workload holds them (the distributed optimizer shards master + Adam over dp·cp, or the
    expert-data-parallel group for experts)."""
    w, prec = ctx.w, ctx.w.precision
    p = w.parallel
    n = dense + experts
    if not n:
        return []
    n_opt = _optimizer_shard(p, dense, experts)
    per_state = 2 if w.optimizer in ("adamw", "adamw-8bit") else (1 if w.optimizer in ("sgd-momentum", "lion") else 0)
    out = [line(f"weights.{key}", "weights", f"{label}: weights ({prec.params})", nbytes(n, prec.params),
                "N × b_param", ("{:,} × {} B", n, nbytes(1, prec.params)), source),
           line(f"gradients.{key}", "gradients", f"{label}: main grads ({prec.grads})", nbytes(n, prec.grads),
                "N × b_grad", ("{:,} × {} B", n, nbytes(1, prec.grads)), source)]
    b_master, _ = master_bytes_per_param(ctx.original)
    if b_master:
        out.append(line(f"master_weights.{key}", "master_weights", f"{label}: master weights", n_opt * b_master,
                        "N_opt × b_master", ("{:,} × {} B", n_opt, b_master), source))
    if per_state:
        out.append(line(f"optimizer_states.{key}", "optimizer_states", f"{label}: optimizer state",
                        per_state * nbytes(n_opt, prec.optimizer_states), "states × N_opt × b_opt",
                        ("{} × {:,} × {} B", per_state, n_opt, nbytes(1, prec.optimizer_states)), source))
    return out


def vocab_padding(ctx: StackContext) -> list[Line]:
    """(V_pad − V)·h/t rows in the embedding (first stage; the last stage's copy of a tied one) and the output layer."""
    m, w, shard = ctx.m, ctx.original, ctx.shard
    p = w.parallel
    extra = core.padded_vocab(m.vocab_size, w.make_vocab_size_divisible_by, p.tp) - m.vocab_size
    if not extra:
        return []
    tables = int(shard.has_embedding) + int(shard.has_head and (not m.tie_word_embeddings or p.pp > 1))
    n = tables * extra * m.hidden_size // p.tp
    return _state_lines(ctx, "vocab_padding", f"Vocabulary padding ({extra} rows × {tables} tables)", n, 0,
                        "megatron-vocab-padding")


def mtp_params(ctx: StackContext) -> tuple[int, int]:
    """(dense, routed-expert) parameters of the MTP block on this GPU (last stage only): per layer enorm, hnorm,
    eh_proj (2h → h, split by TP), one decoder layer of the model's last layer's kind, a final norm; plus the word
    and position embeddings when an untied model is split over pipeline stages (the block embeds its input)."""
    m, w, shard = ctx.m, ctx.original, ctx.shard
    if not (w.mtp_layers and shard.has_head):
        return 0, 0
    p, h = w.parallel, m.hidden_size
    norm = h * (2 if m.norm_type == "layernorm" else 1)
    lay = kind_params(m, m.layer_kind(m.num_hidden_layers - 1))
    dense = lay.tp_local(p.tp) + lay.router + lay.norms
    experts = -(-lay.routed_experts // (p.ep * p.expert_tp))
    per = 3 * norm + -(-2 * h * h // p.tp) + dense
    emb = (-(-count_parameters(m).embedding // p.tp)) if (p.pp > 1 and not m.tie_word_embeddings) else 0
    return w.mtp_layers * per + emb, w.mtp_layers * experts


def mtp_linear(ctx: StackContext) -> int:
    """The MTP block's TE linear weights on this GPU (last stage only), counted like the decoder layers'
    (StageShard.layer_linear): per layer eh_proj (2h → h, TEColumnParallelLinear) and the decoder layer's attention,
    MLP and shared-expert weights split by TP, its routed experts by EP × expert TP. Their FP8 copies are cached as
    the decoder layers' are: the block runs in Megatron's fp8 context (multi_token_prediction.py get_fp8_context)."""
    m, w, shard = ctx.m, ctx.original, ctx.shard
    if not (w.mtp_layers and shard.has_head):
        return 0
    p, h = w.parallel, m.hidden_size
    lay = kind_params(m, m.layer_kind(m.num_hidden_layers - 1))
    per = (-(-2 * h * h // p.tp) + lay.tp_local(p.tp)
           + -(-lay.routed_experts // (p.ep * p.expert_tp)))
    return w.mtp_layers * per


def mtp_states(ctx: StackContext) -> list[Line]:
    dense, experts = mtp_params(ctx)
    return _state_lines(ctx, "mtp", f"MTP block ({ctx.original.mtp_layers} layers)", dense, experts, "megatron-mtp")


def fp8_buffers(ctx: StackContext) -> list[Line]:
    w, shard = ctx.original, ctx.shard
    if w.fp8 == "none":
        return []
    n_linear = shard.layer_linear + mtp_linear(ctx)
    out = []
    cache = fp8_rules.weight_cache_bytes(w.fp8, n_linear, w.gpu, w.fp8_param_gather)
    if cache:
        copies = "column-wise" if w.fp8_param_gather else ("row- and column-wise" if fp8_rules.needs_transpose(
            w.fp8, w.gpu) else "row-wise")
        out.append(line("weights.fp8_cache", "weights", f"{w.fp8} weight copies cached by TE ({copies})", cache,
                        "N_linear × bytes per quantized element × copies", ("{:,} weights", n_linear), "te-fp8",
                        "quantized on the first micro-batch of a step, kept to its end"))
    if w.fp8_param_gather:
        saved = nbytes(n_linear, w.precision.params) - fp8_rules.param_bytes(w.fp8, n_linear)
        out.append(line("weights.fp8_params", "weights", "TE linear weights kept in FP8 (--fp8-param-gather)", -saved,
                        "−N_linear × (b_param − bytes per quantized element)", ("{:,} weights", n_linear), "te-fp8"))
    return out + fp8_scaling(w, shard)


def fp8_scaling(w, shard) -> list[Line]:
    """TE's FP8 scaling state of the stage's modules (four per decoder or MTP layer), any data-parallel wrapper."""
    modules = 4 * (shard.last_layer - shard.first_layer) + (4 * w.mtp_layers if shard.has_head else 0)
    scaling = fp8_rules.scaling_state_bytes(w.fp8, modules)
    if not scaling:
        return []
    return [line("transient.fp8_scaling", "transient", f"FP8 scaling state ({w.fp8})", scaling,
                 "TE modules × 5 tensors × 4 B × (history + 2)", ("{} modules", modules), "te-fp8")]


def persistent(ctx: StackContext) -> tuple[Line, ...]:
    """Every Megatron-Core buffer of this stage held for the whole step."""
    out: list[Line] = [te_workspace(ctx)]
    dummy = dummy_wgrads(ctx)
    if dummy is not None:
        out.append(dummy)
    out += fused_adam_master(ctx) + vocab_padding(ctx) + mtp_states(ctx) + fp8_buffers(ctx)
    return tuple(out)
