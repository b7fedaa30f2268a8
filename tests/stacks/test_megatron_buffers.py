"""Megatron-Core + TE buffers of the megatron stack (calculator/stacks/megatron_buffers.py), each against its rule."""
from calculator import Workload
from calculator.memory import megatron_core as core
from calculator.model.presets import load_model
from calculator.stages.estimate import estimate

CORE = dict(stack="megatron", impl="megatron-te", gpu="h100-sxm", seq_len=2048)


def _terms(m, w, stage=0):
    return {t.key: t for t in estimate(m, w, with_fits=False).stages[stage].terms}


def test_buffers_only_with_stack_and_impl_named():
    m = load_model("llama-3.2-1b").spec
    named = _terms(m, Workload(**CORE, parallel={"tp": 2, "dp": 2}))
    default = _terms(m, Workload(impl="megatron-te", gpu="h100-sxm", seq_len=2048, parallel={"tp": 2, "dp": 2}))
    assert "transient.te_workspace" in named and "transient.te_dummy_wgrad" in named
    assert not any(k.startswith(("transient.te_", "weights.vocab")) for k in default)  # the planner's model


def test_dummy_wgrads_follow_gradient_accumulation_fusion():
    m = load_model("llama-3.2-1b").spec
    on = _terms(m, Workload(**CORE))
    off = _terms(m, Workload(**CORE, gradient_accumulation_fusion=False))
    assert on["transient.te_dummy_wgrad"].bytes == core.dummy_wgrad_bytes(m, 1, 1, 2)[0]
    assert "transient.te_dummy_wgrad" not in off


def test_vocab_padding_rows_carry_their_states():
    m = load_model("llama-3.2-1b").spec  # V 128,256 tied: padded to a multiple of 128·3 = 384
    w = Workload(**CORE, parallel={"tp": 1, "dp": 1}, make_vocab_size_divisible_by=384)
    t = _terms(m, w)
    extra = core.padded_vocab(128256, 384, 1) - 128256
    assert extra == 0 or t["weights.vocab_padding"].bytes == 2 * extra * m.hidden_size
    w = Workload(**CORE, make_vocab_size_divisible_by=1000)
    t = _terms(m, w)
    extra = core.padded_vocab(128256, 1000, 1) - 128256  # 744 rows
    assert t["weights.vocab_padding"].bytes == 2 * extra * m.hidden_size
    assert t["gradients.vocab_padding"].bytes == 4 * extra * m.hidden_size


def test_mtp_block_on_the_last_stage():
    m = load_model("deepseek-v3").spec
    assert m.mtp_layers == 1  # num_nextn_predict_layers
    p = {"tp": 8, "pp": 16, "ep": 8, "dp": 8, "distributed_optimizer": True, "pp_first_stage_layers": 3,
         "pp_last_stage_layers": 2}
    w = Workload(**{**CORE, "seq_len": 4096}, parallel=p, mtp_layers=1)
    est = estimate(m, w, with_fits=False)
    last = {t.key: t for t in est.stages[-1].terms}
    first = {t.key for t in est.stages[0].terms}
    assert "weights.mtp" in last and "activations.mtp" in last and "logits.mtp_loss" in last
    assert "weights.mtp" not in first
    h = m.hidden_size
    # enorm + hnorm + final norm (RMSNorm, h each), eh_proj 2h·h / TP, one MoE layer's dense part / TP + experts / EP
    assert last["weights.mtp"].bytes > 2 * (3 * h + 2 * h * h // 8)
    assert last["logits.mtp_loss"].bytes == last["logits.loss"].bytes  # one more loss of the same shape


def test_fp8_param_gather_stores_te_weights_in_fp8():
    m = load_model("llama-3.2-1b").spec
    t = _terms(m, Workload(**CORE, fp8="current", fp8_param_gather=True))
    assert t["weights.fp8_params"].bytes < 0  # 1 B instead of 2 for each TE linear weight
    assert t["weights.fp8_cache"].bytes == -t["weights.fp8_params"].bytes  # only the transpose stays cached


def test_grouped_gemm_adds_four_workspaces():
    m = load_model("mixtral-8x7b").spec
    p = {"tp": 2, "ep": 8, "dp": 8, "pp": 4}
    grouped = _terms(m, Workload(**CORE, parallel=p))
    seq = _terms(m, Workload(**CORE, parallel=p, moe_grouped_gemm=False))
    assert grouped["transient.te_workspace"].bytes == 5 * seq["transient.te_workspace"].bytes


def test_fp8_cache_holds_the_mtp_blocks_linear_weights_on_the_last_stage():
    """TE caches each FP8 linear's quantized weight (module/base.py _fp8_workspaces; on Hopper row-wise and the
    transpose, 1 B each), the MTP block's too: multi_token_prediction.py runs it in get_fp8_context. Per MTP layer
    on the last stage: eh_proj 2h·h / TP, the decoder layer's attention, MLP and shared expert / TP (MLA's down
    projections and latent norms whole: LayerParams.tp_local), experts / EP."""
    from calculator.model.parameters import kind_params
    m = load_model("deepseek-v3").spec
    p = {"tp": 8, "pp": 16, "ep": 8, "dp": 8, "distributed_optimizer": True, "pp_first_stage_layers": 3,
         "pp_last_stage_layers": 2}
    w = Workload(**{**CORE, "seq_len": 4096}, parallel=p, fp8="current")
    with_mtp = w.model_copy(update={"mtp_layers": 1})
    h = m.hidden_size
    lay = kind_params(m, m.layer_kind(m.num_hidden_layers - 1))
    ep_tp = w.parallel.ep * w.parallel.expert_tp  # expert TP defaults to TP: 8 × 8
    assert ep_tp == 64
    assert lay.tp_replicated == 15_140_864  # q_a_proj, q_a_layernorm, kv_a_proj_with_mqa, kv_a_layernorm
    mtp = (-(-2 * h * h // 8) + -(-(lay.attention - lay.tp_replicated + lay.mlp + lay.shared_experts) // 8)
           + lay.tp_replicated + -(-lay.routed_experts // ep_tp))
    last = {t.key: t for t in estimate(m, with_mtp, with_fits=False).stages[-1].terms}
    plain = {t.key: t for t in estimate(m, w, with_fits=False).stages[-1].terms}
    assert last["weights.fp8_cache"].bytes - plain["weights.fp8_cache"].bytes == 2 * mtp  # row-wise + transpose
    first = {t.key: t for t in estimate(m, with_mtp, with_fits=False).stages[0].terms}
    first_plain = {t.key: t for t in estimate(m, w, with_fits=False).stages[0].terms}
    assert first["weights.fp8_cache"].bytes == first_plain["weights.fp8_cache"].bytes


def test_tp_comm_overlap_adds_the_userbuffers_workspace():
    m = load_model("llama-3.2-1b").spec
    p = {"tp": 2, "dp": 2, "sequence_parallel": True}
    plain = _terms(m, Workload(**CORE, parallel=p))
    ub = _terms(m, Workload(**CORE, parallel=p, tp_comm_overlap=True))
    assert ub["transient.te_workspace"].bytes - plain["transient.te_workspace"].bytes == 3 * (32 * 2**20 + 1024)
