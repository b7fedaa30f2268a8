""".streamlit/config.toml as Streamlit 1.67 reads it: users never see a stack trace, an exception's message or
its type (a crash shows Streamlit's generic message; the details go to the server log)."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from streamlit import config

ROOT = Path(__file__).resolve().parents[2]


def test_error_details_are_off_for_users():
    settings = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    value = settings["client"]["showErrorDetails"]
    assert value == config.ShowErrorDetailsConfigOptions.NONE == "none"


def test_streamlit_itself_reads_it_so():
    out = subprocess.run([sys.executable, "-m", "streamlit", "config", "show"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60).stdout
    block = out[out.index("# Controls whether uncaught app exceptions"):]
    assert next(ln for ln in block.splitlines() if ln.startswith("showErrorDetails")) == 'showErrorDetails = "none"'
