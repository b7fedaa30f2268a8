"""dashboard.inputs.widgets: an input holding an invalid value says so once, by name, and shows the value the numbers use.

Number inputs have no min / max of their own (Streamlit's would keep showing a typed number out of range while
the page computed with the previous one): the value reaches the page, which puts it back in range before the
script runs and says so under the field."""
from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from calculator import estimate
from calculator.model.presets import load_model
from calculator.core.units import format_bytes
from calculator.core.workload import Parallelism, Workload
from dashboard.inputs import state
from dashboard.safe_text import plain
from dashboard.inputs.widgets import out_of_range_note

APP = Path(__file__).resolve().parents[2] / "app.py"
LLAMA = load_model("llama-3.1-8b").spec


def run(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    return at.run()


def total(at: AppTest) -> str:
    return next(m.value for m in at.metric if m.label == "Total per GPU")


def warnings(at: AppTest) -> list[str]:
    return [plain(w.value) for w in at.warning]


def test_out_of_range_note_names_the_field_the_value_used_and_the_range():
    p = state.BY_KEY["tp"]
    assert out_of_range_note(p, 4) is None and out_of_range_note(p, None) is None
    used, note = out_of_range_note(p, 5000)
    assert used == 4096 and note == ("Tensor parallel (TP): 5,000 is above the largest value allowed; 4,096 is used "
                                     "(the field shows it) — enter a whole number from 1 to 4,096")
    assert out_of_range_note(state.BY_KEY["seq"], 0)[0] == 1


def test_a_typed_value_out_of_range_is_put_back_in_range_shown_and_used():
    at = run({"tp": "2"})
    at.number_input(key="dp").set_value(0).run()  # below the smallest DP
    assert not at.exception
    assert at.number_input(key="dp").value == 1  # the field shows what the numbers use
    notes = [w for w in warnings(at) if "Data parallel (DP)" in w]
    assert notes == ["Data parallel (DP): 0 is below the smallest value allowed; 1 is used (the field shows it) — "
                     "enter a whole number from 1 to 1,000,000"]
    expected = estimate(LLAMA, Workload(parallel=Parallelism(tp=2), gpu="h100-sxm"))
    assert total(at) == format_bytes(expected.total_bytes)
    at.number_input(key="seq").set_value(8192).run()  # said once: the next change clears it
    assert not [w for w in warnings(at) if "Data parallel (DP)" in w] and at.number_input(key="dp").value == 1
    expected = estimate(LLAMA, Workload(seq_len=8192, parallel=Parallelism(tp=2), gpu="h100-sxm"))
    assert total(at) == format_bytes(expected.total_bytes)


def test_a_typed_value_above_the_range_uses_the_largest():
    at = run({"mode": "infer"})
    at.number_input(key="gen").set_value(10**12).run()
    hi = int(state.BY_KEY["gen"].hi)
    assert at.number_input(key="gen").value == hi
    assert any(w.startswith(f"{state.BY_KEY['gen'].label}: 1,000,000,000,000 is above the largest value allowed; "
                            f"{hi:,} is used") for w in warnings(at))


def test_an_invalid_link_value_is_named_and_the_field_shows_the_default_used():
    at = run({"pp": "0", "seq": "8192"})
    assert at.number_input(key="pp").value == 1 and "pp" not in at.query_params
    link = [w for w in warnings(at) if "ignored or adjusted" in w]
    assert len(link) == 1 and "Pipeline parallel (PP) (pp=0): outside 1–" in link[0]
    assert "the default (1) is used and shown — enter a whole number from 1 to" in link[0]
    assert total(at) == format_bytes(estimate(LLAMA, Workload(seq_len=8192, gpu="h100-sxm")).total_bytes)


def test_a_sequence_beyond_the_model_context_is_warned_once_under_its_field():
    limit = LLAMA.max_position_embeddings
    at = run({"seq": str(limit + 1)})
    beyond = [w for w in warnings(at) if "beyond this model's context" in w]
    assert len(beyond) == 1 and f"{limit:,}" in beyond[0]
    assert any("beyond this model's context" in w.value for w in at.sidebar.warning)
