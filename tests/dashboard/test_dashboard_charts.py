"""dashboard.charts: the stacked bar shows exactly the engine's components, per stage, with the GPU lines."""
from __future__ import annotations

import pytest

from calculator import estimate
from calculator.model.presets import get_gpu, load_model
from calculator.core.result import COMPONENT_LABELS
from calculator.core.workload import Parallelism, Workload
from dashboard.charts import SAFE_FRACTION, breakdown_figure, plotly_config, png_filename

SPEC = load_model("llama-3.1-8b").spec
H100 = get_gpu("h100-sxm")


def _bars(fig):
    return [t for t in fig.data if t.type == "bar"]


@pytest.mark.parametrize("unit, scale", [("GB", 10**9), ("GiB", 2**30)])
def test_bars_are_the_engine_components(unit, scale):
    est = estimate(SPEC, Workload(gpu="h100-sxm"))
    fig = breakdown_figure(est, unit, H100)
    bars = _bars(fig)
    nonzero = {k: v for k, v in est.components.items() if v}
    assert [b.name for b in bars] == [COMPONENT_LABELS[k] for k in nonzero]
    for b, (k, v) in zip(bars, nonzero.items()):
        assert list(b.y) == pytest.approx([v / scale])
    assert sum(b.y[0] for b in bars) == pytest.approx(est.total_bytes / scale)
    assert fig.layout.barmode == "stack"
    axis = fig.layout.yaxis.title.text
    assert unit in axis and ("10⁹" if unit == "GB" else "2³⁰") in axis


def test_figure_is_valid_plotly():
    # breakdown_figure skips plotly's validation for speed; validating the same dict here catches typos.
    import plotly.graph_objects as go
    est = estimate(SPEC, Workload(parallel=Parallelism(pp=2), gpu="h100-sxm"))
    fig = breakdown_figure(est, "GiB", H100, title="x")
    import json
    as_json = json.loads(fig.to_json())
    validated = json.loads(go.Figure(as_json).to_json())
    validated["layout"].pop("template")  # plotly fills an empty template with its default one; the rest is ours
    as_json["layout"].pop("template")
    assert validated == as_json


def test_capacity_line_and_safe_band():
    est = estimate(SPEC, Workload(gpu="h100-sxm"))
    fig = breakdown_figure(est, "GB", H100)
    lines = sorted(s.y0 for s in fig.layout.shapes if s.type == "line")
    assert lines == pytest.approx([SAFE_FRACTION * H100.memory_bytes / 1e9, H100.memory_bytes / 1e9])
    band = next(s for s in fig.layout.shapes if s.type == "rect")
    assert (band.y0, band.y1) == pytest.approx((0, SAFE_FRACTION * H100.memory_bytes / 1e9))
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert H100.name in texts and "Fujii" in texts
    assert not breakdown_figure(est, "GB", None).layout.shapes


def test_one_bar_per_pipeline_stage():
    est = estimate(SPEC, Workload(parallel=Parallelism(pp=4, num_microbatches=8), gpu="h100-sxm"))
    fig = breakdown_figure(est, "GB", H100)
    assert len(est.stages) == 4
    for b in _bars(fig):
        assert len(b.x) == 4
    first, last = est.stages[0].layers
    assert _bars(fig)[0].x[0] == f"stage 0 (layers {first}–{last - 1})"
    totals = next(t for t in fig.data if t.type == "scatter")
    assert list(totals.y) == pytest.approx([s.total_bytes / 1e9 for s in est.stages])


def test_png_export_config():
    values = {"model": "llama-3.1-8b", "mode": "train", "gpu": "h100-sxm", "tp": 2, "pp": 1, "dp": 4,
              "zero": "1", "mbs": 2, "seq": 8192}
    name = png_filename(values)
    assert name == "gpu-memory_llama-3.1-8b_train_h100-sxm_tp2-pp1-dp4_z1_b2-s8192"
    cfg = plotly_config(values)
    assert cfg["toImageButtonOptions"] == {"format": "png", "filename": name, "scale": 2}
    assert png_filename({**values, "model": "a/b c"}).startswith("gpu-memory_a-b-c_")


def test_cached_figure_is_the_figure_of_that_estimate():
    """The page's figure cache (bench_rerun): one figure per distinct estimate/unit/GPU, equal to a fresh one."""
    import plotly.io

    from dashboard.charts import breakdown_figure_cached
    a = estimate(SPEC, Workload(gpu="h100-sxm"))
    b = estimate(SPEC, Workload(gpu="h100-sxm", micro_batch=2))
    fa = breakdown_figure_cached(a, "GB", H100)
    assert breakdown_figure_cached(estimate(SPEC, Workload(gpu="h100-sxm")), "GB", H100) is fa
    assert fa.to_dict() == breakdown_figure(a, "GB", H100).to_dict()
    assert breakdown_figure_cached(b, "GB", H100).to_dict() == breakdown_figure(b, "GB", H100).to_dict()
    assert breakdown_figure_cached(a, "GiB", H100) is not fa
    assert breakdown_figure_cached(a, "GB", get_gpu("a100-40gb")) is not fa
    before = plotly.io.to_json(fa.to_dict(), validate=False)
    plotly.io.to_json(fa, validate=False)  # what st.plotly_chart does with it must not change it
    assert plotly.io.to_json(fa.to_dict(), validate=False) == before


def test_cached_breakdown_table_and_formulas_follow_the_estimate():
    from dashboard.views.tables import breakdown_html, breakdown_rows, formula_markdown
    from tests.html_read import table_rows
    a = estimate(SPEC, Workload(gpu="h100-sxm"))
    b = estimate(SPEC, Workload(gpu="h100-sxm", seq_len=8192))

    def shown(rows):  # what the HTML table shows for breakdown_rows: every cell as text, bytes with separators
        return [{k: f"{v:,}" if isinstance(v, int) else str(v) for k, v in r.items()} for r in rows]
    ta = breakdown_html(a, "GB")
    assert breakdown_html(a, "GB") is ta  # cached
    assert table_rows(ta) == shown(breakdown_rows(a, "GB"))
    assert table_rows(breakdown_html(b, "GB")) == shown(breakdown_rows(b, "GB")) != table_rows(ta)
    assert list(table_rows(breakdown_html(a, "GiB"))[0])[2] == "Memory (GiB)"
    text = formula_markdown(a, "GB")
    assert all(f"`{t.formula}`" in text and f"`= {t.substituted}`" in text for t in a.terms)
    assert formula_markdown(b, "GB") != text
