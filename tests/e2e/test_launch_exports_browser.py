"""The launch-config expander in a real browser: closed it has no buttons; opened, its DeepSpeed file downloads and
DeepSpeed itself parses it at the view's data-parallel size."""
from __future__ import annotations

import json

from deepspeed.runtime import config as ds_config
from playwright.sync_api import expect

from dashboard.views.launch_exports import TITLE


def test_deepspeed_config_downloads_and_parses(page, app_url, artifacts, wait, monkeypatch):
    page.goto(f"{app_url}/?model=llama-3.1-8b&dp=8&zero=3&mbs=2&rc=full&v=1")
    wait(page)
    box = page.get_by_test_id("stExpander").filter(has_text=TITLE)
    expect(box.get_by_test_id("stDownloadButton")).to_have_count(0)  # lazy: nothing built while closed
    box.get_by_text(TITLE).click()
    expect(box.get_by_test_id("stDownloadButton")).to_have_count(5)
    wait(page)
    box.screenshot(path=artifacts / "launch-configs.png")
    with page.expect_download() as dl:
        box.get_by_test_id("stDownloadButton").filter(has_text="DeepSpeed").get_by_role("button").click()
    download = dl.value
    assert download.suggested_filename == "ds_config.json"
    path = artifacts / download.suggested_filename
    download.save_as(path)
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: 8)
    cfg = ds_config.DeepSpeedConfig(json.loads(path.read_text()))
    assert cfg.zero_optimization_stage == 3 and cfg.train_micro_batch_size_per_gpu == 2
    assert cfg.train_batch_size == 16
