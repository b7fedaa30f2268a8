"""The architecture registry: a decoder layer is a token mixer plus a feed-forward (ModelSpec.layer_kind), each of a
kind, and each kind of token mixer other than softmax attention is one module here, read side by side with the
transformers module it mirrors (cited in each). A mixer module says:

    NAME, LABEL, SOURCE                      its kind, how the page names it, the source key of its formulas
    WITH_ATTENTION (optional)                True when the layer also runs the model's softmax attention
                                             (attention_shapes, its saved tensors and KV cache are added)
    shapes(m) -> list[Shape]                 its parameter tensors
    tp_replicated_shapes(m) (optional)       those every tensor-parallel rank keeps whole (the rest split by heads)
    no_grad_shapes(m) (optional)             those backward never reaches (a top-k indexer's): no gradient, and no
                                             optimizer state under torch.optim (no_grad_parameters)
    linears(m) -> list[(name, in, out)]      its nn.Linear modules (LoRA targets, the time model)
    state_bytes(m, b, e) -> int              what generate() keeps per layer for b sequences beside (or instead of)
                                             a KV cache, whatever their length (e: the model dtype's bytes)
    kv_bytes_per_token(m, dtype) (optional)  what a WITH_ATTENTION kind caches per token beyond the attention's
    prefill_transient(m, b, s, e) (optional) what one layer adds to generate()'s prefill working set
    serving_state(m, tp) (optional)          (conv elements, recurrent elements) per sequence on one TP rank as
                                             vLLM / SGLang keep them (conv: K − 1 columns)
    saved(m, d, w) -> int                    what one layer's mixer saves for backward beyond its input (the norm
                                             output), per w.mixer_kernels ("fused" GPU kernels or "torch")

Softmax attention (full, sliding, MLA) and the dense / MoE feed-forwards are the engine's original layer
(calculator/model/parameters.py, calculator/memory/activations.py); a model is a list of layers by kind
(ModelSpec.layer_types), and a new architecture is a mapper (calculator/model/mappers/archs.py) plus, at most, one new
kind here.

May import: calculator.model.spec and mixer_specs, calculator.core.
"""
from __future__ import annotations

from functools import lru_cache
from types import ModuleType

from calculator.model.architectures import (compressed, compressed_saved, dsa, gated_deltanet, gemma_next,
                                            gemma_next_lora, gemma_next_saved, kda, lightning, mamba, mamba_attention,
                                            short_conv)
from calculator.model.architectures.shapes import numel

MIXERS: dict[str, ModuleType] = {m.NAME: m for m in (gated_deltanet, mamba, mamba_attention, short_conv, kda, lightning,
                                                      dsa, gemma_next)}
# DeepSeek-V4's compressed attention: one module, three kinds of layer (objects with a module's interface)
MIXERS.update(compressed.KIND_OBJECTS)  # type: ignore[arg-type]
_LABELS = {"attention": "attention", "mla": "MLA", "none": "none"}
SOFTMAX_ATTENTION = ("attention", "mla")


def with_attention(name: str) -> bool:
    """Whether a mixer kind caches keys and values per token: softmax attention, or a kind that runs beside or on top
    of the model's attention (a module with WITH_ATTENTION = True, e.g. DSA's indexer on MLA, Falcon-H1's parallel
    attention and Mamba): its parameters, saved tensors and KV cache add to the attention's."""
    return name in SOFTMAX_ATTENTION or (name in MIXERS and getattr(MIXERS[name], "WITH_ATTENTION", False))


def mixer(name: str) -> ModuleType:
    """The module of a token-mixer kind (not softmax attention)."""
    return MIXERS[name]


def label(name: str) -> str:
    """How the page and the formulas name a kind of token mixer."""
    return _LABELS.get(name) or MIXERS[name].LABEL


@lru_cache(maxsize=1024)
def mixer_layers(m, start: int, stop: int) -> tuple[tuple[str, int, int], ...]:
    """(registry kind, layers, of which sliding-window capped) of the layers [start, stop) whose token mixer is a
    registry kind (not softmax attention, MLA or no mixer), in the order they first appear: what the per-layer sums
    of calculator.memory.inference and stage_mixers add up kind by kind, counted once per stage instead of layer by
    layer on every call (the planner prices thousands of stages)."""
    if m.layer_types is None:
        return ()
    counts: dict[str, list[int]] = {}
    for i in range(start, stop):
        mixer = m.layer_kind(i).mixer
        if mixer not in ("attention", "mla", "none"):
            c = counts.setdefault(mixer, [0, 0])
            c[0] += 1
            c[1] += bool(m.layer_is_sliding(i) and m.sliding_window)
    return tuple((k, n, windowed) for k, (n, windowed) in counts.items())


def stage_kinds(m, layers) -> tuple[tuple[str, int, int], ...] | None:
    """mixer_layers of `layers` when they are a contiguous range (a pipeline stage), else None: the caller then
    goes layer by layer."""
    if isinstance(layers, range) and layers.step == 1:
        return mixer_layers(m, layers.start, max(layers.stop, layers.start))
    return None


