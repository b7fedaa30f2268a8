"""The planner: which parallel layouts of a job fit a GPU, for a given number of GPUs or the fewest that work.

Search space (calculator.planning.grid builds it; every degree divides what it splits, as the engine checks):
  training   TP (a divisor of the heads, at most `max_tp`: one node) × PP (a divisor of the layers, or Megatron's
             uneven first / last stages when it does not divide) × CP (1, 2, 4, 8 where the sequence splits) ×
             DP (the rest) × EP (MoE: a divisor of the experts inside DP × CP × TP, expert TP 1) × ZeRO 0–3 ×
             recompute none / selective / full × micro-batch (powers of two up to the job's).
  inference  TP × PP × EP and DP replicas; no ZeRO, no recompute, the job's batch (serving engines: vLLM / SGLang
             start and hold the batch's sequences).
Each layout is estimated by the same engine (the fast byte model of calculator.planning.fast where it covers the
workload, estimate() otherwise; the plans returned always carry estimate()'s numbers).

A layout fits when its most loaded GPU stays within the 80% safe band (Fujii et al. 2024) of the GPU's usable
memory; with a serving engine, when the engine starts and its KV pool holds the batch's sequences at once.

Ranking (RANK_KEY, the page caption says the same): fits first, then fewest GPUs, then largest micro-batch, then
least recompute (none, selective, full), then lowest memory on the most loaded GPU; ties by lower ZeRO stage, PP,
CP, TP and EP. `rank="time"` puts the highest tokens/s first and `rank="cost"` the lowest cost per million tokens
(calculator.timing.step_time), after fits and GPU count.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from calculator.core.errors import InputError
from calculator.stages.estimate import estimate
from calculator.core.fit import SAFE_FRACTION
from calculator.model.spec import ModelSpec
from calculator.planning.grid import MAX_PP, Layout, candidate_counts, layouts_of, workload_of
from calculator.planning.prices import count_grid, training_totals
from calculator.core.workload import Workload

RECOMPUTE_COST = {"none": 0, "selective": 1, "op": 1, "full": 2}  # rank: prefer less recomputation (op: torchtitan's
# op-level selective AC, searched only as the job's own recompute, e.g. by the fit cards)
# The planner estimates thousands of layouts and each estimate walks the layers: its time grows with the layer
# count (llama-3.1-8b's shape on one core: 128 layers 1.7 s, 256 layers 4.6 s, 1,000 layers 22 s, 10,000 layers
# over 5 minutes). The deepest published decoders have 126 (Llama-3.1-405B) to 128 layers; twice that is planned,
# deeper models are refused before any estimate, so one planner link cannot hold a server core for minutes.
MAX_PLAN_LAYERS = 256
RANKS = ("memory", "time", "cost")
RANK_KEY = ("fits, then fewest GPUs, then largest micro-batch, then least recompute (none, selective, full), "
            "then lowest memory on the most loaded GPU")


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
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # expert tensor parallel (None: = tp)
    micro_batch: int = 1
    pp_first_stage_layers: int | None = None  # uneven pipeline stages (None: even split)
    pp_last_stage_layers: int | None = None
    fits: bool = True
    mode: str = "train"

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


def _timed(m: ModelSpec, w: Workload, plan: Plan, timing) -> Plan:
    """The plan with its step time, tokens/s and cost on the workload's GPU."""
    from calculator.timing.step_time import estimate_time
    try:
        t = estimate_time(m, w, timing)
    except InputError:  # the catalogue has no speed figures for this GPU
        return plan
    return replace(plan, step_time_s=t.step_time_s, tokens_per_s=t.tokens_per_s,
                   cost_per_million_tokens=t.cost_per_million_tokens)


