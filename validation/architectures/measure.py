"""One supported model_type measured against real transformers code on the CPU, at the tiny sizes of its mapper
test (sources.py):

- parameters: the engine's count (calculator.model.parameters) against the real model built on the meta device;
- activations: for each layer kind (token mixer + feed-forward) the type has, one layer's saved-for-backward bytes
  (engine: calculator.memory.activations.exact_layer, transformers' PyTorch path, `mixer_kernels="torch"`) against
  a training forward of a tiny bf16 model traced by validation/trace/saved_by_module.py, the whole layer (its
  norms, mixer and feed-forward; layer ≥ 1 where the kind has one: layer 0 also first-saves shared RoPE tables);
- cache: the engine's KV cache + per-token extras (DSA indexer keys, compressed attention's caches) + recurrent/conv
  state against the tensors of the cache an eval prefill returns (fp32 parameters kept as from_pretrained keeps them).

The reference is the CPU trace less the terms a CPU run keeps and a GPU run does not (cpu_only.py: LayerNorm's bf16
statistics, the composite rms_norm's fp32 upcast, dropout's bf16 noise), counted from the calls the traced layer
makes; others (a RoPE copy before CPU SDPA, tests/model/mappers/test_variants.py) are not taken out and show as error.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
import signal

import torch
from transformers.core_model_loading import build_glob_alternation

from calculator import Workload
from calculator.memory import activations as act
from calculator.memory import inference as inf
from calculator.model.config_read import ConfigError
from calculator.model.hf_config import spec_from_hf_config
from calculator.model.parameters import count_parameters
from validation.architectures.causal_lm import causal_lm, text_parameters
from validation.trace.saved_by_module import KeepStorages, saved_bytes_by_module

from .blocks import layers_of
from .cpu_only import cpu_only_terms
from .sources import Source

B, S = 2, 16  # the traced micro-batch and sequence
CACHE_B, CACHE_S = 2, 11  # the prefill whose cache is measured (beyond the tiny configs' windows of 8)
E = 2  # bf16


class Timeout(Exception):
    pass


@contextmanager
def time_box(seconds: int):
    """Raise Timeout when the block runs past `seconds` (SIGALRM: the main thread only)."""
    def _raise(*_):
        raise Timeout(f"ran past {seconds} s")
    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def pct(engine: int, real: int) -> float:
    return 0.0 if engine == real else 100.0 * (engine - real) / real if real else float("inf")


def spec_of(src: Source):
    """(the engine's ModelSpec, its warnings), or raises ConfigError where the engine refuses the config."""
    mapped = spec_from_hf_config(src.written)
    return mapped.spec, list(mapped.warnings)


def real_counts(src: Source) -> tuple[int, int]:
    if src.remote_counts is not None:
        return src.remote_counts()
    with torch.device("meta"):
        model = causal_lm(src.config)
    params = text_parameters(model)
    return sum(p.numel() for p in params), len(params)


def parameters(src: Source, spec) -> dict:
    counts = count_parameters(spec)
    real, real_tensors = real_counts(src)
    return dict(engine=counts.total, real=real, engine_tensors=counts.tensors, real_tensors=real_tensors,
                exact=counts.total == real, diff=counts.total - real, error_pct=pct(counts.total, real))


def tiny_bf16(config, attention: str):
    """A tiny bf16 training-mode model, weights N(0, 0.02), with the fp32 parameters from_pretrained keeps
    (_keep_in_fp32_modules_strict), no cache."""
    torch.manual_seed(0)
    model = causal_lm(config, attn_implementation=attention, dtype=torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.02)
    model = fp32_kept(model)
    model.config.use_cache = False
    return model.train()


def fp32_kept(model):
    """The model with the parameters from_pretrained keeps in fp32 (_keep_in_fp32_modules_strict) made fp32,
    matched as from_pretrained's dtype plan does (core_model_loading: a regex searched in the name, so that dotted
    entries such as Flint's "gate.weight" match too)."""
    keep = sorted(getattr(model, "_keep_in_fp32_modules_strict", None) or ())
    pattern = build_glob_alternation(keep)[0] if keep else None
    for name, p in model.named_parameters():
        if pattern is not None and pattern.search(name):
            p.data = p.data.float()
    return model


def decoder_layers(model, n: int) -> str:
    """The name of the ModuleList of the n decoder layers (model.layers, transformer.h, ...)."""
    names = [name for name, mod in model.named_modules()
             if isinstance(mod, torch.nn.ModuleList) and len(mod) == n and name]
    if not names:
        raise LookupError(f"no ModuleList of {n} decoder layers")
    return min(names, key=len)


def layer_per_kind(spec) -> dict[str, int]:
    """{"mixer+ffn": the layer measured for it}: the first layer ≥ 1 of that kind, else layer 0 (a model whose
    sliding layers have their own head layout, ModelSpec.attention_of: "attention:full+ffn", "attention:sliding+ffn";
    one whose dense widths change layer by layer, ModelSpec.ffn_of: "attention+dense:<width>"; summary.py counts
    them under their mixer and feed-forward)."""
    out: dict[str, int] = {}
    for i in list(range(1, spec.num_hidden_layers)) + [0]:
        kind = spec.layer_kind(i)
        width = spec.ffn_widths is not None and kind.slot >= 0  # a dense width of its own: "dense:<width>"
        own = kind.slot >= 0 and spec.gemma_next is None and not width
        mixer = f"{kind.mixer}:{('full', 'sliding')[kind.slot]}" if own else kind.mixer
        out.setdefault(f"{mixer}+{kind.ffn}" + (f":{spec.ffn_of(kind).intermediate_size}" if width else ""), i)
    return dict(sorted(out.items(), key=lambda kv: kv[1]))


def activations(src: Source, spec, attention: str = "eager") -> dict[str, dict]:
    """{kind: {layer, engine, measured, error_pct, attention}} for each layer kind of the type, traced with
    `attention` ("eager", or "sdpa": PyTorch's CPU kernel) and the engine told the same."""
    torch.set_num_threads(1)
    model = tiny_bf16(src.config, attention)
    vocab = getattr(src.config, "vocab_size", None) or spec.vocab_size
    ids = torch.randint(3, min(vocab, 100), (B, S), generator=torch.Generator().manual_seed(0))
    layers = layers_of(spec.model_type, lambda n: decoder_layers(model, n), spec.num_hidden_layers)
    with KeepStorages(), cpu_only_terms(model.get_submodule(layers.prefix)) as cpu_only:
        by_module = saved_bytes_by_module(model, ids)
    w = Workload(seq_len=S, micro_batch=B, attention=attention, mixer_kernels="torch")
    d = act.dims(spec, w)
    out = {}
    for kind, i in layer_per_kind(spec).items():
        # the layer's own calls (residual dropout, functional ops in its forward) and those of its modules
        measured = sum(v for k, v in by_module.items() if layers.owns(i, k))
        engine = act.exact_layer(spec, w, d, spec.layer_kind(i)).total
        # a block's CPU-only terms (none in a split block's types so far) go to its first engine layer
        terms = {k: v for k, v in cpu_only[layers.block(i)].items() if v and i % layers.per_block == 0}
        reference = measured - sum(terms.values())  # the GPU's bytes: the trace less what only the CPU keeps
        out[kind] = dict(traced=True, layer=i, engine=engine, measured=measured, cpu_only=terms, reference=reference,
                         error_pct=pct(engine, reference), attention=attention)
    return out


def _tensors(obj, depth: int = 0):
    """Every tensor a cache object holds (its layers, their dicts and lists), each once."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 4 and isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x, depth + 1)
    elif depth < 4 and isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x, depth + 1)
    elif depth < 4 and hasattr(obj, "__dict__") and not isinstance(obj, torch.nn.Module):
        for x in vars(obj).values():
            yield from _tensors(x, depth + 1)


def cache_bytes(cache) -> int:
    """Bytes of the cache's per-sequence tensors (≥ 3 dimensions: K/V, conv and recurrent states; not the scalar
    positions it keeps), each storage once."""
    seen, total = set(), 0
    for t in _tensors(cache):
        if t.dim() >= 3 and t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            total += t.numel() * t.element_size()
    return total


def cache(src: Source, spec) -> dict:
    torch.manual_seed(0)
    # loaded as from_pretrained loads it: DeepSeek-V4's fp32 position_bias makes its CSA overlap gates fp32 (the
    # other types' fp32 parameters, routers' bias and gate weights, reach no cached tensor)
    model = fp32_kept(causal_lm(src.config, dtype=torch.bfloat16, attn_implementation="eager")).eval()
    model.config.use_cache = True
    vocab = getattr(src.config, "vocab_size", None) or spec.vocab_size
    ids = torch.randint(3, min(vocab, 100), (CACHE_B, CACHE_S), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    held = getattr(out, "past_key_values", None) or getattr(out, "cache_params", None)
    if held is None:
        return dict(checked=False, why="the model returns no cache")
    real = cache_bytes(held)
    layers = range(spec.num_hidden_layers)
    engine = (inf.kv_cache_bytes(spec, layers, CACHE_B, CACHE_S, spec.kv_heads, "bf16")
              + inf.extra_kv_bytes(spec, layers, CACHE_B, CACHE_S, "bf16")
              + inf.recurrent_state_bytes(spec, layers, CACHE_B, E))
    return dict(checked=True, engine=engine, real=real, exact=engine == real, error_pct=pct(engine, real),
                batch=CACHE_B, prompt=CACHE_S)


def quiet():
    logging.getLogger("transformers").setLevel(logging.ERROR)
    for name in ("transformers", "torch"):
        logging.getLogger(name).setLevel(logging.ERROR)


__all__ = ["ConfigError", "Timeout", "activations", "cache", "parameters", "spec_of", "time_box"]
