"""Exact byte accounting of one training step and one inference step of a real `transformers` model.

The model is built from a config dict (never from downloaded weights), normally on the ``meta`` device so that
full-size 8B/47B configs cost no memory, and every tensor storage that an operator allocates is recorded by a
``TorchDispatchMode`` together with a weakref finaliser that fires when the storage dies.  The live total and its
peak are therefore exact in bytes (no allocator rounding; a 512-byte rounded shadow total is kept as well).  What
autograd saves is recorded with ``torch.autograd.graph.saved_tensors_hooks``, deduplicated by storage.

See validation/README.md for the protocol (what exists before the step, what is measured, what the trace cannot
see) and for how CUDA kernels (FlashAttention-2, fused dropout) are emulated on meta/CPU.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# Names under which the emulated kernels are registered in transformers' AttentionInterface.
FLASH_NAME = "validation_fa2_emu"  # must not contain "flash": transformers would look for a kernel
ATTENTION_IMPLS = ("flash", "eager", "sdpa")
RECOMPUTE_MODES = ("none", "selective", "full")

# CUDA's caching allocator rounds every block up to a multiple of 512 bytes (kMinBlockSize).
CUDA_ROUND = 512


def _round_cuda(nbytes: int) -> int:
    if nbytes <= 0:
        return 0
    return ((nbytes + CUDA_ROUND - 1) // CUDA_ROUND) * CUDA_ROUND


def _storage_key(t: torch.Tensor):
    """Identity of the StorageImpl behind a tensor (stable while the storage lives, works on meta)."""
    try:
        st = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None, None
    return st._cdata, st


# ---------------------------------------------------------------------------------------------------------------
# The tracker
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class _Live:
    nbytes: int
    phase: str
    finalizer: Any
    op: str = ""


class MemoryTracker(TorchDispatchMode):
    """Records every storage newly created by an operator on ``device_type``.

    A storage is *new* when it is an output storage of an op and is not the storage of any of the op's inputs
    (so views, in-place ops and ops on pre-existing tensors such as parameters are never counted).  Its bytes
    are added to ``current`` and removed by a weakref finaliser when the StorageImpl is destroyed, so
    ``current`` is the exact number of bytes held by storages created while tracking, and ``peak`` its maximum.
    """

    def __init__(self, device_type: str):
        super().__init__()
        self.device_type = device_type
        self.live: dict[int, _Live] = {}
        self.current = 0
        self.peak = 0
        self.current_rounded = 0
        self.peak_rounded = 0
        self.peak_phase = ""
        self.peak_op = ""
        self.current_by_phase: dict[str, int] = {}
        self.peak_by_phase: dict[str, int] = {}
        self.phase = "init"
        self.paused = 0
        self.n_allocs = 0
        # saved-for-backward records: storage key -> (nbytes, phase, kind)
        self.saved: dict[int, tuple[int, str, str]] = {}
        self.persistent_keys: set[int] = set()
        self._saved_finalizers: list = []
        self.log: list | None = None  # set to [] to record (phase, op, nbytes, live after) per allocation

    # -- allocation accounting -----------------------------------------------------------------------------
    def _free(self, key: int) -> None:
        entry = self.live.pop(key, None)
        if entry is not None:
            self.current -= entry.nbytes
            self.current_by_phase[entry.phase] -= entry.nbytes
            self.current_rounded -= _round_cuda(entry.nbytes)

    def _track_new(self, key: int, st, op: str = "") -> None:
        nbytes = int(st.nbytes())
        fin = weakref.finalize(st, self._free, key)
        fin.atexit = False
        self.live[key] = _Live(nbytes, self.phase, fin, op)
        self.current += nbytes
        self.current_by_phase[self.phase] = self.current_by_phase.get(self.phase, 0) + nbytes
        self.current_rounded += _round_cuda(nbytes)
        self.n_allocs += 1
        if self.current > self.peak:
            self.peak = self.current
            self.peak_phase = self.phase
            self.peak_op = op
            self.peak_by_phase = {k: v for k, v in self.current_by_phase.items() if v}
        if self.current_rounded > self.peak_rounded:
            self.peak_rounded = self.current_rounded

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused:
            return out
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.device.type == self.device_type]
        if not outs:
            return out
        input_keys = set()
        for t in tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor):
                k, _ = _storage_key(t)
                if k is not None:
                    input_keys.add(k)
        for t in outs:
            k, st = _storage_key(t)
            if k is None or k in input_keys or k in self.live or k in self.persistent_keys:
                continue
            self._track_new(k, st, func.__name__)
            if self.log is not None:
                self.log.append((self.phase, str(func), int(st.nbytes()), self.current))
        return out

    # -- control ---------------------------------------------------------------------------------------------
    def reset_peak(self) -> None:
        self.peak = self.current
        self.peak_rounded = self.current_rounded
        self.peak_phase = self.phase
        self.peak_op = ""
        self.peak_by_phase = {k: v for k, v in self.current_by_phase.items() if v}

    @contextlib.contextmanager
    def pause(self):
        """Operators run inside are not recorded (used for the math path of emulated fused kernels)."""
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1

    def live_by_phase(self, exclude_keys=()) -> dict[str, int]:
        out: dict[str, int] = {}
        for k, e in self.live.items():
            if k in exclude_keys:
                continue
            out[e.phase] = out.get(e.phase, 0) + e.nbytes
        return out

    def live_entries(self, phase: str) -> list[tuple[str, int]]:
        """(op that allocated it, bytes) of every live tracked storage allocated in `phase`, in allocation order."""
        return [(e.op, e.nbytes) for e in self.live.values() if e.phase == phase]

    def detach_all(self) -> None:
        for e in self.live.values():
            e.finalizer.detach()
        for f in self._saved_finalizers:
            f.detach()
        self.live.clear()

    # -- saved tensors ---------------------------------------------------------------------------------------
    def pack_hook(self, t: torch.Tensor):
        if not self.paused and t.device.type == self.device_type:
            k, st = _storage_key(t)
            if k is not None and k not in self.saved:
                kind = "persistent" if k in self.persistent_keys else "activation"
                self.saved[k] = (int(st.nbytes()), self.phase, kind)
                fin = weakref.finalize(st, self.saved.pop, k, None)
                fin.atexit = False
                self._saved_finalizers.append(fin)
        return t

    @staticmethod
    def unpack_hook(t):
        return t


_ACTIVE: list[MemoryTracker] = []


def _active_tracker() -> MemoryTracker | None:
    return _ACTIVE[-1] if _ACTIVE else None


@contextlib.contextmanager
def _untracked():
    tr = _active_tracker()
    if tr is None:
        yield
    else:
        with tr.pause():
            yield


# ---------------------------------------------------------------------------------------------------------------
# CUDA emulation: FlashAttention-2, fused dropout
# ---------------------------------------------------------------------------------------------------------------


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

    Forward allocates exactly what ``mha_fwd`` allocates — ``out`` (b, s, h, d) contiguous, ``softmax_lse`` fp32
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
        with _untracked():
            o_math, lse_math = _math_attention(q, k, v, scale, causal, window, softcap)
        out = torch.empty((b, sq, h, v.shape[-1]), dtype=q.dtype, device=q.device)
        lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
        rng_state = torch.empty((2,), dtype=torch.int64, device=q.device)
        with _untracked():
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
        with _untracked():
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


# ---------------------------------------------------------------------------------------------------------------
# Model construction
# ---------------------------------------------------------------------------------------------------------------


def make_config(model_cfg: dict, num_hidden_layers: int | None = None):
    from transformers import AutoConfig

    fields = {k: v for k, v in model_cfg.items() if k not in ("model_type", "architectures", "torch_dtype", "dtype")}
    if num_hidden_layers is not None:
        fields["num_hidden_layers"] = num_hidden_layers
        if "n_layer" in fields:
            fields["n_layer"] = num_hidden_layers
        if "layer_types" in fields:
            fields["layer_types"] = fields["layer_types"][:num_hidden_layers]
    return AutoConfig.for_model(model_cfg["model_type"], **fields)


def build_model(model_cfg: dict, dtype: str, attention: str, recompute: str = "none", device: str = "meta",
                num_hidden_layers: int | None = None, seed: int = 0):
    from transformers import AutoModelForCausalLM

    register_attention_functions()
    cfg = make_config(model_cfg, num_hidden_layers)
    torch.manual_seed(seed)
    kwargs = {}
    if _is_moe(cfg):
        kwargs["experts_implementation"] = "grouped_mm"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            cfg, dtype=DTYPES[dtype], attn_implementation=attn_implementation_name(attention, recompute), **kwargs
        )
    return model


def _is_moe(cfg) -> bool:
    return any(getattr(cfg, n, None) for n in ("num_local_experts", "num_experts"))


def decoder_layers(model) -> torch.nn.ModuleList:
    n = model.config.num_hidden_layers
    for m in model.modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) == n:
            return m
    raise RuntimeError("decoder layer list not found")


def final_norm(model):
    base = model.base_model
    for name in ("norm", "ln_f", "final_layernorm"):
        if hasattr(base, name):
            return getattr(base, name)
    raise RuntimeError("final norm not found")


def _install_phase_hooks(model, tracker: MemoryTracker):
    handles = []

    def setter(label):
        def hook(module, args, kwargs=None):
            if tracker.phase not in ("backward", "step"):
                tracker.phase = label

        return hook

    for i, layer in enumerate(decoder_layers(model)):
        handles.append(layer.register_forward_pre_hook(setter(f"layer.{i}")))
    handles.append(final_norm(model).register_forward_pre_hook(setter("final_norm")))
    handles.append(model.get_output_embeddings().register_forward_pre_hook(setter("head")))
    return handles


# ---------------------------------------------------------------------------------------------------------------
# Byte counting helpers
# ---------------------------------------------------------------------------------------------------------------


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (a storage shared by views or tied weights counts once)."""
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        k, st = _storage_key(t)
        if k is None or k in seen:
            continue
        seen.add(k)
        total += int(st.nbytes())
    return total


