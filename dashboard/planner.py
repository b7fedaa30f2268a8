"""The planner page's logic: which calculator view it plans for, the engine calls (calculator.planning.planner and
calculator.planning.solvers), the ranked table and the links that open a layout in the calculator.

Nothing here imports streamlit, so it is tested directly (tests/dashboard/test_dashboard_planner.py). The page
(pages/planner.py) only draws what these functions return; every number comes from the engine.

The calculator's inputs are the same public URL keys (dashboard.inputs.state.PARAMS): a planner link carries them
unchanged next to the planner's own two keys, `pgpus` and `pmaxtp` (docs/url-format.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping
from urllib.parse import urlencode, urlsplit, urlunsplit

from dashboard.inputs import state
from dashboard.memo import Shared
from dashboard.safe_text import cut, md

PLANNER_PARAMS: tuple[state.Param, ...] = (
    state.Param("pgpus", "int", 0, "GPUs (0 = the fewest that fit)", "planner", lo=0, hi=4096,
                help="Plan layouts of exactly this many GPUs; 0 searches 1, 2, 4, 8, … for the fewest where "
                     "any layout fits the GPU's 80% safe band"),
    state.Param("pmaxtp", "int", 8, "Largest tensor parallel (TP)", "planner", lo=1, hi=64,
                help="TP stays within a node: the largest TP degree to consider (a divisor of the attention "
                     "heads)"),
    state.Param("ppage", "int", 1, "Page", "planner", lo=1, hi=100_000,
                help="The layouts table shows 50 rows a page, best first"),
    state.Param("prank", "choice", "fastest", "Rank layouts by", "planner",
                options=("fastest", "fewest-gpus", "cheapest", "most-headroom", "memory"),
                help="fastest: highest estimated tokens/s per GPU; fewest-gpus; cheapest: lowest cost per million "
                     "tokens (needs a price per GPU-hour); most-headroom: lowest memory per GPU; memory: fewest GPUs, "
                     "largest micro-batch, least recompute, lowest memory"),
    state.Param("pgb", "int", 0, "Global batch (sequences per step; 0 = PP micro-batches)", "planner", lo=0,
                hi=1 << 24, help="The same tokens per optimizer step for every layout: micro-batch × gradient "
                                 "accumulation × DP; the pipeline bubble and the DP traffic are amortised over it"),
    state.Param("pconc", "int", 0, "Concurrency (requests in flight; 0 = as many as the engine admits)", "planner",
                lo=0, hi=1 << 20, help="Serving engines (vLLM / SGLang): requests the deployment holds at once, "
                                       "spread over the DP replicas; each replica decodes min(its share, the "
                                       "sequences its KV pool holds, max_num_seqs), and layouts rank by output "
                                       "tokens/s per GPU"),
)
PLANNER_KEYS = tuple(p.key for p in PLANNER_PARAMS)
CALC_VIEW = "_calc_view"  # session-state entry: the last calculator view seen (kept across pages)
MAX_GPUS = 4096
LIMIT = None  # every layout is listed (paginated on the page)
PAGE_ROWS = 50
# The Planner page's results, shared by every session (pages/planner.py): keyed by the view's canonical query and
# the planner's inputs; a result is ~2-20 kB pickled (thousands of layouts: a few MB), a fit ~0.4 kB.
PLANS, FITS = Shared(64, max_bytes=64 * 2**20), Shared(256, max_bytes=4 * 2**20)


# ---- which view the page plans for -----------------------------------------------------------------------------
@dataclass(frozen=True)
class View:
    """The calculator inputs a page works on, where they came from ("link", "calculator" or "defaults"), and one
    line per link parameter that was ignored or adjusted."""

    values: dict
    source: str
    ignored: tuple[str, ...] = ()


def calculator_keys_in(mapping: Mapping[str, Any]) -> bool:
    return any(k in state.BY_KEY for k in mapping)


def view_from(query: Mapping[str, Any], session: Mapping[str, Any], own_keys: Iterable[str] = ()) -> View:
    """The calculator view: the calculator keys in this page's URL (checked as the calculator checks them), else
    the calculator's widgets still in the session (the first run after switching page), else the last view kept
    under CALC_VIEW, else the defaults. `own_keys`: this page's keys, not reported as unknown."""
    own = set(own_keys) | {state.VERSION_KEY}
    calc_query = {k: v for k, v in query.items() if k not in own}
    if calculator_keys_in(calc_query):
        link = state.check_query_params(calc_query)
        return View({**state.DEFAULTS, **link.values}, "link", link.ignored)
    if calculator_keys_in({k: 1 for k in session if k in state.BY_KEY}):
        return View(state.current_values(session, {}), "calculator")
    kept = session.get(CALC_VIEW)
    if kept:
        return View({**state.DEFAULTS, **kept}, "calculator")
    return View(dict(state.DEFAULTS), "defaults")


