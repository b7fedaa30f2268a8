"""The calculator page's sections below the breakdown: remedies, sweeps and the step timeline. Each is an expander
bound to the URL (adv, swp, tl) and computed only while open, so the default view pays nothing for them."""
from __future__ import annotations

from typing import Any, Mapping

import streamlit as st

from dashboard import advice
from dashboard.safe_text import md


def sections(result, values: Mapping[str, Any], unit: str, gpu, root: str) -> None:
    """`result`: dashboard.inputs.state.Result; `values`: the page's inputs as drawn; `root`: the calculator's address."""
    st.subheader("When it does not fit", divider="gray")
    box = st.expander("Remedies: what each lever saves, and a combination that fits", key="adv",
                      bind="query-params", on_change="rerun", icon=":material/healing:")
    if box.open:
        with box:
            _remedies(result, values, unit, root)
    box = st.expander("Sweeps: memory against micro-batch, sequence length or GPUs", key="swp",
                      bind="query-params", on_change="rerun", icon=":material/show_chart:")
    if box.open:
        with box:
            _sweep(result, values, unit, gpu)
    box = st.expander("Step timeline: the memory of each phase, and the peak", key="tl", bind="query-params",
                      on_change="rerun", icon=":material/timeline:")
    if box.open:
        with box:
            _timeline(result, unit)


def _remedies(result, values, unit: str, root: str) -> None:
    from calculator.core.units import format_bytes
    if not result.workload.gpu:
        st.info("Pick a GPU: a remedy is judged by whether the job fits it.")
        return
    adv = advice.advice_for(result, values)
    cur = adv.current
    what = ("the KV shortfall (KV the workload needs minus what the engine's budget leaves for its pool)"
            if adv.measure == "kv_shortfall_bytes" else "the nvidia-smi total of the most loaded GPU")
    verdict = "fits" if cur.fits else "does not fit"
    st.markdown(f"Now: **{format_bytes(cur.total_bytes, unit)}** per GPU, {verdict} the 80% band of "
                f"{format_bytes(adv.budget_bytes, unit)} on {md(adv.gpu)}. Each lever below is the engine's estimate "
                f"of the changed input, ranked by what it saves on {what}; the step time is the time model's.")
    if not adv.remedies:
        st.info("No lever lowers the memory of this job.")
    else:
        st.dataframe(advice.remedy_rows(adv, unit, root), hide_index=True, width="stretch", height="content",
                     key="remedies_table",
                     column_config={"Open": st.column_config.LinkColumn("Open", display_text="apply")})
    if adv.combined.steps:
        head = ("Combined, until it fits" if adv.combined.fits else
                "Combined (every lever that still saves; it does not fit yet)")
        st.markdown(f"**{head}** (same job first, then CPU offload, more GPUs, a different job):\n\n"
                    + "\n".join(advice.combined_lines(adv, unit, root)))
    elif cur.fits:
        st.success("It fits already: the levers above only add headroom.", icon=":material/check_circle:")


def _sweep(result, values, unit: str, gpu) -> None:
    from calculator.core.errors import InputError
    from dashboard.inputs.widgets import field
    axis = field("swx", {})
    try:
        sw = advice.sweep_for(result, values, axis)
    except InputError as exc:
        st.error(f"No sweep: {md(str(exc))}")
        return
    st.caption(f"Each point is the engine's estimate with the {sw.label} changed ({sw.how}).")
    st.plotly_chart(advice.sweep_figure(sw, unit, gpu), key="sweep_chart", theme=None)
    refused = [p for p in sw.points if p.error]
    if refused:
        st.caption("Left out: " + "; ".join(f"{p.x:,}: {md(p.error)}" for p in refused))
    st.download_button("Sweep CSV", lambda: advice.sweep_csv(sw), f"gpu-memory-sweep-{axis}.csv", "text/csv",
                       icon=":material/table:", on_click="ignore", key="sweep_csv")


def _timeline(result, unit: str) -> None:
    from calculator.planning.timeline import step_timeline
    tl = step_timeline(result.estimate)
    if tl is None:
        st.info("A network given as totals has no phases.")
        return
    st.caption(("Allocated memory (torch.cuda.memory_allocated)" if tl.measure == "peak_allocated_bytes" else
                "nvidia-smi totals") + f" at each moment of the step on the most loaded GPU"
               + (f" (pipeline stage {tl.stage})" if len(result.estimate.stages) > 1 else "")
               + f"; the peak is **{md(tl.peak.name)}**.")
    st.plotly_chart(advice.timeline_figure(tl, unit), key="timeline_chart", theme=None)
