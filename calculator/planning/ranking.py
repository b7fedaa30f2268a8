"""How the planner orders the layouts that fit, and the time figures each one carries.

Keys (the `rank` input of the CLI `plan --rank`, the Planner page and the fit cards):
  fastest        highest estimated tokens/s per GPU first (the same order as MFU and, at one price, as cost per
                 million tokens), the lowest memory on the most loaded GPU breaking ties — the default;
  fewest-gpus    fewest GPUs, then fastest;
  cheapest       lowest cost per million tokens (needs a price per GPU-hour), then fastest;
  most-headroom  lowest memory on the most loaded GPU (the most room left in the 80% band), then fastest;
  memory         the planner's earlier order: fewest GPUs, largest micro-batch, least recompute, lowest memory.
Layouts that fit always come before those that do not; ties end on lower ZeRO stage, PP, CP, TP and EP.

Serving layouts (vLLM / SGLang) rank by output tokens/s per GPU at the target concurrency instead: each replica
decodes min(⌈C / DP⌉, the sequences its KV pool holds, the scheduler's cap) sequences a step of TPOT
(calculator.timing.serving_time; serve_plans), and their cost is per million output tokens.

Every plan's step time, tokens/s (per GPU), MFU, cost and bottleneck come from calculator.timing.step_time:
vectorised over the grid by calculator.planning.fast_time where it covers the job, estimate_time() per plan
otherwise. Serving layouts (vLLM / SGLang) are timed with the engine's step cost (ENGINE_STEP_OVERHEAD_MS, CUDA
graphs: no per-operator host cost) instead of transformers generate()'s.
"""
from __future__ import annotations

from calculator.core.errors import InputError

RANKS = ("fastest", "fewest-gpus", "cheapest", "most-headroom", "memory")
ALIASES = {"time": "fastest", "cost": "cheapest"}
RANK_TEXT = {
    "fastest": "fits, then highest tokens/s per GPU (MFU), then lowest memory on the most loaded GPU",
    "fewest-gpus": "fits, then fewest GPUs, then highest tokens/s per GPU, then lowest memory",
    "cheapest": "fits, then lowest cost per million tokens, then highest tokens/s per GPU, then lowest memory",
    "most-headroom": "fits, then lowest memory on the most loaded GPU, then highest tokens/s per GPU",
    "memory": "fits, then fewest GPUs, then largest micro-batch, then least recompute (none, selective, full), "
              "then lowest memory on the most loaded GPU",
}
RECOMPUTE_COST = {"none": 0, "selective": 1, "op": 1, "full": 2}
# A serving engine's decode step beyond its kernels: the scheduler and one CUDA-graph replay (vLLM and SGLang capture
# the decode step in CUDA graphs: no per-operator launch cost). Not measured here: an assumption of a few ms.
ENGINE_STEP_OVERHEAD_MS = 2.0


def canonical(rank: str) -> str:
    """The rank key's canonical name (aliases: time → fastest, cost → cheapest); InputError if unknown."""
    rank = ALIASES.get(rank, rank)
    if rank not in RANKS:
        raise InputError("rank", f"rank by one of {', '.join(RANKS)}, not {rank!r}")
    return rank


def _speed(p) -> float:
    """Minus the plan's speed: output tokens/s per GPU for a serving engine's layout, tokens/s per GPU otherwise."""
    out = p.output_tokens_per_s_per_gpu
    return -(out if out is not None else p.tokens_per_s_per_gpu or 0.0)


def rank_key(rank: str = "fastest"):
    """The sort key of a rank (RANK_TEXT)."""
    rank = canonical(rank)

    def ties(p):
        return (p.zero, p.pp, p.cp, p.tp, p.ep)
    if rank == "fastest":
        return lambda p: (not p.fits, _speed(p), p.total_bytes) + ties(p)
    if rank == "fewest-gpus":
        return lambda p: (not p.fits, p.gpus, _speed(p), p.total_bytes) + ties(p)
    if rank == "cheapest":
        return lambda p: (not p.fits, p.cost_per_million_tokens if p.cost_per_million_tokens is not None
                          else float("inf"), _speed(p), p.total_bytes) + ties(p)
    if rank == "most-headroom":
        return lambda p: (not p.fits, p.total_bytes, _speed(p)) + ties(p)
    return lambda p: (not p.fits, p.gpus, -p.micro_batch, RECOMPUTE_COST[p.recompute], p.total_bytes) + ties(p)


