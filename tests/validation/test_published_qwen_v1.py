"""Remote-code Qwen (v1) published memory (validation/published/qwen_v1): the README's generate() rows within their
bound from the model's own config.json, the fine-tuning rows kept with why they are not compared."""
from __future__ import annotations

import statistics

import pytest

from validation.published.qwen_v1 import ERROR_BOUNDS_PCT, comparisons, qwen_v1_spec, read_rows


@pytest.fixture(scope="module")
def rows():
    return comparisons()


def test_every_row_is_mapped(rows):
    assert [c.id for c in rows] == [r["id"] for r in read_rows()]


def test_generate_rows_are_within_their_bound(rows):
    comparable = [c for c in rows if c.comparable]
    assert len(comparable) == 6
    for c in comparable:
        assert abs(c.error_pct) <= ERROR_BOUNDS_PCT[c.group], (c.id, c.error_pct)
    assert statistics.median(abs(c.error_pct) for c in comparable) <= 2.0


def test_the_legacy_cache_is_what_closes_the_72b_rows():
    """Qwen v1's tuple cache keeps the previous step's cache beside the new one: without it the 72B Int4 row is a
    whole KV cache (5 GiB) under the published 48.86 GiB."""
    from calculator import estimate
    from calculator.core.workload import Workload
    spec = qwen_v1_spec("72b")
    plain = spec.model_copy(update={"variant": spec.variant.model_copy(update={"legacy_kv_cache": False})})
    w = Workload(mode="infer", micro_batch=1, seq_len=1, gen_tokens=2048, attention="flash", weight_dtype="int4",
                 quant_method="gptq", gpu="a100-80gb")
    with_prev, without = (estimate(m, w, with_fits=False).peak_allocated_bytes for m in (spec, plain))
    kv = 2 * 80 * 2049 * 8192 * 2
    assert with_prev - without == kv - 2 * 80 * 8192 * 2  # the previous step's cache: one token fewer


def test_finetune_rows_say_why_they_are_not_compared(rows):
    tuned = [c for c in rows if not c.comparable]
    assert len(tuned) == 12
    assert all("does not say how it measured" in c.why_not for c in tuned)
    assert all("GPTQ" in c.why_not for c in tuned if "qlora" in c.id)
