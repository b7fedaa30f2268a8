"""Planner: the parallel layouts (TP, PP, DP, CP, EP, ZeRO, recompute, micro-batch) of the calculator's job that
fit its GPU, for a number of GPUs or the fewest, each one click away from the calculator; and what fits on the GPU as it is laid
out now (the largest micro-batch, the longest sequence).

The job is the calculator's view: the calculator's own URL keys (a planner link carries them), else the inputs
the calculator page held when you switched here. The planner's own inputs are `pgpus`, `pmaxtp`, `ppage`, `prank`
(the ranking key), `pgb` (the global batch) and `pconc` (a serving engine's concurrency).
Every number comes from calculator.planning.planner and calculator.planning.solvers (through dashboard.planner).
"""
from __future__ import annotations

import streamlit as st

from dashboard import planner
from dashboard.inputs import state
from dashboard.safe_text import md, md_link, md_lines, md_message
from dashboard.inputs.widgets import out_of_range_note
from dashboard.views import entry

entry.through_app()  # a first visit straight to this page still runs inside app.py's navigation


PAGE_PATH = "planner"


def _plan(key: tuple, gpus: int, max_tp: int, values: dict, **more) -> planner.PlanResult:
    """planner.plan, cached for every session (dashboard.memo: a visitor's clear-cache message cannot empty it) by
    the view's canonical query (key) and every planner input (gpus, max_tp and any keyword of planner.plan)."""
    return planner.PLANS.get((key, gpus, max_tp, tuple(sorted(more.items()))),
                             lambda: planner.plan(values, gpus, max_tp, **more),
                             on_miss=lambda: st.spinner("Planning layouts…"))


def _fits(key: tuple, values: dict) -> planner.Fits:
    return planner.FITS.get(key, lambda: planner.what_fits(values), on_miss=lambda: st.spinner("Solving what fits…"))


def _keep_in_range(p: state.Param) -> None:
    """A typed value out of range is replaced by the nearest allowed one, with a note (the field shows the value
    used; Streamlit's own min / max would keep showing the rejected number)."""
    notes = st.session_state.setdefault(LINK_NOTES, {})
    notes.pop(p.key, None)
    got = out_of_range_note(p, st.session_state.get(p.key))
    if got is not None:
        st.session_state[p.key], notes[p.key] = got


def _number(p: state.Param, container) -> int:
    return container.number_input(p.label, value=p.default, step=1, key=p.key, bind="query-params", help=p.help,
                                  width=260, on_change=_keep_in_range, args=(p,))


st.title("Parallel layout planner")
from calculator.planning.ranking import RANK_TEXT  # noqa: E402

st.caption("Which ways of splitting this job over GPUs (TP, PP with even or uneven stages, DP, CP, EP, ZeRO, "
           "recompute, micro-batch) keep the most loaded GPU within the 80% safe band (Fujii et al. 2024), and how "
           "fast each runs: step time, tokens/s per GPU, MFU and what bounds the step (the time model is checked "
           "against published multi-GPU runs on the Accuracy page).")

# The planner's own keys are checked before their widgets read the URL: a value the bound number_input cannot read
# (pgpus=inf, 1e400) is removed first, and every value a widget would drop silently is named (kept for the session).
LINK_NOTES = "_planner_link_notes"
own = planner.check_own_keys(st.query_params.to_dict())
notes = st.session_state.setdefault(LINK_NOTES, {})
notes.update(own.notes)
if own.drop:
    for key in own.drop:
        del st.query_params[key]
    st.rerun()

view = planner.view_from(st.query_params.to_dict(), st.session_state.to_dict(), planner.PLANNER_KEYS)
values = view.values
st.session_state[planner.CALC_VIEW] = {k: v for k, v in values.items() if v != state.DEFAULTS[k]}
if view.source == "calculator":  # arrived from the calculator page: put its inputs in this page's link
    for key, raw in planner.query_of(values).items():
        st.query_params[key] = raw
ignored = list(view.ignored) + list(notes.values())
if ignored:
    st.warning("Some link parameters were ignored or adjusted:\n\n" + md_lines(ignored),
               icon=":material/link_off:")

root = planner.app_root(st.context.url, PAGE_PATH)
unit = values["unit"]
st.markdown(f"Planning for {planner.describe(values)}.  \n"
            + md_link("Edit these inputs in the calculator", planner.calculator_url(root, values)))
if values["hf"]:
    st.info(f"This page does not fetch Hugging Face models: it plans for the preset {md(values['model'])}, not "
            f"{md(values['hf'])}.", icon=":material/info:")

row = st.container(horizontal=True, gap="medium")
gpus = int(_number(planner.PLANNER_PARAMS[0], row))
max_tp = int(_number(planner.PLANNER_PARAMS[1], row))
page = int(_number(planner.PLANNER_PARAMS[2], row))
row2 = st.container(horizontal=True, gap="medium")
rank_param = planner.PLANNER_PARAMS[3]
rank = row2.selectbox(rank_param.label, rank_param.options, key=rank_param.key, bind="query-params",
                      help=rank_param.help, width=260)
global_batch = int(_number(planner.PLANNER_PARAMS[4], row2)) if values["mode"] == "train" else 0
serving = values["mode"] == "infer" and values["eng"] != "hf"
concurrency = int(_number(planner.PLANNER_PARAMS[5], row2)) if serving else 0
shown_rank = "fastest" if rank == "cheapest" and values.get("price") is None else rank
if shown_rank != rank:
    st.info("Ranking by cost needs a price per GPU-hour (the calculator's Time and cost inputs): ranked by speed, "
            "the same order at one GPU count.", icon=":material/info:")

