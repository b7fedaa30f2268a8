"""LLM GPU Memory Calculator: the dashboard.

`streamlit run app.py`. This file is the entrypoint: it registers the pages with st.navigation and holds the
calculator page, which reads top to bottom like it looks. Every number on it comes from the engine
(`calculator.stages.estimate`); the page only collects inputs, shows the result and exports it.
Every input lives in the URL (`bind="query-params"`, keys documented in docs/url-format.md).
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode, urlsplit

import streamlit as st

from dashboard.inputs import hub as hub_input
from dashboard.inputs import lazy
from dashboard.views import answer
from dashboard.views import result as result_view
from dashboard.views import serving
from dashboard.views import sidebar
from dashboard.inputs import state
from dashboard.views import timing as timing_view
from dashboard.inputs import widgets
from dashboard.safe_text import md, md_lines, md_message
from dashboard.inputs.scenarios import SCENARIOS
from dashboard.inputs.widgets import field

HERE = Path(__file__).resolve().parent
DEFAULT_BASE_URL = "http://localhost:8501/"
PAGE_STATE = "_page"  # the calculator page's own session state: values it keeps (from the link, then the inputs
# of closed sections: dashboard.inputs.lazy), the link's warnings, the rerun guard


# ---- callbacks (run before the script, so they may set bound widgets) --------------------------------------------
def dismiss_link_warning() -> None:
    st.session_state[PAGE_STATE]["ignored"] = ()


# ---- the calculator page ---------------------------------------------------------------------------------------
def calculator() -> None:
    import pandas as pd

    from calculator.core.units import format_bytes

    # A shared link is checked once per session, before any widget reads it: bound widgets drop bad values silently.
    # The page's own state is one session-state entry (every bound widget call walks the whole session state).
    page = st.session_state.get(PAGE_STATE)
    if page is None:
        link = state.check_query_params(st.query_params.to_dict())
        page = st.session_state[PAGE_STATE] = {"held": dict(link.values), "ignored": link.ignored,
                                               "recomputed": False}
        for key in link.drop_keys:
            del st.query_params[key]
        if set(link.drop_keys) - set(link.unknown_keys):
            st.rerun()  # a value the bound widget cannot read: rerun without it (widgets have not read the URL yet)
    if page["ignored"]:
        st.warning("Some link parameters were ignored or adjusted:\n\n" + md_lines(page["ignored"]),
                   icon=":material/link_off:")
        st.button("Dismiss", key="_dismiss_link", on_click=dismiss_link_warning, type="tertiary")
    if st.query_params.get(state.VERSION_KEY) != state.URL_FORMAT_VERSION:
        st.query_params[state.VERSION_KEY] = state.URL_FORMAT_VERSION

    # A named precision recipe decides every dtype: show its dtypes in the (then disabled) per-tensor fields.
    values = _values()
    if values["recipe"] != state.CUSTOM_RECIPE and values["recipe"] in state.options("recipe"):
        stale = {k: d for k, d in state.recipe_dtypes(values["recipe"]).items() if values[k] != d}
        if stale:
            sidebar.apply_values(stale)
            values = _values()

    # A Hugging Face id is fetched first: its inputs are drawn now (the token is only known once its field is
    # drawn), in their place in the sidebar's model group; the rest of the group follows the estimate.
    with st.sidebar:
        st.header("Model")
        model_box, hub_box = st.container(), st.container()
    collected, collecting = widgets.start_collecting()  # each field() from here on reports the value it drew
    token, hub_notes = hub_input.inputs(hub_box, values["hf"])
    hub = hub_input.resolve(values["hf"], token)

    # The estimate is computed before the widgets are drawn so each complaint can sit under its widget.
    result, problems = _compute(values, hub)
    top = st.empty()  # the result's place at the top of the page, filled once the inputs are drawn

    # ---- sidebar: inputs, grouped as a person thinks (dashboard/views/sidebar.py) ---------------------------------
    sidebar.draw(values, problems, result, hub, hub_notes, model_box)

    # What the widgets hold now must be what was computed. If a widget resolved differently, run again (once);
    # if it still differs, compute from what the widgets hold: never show numbers for other inputs.
    widgets.stop_collecting(collecting)
    drawn = {**values, **collected}
    if drawn != values:
        if not page["recomputed"]:
            page["recomputed"] = True
            st.rerun()
        result, problems = _compute(drawn, hub)
    # The top of the result (headline, summary, chart, fit cards) is drawn after the sidebar's inputs: measured in
    # headless Chromium (benchmarks/bench_paint.py), a slider's new total shows in ~175 ms this way against ~265 ms
    # when the top came first (the browser then renders the headline while the run is still sending every input,
    # and the server draws those inputs while the browser renders): the same-widget bare page takes ~183 ms.
    unit = answer_slot = None
    if result is not None:
        with top.container():
            unit, answer_slot = _top(result, drawn, problems, unit_widget=True)
    page["recomputed"] = False
    widgets.clear_adjusted()  # the notes of inputs put back in range were shown under them in this run
    lazy.keep(drawn, collected, page["held"])

    # ---- the Hugging Face model, or why it could not be used ----------------------------------------------
    if hub is not None:
        hub_input.panel(hub, values)

    # ---- no numbers from invalid input ------------------------------------------------------------------------
    if result is None:
        head, units = st.columns([4, 1], vertical_alignment="bottom")
        if unit is None:  # drawn even without a result, so the link keeps it
            with units:
                field("unit", problems, label="Units (GB = 10⁹ B, GiB = 2³⁰ B)")
        head.subheader("No estimate", divider="red")
        lines = []
        for key, msgs in problems.items():
            label = state.BY_KEY[key].label if key in state.BY_KEY else "Input"
            lines += [f"- **{label}**: {md_message(m)}" for m in msgs]
        st.error("No estimate: the inputs below cannot be computed. Each message is also shown next to the "
                 "input that causes it.\n\n" + "\n".join(lines), icon=":material/block:")
        st.caption("Link to this view:")
        st.text(_link(drawn))  # plain text: no syntax highlighter to load
        _examples()
        return

    est = result.estimate
    unit = st.session_state["unit"]
    gpu = sidebar.gpu_of(drawn["gpu"])
    if est.peak.host_bytes:
        st.caption(f"CPU offload keeps {format_bytes(est.peak.host_bytes, unit)} per GPU rank in host RAM: "
                   + ", ".join(f"{t.label} {format_bytes(t.bytes, unit)}" for t in est.peak.host_terms))
    for note in result.notes:
        st.info(md_message(note), icon=":material/info:")
    from calculator.core.fit import FIT_CARD_GPUS
    from calculator.model.presets import list_gpus
    others = [g.id for g in list_gpus() if g.id not in FIT_CARD_GPUS and g.id != values["gpu"]]
    if others:
        # Lazy: the table (each card's "GPUs needed" a planner search) is built only while the expander is open
        # (on_change="rerun" makes .open known).
        more = st.expander(f"{len(others)} more GPUs", on_change="rerun")  # no key: keyed state costs every widget
        if more.open:
            others = est.fits_on(others)
            more.table(pd.DataFrame([{
                "GPU": f.name, "Verdict": f.verdict, "Used": f"{f.utilization:.0%}",
                f"Headroom ({unit})": format_bytes(f.headroom_bytes, unit),
                "GPUs needed": "" if f.gpus_needed is None else str(f.gpus_needed), "Layout": f.layout,
                "Note": f.note} for f in others]), hide_index=True)

    _examples()

    # ---- breakdown table and formula panel --------------------------------------------------------------------
    st.subheader("Breakdown and formulas", divider="gray")
    result_view.breakdown(est, unit)

    serving.panel(result, unit, drawn)
    timing_view.panel(result, drawn)

    # ---- remedies, sweeps, step timeline: lazy sections, computed only while open ---------------------------------
    from dashboard.views import sections as advice_view
    advice_view.sections(result, drawn, unit, gpu, _link(drawn).split("?")[0])

    for w in est.warnings:  # (the sequence beyond the model's context is said once, under its field)
        st.warning(md_message(w), icon=":material/warning:")
    if est.assumptions:
        with st.expander("Assumptions of this estimate"):
            st.markdown(md_lines(est.assumptions))

    # ---- share and export -----------------------------------------------------------------------------------
    st.subheader("Share and export", divider="gray")
    link = _link(drawn)
    # the link and a copy button (st.code's would load a 1.5 MB syntax highlighter for one line); its script holds
    # no data: it copies the escaped text beside it
    st.html(result_view.html_blocks.share_link(link), unsafe_allow_javascript=True)
    from dashboard import exports
    from dashboard.charts import png_filename
    from dashboard.pdf_report import pdf_report
    stem = png_filename(values).replace("gpu-memory", "gpu-memory-report", 1)
    c1 = c2 = c3 = st.container(horizontal=True, gap="small")
    # Files are built only when their button is clicked (data=callable).
    c1.download_button("Breakdown CSV", lambda: exports.to_csv(est, drawn, link, unit), f"{stem}.csv",
                       "text/csv", icon=":material/table:", on_click="ignore", width="stretch")
    source = hub_input.export_source(hub)
    c2.download_button("Breakdown JSON", lambda: exports.to_json(est, drawn, result.model, result.workload, link,
                                                                 source),
                       f"{stem}.json", "application/json", icon=":material/data_object:",
                       on_click="ignore", width="stretch")

    # Built on click, in fpdf2 alone (no browser): at most a few at once per server (dashboard/pdf_report.py).
    c3.download_button("One-page PDF report", lambda: pdf_report(result, drawn, link, unit, gpu), f"{stem}.pdf",
                       "application/pdf",
                       icon=":material/picture_as_pdf:", on_click="ignore", width="stretch")
    from dashboard.views import launch_exports
    launch_exports.panel(result)  # ready-to-run framework configs (lazy: built when opened)
    # Last: the answer's searched lines (largest batch and sequence, top remedies; ~0.1-0.4 s on a miss) in the place
    # kept for them at the top, so nothing above waits for them.
    fit = next(iter(est.fits_on([drawn["gpu"]])), None) if gpu is not None else None
    searched = answer.lines_searched(result, drawn, unit, gpu, fit)
    if searched and answer_slot is not None:
        answer_slot.markdown("  \n".join(searched))


def _top(result, values: dict, problems, unit_widget: bool) -> tuple:
    """Headline with the unit switch, the answer to the mode's question, the workload in one line, the chart beside
    the fit cards: one screenshot. Returns the unit shown and the answer's place for its searched lines."""
    est = result.estimate
    head, units = st.columns([4, 1], vertical_alignment="bottom")
    if unit_widget:
        with units:
            unit = field("unit", problems, label="Units (GB = 10⁹ B, GiB = 2³⁰ B)")
    else:
        unit = values["unit"]
    fit = next(iter(est.fits_on([values["gpu"]])), None)
    head.subheader(f"{md(est.model_name)}: {serving.MODE_TITLES.get(est.mode, est.mode)}")
    result_view.headline(est, fit, unit)
    gpu = sidebar.gpu_of(values["gpu"])
    box = st.container(key="answer", border=True)  # the answer to the mode's question (dashboard/views/answer.py)
    box.markdown("  \n".join(answer.lines_now(result, values, unit, gpu, fit)))
    slot = box.empty()
    st.container(key="summary").caption(result_view.summary_line(result, values))  # a screenshot says what it shows
    from dashboard.planner import fit_layout_values
    result_view.chart_and_cards(est, values, gpu, unit, lambda f: _link(fit_layout_values(values, f)))
    return unit, slot


