"""Group-limited routing caps the nodes a node-deduplicating dispatcher sends a token to
(calculator.timing.comm_time.group_hit_probability; Megatron-Core moe_utils.group_limited_topk, DeepSeek-V3 technical
report §2.1.2 "Node-Limited Routing": each token goes to at most M = 4 nodes, n_group = 8, topk_group = 4)."""
from math import comb

import numpy as np
import pytest

from calculator.model.presets import load_model
from calculator.timing.comm_time import dedup_network_share, group_hit_probability


def test_whole_groups_per_node_is_hypergeometric():
    # DeepSeek-V3 at EP64 over 8 nodes of 8 GPUs: 256 experts, one group of 32 per node; a node is reached when its
    # group is one of the 4 of 8 chosen: 1 − C(7, 4)/C(8, 4) = 1/2
    assert group_hit_probability(8, 8, 8, 4) == pytest.approx(1 - comb(7, 4) / comb(8, 4))
    # 4 nodes, two groups each: 1 − C(6, 4)/C(8, 4) = 1 − 15/70
    assert group_hit_probability(8, 4, 8, 4) == pytest.approx(1 - comb(6, 4) / comb(8, 4))


def test_groups_spread_over_nodes():
    # 16 nodes, 8 groups: a group (2 nodes) chosen with 4/8, its node among the 2 gets one of its k/M = 2 experts
    assert group_hit_probability(8, 16, 8, 4) == pytest.approx(0.5 * (1 - 0.5 ** 2))


def test_the_share_takes_the_smaller_reach():
    k, n = 8, 8
    plain = k * (n - 1) / n
    unlimited = (n - 1) * (1 - (1 - 1 / n) ** k) / plain
    assert float(dedup_network_share(k, n)) == pytest.approx(unlimited)
    assert float(dedup_network_share(k, n, 8, 4)) == pytest.approx((n - 1) * 0.5 / plain)  # 3.5 of 7 copies
    assert float(dedup_network_share(k, n, 8, 8)) == pytest.approx(unlimited)  # every group allowed: no limit
    # two nodes of four groups: the smaller of the two reaches counts
    both = float(dedup_network_share(k, 2, 8, 4))
    assert both == pytest.approx(min(1 - comb(4, 4) / comb(8, 4), 1 - 0.5 ** 8) / (k / 2))
    arr = dedup_network_share(k, np.array([1.0, 8.0]), 8, 4)
    assert arr[0] == 1.0 and arr[1] == pytest.approx(0.5)


def test_the_configs_carry_the_groups():
    v3 = load_model("deepseek-v3").spec
    assert (v3.router_groups, v3.router_group_topk) == (8, 4)  # config.json n_group 8, topk_group 4
    lite = load_model("deepseek-v2-lite").spec  # topk_method "greedy": no group limit
    assert (lite.router_groups, lite.router_group_topk) == (1, 1)
    import json
    from pathlib import Path
    from calculator.model.hf_config import spec_from_hf_config
    cfg = json.loads((Path(__file__).resolve().parents[2] / "presets/models/deepseek-v3.json").read_text())
    assert spec_from_hf_config(dict(cfg, topk_group=2)).spec.router_group_topk == 2
    assert spec_from_hf_config(dict(cfg, topk_method="greedy")).spec.router_groups == 1


def test_the_step_time_uses_it():
    """DeepSeek-V3 at EP64 across H100 nodes, DeepEP: less InfiniBand all-to-all than unlimited routing."""
    from calculator.core.workload import Parallelism, Workload
    from calculator.timing.inputs import TimingInputs
    from calculator.timing.step_time import estimate_time
    spec = load_model("deepseek-v3").spec
    par = Parallelism(tp=1, pp=1, dp=64, ep=64, etp=1, num_microbatches=4)
    w = Workload(micro_batch=1, seq_len=4096, gpu="h100-sxm", impl="megatron-te", parallel=par,
                 moe_dispatcher="flex")
    t = TimingInputs(matmul_dtype="fp8")
    limited = estimate_time(spec, w, t)
    free = estimate_time(spec.model_copy(update={"router_groups": 1, "router_group_topk": 1}), w, t)

    def ep_s(est):
        return sum(r.time_s for r in est.roofline if r.name.startswith("EP all-to-all"))
    assert ep_s(limited) < ep_s(free)
    assert ep_s(limited) / ep_s(free) == pytest.approx(0.5 / (1 - (7 / 8) ** 8), rel=0.02)


def test_the_planner_grid_prices_it_alike():
    """calculator.planning.fast_time reads the same routing columns (step_time.routing_columns): DeepSeek-V3 with
    DeepEP over H100 nodes, grid against estimate_time layout by layout."""
    import random
    from calculator import Workload
    from calculator.planning import fast_time
    from calculator.planning.grid import layouts_of, workload_of
    from calculator.timing.inputs import TimingInputs
    from calculator.timing.step_time import estimate_time
    m = load_model("deepseek-v3").spec
    w = Workload(seq_len=4096, gpu="h100-sxm", impl="megatron-te", moe_dispatcher="flex")
    timing = TimingInputs(ep_comm_overlap=True)
    layouts = [lay for lay in layouts_of(m, w, 256, global_batch=1024) if lay.ep * (lay.etp or lay.tp) > 8] or \
        list(layouts_of(m, w, 256, global_batch=1024))
    got = fast_time.times(m, w, layouts, timing, 1024)
    for i in random.Random(5).sample(range(len(layouts)), min(15, len(layouts))):
        t = estimate_time(m, workload_of(w, layouts[i], 1024), timing)
        assert got["step_time_s"][i] == pytest.approx(t.step_time_s, rel=1e-9), layouts[i]