def rank_key(rank: str = "memory"):
    """The sort key of RANK_KEY (memory), or with tokens/s or cost in place of micro-batch, recompute and memory."""
    def base(p: Plan):
        return (not p.fits, p.gpus)

    def ties(p: Plan):
        return (p.zero, p.pp, p.cp, p.tp, p.ep)
    if rank == "time":
        return lambda p: base(p) + (-(p.tokens_per_s or 0.0), RECOMPUTE_COST[p.recompute], p.total_bytes) + ties(p)
    if rank == "cost":
        return lambda p: base(p) + (p.cost_per_million_tokens if p.cost_per_million_tokens is not None
                                    else float("inf"), -(p.tokens_per_s or 0.0), RECOMPUTE_COST[p.recompute],
                                    p.total_bytes) + ties(p)
    return lambda p: base(p) + (-p.micro_batch, RECOMPUTE_COST[p.recompute], p.total_bytes) + ties(p)


def _check(w: Workload, rank: str, timing) -> None:
    if w.mode == "rl":
        raise InputError("mode", "the planner lays out training or inference; for RL plan the trainer (mode train) "
                                 "and the rollout engine (mode infer with --engine) apart")
    if rank not in RANKS:
        raise InputError("rank", f"rank by one of {', '.join(RANKS)}, not {rank!r}")
    if rank != "memory" and not w.gpu:
        raise InputError("gpu", f"ranking by {rank} needs a GPU for the time estimate")
    if rank == "cost" and (timing is None or timing.price_per_gpu_hour is None):
        raise InputError("price_per_gpu_hour", "ranking by cost needs a price per GPU-hour")


def check_plannable(m: ModelSpec) -> None:
    """InputError when the model is too deep to plan in bounded time (MAX_PLAN_LAYERS)."""
    if m.num_hidden_layers > MAX_PLAN_LAYERS:
        raise InputError("num_hidden_layers", f"the planner lays out models of at most {MAX_PLAN_LAYERS} layers "
                         f"(it estimates thousands of layouts, each layer by layer); this one has "
                         f"{m.num_hidden_layers:,}: estimate it with an explicit layout instead")


def _fits_engine(est, w: Workload) -> bool:
    sv = est.serving
    return sv.starts and sv.max_concurrent_seqs >= w.micro_batch


def _plan(w: Workload, lay: Layout, total: int, peak: int, capacity_bytes: int, fits: bool) -> Plan:
    return Plan(lay.world_size, lay.tp, lay.pp, lay.dp, lay.zero, lay.recompute, total, peak, total / capacity_bytes,
                cp=lay.cp, ep=lay.ep, etp=lay.etp, micro_batch=lay.micro_batch, pp_first_stage_layers=lay.pp_first,
                pp_last_stage_layers=lay.pp_last, fits=fits, mode=w.mode)


def evaluate(m: ModelSpec, w: Workload, layouts: list[Layout], capacity_bytes: int,
             include_unfit: bool = False, fast=None) -> list[Plan]:
    """Plans for `layouts`, estimated: by the fast byte model over the whole grid where it covers the job
    (calculator.planning.fast, equal to estimate() byte for byte), else by estimate() layout by layout. Layouts the
    engine refuses are left out, and those that do not fit unless `include_unfit`. `fast`: the fast model's
    (total, peak, covered) for these layouts when the caller has them (count_grid)."""
    from calculator.planning import fast as fast_model
    budget = SAFE_FRACTION * capacity_bytes
    if fast is None:
        fast = fast_model.totals(m, w, layouts)
    out = []
    if fast is not None:
        total, peak, covered = fast
        fits = total <= budget
        keep = np.nonzero(covered & (fits | include_unfit))[0]
        out = [_plan(w, layouts[i], int(total[i]), int(peak[i]), capacity_bytes, bool(fits[i])) for i in keep]
        layouts = [layouts[i] for i in np.nonzero(~covered)[0]]
    for lay in layouts:
        if w.mode == "train" and w.engine == "hf":
            got = training_totals(m, w, lay)
            if got is None:
                continue
            total, peak = got
            fits = total <= budget
        else:
            try:
                est = estimate(m, workload_of(w, lay), with_fits=False)
            except InputError:
                continue
            total, peak = est.total_bytes, est.peak_allocated_bytes
            fits = _fits_engine(est, w) if est.serving is not None else total <= budget
        if fits or include_unfit:
            out.append(_plan(w, lay, total, peak, capacity_bytes, fits))
    return out


