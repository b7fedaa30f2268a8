"""Sweeps (calculator.planning.sweeps): each point is the engine's estimate at that value, with its components, against the
GPU's safe band; points the engine refuses say why; the CLI prints a table, CSV or JSON."""
import csv
import io
import json

from calculator import Workload, estimate
from calculator.cli.main import main
from calculator.core.fit import SAFE_FRACTION
from calculator.model.presets import get_gpu, load_model
from calculator.core.result import COMPONENTS
from calculator.planning.sweeps import default_values, sweep

LLAMA_8B = load_model("llama-3.1-8b").spec
LLAMA_70B = load_model("llama-3.1-70b").spec


def test_micro_batch_sweep_is_the_engine_at_each_point():
    w = Workload(mode="train", seq_len=2048, micro_batch=3, gpu="h100-sxm", parallel={"dp": 8, "zero": 3})
    sw = sweep(LLAMA_8B, w, "micro_batch")
    assert [p.x for p in sw.points] == [1, 2, 3, 4, 8, 16, 32, 64] and sw.current == 3
    budget = SAFE_FRACTION * get_gpu("h100-sxm").usable_bytes
    for p in sw.points:
        est = estimate(LLAMA_8B, w.model_copy(update={"micro_batch": p.x}))
        assert (p.peak_allocated_bytes, p.total_bytes) == (est.peak_allocated_bytes, est.total_bytes)
        assert sum(p.components.values()) == p.total_bytes
        assert p.fits == (p.total_bytes <= budget)
    totals = [p.total_bytes for p in sw.points]
    assert totals == sorted(totals) and sw.points[0].fits and not sw.points[-1].fits
    assert sw.budget_bytes == int(budget)


def test_seq_sweep_includes_the_current_value_and_reports_refused_points():
    w = Workload(mode="train", seq_len=6000, gpu="h100-sxm", parallel={"cp": 4, "dp": 2, "zero": 3})
    values = default_values(LLAMA_8B, w, "seq_len")
    assert 6000 in values and values[0] == 512
    sw = sweep(LLAMA_8B, w, "seq_len", [6000, 6004])  # 6004 is not divisible by 2·cp = 8
    ok, bad = sw.points
    assert ok.total_bytes and not ok.error
    assert bad.total_bytes is None and "cp" in bad.error


def test_gpu_sweep_training_shards_with_zero3_and_inference_splits_heads():
    sw = sweep(LLAMA_8B, Workload(mode="train", seq_len=4096, gpu="h100-sxm"), "gpus", [1, 2, 8])
    assert [p.layout for p in sw.points] == ["TP1 × PP1 × DP1, ZeRO-0", "TP1 × PP1 × DP2, ZeRO-3",
                                             "TP1 × PP1 × DP8, ZeRO-3"]
    assert sw.points[0].total_bytes > sw.points[1].total_bytes > sw.points[2].total_bytes
    inf = sweep(LLAMA_70B, Workload(mode="infer", seq_len=131072, gen_tokens=1024, gpu="a100-40gb"), "gpus")
    assert [p.x for p in inf.points] == [1, 2, 4, 8, 16, 32, 64]
    tp8 = next(p for p in inf.points if p.x == 8)
    assert round(tp8.total_bytes / 1e9, 1) == 38.9  # the figure: TP=8 on A100 40GB


def test_rows_carry_every_component():
    sw = sweep(LLAMA_8B, Workload(mode="infer", seq_len=4096, gpu="h100-sxm"), "micro_batch", [1, 2])
    rows = sw.rows()
    assert set(COMPONENTS) <= set(rows[0]) and rows[1]["kv_cache"] == 2 * rows[0]["kv_cache"]


def test_cli_sweep_csv_and_json(capsys):
    assert main(["sweep", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--over", "seq_len",
                 "--values", "1024,2048", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["seq_len"] for r in rows] == ["1024", "2048"] and int(rows[1]["total_bytes"]) > 0
    assert main(["sweep", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--over", "gpus", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["axis"] == "gpus" and data["budget_bytes"] > 0 and len(data["points"]) == 9
    assert main(["sweep", "--model", "llama-3.1-8b", "--values", "1,x"]) == 2
    assert "values" in capsys.readouterr().err
