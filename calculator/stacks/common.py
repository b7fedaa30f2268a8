"""What every training stack module supplies to the estimate, and the one computation they share: where the peak
of the backward pass is when gradients are born in backward instead of held for the whole step.

A stack module (calculator/stacks/<name>.py) exposes
    NAME, LABEL, SOURCE            its id, a one-line description, the source key of its memory behaviour
    states_workload(w) -> Workload the workload the model states are counted for (FSDP2 recasts its precision)
    memory(ctx) -> StackMemory     gradient lifetime, persistent buffers, buffers at the forward/backward peak
    FP32_KEPT                      a KeptDtype: what it does with the parameters a low-precision model keeps in
                                   fp32 (from_pretrained's _keep_in_fp32_modules_strict), and whether that is modelled
and may set NO_GRAD (a NoGradRule: what it holds for the parameters backward never reaches, e.g. a top-k indexer's;
default HOLDS_ALL) and OFFLOAD_MOVES_GRADIENTS = False when its CPU optimizer offload keeps the gradient buffer on the GPU
(Megatron's HybridDeviceOptimizer; calculator.stages.held.add_offload; default True, ZeRO-Offload's).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from calculator.core.dtypes import nbytes
from calculator.core.errors import InputError
from calculator.model.architectures.compressed import fp32_parameters
from calculator.model.spec import ModelSpec
from calculator.model.parameters import count_parameters, kind_counts


@dataclass(frozen=True)
class Line:
    """One term a stack contributes (same fields as calculator.core.result.Term)."""

    key: str
    component: str
    label: str
    bytes: int
    formula: str
    substituted: str | tuple  # a str, or (template, *values) formatted when read (calculator.core.result.Term)
    source: str
    note: str = ""


@dataclass(frozen=True)
class StackContext:
    """What a stack module may look at: the model, the workload as the states were counted, this GPU's shard."""

    m: ModelSpec
    w: object  # Workload (the states workload)
    shard: object  # StageShard
    grad_bytes: int  # gradients of this GPU when all are alive (after ZeRO-2/3 sharding)
    grad_dtype: str
    original: object = None  # the workload as given (before states_workload)
    # gradient bytes of the parameters that never get one, left out of grad_bytes by the stack's NO_GRAD rule
    no_grad_bytes: int = 0


@dataclass(frozen=True)
class StackMemory:
    """How a stack holds memory beyond the model states and the activations."""

    grads_whole_step: bool  # gradients held from the forward to the step; else born in backward, freed after
    persistent: tuple[Line, ...] = ()  # buffers held for the whole step
    at_peak: tuple[Line, ...] = ()  # buffers alive at the loss backward (the usual forward/backward peak)
    layer_backward: int = 0  # bytes alive only while one layer is back-propagated (FSDP2 unit gather + grads)
    # The optimizer step, when the stack runs it piece by piece: at most this many elements are upcast and updated at
    # once (0: all of this GPU's); `step_flattens`: each piece's gradients are first flattened into one copy in the
    # gradient dtype, cast to the master dtype, and the copy freed (DeepSpeed ZeRO-3's sub-groups)
    step_chunk: int = 0
    step_flattens: bool = False
    init_transient: int = 0  # bytes allocated and freed at set-up, before the first step: only a cached block
    step_note: str = ""
    gradient_note: str = ""  # how the gradients term is held (e.g. views into DDP's buckets)
    nccl_communicators: dict[str, int] = field(default_factory=dict)  # beyond the parallel layout's groups
    # points of the backward above the fwd/bwd peak when they exceed it: each line's bytes beyond the states, beside
    # every saved activation when its component is "activations" (Megatron-FSDP's gathered units and buckets)
    backward_points: tuple[Line, ...] = ()


def backward_point(sm: StackMemory, activations: int) -> tuple[int, Line | None]:
    """(bytes beyond the states, line) of the highest of the stack's backward_points, given the saved activations."""
    return max(((x.bytes + (activations if x.component == "activations" else 0), x) for x in sm.backward_points),
               key=lambda q: q[0], default=(0, None))