@dataclass(frozen=True)
class OwnKeys:
    """What the link gave for the planner's own keys: one note per value its widget will not use (plain text), and
    the keys whose value the widget cannot even read (inf, 1e400, a 500-digit number: Streamlit 1.67's bound
    number_input raises OverflowError on them), which the page removes from the URL before drawing the widgets."""

    notes: dict[str, str]
    drop: tuple[str, ...]


def check_own_keys(query: Mapping[str, Any]) -> OwnKeys:
    """Check `pgpus` / `pmaxtp` as the calculator checks its keys (state.read_value: same bounds, same reasons)."""
    notes: dict[str, str] = {}
    drop: list[str] = []
    for p in PLANNER_PARAMS:
        if p.key not in query:
            continue
        raw = query[p.key]
        raw = (raw[-1] if raw else "") if isinstance(raw, list) else raw
        try:
            _, note = state.read_value(p, raw, p.options or None)
        except ValueError as exc:  # (Unsafe too) removed from the URL: the widget has no range of its own
            drop.append(p.key)
            note = f"{exc}; the default ({state.format_default(p)}) is used"
        if note:
            notes[p.key] = f"{p.key}={cut(raw)}: {note}"
    return OwnKeys(notes, tuple(drop))


def query_of(values: Mapping[str, Any]) -> dict[str, str]:
    """The calculator's query parameters for `values` (defaults left out, v=1)."""
    return state.to_query(values)


def query_key(values: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A hashable, canonical form of a view (the cache key of the engine calls)."""
    return tuple(sorted(query_of(values).items()))


# ---- links -----------------------------------------------------------------------------------------------------
def app_root(page_url: str | None, page_path: str, default: str = "http://localhost:8501/") -> str:
    """The calculator's address (the app's root) from this page's address (`…/planner?…` -> `…/`)."""
    if not page_url:
        return default
    parts = urlsplit(page_url)
    path = parts.path
    if path.rstrip("/").endswith("/" + page_path) or path.rstrip("/") == page_path:
        path = path.rstrip("/")[: -len(page_path)]
    if not path.endswith("/"):
        path += "/"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def calculator_url(root: str, values: Mapping[str, Any]) -> str:
    return root + "?" + urlencode(query_of(values))


