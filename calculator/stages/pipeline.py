"""The pipeline stages of one estimate, each content computed once (a PP=16 job has three distinct stages, not 16).

A stage's memory depends on its position only through the micro-batches it holds in flight (1F1B: p − r,
calculator.memory.parallel.in_flight_microbatches) and on everything else through its content: its layers (count and,
layer by layer, whether each has routed experts and sliding-window attention), its parameter shard and whether it
holds the embedding or the LM head. So:
- inference (no micro-batches in flight): a stage with the content of an earlier one is that stage, renumbered;
- training: the first stage of each content is computed; a later one with the same content holds fewer
  micro-batches in flight and no more memory (the same argument as calculator/planning.fast_stages.candidate_stages),
  so it is a LazyStage, computed when read, and never the most loaded stage.
The stages of one training estimate share what does not depend on the stage (SharedByStages).
"""
from __future__ import annotations

from functools import lru_cache, partial

from calculator.memory import activations as act
from calculator import impls
from calculator.memory import lora
from calculator.memory import megatron_core
from calculator import stacks
from calculator.memory.parallel import StageShard, stage_shards
from calculator.model.architectures import ffn_widths
from calculator.model.spec import ModelSpec
from calculator.core.result import LazyStage, StageEstimate


@lru_cache(maxsize=256)
def _layer_kinds(m) -> tuple[tuple[bool, bool], ...]:
    """(routed experts, sliding window, kind) of every decoder layer."""
    return tuple((m.layer_is_moe(i), m.layer_is_sliding(i), m.layer_kind(i)) for i in range(m.num_hidden_layers))


def content(m, shard: StageShard, kinds: tuple | None = None) -> tuple:
    """Everything a stage's memory depends on but its position (`kinds`: _layer_kinds(m), when at hand)."""
    kinds = _layer_kinds(m) if kinds is None else kinds
    return (shard.dense, shard.experts, shard.tensors, shard.largest_unit, shard.has_embedding, shard.has_head,
            shard.moe_layers, shard.layer_linear, kinds[shard.first_layer:shard.last_layer])


@lru_cache(maxsize=256)
def first_of_content(m, p) -> tuple[int, ...]:
    """For each pipeline stage of layout `p`, the first stage with the same content."""
    kinds = _layer_kinds(m)
    seen: dict[tuple, int] = {}
    return tuple(seen.setdefault(content(m, shard, kinds), shard.stage) for shard in stage_shards(m, p))


def build(stage_of, m, w, shards: list[StageShard], gpu) -> tuple:
    """stage_of(m, w, shard, gpu) for the first stage of each content; the others reuse (inference) or defer
    (training) it. A training stage is priced on the model as the stack trains it (stacks.model_as_run)."""
    if w.mode == "train":
        m = stacks.model_as_run(m, w)
    if len(shards) == 1:
        return (stage_of(m, w, shards[0], gpu),)
    train = w.mode == "train"
    out: list = []
    for shard, first in zip(shards, first_of_content(m, w.parallel)):
        if first == shard.stage:
            out.append(stage_of(m, w, shard, gpu))
        elif train:
            out.append(LazyStage(shard.stage, (shard.first_layer, shard.last_layer),
                                 partial(stage_of, m, w, shard, gpu)))
        else:
            s = out[first]
            out.append(StageEstimate(shard.stage, (shard.first_layer, shard.last_layer), s.terms,
                                     s.peak_allocated_bytes, s.total_bytes, s.host_terms, s.phases))
    return tuple(out)


class SharedByStages:
    """What every pipeline stage of one training estimate shares: the workload as QLoRA's preparation leaves it, the
    stack and the workload it counts the states in, the local shapes, the model code and its layers."""

    def __init__(self, m: ModelSpec, w):
        megatron_core.check(m, w)  # Megatron-Core inputs: their stack, GPU (FP8 recipes) and values
        self.w = lora.kbit_prepared(w)  # QLoRA's prepare_model_for_kbit_training: fp32 non-4-bit weights, activations
        self.stack = stacks.module(self.w)
        stacks.check_model(m, self.w)  # a model keeping fp32 parameters: the stack's FP32_KEPT rule
        self.ws = self.stack.states_workload(self.w)  # the model states as the stack holds them (FSDP2: fp32 shards)
        self.d = act.dims(m, self.w)
        self.code = impls.module(self.w.impl)  # what the model's code keeps: transformers, Liger, compiled, Megatron/TE
        self.m, self.layers = m, {}

    def layer(self, kind):
        """The saved activations of one kind of decoder layer (a LayerKind), computed once per estimate."""
        got = self.layers.get(kind)
        if got is None:
            m, d = ffn_widths.layer_view(self.m, self.d, kind)  # a kind's own MLP width (Nemotron-NAS)
            got = self.layers[kind] = self.code.layer(m, self.w, d, kind)
        return got


_last_shared: tuple = (None, None, None)  # (model, workload, SharedByStages): one estimate's stages in a row


def shared_by_stages(m: ModelSpec, w) -> SharedByStages:
    global _last_shared
    last = _last_shared  # one read: another thread may replace it, never half of it
    if last[0] is m and last[1] is w:
        return last[2]
    shared = SharedByStages(m, w)
    _last_shared = (m, w, shared)
    return shared
