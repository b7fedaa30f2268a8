"""A Megatron-Core TE layer's saved tensors and loss head (calculator/impls/megatron_te_core.py), by formula."""
from calculator import Workload
from calculator.impls import megatron_te_core as core
from calculator.memory import activations as act
from calculator.model.spec import LayerKind, ModelSpec

CORE = dict(stack="megatron", impl="megatron-te")
# a Megatron GPT: LayerNorm, GELU, biases, learned positions, MHA (the CI test model)
GPT = ModelSpec(hidden_size=512, num_hidden_layers=12, num_attention_heads=8, intermediate_size=2048,
                vocab_size=50257, norm_type="layernorm", gated_mlp=False, hidden_act="gelu", qkv_bias=True,
                o_bias=True, mlp_bias=True, learned_position_embeddings=1024, dropout=0.1)


def _d(m, w):
    return act.dims(m, w)


def test_dense_layer_by_part():
    w = Workload(**CORE, micro_batch=4, seq_len=1024)
    d = _d(GPT, w)
    T, h, e, f, a = 4096, 512, 2, 2048, 8
    layer = core.layer(GPT, w, d, LayerKind("attention", "dense"))
    ln_linear = e * T * h + 8 * T + e * T * h  # input, mu + rsigma, normalised GEMM input
    assert layer.norms == 2 * ln_linear + 2 * T * h  # + the two hidden-dropout masks
    assert layer.attention == e * T * 3 * h + e * T * h + 4 * a * T  # qkv output (views), output, fp32 lse
    assert layer.mlp == e * T * f + e * T * f  # fc1 output (bias-GELU input), GELU output


def test_unfused_attention_keeps_softmax_mask_and_dropped_probs():
    w = Workload(**CORE, micro_batch=4, seq_len=1024, attention="eager")
    d = _d(GPT, w)
    scores = 8 * 4 * 1024 * 1024
    assert core.attention_saved(GPT, w, d) == 2 * 4096 * 4 * 512 + scores * (2 * 2 + 1)
    no_dropout = GPT.model_copy(update={"dropout": 0.0})
    assert core.attention_saved(no_dropout, w, d) == 2 * 4096 * 4 * 512 + scores * 2


def test_gqa_and_rope():
    m = ModelSpec(hidden_size=512, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                  intermediate_size=1024, vocab_size=1000)  # RoPE, GQA
    w = Workload(**CORE, seq_len=256)
    d = _d(m, w)
    e, T, qd, kvd = 2, 256, 512, 128
    # TE's get_qkv_layout copies the v view beside RoPE's new q and k: q, k, v once, the fused output freed
    assert core.attention_saved(m, w, d) == e * T * (qd + 2 * kvd) + e * T * qd + 4 * 8 * T
    # GQA without RoPE: the reshaped query copy and TE's k, v copies
    learned = m.model_copy(update={"learned_position_embeddings": 256})
    assert core.attention_saved(learned, w, d) == e * T * (qd + 2 * kvd) + e * T * qd + 4 * 8 * T
    # selective recompute: Megatron's checkpoint keeps its own q, k (RoPE's) and the v view of the fused output
    selective = Workload(**CORE, seq_len=256, recompute="selective")
    assert core.attention_saved(m, selective, d) == e * T * (qd + 2 * kvd) + e * T * (qd + kvd) + e * T * qd


def test_qk_norm_keeps_the_fused_output_and_te_copies_v():
    m = GPT.model_copy(update={"qk_norm": True})
    w = Workload(**CORE, micro_batch=4, seq_len=1024)
    d = _d(m, w)
    e, T, h, a = 2, 4096, 512, 8
    stats = 8 * T * (a + a)  # LayerNorm mu + rsigma per head row of q and k
    assert core.attention_saved(m, w, d) == e * T * 3 * h + stats + e * T * 3 * h + e * T * h + 4 * a * T


