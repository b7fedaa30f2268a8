"""The calculator page's model by Hugging Face Hub id: the `hf` field (URL-bound) and the token field (not bound,
no key), the cached fetch, and what the page shows about the fetched model or why it could not be used.

The token is never bound to the URL, never in st.session_state (its field has no key), never in a cache key
(the key holds a digest of it), and never in an export: it only reaches calculator.model.hub.client.fetch_model,
which sends it as an Authorization header.

Hosting: the server's own HF_TOKEN is not lent to visitors. A visitor who leaves the field empty fetches with no
token at all, unless the operator opts in with LLM_MEM_LEND_SERVER_TOKEN=1 (docs/hosting.md); the token is never
sent to the browser either way. The Hub's address (HF_ENDPOINT, perhaps an internal mirror) is never shown: every
message, warning, link and export names "the Hugging Face Hub" and huggingface.co (public_text).

A module, not part of app.py, so that its definitions are not re-executed on every rerun.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from typing import Any

import streamlit as st

from dashboard.inputs import state
from dashboard.memo import Shared
from dashboard.safe_text import md, md_link, md_message
from dashboard.inputs.widgets import field

HUB_TIMEOUT_S = 10.0
LEND_TOKEN_ENV = "LLM_MEM_LEND_SERVER_TOKEN"  # "1": a visitor with an empty token field uses the server's HF_TOKEN
PUBLIC_HUB = "https://huggingface.co"        # what visitors are shown, whatever HF_ENDPOINT says
# Fetched models, shared by every session for an hour (dashboard.memo: a visitor's clear-cache message cannot empty
# it), keyed by id, endpoint and the digest of the credential used; a few kB each.
FETCHED = Shared(64, max_bytes=16 * 2**20, ttl=3600)


# ---- callbacks -------------------------------------------------------------------------------------------------
def edit_hub_config(config: dict) -> None:
    """Copy the fetched config.json into the config field (Model = config) and clear the id."""
    st.session_state.update({"cfg": json.dumps(config, indent=1), "model": state.CONFIG, "hf": ""})


def forget_failures() -> None:
    """A new token, or Retry: ask the Hub again for ids that failed in this session."""
    st.session_state["_hub_failed"] = {}


# ---- fetch ----------------------------------------------------------------------------------------------------
def lends_server_token() -> bool:
    """True where the operator lets visitors who give no token use the server's HF_TOKEN."""
    return os.environ.get(LEND_TOKEN_ENV, "").strip().lower() in ("1", "true", "yes")


def visitor_token(typed: str) -> str | None:
    """What fetch_model gets as `token` for a visitor: what they typed; with the field empty, None (fetch_model then
    reads the server's HF_TOKEN) only where the operator lends it, else "" (no token at all)."""
    if typed:
        return typed
    return None if lends_server_token() else ""


# The client's advice to whoever runs it, as it applies to a visitor of the page (longest first).
_OPERATOR_ADVICE = (
    ("retry, raise the timeout, or set HF_ENDPOINT to a closer mirror", "retry in a moment"),
    ("check the network connection, or set HF_ENDPOINT to a reachable mirror",
     "retry later (this server cannot reach the Hub now)"),
    ("check HF_ENDPOINT and retry", "retry later"),
    ("check HF_ENDPOINT", "retry later"),
)


def public_text(text: str, endpoint: str) -> str:
    """A Hub message as a visitor may read it: the configured endpoint never shown ("the Hugging Face Hub at <it>"
    is "the Hugging Face Hub", a page under it is that page on huggingface.co), the operator's advice rephrased."""
    endpoint = endpoint.rstrip("/")
    if endpoint:
        text = text.replace(f"the Hugging Face Hub at {endpoint}", "the Hugging Face Hub")
        text = text.replace(f"{endpoint}/", f"{PUBLIC_HUB}/").replace(endpoint, "the Hugging Face Hub")
    for said, meant in _OPERATOR_ADVICE:
        text = text.replace(said, meant)
    return text.replace("HF_ENDPOINT", "the server's Hub address")


def _public_model(fetched, endpoint: str):
    """The fetched model with its warnings in public_text (they may quote the endpoint)."""
    return dataclasses.replace(fetched, warnings=tuple(public_text(w, endpoint) for w in fetched.warnings))


@dataclass(frozen=True)
class HubView:
    model_id: str
    endpoint: str         # the server's own (HF_ENDPOINT): for the cache keys only, never shown
    fetched: Any = None   # calculator.model.hub.client.HubModel
    resolved: Any = None  # calculator.model.resolve.ResolvedModel: the model, when it could be used
    error: str = ""       # why it could not (a HubError's one-line message, or the engine's complaint)
    problem: str = ""     # its first half, what went wrong (the sidebar's short form)


def _fetch_hub(model_id: str, endpoint: str, token: str | None):
    """calculator.model.hub.client.fetch_model, cached (for every session of this server) by id, endpoint and the
    digest of the credential the fetch uses (calculator.model.hub.client.credential; never the token itself). A
    private model fetched with one token is therefore never served to a session with another token or none; that
    session asks the Hub, which refuses it. Failures raise, so they are not cached."""
    from calculator.model.hub import client as hub
    return FETCHED.get(
        (model_id, endpoint, hub.credential(token)),
        lambda: hub.fetch_model(model_id, token=token, endpoint=endpoint, timeout=HUB_TIMEOUT_S),
        on_miss=lambda: st.spinner("Fetching config.json and counting the checkpoint's parameters on the Hugging "
                                   "Face Hub…"))


def inputs(box, model_id: str) -> tuple[str, Any]:
    """Draw the id field (URL-bound) and, once an id is given, the token field (not bound, no key) and a place for
    the id's notes: (token, notes container or None). Without an id no token is needed, so none is kept."""
    field("hf", {}, container=box)
    if not (model_id or "").strip():
        return "", None
    notes = box.container()
    server_token = bool(os.environ.get("HF_TOKEN")) and lends_server_token()
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
        fetched = _public_model(_fetch_hub(model_id, endpoint, visitor_token(token)), endpoint)
    except hub.HubError as exc:
        error, problem = public_text(str(exc), endpoint), public_text(exc.problem, endpoint)
        failed[(model_id, endpoint)] = (error, problem)
        return HubView(model_id, endpoint, error=error, problem=problem)
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
    lines = [f"**Hugging Face model {md_link(hub.model_id, f'{PUBLIC_HUB}/{hub.model_id}')}** "
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
    return {"origin": "hub", "model_id": hub.model_id, "endpoint": PUBLIC_HUB, "revision": f.revision,
            "checkpoint_parameters": r.checkpoint_parameters,
            "checkpoint_parameters_by_dtype": dict(r.checkpoint_dtypes), "from_cache": f.from_cache,
            "warnings": list(f.warnings) + ([r.parameter_mismatch] if r.parameter_mismatch else [])}