@dataclass(frozen=True)
class NoGradRule:
    """What a stack holds for the parameters backward never reaches (calculator.model.architectures.
    no_grad_parameters: DSA's and DeepSeek-V4's top-k indexers), `rule` saying why with its source. `grads`: a
    gradient (slot) for each of them all the same; `states`: optimizer state for each of them."""

    grads: bool
    states: bool
    rule: str


HOLDS_ALL = NoGradRule(True, True, "flat buffers laid out at set-up cover every trainable parameter, whether or "
                                   "not backward reaches it (DeepSpeed's partitioned fp32 groups and gradient "
                                   "partitions, Megatron's ParamAndGradBuffer and distributed optimizer shards)")
# torch.optim's half of the rule, which FSDP2's states too
TORCH_OPTIM_STATES = ("torch.optim.AdamW skips a parameter whose grad is None and creates its state at its first "
                      "gradient (torch/optim/adamw.py _init_group: `if p.grad is not None`), so they hold none")
TORCH_OPTIM = NoGradRule(False, False, "a gradient is born when backward reaches its parameter (AccumulateGrad), so "
                                       "these keep .grad None; " + TORCH_OPTIM_STATES)


def no_grad_rule(stack, w) -> NoGradRule:
    """The stack's NO_GRAD rule for this workload (a callable of the workload, or a NoGradRule)."""
    rule = getattr(stack, "NO_GRAD", HOLDS_ALL)
    return rule(w) if callable(rule) else rule


@dataclass(frozen=True)
class KeptDtype:
    """What a stack does with parameters kept in fp32 in a bf16 / fp16 model (DeepSeek-V4's attn_hc, ffn_hc, hc_head,
    sinks, position_bias and norms: architectures.compressed.fp32_parameters), `rule` saying how, with its source.
    `casts` False: each such parameter keeps its fp32 weight, gradient and optimizer state and the modules compute
    with it as on one GPU (calculator/stages/held.py _fp32_kept, architectures/compressed_saved.py), the stack's
    buffers following their dtype. `casts` True: the stack turns them into parameters of the compute dtype like the
    others, and the estimate runs on the model so changed (model_as_run: CompressedSpec.fp32_kept False: no fp32
    extras, the saved tensors of bf16 weights). Not `modelled`: refused (check_fp32_kept), `rule` saying why."""

    modelled: bool
    rule: str
    casts: bool = False


def fp32_kept(m: ModelSpec, first: int, last: int, has_head: bool) -> int:
    """The fp32-kept parameters of layers [first, last) (and of the head's modules with `has_head`); 0 for a model
    that keeps none."""
    return fp32_parameters(m, range(first, last), has_head) if m.compressed is not None else 0


@lru_cache(maxsize=64)
def _kept_cast(m: ModelSpec) -> ModelSpec:
    return m.model_copy(update={"compressed": m.compressed.model_copy(update={"fp32_kept": False})})


def model_as_run(m: ModelSpec, stack) -> ModelSpec:
    """The model as the stack trains it: with the fp32-kept parameters in the compute dtype where its FP32_KEPT
    casts them (one copy per model, so that the estimate's per-model caches keep hitting), else `m`."""
    if stack.FP32_KEPT.casts and stack.FP32_KEPT.modelled and m.compressed is not None and m.compressed.fp32_kept:
        return _kept_cast(m)
    return m


def check_fp32_kept(m: ModelSpec, w, stack) -> None:
    """Refuse, naming `stack`, a training workload whose model keeps parameters in fp32 under a stack whose handling
    of them (its FP32_KEPT) is not modelled."""
    if w.mode == "train" and not stack.FP32_KEPT.modelled and fp32_kept(m, 0, m.num_hidden_layers, True):
        raise InputError("stack", f"the {stack.NAME} stack with a model that keeps "
                                  f"{fp32_kept(m, 0, m.num_hidden_layers, True):,} parameters in fp32 "
                                  f"(_keep_in_fp32_modules_strict) is not modelled: {stack.FP32_KEPT.rule}")


