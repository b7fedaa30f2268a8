"""Megatron-Core + TE rules (calculator/memory/megatron_core.py), each against the source rule that defines it."""
import pytest

from calculator import Workload
from calculator.core.errors import InputError
from calculator.memory import megatron_core as core
from calculator.model.presets import load_model
from calculator.model.spec import ModelSpec

CORE = dict(stack="megatron", impl="megatron-te")


def test_vocab_padded_to_a_multiple_of_divisible_by_times_tp():
    # tokenizer.py _vocab_size_with_padding: ceil(V / (128·t)) · 128·t
    assert core.padded_vocab(50257, 128, 1) == 50304
    assert core.padded_vocab(50257, 128, 2) == 50432
    assert core.padded_vocab(128256, 128, 8) == 128 * 8 * 126
    assert core.padded_vocab(131072, 128, 4) == 131072  # already a multiple


def test_te_workspace_is_32_mib_plus_1_kib_per_workspace_on_hopper_and_4_mib_before():
    assert core.te_workspace_bytes("h100-sxm", False) == (32 * 2**20 + 1024, 1)
    assert core.te_workspace_bytes("b200", True) == (5 * (32 * 2**20 + 1024), 5)  # + 4 grouped-GEMM streams
    assert core.te_workspace_bytes("a100-80gb", False) == (4_194_304, 1)


def test_dummy_wgrads_are_one_per_distinct_local_weight_shape():
    m = load_model("llama-3.1-8b").spec  # h 4096, 32 heads, 8 kv heads, head 128, f 14336
    shapes = core.te_weight_shapes(m, 2, 2)
    assert shapes == tuple(sorted({((16 + 2 * 4) * 128, 4096), (4096, 16 * 128), (2 * 7168, 4096), (4096, 7168)}))
    n_bytes, n = core.dummy_wgrad_bytes(m, 2, 2, 2)
    assert n == 4 and n_bytes == 2 * sum(r * c for r, c in shapes)


def test_identical_shapes_share_one_dummy():
    # MHA with f = h: qkv (3h, h), proj (h, h), fc1 (h, h) = proj's shape, fc2 (h, h): two distinct shapes
    m = ModelSpec(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  vocab_size=100, gated_mlp=False)
    assert core.te_weight_shapes(m, 1, 1) == ((64, 64), (192, 64))


def test_hidden_dropout_keeps_two_one_byte_masks_per_layer():
    assert core.dropout_masks(4096, 512, 0.1) == 2 * 4096 * 512
    assert core.dropout_masks(4096, 512, 0.0) == 0


def test_norm_statistics_are_fp32_per_local_row():
    assert core.norm_stats(4096, 512, 512, layernorm=True) == 8 * 4096  # mu + rsigma
    assert core.norm_stats(4096, 256, 512, layernorm=False) == 4 * 2048  # rsigma over the SP half


@pytest.mark.parametrize("fusion, saved, ws", [("none", 4, 2), ("native", 4, 6), ("te", 2, 0)])
def test_loss_variants(fusion, saved, ws):
    s, w, _, _ = core.loss_terms(fusion, 1000, 500, 2)
    assert (s, w) == (saved * 1000 * 500, ws * 1000 * 500)


def test_fp32_logits_are_the_softmax_and_its_gradient_in_place():
    # cross_entropy.py: .float() of fp32 logits is the same tensor; exp, div and the gradient write into it
    s, w, _, _ = core.loss_terms("none", 1000, 500, 4)
    assert (s, w) == (4 * 1000 * 500, 0)


def test_cp_working_sets():
    e, T, qd, kvd, a = 2, 1024, 512, 128, 4
    ring = 2 * 2 * e * T * kvd + 2 * (e * T * qd + 4 * a * T)
    assert core.cp_working_set("p2p", 2, e, T, qd, kvd, a) == ring
    assert core.cp_working_set("allgather", 4, e, T, qd, kvd, a) == 4 * 2 * e * T * kvd
    assert core.cp_working_set("a2a", 2, e, T, qd, kvd, a) == e * T * (2 * qd + 2 * kvd)
    assert core.cp_working_set("p2p", 1, e, T, qd, kvd, a) == 0


