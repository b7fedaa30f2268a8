"""The committed Streamlit settings (.streamlit/config.toml): the file watcher leaves the virtual environment and the
test outputs alone (issue 24: watching .venv wrote a 42 MB log while tests ran)."""
from __future__ import annotations

import tomllib
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[2] / ".streamlit" / "config.toml"


def test_the_file_watcher_does_not_watch_the_venv():
    server = tomllib.loads(CONFIG.read_text())["server"]
    assert {".venv", "test-artifacts"} <= set(server["folderWatchBlacklist"])
    import streamlit.config as config
    config.get_config_options(force_reparse=True)
    assert ".venv" in config.get_option("server.folderWatchBlacklist")
