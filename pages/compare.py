"""Compare: 2–4 calculator views side by side. Each is a calculator link, kept in this page's URL as a repeated
`cmp` parameter (the view's query string, URL-encoded): paste a link, or add the view the calculator page held
when you switched here. One stacked bar per view and a table of components with deltas against the first.
Every number comes from the engine, exactly as the calculator computes it (dashboard.compare)."""
from __future__ import annotations

import streamlit as st

from dashboard import compare, planner
from dashboard.inputs import state
from dashboard.safe_text import md, md_link, md_message
from dashboard.views import entry

entry.through_app()  # a first visit straight to this page still runs inside app.py's navigation


PAGE_PATH = "compare"
PASTE = "_cmp_paste"  # the paste field (not bound: the links themselves are the page's URL)


def _links() -> list[str]:
    return st.query_params.get_all(compare.CMP_KEY)


def _set_links(links: list[str]) -> None:
    st.query_params[compare.CMP_KEY] = links[:compare.MAX_SCENARIOS]


def add_pasted() -> None:
    text = compare.to_cmp(st.session_state.get(PASTE, ""))
    if text:
        _set_links(_links() + [text])
    st.session_state[PASTE] = ""


def add_view(values: dict) -> None:
    _set_links(_links() + [compare.cmp_of(values)])


def remove(i: int) -> None:
    links = _links()
    _set_links(links[:i] + links[i + 1:])


st.title("Compare scenarios")
st.caption(f"Up to {compare.MAX_SCENARIOS} calculator views side by side: the most loaded GPU of each, component by "
           "component, with the difference from the first. Each view is a calculator link, and all of them are "
           "in this page's link.")

view = planner.view_from({}, st.session_state.to_dict())  # the calculator's current inputs
if view.source == "calculator":
    st.session_state[planner.CALC_VIEW] = {k: v for k, v in view.values.items() if v != state.DEFAULTS[k]}

raws = _links()
full = len(raws) >= compare.MAX_SCENARIOS
if len(raws) > compare.MAX_SCENARIOS:
    st.warning(f"This link has {len(raws)} scenarios: only the first {compare.MAX_SCENARIOS} are compared.",
               icon=":material/warning:")

with st.container(border=True):
    st.text_input("Calculator link", key=PASTE, placeholder="http://…/?model=qwen2.5-7b&tp=2&v=1",
                  help="Paste a link copied from the calculator page (or just its part after '?')",
                  disabled=full)
    row = st.container(horizontal=True, gap="small")
    row.button("Add link", on_click=add_pasted, icon=":material/add_link:", disabled=full)
    row.button("Add current view", on_click=add_view, args=(view.values,), icon=":material/add:", disabled=full,
               help="The calculator page's current inputs: " + planner.describe(view.values).replace("**", ""))

root = planner.app_root(st.context.url, PAGE_PATH)
scs = compare.scenarios(raws)
for i, sc in enumerate(scs):
    line = st.container(horizontal=True, gap="small", vertical_alignment="center")
    line.markdown(f"**{md(sc.name)}** · " + md_link("open in calculator", f"{root}?{compare.cmp_of(sc.values)}")
                  if sc.ok else f"**Scenario {sc.index}** · {md(sc.raw or '(empty)')}")
    line.button("Remove", key=f"_cmp_remove_{i}", on_click=remove, args=(i,), icon=":material/close:",
                type="tertiary")
for sc in scs:
    if not sc.ok:
        st.warning(f"Scenario {sc.index} ({md(sc.raw or '(empty)')}) is left out: {md_message(sc.problem)}",
                   icon=":material/link_off:")

good = [s for s in scs if s.ok]
if len(good) < compare.MIN_SCENARIOS:
    st.info(f"Add at least {compare.MIN_SCENARIOS} valid calculator links to compare them "
            f"({len(good)} so far).", icon=":material/info:")
    st.stop()

unit = good[0].values["unit"]
st.plotly_chart(compare.figure(good, unit), key="compare_chart", theme=None,
                config={"displaylogo": False,
                        "toImageButtonOptions": {"format": "png", "filename": "gpu-memory-compare", "scale": 2}})
st.dataframe(compare.table(good, unit), hide_index=True, width="stretch", height="content",
             key="compare_table")  # every row shown, no scroll box
st.dataframe(compare.time_table(good), hide_index=True, width="stretch", height="content",
             key="compare_time_table")
note = compare.offload_note(good)
if note:
    st.info(note, icon=":material/schedule:")
if good[0].index != 1:
    st.caption(f"Deltas are against scenario {good[0].index}, the first usable one.")
