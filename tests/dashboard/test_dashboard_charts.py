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
def test_bars_are_the_terms_live_at_each_moment(unit, scale):
    """One bar per moment of the step (forward end, backward peak, optimizer step): each the terms live then, the
    peak's bar stacked to the estimate's total, with no term of another moment in it."""
    from calculator.planning.timeline import live_sets
    from dashboard.charts import breakdown_data
    est = estimate(SPEC, Workload(gpu="h100-sxm"))
    fig = breakdown_figure(est, unit, H100)
    bars = _bars(fig)
    data = breakdown_data(est, H100)
    sets = live_sets(est.peak)
    assert list(bars[0].x) == ["forward end", "backward pass", "optimizer step<br>peak"]
    assert data.moments == ("forward end", "backward pass", "optimizer step") and data.peak_bar == 2
    for i, live in enumerate(sets):
        comps = {}
        for t in live.terms:
            comps[t.component] = comps.get(t.component, 0) + t.bytes
        shown = {b.name: b.y[i] for b in bars if b.y[i]}
        assert shown == pytest.approx({COMPONENT_LABELS[k]: v / scale for k, v in comps.items() if v})
    # the stacked total of the peak's bar is the page's total; at the optimizer step no activations are live
    assert sum(b.y[2] for b in bars) == pytest.approx(est.total_bytes / scale)
    assert data.totals[2] == est.total_bytes
    act = next(b for b in bars if b.name == COMPONENT_LABELS["activations"])
    assert act.y[2] == 0 and act.y[1] > 0
    grads = next(b for b in bars if b.name == COMPONENT_LABELS["gradients"])
    assert grads.y[2] > 0  # every gradient is live at the step
    assert fig.layout.barmode == "stack"
    axis = fig.layout.yaxis.title.text
    assert unit in axis and ("10⁹" if unit == "GB" else "2³⁰") in axis


def test_full_recompute_changes_the_backward_bar_and_the_chart_says_why_not_the_peak():
    """Default view: the peak is at the optimizer step, after the activations are freed. Full recompute lowers the
    forward and backward bars; the peak's bar is unchanged and the chart's title says why."""
    from dashboard.charts import breakdown_data
    none = breakdown_data(estimate(SPEC, Workload(gpu="h100-sxm")), H100)
    full = breakdown_data(estimate(SPEC, Workload(gpu="h100-sxm", recompute="full")), H100)
    assert full.totals[1] < none.totals[1] - 10 * 10**9 and full.totals[0] < none.totals[0]
    assert full.totals[2] == none.totals[2]
    fig = breakdown_figure(estimate(SPEC, Workload(gpu="h100-sxm", recompute="full")), "GB", H100)
    title = fig.layout.title.text.replace("<br>", " ")
    assert "optimizer step" in title and "recompute" in title and "not the peak" in title
    # where the backward is the peak, recompute lowers the peak bar itself
    small = breakdown_data(estimate(SPEC, Workload(gpu="h100-sxm", finetune="lora", seq_len=8192)), H100)
    small_full = breakdown_data(estimate(SPEC, Workload(gpu="h100-sxm", finetune="lora", seq_len=8192,
                                                        recompute="full")), H100)
    assert small.moments[small.peak_bar] == "backward pass" and "lower it" in small.note
    assert small_full.totals[small_full.peak_bar] < small.totals[small.peak_bar]


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
    # one capacity per GPU: what PyTorch can allocate (the fit cards' and the verdict's), not the device total
    assert H100.usable_bytes < H100.memory_bytes
    assert lines == pytest.approx([SAFE_FRACTION * H100.usable_bytes / 1e9, H100.usable_bytes / 1e9])
    band = next(s for s in fig.layout.shapes if s.type == "rect")
    assert (band.y0, band.y1) == pytest.approx((0, SAFE_FRACTION * H100.usable_bytes / 1e9))
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert H100.name in texts and "Fujii" in texts
    assert not breakdown_figure(est, "GB", None).layout.shapes


def test_one_bar_per_pipeline_stage_at_its_peak():
    from dashboard.charts import breakdown_data
    est = estimate(SPEC, Workload(parallel=Parallelism(pp=4, num_microbatches=8), gpu="h100-sxm"))
    fig = breakdown_figure(est, "GB", H100)
    assert len(est.stages) == 4
    xs = list(_bars(fig)[0].x)
    assert [x.split("<br>")[0] for x in xs] == [f"stage {s.stage}" for s in est.stages]
    data = breakdown_data(est, H100)
    assert all(m in ("forward end", "backward pass", "optimizer step") for m in data.moments)
    assert xs[est.worst_stage].endswith("<br>peak") and data.peak_bar == est.worst_stage
    totals = list(next(t for t in fig.data if t.type == "scatter").y)
    assert totals == pytest.approx([s.total_bytes / 1e9 for s in est.stages])


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
    assert list(table_rows(breakdown_html(a, "GiB"))[0])[3] == "Memory (GiB)"
    text = formula_markdown(a, "GB")
    assert all(f"`{t.formula}`" in text and f"`= {t.substituted}`" in text for t in a.terms)
    assert formula_markdown(b, "GB") != text
