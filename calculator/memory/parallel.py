"""How parallelism splits a model over GPUs: divisibility rules, pipeline stages, in-flight micro-batches, and
the per-GPU parameter shard of each stage (TP, EP×ETP, PP), before ZeRO/FSDP sharding.

Degrees that do not divide are errors (InputError naming the field), never silently rounded.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace

from calculator.core.errors import InputError
from calculator.model import latent_moe
from calculator.model.architectures.compressed import check_training
from calculator.model.spec import ModelSpec
from calculator.memory.inference import SERVING_ENGINES
from calculator.model.parameters import count_parameters, final_norm_shapes, kind_counts, lm_head_shapes, outer_shapes
from calculator.core.workload import Parallelism, Workload
from calculator.memory.pipeline_split import check_split, chunk_layer_counts, divisors, uneven_chunks


def check_divisibility(m: ModelSpec, w: Workload) -> None:
    """Raise InputError when a parallel degree does not divide what it splits."""
    p = w.parallel
    check_served_only(m, w)
    if m.compressed is not None and w.mode != "infer":  # DeepSeek-V4 (calculator/model/architectures/compressed.py)
        check_training(w)
    if m.moe_latent_size and w.mode != "infer":  # what a latent MoE's training is not modelled for
        latent_moe.check_training(w)
    if m.compressed is not None and p.tp > 1 and (w.mode != "infer" or w.engine == "hf"):
        raise InputError("tp", "transformers keeps DeepSeek-V4's attention, compressors and shared expert whole on "
                               "every TP rank (DeepseekV4Config.base_model_tp_plan shards only the routed experts): "
                               "tensor parallelism is not modelled for it there; split it with ep or pp, or serve "
                               "it with vLLM or SGLang, which split its attention by heads")
    _check_model_split(m, p)
    if p.pp_layout:  # the layout's MTP layers 'm' against the workload's
        check_split(m.num_hidden_layers, p, getattr(w, "mtp_layers", 0))
    if p.cp > 1 and w.seq_len % (2 * p.cp):
        raise InputError("cp", f"context parallel size {p.cp} needs seq_len divisible by 2·cp = {2 * p.cp} "
                               f"(load-balanced causal split); seq_len is {w.seq_len}")
    if p.sequence_parallel and p.tp > 1 and (w.seq_len // p.cp) % p.tp:
        raise InputError("sequence_parallel", f"sequence parallelism needs seq_len / cp ({w.seq_len // p.cp}) "
                                              f"divisible by tp ({p.tp})")
    if p.zero_shard_size is not None and (p.dp * p.cp) % p.zero_shard_size:
        raise InputError("zero_shard_size", f"the hybrid shard group ({p.zero_shard_size}) must divide dp × cp "
                                            f"({p.dp * p.cp})")
    if w.mode == "train" and p.pp > 1 and p.microbatches < p.pp:
        raise InputError("num_microbatches", f"with pp = {p.pp} a step needs at least {p.pp} micro-batches "
                                             f"(got {p.microbatches}); the pipeline would never fill")


def check_served_only(m: ModelSpec, w: Workload) -> None:
    """A model only the serving engines run as described (ModelSpec.served_only) is refused for anything else."""
    if getattr(m, "served_only", None) and not (w.mode == "infer" and w.engine in SERVING_ENGINES):
        raise InputError("engine", f"{m.served_only}: serve it with --engine vllm or sglang, which run their own "
                                   f"kernels and whose memory is described")


@lru_cache(maxsize=512)
def _check_model_split(m: ModelSpec, p: Parallelism) -> None:
    """The checks of check_divisibility that only the model and the layout decide (TP, PP, EP, expert TP), done
    once per pair: a refusal raises and so is never cached."""
    a, kv = m.num_attention_heads, m.kv_heads
    if a % p.tp:
        raise InputError("tp", f"tensor parallel size {p.tp} must divide num_attention_heads ({a}); "
                               f"try one of {divisors(a)}")
    if m.swa_num_attention_heads and m.swa_num_attention_heads % p.tp:
        raise InputError("tp", f"tensor parallel size {p.tp} must divide the sliding layers' attention heads "
                               f"({m.swa_num_attention_heads}); try one of {divisors(m.swa_num_attention_heads)}")
    if not m.is_mla and kv % p.tp and p.tp % kv:
        raise InputError("tp", f"tensor parallel size {p.tp} must divide num_key_value_heads ({kv}) or be a "
                               f"multiple of it")
    for f in sorted(set(m.ffn_widths or (m.intermediate_size,))):  # each layer's width where it has its own
        if f % p.tp:
            raise InputError("tp", f"tensor parallel size {p.tp} must divide intermediate_size ({f})")
    check_split(m.num_hidden_layers, p)
    if p.ep > 1:
        if not m.is_moe:
            raise InputError("ep", "expert parallelism needs a mixture-of-experts model; set ep to 1")
        if m.num_experts % p.ep:
            raise InputError("ep", f"expert parallel size {p.ep} must divide num_experts ({m.num_experts}); "
                                   f"try one of {divisors(m.num_experts)}")
        if (p.dp * p.cp * p.tp) % (p.ep * p.expert_tp):
            raise InputError("ep", f"ep × expert tp ({p.ep * p.expert_tp}) must divide dp × cp × tp "
                                   f"({p.dp * p.cp * p.tp}): experts are placed inside the data-parallel ranks")
    if m.is_moe and m.expert_intermediate_size % p.expert_tp:
        raise InputError("etp", f"expert tensor parallel size {p.expert_tp} must divide the expert width "
                                f"({m.expert_intermediate_size})")


def stage_layer_counts(layers: int, p: Parallelism) -> tuple[int, ...]:
    """Decoder layers of each pipeline stage (rank): an even split, or Megatron's uneven split — first / last
    stages, the embedding and loss counted in the split, or a layout (calculator.memory.pipeline_split); a rank's
    virtual stages summed."""
    if not uneven_chunks(p):
        return (layers // p.pp,) * p.pp
    return tuple(sum(row) for row in chunk_layer_counts(layers, p))


@dataclass(frozen=True)
class StageShard:
    """Parameters one GPU of pipeline stage `stage` holds after TP/EP/PP (before ZeRO/FSDP)."""

    stage: int
    first_layer: int
    last_layer: int  # exclusive
    dense: int  # replicated over the data-parallel group (sharded by ZeRO over dp·cp)
    experts: int  # routed experts (sharded by ZeRO over the expert-data-parallel group)
    tensors: int
    largest_unit: int  # largest FSDP/ZeRO-3 unit on this GPU (a decoder layer, or embedding/head)
    has_embedding: bool
    has_head: bool
    moe_layers: int = 0  # decoder layers of this stage with routed experts
    layer_linear: int = 0  # linear weights of the decoder layers (what weight quantization applies to)

    @property
    def total(self) -> int:
        return self.dense + self.experts


def _split(n: int, ways: int) -> int:
    return -(-n // ways)


_SPLIT_FIELDS = ("pp", "schedule", "virtual_stages", "pp_layout", "pp_first_stage_layers", "pp_last_stage_layers",
                 "pp_embedding_in_split", "pp_loss_in_split")


def stage_shards(m: ModelSpec, p: Parallelism) -> tuple[StageShard, ...]:
    """Per-GPU parameter shard of every pipeline stage. First stage: embedding; last stage: final norm + LM head
    (a tied head gets its own copy on the last stage when pp > 1, as in Megatron). Built once per model and what
    the shards read of the layout (TP, EP × expert TP, the pipeline split), whatever its data parallelism."""
    return _stage_shards(m, p.tp, p.ep * p.expert_tp, tuple(getattr(p, f) for f in _SPLIT_FIELDS))


@lru_cache(maxsize=1024)
def _stage_shards(m: ModelSpec, tp: int, ep_tp: int, split: tuple) -> tuple[StageShard, ...]:
    p = SimpleNamespace(**dict(zip(_SPLIT_FIELDS, split)))  # the pipeline fields stage_layer_counts reads
    counts = count_parameters(m)
    sizes = stage_layer_counts(m.num_hidden_layers, p)
    shards = []
    last = 0
    for s in range(p.pp):
        first, last = last, last + sizes[s]
        # With interleaving a rank holds v chunks spread over the model; layer counts are the same per rank.
        dense = experts = tensors = largest = linear = 0
        for layer, n in kind_counts(counts.layers[first:last]):  # each kind of layer once, times its count
            layer_linear = layer.tp_local(tp)
            linear += n * (layer_linear + _split(layer.routed_experts, ep_tp))
            layer_dense = layer_linear + layer.router + layer.norms
            layer_experts = _split(layer.routed_experts, ep_tp)
            dense += n * layer_dense
            experts += n * layer_experts
            tensors += n * layer.tensors
            largest = max(largest, layer_dense + layer_experts)
        has_embedding, has_head = s == 0, s == p.pp - 1
        if has_embedding:
            emb = _split(counts.embedding, tp)
            dense += emb + counts.idle  # modules built but never run (MiMo's MTP block): whole, with the embedding
            tensors += 1 + (m.learned_position_embeddings > 0) + len(outer_shapes(m))  # with the embedding
            largest = max(largest, emb)
        if has_head:
            head = counts.lm_head or (counts.embedding if p.pp > 1 else 0)
            dense += counts.final_norm + _split(head, tp)
            tensors += len(final_norm_shapes(m)) + (len(lm_head_shapes(m)) if counts.lm_head else
                                                                   int(head > 0))
            largest = max(largest, _split(head, tp))
        moe = sum(m.layer_is_moe(i) for i in range(first, last)) if m.is_moe else 0
        shards.append(StageShard(s, first, last, dense, experts, tensors, largest, has_embedding, has_head, moe,
                                 linear))
    return tuple(shards)


def in_flight_microbatches(p: Parallelism, stage: int, layers: int | None = None) -> float:
    """Micro-batches whose activations stage `stage` holds at once, in units of the stage's full layer set
    (Narayanan et al. 2021 §2.2; Megatron-LM interleaved warm-up: (p − r − 1)·2 + (v − 1)·p + 1 chunks). Forward k
    of the warm-up runs model chunk (k mod p·v) // p (megatron/core/pipeline_parallel/schedules.py
    get_model_chunk_id), so with uneven chunks (`layers`: the model's decoder layers, needed then) the in-flight
    chunks count by their layers: Σ layers of the chunks in flight / the stage's layers."""
    if p.pp == 1:
        return 1.0
    m = p.microbatches
    if p.schedule == "interleaved":
        v = p.virtual_stages
        chunks = min((p.pp - stage - 1) * 2 + (v - 1) * p.pp + 1, m * v)
        if layers is None or not uneven_chunks(p):
            return chunks / v
        row = chunk_layer_counts(layers, p)[stage]
        held = sum(row[(k % (p.pp * v)) // p.pp] for k in range(chunks))
        return held / max(1, sum(row))
    return float(min(p.pp - stage, m))


def kv_heads_per_rank(m: ModelSpec, tp: int) -> int:
    """KV heads on one TP rank: k/tp, or one replicated head when tp exceeds the KV heads."""
    return max(m.kv_heads // tp, 1)


@lru_cache(maxsize=512)
def communicators(p: Parallelism) -> dict[str, int]:
    """The process groups of size > 1 one GPU belongs to (each allocates NCCL buffers). Cached: do not modify."""
    groups = {"tp": p.tp, "pp": p.pp, "dp": p.dp * p.cp, "cp": p.cp, "ep": p.ep}
    return {k: v for k, v in groups.items() if v > 1}
