"""`python -m calculator estimate ... --json` carries the time estimate; its flags; errors name the field."""
import json
import subprocess
import sys

import pytest

from calculator.cli.main import main


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_json_carries_time_throughput_mfu_and_roofline(capsys):
    out = _json(capsys, ["estimate", "--model", "llama-3.1-8b", "--mode", "train", "--seq", "4096",
                         "--recipe", "pure-bf16", "--gpu", "h200", "--json"])
    assert 0.3 < out["step_time_s"] < 0.6  # measured 0.431 s on an H200
    assert out["tokens_per_s"] == pytest.approx(4096 / out["step_time_s"])
    assert 0 < out["mfu"] < 1
    assert out["cost_per_million_tokens"] is None
    names = {r["name"] for r in out["roofline"]}
    assert {"QKV projection", "Attention core (FlashAttention)", "Output projection", "MLP up/gate projections",
            "Norms", "LM head", "Loss (fp32 cross entropy)", "Optimizer step"} <= names
    for r in out["roofline"]:
        assert set(r) >= {"name", "flops", "bytes", "intensity", "bound", "time_s"}
        assert r["bound"] in ("compute", "memory", "communication")
    # memory output is unchanged alongside
    assert out["peak_allocated_bytes"] > 0 and out["components"]["weights"] == 16_060_522_496


def test_price_and_link_flags(capsys):
    out = _json(capsys, ["estimate", "--model", "llama-3.1-8b", "--seq", "4096", "--gpu", "h100-sxm", "--tp", "8",
                         "--dp", "2", "--zero", "1", "--sequence-parallel", "--price-per-gpu-hour", "3",
                         "--ib-gbps", "25", "--json"])
    assert out["cost_per_million_tokens"] == pytest.approx(
        3 * 16 * out["step_time_s"] / 3600 / out["tokens_per_step"] * 1e6)
    slow = _json(capsys, ["estimate", "--model", "llama-3.1-8b", "--seq", "4096", "--gpu", "h100-sxm", "--tp", "8",
                          "--dp", "2", "--zero", "1", "--sequence-parallel", "--ib-gbps", "1", "--json"])
    assert slow["step_time_s"] > out["step_time_s"]  # the DP group spans two nodes: InfiniBand bound


def test_inference_ttft_and_tpot(capsys):
    out = _json(capsys, ["estimate", "--model", "llama-3.1-8b", "--mode", "infer", "--seq", "4096", "--gen", "128",
                         "--gpu", "h200", "--json"])
    assert out["ttft_s"] > 0 and out["tpot_s"] > 0
    assert out["step_time_s"] == pytest.approx(out["ttft_s"] + 127 * out["tpot_s"])


def test_without_gpu_the_time_is_null_and_says_why(capsys):
    out = _json(capsys, ["estimate", "--model", "llama-3.1-8b", "--json"])
    assert out["step_time_s"] is None and out["roofline"] is None
    assert "--gpu" in out["timing_note"]


def test_config_file_timing_object(tmp_path, capsys):
    cfg = tmp_path / "run.json"
    cfg.write_text(json.dumps({"model": "llama-3.2-1b", "seq_len": 2048, "gpu": "h200",
                               "timing": {"price_per_gpu_hour": 2.5, "matmul_efficiency": 0.5}}))
    out = _json(capsys, ["estimate", "--config", str(cfg), "--json"])
    assert out["cost_per_million_tokens"] > 0
    faster = _json(capsys, ["estimate", "--config", str(cfg), "--matmul-efficiency", "0.9", "--json"])
    assert faster["step_time_s"] < out["step_time_s"]


def test_bad_timing_input_exits_2_naming_the_field():
    r = subprocess.run([sys.executable, "-m", "calculator", "estimate", "--model", "llama-3.2-1b", "--gpu", "h200",
                        "--memory-efficiency", "0"], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith("error: memory_efficiency") and "Traceback" not in r.stderr


def test_text_output_has_a_time_line(capsys):
    assert main(["estimate", "--model", "llama-3.2-1b", "--seq", "2048", "--gpu", "h200"]) == 0
    text = capsys.readouterr().out
    assert "time on h200: training step" in text and "MFU" in text and "Attention core" in text


def test_ep_overlap_and_full_iteration_graph_switches_reach_the_time_model(capsys):
    """--ep-comm-overlap / --full-iteration-cuda-graph are TimingInputs switches: on, the MoE step is faster."""
    base = ["estimate", "--model", "qwen3-30b-a3b", "--mode", "train", "--gpu", "h100-sxm", "--ep", "8", "--dp", "8",
            "--stack", "megatron", "--impl", "megatron-te", "--recompute", "full", "--json"]
    plain = _json(capsys, base)["step_time_s"]
    assert _json(capsys, base + ["--ep-comm-overlap"])["step_time_s"] <= plain
    assert _json(capsys, base + ["--full-iteration-cuda-graph"])["step_time_s"] < plain
