"""The planner ranks layouts by time or cost as well as memory (calculator.planning.planner + calculator.timing.step_time)."""
import json

import pytest

from calculator import Workload
from calculator.cli.main import main
from calculator.core.errors import InputError
from calculator.planning.planner import plans_for
from calculator.model.presets import get_gpu, load_model
from calculator.timing.inputs import TimingInputs

H100 = get_gpu("h100-sxm").memory_bytes


@pytest.fixture(scope="module")
def by_time():
    m = load_model("llama-3.1-8b").spec
    return plans_for(m, Workload(seq_len=8192, gpu="h100-sxm"), 8, H100, limit=100, rank="time")


def test_time_ranking_is_fastest_first(by_time):
    speeds = [p.tokens_per_s for p in by_time]
    assert all(s is not None for s in speeds) and speeds == sorted(speeds, reverse=True)


def test_full_recompute_ranks_below_the_same_layout_without_it(by_time):
    # without context parallelism (with CP some layouts are bound by the ZeRO-3 traffic, which hides recompute)
    pos = {(p.tp, p.pp, p.dp, p.zero, p.recompute): i for i, p in enumerate(by_time) if p.cp == 1}
    pairs = [(k, k[:4] + ("none",)) for k in pos if k[4] == "full" and k[:4] + ("none",) in pos]
    assert pairs, "some layout fits both with and without full recompute"
    for full, none in pairs:
        assert pos[none] < pos[full], (full, none)
        assert by_time[pos[none]].step_time_s < by_time[pos[full]].step_time_s


def test_memory_ranking_is_unchanged_and_carries_the_time():
    m = load_model("llama-3.1-8b").spec
    plans = plans_for(m, Workload(seq_len=8192, gpu="h100-sxm"), 8, H100, rank="memory")
    order = [{"none": 0, "selective": 1, "full": 2}[p.recompute] for p in plans]
    assert order == sorted(order)
    assert all(p.step_time_s and p.tokens_per_s for p in plans)  # every row carries its time
    shown = plans_for(m, Workload(seq_len=8192, gpu="h100-sxm"), 8, H100, limit=5, rank="memory")
    assert len(shown) == 5 and all(p.step_time_s for p in shown)


def test_cost_ranking_needs_a_price_and_matches_time_at_one_gpu_count():
    m = load_model("llama-3.1-8b").spec
    w = Workload(seq_len=8192, gpu="h100-sxm")
    with pytest.raises(InputError, match="price_per_gpu_hour"):
        plans_for(m, w, 8, H100, rank="cost")
    cost = plans_for(m, w, 8, H100, rank="cost", timing=TimingInputs(price_per_gpu_hour=2.0))
    time = plans_for(m, w, 8, H100, rank="time", timing=TimingInputs(price_per_gpu_hour=2.0))
    assert [p.label for p in cost] == [p.label for p in time]  # same GPUs: cost ∝ time per token
    assert cost[0].cost_per_million_tokens == pytest.approx(2.0 * 8 / 3600 / cost[0].tokens_per_s * 1e6)


def test_cli_plan_rank_time(capsys):
    assert main(["plan", "--model", "llama-3.1-8b", "--seq", "8192", "--gpu", "h100-sxm", "--gpus", "8",
                 "--rank", "time", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert plans[0]["tokens_per_s"] >= plans[-1]["tokens_per_s"]
    assert main(["plan", "--model", "llama-3.1-8b", "--seq", "8192", "--gpu", "h100-sxm", "--gpus", "8",
                 "--rank", "cost"]) == 2
    assert "price_per_gpu_hour" in capsys.readouterr().err
