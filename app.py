"""LLM GPU Memory Calculator: the dashboard.

`streamlit run app.py`. This file is the entrypoint: it registers the pages with st.navigation and holds the
calculator page, which reads top to bottom like it looks. Every number on it comes from the engine
(`calculator.estimate`); the page only collects inputs, shows the result and exports it.
Every input lives in the URL (`bind="query-params"`, keys documented in docs/url-format.md).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import streamlit as st

from dashboard import state
from dashboard.scenarios import SCENARIOS
from dashboard.widgets import field

HERE = Path(__file__).resolve().parent
DEFAULT_BASE_URL = "http://localhost:8501/"
HUB_TIMEOUT_S = 10.0


# ---- callbacks (run before the script, so they may set bound widgets) --------------------------------------------
def _apply(values: dict) -> None:
    for key, value in values.items():
        st.session_state[key] = value


def load_scenario(values: dict) -> None:
    _apply(state.reset_values(values))


def edit_preset_as_custom() -> None:
    mapped = state.load_preset(st.session_state["model"])
    _apply({**state.spec_to_arch(mapped.spec), "model": state.CUSTOM})


def edit_preset_config() -> None:
    raw = state.load_preset(st.session_state["model"]).raw
    _apply({"cfg": json.dumps(raw, indent=1), "model": state.CONFIG})


def pasted_config() -> None:
    if st.session_state.get("cfg", "").strip():
        _apply({"model": state.CONFIG, "hf": ""})


def model_picked() -> None:
    """Choosing a model source clears the Hugging Face id (which otherwise is the model)."""
    st.session_state["hf"] = ""


def edit_hub_config(config: dict) -> None:
    _apply({"cfg": json.dumps(config, indent=1), "model": state.CONFIG, "hf": ""})


def forget_hub_failures() -> None:
    """A new token, or Retry: ask the Hub again for ids that failed in this session."""
    st.session_state["_hub_failed"] = {}


def dismiss_link_warning() -> None:
    st.session_state["_link_ignored"] = ()


# ---- the calculator page ---------------------------------------------------------------------------------------
def calculator() -> None:
    import pandas as pd

    from calculator.result import COMPONENT_LABELS
    from calculator.sources import SOURCES
    from calculator.units import format_bytes, format_count

    st.title("LLM GPU Memory Calculator")
    st.caption("Per-GPU memory for training or inference of a transformer, term by term, each with its formula "
               "and source. Everything on this page is in the link: share it, reload it, screenshot it.")

    # A shared link is checked once per session, before any widget reads it: bound widgets drop bad values silently.
    if "_link_checked" not in st.session_state:
        link = state.check_query_params(st.query_params.to_dict())
        st.session_state["_link_checked"] = True
        st.session_state["_link_values"] = link.values
        st.session_state["_link_ignored"] = link.ignored
        for key in link.drop_keys:
            del st.query_params[key]
        if set(link.drop_keys) - set(link.unknown_keys):
            st.rerun()  # a value the bound widget cannot read: rerun without it (widgets have not read the URL yet)
    if st.session_state["_link_ignored"]:
        st.warning("Some link parameters were ignored or adjusted:\n\n"
                   + "\n".join(f"- {line}" for line in st.session_state["_link_ignored"]), icon=":material/link_off:")
        st.button("Dismiss", key="_dismiss_link", on_click=dismiss_link_warning, type="tertiary")
    if st.query_params.get(state.VERSION_KEY) != state.URL_FORMAT_VERSION:
        st.query_params[state.VERSION_KEY] = state.URL_FORMAT_VERSION

    # A named precision recipe decides every dtype: show its dtypes in the (then disabled) per-tensor fields.
    values = _values()
    if values["recipe"] != state.CUSTOM_RECIPE and values["recipe"] in state.options("recipe"):
        stale = {k: d for k, d in state.recipe_dtypes(values["recipe"]).items() if values[k] != d}
        if stale:
            _apply(stale)
            values = _values()

    # A Hugging Face id is fetched first: its inputs are drawn now (the token is only known once its field is
    # drawn), in their place in the sidebar's model group; the rest of the group follows the estimate.
    with st.sidebar:
        st.header("Model")
        model_box, hub_box = st.container(), st.container()
    token, hub_notes = _hub_inputs(hub_box)
    hub = _hub(values["hf"], token)

    # The estimate is computed before the widgets are drawn so each complaint can sit under its widget.
    result, problems = _compute(values, hub)

    # ---- sidebar: inputs, grouped as a person thinks --------------------------------------------------------
    model_is = values["model"]
    train = values["mode"] == "train"
    with hub_notes:
        _hub_sidebar_notes(hub, problems)
    with model_box:
        field("model", problems, on_change=model_picked, caption=(
            "Not used while a Hugging Face id is set below (picking a model here clears it)."
            if hub is not None and hub.resolved is not None else _model_caption(result, model_is)))
        if hub is not None and hub.resolved is not None:
            st.button("Edit this model's config.json", on_click=edit_hub_config, args=(hub.fetched.config,),
                      icon=":material/edit:", type="tertiary", help="Copy the fetched config.json into the "
                      "config field (Model = config), where it can be edited")
        elif model_is not in state.SPECIAL_MODELS and result is not None:
            if state.arch_expresses(result.model):
                st.button("Edit this preset as a custom architecture", on_click=edit_preset_as_custom,
                          icon=":material/edit:", type="tertiary")
            else:  # latent attention, per-layer attention patterns, QK-norm…: only its config.json says it all
                st.button("Edit this preset's config.json", on_click=edit_preset_config, icon=":material/edit:",
                          type="tertiary", help="The custom fields cannot describe this model exactly")
    with st.sidebar:
        arch_problem = any(k in problems for k in state.ARCH_KEYS)
        with st.expander("Custom architecture (Model = custom)", expanded=model_is == state.CUSTOM or arch_problem):
            _pairs(state.ARCH_KEYS, problems, disabled=model_is != state.CUSTOM)
        with st.expander("Paste config.json (Model = config)", expanded=model_is == state.CONFIG or "cfg" in problems):
            field("cfg", problems, on_change=pasted_config)
        with st.expander("Generic network (Model = generic)",
                         expanded=model_is == state.GENERIC or "gparams" in problems or "gact" in problems):
            st.caption("Any network given as totals: parameters and activation elements saved per sample.")
            _pairs(("gparams", "gact"), problems, disabled=model_is != state.GENERIC)

        st.header("Mode")
        field("mode", problems, label="Training or inference")
        field("ft", problems, disabled=not train)
        _pairs(("lr", "lt"), problems, disabled=not train or values["ft"] == "full")
        field("lad", problems, disabled=not train or values["ft"] == "full")

        st.header("Precision")
        from calculator.workload import OPTIMIZERS, RECIPES
        recipe = values["recipe"]
        field("recipe", problems, caption=RECIPES[recipe][0] if recipe in RECIPES else
              "Each tensor family's dtype is set below.")
        with st.expander("Per-tensor dtypes", expanded=recipe == state.CUSTOM_RECIPE
                         or any(k in problems for k in state.DTYPE_KEYS)):
            _pairs(state.DTYPE_KEYS, problems, disabled=recipe != state.CUSTOM_RECIPE)

        st.header("Optimizer")
        field("opt", problems, disabled=not train, caption=OPTIMIZERS.get(values["opt"]))
        field("oimpl", problems, disabled=not train)

        st.header("Recompute and attention")
        field("rc", problems, disabled=not train)
        field("attn", problems)
        field("act", problems)

        st.header("Parallelism")
        field("zero", problems, disabled=not train)
        field("dopt", problems, disabled=not train)
        _pairs(("tp", "pp", "dp", "cp", "ep", "etp"), problems)
        field("sp", problems, disabled=values["tp"] == 1)
        field("sched", problems, disabled=values["pp"] == 1)
        _pairs(("vpp", "mb"), problems, disabled={"vpp": values["sched"] != "interleaved", "mb": not train})
        field("zsh", problems, disabled=not train or values["zero"] == "0")

        st.header("Batch and sequence")
        field("mbs", problems, label="Micro-batch size" if train else "Batch (concurrent sequences)")
        _pairs(("seq", "gen"), problems, disabled={"gen": train})
        _pairs(("kvdt", "wdt"), problems, disabled=train)
        _pairs(("qgs", "qm"), problems, disabled=train)

        st.header("Overheads")
        field("frag", problems)
        _pairs(("fst", "fwk"), problems, disabled=values["frag"] is not None)
        field("ctx", problems)
        field("nccl", problems, disabled=not values["comm"])
        field("comm", problems)
        field("tbo", problems, disabled=values["act"] != "textbook")

        st.header("GPU")
        gpu = _gpu(values["gpu"])
        field("gpu", problems, caption=f"{gpu.name}: {format_bytes(gpu.memory_bytes, values['unit'])}"
              if gpu else None)

    # What the widgets hold now must be what was computed. If a widget resolved differently, run again (once);
    # if it still differs, compute from what the widgets hold: never show numbers for other inputs.
    drawn = _values()
    if drawn != values:
        if not st.session_state.get("_recomputed"):
            st.session_state["_recomputed"] = True
            st.rerun()
        result, problems = _compute(drawn, hub)
    st.session_state["_recomputed"] = False

    # ---- examples -------------------------------------------------------------------------------------------
    st.subheader("Examples", divider="gray")
    available = set(state.options("model"))
    cols = st.columns(len(SCENARIOS))
    for col, sc in zip(cols, SCENARIOS):
        ok = sc.values.get("model") in available
        col.button(sc.title, key=f"_scenario_{sc.id}", on_click=load_scenario, args=(sc.values,),
                   help=sc.summary if ok else f"preset {sc.values.get('model')!r} is not in the catalogue",
                   disabled=not ok, width="stretch")

    # ---- the Hugging Face model, or why it could not be used ----------------------------------------------
    if hub is not None:
        _hub_panel(hub, values)

    # ---- result header with the unit switch (drawn even without a result, so the link keeps it) ------------
    head, units = st.columns([4, 1], vertical_alignment="bottom")
    with units:
        field("unit", problems, label="Units (GB = 10⁹ B, GiB = 2³⁰ B)")
    unit = st.session_state["unit"]

    # ---- no numbers from invalid input ------------------------------------------------------------------------
    if result is None:
        head.subheader("No estimate", divider="red")
        lines = []
        for key, msgs in problems.items():
            label = state.BY_KEY[key].label if key in state.BY_KEY else "Input"
            lines += [f"- **{label}**: {m}" for m in msgs]
        st.error("No estimate: the inputs below cannot be computed. Each message is also shown next to the "
                 "input that causes it.\n\n" + "\n".join(lines), icon=":material/block:")
        st.caption("Link to this view:")
        st.code(_link(drawn), language=None, wrap_lines=True)
        return

    est = result.estimate
    for note in result.notes:
        st.info(note, icon=":material/info:")

    # ---- headline -------------------------------------------------------------------------------------------
    fit = next((f for f in est.fits if f.gpu == values["gpu"]), None)
    head.subheader(f"{est.model_name}: {'training' if est.mode == 'train' else 'inference'}", divider="gray")
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Total per GPU", format_bytes(est.total_bytes, unit),
              help="What nvidia-smi would show on the most loaded GPU" + (
                  f" (pipeline stage {est.worst_stage})" if len(est.stages) > 1 else ""))
    m2.metric("Peak allocated", format_bytes(est.peak_allocated_bytes, unit),
              help="What torch.cuda.max_memory_allocated() would report")
    m3.metric("Parameters", format_count(est.parameters),
              help=f"{est.parameters:,} parameters; {est.active_parameters:,} active per token")
    if fit is not None:
        m4.metric(f"On {fit.name}", fit.verdict, f"{fit.utilization:.0%} of capacity",
                  delta_color="off" if fit.verdict == "fits" else "inverse")

    # ---- chart ----------------------------------------------------------------------------------------------
    from dashboard.charts import breakdown_figure, plotly_config
    fig = breakdown_figure(est, unit, gpu)
    st.plotly_chart(fig, key="breakdown", config=plotly_config(values), theme=None)

    # ---- fit cards ------------------------------------------------------------------------------------------
    st.subheader("Fits on", divider="gray")
    from calculator.hardware import FIT_CARD_GPUS
    shown = [values["gpu"]] + [g for g in FIT_CARD_GPUS if g != values["gpu"]]
    _fit_cards([f for g in shown for f in est.fits if f.gpu == g], unit)
    others = [f for f in est.fits if f.gpu not in shown]
    if others:
        with st.expander(f"{len(others)} more GPUs"):
            st.dataframe(pd.DataFrame([{
                "GPU": f.name, "Verdict": f.verdict, "Used": f.utilization,
                f"Headroom ({unit})": format_bytes(f.headroom_bytes, unit), "GPUs needed": f.gpus_needed,
                "Note": f.note} for f in others]), hide_index=True, width="stretch", key="more_fits",
                column_config={"Used": st.column_config.ProgressColumn("Used", format="percent", min_value=0.0,
                                                                       max_value=1.0)})

    # ---- breakdown table and formula panel --------------------------------------------------------------------
    st.subheader("Breakdown and formulas", divider="gray")
    if len(est.stages) > 1:
        st.caption(f"Pipeline parallel: the table and formulas are for stage {est.worst_stage}, the most loaded "
                   "GPU; the chart shows every stage.")
    rows = [{"Component": COMPONENT_LABELS.get(t.component, t.component), "Term": t.label,
             f"Memory ({unit})": format_bytes(t.bytes, unit), "Bytes": t.bytes,
             "Share": t.bytes / est.total_bytes if est.total_bytes else 0.0} for t in est.terms]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="breakdown_table",
                 column_config={"Share": st.column_config.ProgressColumn("Share", format="percent",
                                                                          min_value=0.0, max_value=1.0),
                                "Bytes": st.column_config.NumberColumn("Bytes", format="localized")})
    with st.container(border=True, key="formulas"):
        blocks = ["**Formula and source of every term**"]
        for t in est.terms:
            src = SOURCES.get(t.source)
            cite = f"[{src.title}]({src.url})" if src else f"`{t.source}`"
            blocks.append(f"**{t.label}** — {format_bytes(t.bytes, unit)} ({t.bytes:,} bytes)  \n"
                          f"`{t.formula}`  \n`= {t.substituted}`  \nSource: {cite}"
                          + (f" — {src.detail}" if src and src.detail else "")
                          + (f"  \n_{t.note}_" if t.note else ""))
        st.markdown("\n\n".join(blocks))  # one element: a rerun pays per element

    for w in est.warnings:
        st.warning(w, icon=":material/warning:")
    if est.assumptions:
        with st.expander("Assumptions of this estimate"):
            st.markdown("\n".join(f"- {a}" for a in est.assumptions))

    # ---- share and export -----------------------------------------------------------------------------------
    st.subheader("Share and export", divider="gray")
    link = _link(drawn)
    st.code(link, language=None, wrap_lines=True)
    from dashboard import exports
    from dashboard.charts import png_filename
    stem = png_filename(values).replace("gpu-memory", "gpu-memory-report", 1)
    c1, c2, c3 = st.columns(3)
    # Files are built only when their button is clicked (data=callable).
    c1.download_button("Breakdown CSV", lambda: exports.to_csv(est, drawn, link, unit), f"{stem}.csv",
                       "text/csv", key="dl_csv", icon=":material/table:", on_click="ignore", width="stretch")
    source = _hub_source(hub)
    c2.download_button("Breakdown JSON", lambda: exports.to_json(est, drawn, result.model, result.workload, link,
                                                                 source),
                       f"{stem}.json", "application/json", key="dl_json", icon=":material/data_object:",
                       on_click="ignore", width="stretch")

    def pdf_report() -> bytes:
        png, why = exports.chart_png(breakdown_figure(est, unit, gpu, title=est.model_name))
        return exports.to_pdf(result, drawn, link, unit, png, why, gpu)

    c3.download_button("One-page PDF report", pdf_report, f"{stem}.pdf", "application/pdf", key="dl_pdf",
                       icon=":material/picture_as_pdf:", on_click="ignore", width="stretch")


def _compute(values: dict, hub: HubView | None = None) -> tuple:
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


# ---- a model by Hugging Face Hub id -------------------------------------------------------------------------------
# The token is never bound to the URL, never in st.session_state (its field has no key), never in a cache key
# (`_token` is not hashed by st.cache_data), and never in an export: it only reaches calculator.hub.fetch_model,
# which sends it as an Authorization header. An empty field lets fetch_model use the server's HF_TOKEN, which is
# therefore never sent to the browser either.
@dataclass(frozen=True)
class HubView:
    model_id: str
    endpoint: str
    fetched: Any = None   # calculator.hub.HubModel
    resolved: Any = None  # calculator.model_source.ResolvedModel: the model, when it could be used
    error: str = ""       # why it could not (a HubError's one-line message, or the engine's complaint)
    problem: str = ""     # its first half, what went wrong (the sidebar's short form)


@st.cache_data(show_spinner="Fetching config.json and counting the checkpoint's parameters on the Hugging Face Hub…",
               max_entries=64, ttl=3600)
def _fetch_hub(model_id: str, endpoint: str, authenticated: bool, _token: str | None):
    """calculator.hub.fetch_model, cached by id + endpoint (+ whether a token was used, so a gated model fetched
    with a token is not served to a session without one). Failures raise, so they are not cached here."""
    from calculator import hub
    return hub.fetch_model(model_id, token=_token, endpoint=endpoint, timeout=HUB_TIMEOUT_S)


def _hub_inputs(box) -> tuple[str, Any]:
    """Draw the id (URL-bound) and the token (not bound, no key) fields; (token, container for the id's notes)."""
    field("hf", {}, container=box)
    notes = box.container()
    server_token = bool(os.environ.get("HF_TOKEN"))
    token = box.text_input(
        "Hugging Face token", type="password", autocomplete="off", on_change=forget_hub_failures,
        placeholder="empty: the server's HF_TOKEN" if server_token else "hf_… (gated or private models only)",
        help="Sent only to the Hub, as an Authorization header. Never put in the link, the exports or the "
             "report." + (" Empty: the server's HF_TOKEN is used." if server_token else ""))
    return token or "", notes


def _hub(model_id: str, token: str) -> HubView | None:
    """The model for the `hf` key: fetched (cached), mapped by the engine, or the reason it cannot be used."""
    model_id = (model_id or "").strip()
    if not model_id:
        return None
    from calculator import hub
    endpoint = (os.environ.get("HF_ENDPOINT") or hub.DEFAULT_ENDPOINT).strip().rstrip("/")
    failed = st.session_state.setdefault("_hub_failed", {})
    if (model_id, endpoint) in failed:  # asked already in this session: no new request until Retry or a new token
        error, problem = failed[(model_id, endpoint)]
        return HubView(model_id, endpoint, error=error, problem=problem)
    try:
        fetched = _fetch_hub(model_id, endpoint, bool(token or os.environ.get("HF_TOKEN")), _token=token or None)
    except hub.HubError as exc:
        failed[(model_id, endpoint)] = (str(exc), exc.problem)
        return HubView(model_id, endpoint, error=str(exc), problem=exc.problem)
    try:
        return HubView(model_id, endpoint, fetched, state.hub_model(model_id, fetched))
    except state.InputProblems as exc:
        error = "; ".join(p.message for p in exc.problems)
        return HubView(model_id, endpoint, fetched, error=error, problem=error)


def _hub_sidebar_notes(hub: HubView | None, problems: dict) -> None:
    if hub is None:
        return
    if hub.error:
        st.error(f"Not used: {hub.problem or hub.error} (details on the page)", icon=":material/cloud_off:")
    elif hub.resolved is not None:
        r = hub.resolved
        count = f"{r.checkpoint_parameters:,} parameters in the checkpoint" if r.checkpoint_parameters else \
            "parameters counted from config.json (no checkpoint count)"
        st.caption(f":material/check: {count}" + (" · offline copy" if hub.fetched.from_cache else ""))
    for msg in problems.get("hf", ()):
        st.error(msg, icon=":material/error:")


def _in_page(message: str) -> str:
    """calculator.hub's advice, as it applies in this page (the token field stands in for HF_TOKEN)."""
    message = re.sub(r"set HF_TOKEN to (an? [^,;]*?)(?=$|[,;])", r"enter \1 in the Hugging Face token field", message)
    return message.replace("set HF_TOKEN", "enter a token in the Hugging Face token field").replace(
        "into HF_TOKEN again", "into the Hugging Face token field again")


def _hub_panel(hub: HubView, values: dict) -> None:
    """Main area: the fetched model's exact counts and notices, or the error (the page then uses the preset)."""
    if hub.resolved is None:
        fallback = values["model"]
        st.error(f"**The Hugging Face model `{hub.model_id}` could not be used.** {_in_page(hub.error)}\n\n"
                 f"The numbers below are for the Model selector's choice, `{fallback}`.", icon=":material/cloud_off:")
        st.button("Retry", key="_hub_retry", on_click=forget_hub_failures, icon=":material/refresh:",
                  type="tertiary")
        return
    from calculator.parameters import count_parameters
    r, f = hub.resolved, hub.fetched
    ours = count_parameters(r.spec).total
    lines = [f"**Hugging Face model [`{hub.model_id}`]({hub.endpoint}/{hub.model_id})** "
             f"(`model_type` {f.config.get('model_type')}, revision `{f.revision}`)"]
    if r.checkpoint_parameters is not None:
        how = {"api": "the Hub's API", "safetensors-headers": "the safetensors headers"}.get(
            f.checkpoint.source, f.checkpoint.source)
        lines.append(f"Parameters: **{r.checkpoint_parameters:,}** in the checkpoint (from {how}) · "
                     f"**{ours:,}** from the architecture")
        total = r.checkpoint_parameters or 1
        lines.append("Checkpoint dtypes: " + " · ".join(
            f"{dt} {n:,} ({n / total:.1%})" for dt, n in f.checkpoint.parameters_by_dtype.items()))
    else:
        lines.append(f"Parameters: **{ours:,}** from the architecture (the checkpoint could not be counted)")
    with st.container(border=True, key="hub_model"):
        st.markdown("  \n".join(lines))
        mismatch = r.parameter_mismatch
        if mismatch:
            st.warning(mismatch[0].upper() + mismatch[1:], icon=":material/difference:")
        for w in f.warnings:
            if w.startswith("offline:"):
                st.info("The Hub could not be reached: this is the copy cached on this server. " + w,
                        icon=":material/cloud_off:")
            else:
                st.caption(f":material/info: {w}")


def _hub_source(hub: HubView | None) -> dict | None:
    """Where the model came from, for the JSON export (never the token)."""
    if hub is None or hub.resolved is None:
        return None
    r, f = hub.resolved, hub.fetched
    return {"origin": "hub", "model_id": hub.model_id, "endpoint": hub.endpoint, "revision": f.revision,
            "checkpoint_parameters": r.checkpoint_parameters,
            "checkpoint_parameters_by_dtype": dict(r.checkpoint_dtypes), "from_cache": f.from_cache,
            "warnings": list(f.warnings) + ([r.parameter_mismatch] if r.parameter_mismatch else [])}


def _link(values: dict) -> str:
    """The URL that reproduces this view (the page's own address, or localhost outside a browser)."""
    base = (st.context.url or DEFAULT_BASE_URL).split("?")[0]
    return (base if urlsplit(base).path else base + "/") + "?" + urlencode(state.to_query(values))


def _values() -> dict:
    """Every input's current value (one snapshot of the session state: each lookup in it copies the state)."""
    snapshot = st.session_state.to_dict()
    return state.current_values(snapshot, snapshot["_link_values"])


def _pairs(keys, problems, disabled: bool | dict = False) -> None:
    """Inputs two per row (each with its own complaint under it)."""
    for i in range(0, len(keys), 2):
        cols = st.columns(2)
        for col, key in zip(cols, keys[i:i + 2]):
            off = disabled.get(key, False) if isinstance(disabled, dict) else disabled
            field(key, problems, disabled=off, container=col)


def _gpu(gpu_id: str):
    return next((g for g in state.gpus() if g.id == gpu_id), None)


def _model_caption(result, model_is: str) -> str | None:
    if result is None:
        return None
    from calculator.units import format_count
    est = result.estimate
    if model_is == state.GENERIC:
        return f"Generic network: {format_count(est.parameters)} parameters"
    spec = result.model
    moe = (f", MoE {spec.num_experts} experts (top-{spec.num_experts_per_tok}), "
           f"{format_count(est.active_parameters)} active") if getattr(spec, "num_experts", 0) else ""
    shape = (f" · {spec.num_hidden_layers} layers, h={spec.hidden_size}, {spec.num_attention_heads} heads / "
             f"{spec.kv_heads} KV") if hasattr(spec, "hidden_size") else ""
    return f"{format_count(est.parameters)} parameters{shape}{moe}"


def _fit_cards(fits, unit: str) -> None:
    from calculator.units import format_bytes
    icons = {"fits": ":green[:material/check_circle: fits]", "tight": ":orange[:material/warning: tight]",
             "does not fit": ":red[:material/cancel: does not fit]"}
    per_row = 6
    for start in range(0, len(fits), per_row):
        cols = st.columns(per_row)
        for col, f in zip(cols, fits[start:start + per_row]):
            with col.container(border=True, key=f"fit_{f.gpu}"):
                head = format_bytes(abs(f.headroom_bytes), unit)
                st.markdown(f"**{f.name}**  \n{icons.get(f.verdict, f.verdict)}  \n"
                            f"{f.utilization:.0%} of {format_bytes(f.capacity_bytes, unit)}  \n"
                            + (f"headroom {head}" if f.headroom_bytes >= 0 else f"short by {head}")
                            + (f" · GPUs needed: **{f.gpus_needed}**" if f.gpus_needed else " · no layout fits")
                            + (f"  \n:small[:gray[{f.note}]]" if f.note else ""))
                st.progress(min(max(f.utilization, 0.0), 1.0))


# ---- navigation ------------------------------------------------------------------------------------------------
st.set_page_config(page_title="LLM GPU Memory Calculator", page_icon=":material/memory:", layout="wide")
pages = [
    st.Page(calculator, title="Calculator", icon=":material/calculate:", default=True),
    st.Page("pages/formulas.py", title="Formulas & references", icon=":material/function:",
            url_path="formulas"),
    st.Page("pages/accuracy.py", title="Accuracy", icon=":material/rule:", url_path="accuracy"),
    st.Page("pages/about.py", title="About the estimate", icon=":material/info:", url_path="about"),
]
st.navigation(pages, position="top").run()
