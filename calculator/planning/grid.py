"""The planner's search space: every parallel layout of a job on N GPUs whose degrees divide what they split
(the rules of calculator.memory.parallel.check_divisibility, applied while enumerating so no layout is built only to be
refused), and the GPU counts the fewest-GPU search tries.

Rules, with their sources:
- TP divides the attention heads, the KV heads (or is a multiple of them) and the MLP width; at most `max_tp` (one
  node's NVLink domain).
- PP divides the layers, or, when it does not, Megatron-LM's uneven first / last stages (--decoder-first-pipeline-
  num-layers / --decoder-last-pipeline-num-layers; megatron/core/transformer/transformer_config.py) with the middle
  stages even: `uneven_split`. torchtitan splits the same way (pipeline_parallel_first/last_stage_less_layers,
  torchtitan/config/configs.py). The planner uses the 1F1B schedule (uneven stages do not combine with
  interleaving in Megatron-LM).
- CP in 1, 2, 4, 8 where the sequence splits into 2·CP load-balanced chunks (Megatron-Core context parallelism).
- EP (MoE only) divides the routed experts, and EP × expert-TP divides DP × CP × TP: the expert-parallel group is
  carved out of the data-parallel ranks (megatron/core/parallel_state.py, initialize_model_parallel: expert data
  parallel = world / (ETP × EP × PP)). With EP > 1 the planner sets expert TP to 1, the usual MoE layout.
- ZeRO 1–3 need a data-parallel (× CP) group larger than one; training only. Serving (mode infer) varies TP, PP,
  EP and DP replicas; no ZeRO, no recompute, the job's own batch.
"""
from __future__ import annotations

from dataclasses import dataclass

from calculator.model.spec import ModelSpec
from calculator.memory.parallel import divisors
from calculator.core.workload import Parallelism, Workload

CP_DEGREES = (1, 2, 4, 8)
RECOMPUTE = ("none", "selective", "full")
MAX_PP = 64


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    zero: int = 0
    recompute: str = "none"
    micro_batch: int = 1
    pp_first: int | None = None  # uneven first / last pipeline stage (None: even split)
    pp_last: int | None = None

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def describe(self, mode: str = "train") -> str:
        pp = f"PP{self.pp}" + (f" (first {self.pp_first}, last {self.pp_last} layers)" if self.pp_first else "")
        if mode != "train":
            parts = [f"TP{self.tp}", pp] + ([f"EP{self.ep}"] if self.ep > 1 else []) + (
                [f"DP{self.dp} replicas"] if self.dp > 1 else [])
            return " × ".join(parts)
        parts = [f"TP{self.tp}", pp, f"DP{self.dp}"] + ([f"CP{self.cp}"] if self.cp > 1 else []) + (
            [f"EP{self.ep}"] if self.ep > 1 else [])
        return (" × ".join(parts) + f", ZeRO-{self.zero}, recompute {self.recompute}, micro-batch {self.micro_batch}")


