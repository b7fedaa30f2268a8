"""The operations of one micro-batch on one GPU, forward and backward, for the roofline table and the step time.

`layer_forward` lists one decoder layer's operations as the Hugging Face block runs them (norms, QKV, RoPE, attention
core, output projection, residuals, MLP or routed experts) at the local shapes of one GPU (TP splits heads and the MLP
width, CP the sequence, EP the experts); `backward_of` turns each into its backward; `head_forward` / `head_backward`
are the embedding, final norm, LM head and loss. FLOP and byte rules: calculator.timing.roofline.
"""
from __future__ import annotations

from calculator.timing import roofline as R
from calculator.memory.activations import Dims
from calculator.core.dtypes import DTYPE_BITS
from calculator.memory.inference import GROUP_SCALE_BYTES, GROUP_SIZE_DEFAULTS
from calculator.memory.lora import adapted_linears
from calculator.model import architectures, zero_experts
from calculator.model.spec import LayerKind, ModelSpec
from calculator.model.parameters import attention_shapes, mla_tp_replicated_shapes, mlp_shapes
from calculator.timing.roofline import HOST_OPS, Op


def weight_bytes_per_element(dtype: str) -> float:
    """Bytes per weight a matmul reads: the dtype, plus a 4-byte scale per group of 4-/8-bit integer weights."""
    per = DTYPE_BITS[dtype] / 8
    if dtype in GROUP_SCALE_BYTES:
        per += GROUP_SCALE_BYTES[dtype] / GROUP_SIZE_DEFAULTS.get(dtype, 128)
    return per


def norm_kind(m: ModelSpec) -> str:
    if m.norm_type == "layernorm":
        return "layernorm"
    return "gemma_rmsnorm" if m.family in ("gemma", "gpt_oss") else "rmsnorm"


