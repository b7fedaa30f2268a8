"""The command line: presets, estimate (text and --json), solve, --config, and one-line errors."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from calculator.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_presets_lists_models_and_gpus(capsys):
    code, out, _ = run(["presets"], capsys)
    assert code == 0 and "llama-3.1-8b" in out and "h100-sxm" in out


def test_estimate_json_has_the_documented_keys(capsys):
    code, out, _ = run(["estimate", "--model", "llama-3.1-8b", "--mode", "train", "--batch", "1", "--seq", "4096",
                        "--recompute", "selective", "--activation-model", "textbook", "--zero-grad", "zeros", "--json"],
                       capsys)
    assert code == 0
    data = json.loads(out)
    for key in ("peak_allocated_bytes", "total_bytes", "components", "terms", "stages", "fits"):
        assert key in data
    for comp in ("weights", "master_weights", "gradients", "optimizer_states", "activations", "kv_cache"):
        assert isinstance(data["components"][comp], int)
    assert data["components"]["kv_cache"] == 0
    assert round(data["total_bytes"] / 1e9, 1) == 161.4  # seed 000


def test_estimate_takes_a_config_json_path(capsys, tmp_path):
    cfg = json.loads((ROOT / "presets/models/qwen3-8b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, _ = run(["estimate", "--model", str(path), "--mode", "infer", "--seq", "1024", "--json"], capsys)
    assert code == 0 and json.loads(out)["parameters"] == 8_190_735_360


def test_config_file_with_flag_override(capsys, tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"model": "llama-3.1-8b", "mode": "train", "seq_len": 2048,
                                "parallel": {"tp": 2, "dp": 4, "zero": 1}}))
    code, out, _ = run(["estimate", "--config", str(path), "--tp", "4", "--json"], capsys)
    assert code == 0
    terms = json.loads(out)["terms"]
    weights = next(t for t in terms if t["key"] == "weights")
    assert weights["bytes"] == pytest.approx(8_030_261_248 * 2 / 4, rel=0.01)


def test_every_flag_of_the_issue_is_accepted(capsys):
    code, out, err = run(["estimate", "--model", "mixtral-8x7b", "--mode", "train", "--batch", "2", "--seq", "2048",
                          "--gen", "0", "--params-dtype", "bf16", "--grads-dtype", "fp32", "--master-weights",
                          "--optimizer", "adamw", "--optimizer-dtype", "fp32", "--recompute", "full",
                          "--attention", "flash", "--activation-model", "exact", "--kv-dtype", "bf16", "--tp", "2",
                          "--pp", "2", "--dp", "4", "--cp", "1", "--ep", "4", "--sequence-parallel", "--zero", "1",
                          "--gpu", "h100-sxm", "--json"], capsys)
    assert code == 0, err
    assert len(json.loads(out)["stages"]) == 2


def test_generic_network_seed_004(capsys):
    code, out, _ = run(["estimate", "--generic-params", "20000000", "--generic-activations", "1000000",
                        "--batch", "32", "--optimizer", "none", "--no-master-weights", "--params-dtype", "fp32",
                        "--grads-dtype", "fp32", "--activation-dtype", "fp32", "--json"], capsys)
    assert code == 0 and json.loads(out)["peak_allocated_bytes"] == 288_000_000


def test_solve_largest_micro_batch(capsys):
    code, out, _ = run(["solve", "--model", "llama-3.1-8b", "--mode", "infer", "--seq", "4096",
                        "--gpu", "h100-sxm", "--json"], capsys)
    assert code == 0
    sol = json.loads(out)
    assert sol["value"] > 1 and sol["used_bytes"] <= sol["budget_bytes"]


@pytest.mark.parametrize("args,field", [
    (["--model", "llama-3.1-8b", "--tp", "3"], "tp"),
    (["--model", "no-such-model"], "model"),
    (["--model", "llama-3.1-8b", "--batch", "0"], "micro_batch"),
    (["--model", "llama-3.1-8b", "--batch", "-4"], "micro_batch"),
    (["--model", "llama-3.1-8b", "--gpu", "tpu-v9"], "gpu"),
])
def test_bad_input_is_one_line_naming_the_field(capsys, args, field):
    code, out, err = run(["estimate", *args], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and field in err


def test_malformed_config_json_file(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{\"model_type\": \"llama\", ")
    code, _, err = run(["estimate", "--model", str(bad)], capsys)
    assert code == 2 and "config.json" in err and "Traceback" not in err


def test_bad_choice_is_one_line_with_the_allowed_values():
    proc = subprocess.run([sys.executable, "-m", "calculator", "estimate", "--model", "llama-3.1-8b",
                           "--optimizer", "adam9"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("error: --optimizer: invalid choice: 'adam9'") and "adamw-8bit" in proc.stderr


def test_images_of_a_vision_language_model_reach_the_estimate(capsys):
    """--images / --image-size / --vision-tower are the Workload's vision inputs: the JSON equals the library's."""
    from calculator import Workload, estimate
    from calculator.model.presets import load_model
    code, out, _ = run(["estimate", "--model", "gemma-3-4b", "--mode", "train", "--finetune", "lora", "--images", "2",
                        "--image-size", "896", "--vision-tower", "trained", "--json"], capsys)
    assert code == 0
    want = estimate(load_model("gemma-3-4b").spec, Workload(finetune="lora", images_per_sample=2, image_size=896,
                                                            vision_tower="trained"))
    assert json.loads(out)["total_bytes"] == want.total_bytes
    code, text, _ = run(["estimate", "--model", "gemma-3-4b", "--mode", "train", "--finetune", "lora", "--json"],
                        capsys)
    assert json.loads(text)["total_bytes"] < want.total_bytes
    code, _, err = run(["estimate", "--model", "llama-3.1-8b", "--images", "1"], capsys)
    assert code != 0 and "image" in err.lower()


def test_a_flag_prefix_is_not_taken_for_another_flag(capsys):
    code, _, err = run(["estimate", "--model", "llama-3.1-8b", "--micro", "2"], capsys)
    assert code != 0 and "--micro" in err


def test_a_served_quantized_checkpoint_says_which_weight_dtypes_it_priced(capsys):
    """The serving block prints the engine's notes; DeepSeek-V3's checkpoint is FP8, which vLLM loads as it is."""
    code, out, _ = run(["estimate", "--model", "deepseek-v3", "--mode", "infer", "--engine", "vllm", "--gpu", "h200",
                        "--tp", "8"], capsys)
    assert code == 0
    assert ("  note: weights as the checkpoint stores them (its quantization_config), which vLLM loads as they are: "
            "decoder linears fp8, routed experts fp8") in out
    assert "max_model_len 163,840: starts" in out


def test_megatron_fsdp_strategy_reaches_the_estimate(capsys):
    args = ["estimate", "--model", "llama-3.2-1b", "--stack", "megatron", "--impl", "megatron-te", "--gpu",
            "h100-sxm", "--tp", "2", "--dp", "4", "--seq", "2048", "--grads-dtype", "fp32", "--json"]
    code, out, _ = run(args + ["--megatron-fsdp", "optim_grads_params"], capsys)
    terms = {t["key"]: t["bytes"] for t in json.loads(out)["terms"]}
    code0, out0, _ = run(args, capsys)
    ddp = {t["key"]: t["bytes"] for t in json.loads(out0)["terms"]}
    assert code == code0 == 0 and "sharding.mfsdp_non_units" in terms
    assert terms["weights"] == -(-ddp["weights"] // 4) and terms["gradients"] == -(-ddp["gradients"] // 4)


def test_offload_modules_reach_the_estimate_with_their_host_copies(capsys):
    args = ["estimate", "--model", "deepseek-v2-lite", "--stack", "megatron", "--impl", "megatron-te", "--gpu",
            "h100-sxm", "--tp", "2", "--dp", "4", "--ep", "8", "--etp", "1", "--seq", "4096", "--json"]
    code, out, _ = run(args + ["--offload-modules", "core_attn", "attn_proj", "expert_fc1"], capsys)
    code0, out0, _ = run(args, capsys)
    offloaded, plain = json.loads(out), json.loads(out0)
    assert code == code0 == 0 and offloaded["peak_allocated_bytes"] < plain["peak_allocated_bytes"]
    assert offloaded["host_bytes"] > 0 and "activations.offload_kept" in {t["key"] for t in offloaded["terms"]}


def test_advise_json_links_a_config_with_a_nan_in_a_field_it_does_not_read(capsys, tmp_path):
    """A config.json number the reader keeps as text (NaN in bos_token_id, which no estimate reads) is written into
    the page link as that text, and the link's config reads as the same model: advise's links were a TypeError
    from json.dumps (fuzz seed 139)."""
    from urllib.parse import parse_qs
    from calculator.model.hf_config import spec_from_hf_config
    cfg = json.loads((ROOT / "presets/models/qwen3-8b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "bos_token_id": float("nan")}))
    assert '"bos_token_id": NaN' in path.read_text()
    code, out, err = run(["advise", "--model", str(path), "--gpu", "h100-sxm", "--seq", "32768", "--json"], capsys)
    assert code == 0, err
    query = parse_qs(json.loads(out)["current"]["url_query"])
    linked = json.loads(query["cfg"][0])
    assert linked["bos_token_id"] == "NaN"
    assert spec_from_hf_config(linked).spec == spec_from_hf_config(cfg).spec
