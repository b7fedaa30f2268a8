"""The planner ranks the layouts that fit by estimated throughput (issue 23's done-when): DeepSeek-V3 on 256 H100s
opens on an expert-parallel layout, every row carries its step time, tokens/s per GPU and MFU, the ranking key
changes the order, the fit cards follow the same ranking, a global batch compares layouts at the same tokens per
step, and serving layouts rank by tokens/s per GPU."""
import json

import pytest

from calculator import Workload, estimate
from calculator.cli.main import main
from calculator.core.errors import InputError
from calculator.model.presets import get_gpu, load_model
from calculator.planning.planner import fewest_gpus, plans_for
from calculator.planning.ranking import RANKS, rank_key
from calculator.timing.inputs import TimingInputs

H100 = get_gpu("h100-sxm").usable_bytes


@pytest.fixture(scope="module")
def deepseek():
    m = load_model("deepseek-v3").spec
    return m, {rank: plans_for(m, Workload(seq_len=4096, gpu="h100-sxm"), 256, H100, rank=rank)
               for rank in ("fastest", "most-headroom", "memory")}


def test_deepseek_v3_on_256_h100_opens_on_an_expert_parallel_layout(deepseek):
    _, by = deepseek
    plans = by["fastest"]
    assert plans[0].ep > 1
    assert all(p.step_time_s and p.tokens_per_s_per_gpu and p.mfu and p.bottleneck for p in plans)
    speeds = [p.tokens_per_s_per_gpu for p in plans]
    assert speeds == sorted(speeds, reverse=True)


def test_the_ranking_key_changes_the_order(deepseek):
    _, by = deepseek
    orders = {rank: [p.label for p in plans] for rank, plans in by.items()}
    assert sorted(orders["fastest"]) == sorted(orders["memory"])  # the same layouts ...
    assert orders["fastest"] != orders["memory"] != orders["most-headroom"]  # ... in another order
    totals = [p.total_bytes for p in by["most-headroom"]]
    assert totals == sorted(totals)
    for rank in RANKS[:-1]:
        assert rank_key(rank)  # every key is defined
    with pytest.raises(InputError, match="rank"):
        rank_key("slowest")


def test_fit_cards_follow_the_ranking():
    """A card's 'GPUs needed' layout is the fastest of the fewest-GPU layouts, as the planner ranks them."""
    m = load_model("llama-3.1-70b").spec
    w = Workload(seq_len=4096, gpu="h100-sxm")
    card = estimate(m, w).fits_on(["h100-sxm"])[0]
    best = fewest_gpus(m, w, H100, search="layout", rank="fastest")[0]
    assert card.gpus_needed == best.gpus and card.layout == best.card


def test_a_global_batch_compares_layouts_at_the_same_tokens_per_step():
    m = load_model("llama-3.1-8b").spec
    w = Workload(seq_len=4096, micro_batch=2, gpu="h100-sxm")
    plans = plans_for(m, w, 16, H100, global_batch=64)
    assert plans
    for p in plans:
        assert p.micro_batch * p.microbatches * p.dp == 64 and p.microbatches >= p.pp
        assert p.tokens_per_s * p.step_time_s == pytest.approx(64 * 4096)
    odd = plans_for(m, w, 16, H100, global_batch=3)  # 3 sequences: DP 1 and micro-batch 1 only
    assert odd and all(p.dp == 1 and p.micro_batch == 1 and p.microbatches == 3 >= p.pp for p in odd)
    with pytest.raises(InputError, match="global_batch"):
        plans_for(m, w, 16, H100, global_batch=0)


def test_cheapest_needs_a_price_and_orders_by_cost():
    m = load_model("llama-3.1-8b").spec
    w = Workload(seq_len=8192, gpu="h100-sxm")
    with pytest.raises(InputError, match="price_per_gpu_hour"):
        plans_for(m, w, 8, H100, rank="cheapest")
    cost = plans_for(m, w, 8, H100, rank="cheapest", timing=TimingInputs(price_per_gpu_hour=3.0))
    costs = [p.cost_per_million_tokens for p in cost]
    assert costs == sorted(costs)


def test_serving_layouts_rank_by_output_tokens_per_second_per_gpu():
    m = load_model("llama-3.1-70b").spec
    w = Workload(mode="infer", engine="vllm", seq_len=8192, micro_batch=32, gen_tokens=256, gpu="h100-sxm")
    plans = plans_for(m, w, 16, H100)
    assert plans and all(p.tokens_per_s_per_gpu and p.bottleneck for p in plans)
    speeds = [p.output_tokens_per_s_per_gpu for p in plans]
    assert speeds == sorted(speeds, reverse=True)
    assert len({(p.tp, p.pp) for p in plans}) > 1  # TP × PP × DP replicas compared


def test_cli_plan_ranks_and_shows_the_time(capsys):
    base = ["plan", "--model", "deepseek-v3", "--seq", "4096", "--gpu", "h100-sxm", "--gpus", "256", "--limit", "5"]
    assert main(base) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "5 layouts, ranked by fits, then highest tokens/s per GPU (MFU), then lowest memory on the most " \
                     "loaded GPU"
    assert "EP" in out[1] and "tok/s/GPU" in out[1] and "MFU" in out[1] and "ms/step" in out[1]
    assert main(base + ["--rank", "most-headroom", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert [p["total_bytes"] for p in plans] == sorted(p["total_bytes"] for p in plans)
    assert all(p["mfu"] and p["tokens_per_s_per_gpu"] and p["bottleneck"] for p in plans)
    assert main(base + ["--global-batch", "1024", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert all(p["micro_batch"] * p["microbatches"] * p["dp"] == 1024 for p in plans)
    assert main(base + ["--global-batch", "0"]) == 2
    assert "global-batch" in capsys.readouterr().err
