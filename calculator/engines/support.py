"""Whether the chosen serving engine can load the model at all, and how: its own implementation, its Transformers
backend, or not. The engines load the class config.json's `architectures` names (ModelSpec.architecture; a spec
without one is looked up by its model type); calculator/engines/native_types.py lists, per engine, its own models,
the classes its Transformers backend takes, and vLLM's removed ones (generated from the released wheels).

- Native: nothing to say.
- Transformers backend (vLLM registry.py _try_resolve_transformers; SGLang model_loader/utils.py
  resolve_transformers_arch, model_impl auto): the engine runs transformers' modeling code with its own attention
  and KV cache, so the pool is sized as for a native model; said in a note, as the profile's activation peak is
  the native model's. Both backends give every decoder layer an attention KV cache (vLLM models/transformers/
  base.py _create_attention_instances raises for a layer that does not dispatch through the attention interface;
  SGLang models/transformers.py gives every layer a RadixAttention and keeps no recurrent state), so a model with
  state-space or linear-attention layers is refused there.
- Neither: refused, naming the class (vLLM names the last version that had it).
"""
from __future__ import annotations

from calculator.core.errors import InputError
from calculator.engines import native_types as T
from calculator.model.architectures import SOFTMAX_ATTENTION, label, mixer, with_attention

_ENGINES = {"vllm": ("vLLM 0.33.0", T.VLLM_NATIVE, T.VLLM_TRANSFORMERS, T.VLLM_REMOVED),
            "sglang": ("SGLang 0.5.23", T.SGLANG_NATIVE, T.SGLANG_TRANSFORMERS, {})}
_CHECKED = frozenset(c for cs in T.CLASSES_OF_TYPE.values() for c in cs)
_RANK = {"native": 0, "transformers": 1, "removed": 2, "refused": 3}


def status(engine: str, cls: str) -> str | None:
    """How `engine` loads class `cls`: "native", "transformers", "removed" (vLLM), "refused", or None (a class
    the tables do not know: no claim)."""
    _, native, backend, removed = _ENGINES[engine]
    if cls in native:
        return "native"
    if cls in backend:
        return "transformers"
    if cls in removed:
        return "removed"
    return "refused" if cls in _CHECKED else None


def served_class(m, engine: str) -> tuple[str, str] | None:
    """(class, status) the engine loads for `m`: config.json's architectures[0] when the tables know it, else the
    best of its model type's classes (the outer type of a vision-language model); None when neither is known."""
    if m.architecture is not None and (st := status(engine, m.architecture)) is not None:
        return m.architecture, st
    model_type = m.vision.model_type if m.vision is not None else m.model_type
    found = [(c, st) for c in T.CLASSES_OF_TYPE.get(model_type, ()) if (st := status(engine, c)) is not None]
    return min(found, key=lambda cs: _RANK[cs[1]]) if found else None


def _stateful(m) -> list[str]:
    """The mixer kinds of `m` that keep more than an attention KV cache, by their labels: a state per sequence
    (state-space, linear attention, short convolutions), a cache of their own (DSA's indexer keys, compressed
    attention), or no KV at all. Attention laid out otherwise (Gemma 3n / 4's layers) is attention to the backend."""
    kinds = {m.layer_kind(i).mixer for i in range(m.num_hidden_layers)} - set(SOFTMAX_ATTENTION) - {"none"}
    return sorted(label(k) for k in kinds if not with_attention(k) or any(
        hasattr(mixer(k), a) for a in ("serving_state", "kv_bytes_per_token", "cache_bytes")))


def check(m, w) -> str:
    """'' when the engine runs `m` natively (or the tables do not know it); a note when through its Transformers
    backend; raises InputError("engine", ...) when the engine cannot load it."""
    found = served_class(m, w.engine)
    if found is None or found[1] == "native":
        return ""
    cls, st = found
    engine, _, _, removed = _ENGINES[w.engine]
    if st == "removed":
        raise InputError("engine", f"{engine} cannot load {cls}: vLLM dropped it after v{removed[cls]} "
                                   "(registry.py _PREVIOUSLY_SUPPORTED_MODELS); pick another --engine, or hf")
    if st == "refused":
        raise InputError("engine", f"{engine} has no implementation of {cls}, and its Transformers backend does not "
                                   "take it (the transformers class does not support custom attention backends); "
                                   "pick another --engine, or hf")
    mixers = _stateful(m)
    if mixers:
        raise InputError("engine", f"{engine} has no implementation of {cls}; its Transformers backend gives every "
                                   f"layer an attention KV cache, which the model's {'/'.join(mixers)} layers do "
                                   "not have; pick another --engine, or hf")
    return (f"{engine} has no implementation of {cls}: it runs through its Transformers backend (transformers' "
            "modeling code with the engine's attention and KV cache); the pool is sized as for a native model")