def check_rank(w, rank: str, timing) -> str:
    rank = canonical(rank)
    if rank == "cheapest" and (timing is None or timing.price_per_gpu_hour is None):
        raise InputError("price_per_gpu_hour", "ranking by cost needs a price per GPU-hour")
    if rank == "cheapest" and not w.gpu:
        raise InputError("gpu", "ranking by cost needs a GPU for the time estimate")
    return rank


def serving_timing(w, timing):
    """The timing inputs of a serving engine's layouts: the engine's step cost unless the user set one."""
    from calculator.timing.inputs import TimingInputs
    timing = timing or TimingInputs()
    if w.mode != "infer" or w.engine == "hf":
        return timing
    update = {}
    if "decode_step_overhead_ms" not in timing.model_fields_set:
        update["decode_step_overhead_ms"] = ENGINE_STEP_OVERHEAD_MS
    if "host_inference_op_us" not in timing.model_fields_set:
        update["host_inference_op_us"] = 0.0
    return timing.model_copy(update=update) if update else timing


def time_plans(m, w, plans: list, timing=None, global_batch: int | None = None,
               concurrency: int | None = None) -> None:
    """Give every plan its step time, tokens/s (per GPU), MFU, cost and bottleneck on the workload's GPU (in place;
    left None where the catalogue lacks the GPU's speed figures); a serving engine's plans also their running batch
    at `concurrency`, TTFT, TPOT and output tokens/s per GPU (serve_plans)."""
    if not w.gpu or not plans:
        return
    from calculator.memory.inference import with_kv_dtype
    w = with_kv_dtype(m, w)  # kv_dtype "auto" as the runtime picks it, as estimate_time() does
    _time_plans(m, w, plans, timing, global_batch)
    if w.mode == "infer" and w.engine != "hf" and plans[0].step_time_s is not None:
        serve_plans(m, w, plans, timing, concurrency)


def _time_plans(m, w, plans: list, timing=None, global_batch: int | None = None) -> None:
    from calculator.planning import fast_infer_time, fast_time
    from calculator.timing.inference_time import INFERENCE_BOTTLENECKS
    from calculator.timing.step_time import BOTTLENECKS
    timing = serving_timing(w, timing)
    if w.mode == "infer":  # a plan reads as its layout (Plan.pp_first / pp_last)
        got, names = fast_infer_time.times(m, w, plans, timing), INFERENCE_BOTTLENECKS
    else:
        got, names = fast_time.times(m, w, [p.layout for p in plans], timing, global_batch), BOTTLENECKS
    if got is not None:
        cost = got["cost_per_million_tokens"]
        step, tps, per_gpu, mfu, neck = (got[k].tolist() for k in ("step_time_s", "tokens_per_s",
                                                                    "tokens_per_s_per_gpu", "mfu", "bottleneck"))
        for i, p in enumerate(plans):
            p.step_time_s, p.tokens_per_s, p.tokens_per_s_per_gpu, p.mfu = step[i], tps[i], per_gpu[i], mfu[i]
            p.cost_per_million_tokens = None if cost is None else float(cost[i])
            p.bottleneck = names[neck[i]]
        return
    from calculator.planning.grid import workload_of
    from calculator.timing.step_time import estimate_time
    seen: dict = {}
    for p in plans:
        lay = p.layout
        key = (lay.tp, lay.pp, lay.ep, lay.etp, lay.pp_first, lay.pp_last) if w.mode == "infer" else None
        t = seen.get(key) if key else None
        if t is None:
            try:
                t = estimate_time(m, workload_of(w, lay, global_batch), timing)
            except InputError:  # the catalogue has no speed figures for this GPU
                return
            if key:
                seen[key] = t
        # serving: one replica's time, its tokens × this layout's DP replicas
        scale = p.dp * lay.tp * lay.pp / t.world_size if w.mode == "infer" else 1.0
        p.step_time_s, p.tokens_per_s = t.step_time_s, t.tokens_per_s * scale
        p.tokens_per_s_per_gpu = p.tokens_per_s / p.gpus
        p.mfu, p.bottleneck = t.mfu, t.bottleneck
        p.cost_per_million_tokens = t.cost_per_million_tokens


