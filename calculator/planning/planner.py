"""The planner: which parallel layouts of a job fit a GPU, for a given number of GPUs or the fewest that work.

Search space (calculator.planning.grid builds it; every degree divides what it splits, as the engine checks):
  training   TP (a divisor of the heads, at most `max_tp`: one node) × PP (a divisor of the layers, or Megatron's
             uneven first / last stages when it does not divide) × CP (1, 2, 4, 8 where the sequence splits) ×
             DP (the rest) × EP (MoE: a divisor of the experts inside DP × CP × TP, expert TP 1) × ZeRO 0–3 ×
             recompute none / selective / full × micro-batch (powers of two up to the job's).
  inference  TP × PP × EP and DP replicas; no ZeRO, no recompute, the job's batch (serving engines: vLLM / SGLang
             start and hold the batch's sequences).
Each layout is estimated by the same engine (the fast byte model of calculator.planning.fast where it covers the
workload, a serving engine's by one estimate() per replica, estimate() otherwise; the plans returned always carry
estimate()'s numbers).

A layout fits when its most loaded GPU stays within the 80% safe band (Fujii et al. 2024) of the GPU's usable
memory; with a serving engine, when the engine starts and its KV pool holds the batch's sequences at once.

Ranking (calculator.planning.ranking; the page caption says the same): fits first, then by the rank key —
"fastest" (the default: highest estimated tokens/s per GPU, lowest memory breaking ties), "fewest-gpus",
"cheapest" (cost per million tokens, with a price), "most-headroom", or "memory" (the earlier order: fewest GPUs,
largest micro-batch, least recompute, lowest memory). Every plan carries its step time, tokens/s per GPU, MFU and
bottleneck (calculator.timing.step_time, vectorised over the grid by calculator.planning.fast_time). With a global
batch (sequences per step) every layout runs the same tokens per step: micro-batch × gradient accumulation × DP.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from calculator.core.errors import InputError
from calculator.engines.common import check_engine_context
from calculator.stages.estimate import estimate
from calculator.core.fit import SAFE_FRACTION
from calculator.model.spec import ModelSpec
from calculator.planning.grid import MAX_PP, Layout, candidate_counts, layouts_of, microbatches_of, workload_of
from calculator.planning.prices import count_grid, training_totals
from calculator.planning.ranking import RANK_TEXT, RANKS, RECOMPUTE_COST, check_rank, rank_key, time_plans
from calculator.core.workload import Workload

__all__ = ["RANKS", "RANK_TEXT", "RECOMPUTE_COST", "rank_key"]
# The planner estimates thousands of layouts and each estimate walks the layers: its time grows with the layer
# count (llama-3.1-8b's shape on one core: 128 layers 1.7 s, 256 layers 4.6 s, 1,000 layers 22 s, 10,000 layers
# over 5 minutes). The deepest published decoders have 126 (Llama-3.1-405B) to 128 layers; twice that is planned,
# deeper models are refused before any estimate, so one planner link cannot hold a server core for minutes.
MAX_PLAN_LAYERS = 256
RANK_KEY = RANK_TEXT["fastest"]  # the default order, in words


@dataclass(slots=True)
class Plan:
    gpus: int
    tp: int
    pp: int
    dp: int
    zero: int
    recompute: str
    total_bytes: int  # most loaded GPU, nvidia-smi
    peak_allocated_bytes: int
    utilization: float
    step_time_s: float | None = None  # calculator.timing.step_time on the workload's GPU (None without one)
    tokens_per_s: float | None = None
    cost_per_million_tokens: float | None = None
    tokens_per_s_per_gpu: float | None = None
    mfu: float | None = None
    bottleneck: str = ""  # compute, memory, host, TP / EP / PP / CP / DP comm, bubble, optimizer
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # expert tensor parallel (None: = tp)
    micro_batch: int = 1
    pp_first_stage_layers: int | None = None  # uneven pipeline stages (None: even split)
    pp_last_stage_layers: int | None = None
    fits: bool = True
    mode: str = "train"
    microbatches: int = 1  # per optimizer step (gradient accumulation; with PP the pipeline's micro-batches)
    # serving engines (vLLM / SGLang; calculator.timing.serving_time), per replica: sequences the KV pool holds at
    # once, the scheduler's cap, the sequences decoded at once at the target concurrency; TTFT, TPOT at that batch,
    # output tokens/s per GPU (what "fastest" ranks serving layouts by)
    max_seqs: float | None = None
    seq_cap: int | None = None
    running_batch: int | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    output_tokens_per_s_per_gpu: float | None = None

    @property
    def pp_first(self) -> int | None:
        """Layout's name for the first stage's layers: a plan reads as its layout where the degrees suffice (the
        planner's vectorised time model takes the plans as they are, without building a Layout for each)."""
        return self.pp_first_stage_layers

    @property
    def pp_last(self) -> int | None:
        return self.pp_last_stage_layers

    @property
    def layout(self) -> Layout:
        return Layout(self.tp, self.pp, self.dp, self.cp, self.ep, self.etp, self.zero, self.recompute,
                      self.micro_batch, self.pp_first_stage_layers, self.pp_last_stage_layers)

    @property
    def short(self) -> str:
        """The layout in a few words: 'TP8 × PP2', 'TP4 × PP16 (3/…/2 layers) × DP8 × EP32, ZeRO-1, …'."""
        return self.layout.describe(self.mode)

    @property
    def label(self) -> str:
        return f"{self.gpus} GPUs: {self.short}"

    @property
    def card(self) -> str:
        """The layout as a fit card names it: serving 'TP8 × PP2'; training the degrees above one and the ZeRO
        stage, 'TP2 × DP4, ZeRO-1' (the job's own micro-batch and recompute are kept, so not repeated)."""
        if self.mode != "train":
            return self.short
        lay = self.layout
        parts = [f"TP{lay.tp}"] if lay.tp > 1 else []
        if lay.pp > 1:
            parts.append(f"PP{lay.pp}" + (f" ({lay.pp_first}/…/{lay.pp_last} layers)" if lay.pp_first else ""))
        parts += [f"{name}{n}" for name, n in (("DP", lay.dp), ("CP", lay.cp), ("EP", lay.ep)) if n > 1]
        text = " × ".join(parts)
        return (text or "one GPU") + (f", ZeRO-{lay.zero}" if lay.zero else "")


def _check(w: Workload, rank: str, timing) -> str:
    if w.mode == "rl":
        raise InputError("mode", "the planner lays out training or inference; for RL plan the trainer (mode train) "
                                 "and the rollout engine (mode infer with --engine) apart")
    return check_rank(w, rank, timing)


def check_plannable(m: ModelSpec) -> None:
    """InputError when the model is too deep to plan in bounded time (MAX_PLAN_LAYERS)."""
    if m.num_hidden_layers > MAX_PLAN_LAYERS:
        raise InputError("num_hidden_layers", f"the planner lays out models of at most {MAX_PLAN_LAYERS} layers "
                         f"(it estimates thousands of layouts, each layer by layer); this one has "
                         f"{m.num_hidden_layers:,}: estimate it with an explicit layout instead")


def _plan(w: Workload, lay: Layout, total: int, peak: int, capacity_bytes: int, fits: bool,
          global_batch: int | None = None) -> Plan:
    return Plan(lay.world_size, lay.tp, lay.pp, lay.dp, lay.zero, lay.recompute, total, peak, total / capacity_bytes,
                cp=lay.cp, ep=lay.ep, etp=lay.etp, micro_batch=lay.micro_batch, pp_first_stage_layers=lay.pp_first,
                pp_last_stage_layers=lay.pp_last, fits=fits, mode=w.mode,
                microbatches=microbatches_of(w, lay, global_batch))


def evaluate(m: ModelSpec, w: Workload, layouts: list[Layout], capacity_bytes: int,
             include_unfit: bool = False, fast=None, global_batch: int | None = None) -> list[Plan]:
    """Plans for `layouts`, estimated: by the fast byte model over the whole grid where it covers the job
    (calculator.planning.fast, equal to estimate() byte for byte), a serving engine's by one estimate() per replica
    (fast.serving_figures), else by estimate() layout by layout. Layouts the engine refuses are left out, and those
    that do not fit unless `include_unfit`. `fast`: the fast model's (total, peak, covered) for these layouts when
    the caller has them (count_grid)."""
    from calculator.planning import fast as fast_model
    from calculator.memory.inference import with_kv_dtype
    w = with_kv_dtype(m, w)  # kv_dtype "auto" as the runtime picks it, as estimate() does
    if w.mode == "infer" and w.engine != "hf":
        return _engine_plans(w, layouts, fast_model.serving_figures(m, w, layouts), capacity_bytes, include_unfit)
    budget = SAFE_FRACTION * capacity_bytes
    if fast is None:
        fast = fast_model.totals(m, w, layouts)
    out, replica = [], {}
    if fast is not None:
        total, peak, covered = fast
        fits = total <= budget
        keep = np.nonzero(covered & (fits | include_unfit))[0]
        out = [_plan(w, layouts[i], int(total[i]), int(peak[i]), capacity_bytes, bool(fits[i]), global_batch)
               for i in keep]
        layouts = [layouts[i] for i in np.nonzero(~covered)[0]]
    for lay in layouts:
        if w.mode == "train" and w.engine == "hf":
            got = training_totals(m, w, lay)
            if got is None:
                continue
            total, peak = got
            fits = total <= budget
        else:
            # generate() of the models the fast byte model does not cover: one estimate() per replica shape and
            # DP 1 or more (DP > 1 adds the data-parallel communicator's buffer, whatever the count); with EP the
            # expert group spans replicas, and whether it divides depends on them: keyed by the whole layout
            key = (replace(lay, dp=min(lay.dp, 2)) if lay.ep == 1 else lay) if w.mode == "infer" else None
            est = replica.get(key) if key else None
            if est is None:
                try:
                    est = estimate(m, workload_of(w, lay), with_fits=False)
                except InputError:
                    continue
                if key:
                    replica[key] = est
            total, peak = est.total_bytes, est.peak_allocated_bytes
            fits = total <= budget
        if fits or include_unfit:
            out.append(_plan(w, lay, total, peak, capacity_bytes, fits, global_batch))
    return out


def _engine_plans(w: Workload, layouts: list[Layout], figures: list, capacity_bytes: int,
                  include_unfit: bool) -> list[Plan]:
    """A serving engine's plans from fast.serving_figures (per layout: total, peak, fits, the sequences the KV pool
    holds, the scheduler's cap; None where refused), in the layouts' order."""
    out = []
    for lay, got in zip(layouts, figures):
        if got is not None and (got[2] or include_unfit):
            plan = _plan(w, lay, got[0], got[1], capacity_bytes, got[2])
            plan.max_seqs, plan.seq_cap = got[3], got[4]
            out.append(plan)
    return out


def _finish(m: ModelSpec, w: Workload, plans: list[Plan], limit: int | None, rank: str, timing,
            global_batch: int | None = None, concurrency: int | None = None) -> list[Plan]:
    """Time every plan (with a GPU), rank, cut to `limit`."""
    time_plans(m, w, plans, timing, global_batch, concurrency)
    plans.sort(key=rank_key(rank))
    return plans if limit is None else plans[:limit]


def plans_for(m: ModelSpec, w: Workload, gpus: int, capacity_bytes: int, max_tp: int = 8, limit: int | None = None,
              rank: str = "fastest", timing=None, include_unfit: bool = False, max_micro_batch: int | None = None,
              search: str = "all", global_batch: int | None = None, concurrency: int | None = None) -> list[Plan]:
    """Layouts of exactly `gpus` GPUs that fit `capacity_bytes` within the safe band, best first by `rank`
    (calculator.planning.ranking). With a GPU in the workload every plan carries its step time, tokens/s (per GPU),
    MFU and bottleneck; `timing`: calculator.timing.inputs.TimingInputs (price, efficiencies, links, overlap).
    `search="layout"` keeps the job's own micro-batch and recompute and varies only the parallel layout;
    `global_batch`: sequences per optimizer step, the same for every layout (micro-batch × accumulation × DP);
    `concurrency`: serving engines, the requests in flight over the whole layout (None: as many as each engine
    admits), which sets each plan's running batch and output tokens/s per GPU (calculator.timing.serving_time)."""
    if gpus < 1:
        raise InputError("gpus", "the number of GPUs must be at least 1")
    rank = _check(w, rank, timing)
    check_plannable(m)
    check_engine_context(m, w)  # a length the engine refuses is refused once, not layout by layout
    layouts = list(layouts_of(m, w, gpus, max_tp, max_micro_batch, search, _batch(w, global_batch)))
    plans = evaluate(m, w, layouts, capacity_bytes, include_unfit, global_batch=_batch(w, global_batch))
    return _finish(m, w, plans, limit, rank, timing, _batch(w, global_batch), _concurrency(concurrency))


def _concurrency(concurrency: int | None) -> int | None:
    if concurrency is not None and concurrency < 1:
        raise InputError("concurrency", "the target concurrency must be at least 1 request")
    return concurrency


def _batch(w: Workload, global_batch: int | None) -> int | None:
    if global_batch is not None and global_batch < 1:
        raise InputError("global_batch", "the global batch must be at least 1 sequence")
    return global_batch if w.mode == "train" else None


def fewest_gpus(m: ModelSpec, w: Workload, capacity_bytes: int, max_gpus: int = 4096, max_tp: int = 8,
                limit: int | None = None, rank: str = "fastest", timing=None, max_micro_batch: int | None = None,
                search: str = "all", global_batch: int | None = None,
                concurrency: int | None = None) -> list[Plan]:
    """The layouts at the smallest GPU count where any layout fits (counts tried: 1, 2, 4, 8, then whole nodes of 8;
    calculator.planning.grid.candidate_counts), ranked by `rank`."""
    rank = _check(w, rank, timing)
    check_plannable(m)
    check_engine_context(m, w)  # a length the engine refuses is refused once, not layout by layout
    gb = _batch(w, global_batch)
    found = _fewest(m, w, capacity_bytes, max_gpus, max_tp, max_micro_batch, search, global_batch=gb)
    return _finish(m, w, found, limit, rank, timing, gb, _concurrency(concurrency)) if found else []


def _fewest(m: ModelSpec, w: Workload, capacity_bytes: int, max_gpus: int, max_tp: int,
            max_micro_batch: int | None, search: str, max_layouts: int | None = None,
            global_batch: int | None = None) -> list[Plan]:
    """Probe 1, 2, 4, 8, … GPUs for the first power of two P where a layout fits, then find the fewest of the
    candidate counts above P/2 (whole nodes): one by one for serving, by bisection for training (a count where a
    layout fits leaves one at every larger count: more ranks to shard over). Counts below P/2 are not tried.
    _OverBudget when more than `max_layouts` layouts would be estimated."""
    spent = 0

    def at(n: int) -> list[Plan]:
        nonlocal spent
        layouts, fast = count_grid(m, w, n, max_tp, max_micro_batch, search, global_batch)
        spent += len(layouts)
        if max_layouts is not None and spent > max_layouts:
            raise _OverBudget
        return evaluate(m, w, layouts, capacity_bytes, fast=fast, global_batch=global_batch)
    if w.mode != "train":  # a serving replica: TP × PP GPUs (DP replicas hold the same per GPU)
        max_gpus = min(max_gpus, max_tp * MAX_PP)
    probe, found = 1, []
    while probe <= max_gpus:
        found = at(probe)
        if found:
            break
        probe *= 2
    if not found:
        return []
    between = [n for n in candidate_counts(probe - 1) if n > probe // 2]
    if w.mode != "train":
        for n in between:
            smaller = at(n)
            if smaller:
                return smaller
        return found
    lo, hi = 0, len(between)  # the fewest that fits is between[lo:hi], or the probe itself
    while lo < hi:
        mid = (lo + hi) // 2
        smaller = at(between[mid])
        if smaller:
            found, hi = smaller, mid
        else:
            lo = mid + 1
    return found


# How far the fit cards search: every count up to 4,096 GPUs where the fast byte model prices the layouts (tens of
# ms a card); up to 512 where each layout is a full estimate() (LoRA, a stack you chose, offload, ...), and then at
# most CARD_LAYOUT_BUDGET layouts a card: a large MoE model costs milliseconds a layout (DeepSeek-V3 with LoRA took
# 33 s for the catalogue without a budget), so past it the card keeps the sharding estimate and says the Planner
# page searches the job. The Planner page has neither bound.
CARD_MAX_GPUS = 4096
CARD_MAX_GPUS_ESTIMATED = 512
CARD_LAYOUT_BUDGET = 200
OVER_BUDGET = "over budget"  # _gpus_needed's answer when a card's search would pass CARD_LAYOUT_BUDGET


class _OverBudget(Exception):
    pass


def card_bound(m: ModelSpec, w: Workload) -> int:
    """The most GPUs a fit card's search tries for this job (CARD_MAX_GPUS, or CARD_MAX_GPUS_ESTIMATED for a
    training job the fast byte model does not cover; 0, no search, past MAX_PLAN_LAYERS)."""
    from calculator.planning import fast as fast_model
    if m.num_hidden_layers > MAX_PLAN_LAYERS:
        return 0  # too deep to plan in bounded time: no search
    if w.mode == "train" and not fast_model.covers(m, layout_free(w, w.gpu)):
        return CARD_MAX_GPUS_ESTIMATED
    return CARD_MAX_GPUS


def gpus_needed(m: ModelSpec, w: Workload, gpu_id: str, capacity_bytes: int, max_gpus: int | None = None,
                max_tp: int = 8) -> Plan | None | str:
    """The fewest GPUs of one kind for which a real layout of this job fits (the job's micro-batch, recompute and
    sequence; the parallel layout varied, mode-aware: training TP × PP × DP × CP × EP × ZeRO, serving TP × PP × EP),
    and that layout; None when none of up to `max_gpus` (default card_bound) does; OVER_BUDGET when the job is
    estimated layout by layout and the search would pass CARD_LAYOUT_BUDGET layouts. Training keeps the planner's
    batch semantics: each data-parallel rank runs the job's micro-batch. Cached: the fit cards ask for it on every
    GPU they show."""
    free = layout_free(w, gpu_id)
    return _gpus_needed(m, free, capacity_bytes, card_bound(m, free) if max_gpus is None else max_gpus, max_tp)


LAYOUT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "etp", "zero", "sequence_parallel", "schedule", "virtual_stages",
                 "pp_first_stage_layers", "pp_last_stage_layers")


def layout_free(w: Workload, gpu_id: str) -> Workload:
    """The job without its layout (the planner sets it), on `gpu_id`: one cache entry for every layout of a job."""
    defaults = Workload().parallel
    par = w.parallel.model_copy(update={f: getattr(defaults, f) for f in LAYOUT_FIELDS})
    return w.model_copy(update={"gpu": gpu_id, "parallel": par})


@lru_cache(maxsize=1024)
def _gpus_needed(m: ModelSpec, w: Workload, capacity_bytes: int, max_gpus: int, max_tp: int) -> Plan | None:
    if w.mode == "rl":
        return None
    from calculator.planning import fast as fast_model
    budget = None if w.mode != "train" or fast_model.covers(m, w) else CARD_LAYOUT_BUDGET
    try:
        found = _fewest(m, w, capacity_bytes, max_gpus, max_tp, None, "layout", budget)
    except _OverBudget:
        return OVER_BUDGET
    if not found:
        return None
    time_plans(m, w, found)  # the card's layout: the fastest of the fewest-GPU layouts, as the planner ranks them
    return min(found, key=rank_key("fastest"))
