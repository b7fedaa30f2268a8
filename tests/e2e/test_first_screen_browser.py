"""The first screen answers the question asked (issue 24): at 1440×900, for each mode, the answer box (the key
"answer": dashboard/views/answer.py) lies within the first 900 px, with the figures that answer the mode's question.
Screenshots: test-artifacts/first-screen-<mode>.png."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

FOLD = 900
MODES = {
    "train": ("", ["Does not fit on H100 80GB SXM", "optimizer step", "PyTorch can allocate", "Top remedies"]),
    "train-lora": ("ft=lora&rc=full", ["Fits on H100 80GB SXM", "Largest that fits", "micro-batch", "sequence"]),
    "infer-vllm": ("model=qwen3-32b&mode=infer&eng=vllm&gpu=h200&seq=32768",
                   ["vLLM starts", "concurrent sequences", "KV pool", "max_model_len"]),
    "rl": ("mode=rl&dp=8&zero=3", ["Peak phase: training", "Phases: rollout"]),
}


@pytest.fixture
def screen(browser):
    context = browser.new_context(viewport={"width": 1440, "height": FOLD}, device_scale_factor=1)
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    yield pg
    context.close()


@pytest.mark.parametrize("mode", list(MODES))
def test_the_answer_is_in_the_first_screen(screen, app_url, artifacts, wait, mode):
    query, words = MODES[mode]
    screen.goto(f"{app_url}/?{query}")
    wait(screen)
    answer = screen.locator(".st-key-answer")
    for w in words:
        expect(answer).to_contain_text(w)
    box = answer.bounding_box()
    assert box is not None and box["y"] + box["height"] < FOLD, f"the answer ends at {box} (fold {FOLD} px)"
    chart = screen.locator("[data-testid=stPlotlyChart]").first.bounding_box()
    assert chart["y"] + chart["height"] <= FOLD, "the chart ends below the first screen"
    screen.screenshot(path=artifacts / f"first-screen-{mode}.png")
    print(f"{mode}: answer bottom {box['y'] + box['height']:.0f} px, chart bottom {chart['y'] + chart['height']:.0f}")
