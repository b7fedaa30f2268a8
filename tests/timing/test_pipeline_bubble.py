"""calculator/timing/pipeline_bubble.py: the bubble of virtual stages holding unequal layers,
step ≈ m·T_crit + (p − 1)·t_chunk,max, as an effective chunk count v_eff = T_crit / t_chunk,max."""
import pytest

from calculator import Workload
from calculator.core.workload import Parallelism
from calculator.model.presets import load_model
from calculator.timing.pipeline_bubble import effective_chunks, exposed_p2p
from calculator.timing.step_time import estimate_time, step_seconds

LLAMA_8B = load_model("llama-3.1-8b").spec  # 32 layers


def test_even_chunks_keep_v():
    p = Parallelism(pp=4, virtual_stages=2, schedule="interleaved")
    assert effective_chunks(32, p, [1.0, 1.0, 1.0, 1.2]) == 2.0


def test_embedding_and_loss_in_the_split():
    # 94 + 2 = 96 over PP4 × VP12: ranks hold 23, 24, 24, 23 layers in chunks of 2 (1 at the two ends)
    p = Parallelism(pp=4, virtual_stages=12, schedule="interleaved", pp_embedding_in_split=True,
                    pp_loss_in_split=True)
    # time ∝ layers: the slowest chunk is a middle rank's 2 of 24 → 24 / 2 = 12
    assert effective_chunks(94, p, [23.0, 24.0, 24.0, 23.0]) == pytest.approx(12.0)
    # the last rank also runs the LM head (30 units): its chunks take 30·2/23; v_eff = 30 / (60/23) = 11.5
    assert effective_chunks(94, p, [23.0, 24.0, 24.0, 30.0]) == pytest.approx(11.5)


def test_uneven_1f1b_is_the_1f1b_bubble():
    p = Parallelism(pp=4, pp_first_stage_layers=7, pp_last_stage_layers=6)
    assert effective_chunks(61, p, [7.0, 16.0, 16.0, 6.0]) == 1.0


def test_step_formula_with_v_eff():
    # m·T_crit + (p − 1)·t_chunk,max with T_crit = 30, t_chunk,max = 60/23, m = 8, p = 4
    exposed = {"tp": 0.0, "ep": 0.0, "pp": 0.0, "cp": 0.0, "dp": 0.0}
    step, _, bubble = step_seconds(30.0, exposed, 8, 4, 11.5, 0.0, 0.0)
    assert float(step) == pytest.approx(8 * 30 + 3 * 60 / 23)
    assert float(bubble) == pytest.approx(3 / (11.5 * 8))


def _w(**par) -> Workload:
    return Workload(gpu="h100-sxm", seq_len=4096, parallel={"pp": 4, "num_microbatches": 8, **par})


def test_a_layout_that_spells_the_even_split_prices_the_same():
    even = estimate_time(LLAMA_8B, _w(virtual_stages=2, schedule="interleaved"))
    spelled = estimate_time(LLAMA_8B, _w(virtual_stages=2, schedule="interleaved",
                                         pp_layout="Et*4|(t*4|)*6t*4L"))
    assert spelled.step_time_s == even.step_time_s
    assert spelled.bubble_fraction == pytest.approx(3 / (2 * 8))


def test_uneven_layout_bubble_is_set_by_its_largest_chunk():
    # ranks of "Et*3|(t*4|)*6t*5L" (PP4 VP2): (3, 4), (4, 4), (4, 4), (4, 5) layers
    t = estimate_time(LLAMA_8B, _w(virtual_stages=2, schedule="interleaved", pp_layout="Et*3|(t*4|)*6t*5L"))
    v_eff = 3 / (t.bubble_fraction * 8)
    # the last rank (9 layers + head) is the slowest; its largest chunk holds 5 of its 9 layers: v_eff = 9/5
    assert v_eff == pytest.approx(9 / 5)
    one_f_one_b = estimate_time(LLAMA_8B, _w(pp_first_stage_layers=7, pp_last_stage_layers=9))
    assert t.bubble_fraction < one_f_one_b.bubble_fraction


def test_p2p_overlap_hides_the_sends_under_the_chunks_compute():
    inter = Parallelism(pp=4, virtual_stages=2, schedule="interleaved", pp_overlap_p2p=True)
    assert exposed_p2p(0.3, 1.0, inter) == 0.0 and exposed_p2p(1.5, 1.0, inter) == pytest.approx(0.5)
    # off, or 1F1B (Megatron turns the overlap off without virtual stages): all exposed
    assert exposed_p2p(0.3, 1.0, Parallelism(pp=4, virtual_stages=2, schedule="interleaved")) == 0.3
    assert exposed_p2p(0.3, 1.0, Parallelism(pp=4, pp_overlap_p2p=True)) == 0.3
    base = _w(virtual_stages=2, schedule="interleaved")
    over = _w(virtual_stages=2, schedule="interleaved", pp_overlap_p2p=True)
    t0, t1 = estimate_time(LLAMA_8B, base), estimate_time(LLAMA_8B, over)
    assert t1.step_time_s < t0.step_time_s and t1.comm_time_s < t0.comm_time_s
