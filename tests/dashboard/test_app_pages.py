"""The dashboard in Streamlit's AppTest (in-process, no browser): what the main page shows beside the numbers (fit
cards, the formula panel with its sources, the exports), and the other pages render.
"""
from __future__ import annotations

import pytest

from calculator.core.sources import SOURCES
from tests.app_page import BASE, run
from tests.html_read import fit_cards


def test_fit_cards_cover_the_headline_gpus():
    at = run()
    from calculator.core.fit import FIT_CARD_GPUS
    for gpu in ("a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "mi300x"):
        assert gpu in FIT_CARD_GPUS
        fit = next(f for f in BASE.fits if f.gpu == gpu)
        card = fit_cards(at)[gpu]["text"]
        assert card.startswith(fit.name) and fit.verdict in card and f"{fit.utilization:.0%} used" in card


def test_formula_panel_shows_every_term_with_its_source_link():
    at = run()
    from dashboard.views.result import FORMULAS_OPEN
    assert not any("`= " in m.value for m in at.markdown)  # built only while open
    at.session_state[FORMULAS_OPEN] = True  # opened
    at.run()
    texts = "\n".join(m.value for m in at.markdown)
    for t in BASE.terms:
        assert f"`{t.formula}`" in texts and f"`= {t.substituted}`" in texts
        assert f"({SOURCES[t.source].url})" in texts


def test_exports_are_offered():
    at = run()
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == ["Breakdown CSV", "Breakdown JSON", "One-page PDF report"]


@pytest.mark.parametrize("page", ["pages/formulas.py", "pages/about.py"])
def test_other_pages_render(page):
    at = run()
    at.switch_page(page).run()
    assert not at.exception
    text = "\n".join(m.value for m in at.markdown)
    if page.endswith("formulas.py"):
        for src in SOURCES.values():
            assert src.title in text
    else:
        assert "What is not modelled" in [h.value for h in at.subheader] or "not modelled" in text


@pytest.mark.parametrize("page, title", [("pages/planner.py", "Parallel layout planner"),
                                         ("pages/compare.py", "Compare scenarios")])
def test_planner_and_compare_pages_are_registered_and_render(page, title):
    at = run()
    at.switch_page(page).run()
    assert not at.exception
    assert [t.value for t in at.title] == [title]