def test_applies_only_when_stack_and_impl_are_named():
    assert core.applies(Workload(**CORE))
    assert not core.applies(Workload(impl="megatron-te"))
    assert not core.applies(Workload(**CORE, finetune="lora"))


@pytest.mark.parametrize("kw, field", [
    (dict(cross_entropy_fusion="te"), "cross_entropy_fusion"),
    (dict(mtp_layers=1, stack="megatron"), "mtp_layers"),
    (dict(CORE, moe_dispatcher="allgather"), "moe_dispatcher"),  # a dense model
    (dict(CORE, moe_capacity_factor=-1.0), "moe_capacity_factor"),
])
def test_refusals_name_the_field(kw, field):
    m = load_model("llama-3.2-1b").spec
    with pytest.raises(InputError) as err:
        core.check(m, Workload(**kw))
    assert err.value.field == field


def test_pad_to_capacity_needs_a_capacity_factor():
    m = load_model("mixtral-8x7b").spec
    with pytest.raises(InputError, match="moe_pad_to_capacity"):
        core.check(m, Workload(**CORE, moe_pad_to_capacity=True))


def test_sp_output_layer_gathers_into_the_global_buffer():
    # layers.py LinearWithGradAccumulationAndAsyncCommunication: the SP input gathered into GlobalMemoryBuffer "mpu"
    assert core.sp_gather_buffer(4096, 512, 2, tp=2, sp=True) == 2 * 4096 * 512
    assert core.sp_gather_buffer(4096, 512, 2, tp=2, sp=False) == 0
    assert core.sp_gather_buffer(4096, 512, 2, tp=1, sp=True) == 0


def test_ring_attention_keeps_its_kv_buffer_and_two_output_copies():
    # context_parallel.py AttnFuncWithCPAndKVP2P: p2p_comm_buffers[-1] (k, v concatenated) + out_part + returned out
    assert core.cp_ring_saved(2, 2048, 256, 64) == 2 * 2 * 2048 * 64 + 2 * 2 * 2048 * 256


def test_userbuffers_take_their_own_cublas_workspace_of_three_streams():
    """--tp-comm-overlap: TE's overlapped GEMMs take `get_cublas_workspace(ub=True)`, one tensor of
    get_cublas_workspace_size_bytes() × _NUM_MAX_UB_STREAMS (3) beside the plain one
    (transformer_engine/pytorch/cpp_extensions/gemm.py at TransformerEngine 4220403e); the userbuffers are allocated
    in C++ (comm_gemm_overlap.cpp: register_user_buffer_collective / cudaMalloc), outside PyTorch's allocator.
    Megatron refuses the overlap without sequence parallelism (arguments.py)."""
    each = 32 * 2**20 + 1024
    assert core.te_workspace_bytes("h100-sxm", False, userbuffers=True) == (4 * each, 4)
    assert core.te_workspace_bytes("b200", True, userbuffers=True) == (8 * each, 8)
    m = load_model("llama-3.2-1b").spec
    w = Workload(**CORE, gpu="h100-sxm", tp_comm_overlap=True, parallel={"tp": 2, "sequence_parallel": True})
    core.check(m, w)
    with pytest.raises(InputError) as no_sp:
        core.check(m, w.model_copy(update={"parallel": w.parallel.model_copy(update={"sequence_parallel": False})}))
    assert no_sp.value.field == "tp_comm_overlap"
    with pytest.raises(InputError) as elsewhere:
        core.check(m, Workload(gpu="h100-sxm", tp_comm_overlap=True, parallel={"tp": 2, "sequence_parallel": True}))
    assert elsewhere.value.field == "tp_comm_overlap"