def layout_values(values: Mapping[str, Any], plan) -> dict[str, Any]:
    """The calculator view of `plan`: the view's inputs with the layout calculator.planning.planner estimated (TP, PP with
    its uneven first / last stages, DP, CP, EP with expert TP, ZeRO, recompute, micro-batch, sequence parallelism
    with TP where the sequence splits, 1F1B, at least PP micro-batches)."""
    out = dict(values)
    seq = int(values.get("seq", 0) or 0)
    sp = values["mode"] == "train" and plan.tp > 1 and seq % plan.cp == 0 and (seq // plan.cp) % plan.tp == 0
    out.update(tp=plan.tp, pp=plan.pp, dp=plan.dp, zero=str(plan.zero), rc=plan.recompute, sp=sp, cp=plan.cp,
               ep=plan.ep, etp=plan.etp or 0, ppf=plan.pp_first_stage_layers or 0,
               ppl=plan.pp_last_stage_layers or 0, sched="1f1b", vpp=1)
    if values["mode"] == "train":
        out["mbs"] = plan.micro_batch
    if int(values.get("mb", 0) or 0):
        out["mb"] = max(plan.pp, int(values["mb"]))
    accumulate = getattr(plan, "microbatches", 1) or 1  # a global batch's micro-batches per step
    if values["mode"] == "train" and accumulate > max(plan.pp, int(values.get("mb", 0) or 0)):
        out["mb"] = accumulate
    return out


def fit_layout_values(values: Mapping[str, Any], fit) -> dict[str, Any]:
    """The calculator view of a fit card's 'GPUs needed' layout (calculator.planning.planner.gpus_needed) on that GPU: the
    same view as the planner's row of that layout (layout_values)."""
    from types import SimpleNamespace
    par = dict(fit.layout_parallel or {})
    plan = SimpleNamespace(tp=par.get("tp", 1), pp=par.get("pp", 1), dp=par.get("dp", 1), cp=par.get("cp", 1),
                           ep=par.get("ep", 1), etp=par.get("etp"), zero=par.get("zero", 0),
                           recompute=par.get("recompute", values.get("rc", "none")),
                           micro_batch=par.get("micro_batch", values.get("mbs", 1)),
                           pp_first_stage_layers=par.get("pp_first_stage_layers"),
                           pp_last_stage_layers=par.get("pp_last_stage_layers"))
    return {**layout_values(values, plan), "gpu": fit.gpu}


# ---- the engine calls ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanResult:
    plans: tuple  # calculator.planning.planner.Plan, best first
    gpus: int  # the GPU count asked for (0 = fewest)
    capacity_bytes: int
    gpu_name: str
    message: str = ""  # why nothing is shown, when plans is empty


def _inputs(values: Mapping[str, Any]):
    """(model, workload, gpu) for the view; InputProblems if the engine refuses the inputs."""
    from calculator.model.presets import get_gpu
    result = state.compute(values)  # the view as the calculator shows it: refused inputs are named, never planned
    model, workload = result.model, result.workload
    try:
        gpu = get_gpu(values["gpu"])
    except Exception:
        raise state.InputProblems([state.Problem("gpu", f"unknown GPU {values['gpu']!r}")]) from None
    return model, workload, gpu


def plan(values: Mapping[str, Any], gpus: int = 0, max_tp: int = 8, limit: int = LIMIT, rank: str = "fastest",
         global_batch: int = 0, concurrency: int = 0) -> PlanResult:
    """Ranked layouts for the view on its GPU: of exactly `gpus` GPUs, or the fewest (gpus=0), by `rank`
    (calculator.planning.ranking; "cheapest" without a price ranks by speed, which orders the same at one GPU
    count), every layout with its step time, tokens/s per GPU, MFU and bottleneck; `global_batch` sequences per
    step (0: PP micro-batches); `concurrency` requests in flight for a serving engine's layouts (0: as many as each
    engine admits)."""
    from calculator.model.spec import ModelSpec
    from calculator.planning.planner import fewest_gpus, plans_for
    model, workload, gpu = _inputs(values)
    timing = state.timing_inputs(values)
    if rank == "cheapest" and timing.price_per_gpu_hour is None:
        rank = "fastest"
    opts = dict(limit=limit, rank=rank, timing=timing, global_batch=global_batch or None,
                concurrency=concurrency or None)
    cap = gpu.usable_bytes
    if not isinstance(model, ModelSpec):
        return PlanResult((), gpus, cap, gpu.name, "The planner splits a transformer's heads and layers: a generic "
                          "network (given as totals) has neither. Pick a preset, custom or config model.")
    from calculator.core.errors import InputError
    from calculator.planning.planner import check_plannable
    try:
        check_plannable(model)
    except InputError as exc:
        return PlanResult((), gpus, cap, gpu.name, str(exc))
    if gpus:
        found = plans_for(model, workload, gpus, cap, max_tp=max_tp, **opts)
        why = "" if found else (
            f"No layout of {gpus} GPUs keeps the most loaded {gpu.name} within its 80% safe band (TP up to "
            f"{max_tp}, any PP with even or uneven stages, CP, EP, ZeRO 0–3, recompute, micro-batch). Try more "
            "GPUs, 0 for the fewest that fit, a larger TP, or a smaller micro-batch or sequence.")
    else:
        found = fewest_gpus(model, workload, cap, max_gpus=MAX_GPUS, max_tp=max_tp, **opts)
        why = "" if found else (
            f"Nothing fits: no layout of up to {MAX_GPUS} {gpu.name} GPUs (TP up to {max_tp}) keeps the most "
            "loaded GPU within its 80% safe band. Try a GPU with more memory, a larger TP, or a smaller "
            "micro-batch or sequence.")
    return PlanResult(tuple(found), gpus, cap, gpu.name, why)


@dataclass(frozen=True)
class Fits:
    """The largest micro-batch and the longest sequence for the view's GPU and layout, at 80% and 100%."""

    batch_safe: Any  # calculator.planning.solvers.Solution
    batch_full: Any
    seq_safe: Any
    seq_full: Any
    capacity_bytes: int
    gpu_name: str


def what_fits(values: Mapping[str, Any]) -> Fits:
    from calculator.planning.solvers import max_micro_batch, max_seq_len
    model, workload, gpu = _inputs(values)
    cap = gpu.usable_bytes
    return Fits(max_micro_batch(model, workload, cap, safe=True), max_micro_batch(model, workload, cap, safe=False),
                max_seq_len(model, workload, cap, safe=True), max_seq_len(model, workload, cap, safe=False),
                cap, gpu.name)


# ---- what the page shows ---------------------------------------------------------------------------------------
TABLE_COLUMNS = ("Rank", "GPUs", "TP", "PP", "Stages", "DP", "CP", "EP", "ZeRO", "Recompute", "Micro-batch",
                 "Micro-batches", "Step time", "Tokens/s/GPU", "MFU", "Bottleneck", "$/M tokens", "Per GPU",
                 "Of capacity", "Open")
# a serving engine's layouts (vLLM / SGLang) add these after "Micro-batches" (calculator.timing.serving_time)
SERVING_COLUMNS = ("Running batch", "KV holds", "Out tok/s/GPU", "TPOT", "TTFT")


def serving_plans(plans: Iterable) -> bool:
    """Whether the plans are a serving engine's (they carry a running batch)."""
    return any(getattr(p, "running_batch", None) is not None for p in plans)


def page_of(plans: tuple, page: int, rows: int = PAGE_ROWS) -> tuple[int, int, tuple]:
    """(first rank shown, page actually shown, the plans of that page): a page past the last shows the last."""
    pages = max(1, -(-len(plans) // rows))
    page = min(max(1, page), pages)
    start = (page - 1) * rows
    return start + 1, page, plans[start:start + rows]


def plan_rows(plans: Iterable, values: Mapping[str, Any], unit: str, root: str, first_rank: int = 1) -> list[dict]:
    """One row per layout (best first) with its rank and 'open in calculator' link; a serving engine's layouts
    also their running batch, the sequences their KV pool holds, output tokens/s per GPU, TPOT and TTFT. Without a
    price per GPU-hour no layout has a cost, and the "$/M tokens" column is left out rather than shown empty."""
    rows = _rows(plans, values, unit, root, first_rank)
    if all(r["$/M tokens"] is None for r in rows):
        for r in rows:
            del r["$/M tokens"]
    if serving_plans(plans):
        for row, p in zip(rows, plans):
            row.update({"Running batch": p.running_batch, "KV holds": _round(p.max_seqs),
                        "Out tok/s/GPU": _round(p.output_tokens_per_s_per_gpu), "TPOT": _seconds(p.tpot_s),
                        "TTFT": _seconds(p.ttft_s)})
        order = TABLE_COLUMNS[:12] + SERVING_COLUMNS + TABLE_COLUMNS[12:]
        rows = [{k: r[k] for k in order if k in r} for r in rows]
    return rows


def _rows(plans: Iterable, values: Mapping[str, Any], unit: str, root: str, first_rank: int) -> list[dict]:
    from calculator.core.units import format_bytes
    return [{"Rank": first_rank + i, "GPUs": p.gpus, "TP": p.tp, "PP": p.pp,
             "Stages": f"{p.pp_first_stage_layers} … {p.pp_last_stage_layers}" if p.pp_first_stage_layers else "even",
             "DP": p.dp, "CP": p.cp, "EP": p.ep, "ZeRO": p.zero, "Recompute": p.recompute,
             "Micro-batch": p.micro_batch, "Micro-batches": p.microbatches,
             "Step time": _seconds(p.step_time_s), "Tokens/s/GPU": _round(p.tokens_per_s_per_gpu),
             "MFU": p.mfu, "Bottleneck": p.bottleneck or "—", "$/M tokens": p.cost_per_million_tokens,
             "Per GPU": format_bytes(p.total_bytes, unit), "Of capacity": p.utilization,
             "Open": calculator_url(root, layout_values(values, p))} for i, p in enumerate(plans)]


BAR_COLORS = {"fits": "green", "tight": "orange", "does not fit": "red"}


def capacity_bar_color(plans: Iterable) -> str:
    """The "Of capacity" bars' colour: the verdict of the fullest layout shown (green within the 80% safe band,
    orange up to the capacity, red over it), not Streamlit's primary red for every layout."""
    from calculator.core.fit import verdict
    worst = max((p.utilization for p in plans), default=0.0)
    return BAR_COLORS[verdict(worst, 1.0)]


def _seconds(s: float | None) -> str:
    if s is None:
        return "—"
    return f"{s * 1e3:,.1f} ms" if s < 10 else f"{s:,.2f} s"


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def describe(values: Mapping[str, Any]) -> str:
    """One line of Markdown saying what is planned: model, mode, batch and sequence, GPU (values made inert)."""
    model = values["model"]
    if model == state.CUSTOM:
        model = f"custom (h={values['h']}, {values['layers']} layers)"
    mode = "training" if values["mode"] == "train" else "inference"
    ft = f" ({values['ft']})" if values["mode"] == "train" and values["ft"] != "full" else ""
    gpu = next((g.name for g in state.gpus() if g.id == values["gpu"]), values["gpu"])
    return (f"**{md(model)}**, {md(mode + ft)}, micro-batch {md(values['mbs'])} × sequence {md(values['seq'])}, "
            f"precision {md(values['recipe'])}, on **{md(gpu)}**")


def solver_text(sol, what: str, unit: str) -> str:
    from calculator.core.units import format_bytes
    if sol.value == 0:
        return f"none: even the smallest {what} needs {format_bytes(sol.used_bytes, unit)} > " \
               f"{format_bytes(sol.budget_bytes, unit)}"
    return f"{sol.value:,} ({format_bytes(sol.used_bytes, unit)} of {format_bytes(sol.budget_bytes, unit)})"