def storage_keys(tensors) -> set:
    keys = set()
    for t in tensors:
        if t is not None:
            k, _ = _storage_key(t)
            if k is not None:
                keys.add(k)
    return keys


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once


# ---------------------------------------------------------------------------------------------------------------
# Optimizer states (protocol step 1)
# ---------------------------------------------------------------------------------------------------------------

RECIPES = {
    # name: (params_dtype, grads_dtype, master_dtype or None, optimizer_state_dtype)
    "mixed": ("bf16", "bf16", "fp32", "fp32"),
    "fp32": ("fp32", "fp32", None, "fp32"),
    "pure-bf16": ("bf16", "bf16", None, "bf16"),
}


@dataclass
class TrainStates:
    params: list
    master: list | None
    optimizer: torch.optim.Optimizer


def make_optimizer(opt_params, optimizer: str, foreach: bool):
    if optimizer == "adamw":
        return torch.optim.AdamW(opt_params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=foreach)
    if optimizer == "sgd-momentum":
        return torch.optim.SGD(opt_params, lr=1e-2, momentum=0.9, foreach=foreach)
    raise ValueError(f"unknown optimizer {optimizer!r}")


def build_train_states(model, recipe: str, optimizer: str, foreach: bool) -> TrainStates:
    """Params, persistent grads, optional fp32 master copy and an optimizer that has already taken one step."""
    _, grads_dtype, master_dtype, _ = RECIPES[recipe]
    params = list(model.parameters())
    for p in params:
        p.grad = torch.zeros_like(p, dtype=DTYPES[grads_dtype])
    return train_states(params, master_dtype, optimizer, foreach)