def line(key: str, component: str, label: str, n: int, formula: str, substituted: str | tuple, source: str,
         note: str = "") -> Line:
    return Line(key, component, label, int(n), formula, substituted, source, note)


@lru_cache(maxsize=256)
def layer_grad_params(m: ModelSpec, first: int, last: int, tp: int, expert_split: int) -> tuple[int, ...]:
    """Parameters per decoder layer of a stage on one GPU (dense split by TP, routed experts by EP × expert TP)."""
    layers = count_parameters(m).layers[first:last]
    per_kind = {id(l): l.tp_local(tp) + l.router + l.norms
                + -(-l.routed_experts // expert_split) for l, _ in kind_counts(layers)}  # one int per kind of layer
    return tuple(per_kind[id(l)] for l in layers)


@dataclass(frozen=True)
class BackwardPeak:
    """Bytes above the long-lived states at the forward/backward peak when gradients are born in backward."""

    bytes: int
    position: str
    positions: tuple[tuple[str, int], ...]


def backward_peak(*, loss_peak: int, activations: int, layer_acts: int, n_layers: int, layer_grads: int,
                  last_layer_grads: int, head_grads: int, embedding_grads: int, tied_extra: int, recompute_ws: int,
                  layer_backward: int) -> BackwardPeak:
    """The highest point of forward + backward when each gradient is born as its layer is back-propagated
    (torch/csrc/autograd/functions/accumulate_grad.h: AccumulateGrad creates `.grad` on the first gradient) and
    `zero_grad(set_to_none=True)` freed all of them after the previous step (torch/optim/optimizer.py).

    Positions, each in bytes above the long-lived states:
      loss       the loss backward: every saved activation + the loss head's working set, no gradient yet
      first      back-propagating the last layer: every activation + the LM head's gradient (held by the tied
                 embedding's AccumulateGrad buffer, or lm_head.grad) + that layer's gradients
      last       back-propagating the first layer: what is not a layer activation, that layer's activations (or
                 its recomputed working set) + every layer's gradients + the head's
      embedding  the embedding backward: every gradient + the embedding gradient being summed into a tied head
    A layer's activations are counted until its backward ends and its gradients from its start (an upper bound
    within one layer). Between the first and the last layer the sum is linear in the layer index, so the two
    ends bound every layer in between.

    `layer_acts` is one layer's activations (the layers of a stage are alike), `layer_grads` the gradients of all
    `n_layers` layers and `last_layer_grads` those of the last one (back-propagated first)."""
    rest = activations - n_layers * layer_acts
    work_last = recompute_ws if recompute_ws else (layer_acts if n_layers else 0)
    work_first = recompute_ws
    g_layers = layer_grads
    positions = (
        ("loss", loss_peak),
        ("first layer", activations + work_first + head_grads + last_layer_grads + layer_backward),
        ("last layer", rest + work_last + g_layers + head_grads + layer_backward),
        ("embedding", g_layers + head_grads + embedding_grads + tied_extra),
    )
    name, peak = max(positions, key=lambda p: p[1])
    return BackwardPeak(peak, name, positions)


def tied_embedding_extra(m: ModelSpec, tp: int, grad_dtype: str, lm_head_grad_is_view: bool) -> int:
    """Tied embeddings: the LM head's gradient waits in the shared weight's AccumulateGrad input buffer until the
    embedding backward adds its own V×h gradient (torch/csrc/autograd/input_buffer.cpp: `accumulate` sums in place
    only when the buffered tensor can be reused; the head's gradient arrives as the transpose of a matmul result
    — a view — when the head runs in the weight's own dtype, so the sum is a third tensor). Under autocast the
    head's gradient comes out of the bf16 cast's backward as a fresh tensor and is summed in place."""
    if not m.tie_word_embeddings:
        return 0
    v_h = nbytes(-(-m.vocab_size * m.hidden_size // tp), grad_dtype)
    return v_h * (2 if lm_head_grad_is_view else 1)
