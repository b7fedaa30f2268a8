"""CUDA kernels emulated on meta/CPU for validation/trace/accounting.py: FlashAttention-2 (memory-faithful stand-in registered
in transformers' AttentionInterface), CUDA's fused dropout with its 1-byte mask, PyTorch's CPU SDPA choice on meta,
and the selective-recompute attention wrappers. See validation/README.md for what each emulates.
"""
from __future__ import annotations

import contextlib

import torch

from validation.trace.tracker import untracked

# Names under which the emulated kernels are registered in transformers' AttentionInterface.
FLASH_NAME = "validation_fa2_emu"  # must not contain "flash": transformers would look for a kernel
ATTENTION_IMPLS = ("flash", "eager", "sdpa")
RECOMPUTE_MODES = ("none", "selective", "full")


def _round_multiple(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _math_attention(q, k, v, scale, causal, window, softcap):
    """Reference attention on (b, s, h, d) tensors; returns (out (b, s, h, d), lse (b, h, s) fp32)."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    qh = q.transpose(1, 2).float()
    kh = k.transpose(1, 2).float()
    vh = v.transpose(1, 2).float()
    if hk != h:
        kh = kh.repeat_interleave(h // hk, dim=1)
        vh = vh.repeat_interleave(h // hk, dim=1)
    scores = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    if causal or window:
        i = torch.arange(sq, device=q.device).view(-1, 1) + (sk - sq)
        j = torch.arange(sk, device=q.device).view(1, -1)
        allowed = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
        if causal:
            allowed = allowed & (j <= i)
        if window:
            allowed = allowed & (i - j < window)
        scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse.unsqueeze(-1))
    out = torch.matmul(probs, vh).transpose(1, 2).to(q.dtype)
    return out, lse


class FlashAttention2Emu(torch.autograd.Function):
    """Memory-faithful stand-in for ``flash_attn.flash_attn_func`` (flash-attn 2.x, ``flash_api.cpp``).

    Forward allocates exactly what ``mha_fwd`` allocates — ``out = torch::empty_like(q)`` (flash-attn 2.8.3
    csrc/flash_attn/flash_api.cpp: laid out like q, so a q that transformers transposed from a contiguous
    (b, h, s, d) tensor, as a torch.cat RoPE leaves it, gives an output its reshape must copy), ``softmax_lse`` fp32
    (b, h, s), ``rng_state`` int64[2] — and saves exactly what ``FlashAttnFunc`` saves: q, k, v as given
    (unexpanded under GQA), out, softmax_lse, rng_state.  The values are computed by a math path whose
    intermediates are not recorded (the real kernel keeps them in SRAM).

    Backward allocates what ``FlashAttnFunc.backward`` + ``mha_bwd`` allocate: dq, dk, dv (``empty_like``),
    ``softmax_d`` fp32 (b, h, round128(s)), ``dq_accum`` fp32 (b, round128(s), h, round32(d) or 256), and under
    GQA ``dk_expanded``/``dv_expanded`` (b, s, h, d), which are summed into dk/dv and freed on return.
    """

    @staticmethod
    def forward(ctx, q, k, v, scale, causal, window, softcap, dropout_p):
        if q.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError("FlashAttention-2 only supports fp16 and bf16")
        b, sq, h, d = q.shape
        with untracked():
            o_math, lse_math = _math_attention(q, k, v, scale, causal, window, softcap)
        if v.shape[-1] == d:  # mha_fwd checks v's head size against q's
            out = torch.empty_like(q)
        else:
            out = torch.empty((b, sq, h, v.shape[-1]), dtype=q.dtype, device=q.device)
        lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
        rng_state = torch.empty((2,), dtype=torch.int64, device=q.device)
        with untracked():
            out.copy_(o_math)
            lse.copy_(lse_math)
        del o_math, lse_math
        ctx.save_for_backward(q, k, v, out, lse, rng_state)
        ctx.cfg = (scale, causal, window, softcap)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, rng_state = ctx.saved_tensors
        scale, causal, window, softcap = ctx.cfg
        b, sq, h, d = q.shape
        sk, hk = k.shape[1], k.shape[2]
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        head_size_rounded = _round_multiple(d, 32) if d <= 192 else 256
        softmax_d = torch.empty((b, h, _round_multiple(sq, 128)), dtype=torch.float32, device=q.device)
        dq_accum = torch.empty((b, _round_multiple(sq, 128), h, head_size_rounded), dtype=torch.float32, device=q.device)
        if hk != h:
            dk_expanded = torch.empty((b, sk, h, d), dtype=q.dtype, device=q.device)
            dv_expanded = torch.empty((b, sk, h, v.shape[-1]), dtype=q.dtype, device=q.device)
        else:
            dk_expanded = dv_expanded = None
        with untracked():
            with torch.enable_grad():
                qq, kk, vv = (x.detach().requires_grad_(True) for x in (q, k, v))
                o, _ = _math_attention(qq, kk, vv, scale, causal, window, softcap)
                gq, gk, gv = torch.autograd.grad(o, (qq, kk, vv), dout)
            dq.copy_(gq)
            dk.copy_(gk)
            dv.copy_(gv)
            del o, gq, gk, gv, qq, kk, vv
        del dk_expanded, dv_expanded, dq_accum, softmax_d
        return dq, dk, dv, None, None, None, None, None


def flash_attention2_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
):
    """Drop-in for transformers' ``flash_attention_forward`` (integrations/flash_attention.py) on unpadded input."""
    if attention_mask is not None:
        raise NotImplementedError("padded (varlen) FlashAttention is not emulated")
    seq_len = query.shape[2]
    query = query.transpose(1, 2)
    key = key.transpose(1, 2)
    value = value.transpose(1, 2)
    is_causal = is_causal if is_causal is not None else module.is_causal
    # modeling_flash_attention_utils: causal is dropped for a single query token; FA2 ignores windows >= seqlen_k.
    causal = bool(is_causal) and seq_len != 1
    window = sliding_window if (sliding_window and sliding_window < key.shape[1] + 1) else None
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = FlashAttention2Emu.apply(query, key, value, scale, causal, window, softcap or 0.0, dropout)
    return out, None


def cuda_like_dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """``F.dropout`` as it runs on CUDA: the fused ``native_dropout`` kernel, which saves a 1-byte bool mask.

    (On CPU and meta, ``aten::dropout`` falls back to ``input * bernoulli_noise``, which saves the noise in the
    input dtype.)  p == 0 or eval mode returns the input itself, as on every device.
    """
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        return input * 0.0
    out, _mask = torch.ops.aten.native_dropout(input, p, True)
    if inplace:
        input.copy_(out)
        return input
    return out


def _cpu_sdpa_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) -> int:
    """The backend PyTorch's CPU dispatcher (`_fused_sdp_choice_cpp`) picks for inputs like these, found by asking
    it about small CPU proxies of the same dtype, head counts, head dims, mask presence, dropout and grad mode."""

    def proxy(t, s):
        p = torch.empty((1, t.shape[1], s, t.shape[-1]), dtype=t.dtype)
        if t.stride(-1) != 1:
            p = p.transpose(-1, -2).contiguous().transpose(-1, -2)
        return p.requires_grad_(t.requires_grad)

    sq = 1 if query.shape[-2] == 1 else min(query.shape[-2], 8)
    sk = 1 if key.shape[-2] == 1 else min(key.shape[-2], 8)
    q, k, v = proxy(query, sq), proxy(key, sk), proxy(value, sk)
    m = None
    if attn_mask is not None:
        m = torch.zeros((1, attn_mask.shape[1] if attn_mask.dim() == 4 else 1, sq, sk), dtype=attn_mask.dtype)
    return int(torch._fused_sdp_choice(q, k, v, m, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa))