def train_states(params: list, master_dtype: str | None, optimizer: str, foreach: bool) -> TrainStates:
    """The rest of protocol step 1 for `params`, whose persistent grads are already set: a master copy in
    `master_dtype` (None: no master) and an optimizer over the master, or over the params, that has already taken
    one step with zero gradients."""
    master = None
    if master_dtype is not None:
        master = []
        for p in params:
            m = p.detach().to(DTYPES[master_dtype], copy=True)
            m.requires_grad_(True)
            master.append(m)
        opt_params = master
    else:
        opt_params = params
    opt = make_optimizer(opt_params, optimizer, foreach)
    # Initialise the optimizer state by taking one step with zero gradients.
    if master is not None:
        for m in master:
            m.grad = torch.zeros_like(m)
    opt.step()
    if master is not None:
        for m in master:
            m.grad = None
    for p in params:
        p.grad.zero_()
    return TrainStates(params, master, opt)


def optimizer_step(states: TrainStates) -> None:
    """Protocol step 2b.  With master weights: cast all grads to fp32 master grads at once (apex-O2 /
    `model_grads_to_master_grads` style), step the master, copy it back into the bf16 params, free the master
    grads.  Without: step the params directly.  Grads are then zeroed in place (set_to_none=False)."""
    if states.master is not None:
        for p, m in zip(states.params, states.master):
            m.grad = p.grad.to(m.dtype)
        states.optimizer.step()
        with torch.no_grad():
            for p, m in zip(states.params, states.master):
                p.copy_(m)
        for m in states.master:
            m.grad = None
    else:
        states.optimizer.step()
    for p in states.params:
        p.grad.zero_()


