"""calculator/memory/parallel.py: divisibility checks, whose model-and-layout part is done once per (model, layout)."""
import pytest

from calculator import InputError, Workload
from calculator.memory.parallel import check_divisibility
from calculator.model.presets import load_model

LLAMA_8B = load_model("llama-3.1-8b").spec  # 32 heads, 8 KV heads, 32 layers
DEEPSEEK_V3 = load_model("deepseek-v3").spec  # 256 experts


def _refusal(m, w) -> tuple[str, str] | None:
    try:
        check_divisibility(m, w)
    except InputError as err:
        return err.field, str(err)
    return None


def test_a_layout_accepted_before_does_not_let_another_through():
    assert _refusal(LLAMA_8B, Workload(parallel={"tp": 2})) is None
    assert _refusal(LLAMA_8B, Workload(parallel={"tp": 3}))[0] == "tp"
    assert _refusal(LLAMA_8B, Workload(parallel={"pp": 2})) is None
    assert _refusal(LLAMA_8B, Workload(parallel={"pp": 3}))[0] == "pp"
    assert _refusal(DEEPSEEK_V3, Workload(parallel={"dp": 8, "ep": 8})) is None
    assert _refusal(DEEPSEEK_V3, Workload(parallel={"dp": 8, "ep": 16}))[0] == "ep"
    assert _refusal(LLAMA_8B, Workload(parallel={"dp": 8, "ep": 8}))[0] == "ep"  # the same layout, another model


def test_a_refusal_is_given_every_time_and_the_sequence_is_checked_per_workload():
    bad = Workload(parallel={"tp": 3})
    assert _refusal(LLAMA_8B, bad) == _refusal(LLAMA_8B, bad) != None  # noqa: E711
    cp = {"cp": 4}
    assert _refusal(LLAMA_8B, Workload(seq_len=4096, parallel=cp)) is None
    assert _refusal(LLAMA_8B, Workload(seq_len=4100, parallel=cp))[0] == "cp"  # same model and layout
    sp = {"tp": 4, "sequence_parallel": True}
    assert _refusal(LLAMA_8B, Workload(seq_len=4096, parallel=sp)) is None
    assert _refusal(LLAMA_8B, Workload(seq_len=4098, parallel=sp))[0] == "sequence_parallel"


def test_the_first_failing_check_names_its_field():
    """tp is checked before the sequence: the split of the model and layout keeps its place in the order."""
    assert _refusal(LLAMA_8B, Workload(seq_len=4100, parallel={"tp": 3, "cp": 4}))[0] == "tp"
    assert _refusal(LLAMA_8B, Workload(parallel={"pp": 4, "num_microbatches": 2}))[0] == "num_microbatches"