def stage_mixers(m, layers) -> dict[str, int]:
    """{registry kind: number of layers} among `layers` (softmax attention and blocks without a mixer left out)."""
    if m.layer_types is None:
        return {}
    kinds = stage_kinds(m, layers)
    if kinds is not None:
        return {k: n for k, n, _ in kinds}
    out: dict[str, int] = {}
    for i in layers:
        mixer = m.layer_kind(i).mixer
        if mixer in MIXERS:
            out[mixer] = out.get(mixer, 0) + 1
    return out


def layer_saved(m, w, d, kind) -> tuple[int, int, int]:
    """(norms, mixer, feed-forward) bytes one layer saves, for the models whose layers the engine's own layer does
    not describe: Gemma 3n / 4 (gemma_next_lora.layer_saved), DeepSeek-V4 (compressed_saved.layer: eager, whole
    layer; the step's own terms are calculator/stages/kinds.py's and impls/hf.py's; full fine-tuning only,
    calculator.memory.parallel.check_divisibility)."""
    if m.gemma_next is not None:
        return gemma_next_lora.layer_saved(m, w, d, kind)
    return compressed_saved.layer(m, kind.mixer, d.b, d.s, d.e)


def describe_mixers(m) -> str:
    """The model's kinds of token mixer, e.g. 'Gated DeltaNet and attention'."""
    kinds = sorted({m.layer_kind(i).mixer for i in range(m.num_hidden_layers)} - {"none"}, key=label)
    return " and ".join(label(k) for k in kinds)


def no_grad_moe_shapes(m) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """(router-like, routed-expert) tensors of one MoE layer that a text step never reaches (VariantSpec.
    no_grad_moe_tensors: ERNIE-4.5-VL's vision router and vision experts), split by whether they are among the
    layer's routed-expert tensors (VariantSpec.expert_tensors: sharded over EP) or kept whole like the router."""
    v = getattr(m, "variant", None)
    if v is None or not v.no_grad_moe_tensors:
        return (), ()
    experts = {tuple(x) for x in v.expert_tensors or ()}
    tensors = [tuple(x) for x in v.no_grad_moe_tensors]
    return tuple(x for x in tensors if x not in experts), tuple(x for x in tensors if x in experts)


def _moe_layers(m, start: int, stop: int) -> int:
    return sum(m.layer_is_moe(i) for i in range(start, stop)) if m.is_moe else 0


@lru_cache(maxsize=1024)
def no_grad_shapes(m, start: int, stop: int) -> tuple[tuple[int, ...], ...]:
    """The parameter tensors of the layers [start, stop) that never get a gradient: each kind's no_grad_shapes (DSA's
    indexer, DeepSeek-V4's CSA indexer), once per layer of that kind, and no_grad_moe_shapes once per MoE layer."""
    out: list = []
    for kind, n, _ in mixer_layers(m, start, stop):
        own = getattr(MIXERS[kind], "no_grad_shapes", None)
        if own is not None:
            out += [tuple(x) for x in own(m)] * n
    whole, experts = no_grad_moe_shapes(m)
    return tuple(out) + (whole + experts) * (_moe_layers(m, start, stop) if whole or experts else 0)


@lru_cache(maxsize=1024)
def no_grad_parameters(m, start: int, stop: int) -> tuple[int, int]:
    """(parameters, tensors) of no_grad_shapes (TP keeps the indexers whole on every rank; the routed experts among
    them, no_grad_expert_parameters, split over EP). What a stack does with them is its NO_GRAD rule
    (calculator.stacks.common.NoGradRule)."""
    shapes = no_grad_shapes(m, start, stop)
    return numel(shapes), len(shapes)


def no_grad_expert_parameters(m, start: int, stop: int) -> int:
    """Of no_grad_parameters, the routed experts' (the whole layers', before EP divides them)."""
    experts = no_grad_moe_shapes(m)[1]
    return numel(experts) * _moe_layers(m, start, stop) if experts else 0


def idle_shapes(m) -> tuple[tuple[int, ...], ...]:
    """The tensors a model builds outside its decoder layers and never runs (VariantSpec.idle_tensors: MiMo's
    remote-code MTP block), held with the embedding: backward never reaches them, as no_grad_shapes'."""
    return tuple(tuple(x) for x in m.variant.idle_tensors) if getattr(m, "variant", None) is not None else ()


def no_grad_of_stage(m, start: int, stop: int, has_embedding: bool) -> tuple[int, int]:
    """(parameters, tensors) a pipeline stage holding layers [start, stop) (and the embedding, with
    `has_embedding`) has that never get a gradient: no_grad_parameters and, beside the embedding, idle_shapes."""
    n, tensors = no_grad_parameters(m, start, stop)
    idle = idle_shapes(m) if has_embedding else ()
    return n + numel(idle), tensors + len(idle)