def optimizer_state_tensors(opt) -> list:
    return [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]


# ---------------------------------------------------------------------------------------------------------------
# Training step
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Measurement:
    measured: dict
    details: dict


def _enable_full_recompute(model):
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})


def measure_train(model_cfg: dict, *, micro_batch: int, seq_len: int, recipe: str = "mixed", attention: str = "flash",
                  recompute: str = "none", optimizer: str = "adamw", foreach: bool = False, device: str = "meta",
                  num_hidden_layers: int | None = None, seed: int = 0,
                  inspect: Callable[[MemoryTracker], None] | None = None) -> Measurement:
    """One training step under the protocol of validation/README.md.  `inspect`, if given, is called with the
    tracker at the end of the forward (e.g. ``lambda t: print(t.live_entries("layer.1"))``)."""
    params_dtype = RECIPES[recipe][0]
    model = build_model(model_cfg, params_dtype, attention, recompute, device, num_hidden_layers, seed)
    model.train()
    if recompute == "full":
        _enable_full_recompute(model)
    states = build_train_states(model, recipe, optimizer, foreach)
    dev = torch.device(device)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab, (micro_batch, seq_len), generator=g).to(dev)

    params = states.params
    buffers = [b for b in model.buffers()]
    opt_tensors = optimizer_state_tensors(states.optimizer)
    step_scalars = [t for t in opt_tensors if t.dim() == 0]
    measured = {
        "parameters": count_parameters(model),
        "weights": storage_bytes(params),
        "master_weights": storage_bytes(states.master or []),
        "gradients": storage_bytes([p.grad for p in params]),
        "optimizer_states": storage_bytes(opt_tensors),
    }
    details = {
        "buffers": storage_bytes(buffers),
        "optimizer_step_scalars": storage_bytes(step_scalars),
        "optimizer_step_scalars_device": sorted({t.device.type for t in step_scalars}),
        "inputs": storage_bytes([input_ids]),
        "num_param_tensors": len(params),
    }

    run_train_step(model, states, input_ids, measured, details, inspect=inspect)
    return Measurement(measured, details)


