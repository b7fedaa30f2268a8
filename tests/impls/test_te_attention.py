"""Transformer Engine's attention backend and the q, k, v it keeps (calculator/impls/te_attention.py)."""
from calculator.impls import te_attention as te


def test_blackwell_deterministic_training_with_dropout_falls_back_to_flash_attention():
    # fused_attn.cpp: sm >= 100 trains deterministically in cuDNN only without dropout (and bias)
    assert te.attention_backend((10, 0), deterministic=True, dropout=0.1) == te.FLASH
    assert te.attention_backend((12, 0), deterministic=True, dropout=0.1) == te.FLASH
    assert te.attention_backend((10, 0), deterministic=True, dropout=0.0) == te.FUSED
    assert te.attention_backend((10, 0), deterministic=False, dropout=0.1) == te.FUSED
    assert te.attention_backend((10, 0), deterministic=True, dropout=0.1, training=False) == te.FUSED
    # Hopper keeps cuDNN's deterministic workspace path; an unknown GPU follows Hopper
    assert te.attention_backend((9, 0), deterministic=True, dropout=0.1) == te.FUSED
    assert te.attention_backend(None, deterministic=True, dropout=0.1) == te.FUSED


def test_q_k_v_kept_once_and_flash_keeps_its_own_output():
    e, T, qd, kvd = 2, 4096, 512, 128
    assert te.qkv_kept(e, T, qd, kvd) == e * T * (qd + 2 * kvd)
    assert te.backend_extra(te.FLASH, e, T, qd) == e * T * qd
    assert te.backend_extra(te.FUSED, e, T, qd) == 0
