"""The planner: parallel layouts that fit, at a given GPU count or the fewest."""
import json

from calculator import Parallelism, Workload, estimate
from calculator.cli import main
from calculator.planner import fewest_gpus, plans_for
from calculator.presets import get_gpu, load_model

H100 = get_gpu("h100-sxm").memory_bytes


def test_every_plan_fits_the_safe_band_and_reproduces_with_estimate():
    m = load_model("llama-3.1-8b").spec
    w = Workload(seq_len=8192)
    plans = plans_for(m, w, 8, H100)
    assert plans
    for p in plans:
        assert p.tp * p.pp * p.dp == 8 and p.utilization <= 0.8
        again = estimate(m, Workload(seq_len=8192, recompute=p.recompute, parallel=Parallelism(
            tp=p.tp, pp=p.pp, dp=p.dp, zero=p.zero, sequence_parallel=p.tp > 1, num_microbatches=p.pp)),
            with_fits=False)
        assert again.total_bytes == p.total_bytes


def test_plans_prefer_less_recompute():
    m = load_model("llama-3.1-8b").spec
    plans = plans_for(m, Workload(seq_len=8192), 8, H100)
    order = [{"none": 0, "selective": 1, "full": 2}[p.recompute] for p in plans]
    assert order == sorted(order)


def test_fewest_gpus_for_70b_training_is_more_than_one_node_and_minimal():
    m = load_model("llama-3.1-70b").spec
    w = Workload(seq_len=4096)
    plans = fewest_gpus(m, w, H100)
    n = plans[0].gpus
    assert n > 8
    assert plans_for(m, w, n // 2, H100) == []  # half as many GPUs: nothing fits


def test_inference_of_8b_fits_one_gpu():
    m = load_model("llama-3.1-8b").spec
    plans = fewest_gpus(m, Workload(mode="infer", seq_len=8192), H100)
    assert plans[0].gpus == 1 and plans[0].tp == 1


def test_cli_plan_json(capsys):
    assert main(["plan", "--model", "llama-3.1-8b", "--mode", "infer", "--seq", "4096", "--gpu", "l4",
                 "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert plans and all(p["utilization"] <= 0.8 for p in plans) and "label" in plans[0]


def test_cli_plan_needs_a_gpu(capsys):
    assert main(["plan", "--model", "llama-3.1-8b"]) == 2
    assert "gpu" in capsys.readouterr().err
