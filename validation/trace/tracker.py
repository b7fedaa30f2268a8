"""The byte-exact tracker of validation/trace/accounting.py: a ``TorchDispatchMode`` that records every tensor storage an
operator allocates, with a weakref finaliser that fires when the storage dies, so the live total and its peak are
exact in bytes (a 512-byte rounded shadow total is kept as well). What autograd saves is recorded by its
``saved_tensors_hooks``, deduplicated by storage. Also: the bytes of the distinct storages behind some tensors.
"""
from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# CUDA's caching allocator rounds every block up to a multiple of 512 bytes (kMinBlockSize).
CUDA_ROUND = 512


def round_cuda(nbytes: int) -> int:
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
            self.current_rounded -= round_cuda(entry.nbytes)

    def _track_new(self, key: int, st, op: str = "") -> None:
        nbytes = int(st.nbytes())
        fin = weakref.finalize(st, self._free, key)
        fin.atexit = False
        self.live[key] = _Live(nbytes, self.phase, fin, op)
        self.current += nbytes
        self.current_by_phase[self.phase] = self.current_by_phase.get(self.phase, 0) + nbytes
        self.current_rounded += round_cuda(nbytes)
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


ACTIVE: list[MemoryTracker] = []


def _active_tracker() -> MemoryTracker | None:
    return ACTIVE[-1] if ACTIVE else None


@contextlib.contextmanager
def untracked():
    tr = _active_tracker()
    if tr is None:
        yield
    else:
        with tr.pause():
            yield


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