def serve_plans(m, w, plans: list, timing=None, concurrency: int | None = None) -> None:
    """A serving engine's plans (in place): running batch per replica at `concurrency` (requests in flight over the
    layout; None: as many as each engine admits), TTFT (one request's prefill), TPOT at that batch, output tokens/s
    per GPU, the decode step's bottleneck and the cost per million output tokens (calculator.timing.serving_time;
    with PP, TPOT is the step of ⌈B / PP⌉ sequences: PP micro-batches in flight).
    Vectorised by fast_infer_time.serving where it covers the model, estimate_time() per distinct shape otherwise."""
    from calculator.planning import fast_infer_time
    from calculator.timing import serving_time as S
    from calculator.timing.inference_time import INFERENCE_BOTTLENECKS
    timing = serving_timing(w, timing)
    todo = [p for p in plans if p.max_seqs is not None]
    batches = [S.running_batch(S.per_replica(concurrency, p.dp), p.max_seqs, p.seq_cap) for p in todo]
    steps = [S.pp_step_batch(b, p.pp) for p, b in zip(todo, batches)]
    got = fast_infer_time.serving(m, w, todo, steps, timing) if todo else None
    if got is not None:
        ttft, tpot, neck = got["ttft_s"].tolist(), got["tpot_s"].tolist(), got["bottleneck"].tolist()
        necks = [INFERENCE_BOTTLENECKS[k] for k in neck]
    else:
        ttft, tpot, necks = serving_by_estimate(m, w, todo, steps, timing)
    for p, b, t1, t2, neck in zip(todo, batches, ttft, tpot, necks):
        rate = S.output_tokens_per_s(b, t2 if b else None, p.dp)
        p.running_batch, p.ttft_s, p.tpot_s = b, t1, (t2 if b else None)
        p.output_tokens_per_s_per_gpu = S.per_gpu(rate, p.gpus)
        p.cost_per_million_tokens = S.cost_per_million_output(timing.price_per_gpu_hour, p.gpus, rate)
        if b:
            p.bottleneck = neck


def serving_by_estimate(m, w, plans: list, batches: list, timing) -> tuple[list, list, list]:
    """(TTFT, TPOT, decode bottleneck) per plan from estimate_time(): one request, and a batch of each running batch
    (gen ≥ 2: one decode step at the prompt's cache when gen < 2), once per distinct (shape, batch)."""
    from dataclasses import replace

    from calculator.planning.grid import workload_of
    from calculator.timing.serving_time import decode_bottleneck
    from calculator.timing.step_time import estimate_time
    seen: dict = {}

    def at(lay, b):
        key = (lay.tp, lay.pp, lay.ep, lay.etp, lay.pp_first, lay.pp_last, b)
        if key not in seen:
            wl = workload_of(w, replace(lay, micro_batch=b)).model_copy(update={"gen_tokens": max(w.gen_tokens, 2)})
            seen[key] = estimate_time(m, wl, timing)
        return seen[key]
    ttft, tpot, necks = [], [], []
    for p, b in zip(plans, batches):
        ttft.append(at(p.layout, 1).ttft_s)
        t = at(p.layout, b) if b else None
        tpot.append(t.tpot_s if t else None)
        necks.append(decode_bottleneck(t.roofline, t.tpot_s) if t else "")
    return ttft, tpot, necks
