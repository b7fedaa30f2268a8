"""Megatron-Core's MTP block priced on the last stage (calculator.timing.train_ops.mtp_ops; Megatron-Core
megatron/core/transformer/multi_token_prediction.py MultiTokenPredictionLayer: enorm + hnorm, eh_proj 2h → h, one
transformer layer, then the shared output layer and loss again), and the critical stage chosen by its micro-batch
time with the exposed communication (step_time._training, planning.fast_time)."""
import random

import pytest

from calculator import Workload
from calculator.core.workload import Parallelism
from calculator.memory.activations import dims
from calculator.model.presets import load_model
from calculator.timing import train_ops as T
from calculator.timing.inputs import TimingInputs
from calculator.timing.step_time import estimate_time

SPEC = load_model("deepseek-v3").spec


def _w(mtp: int, **par) -> Workload:
    p = Parallelism(**{"tp": 1, "pp": 1, "dp": 8, "ep": 8, "etp": 1, "num_microbatches": 4, **par})
    return Workload(seq_len=4096, gpu="h100-sxm", impl="megatron-te", stack="megatron", moe_dispatcher="flex",
                    mtp_layers=mtp, parallel=p)


def test_the_block_is_a_moe_layer_eh_proj_and_the_head_again():
    w = _w(1)
    d = dims(SPEC, w)
    ops = T.mtp_ops(SPEC, w, d)
    proj = [o for o in ops if o.name == "MTP eh_proj"]
    assert [o.phase for o in proj] == ["forward", "backward"]
    assert proj[0].flops == pytest.approx(2 * d.T * 2 * SPEC.hidden_size * SPEC.hidden_size)  # 2·T·2h·h
    assert proj[1].flops == pytest.approx(2 * proj[0].flops)
    layer = T.layer_ops(SPEC, w, d, T.layer_key(SPEC, SPEC.num_hidden_layers - 1))
    head = T.head_ops(SPEC, w, d, False, True)
    assert sum(o.flops for o in ops) == pytest.approx(sum(o.flops for o in proj + layer + head) + sum(
        o.flops for o in ops if o.name == "MTP enorm / hnorm"))
    assert T.mtp_layer_counts(SPEC, w) == (1, 1)  # its MoE layer's TP and EP collectives
    assert T.mtp_ops(SPEC, _w(2), d)[1].flops == pytest.approx(2 * proj[0].flops)  # per MTP depth
    assert T.mtp_ops(SPEC, w.model_copy(update={"stack": "fsdp2"}), d) == []  # Megatron-Core's block only
    assert T.mtp_ops(SPEC, _w(0), d) == []


def test_the_step_pays_for_it_on_the_last_stage():
    t = TimingInputs(matmul_dtype="fp8")
    with_mtp, without = estimate_time(SPEC, _w(1), t), estimate_time(SPEC, _w(0), t)
    assert with_mtp.step_time_s > without.step_time_s
    assert any(r.name == "MTP eh_proj" for r in with_mtp.roofline)


def test_the_planner_grid_prices_mtp_and_the_critical_stage_alike():
    from calculator.planning import fast_time
    from calculator.planning.grid import layouts_of, workload_of
    w = Workload(seq_len=4096, gpu="h100-sxm", impl="megatron-te", stack="megatron", moe_dispatcher="flex",
                 mtp_layers=1)
    timing = TimingInputs(ep_comm_overlap=True)
    layouts = [lay for lay in layouts_of(SPEC, w, 256, global_batch=1024) if lay.pp > 1]
    got = fast_time.times(SPEC, w, layouts, timing, 1024)
    for i in random.Random(11).sample(range(len(layouts)), min(20, len(layouts))):
        est = estimate_time(SPEC, workload_of(w, layouts[i], 1024), timing)
        assert got["step_time_s"][i] == pytest.approx(est.step_time_s, rel=1e-9), layouts[i]
        assert got["mfu"][i] == pytest.approx(est.mfu, rel=1e-9), layouts[i]


def test_adding_the_block_never_shortens_the_step():
    """B200 PP8 VP2 EP32 (4 nodes), Megatron-Bridge's DeepSeek-V3 layout with and without its 'm': the last stage
    (one layer, the MTP block and the head) out-computes a four-layer stage but communicates less; picking the
    critical stage by compute alone took its EP traffic for the step's and ran faster with the MTP than without."""
    t = TimingInputs(matmul_dtype="fp8", ep_comm_overlap=True)
    par = {"pp": 8, "dp": 32, "ep": 32, "num_microbatches": 128, "schedule": "interleaved", "virtual_stages": 2}
    w = _w(1, pp_layout="Et*4|(t*4|)*14tmL", **par).model_copy(update={"gpu": "b200"})
    w0 = _w(0, pp_layout="Et*4|(t*4|)*14tL", **par).model_copy(update={"gpu": "b200"})
    assert estimate_time(SPEC, w, t).step_time_s > estimate_time(SPEC, w0, t).step_time_s