def test_blackwell_deterministic_training_with_dropout_keeps_flash_attentions_output():
    """TE falls back from cuDNN to FlashAttention (calculator.impls.te_attention): its bshd output beside the copy
    the projection keeps."""
    w = Workload(**CORE, micro_batch=4, seq_len=1024, gpu="b200", deterministic=True)
    d = _d(GPT, w)
    e, T, h = 2, 4096, 512
    hopper = Workload(**CORE, micro_batch=4, seq_len=1024, gpu="h100-sxm", deterministic=True)
    assert core.attention_saved(GPT, w, d) == core.attention_saved(GPT, hopper, d) + e * T * h
    nondeterministic = Workload(**CORE, micro_batch=4, seq_len=1024, gpu="b200")
    assert core.attention_saved(GPT, nondeterministic, d) == core.attention_saved(GPT, hopper, d)
    no_dropout = GPT.model_copy(update={"dropout": 0.0})
    assert core.attention_saved(no_dropout, w, d) == core.attention_saved(no_dropout, hopper, d)
    # micro-batch 1: FlashAttention's transposes are views, its output is the one returned (te_attention)
    one = w.model_copy(update={"micro_batch": 1, "seq_len": 4096})
    d1 = _d(GPT, one)
    assert core.attention_saved(GPT, one, d1) == core.attention_saved(GPT, hopper.model_copy(
        update={"micro_batch": 1, "seq_len": 4096}), d1)


def test_head_pads_the_vocabulary_and_follows_the_loss_fusion():
    d = _d(GPT, Workload(**CORE, parallel={"tp": 2}))
    v = 50432 // 2  # 50,257 padded to a multiple of 256
    for fusion, saved, ws in (("none", 4, 2), ("native", 4, 6), ("te", 2, 0)):
        head = core.head(GPT, Workload(**CORE, parallel={"tp": 2}, cross_entropy_fusion=fusion), d)
        assert head.saved[1].bytes == saved * d.T * v and head.transient == ws * d.T * v


def test_mtp_saved_is_a_layer_and_norms_per_mtp_layer_and_a_loss():
    w = Workload(**CORE, micro_batch=1, seq_len=512, mtp_layers=2)
    d = _d(GPT, w)
    layer_of = lambda kind: core.layer(GPT, w, d, kind)  # noqa: E731
    layers, loss = core.mtp_saved(GPT, w, d, layer_of)
    T, h, e = 512, 512, 2
    per = 2 * (e * T * h + 8 * T) + 2 * e * T * h + layer_of(LayerKind("attention", "dense")).total \
        + 2 * e * T * h + 8 * T
    assert layers == 2 * per and loss == 2 * 4 * T * 50304


def test_global_buffer_is_the_largest_gather_of_the_output_layer_and_the_allgather_dispatcher():
    # utils.py GlobalMemoryBuffer "mpu": the SP output layer gathers e·T·h; the allgather dispatcher e·T_sp·(etp·ep)·h
    sp = Workload(**CORE, micro_batch=4, seq_len=1024, parallel={"tp": 2, "sequence_parallel": True})
    assert core.global_buffer(GPT, sp, _d(GPT, sp)) == 2 * 4096 * 512
    head = core.head(GPT, sp, _d(GPT, sp))
    assert head.saved[-1].key == "global_buffer" and head.saved[-1].bytes == 2 * 4096 * 512
    no_sp = Workload(**CORE, micro_batch=4, seq_len=1024, parallel={"tp": 2})
    assert core.global_buffer(GPT, no_sp, _d(GPT, no_sp)) == 0 and len(core.head(GPT, no_sp, _d(GPT, no_sp)).saved) == 2
    moe = GPT.model_copy(update={"num_experts": 8, "num_experts_per_tok": 1, "moe_intermediate_size": 2048})
    ag = Workload(**CORE, micro_batch=4, seq_len=1024, moe_dispatcher="allgather",
                  parallel={"tp": 2, "ep": 2, "sequence_parallel": True})
    assert core.global_buffer(moe, ag, _d(moe, ag)) == 2 * 2048 * (2 * 2) * 512  # T_sp = 2048, g = etp·ep = 4


