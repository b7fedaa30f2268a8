"""Every page runs inside app.py's navigation, even the first one a fresh server is asked for.

Streamlit decides per server process whether the app is a pages-directory app (MPA v1: a file per page under
pages/, run on its own) or declares its pages with st.navigation (v2): until a script has called st.navigation,
streamlit/runtime/pages_manager.py PagesManager.uses_pages_directory stays True because pages/ exists, and
script_runner.py runs the v1 router, which runs pages/planner.py alone for a /planner link — no top navigation, a
sidebar listing the files, none of app.py's set-up. Only the first visitor after a start sees it (app.py's
st.navigation sets the flag False for the process, streamlit/commands/navigation.py), and it is the visitor who
opened a shared planner or compare link. through_app() is the first call of each page script: in that case it sets
what st.navigation would have set and reruns, so app.py runs with the same URL and opens the same page.
"""
from __future__ import annotations

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager


def through_app() -> None:
    """Rerun through app.py when Streamlit's pages-directory router started this page script by itself."""
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()
