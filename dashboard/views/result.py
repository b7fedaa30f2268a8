"""The calculator page's result, top to bottom as a screenshot shows it: headline metrics, one line that states the
workload, the chart beside the six fit cards (all above the fold at 1440×900), then the breakdown table with its
total row, the formula panel and the legend of its symbols. Every number comes from the engine's Estimate.
"""
from __future__ import annotations

from typing import Any, Mapping

import streamlit as st

from dashboard.views import html_blocks
from dashboard.safe_text import md

CHART_HEIGHT = 340  # px: with the headline, the answer and the summary, the chart and six cards fit in 900 px


def headline(est, fit, unit: str) -> None:
    from calculator.core.units import format_bytes, format_count
    row = st.container(horizontal=True, gap="small")
    row.metric("Total per GPU", format_bytes(est.total_bytes, unit),
               help="What nvidia-smi would show on the most loaded GPU" + (
                   f" (pipeline stage {est.worst_stage})" if len(est.stages) > 1 else ""))
    row.metric("Peak allocated", format_bytes(est.peak_allocated_bytes, unit),
               help="What torch.cuda.max_memory_allocated() would report")
    row.metric("Parameters", format_count(est.parameters),
               help=f"{est.parameters:,} parameters; {est.active_parameters:,} active per token")
    if fit is not None:
        # the delta's colour follows the verdict: green fits, orange tight, red does not fit
        row.metric(f"On {fit.name}", fit.verdict, f"{fit.utilization:.0%} of capacity",
                   delta_color={"fits": "green", "tight": "orange", "does not fit": "red"}[fit.verdict],
                   delta_arrow="off")


def summary_line(result, values: Mapping[str, Any]) -> str:
    """One line that says what is computed: model, mode, batch × sequence, precision, optimizer, recompute,
    parallel layout, training stack (inference: weights, KV cache and engine)."""
    from calculator import stacks
    from calculator.memory.inference import kv_cache_dtype, serving_weight_dtypes
    w, est = result.workload, result.estimate
    p = w.parallel
    mode = {"train": "training", "infer": "inference", "rl": "RL post-training"}.get(w.mode, w.mode)
    if w.mode != "infer" and w.finetune != "full":
        mode += f" ({w.finetune.upper() if w.finetune == 'qlora' else 'LoRA'} r={w.lora_rank})"
    parts = [f"**{md(est.model_name)}**", mode]
    if w.mode == "infer":
        parts.append(f"batch {w.micro_batch} × ({w.seq_len:,} prompt + {w.gen_tokens:,} generated) tokens")
        wdt, edt = serving_weight_dtypes(result.model, w)  # vLLM / SGLang: the checkpoint's own, when not given
        kv = kv_cache_dtype(result.model, w)  # "auto": the checkpoint's FP8 KV scheme under vLLM / SGLang, else bf16
        parts.append(f"weights {wdt}" + (f" (routed experts {edt})" if edt != wdt else "") + f", KV cache {kv}"
                     + (" (auto)" if w.kv_dtype == "auto" else ""))
        parts.append({"hf": "transformers generate()", "vllm": "vLLM", "sglang": "SGLang"}.get(w.engine, w.engine))
    else:
        parts.append(f"micro-batch {w.micro_batch} × {w.seq_len:,} tokens")
        recipe = values.get("recipe", "")
        prec = w.precision
        parts.append(recipe if recipe and recipe != "custom" else
                     f"{prec.params} params, {prec.grads} grads, {prec.master_weights or 'no'} master")
        parts.append(w.optimizer)
        parts.append(f"recompute {w.recompute}")
    layout = f"TP{p.tp} · PP{p.pp} · DP{p.dp}" + (f" · CP{p.cp}" if p.cp > 1 else "") + (
        f" · EP{p.ep}" if p.ep > 1 else "")
    if w.mode != "infer":
        layout += f" · ZeRO-{p.zero}" if p.zero else ""
        layout += " · dist. optimizer" if p.distributed_optimizer else ""
    parts.append(layout + f" = {p.world_size} GPU{'s' if p.world_size > 1 else ''}")
    if w.mode != "infer":
        parts.append(f"stack {stacks.resolve(w)}")
    return " · ".join(parts)


def chart_and_cards(est, values: Mapping[str, Any], gpu, unit: str, layout_link=None) -> None:
    """The breakdown chart (left) beside the fit cards of the chosen GPU and the headline GPUs (right).
    layout_link(fit) -> URL of the calculator on the planner's layout for 'GPUs needed' (when the card names one)."""
    from calculator.core.fit import FIT_CARD_GPUS
    from dashboard.charts import breakdown_figure_cached, plotly_config
    left, right = st.columns([1, 1], gap="small")
    with left:
        st.plotly_chart(breakdown_figure_cached(est, unit, gpu, height=CHART_HEIGHT, side_legend=True),
                        key="breakdown", config=plotly_config(values), theme=None)
    shown = [values["gpu"]] + [g for g in FIT_CARD_GPUS if g != values["gpu"]]
    fits = est.fits_on(shown)  # only these cards: each one's "GPUs needed" is a planner search
    right.html(html_blocks.fit_cards(fits, unit, layout_link))  # one element (dashboard/views/html_blocks.py: why)


def breakdown(est, unit: str) -> None:
    """Every term of the most loaded GPU with a total row (all rows shown), then formulas and their symbols."""
    from dashboard.views.tables import breakdown_html, formula_markdown, symbol_legend
    if len(est.stages) > 1:
        st.caption(f"Pipeline parallel: the table and formulas are for stage {est.worst_stage}, the most loaded "
                   "GPU; the chart shows every stage at its peak.")
    if est.peak.moments:
        st.caption("The engine's terms, each taken at the moment of the step it names (**Taken at**): they add up "
                   "to the peak. The chart stacks what is live at each moment.")
    st.html(breakdown_html(est, unit))  # every row, no scroll box; one element (dashboard/views/html_blocks.py: why)
    # Built only while open: a long Markdown text re-rendered by the browser on every change (the CSV, JSON and
    # PDF exports carry the same formulas).
    box = st.expander("Formula, substituted values and source of every term, with a legend of the symbols",
                      key=FORMULAS_OPEN, on_change="rerun")
    if box.open:
        box.markdown(formula_markdown(est, unit) + "\n\n" + symbol_legend(est))  # one element


FORMULAS_OPEN = "_open_formulas"