key = planner.query_key(values)
try:
    result = _plan(key, gpus, max_tp, values, rank=shown_rank, global_batch=global_batch, concurrency=concurrency)
    fits = _fits(key, values)
except state.InputProblems as exc:
    lines = [f"- **{state.BY_KEY[p.key].label if p.key in state.BY_KEY else 'Input'}**: {md_message(p.message)}"
             for p in exc.problems]
    st.error("Nothing to plan: the calculator cannot estimate these inputs.\n\n" + "\n".join(lines),
             icon=":material/block:")
    st.stop()

# ---- layouts -------------------------------------------------------------------------------------------------
from calculator.core.units import format_bytes  # noqa: E402

st.subheader("Layouts that fit", divider="gray")
if not result.plans:
    st.warning(md_message(result.message), icon=":material/block:")
else:
    n = result.plans[0].gpus
    st.caption(f"{len(result.plans)} layouts of {n} × {result.gpu_name} "
               f"({format_bytes(result.capacity_bytes, unit)} each)"
               + (": the fewest GPUs where any layout fits" if not gpus else "")
               + f". Ranked by {RANK_TEXT[shown_rank]}"
               + (f"; {global_batch:,} sequences per step for every layout." if global_batch else ".")
               + (" Serving layouts rank by **output tokens/s per GPU**: each DP replica decodes its running batch "
                  "(its share of " + (f"{concurrency:,} requests in flight" if concurrency else
                                      "the requests, as many as the engine admits")
                  + ", at most what its KV pool holds and max_num_seqs) a token per TPOT; TTFT is one request's "
                  "prefill." if planner.serving_plans(result.plans) else ""))
    first, shown_page, page_plans = planner.page_of(result.plans, page)
    if len(result.plans) > planner.PAGE_ROWS:
        st.caption(f"Rows {first:,}–{first + len(page_plans) - 1:,} of {len(result.plans):,} (page {shown_page}); "
                   "click a column header to sort the page.")
    rows = planner.plan_rows(page_plans, values, unit, root, first)
    st.dataframe(rows, hide_index=True, width="stretch", height="content", key="plans", column_config={
        "Of capacity": st.column_config.ProgressColumn("Of capacity", format="percent", min_value=0.0,
                                                       max_value=1.0, color=planner.capacity_bar_color(page_plans),
                                                       help="Share of what PyTorch can allocate; green: within "
                                                            "the 80% safe band"),
        "MFU": st.column_config.NumberColumn("MFU", format="percent",
                                             help="Model FLOPs (no recompute) / the GPUs' dense peak × step time"),
        "$/M tokens": st.column_config.NumberColumn("$/M tokens", format="$%.3f",
                                                    help="Cost per million tokens at the calculator's price"),
        "Running batch": st.column_config.NumberColumn("Running batch", help="Sequences one replica decodes at "
                                                       "once: min(concurrency / DP, KV holds, max_num_seqs)"),
        "KV holds": st.column_config.NumberColumn("KV holds", help="Sequences of prompt + output tokens the "
                                                  "engine's KV pool holds at once, per replica"),
        "Out tok/s/GPU": st.column_config.NumberColumn("Out tok/s/GPU", help="Output tokens per second per GPU "
                                                       "at the running batch: DP × batch / TPOT / GPUs"),
        "Bottleneck": st.column_config.TextColumn("Bottleneck", help="What bounds the step: compute, memory, "
                                                  "host, TP / EP / PP / CP / DP communication, pipeline bubble"),
        "Open": st.column_config.LinkColumn("Open", display_text="open in calculator",
                                            help="Open the calculator with this layout")})
    best = planner.calculator_url(root, planner.layout_values(values, result.plans[0]))
    st.link_button(f"Open the best layout in the calculator: {result.plans[0].label}", best,
                   icon=":material/open_in_new:", type="primary")

# ---- what fits -----------------------------------------------------------------------------------------------
st.subheader(f"What fits on one {fits.gpu_name}", divider="gray")
layout = (f"TP{values['tp']} × PP{values['pp']} × DP{values['dp']}, ZeRO-{values['zero']}, "
          f"recompute {values['rc']}")
st.caption(f"At the calculator's layout ({layout}), everything else as set, within the 80% safe band "
           f"({format_bytes(fits.batch_safe.budget_bytes, unit)}) and the whole "
           f"{format_bytes(fits.capacity_bytes, unit)}.")
batch = "micro-batch" if values["mode"] == "train" else "batch"
m = st.container(horizontal=True, gap="small")
for label, sol, what in ((f"Largest {batch} (80%)", fits.batch_safe, batch),
                         (f"Largest {batch} (100%)", fits.batch_full, batch),
                         ("Longest sequence (80%)", fits.seq_safe, "sequence"),
                         ("Longest sequence (100%)", fits.seq_full, "sequence")):
    m.metric(label, f"{sol.value:,}" if sol.value else "none",
             help=planner.solver_text(sol, what, unit), border=True)
problems = []
if not fits.batch_safe.value:
    problems.append(f"a {batch} of 1 at sequence {values['seq']:,} needs "
                    f"{format_bytes(fits.batch_safe.used_bytes, unit)}")
if not fits.seq_safe.value:
    problems.append(f"the shortest sequence tried at {batch} {values['mbs']} needs "
                    f"{format_bytes(fits.seq_safe.used_bytes, unit)}")
if problems:
    st.warning(f"Nothing fits at the calculator's layout within the 80% safe band of a {fits.gpu_name} "
               f"({format_bytes(fits.batch_safe.budget_bytes, unit)}): " + "; ".join(problems)
               + ". Open a layout from the table above, or use more GPUs.", icon=":material/warning:")
