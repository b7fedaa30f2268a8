"""calculator/stages/terms.py: the term list, and the allocator replay that gives the nvidia-smi fragmentation line,
cached by (model, workload, shard) and bounded."""
from unittest import mock

from calculator import Workload, estimate
from calculator.stages import terms as stage_terms
from calculator.allocator import step_plan as step_trace
from calculator.model.presets import load_model
from calculator.stages.terms import TermList

QWEN3_06B = load_model("qwen3-0.6b").spec


def test_terms_keep_zero_bytes_out_except_weights_and_kept_lines():
    t = TermList()
    t.add("a", "activations", "A", 0, "f", "s", "src")
    t.add("weights", "weights", "W", 0, "f", "s", "src")
    t.add("g", "gradients", "G", 0, "f", "s", "src", keep=True)
    t.add("b", "activations", "B", 7, "f", "s", "src")
    assert [x.key for x in t.items] == ["weights", "g", "b"]
    assert t.total() == 7


def _frag(w: Workload) -> int:
    """The replayed fragmentation line (0 when the replay reserves no more than the peak allocated)."""
    terms = estimate(QWEN3_06B, w, with_fits=False).stages[0].terms
    return sum(x.bytes for x in terms if x.key == "fragmentation")


def test_a_replay_seen_before_builds_no_plan_and_gives_the_same_line():
    w = Workload(seq_len=1536, gpu="h200")
    calls = []
    real = step_trace.replayed

    def counting(plan, expandable):
        calls.append(plan)
        return real(plan, expandable)

    with mock.patch.dict(stage_terms._REPLAYS, clear=True), mock.patch.object(step_trace, "replayed", counting):
        first = _frag(w)
        again = _frag(Workload(seq_len=1536, gpu="h200"))  # an equal workload, another object
        other = _frag(Workload(seq_len=2048, gpu="h200"))
    assert len(calls) == 2  # 1536 once, 2048 once
    assert first == again == 699_900_712 and other == 577_428_264  # the replay's line at 1536 and 2048 tokens


def test_the_replay_cache_is_bounded():
    with mock.patch.dict(stage_terms._REPLAYS, clear=True), mock.patch.object(stage_terms, "_MAX_REPLAYS", 3):
        for s in (512, 768, 1024, 1280, 1536):
            _frag(Workload(seq_len=s, gpu="h200"))
        assert len(stage_terms._REPLAYS) == 3
        assert [k[1].seq_len for k in stage_terms._REPLAYS] == [1024, 1280, 1536]  # the newest kept