def _linears(shapes: list[tuple[int, ...]], tp: int, row_parallel_last: bool) -> list[tuple[int, int]]:
    """(in, out) of the 2-D weights among parameter shapes (stored out × in) on one TP rank: column-parallel ones
    split their output, the last one, when row-parallel (o_proj, down_proj), its input (Shoeybi et al. 2019)."""
    lin = [(s[1], s[0]) for s in shapes if len(s) == 2]
    out = [(i, max(1, o // tp)) for i, o in lin]
    if row_parallel_last and lin:
        i, o = lin[-1]
        out[-1] = (max(1, i // tp), o)
    return out


def _tp_split_and_whole(m: ModelSpec, tp: int) -> tuple[list[tuple[int, ...]], list[tuple[int, int]]]:
    """(the attention's tensors TP splits, (in, out) of the linears every rank keeps whole): MLA's down projections
    (parameters.mla_tp_replicated_shapes) stay whole; everything when tp is 1."""
    shapes = attention_shapes(m)
    if not m.is_mla or tp == 1:
        return shapes, []
    whole = [x for x in mla_tp_replicated_shapes(m) if len(x) == 2]
    rest = list(shapes)
    for x in whole:
        rest.remove(x)
    return rest, [(x[1], x[0]) for x in whole]


def _qkv_projection(d: Dims, split: list[tuple[int, int]], whole: list[tuple[int, int]], e: float, e_w: float) -> Op:
    """The projections before the attention core on one TP rank, as one operation. The linears every rank keeps
    whole (MLA's down projections) run, without sequence parallelism (vLLM, SGLang, transformers), over all T tokens;
    with it (Megatron-Core: TELinear "duplicated" on the s/tp local tokens, multi_latent_attention.py
    _qkv_down_projection) over T / tp. Either way each rank reads the whole weight."""
    if not whole:
        return R.grouped_linear("QKV projection", d.T, split, e, e_w)
    part = R.grouped_linear("QKV projection", d.T, split, e, e_w)
    rep = R.grouped_linear("", d.T // d.tp if d.h_sp < d.h else d.T, whole, e, e_w)
    # one operation of every linear: its backward's one more add sums the two groups' input gradients
    return part._replace(flops=part.flops + rep.flops, bytes=part.bytes + rep.bytes,
                         host_ops=part.host_ops + rep.host_ops, bwd_host_ops=part.bwd_host_ops + rep.bwd_host_ops + 1,
                         formula="Σ 2·T·in·out (MLA's down projections whole on every rank)")


def expected_experts_hit(experts: int, picks: float) -> float:
    """Experts that receive at least one of `picks` uniformly routed (token, slot) choices: E·(1 − (1 − 1/E)^picks)."""
    return experts * (1 - (1 - 1 / experts) ** picks)


def attention_core(m: ModelSpec, d: Dims, window: int | None, eager: bool, s_kv: int | None = None) -> Op:
    """The attention core at this GPU's shapes; s_kv: a decode step's cached tokens (no causal mask)."""
    d_qk, d_v = m.head_size, m.v_head_size
    kv_heads = d.a if m.is_mla else d.kv  # MLA expands its latent into full per-head keys and values
    if eager:
        keys = s_kv if s_kv is not None else d.s_kv
        return R.eager_attention(d.b, d.s, keys, d.a, kv_heads, d_qk, d_v, d.e)
    return R.flash_attention(d.b, d.s, d.a, kv_heads, d_qk, d_v, d.e, window, s_kv, s_full=d.s_kv)


def mixer_forward(m: ModelSpec, d: Dims, mixer: str, e_w: float) -> list[Op]:
    """A registry kind's forward (calculator/model/architectures/): its input projections as one grouped matmul
    (column-parallel), its core as one kernel of the kind's FLOPs per token that reads its inputs and writes its
    output once, its output projection (row-parallel)."""
    kind = architectures.mixer(mixer)
    T, e, tp = d.T, d.e, d.tp
    lin = kind.linears(m)
    proj = [(i, max(1, o // tp)) for _, i, o in lin[:-1]]
    out_in, out_out = lin[-1][1], lin[-1][2]
    core_in = sum(o for _, o in proj)
    return [R.grouped_linear(f"{kind.LABEL}: input projections", T, proj, e, e_w),
            Op(f"{kind.LABEL}: core", "forward", "attention", T * kind.linear_flops_per_token(m) / tp,
               e * T * (core_in + out_in // tp), HOST_OPS["flash"][0], "T × FLOPs per token of the kind's core",
               kind.SOURCE, bwd_host_ops=HOST_OPS["flash"][1]),
            R.linear(f"{kind.LABEL}: output projection", T, max(1, out_in // tp), out_out, e, e_w)]


def layer_forward(m: ModelSpec, d: Dims, *, moe: bool, window: int | None, eager: bool, e_w: float,
                  expert_tp: int = 1, ep: int = 1, s_kv: int | None = None, mixer: str = "attention",
                  ffn: str | None = None) -> list[Op]:
    """One decoder layer's forward operations on one GPU for T = d.T tokens (one micro-batch, or one decode step
    with s_kv cached tokens). mixer / ffn: the layer's kinds (ModelSpec.layer_kind) when not softmax attention with
    an MLP or experts (ffn None: by `moe`)."""
    T, e, h, tp = d.T, d.e, d.h, d.tp
    kind = norm_kind(m)
    ops: list[Op] = []
    ffn = ffn or ("moe" if moe else "dense")
    n_norms = m.norms_per_layer if "none" not in (mixer, ffn) else 1
    ops.append(R.norms("Norms", T * d.h_sp, e, kind, n_norms))
    if mixer not in ("attention", "mla"):
        if mixer != "none":
            ops.extend(mixer_forward(m, d, mixer, e_w))
            if architectures.with_attention(mixer):
                ops.extend(_attention_forward(m, d, window, eager, e_w, s_kv)[1:])
        ops.append(R.elementwise("Residual adds", R.residual_bytes(T, d.h_sp, e, count=1 if ffn == "none" else 2),
                                 HOST_OPS["residual"][0], "3e·T·h per residual add",
                                 bwd_host_ops=HOST_OPS["residual"][1]))
        if ffn == "moe":
            ops.extend(_moe_forward(m, d, e_w, expert_tp, ep))
        elif ffn == "dense":
            ops.extend(_mlp_forward(m, T, h, m.intermediate_size // tp, e, e_w))
        return ops
    if m.own_swa_heads:  # a layer type's own heads (MiMo-V2-Flash, Step-3.5): ModelSpec.attention_of
        m = m.attention_of(LayerKind(mixer, ffn, int(window is not None)))
        kv, a = max(m.kv_heads // tp, 1), m.num_attention_heads // tp
        d = d._replace(kv=kv, kvd=kv * m.head_size, a=a, qd=a * m.head_size)
    ops.extend(_attention_forward(m, d, window, eager, e_w, s_kv)[1:])
    ops.append(R.elementwise("Residual adds", R.residual_bytes(T, d.h_sp, e), HOST_OPS["residual"][0],
                             "2 × 3e·T·h", bwd_host_ops=HOST_OPS["residual"][1]))
    if m.dropout > 0:
        ops.append(R.elementwise("Dropout", 2 * (3 * e + 1) * T * d.h_sp, 2 * HOST_OPS["dropout"][0],
                                 "2 sites × (3e + 1)·T·h", bwd_host_ops=2 * HOST_OPS["dropout"][1]))
    if ffn == "moe":
        ops.extend(_moe_forward(m, d, e_w, expert_tp, ep))
    elif ffn == "dense":
        ops.extend(_mlp_forward(m, T, h, m.intermediate_size // tp, e, e_w))
    return ops


def _attention_forward(m: ModelSpec, d: Dims, window: int | None, eager: bool, e_w: float,
                       s_kv: int | None) -> list[Op]:
    """Softmax attention's operations, after a placeholder first entry: QKV, q/k norms, latent norms, RoPE, the
    core, the output projection."""
    T, e, tp = d.T, d.e, d.tp
    kind = norm_kind(m)
    ops: list[Op] = [None]  # type: ignore[list-item]
    shapes, whole = _tp_split_and_whole(m, tp)
    attn = _linears(shapes, tp, row_parallel_last=True)
    qkv, out = attn[:-1], attn[-1]
    qkv_op = _qkv_projection(d, qkv, whole, e, e_w)
    # a bias adds its gradient's sum over tokens; a fused qkv output's split concatenates the three gradients
    extra = (len(qkv) + len(whole) if m.qkv_bias else 0) + (2 if m.fused_qkv else 0)
    ops.append(qkv_op._replace(bwd_host_ops=qkv_op.bwd_host_ops + extra))
    if m.qk_norm:
        ops.append(R.norms("Q/K norms", T * (d.qd + d.kvd) / 2, e, kind, 2))
    if m.is_mla:  # kv_a_layernorm (and q_a_layernorm) on the latents
        latent = m.kv_lora_rank + (m.q_lora_rank or 0)
        ops.append(R.norms("Latent norms", T * latent / (2 if m.q_lora_rank else 1), e, kind,
                           2 if m.q_lora_rank else 1))
    if not m.learned_position_embeddings:
        rope = m.qk_rope_head_dim if m.is_mla else m.head_size
        width_q, width_k = d.a * rope, (rope if m.is_mla else d.kv * rope)
        host = HOST_OPS["rope"][0] + (HOST_OPS["mla_extra"][0] if m.is_mla else 0)
        bwd = HOST_OPS["rope"][1] + (HOST_OPS["mla_extra"][1] if m.is_mla else 0)
        ops.append(R.elementwise("RoPE", R.rope_bytes(T, width_q, width_k, e), host, "10e per element of q and k",
                                 bwd_host_ops=bwd))
    ops.append(attention_core(m, d, window, eager, s_kv))
    o_proj = R.linear("Output projection", T, out[0], out[1], e, e_w)
    ops.append(o_proj._replace(bwd_host_ops=o_proj.bwd_host_ops + (1 if m.o_bias else 0)))
    return ops


def _mlp_forward(m: ModelSpec, T: float, h: int, f: int, e: float, e_w: float, label: str = "MLP") -> list[Op]:
    shapes = _linears(mlp_shapes(h, f, m.gated_mlp, m.mlp_bias, m.fused_gate_up), 1, row_parallel_last=False)
    bias = 1 if m.mlp_bias else 0
    up = R.grouped_linear(f"{label} up/gate projections", T, shapes[:-1], e, e_w)
    down = R.linear(f"{label} down projection", T, shapes[-1][0], shapes[-1][1], e, e_w)
    ops = [up._replace(bwd_host_ops=up.bwd_host_ops + bias * len(shapes[:-1])),
           down._replace(bwd_host_ops=down.bwd_host_ops + bias)]
    if m.gated_mlp:
        ops.insert(1, R.elementwise(f"{label} activation", R.gated_activation_bytes(T, f, e),
                                    HOST_OPS["gated_act"][0], "act(gate) × up: 5e·T·f",
                                    bwd_host_ops=HOST_OPS["gated_act"][1]))
    elif m.hidden_act == "gelu_new":
        ops.insert(1, R.elementwise(f"{label} activation", 20 * e * T * f, HOST_OPS["gelu_tanh"][0],
                                    "gelu_new in 8 elementwise kernels: ≈ 20e·T·f",
                                    bwd_host_ops=HOST_OPS["gelu_tanh"][1]))
    else:
        ops.insert(1, R.elementwise(f"{label} activation", 2 * e * T * f, 1, "2e·T·f", bwd_host_ops=1))
    return ops


def routed_pairs(m: ModelSpec, T: int) -> tuple[float, float]:
    """(T·k routed (token, expert) pairs, those reaching a real expert). LongCat-Flash's zero_expert_num identity
    experts (VariantSpec.zero_experts) compute nothing: transformers' LongcatFlashExperts.forward
    (models/longcat_flash/modeling_longcat_flash.py, 5.23) only scales a pair sent to one by its routing weight, so
    under balanced routing T·k·n / (n + z) pairs run an expert's GEMMs (calculator.model.zero_experts.real_pairs)."""
    pairs = T * m.num_experts_per_tok
    z = m.variant.zero_experts if m.variant is not None else None
    return pairs, (zero_experts.real_pairs(T, m.num_experts_per_tok, m.num_experts, z) if z else pairs)


def expert_rows(T: int, tp: int, expert_tp: int) -> int:
    """Tokens whose routed pairs one GPU's experts compute: its T·etp / tp. Under TP a GPU holds T / tp tokens in
    the MoE layer (sequence parallelism: Megatron-Core's dispatchers take num_local_tokens = S/TP·B,
    megatron/core/transformer/moe/token_dispatcher.py), and the expert-TP group (etp ranks) all-gathers its
    members' tokens before the expert GEMMs of width f / etp; with etp = tp that is all T (the rows the layer's
    other linears see), with etp = 1 only the GPU's own T / tp — not all T at full width."""
    return T * expert_tp // tp if expert_tp < tp else T


def _moe_forward(m: ModelSpec, d: Dims, e_w: float, expert_tp: int, ep: int) -> list[Op]:
    """Router, then the routed experts as transformers runs them (integrations/moe.py grouped_mm_experts_forward):
    sort the T·k (token, expert) pairs, gather, two grouped GEMMs, gate, weight, un-permute, sum over k. Only the
    pairs that reach a real expert (routed_pairs: LongCat-Flash's identities take the rest) run the GEMMs and the
    gate; every pair is gathered, weighted and summed. The router scores the n + z experts."""
    T, e, h, E = d.T, d.e, d.h, m.num_experts
    hx = m.expert_hidden_size  # a latent MoE's experts read and write its width (calculator/model/latent_moe.py)
    f_e = m.expert_intermediate_size // expert_tp
    pairs, real = routed_pairs(m, expert_rows(T, d.tp, expert_tp))  # the all-to-all brings as many as it sends
    local = E // ep
    hit = min(local, expected_experts_hit(E, real * ep) / ep)
    width = (2 if m.gated_mlp else 1) * f_e
    scored = E + ((m.variant.zero_experts or 0) if m.variant is not None else 0)
    ops = [R.linear("Router", T, h, scored, e, e_w)._replace(host_ops=HOST_OPS["moe_router"][0],
                                                              bwd_host_ops=HOST_OPS["moe_router"][1]),
           Op("Routed experts (grouped GEMM)", "forward", "matmul",
              R.linear_flops(real, hx, width) + R.linear_flops(real, f_e, hx),
              e * real * (hx + width + f_e + hx) + e_w * hit * (hx * width + f_e * hx), 2,
              "2·T·k'·(h·(2)f + f·h), k' the picks of real experts; weights of the experts hit", "hf-moe",
              bwd_host_ops=4),
           R.elementwise("Expert dispatch, gate and combine", e * (pairs * 8 * hx + real * 5 * f_e),
                         HOST_OPS["moe_expert"][0], "(T·k·8h + T·k'·5f)·e", "hf-moe",
                         bwd_host_ops=HOST_OPS["moe_expert"][1])]
    if m.moe_latent_size:  # fc1_latent_proj (h → L) and fc2_latent_proj (L → h), replicated on every rank
        ops += [R.linear("MoE latent projection in", T, h, hx, e, e_w),
                R.linear("MoE latent projection out", T, hx, h, e, e_w)]
    shared = m.shared_expert_intermediate_size or m.num_shared_experts * m.expert_intermediate_size
    if shared:
        ops.extend(_mlp_forward(m, T, h, shared // d.tp, e, e_w, label="Shared expert"))
    return ops


def recomputed(ops: list[Op]) -> list[Op]:
    """What a checkpointed layer replays in backward. PyTorch's non-reentrant checkpoint stops recomputing once
    every saved tensor is back (torch/utils/checkpoint.py, early stop, on by default): the MLP's down projection
    and the last residual add, whose outputs nothing saves, are skipped."""
    out = []
    for o in ops:
        if o.name == "MLP down projection":
            continue
        if o.name == "Residual adds":
            o = o.scaled(0.5)
        out.append(o._replace(phase="recompute"))
    return out


def backward_of(op: Op, frozen: bool = False) -> Op:
    """The backward of a forward operation: 2× the matmul FLOPs (1× for a frozen weight: input gradient only);
    FlashAttention 2.5× (recomputes the scores, and their exponentials once: FlashAttention-2 Algorithm 2,
    P = exp(S − L), so `exps` stays the forward's); eager attention the score traffic of its backward kernels;
    elementwise about twice the bytes (read the saved input and the incoming gradient, write the gradient).
    Operators: the forward's own `bwd_host_ops` count (a frozen linear dispatches only its input gradient)."""
    host = op.bwd_host_ops if op.bwd_host_ops is not None else op.host_ops
    if op.kind == "attention":
        return op._replace(phase="backward", flops=2.5 * op.flops, bytes=2 * op.bytes, host_ops=host,
                           formula="2.5 × forward (FlashAttention-2)")
    if op.name.startswith("Attention core (eager)"):
        score_share = R.eager_score_bytes_backward(2) / R.eager_score_bytes_forward(2)
        return op._replace(phase="backward", flops=2 * op.flops, bytes=score_share * op.bytes, host_ops=host,
                           formula="4 score matmuls; (9e + 20) B per score")
    if op.kind in ("matmul", "matmul_fp32"):
        n = 1 if frozen else 2
        return op._replace(phase="backward", flops=n * op.flops, bytes=n * op.bytes,
                           host_ops=host - op.host_ops if frozen else host,
                           formula=f"{n} × forward" + (" (frozen: input gradient only)" if frozen else ""))
    return op._replace(phase="backward", bytes=2 * op.bytes, flops=2 * op.flops, host_ops=host,
                       formula="≈ 2 × forward bytes")


def lora_forward(m: ModelSpec, d: Dims, rank: int, targets: str, moe: bool) -> list[Op]:
    """PEFT LoRA adapters of one layer (peft/tuners/lora/layer.py Linear.forward, fp32 adapters on a bf16 base):
    x.to(fp32), A (in→r), B (r→out), × scaling, add to the base output, cast back: T·in·(8 + e) + T·out·(24 + 2e)
    bytes and 2·T·r·(in + out) FLOPs in fp32 per adapted linear."""
    T, e = d.T, d.e
    lin = [(i, o // d.tp) for _, i, o in adapted_linears(m, targets, moe)]
    flops = sum(R.linear_flops(T, i, rank) + R.linear_flops(T, rank, o) for i, o in lin)
    nbytes = sum(T * i * (8 + e) + T * o * (24 + 2 * e) for i, o in lin)
    return [Op("LoRA adapters", "forward", "matmul_fp32", flops, nbytes, len(lin) * HOST_OPS["lora_adapter"][0],
               "Σ 2·T·r·(in + out) fp32; T·in·(8 + e) + T·out·(24 + 2e) B", "lora")]


def lora_backward(op: Op, m: ModelSpec, d: Dims, rank: int, targets: str, moe: bool) -> Op:
    """Backward of the adapters: the casts (out: e + 4), × scaling (8), B and A weight gradients reading their fp32
    inputs and gradients (out: 4; in: 4 + 4), the fp32 input gradient cast back (4 + e) and added to the base
    input's gradient (3e): T·out·(16 + e) + T·in·(12 + 4e) bytes, 2 × the forward FLOPs."""
    T, e = d.T, d.e
    lin = [(i, o // d.tp) for _, i, o in adapted_linears(m, targets, moe)]
    nbytes = sum(T * o * (16 + e) + T * i * (12 + 4 * e) for i, o in lin)
    return op._replace(phase="backward", flops=2 * op.flops, bytes=nbytes,
                       host_ops=len(lin) * HOST_OPS["lora_adapter"][1],
                       formula="2 × forward FLOPs; T·out·(16 + e) + T·in·(12 + 4e) B")


def head_forward(m: ModelSpec, d: Dims, e_w: float, vocab_local: int, logits_tokens: float,
                 with_loss: bool) -> list[Op]:
    """Embedding lookup, final norm, LM head (on `logits_tokens` tokens) and the fp32 cross entropy."""
    T, e, h = d.T, d.e, d.h
    host = HOST_OPS["embed_loss"][0] - 3 if with_loss else 8
    ops = [R.elementwise("Embedding", 2 * e * T * h * (2 if m.learned_position_embeddings else 1), 3,
                         "gather: read and write e·T·h", "hf-llama"),
           R.norms("Final norm", logits_tokens * h, e, norm_kind(m), 1)._replace(host_ops=0, bwd_host_ops=0),
           R.linear("LM head", logits_tokens, h, vocab_local, e, e_w)._replace(host_ops=host)]
    if with_loss:
        extra = 6 * e * T * vocab_local if m.final_logit_softcapping else 0
        ops.append(R.elementwise("Loss (fp32 cross entropy)", R.loss_bytes_forward(T, vocab_local, e) + extra, 0,
                                 "(2e + 12)·T·V", "hf-loss", flops=5.0 * T * vocab_local))
    return ops


def head_backward(m: ModelSpec, d: Dims, e_w: float, vocab_local: int, frozen: bool, b_grad: float) -> list[Op]:
    """Backward of the loss, LM head, final norm and (unless frozen) the embedding's gradient scatter."""
    T, e, h = d.T, d.e, d.h
    lm = backward_of(R.linear("LM head", T, h, vocab_local, e, e_w), frozen)
    extra = 12 * e * T * vocab_local if m.final_logit_softcapping else 0
    ops = [Op("Loss (fp32 cross entropy)", "backward", "elementwise", 5.0 * T * vocab_local,
              R.loss_bytes_backward(T, vocab_local, e) + extra, HOST_OPS["embed_loss"][1],
              "(20 + 3e)·T·V", "hf-loss"),
           lm,
           backward_of(R.norms("Final norm", T * h, e, norm_kind(m), 1)._replace(host_ops=0, bwd_host_ops=0))]
    if not frozen:
        rows = m.embedding_vocab_size
        ops.append(Op("Embedding", "backward", "elementwise", 0.0, b_grad * rows * h / d.tp + 2 * e * T * h,
                      0, "zero the V×h gradient, scatter-add T rows", "hf-llama"))
    return ops
