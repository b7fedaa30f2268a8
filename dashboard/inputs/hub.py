"""The calculator page's model by Hugging Face Hub id: the `hf` field (URL-bound) and the token field (not bound,
no key), the cached fetch, and what the page shows about the fetched model or why it could not be used.

The token is never bound to the URL, never in st.session_state (its field has no key), never in a cache key
(`_token` is not hashed by st.cache_data; the key holds a digest of it), and never in an export: it only reaches
calculator.model.hub.client.fetch_model, which sends it as an Authorization header. An empty field lets fetch_model use the server's HF_TOKEN, which is
therefore never sent to the browser either.

A module, not part of app.py, so that its definitions are not re-executed on every rerun.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

import streamlit as st

from dashboard.inputs import state
from dashboard.safe_text import md, md_link, md_message
from dashboard.inputs.widgets import field

HUB_TIMEOUT_S = 10.0


# ---- callbacks -------------------------------------------------------------------------------------------------
def edit_hub_config(config: dict) -> None:
    """Copy the fetched config.json into the config field (Model = config) and clear the id."""
    st.session_state.update({"cfg": json.dumps(config, indent=1), "model": state.CONFIG, "hf": ""})


def forget_failures() -> None:
    """A new token, or Retry: ask the Hub again for ids that failed in this session."""
    st.session_state["_hub_failed"] = {}


# ---- fetch ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HubView:
    model_id: str
    endpoint: str
    fetched: Any = None   # calculator.model.hub.client.HubModel
    resolved: Any = None  # calculator.model.resolve.ResolvedModel: the model, when it could be used
    error: str = ""       # why it could not (a HubError's one-line message, or the engine's complaint)
    problem: str = ""     # its first half, what went wrong (the sidebar's short form)


@st.cache_data(show_spinner="Fetching config.json and counting the checkpoint's parameters on the Hugging Face Hub…",
               max_entries=64, ttl=3600)
def _fetch_hub(model_id: str, endpoint: str, credential: str | None, _token: str | None):
    """calculator.model.hub.client.fetch_model, cached (for every session of this server) by id, endpoint and `credential`: the
    digest of the token the fetch uses (calculator.model.hub.client.credential: the typed token, else the server's HF_TOKEN;
    never the token itself). A private model fetched with one token is therefore never served to a session with
    another token or none; that session asks the Hub, which refuses it. Failures raise, so they are not cached."""
    from calculator.model.hub import client as hub
    return hub.fetch_model(model_id, token=_token, endpoint=endpoint, timeout=HUB_TIMEOUT_S)


def inputs(box, model_id: str) -> tuple[str, Any]:
    """Draw the id field (URL-bound) and, once an id is given, the token field (not bound, no key) and a place for
    the id's notes: (token, notes container or None). Without an id no token is needed, so none is kept."""
    field("hf", {}, container=box)
    if not (model_id or "").strip():
        return "", None
    notes = box.container()
    server_token = bool(os.environ.get("HF_TOKEN"))
    token = box.text_input(
        "Hugging Face token", type="password", autocomplete="off", on_change=forget_failures,
        placeholder="empty: the server's HF_TOKEN" if server_token else "hf_… (gated or private models only)",
        help="Sent only to the Hub, as an Authorization header. Never put in the link, the exports or the "
             "report." + (" Empty: the server's HF_TOKEN is used." if server_token else ""))
    return token or "", notes


def resolve(model_id: str, token: str) -> HubView | None:
    """The model for the `hf` key: fetched (cached), mapped by the engine, or the reason it cannot be used."""
    model_id = (model_id or "").strip()
    if not model_id:
        return None
    from calculator.model.hub import client as hub
    endpoint = (os.environ.get("HF_ENDPOINT") or hub.DEFAULT_ENDPOINT).strip().rstrip("/")
    failed = st.session_state.setdefault("_hub_failed", {})
    if (model_id, endpoint) in failed:  # asked already in this session: no new request until Retry or a new token
        error, problem = failed[(model_id, endpoint)]
        return HubView(model_id, endpoint, error=error, problem=problem)
    try:
        fetched = _fetch_hub(model_id, endpoint, hub.credential(token or None), _token=token or None)
    except hub.HubError as exc:
        failed[(model_id, endpoint)] = (str(exc), exc.problem)
        return HubView(model_id, endpoint, error=str(exc), problem=exc.problem)
    try:
        return HubView(model_id, endpoint, fetched, state.hub_model(model_id, fetched))
    except state.InputProblems as exc:
        error = "; ".join(p.message for p in exc.problems)
        return HubView(model_id, endpoint, fetched, error=error, problem=error)