def _examples() -> None:
    """The example scenarios: one click sets every input."""
    st.subheader("Examples", divider="gray")
    available = set(state.options("model"))
    row = st.container(horizontal=True, gap="small")  # one block (st.columns(5) costs six)
    for sc in SCENARIOS:
        ok = sc.values.get("model") in available
        row.button(sc.title, key=f"_scenario_{sc.id}", on_click=sidebar.load_scenario, args=(sc.values,),
                   help=sc.summary if ok else f"preset {sc.values.get('model')!r} is not in the catalogue",
                   disabled=not ok, width="stretch")


def _compute(values: dict, hub=None) -> tuple:
    """(result, {}) or (None, {url key: [messages]}); "" collects what no single input causes."""
    problems: dict[str, list[str]] = {}
    try:
        return state.compute(values, hub.resolved if hub is not None else None), problems
    except state.InputProblems as exc:
        for prob in exc.problems:
            problems.setdefault(prob.key, []).append(prob.message)
    except Exception as exc:  # an engine bug must not take the page down, nor show a number
        problems[""] = [f"the engine failed on these inputs ({type(exc).__name__}: {exc}). This is a bug in the "
                        "calculator, not in your inputs: please report it with the link below."]
    return None, problems


def _link(values: dict) -> str:
    """The URL that reproduces this view (the page's own address, or localhost outside a browser)."""
    base = (st.context.url or DEFAULT_BASE_URL).split("?")[0]
    return (base if urlsplit(base).path else base + "/") + "?" + urlencode(state.to_query(values))


