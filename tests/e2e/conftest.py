"""Browser tests: a real `streamlit run app.py` server and Debian's Chromium driven by Playwright (sync API).

`playwright install` cannot download browsers here, so Chromium is launched from /usr/bin/chromium
(override with CHROMIUM_PATH). Tests are skipped when it is missing. Waits use Streamlit's own signals
(script state `notRunning`, no skeletons), never sleeps. Screenshots go to test-artifacts/ (gitignored).
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)


from playwright.sync_api import expect  # noqa: E402  (after the skip: playwright is optional)

# The first script run of a fresh server imports the engine and plotly: allow for it in every expect(). 20 s was
# not enough on a 2-core machine shared with other test runs (a first page load took 25-40 s there); a wait is not
# an assertion about speed — benchmarks/bench_paint.py measures that.
expect.set_options(timeout=60_000)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def app_url():
    with streamlit_server() as url:
        yield url


@contextlib.contextmanager
def streamlit_server(env: dict[str, str | None] | None = None, log_name: str = "streamlit-server.log"):
    """`streamlit run app.py` on a free port (env: variables to set, or to remove when None); yields its URL."""
    port = _free_port()
    log = (ARTIFACTS / log_name)
    ARTIFACTS.mkdir(exist_ok=True)
    full_env = dict(os.environ)
    for k, v in (env or {}).items():
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = v
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none", "--client.toolbarMode", "viewer"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=full_env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.read() == b"ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with {proc.returncode}; see {log}")
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit did not report healthy within 60 s; see {log}")
            time.sleep(0.2)  # polling interval of the health check, not a wait on the page
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1,
                                  accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    yield pg
    context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def wait():
    """wait(page): block until the app has finished its run (see wait_for_app)."""
    return wait_for_app


def wait_for_app(page) -> None:
    """Wait until Streamlit is connected, the script has finished and nothing is still a skeleton."""
    page.locator("[data-testid='stApp'][data-test-connection-state='CONNECTED']").wait_for(state="attached")
    page.locator("[data-testid='stApp'][data-test-script-state='notRunning']").wait_for(state="attached")
    expect(page.get_by_test_id("stSkeleton")).to_have_count(0)


@pytest.fixture(scope="session")
def start_server():
    """start_server(env) -> a context manager running another `streamlit run app.py` (see streamlit_server)."""
    return streamlit_server