def sidebar_notes(hub: HubView | None, problems: dict) -> None:
    if hub is None:
        return
    if hub.error:
        st.error(f"Not used: {md_message(hub.problem or hub.error)} (details on the page)",
                 icon=":material/cloud_off:")
    elif hub.resolved is not None:
        r = hub.resolved
        count = f"{r.checkpoint_parameters:,} parameters in the checkpoint" if r.checkpoint_parameters else \
            "parameters counted from config.json (no checkpoint count)"
        st.caption(f":material/check: {count}" + (" · offline copy" if hub.fetched.from_cache else ""))
    for msg in problems.get("hf", ()):
        st.error(md_message(msg), icon=":material/error:")


def _in_page(message: str) -> str:
    """calculator.model.hub.client's advice, as it applies in this page (the token field stands in for HF_TOKEN)."""
    message = re.sub(r"set HF_TOKEN to (an? [^,;]*?)(?=$|[,;])", r"enter \1 in the Hugging Face token field", message)
    return message.replace("set HF_TOKEN", "enter a token in the Hugging Face token field").replace(
        "into HF_TOKEN again", "into the Hugging Face token field again")


def panel(hub: HubView, values: dict) -> None:
    """Main area: the fetched model's exact counts and notices, or the error (the page then uses the preset)."""
    if hub.resolved is None:
        fallback = values["model"]
        st.error(f"**The Hugging Face model {md(hub.model_id)} could not be used.** {md_message(_in_page(hub.error))}"
                 f"\n\nThe numbers below are for the Model selector's choice, {md(fallback)}.",
                 icon=":material/cloud_off:")
        st.button("Retry", key="_hub_retry", on_click=forget_failures, icon=":material/refresh:",
                  type="tertiary")
        return
    from calculator.model.parameters import count_parameters
    r, f = hub.resolved, hub.fetched
    ours = count_parameters(r.spec).total
    lines = [f"**Hugging Face model {md_link(hub.model_id, f'{hub.endpoint}/{hub.model_id}')}** "
             f"(model\\_type {md(f.config.get('model_type'))}, revision {md(f.revision)})"]
    if r.checkpoint_parameters is not None:
        how = {"api": "the Hub's API", "safetensors-headers": "the safetensors headers"}.get(
            f.checkpoint.source, f.checkpoint.source)
        lines.append(f"Parameters: **{r.checkpoint_parameters:,}** in the checkpoint (from {how}) · "
                     f"**{ours:,}** from the architecture")
        total = r.checkpoint_parameters or 1
        lines.append("Checkpoint dtypes: " + " · ".join(
            f"{md(dt, 20)} {n:,} ({n / total:.1%})" for dt, n in f.checkpoint.parameters_by_dtype.items()))
    else:
        lines.append(f"Parameters: **{ours:,}** from the architecture (the checkpoint could not be counted)")
    with st.container(border=True, key="hub_model"):
        st.markdown("  \n".join(lines))
        mismatch = r.parameter_mismatch
        if mismatch:
            st.warning(md_message(mismatch[0].upper() + mismatch[1:]), icon=":material/difference:")
        for w in f.warnings:
            if w.startswith("offline:"):
                st.info("The Hub could not be reached: this is the copy cached on this server. " + md_message(w),
                        icon=":material/cloud_off:")
            else:
                st.caption(f":material/info: {md_message(w)}")


def export_source(hub: HubView | None) -> dict | None:
    """Where the model came from, for the JSON export (never the token)."""
    if hub is None or hub.resolved is None:
        return None
    r, f = hub.resolved, hub.fetched
    return {"origin": "hub", "model_id": hub.model_id, "endpoint": hub.endpoint, "revision": f.revision,
            "checkpoint_parameters": r.checkpoint_parameters,
            "checkpoint_parameters_by_dtype": dict(r.checkpoint_dtypes), "from_cache": f.from_cache,
            "warnings": list(f.warnings) + ([r.parameter_mismatch] if r.parameter_mismatch else [])}