def _values() -> dict:
    """Every input's current value (one snapshot of the session state: each lookup in it copies the state)."""
    snapshot = st.session_state.to_dict()
    return state.current_values(snapshot, snapshot[PAGE_STATE]["held"])


# ---- navigation ------------------------------------------------------------------------------------------------
from dashboard import hosting  # noqa: E402

hosting.harden()  # no upload is kept for any session: the pages have no uploader (dashboard/hosting.py)
# A local favicon: a ":material/…:" page icon makes every visitor's browser fetch it from fonts.gstatic.com.
FAVICON = HERE / "dashboard" / "static" / "favicon.png"
st.set_page_config(page_title="LLM GPU Memory Calculator", page_icon=str(FAVICON) if FAVICON.exists() else None,
                   layout="wide")
pages = [
    st.Page(calculator, title="Calculator", icon=":material/calculate:", default=True),
    st.Page("pages/planner.py", title="Planner", icon=":material/view_module:", url_path="planner"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
    st.Page("pages/formulas.py", title="Formulas & references", icon=":material/function:",
            url_path="formulas"),
    st.Page("pages/accuracy.py", title="Accuracy", icon=":material/rule:", url_path="accuracy"),
    st.Page("pages/about.py", title="About the estimate", icon=":material/info:", url_path="about"),
]
st.navigation(pages, position="top").run()
