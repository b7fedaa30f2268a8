"""calculator/planning/prices.py: the planner's prices shared across GPUs. The grid of one GPU count is priced once
per cuBLAS workspace and shifted by the CUDA context, so the fit cards of several GPUs cost fewer searches; every
card is what its own search gives."""
from unittest import mock

import numpy as np
import pytest

from calculator import Workload, estimate
from calculator.planning import planner
from calculator.planning import fast as planner_fast
from calculator.planning import prices as planner_prices
from calculator.planning.grid import layouts_of
from calculator.model.presets import list_gpus, load_model

JOBS = {
    "llama-3.1-8b": Workload(seq_len=4096, micro_batch=2),
    "llama-3.1-70b": Workload(seq_len=4096, recompute="selective"),
    "mixtral-8x7b": Workload(seq_len=2048, parallel={"zero": 1}),
}


@pytest.mark.parametrize("model_id", list(JOBS))
def test_a_layout_total_differs_between_gpus_of_one_workspace_only_by_their_context(model_id):
    m, w = load_model(model_id).spec, JOBS[model_id]
    layouts = list(layouts_of(m, w, 16, 8, None, "layout"))
    by_workspace: dict[int, tuple] = {}
    for g in list_gpus():
        total, peak, covered = planner_fast.totals(m, w.model_copy(update={"gpu": g.id}), layouts)
        first = by_workspace.setdefault(g.cublas_workspace_bytes, (g, total, peak, covered))
        peer, t0, p0, c0 = first
        assert np.array_equal(covered, c0) and np.array_equal(peak[covered], p0[covered])
        assert np.array_equal(total[covered], t0[covered] + g.cuda_context_bytes - peer.cuda_context_bytes)


@pytest.mark.parametrize("model_id", list(JOBS))
def test_every_card_equals_its_own_search(model_id):
    m = load_model(model_id).spec
    w = JOBS[model_id].model_copy(update={"gpu": "h100-sxm"})
    gpus = [g.id for g in list_gpus()]
    with mock.patch.dict(planner_prices._COUNT_GRIDS, clear=True):
        planner._gpus_needed.cache_clear()
        shared = estimate(m, w).fits_on(gpus)
    alone = []  # each GPU's grid priced on that GPU itself (no catalogue peer to share with)
    for g in gpus:
        with mock.patch.object(planner_prices, "_catalogue_ids", lambda: frozenset()):
            planner._gpus_needed.cache_clear()
            alone += estimate(m, w).fits_on([g])
    planner._gpus_needed.cache_clear()
    assert shared == tuple(alone)
    assert any(f.gpus_needed and f.gpus_needed > 1 for f in shared)  # the searches found layouts


def test_a_cuda_context_set_by_the_user_is_not_shifted():
    m = load_model("llama-3.1-8b").spec
    w = Workload(seq_len=4096, micro_batch=2, gpu="a100-80gb", overheads={"cuda_context_bytes": 10**9})
    layouts, fast = planner_prices.count_grid(m, w, 8, 8, None, "layout")
    total, _, covered = planner_fast.totals(m, w, layouts)
    assert np.array_equal(fast[0][covered], total[covered])