def uneven_split(layers: int, pp: int) -> tuple[int, int] | None:
    """(first, last) stage layers when `pp` does not divide `layers`: the middle stages take ⌈L/pp⌉ each (⌊L/pp⌋
    when that leaves the ends fewer than one layer each) and the ends share the rest, the last stage (with the loss
    head) the lighter. None when pp divides the layers or exceeds them."""
    if pp < 2 or pp > layers or layers % pp == 0:
        return None
    for each in (-(-layers // pp), layers // pp):
        rest = layers - (pp - 2) * each
        if rest >= 2:
            first = -(-rest // 2)
            return first, rest - first
    return None


def tp_degrees(m: ModelSpec, max_tp: int) -> list[int]:
    kv = m.kv_heads
    return [t for t in divisors(m.num_attention_heads) if t <= max_tp and m.intermediate_size % t == 0
            and (m.is_mla or kv % t == 0 or t % kv == 0)]


def pp_options(m: ModelSpec, n: int) -> list[tuple[int, int | None, int | None]]:
    """(pp, first, last) for every PP dividing n: even where it divides the layers, else the uneven split."""
    out = []
    for pp in range(1, min(n, MAX_PP, m.num_hidden_layers) + 1):
        if n % pp:
            continue
        if m.num_hidden_layers % pp == 0:
            out.append((pp, None, None))
        else:
            split = uneven_split(m.num_hidden_layers, pp)
            if split:
                out.append((pp, *split))
    return out


def _micro_batches(w: Workload, max_micro_batch: int | None, search: str) -> list[int]:
    """Largest first: the job's micro-batch (or `max_micro_batch`) and every power of two below it."""
    top = max_micro_batch or w.micro_batch
    if search != "all" or w.mode != "train":
        return [w.micro_batch]
    return [top] + [b for b in (1 << k for k in range(top.bit_length() + 1)) if b < top][::-1]


def layouts_of(m: ModelSpec, w: Workload, n: int, max_tp: int = 8, max_micro_batch: int | None = None,
               search: str = "all", global_batch: int | None = None):
    """Every layout of exactly n GPUs (search "all": also recompute and micro-batch; "layout": the job's own).
    With a global batch (sequences per optimizer step) only the layouts whose micro-batch × DP divides it into at
    least PP micro-batches (fits_global_batch)."""
    train = w.mode == "train"
    p = w.parallel
    mbs = _micro_batches(w, max_micro_batch, search)
    recomputes = RECOMPUTE if (train and search == "all") else (w.recompute,)
    for tp in tp_degrees(m, max_tp):
        if n % tp:
            continue
        for pp, first, last in pp_options(m, n // tp):
            for cp in (CP_DEGREES if train else (1,)):
                if (n // (tp * pp)) % cp or (cp > 1 and w.seq_len % (2 * cp)):
                    continue
                dp = n // (tp * pp * cp)
                if p.zero_shard_size and (dp * cp) % p.zero_shard_size:
                    continue
                for ep, etp in _expert_options(m, tp, dp * cp * tp):
                    zeros = (0,) if not train else ((3,) if p.offload_params else (
                        (0, 1, 2, 3) if dp * cp > 1 else (0,)))
                    if pp > 1 and w.stack is None:  # Megatron-LM and DeepSpeed pipeline with ZeRO-1 at most;
                        zeros = tuple(z for z in zeros if z < 2)  # FSDP2 + PP when stack fsdp2 is chosen
                    for zero in zeros:
                        for rc in recomputes:
                            for mb in mbs:
                                if global_batch and not fits_global_batch(global_batch, mb, dp, pp):
                                    continue
                                yield Layout(tp, pp, dp, cp, ep, etp, zero, rc, mb, first, last)


def _expert_options(m: ModelSpec, tp: int, group: int) -> list[tuple[int, int | None]]:
    """(ep, expert tp) pairs: EP 1 with expert TP = TP (where TP splits the expert width), and every EP > 1
    dividing the experts and the DP × CP × TP group, with expert TP 1."""
    if not m.is_moe:
        return [(1, None)]
    out = [(1, None)] if m.expert_intermediate_size % tp == 0 else [(1, 1)]
    out += [(ep, 1) for ep in divisors(m.num_experts) if ep > 1 and group % ep == 0]
    return out


def candidate_counts(max_gpus: int) -> list[int]:
    """GPU counts the fewest-GPU search tries, smallest first: 1, 2, 4, 8 GPUs, then whole nodes of 8."""
    return [n for n in (1, 2, 4) if n <= max_gpus] + list(range(8, max_gpus + 1, 8))


def fits_global_batch(global_batch: int, micro_batch: int, dp: int, pp: int) -> bool:
    """Whether a global batch of sequences splits into whole micro-batches per data-parallel rank, at least PP of
    them (fewer leaves a pipeline stage idle: Megatron-LM's 1F1B needs m ≥ p to fill the pipeline)."""
    per_rank, rest = divmod(global_batch, micro_batch * dp)
    return rest == 0 and per_rank >= max(1, pp)


def microbatches_of(w: Workload, lay: Layout, global_batch: int | None = None) -> int:
    """Micro-batches per optimizer step: global batch / (micro-batch × DP) when the global batch is set (the same
    tokens per step for every layout: micro-batch × gradient accumulation × DP), else at least PP."""
    if w.mode != "train":
        return w.parallel.num_microbatches or 1
    if global_batch:
        return global_batch // (lay.micro_batch * lay.dp)
    return max(lay.pp, w.parallel.num_microbatches or 1)


def workload_of(w: Workload, lay: Layout, global_batch: int | None = None) -> Workload:
    """The job with this layout (1F1B; sequence parallelism with TP where the sequence splits; at least PP
    micro-batches per step, or the global batch's)."""
    p = w.parallel
    train = w.mode == "train"
    sp = train and lay.tp > 1 and (w.seq_len // lay.cp) % lay.tp == 0
    par = Parallelism(**{**p.model_dump(), "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep,
                         "etp": lay.etp, "zero": lay.zero, "sequence_parallel": sp,
                         "num_microbatches": microbatches_of(w, lay, global_batch) if train else p.num_microbatches,
                         "schedule": "1f1b", "virtual_stages": 1,
                         "pp_first_stage_layers": lay.pp_first, "pp_last_stage_layers": lay.pp_last})
    return w.model_copy(update={"parallel": par, "recompute": lay.recompute, "micro_batch": lay.micro_batch})


def replica_key(w: Workload, lay: Layout) -> tuple:
    """What a serving engine's estimate of a layout reads of it: the replica (every degree but DP: each DP replica is
    an engine of its own), and whether the layout passes the two rules of memory.parallel.check_divisibility that
    read DP (EP × expert TP inside DP × CP × TP; the hybrid shard group inside DP × CP). Layouts with one key share
    one estimate (calculator.planning.fast.serving_figures)."""
    group, zs = lay.dp * lay.cp, w.parallel.zero_shard_size
    experts_fit = lay.ep == 1 or group * lay.tp % (lay.ep * (lay.etp or lay.tp)) == 0
    return (lay.tp, lay.pp, lay.cp, lay.ep, lay.etp, lay.zero, lay.recompute, lay.micro_batch, lay.pp_first,
            lay.pp_last, experts_fit, not zs or group % zs == 0)