def _finish(m: ModelSpec, w: Workload, plans: list[Plan], limit: int | None, rank: str, timing,
            timed_rows: int = 50) -> list[Plan]:
    """Rank; with a GPU, the time of every plan (time / cost ranking) or of the first rows shown (memory)."""
    if w.gpu:
        if rank == "memory":
            plans.sort(key=rank_key("memory"))
            n = min(len(plans), limit if limit is not None and timed_rows else timed_rows)
            plans[:n] = [_timed(m, workload_of(w, p.layout), p, timing) for p in plans[:n]]
        else:
            plans = [_timed(m, workload_of(w, p.layout), p, timing) for p in plans]
    plans.sort(key=rank_key(rank))
    return plans if limit is None else plans[:limit]


def plans_for(m: ModelSpec, w: Workload, gpus: int, capacity_bytes: int, max_tp: int = 8, limit: int | None = None,
              rank: str = "memory", timing=None, include_unfit: bool = False, max_micro_batch: int | None = None,
              search: str = "all", timed_rows: int = 50) -> list[Plan]:
    """Layouts of exactly `gpus` GPUs that fit `capacity_bytes` within the safe band, best first by `rank`
    (RANK_KEY; time / cost). With a GPU in the workload every plan carries its step time and tokens/s; `timing`:
    calculator.timing.inputs.TimingInputs (price, efficiencies, links). `search="layout"` keeps the job's own
    micro-batch and recompute and varies only the parallel layout. `timed_rows`: how many of the first rows get
    their time when ranking by memory (0: none)."""
    if gpus < 1:
        raise InputError("gpus", "the number of GPUs must be at least 1")
    _check(w, rank, timing)
    check_plannable(m)
    layouts = list(layouts_of(m, w, gpus, max_tp, max_micro_batch, search))
    return _finish(m, w, evaluate(m, w, layouts, capacity_bytes, include_unfit), limit, rank, timing, timed_rows)


def fewest_gpus(m: ModelSpec, w: Workload, capacity_bytes: int, max_gpus: int = 4096, max_tp: int = 8,
                limit: int | None = None, rank: str = "memory", timing=None, max_micro_batch: int | None = None,
                search: str = "all", timed_rows: int = 50) -> list[Plan]:
    """The layouts at the smallest GPU count where any layout fits (counts tried: 1, 2, 4, 8, then whole nodes of 8;
    calculator.planning.grid.candidate_counts)."""
    _check(w, rank, timing)
    check_plannable(m)
    found = _fewest(m, w, capacity_bytes, max_gpus, max_tp, max_micro_batch, search)
    return _finish(m, w, found, limit, rank, timing, timed_rows) if found else []


def _fewest(m: ModelSpec, w: Workload, capacity_bytes: int, max_gpus: int, max_tp: int,
            max_micro_batch: int | None, search: str, max_layouts: int | None = None) -> list[Plan]:
    """Probe 1, 2, 4, 8, … GPUs for the first power of two P where a layout fits, then find the fewest of the
    candidate counts above P/2 (whole nodes): one by one for serving, by bisection for training (a count where a
    layout fits leaves one at every larger count: more ranks to shard over). Counts below P/2 are not tried.
    _OverBudget when more than `max_layouts` layouts would be estimated."""
    spent = 0

    def at(n: int) -> list[Plan]:
        nonlocal spent
        layouts, fast = count_grid(m, w, n, max_tp, max_micro_batch, search)
        spent += len(layouts)
        if max_layouts is not None and spent > max_layouts:
            raise _OverBudget
        return evaluate(m, w, layouts, capacity_bytes, fast=fast)
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
    return min(found, key=rank_key("memory")) if found else None