def run_train_step(model, states: TrainStates, input_ids: torch.Tensor, measured: dict, details: dict, *,
                   hf_model=None, inspect: Callable[[MemoryTracker], None] | None = None,
                   more_hooks: Callable[[], list] | None = None) -> None:
    """Protocol steps 2 and 3 under a MemoryTracker: the forward of `model` with labels = input_ids, the backward
    and `optimizer_step(states)`.  Persistent (not traced): the model's parameters and buffers, the grads of
    `states.params`, the master copy, the optimizer state and `input_ids`.

    `hf_model` is the transformers model inside `model` (the phase hooks go on its layers; default `model`);
    `more_hooks`, if given, registers further hooks after the phase hooks and returns their handles.  `measured`
    must hold weights, master_weights, gradients and optimizer_states, `details` buffers; both are completed with
    what the step measured (activations, loss_head, the peaks, ...)."""
    hf_model = model if hf_model is None else hf_model
    tracker = MemoryTracker(input_ids.device.type)
    tracker.persistent_keys = (storage_keys(model.parameters()) | storage_keys([p.grad for p in states.params])
                               | storage_keys(model.buffers()) | storage_keys(states.master or [])
                               | storage_keys(optimizer_state_tensors(states.optimizer)) | storage_keys([input_ids]))
    hooks = _install_phase_hooks(hf_model, tracker)
    if more_hooks is not None:
        hooks += more_hooks()
    _ACTIVE.append(tracker)
    try:
        with device_emulation(tracker.device_type), tracker:
            tracker.phase = "pre"
            tracker.reset_peak()
            with torch.autograd.graph.saved_tensors_hooks(tracker.pack_hook, tracker.unpack_hook):
                out = model(input_ids=input_ids, labels=input_ids, use_cache=False)
            loss = out.loss
            del out
            loss_key = storage_keys([loss])
            by_phase = tracker.live_by_phase(exclude_keys=loss_key)
            if inspect is not None:
                inspect(tracker)
            end_fwd_live = sum(by_phase.values())
            saved = dict(tracker.saved)
            peak_fwd = tracker.peak
            peak_fwd_phase = tracker.peak_phase
            tracker.phase = "backward"
            loss.backward()
            del loss
            peak_fwd_bwd = tracker.peak
            peak_fwd_bwd_rounded = tracker.peak_rounded
            peak_fwd_bwd_phase = tracker.peak_phase
            peak_fwd_bwd_op = tracker.peak_op
            peak_fwd_bwd_by_phase = _group_phases(tracker.peak_by_phase)
            after_bwd = tracker.current
            tracker.phase = "step"
            tracker.reset_peak()
            optimizer_step(states)
            peak_step_op = tracker.peak_op
            peak_step = tracker.peak - after_bwd
            peak_step_rounded = tracker.peak_rounded - _round_cuda(after_bwd) if after_bwd else tracker.peak_rounded
            after_step = tracker.current
    finally:
        _ACTIVE.pop()
        for h in hooks:
            h.remove()
        tracker.detach_all()

    layer_phases = [f"layer.{i}" for i in range(hf_model.config.num_hidden_layers)]
    per_layer = [by_phase.get(p, 0) for p in layer_phases]
    saved_act = sum(nb for nb, _, kind in saved.values() if kind == "activation")
    saved_persist = sum(nb for nb, _, kind in saved.values() if kind == "persistent")
    persistent = (measured["weights"] + details["buffers"] + measured["master_weights"] + measured["gradients"]
                  + measured["optimizer_states"])
    measured.update({
        "activations": end_fwd_live,
        "loss_head": by_phase.get("head", 0),
        "peak_fwd_bwd": peak_fwd_bwd,
        "peak_step": peak_step,
        "peak_allocated": persistent + max(peak_fwd_bwd, peak_step),
        "kv_cache": 0,
        "peak_prefill": 0,
        "peak_decode": 0,
    })
    details.update({
        "activations_non_layer_by_phase": {k: by_phase[k] for k in sorted(by_phase, key=_phase_order)
                                           if not k.startswith("layer.")},
        "activations_per_layer": per_layer,
        "activations_non_layer": end_fwd_live - sum(per_layer),
        "saved_tensor_bytes_excluding_persistent": saved_act,
        "saved_persistent_bytes_excluded": saved_persist,
        "peak_forward": peak_fwd,
        "peak_forward_phase": peak_fwd_phase,
        "peak_fwd_bwd_phase": peak_fwd_bwd_phase,
        "peak_fwd_bwd_op": peak_fwd_bwd_op,
        "peak_fwd_bwd_by_allocation_phase": peak_fwd_bwd_by_phase,
        "peak_fwd_bwd_cuda_rounded": peak_fwd_bwd_rounded,
        "peak_step_op": peak_step_op,
        "peak_step_cuda_rounded": peak_step_rounded,
        "persistent_total": persistent,
        "live_after_backward": after_bwd,
        "live_after_step": after_step,
        "allocations": tracker.n_allocs,
    })


def _group_phases(by_phase: dict[str, int]) -> dict[str, int]:
    """Live bytes grouped by where they were allocated: pre, layers (all decoder layers), final_norm, head,
    backward (gradients and recomputation)."""
    out: dict[str, int] = {}
    for p, nb in by_phase.items():
        key = "layers" if p.startswith("layer.") else p
        out[key] = out.get(key, 0) + nb
    order = ["pre", "layers", "final_norm", "head", "backward"]
    return {k: out[k] for k in sorted(out, key=lambda k: order.index(k) if k in order else len(order))}


