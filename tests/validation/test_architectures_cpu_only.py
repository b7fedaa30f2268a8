"""validation/architectures/cpu_only.py's "sdpa_dropout_math": an SDPA call with dropout runs PyTorch's math path on
the CPU (its flash kernel takes no dropout), which keeps fp32 copies and three fp32 score tensors where CUDA's flash
kernel keeps q, k, v and a logsumexp; the term is what the CPU call saves beyond that, checked against the tensors
the real CPU call saves."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from validation.architectures.cpu_only import sdpa_dropout_math  # noqa: E402


def _qkv(b=2, a=4, kv=2, s=16, d=128):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(b, n, s, d, generator=g, dtype=torch.bfloat16, requires_grad=True) for n in (a, kv, kv)]


def _saved_bytes(fn) -> int:
    """Bytes of the distinct storages autograd saves while fn runs (leaves included: the call's own inputs)."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    del out
    return sum(storages.values())


def test_the_term_by_hand():
    """Seed-OSS's tiny layer: b = 2, 4 query heads over 2 KV heads, s = 16, head_dim 128, bf16: the math path keeps
    4·(16384 + 2·(8192 + 8192)) + 3·4·2048 = 221184 B; flash would keep q, k, v (2·(16384 + 8192 + 8192)) and the
    logsumexp 4·2·4·16: 155136 B more on the CPU."""
    q, k, v = _qkv()
    assert sdpa_dropout_math(q, k, v, dropout_p=0.1, is_causal=True, enable_gqa=True) == 221184 - 65536 - 512 == 155136
    assert sdpa_dropout_math(q, k, v, dropout_p=0.0, is_causal=True, enable_gqa=True) == 0
    assert sdpa_dropout_math(q, k, v, torch.ones(16, 16, dtype=torch.bool), 0.1) == 0  # masked: not the flash kernel


def test_fused_qkv_views_count_their_storage_once():
    """GPT-2's q, k and v are views of c_attn's one output: flash would keep that storage once."""
    qkv = torch.randn(2, 16, 3 * 64, dtype=torch.bfloat16, requires_grad=True)
    q, k, v = (t.view(2, 16, 4, 16).transpose(1, 2) for t in qkv.split(64, dim=2))
    scores = 2 * 4 * 16 * 16
    assert sdpa_dropout_math(q, k, v, dropout_p=0.1) == 4 * 3 * 2048 + 12 * scores - 2 * 3 * 2048 - 4 * 2 * 4 * 16


@pytest.mark.parametrize("gqa", [True, False])
def test_the_cpu_math_path_saves_what_the_term_counts(gqa):
    """The real CPU call with dropout: the fp32 tensors the term's first part counts, to the byte."""
    q, k, v = _qkv() if gqa else _qkv(kv=4)
    torch.manual_seed(0)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True, enable_gqa=gqa)
    assert "FlashAttention" not in type(out.grad_fn).__name__  # the math path
    saved = _saved_bytes(lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True,
                                                                 enable_gqa=gqa))
    flash_keeps = sum(t.untyped_storage().nbytes() for t in (q, k, v)) + 4 * 2 * 4 * 16
    assert saved == sdpa_dropout_math(q, k, v, dropout_p=0.1, is_causal=True, enable_gqa=gqa) + flash_keeps
