"""The calculator page's time-and-cost part: its sidebar inputs and its section (step time, tokens/s, MFU, cost,
TTFT/TPOT and seed 003's roofline table). Every number comes from `calculator.timing.step_time.estimate_time` on the same
model and workload as the memory estimate, on the GPU chosen in the sidebar."""
from __future__ import annotations

from typing import Any, Mapping

import streamlit as st

from dashboard.inputs.widgets import field

TIME_KEYS = ("price", "mme", "nvl", "ib")
ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}


def sidebar(values: Mapping[str, Any], problems) -> None:
    """The time estimate's editable constants (price, GEMM efficiency, link bandwidths)."""
    st.header("Time and cost")
    if any(k in problems for k in TIME_KEYS):
        for key in TIME_KEYS:
            field(key, problems)
        return
    box = st.container(horizontal=True, wrap=True, gap="small")
    for key in TIME_KEYS:
        field(key, problems, container=box, width=110)


def time_of(result, values: Mapping[str, Any]):
    """(TimeEstimate, None) or (None, why there is none). Never raises for an input the page accepted."""
    from calculator.core.errors import InputError
    from calculator.model.spec import ModelSpec
    from calculator.timing.step_time import estimate_time
    from dashboard.inputs.state import InputProblems, timing_inputs
    if result.workload.mode == "rl":
        return None, "the time estimate covers training and inference steps, not an RL iteration's phases"
    if not isinstance(result.model, ModelSpec):
        return None, "the time estimate needs a transformer architecture, not a generic network"
    if not result.workload.gpu:
        return None, "no GPU chosen"
    try:
        inputs = timing_inputs(values)
    except InputProblems as exc:
        return None, "; ".join(p.message for p in exc.problems)
    try:
        return estimate_time(result.model, result.workload, inputs), None
    except InputError as exc:  # e.g. the catalogue has no FLOP/s figure for this GPU
        return None, exc.message


def format_seconds(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms" if seconds < 10 else f"{seconds:,.2f} s"


def panel(result, values: Mapping[str, Any]) -> None:
    """The section: headline time metrics, then the roofline table (built only while its expander is open)."""
    st.subheader("Time and cost", divider="gray")
    t, why = time_of(result, values)
    if t is None:
        st.caption(f"No time estimate: {why}.")
        return
    row = st.container(horizontal=True, gap="small")
    if t.mode == "train":
        row.metric("Step time", format_seconds(t.step_time_s), help=f"One optimizer step of {t.tokens_per_step:,} tokens "
                   f"over {t.world_size} GPUs (pipeline bubble {t.bubble_fraction:.0%})")
    else:
        engine = result.workload.engine
        if engine == "hf":
            row.metric("generate() call", format_seconds(t.step_time_s), help="Prefill and every decode step")
        else:  # vLLM / SGLang: no generate() call; the batch priced as one prefill and its decode steps
            row.metric("Batch time", format_seconds(t.step_time_s), help="The batch's prefill and every decode "
                       f"step, run as one; {ENGINES.get(engine, engine)}'s scheduler (continuous batching, chunked "
                       "prefill) is not modelled")
        if t.ttft_s is not None:
            row.metric("Time to first token", format_seconds(t.ttft_s))
        if t.tpot_s is not None:
            row.metric("Per output token", f"{t.tpot_s * 1e3:,.2f} ms")
    row.metric("Tokens/s", f"{t.tokens_per_s:,.0f}", help=f"All {t.world_size} GPUs together")
    row.metric("MFU", f"{t.mfu:.1%}", help=f"Model FLOPs {t.model_flops:.3g} per step over the dense peak; "
               f"with recompute (HFU) {t.hfu:.1%}")
    if t.cost_per_million_tokens is not None:
        row.metric("Cost per million tokens", f"${t.cost_per_million_tokens:,.4f}")
    st.caption(f"On {t.gpu}: GPU kernels {format_seconds(t.gpu_time_s)}, host operators {format_seconds(t.host_time_s)}, exposed "
               f"communication {format_seconds(t.comm_time_s)} per step. Efficiencies calibrated on measured H200 steps "
               "(Accuracy page, Step time).")
    table = st.expander(f"Roofline: {len(t.roofline)} operations, FLOPs, bytes and what bounds each",
                        on_change="rerun")
    if table.open:
        table.dataframe(roofline_frame(t), hide_index=True, width="stretch", height="content",
                        key="roofline_table")
        table.markdown("\n".join(f"- {n}" for n in t.notes) if t.notes else "")


def roofline_frame(t):
    """Seed 003's table: one row per operation of the step, with a total row."""
    import pandas as pd
    rows = [{"Operation": r.name, "Phase": r.phase, "FLOPs": r.flops, "Bytes": r.bytes,
             "FLOP/B": round(r.intensity, 1), "Bound": r.bound, "Time (ms)": round(r.time_s * 1e3, 3)}
            for r in t.roofline]
    rows.append({"Operation": "Total", "Phase": "", "FLOPs": sum(r.flops for r in t.roofline),
                 "Bytes": sum(r.bytes for r in t.roofline), "FLOP/B": None, "Bound": "",
                 "Time (ms)": round(sum(r.time_s for r in t.roofline) * 1e3, 3)})
    return pd.DataFrame(rows)