def test_moe_layer_adds_the_weighted_activation_and_the_deterministic_unpermute():
    moe = GPT.model_copy(update={"num_experts": 8, "num_experts_per_tok": 1, "moe_intermediate_size": 2048})
    par = {"tp": 2, "ep": 2, "sequence_parallel": True}
    base = Workload(**CORE, micro_batch=4, seq_len=1024, moe_dispatcher="allgather", parallel=par)
    det = base.model_copy(update={"deterministic": True})
    _, plain = core.moe_layer_saved(moe, base, _d(moe, base))
    _, kept = core.moe_layer_saved(moe, det, _d(moe, det))
    R, h, e = 2048 * 1 * 2, 512, 2  # T_sp · k · etp rows on this rank
    assert kept - plain == e * R * h  # index_add_ keeps the experts' output rows
    f = 2048 // 2
    fc1_in, fc1_out, probs, act_out, fc2_in = e * R * h, e * R * f, 4 * R, e * R * f, e * R * f
    T = 2048
    router, dispatcher = 4 * T * 8 + T * 8 + 4 * T * 1, 2 * T * 4 * (8 // 2)
    assert plain == fc1_in + fc1_out + probs + act_out + fc2_in + router + dispatcher


def test_ring_attention_replaces_the_views_with_its_kv_buffer():
    # MHA with learned positions: q is a view of the fused qkv output, which stays; + ring K/V + two outputs + lse
    w = Workload(**CORE, micro_batch=4, seq_len=1024, parallel={"tp": 2, "cp": 2, "sequence_parallel": True})
    d = _d(GPT, w)
    e, T, qd, kvd, a = 2, 2048, 256, 256, 4
    assert core.attention_saved(GPT, w, d) == e * T * (qd + 2 * kvd) + 2 * e * T * kvd + 2 * e * T * qd + 4 * a * T
    # RoPE: the rotated q enters the ring; the rotated k is copied into the ring buffer and freed, qkv freed too
    rope = GPT.model_copy(update={"learned_position_embeddings": 0})
    assert core.attention_saved(rope, w, d) == e * T * qd + 2 * e * T * kvd + 2 * e * T * qd + 4 * a * T
    # the all-gather and a2a variants keep the single-GPU layer's tensors (not priced separately)
    ag = w.model_copy(update={"cp_comm_type": "allgather"})
    assert core.attention_saved(GPT, ag, d) == e * T * 3 * 256 + e * T * 256 + 4 * a * T


def test_tp4_qkv_output_keeps_the_rest_of_a_residual_stream_block():
    """At TP 4 the kept fused qkv output (3 MiB) lands in a freed e·T·h block (4 MiB) and keeps its 1 MiB rest
    (calculator.impls.unsplit_block); with RoPE or GQA the output is freed for TE's copies, and at TP 1 it does
    not fit."""
    w = Workload(**CORE, micro_batch=4, seq_len=1024, parallel={"tp": 4})
    d = _d(GPT, w)
    e, T, qd = 2, 4096, 128
    assert core.qkv_block_rest(e, T, d) == 1 << 20
    assert core.attention_saved(GPT, w, d) == e * T * 3 * qd + (1 << 20) + e * T * qd + 4 * 2 * T
    rope = GPT.model_copy(update={"learned_position_embeddings": 0})
    assert core.attention_saved(rope, w, d) == e * T * 3 * qd + e * T * qd + 4 * 2 * T
    tp1 = Workload(**CORE, micro_batch=4, seq_len=1024)
    assert core.qkv_block_rest(e, T, _d(GPT, tp1)) == 0


def test_fp8_projection_keeps_only_its_quantized_input():
    """Under an FP8 recipe the output projection saves only its quantized input (TransformerEngine 4220403e,
    pytorch/module/linear.py _linear_forward: `inputmat = input_quantizer(inputmat)`, `saved_inputmat = inputmat`):
    the model-dtype attention output stays only where the attention kernel saves it — cuDNN's output (the tensor
    it returns), FlashAttention's own output beside the copy it returns; TE's unfused core saves none. The p2p
    ring keeps `out_part` (context_parallel.py AttnFuncWithCPAndKVP2P.forward) and loses cp_ring_saved's second
    output-sized tensor, taken as the projection's bf16 input (ring_attention_saved says what stays open)."""
    e, T, qd, a = 2, 4096, 512, 8
    bf16 = Workload(**CORE, micro_batch=4, seq_len=1024, gpu="h100-sxm")
    fp8 = bf16.model_copy(update={"fp8": "current"})
    d = _d(GPT, bf16)
    quantized = T * qd  # 1 B per element, one per-tensor scale
    # cuDNN (Hopper): the output stays (saved by the kernel) and the quantized copy comes beside it
    assert core.attention_saved(GPT, fp8, d) == core.attention_saved(GPT, bf16, d) + quantized
    # FlashAttention at micro-batch 4 (Blackwell, deterministic, dropout): its own output stays, the copy it
    # returns was only the projection's input
    fa16 = bf16.model_copy(update={"gpu": "b200", "deterministic": True})
    fa8 = fa16.model_copy(update={"fp8": "current"})
    assert core.attention_saved(GPT, fa8, d) == core.attention_saved(GPT, fa16, d) - e * T * qd + quantized
    # TE's unfused core: the output is only the projection's input
    eager16 = bf16.model_copy(update={"attention": "eager"})
    eager8 = eager16.model_copy(update={"fp8": "current"})
    assert core.attention_saved(GPT, eager8, d) == core.attention_saved(GPT, eager16, d) - e * T * qd + quantized
    # the p2p ring (TP 2, CP 2): q view of the fused output + ring K/V + out_part + the quantized copy + lse
    ring8 = Workload(**CORE, micro_batch=4, seq_len=1024, gpu="h100-sxm", fp8="current",
                     parallel={"tp": 2, "cp": 2, "sequence_parallel": True})
    dr = _d(GPT, ring8)
    T, qd, kvd, a = 2048, 256, 256, 4
    assert core.attention_saved(GPT, ring8, dr) == (e * T * (qd + 2 * kvd) + 2 * e * T * kvd + e * T * qd + T * qd
                                                   + 4 * a * T)


def test_fp8_mla_moe_and_mtp_keep_their_own_quantized_inputs():
    """Megatron's MLA (gpt_layer_specs.py, multi_latent_attention.py at Megatron-LM d98e8a64) under FP8: the q and
    kv down projections (TELinear) quantize the input norm's output once each — one copy more than the shared bf16
    tensor; the up projections (TELayerNormColumnParallelLinear) keep their normalised latents quantized; the
    output projection keeps only its quantized input after TE's unfused core. The shared expert's fc1 keeps its
    own quantized copy of the pre-MLP norm's output (the router keeps it in bf16); the MTP block's eh_proj keeps
    its 2h-wide input quantized (multi_token_prediction.py: the block runs in get_fp8_context)."""
    mla = ModelSpec(hidden_size=1024, num_hidden_layers=4, num_attention_heads=32, intermediate_size=4096,
                    vocab_size=50257, norm_type="rmsnorm", gated_mlp=True, hidden_act="silu", q_lora_rank=1536,
                    kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, head_dim=None,
                    family="deepseek", model_type="deepseek_v3", qk_norm=True, dropout=0.0)
    par = {"tp": 2, "sequence_parallel": True}
    bf16 = Workload(**CORE, micro_batch=4, seq_len=4096, gpu="h100-sxm", attention="eager", parallel=par)
    fp8 = bf16.model_copy(update={"fp8": "current"})
    d = _d(mla, bf16)
    e, T, h_sp, a, vd, latents = 2, 16384, 512, 16, 128, 1536 + 512
    kind = LayerKind("mla", "dense")
    change = T * h_sp + (1 - e) * T * latents + (1 - e) * T * a * vd
    assert core.mla_fp8_change(mla, fp8, d) == change and core.mla_fp8_change(mla, bf16, d) == 0
    assert core.layer(mla, fp8, d, kind).attention - core.layer(mla, bf16, d, kind).attention == change
    # cuDNN (not eager): its output stays, the projection's quantized copy comes beside it
    flash8 = fp8.model_copy(update={"attention": "flash"})
    assert core.mla_fp8_change(mla, flash8, d) == T * h_sp + (1 - e) * T * latents + T * a * vd
    # the shared expert: its fc2 input quantized as a dense MLP's, and its own quantized fc1 input
    moe = GPT.model_copy(update={"num_experts": 8, "num_experts_per_tok": 1, "moe_intermediate_size": 2048,
                                 "shared_expert_intermediate_size": 1024, "num_shared_experts": 1})
    w16 = Workload(**CORE, micro_batch=4, seq_len=1024, gpu="h100-sxm", moe_dispatcher="allgather", parallel=par)
    w8 = w16.model_copy(update={"fp8": "current"})
    dm = _d(moe, w16)
    T, h, h_sp, f, fs = 4096, 512, 256, 2048 // 2, 1024 // 2  # expert TP = TP = 2
    R = T // 2 * 2  # T_sp · k · etp rows (balanced)
    experts = (1 - e) * R * h + (1 - e) * R * f  # fc1 and fc2 inputs quantized
    shared = (1 - e) * T * fs + T * h_sp  # fc2 input quantized + fc1's own quantized input
    assert core.moe_layer_saved(moe, w8, dm)[1] - core.moe_layer_saved(moe, w16, dm)[1] == experts + shared
    # MTP: eh_proj's 2h-wide input quantized, beside what the MTP layer's decoder layer changes
    m16 = Workload(**CORE, micro_batch=1, seq_len=512, gpu="h100-sxm", mtp_layers=1)
    m8 = m16.model_copy(update={"fp8": "current"})
    dd = _d(GPT, m16)
    layers16, _ = core.mtp_saved(GPT, m16, dd, lambda kind: core.layer(GPT, m16, dd, kind))
    layers8, _ = core.mtp_saved(GPT, m8, dd, lambda kind: core.layer(GPT, m8, dd, kind))
    kind = LayerKind("attention", "dense")
    decoder = core.layer(GPT, m8, dd, kind).total - core.layer(GPT, m16, dd, kind).total
    assert layers8 - layers16 == (1 - e) * 2 * 512 * 512 + decoder


def test_mla_keeps_a_copy_of_the_value_alone_at_any_micro_batch():
    """Megatron's qkv_up_proj_and_rope_apply (multi_latent_attention.py, Megatron-LM adc69dba l.656-780) splits the kv
    up projection's output into k_no_pe, which only feeds torch.cat, and value, copied by .contiguous(): the unfused
    core keeps e·T·a·d_v whatever the micro-batch. transformers keeps the whole output (d_nope + d_v) at micro-batch
    1 and the copy above it (activations.mla_attention_saved), so Megatron's count is e·T·a·d_nope lower at 1 and
    transformers' own at 2."""
    mla = ModelSpec(hidden_size=1024, num_hidden_layers=4, num_attention_heads=16, intermediate_size=4096,
                    vocab_size=50257, norm_type="rmsnorm", gated_mlp=True, hidden_act="silu", q_lora_rank=768,
                    kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=96, head_dim=None,
                    family="deepseek", model_type="deepseek_v3", dropout=0.0)
    for b, change in ((1, -2 * 4096 * 16 * 128), (2, 0)):
        w = Workload(**CORE, micro_batch=b, seq_len=4096, attention="eager")
        d = _d(mla, w)
        assert core.mla_value_copy_change(mla, w, d) == change
        hf = act.mla_attention_saved(d, mla, "eager")
        scores = 16 * b * 4096 * 4096  # TE's unfused core: the softmax output per score, no dropout
        assert core.mla_attention_saved(mla, w, d, hf) == hf + change - (4 + 2) * scores + 2 * scores
    flash = Workload(**CORE, micro_batch=1, seq_len=4096, attention="flash")
    assert core.mla_value_copy_change(mla, flash, _d(mla, flash)) == 0
