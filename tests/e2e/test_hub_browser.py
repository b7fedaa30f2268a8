"""A gated Hugging Face model in a real browser, against the local fake Hub (tests/hub_server.py): the token typed
into the page loads the model, and the URL the browser shows never carries it (AppTest cannot see URL writes)."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hub_repos import GATED_REPO, GATED_TOKEN  # noqa: E402
from hub_server import hub_root, hub_server  # noqa: E402,F401  (fixtures by name)


@pytest.fixture(scope="module")
def hub_app_url(hub_server, start_server, tmp_path_factory):
    env = {"HF_ENDPOINT": hub_server.url, "LLM_MEM_CACHE_DIR": str(tmp_path_factory.mktemp("hub-cache")),
           "HF_TOKEN": None}
    with start_server(env, log_name="streamlit-server-hub.log") as url:
        yield url


def test_gated_model_with_a_token_that_never_reaches_the_url(page, hub_app_url, artifacts, wait):
    page.goto(f"{hub_app_url}/?hf={GATED_REPO}&mode=infer&v=1")
    wait(page)
    main = page.get_by_test_id("stMain")
    expect(main.get_by_test_id("stAlertContentError")).to_contain_text("could not be used")

    field = page.get_by_test_id("stSidebar").get_by_role("textbox", name="Hugging Face token")
    field.fill(GATED_TOKEN)
    field.press("Enter")
    expect(main.get_by_test_id("stAlertContentError")).to_have_count(0)
    wait(page)
    expect(main).to_contain_text("in the checkpoint")
    assert GATED_TOKEN not in page.url and re.search(r"[?&]hf=acme(%2F|/)gated-model(&|$)", page.url)
    page.get_by_test_id("stSidebar").screenshot(path=artifacts / "sidebar-hub-model.png")

    with page.expect_download() as dl:
        page.get_by_test_id("stDownloadButton").filter(has_text="Breakdown JSON").get_by_role("button").click()
    path = artifacts / dl.value.suggested_filename
    dl.value.save_as(path)
    text = path.read_text()
    assert GATED_TOKEN not in text
    assert json.loads(text)["model_source"]["model_id"] == GATED_REPO

    page.reload()  # the token was in no link: a reload asks the Hub without it again
    wait(page)
    expect(page.get_by_test_id("stSidebar").get_by_role("textbox", name="Hugging Face token")).to_have_value("")
    expect(main.get_by_test_id("stAlertContentError")).to_contain_text("could not be used")
    assert GATED_TOKEN not in page.url
