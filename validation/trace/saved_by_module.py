"""Bytes a real transformers model saves for backward, attributed to the decoder-layer module that saved them: a
forward pass on the CPU under torch.autograd.graph.saved_tensors_hooks (issue 21: the new token mixers' formulas
are held to it, tests/model/).

Each saved tensor counts once per storage (a view keeps its whole storage alive), parameters never, and only while
the autograd graph still holds it when the forward pass ends (what backward will read). A storage goes to the
innermost named module running when it was first saved; `wrap` names module-level functions (e.g. the chunked
delta rule) whose saves are reported under their own name too.
"""
from __future__ import annotations

import weakref
from collections import defaultdict
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class KeepStorages(TorchDispatchMode):
    """Holds every storage the forward allocates, so that none is freed and its address reused: saved_bytes_by_module
    keys storages by address, and a reused one would be counted with the first one's size and module. Use it around
    saved_bytes_by_module when the model frees tensors during its forward (any real model)."""

    def __init__(self):
        super().__init__()
        self.kept = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.kept += [t.untyped_storage() for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        return out


class _Saved:
    """What the pack hook returns: the tensor, and the key under which its storage is counted."""

    __slots__ = ("tensor", "key", "__weakref__")

    def __init__(self, tensor, key):
        self.tensor, self.key = tensor, key


@contextmanager
def _module_stack(model, wrap: dict):
    stack = ["model"]
    hooks = []
    for name, module in model.named_modules():
        if name:
            hooks.append(module.register_forward_pre_hook(lambda mod, args, n=name: stack.append(n)))
            hooks.append(module.register_forward_hook(lambda mod, args, out: stack.pop() and None))
    originals = {}
    for (owner, fname) in wrap:
        fn = getattr(owner, fname)
        originals[(owner, fname)] = fn

        def wrapped(*a, _fn=fn, _name=fname, **k):
            stack.append(f"{stack[-1]}/{_name}")
            try:
                return _fn(*a, **k)
            finally:
                stack.pop()
        setattr(owner, fname, wrapped)
    try:
        yield stack
    finally:
        for h in hooks:
            h.remove()
        for (owner, fname), fn in originals.items():
            setattr(owner, fname, fn)


def saved_bytes_by_module(model, input_ids, wrap: tuple = (), use_cache: bool | None = None) -> dict[str, int]:
    """{module name (or name/function): bytes of the storages it first saved that the graph still holds after a
    forward pass of `input_ids` with labels (the loss included)}. Every save is recorded with its storage and its
    owner; only the tensors still alive when the forward ends count, each storage once, under the module that
    saved it first among those (a freed storage's address may be reused later by another). Parameters and buffers
    never count. use_cache=False keeps a generation cache from holding a branch the loss does not reach."""
    params = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    records: list[tuple[weakref.ref, str]] = []
    with _module_stack(model, wrap) as stack:
        def pack(t):
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                return t
            storage = t.untyped_storage()
            if storage.data_ptr() in params or storage.nbytes() == 0:
                return t
            s = _Saved(t.detach(), storage.data_ptr())  # detached: t itself would tie its op into a cycle
            records.append((weakref.ref(s), stack[-1]))
            return s

        def unpack(x):
            return x.tensor if isinstance(x, _Saved) else x

        kwargs = {} if use_cache is None else {"use_cache": use_cache}
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            out = model(input_ids=input_ids, labels=input_ids, **kwargs)
    by_module: dict[str, int] = defaultdict(int)
    seen: set[int] = set()
    for ref, owner in records:  # in save order: the first live saver of a storage owns it
        s = ref()
        if s is None:
            continue
        storage = s.tensor.untyped_storage()
        ptr = storage.data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        by_module[owner] += storage.nbytes()
    del out
    return dict(by_module)


def layer_parts(by_module: dict[str, int], layer: int, parts: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Sum by_module over decoder layer `layer`'s modules, grouped by the first matching prefix of `parts` (e.g.
    {"mixer": ("linear_attn", "self_attn"), "norms": ("input_layernorm", ...), "ffn": ("mlp",)})."""
    prefix = f"model.layers.{layer}."
    out = {k: 0 for k in parts}
    for name, nbytes in by_module.items():
        if not name.startswith(prefix):
            continue
        rest = name[len(prefix):]
        for part, starts in parts.items():
            if rest.startswith(starts):
                out[part] += nbytes
                break
        else:
            out.setdefault("other", 0)
            out["other"] += nbytes
    return out