_ORIG_SDPA = torch.nn.functional.scaled_dot_product_attention


def cpu_like_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``F.scaled_dot_product_attention`` as PyTorch runs it on CPU, also on meta tensors.

    On meta the SDPA dispatcher always falls back to the (fp32-upcasting) math decomposition; here the CPU
    choice is made explicitly and the chosen aten op is called: ``_scaled_dot_product_flash_attention_for_cpu``
    (saves q, k, v unexpanded, the output and an fp32 logsumexp (b, h, s)) or ``_scaled_dot_product_attention_math``.
    """
    if query.device.type != "meta":
        return _ORIG_SDPA(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                          scale=scale, enable_gqa=enable_gqa)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # at::scaled_dot_product_attention's convert_boolean_attn_mask (before the backend choice)
        zero = torch.scalar_tensor(0.0, dtype=query.dtype, device=query.device)
        ninf = torch.scalar_tensor(float("-inf"), dtype=query.dtype, device=query.device)
        attn_mask = torch.where(attn_mask, zero, ninf)
        del zero, ninf
    choice = _cpu_sdpa_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if choice == int(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
    return torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]


_REGISTERED = False


def register_attention_functions() -> None:
    """Register the emulated FA2 kernel (and selective-recompute wrappers) with transformers."""
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, flash_attention_mask, sdpa_mask

    def selective(fn):
        def wrapped(module, query, key, value, attention_mask, **kwargs):
            return torch.utils.checkpoint.checkpoint(
                fn, module, query, key, value, attention_mask, use_reentrant=False, **kwargs
            )

        return wrapped

    def eager_fn(module, query, key, value, attention_mask, **kwargs):
        # the model module's own eager_attention_forward (architectures differ: GPT-2, Gemma-2 softcapping ...)
        import sys

        mod = sys.modules[type(module).__module__]
        return mod.eager_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register(FLASH_NAME, flash_attention2_forward)
    AttentionMaskInterface.register(FLASH_NAME, flash_attention_mask)
    AttentionInterface.register(FLASH_NAME + "_ckpt", selective(flash_attention2_forward))
    AttentionMaskInterface.register(FLASH_NAME + "_ckpt", flash_attention_mask)
    AttentionInterface.register("validation_eager_ckpt", selective(eager_fn))
    AttentionMaskInterface.register("validation_eager_ckpt", eager_mask)
    AttentionInterface.register("validation_sdpa_ckpt", selective(sdpa_attention_forward))
    AttentionMaskInterface.register("validation_sdpa_ckpt", sdpa_mask)
    _REGISTERED = True


def attn_implementation_name(attention: str, recompute: str) -> str:
    if attention not in ATTENTION_IMPLS:
        raise ValueError(f"unknown attention {attention!r}")
    if recompute == "selective":
        return {"flash": FLASH_NAME + "_ckpt", "eager": "validation_eager_ckpt", "sdpa": "validation_sdpa_ckpt"}[attention]
    return {"flash": FLASH_NAME, "eager": "eager", "sdpa": "sdpa"}[attention]


@contextlib.contextmanager
def device_emulation(device_type: str):
    """Patches active while tracing: CUDA-like dropout, CPU-like SDPA on meta, meta-safe packed-sequence check."""
    import transformers.masking_utils as mu

    orig_dropout = torch.nn.functional.dropout
    orig_find = mu.find_packed_sequence_indices

    def find_packed_sequence_indices(position_ids):
        if position_ids.device.type != "meta":
            return orig_find(position_ids)
        # Same ops as the original; the data-dependent `.all()` cannot run on meta: the harness always feeds
        # plain (unpacked) sequences, for which the original returns None.
        first_dummy_value = position_ids[:, :1] - 1
        position_diff = torch.diff(position_ids, prepend=first_dummy_value, dim=-1)
        packed_sequence_mask = (position_diff != 1).cumsum(-1)
        _ = packed_sequence_mask[:, -1] == 0
        return None

    torch.nn.functional.dropout = cuda_like_dropout
    torch.nn.functional.scaled_dot_product_attention = cpu_like_sdpa
    mu.find_packed_sequence_indices = find_packed_sequence_indices
    try:
        yield
    finally:
        torch.nn.functional.dropout = orig_dropout
        torch.nn.functional.scaled_dot_product_attention = _ORIG_SDPA
        mu.find_packed_sequence_indices = orig_find