def _phase_order(p: str):
    if p.startswith("layer."):
        return (1, int(p.split(".")[1]))
    return ({"pre": 0, "final_norm": 2, "head": 3}.get(p, 4), 0)


# ---------------------------------------------------------------------------------------------------------------
# Inference step
# ---------------------------------------------------------------------------------------------------------------


def cache_tensors(cache) -> list:
    ts = []
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                ts.append(t)
    return ts


def measure_infer(model_cfg: dict, *, micro_batch: int, prompt_len: int, gen_tokens: int, dtype: str = "bf16",
                  attention: str = "flash", device: str = "meta", num_hidden_layers: int | None = None,
                  seed: int = 0) -> Measurement:
    """generate()-like greedy loop: prefill of `prompt_len` tokens (logits_to_keep=1, fp32 copy of the last
    logits, argmax), then `gen_tokens` decode forwards of one token each, with a DynamicCache."""
    from transformers import DynamicCache

    model = build_model(model_cfg, dtype, attention, "none", device, num_hidden_layers, seed)
    model.eval()
    dev = torch.device(device)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab, (micro_batch, prompt_len), generator=g).to(dev)
    params = list(model.parameters())
    buffers = list(model.buffers())
    measured = {
        "parameters": count_parameters(model),
        "weights": storage_bytes(params),
        "master_weights": 0, "gradients": 0, "optimizer_states": 0, "activations": 0, "loss_head": 0,
        "peak_fwd_bwd": 0, "peak_step": 0,
    }
    details = {"buffers": storage_bytes(buffers), "inputs": storage_bytes([input_ids])}
    tracker = MemoryTracker(dev.type)
    tracker.persistent_keys = storage_keys(params) | storage_keys(buffers) | storage_keys([input_ids])
    _ACTIVE.append(tracker)
    try:
        with device_emulation(dev.type), tracker, torch.no_grad():
            tracker.phase = "prefill"
            tracker.reset_peak()
            cache = DynamicCache(config=model.config)
            ids = input_ids
            out = model(input_ids=ids.clone(), past_key_values=cache, use_cache=True, logits_to_keep=1)
            next_logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
            del out
            next_tokens = torch.argmax(next_logits, dim=-1)
            del next_logits
            ids = torch.cat([ids, next_tokens[:, None]], dim=-1)
            peak_prefill = tracker.peak
            peak_prefill_op = tracker.peak_op
            peak_prefill_rounded = tracker.peak_rounded
            kv_after_prefill = storage_bytes(cache_tensors(cache))
            live_after_prefill = tracker.current
            tracker.phase = "decode"
            tracker.reset_peak()
            for _ in range(gen_tokens):
                out = model(input_ids=ids[:, -1:].clone(), past_key_values=cache, use_cache=True, logits_to_keep=1)
                next_logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
                del out
                next_tokens = torch.argmax(next_logits, dim=-1)
                del next_logits
                ids = torch.cat([ids, next_tokens[:, None]], dim=-1)
            peak_decode = tracker.peak if gen_tokens else 0
            peak_decode_op = tracker.peak_op if gen_tokens else ""
            peak_decode_rounded = tracker.peak_rounded if gen_tokens else 0
            kv_cache = storage_bytes(cache_tensors(cache))
            kv_view_bytes = sum(t.numel() * t.element_size() for t in cache_tensors(cache))
            cache_len = cache.get_seq_length()
            live_end = tracker.current
            del cache, ids, next_tokens
    finally:
        _ACTIVE.pop()
        tracker.detach_all()
    measured.update({
        "peak_allocated": measured["weights"] + details["buffers"] + max(peak_prefill, peak_decode),
        "kv_cache": kv_cache,
        "peak_prefill": peak_prefill,
        "peak_decode": peak_decode,
    })
    details.update({
        "kv_cache_after_prefill": kv_after_prefill,
        "kv_cache_view_bytes": kv_view_bytes,
        "cache_seq_length": cache_len,
        "live_after_prefill": live_after_prefill,
        "live_end": live_end,
        "peak_prefill_op": peak_prefill_op,
        "peak_decode_op": peak_decode_op,
        "peak_prefill_cuda_rounded": peak_prefill_rounded,
        "peak_decode_cuda_rounded": peak_decode_rounded,
        "allocations": tracker.n_allocs,
    })
    return Measurement(measured, details)
