"""The page's launch-config expander: closed it builds nothing; the files it offers are calculator.exports' for the
view's mode, computed from the same inputs as the estimate on the page."""
import json

from streamlit.testing.v1 import AppTest

from dashboard.views import launch_exports
from dashboard.inputs import state
from tests.app_page import APP


def result_for(**overrides):
    return state.compute(state.reset_values(overrides))


def test_training_view_offers_the_training_formats():
    made = launch_exports.files(result_for())
    assert [fmt for fmt, _, _ in made] == ["deepspeed", "accelerate", "torchtitan", "megatron", "hf-trainer"]
    ds = json.loads(made[0][2].text)
    r = result_for()
    assert ds["train_micro_batch_size_per_gpu"] == r.workload.micro_batch


def test_inference_view_offers_the_engines():
    r = result_for(mode="infer")
    made = launch_exports.files(r)
    assert [fmt for fmt, _, _ in made] == ["vllm", "sglang"]
    assert all(r.model.name in out.text for _, _, out in made)


def test_the_page_shows_the_expander_closed_and_builds_nothing():
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception
    assert launch_exports.TITLE in [e.label for e in at.expander]
    assert [b.proto.label for b in at.get("download_button")] == ["Breakdown CSV", "Breakdown JSON",
                                                                   "One-page PDF report"]
