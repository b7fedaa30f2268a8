"""What a hosted server refuses to keep for its visitors (docs/hosting.md).

Uploads: the pages have no file uploader, yet Streamlit's upload endpoint (/_stcore/upload_file/<session>/<file>)
accepts a file for any live session and keeps it in memory until that session ends: eight 100 MB uploads once
took the server from 176 to 980 MB. `.streamlit/config.toml` sets server.maxUploadSize = 0 (every non-empty file
is refused with 413 before its body is read, and a body without a length is cut after 1 MB), and harden() makes
the server's uploaded-file manager keep nothing at all: the empty files the limit still lets through (each with
a name of up to ~4 kB, for as long as the session lives) are dropped. A page that adds an uploader must bound it
(≤ 1 MB, dropped once read) and undo this.

Clear cache: Streamlit answers a client's clear-cache message by clearing st.cache_data and st.cache_resource for
every session; the app keeps its shared caches in dashboard.memo instead, which that message cannot reach.
"""
from __future__ import annotations

import logging
import os
import sys

_LOG = logging.getLogger(__name__)
_MARK = "_llm_mem_no_uploads"
# Seconds a thread may hold Python's GIL while others wait (Python's default: 0.005). Every element a script run
# draws is handed to the server's event loop through a pipe write, which releases the GIL; under concurrent
# sessions, taking it back waits for another session's thread to yield it, ~150 times a rerun (py-spy, 6 sessions
# rerunning flat out: ~20% of the server's samples in that write). At 1 ms, 12 sessions' rerun median went from
# 680-1,209 to 451-549 ms (docs/hosting.md). LLM_MEM_SWITCH_INTERVAL overrides it; 0 leaves Python's default.
SWITCH_INTERVAL_S = 0.001


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def harden() -> bool:
    """In a running server (not in bare mode: AppTest, a plain import): the uploaded-file manager keeps nothing and
    the GIL's switch interval is SWITCH_INTERVAL_S. Idempotent, cheap on every rerun; True when done."""
    try:
        from streamlit import runtime
        if not runtime.exists():
            return False  # no server, no upload endpoint, no visitors
        manager = runtime.get_instance().uploaded_file_mgr
    except Exception:  # a Streamlit without this API: the config's maxUploadSize still holds
        return False
    if getattr(manager, _MARK, False):
        return True
    # pandas whole, before any page imports it lazily: two sessions' first runs importing it at once (one
    # directly, one through plotly's validators) once gave one of them a partially initialised module
    import pandas  # noqa: F401
    interval = _env_float("LLM_MEM_SWITCH_INTERVAL", SWITCH_INTERVAL_S)
    if interval > 0:
        sys.setswitchinterval(interval)

    def drop(session_id: str, file) -> None:
        _LOG.info("dropped an upload (%d bytes) for session %s: the app has no file uploader",
                  len(getattr(file, "data", b"") or b""), str(session_id)[:8])
    manager.add_file = drop
    setattr(manager, _MARK, True)
    return True
