"""Transformer Engine's attention backend and the q, k, v it keeps (calculator/impls/te_attention.py), rule by rule
at the releases the Megatron-LM CI ran (NVIDIA/TransformerEngine v2.11–v2.18)."""
import pytest

from calculator.impls import te_attention as te


def test_blackwell_deterministic_training_with_dropout_falls_back_to_flash_attention():
    # fused_attn.cpp nvte_get_fused_attn_backend (v2.18 lines 462-470): sm >= 100 trains deterministically in cuDNN
    # only without dropout (and bias); the latest release is assumed when none is given
    assert te.attention_backend((10, 0), deterministic=True, dropout=0.1) == te.FLASH
    assert te.attention_backend((12, 0), deterministic=True, dropout=0.1) == te.FLASH
    assert te.attention_backend((10, 0), deterministic=True, dropout=0.0) == te.FUSED
    assert te.attention_backend((10, 0), deterministic=False, dropout=0.1) == te.FUSED
    assert te.attention_backend((10, 0), deterministic=True, dropout=0.1, training=False) == te.FUSED
    # Hopper keeps cuDNN's deterministic workspace path; an unknown GPU follows Hopper
    assert te.attention_backend((9, 0), deterministic=True, dropout=0.1) == te.FUSED
    assert te.attention_backend(None, deterministic=True, dropout=0.1) == te.FUSED


def test_te_2_11_leaves_cudnn_for_any_deterministic_blackwell_training():
    # utils.py get_attention_backend (v2.11 lines 1067-1070): "Disabling FusedAttention for determinism reasons on
    # Blackwell", whatever the dropout or cuDNN
    for te_version in ((2, 8), (2, 11)):
        assert te.attention_backend((10, 0), True, 0.0, te_version=te_version, cudnn_version=(9, 19, 0)) == te.FLASH
        assert te.attention_backend((10, 0), True, 0.0, training=False, te_version=te_version) == te.FUSED
        assert te.attention_backend((10, 0), False, 0.0, te_version=te_version) == te.FUSED
        assert te.attention_backend((9, 0), True, 0.1, te_version=te_version) == te.FUSED


def test_te_2_12_on_needs_cudnn_9_18_1_and_no_dropout():
    # fused_attn.cpp "determinism on Blackwell" (v2.12 lines 448-456, v2.18 lines 462-470):
    # is_training && deterministic && cudnn_runtime_version >= 91801 && dropout == 0.0 && NVTE_NO_BIAS
    for te_version in ((2, 12), (2, 16), (2, 18)):
        assert te.attention_backend((10, 0), True, 0.0, te_version=te_version, cudnn_version=(9, 18, 1)) == te.FUSED
        assert te.attention_backend((10, 0), True, 0.0, te_version=te_version, cudnn_version=(9, 18, 0)) == te.FLASH
        assert te.attention_backend((10, 0), True, 0.1, te_version=te_version, cudnn_version=(9, 21, 0)) == te.FLASH
        assert te.attention_backend((10, 3), True, 0.0, te_version=te_version, cudnn_version=(9, 21, 0)) == te.FUSED


def test_te_2_14_on_never_trains_deterministically_in_cudnn_on_sm120():
    # fused_attn.cpp (v2.16 lines 501-510, v2.18 lines 505-514): "Deterministic fused attention on SM120 is not
    # supported"; v2.12 / v2.13 have no such branch and follow the sm >= 100 rule
    assert te.attention_backend((12, 0), True, 0.0, te_version=(2, 14), cudnn_version=(9, 21, 0)) == te.FLASH
    assert te.attention_backend((12, 0), True, 0.0, cudnn_version=(9, 21, 0)) == te.FLASH
    assert te.attention_backend((12, 0), True, 0.0, te_version=(2, 13), cudnn_version=(9, 21, 0)) == te.FUSED
    assert te.attention_backend((12, 0), False, 0.0, te_version=(2, 18)) == te.FUSED


def test_q_k_v_kept_once_and_flash_keeps_its_own_output():
    e, T, qd, kvd = 2, 4096, 512, 128
    assert te.qkv_kept(e, T, qd, kvd) == e * T * (qd + 2 * kvd)
    assert te.backend_extra(te.FLASH, e, T, qd, micro_batch=4) == e * T * qd
    assert te.backend_extra(te.FUSED, e, T, qd, micro_batch=4) == 0


def test_flash_attention_keeps_nothing_more_at_micro_batch_1():
    # backends.py FlashAttention.forward (v2.18 lines 861-877, 1267-1289): x.transpose(0, 1).contiguous() and
    # output.view(b, s, -1).transpose(0, 1) ... .contiguous() move a size-1 dimension when b == 1, which PyTorch's
    # contiguity check skips: no copy, the returned output is flash-attn's own
    torch = pytest.importorskip("torch")
    for b in (1, 2):
        out = torch.empty(b, 16, 4 * 8)  # flash-attn's (b, s, h·d) output
        returned = out.view(b, 16, -1).transpose(0, 1).contiguous()
        assert (returned.data_ptr() == out.data_ptr()) == (b == 1)
    assert te.backend_extra(te.FLASH, 2, 8192, 4096, micro_batch=1) == 0
