"""The GPU harness (validation/gpu/) checked without a GPU: its ids are the shared ids, its records have the shared
keys, its cases are new, every config it names loads, and its code paths run (on the CPU, on two-layer copies of
the models, where every memory figure is 0 by construction)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from validation.gpu import cases, loops, run
from validation.gpu import protocol as P

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent.parent / "shared" / "validation" / "gpu-h200" / "measurements.jsonl"
SHARED_ROWS = [json.loads(line) for line in SHARED.read_text().splitlines()[1:]] if SHARED.exists() else []
needs_shared = pytest.mark.skipif(not SHARED_ROWS, reason="the shared H200 measurements are not beside the checkout")


@pytest.fixture
def cpu_dry_run(monkeypatch):
    monkeypatch.setattr(P, "DEVICE", "cpu")
    monkeypatch.setattr(P, "TINY", True)


def shared_keys(kind: str, **case_fields) -> set:
    """The top-level keys of a finished shared record of this kind (and these case fields)."""
    for row in SHARED_ROWS:
        c = row["case"]
        if c["kind"] == kind and row["status"] == "ok" and all(c.get(k) == v for k, v in case_fields.items()):
            return set(row)
    raise LookupError(kind)


@needs_shared
def test_case_ids_are_built_as_the_shared_ids_are():
    mismatched = [r["id"] for r in SHARED_ROWS if cases.case_id(r["case"]) != r["id"]]
    # the one shared id whose parts are not in its case's key order (the case lists lora before recompute)
    assert mismatched == ["lora_llama-3.1-8b_b4_s4096_recompute-full_lora-all-linear"]
    assert len(SHARED_ROWS) == 78


@needs_shared
def test_new_cases_are_cases_the_shared_set_never_ran():
    shared_ids = {r["id"] for r in SHARED_ROWS}
    assert not shared_ids & set(cases.BY_ID)
    assert len(cases.BY_ID) == len(cases.ALL) == 72
    shared_models = {r["case"]["config"] for r in SHARED_ROWS}
    new_models = {c["config"] for c in cases.MAIN if c["kind"] == "train" and not c.get("layers")}
    assert len(new_models - shared_models) >= 9


def test_ids_name_every_non_default_setting_and_no_dict():
    c = cases.DS("qwen2.5-1.5b", 2, 4096, 3, variant="small-buckets", overrides=cases.SMALL_STAGE3)
    assert c["id"] == "train_qwen2.5-1.5b_b2_s4096_wrap-deepspeed_zero-3_variant-small-buckets_recipe-mixed-bf16"
    assert c["ds_config"]["zero_optimization"] == {"stage": 3, **cases.SMALL_STAGE3}
    assert c["ds_config"]["bf16"] == {"enabled": True} and c["ds_config"]["train_micro_batch_size_per_gpu"] == 2
    assert cases.T("qwen2.5-3b", 2, 4096, attn="sdpa", recompute="none")["id"] == "train_qwen2.5-3b_b2_s4096"
    assert cases.T("qwen2.5-3b", 2, 4096, set_to_none=False)["id"] == "train_qwen2.5-3b_b2_s4096_persistent-grads"
    assert cases.I("qwen2.5-7b", 4, 8192, 32, alloc_conf=cases.EXPANDABLE)["id"] == \
        "infer_qwen2.5-7b_b4_s8192_gen-32_expandable"


def test_wrapped_and_allocator_cases_get_their_own_process():
    assert all(cases.needs_own_process(c) for c in cases.OWN)
    assert not any(cases.needs_own_process(c) for c in cases.MAIN)
    assert {c.get("wrap") for c in cases.OWN} == {"deepspeed", "ddp", "fsdp2", None}
    assert sorted(c["zero"] for c in cases.OWN if c.get("wrap") == "deepspeed") == [0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]


def test_every_case_config_loads_with_its_layer_cut():
    for c in cases.ALL:
        config = P.load_config(c["config"], c.get("layers"))
        assert config.num_hidden_layers == c.get("layers", json.loads(
            (P.presets_dir() / c["config"]).read_text())["num_hidden_layers"]), c["id"]
        assert c["seq"] * c["batch"] > 0 and config.vocab_size > 1000


def test_padding_mask_pads_the_last_quarter_of_half_the_batch(cpu_dry_run):
    mask = loops.padding_mask(4, 16)
    assert mask.tolist()[:2] == [[1] * 16] * 2
    assert mask.tolist()[2:] == [[1] * 12 + [0] * 4] * 2


@needs_shared
def test_train_record_has_the_shared_keys_and_two_timed_steps(cpu_dry_run):
    c = dict(cases.BY_ID["train_qwen2.5-3b_b2_s4096"], seq=32)
    record = run.run_one(c)
    assert record["status"] == "ok", record.get("traceback")
    assert set(record) == shared_keys("train", config="llama-3.2-1b.json", batch=4, seq=4096)
    for step in ("step1", "step2"):
        assert set(record[step]) == {"fwd", "fwd_bwd", "step", "seconds"} and record[step]["seconds"] > 0
        assert set(record[step]["step"]) == set(P.SNAPSHOT_KEYS)
    assert record["config_full"]["model_type"] == "qwen2" and record["config_full"]["num_hidden_layers"] == 2
    assert record["n_params"] == record["n_trainable"] and record["param_bytes"] == 2 * record["n_params"]


@needs_shared
def test_prefill_record_counts_the_kv_cache_to_the_byte(cpu_dry_run):
    c = dict(cases.BY_ID["infer_qwen2.5-0.5b_b64_s1024_gen-0"], batch=2, seq=16)
    record = run.run_one(c)
    assert record["status"] == "ok", record.get("traceback")
    assert set(record) == shared_keys("infer", gen=0)
    # two layers x (K, V) x batch 2 x 2 KV heads x 16 positions x head_dim 32 x 2 bytes (bf16)
    assert record["cache_bytes"] == 2 * 2 * 2 * 2 * 16 * 32 * 2


@needs_shared
def test_generate_record_has_the_shared_keys(cpu_dry_run):
    c = dict(cases.BY_ID["infer_smollm2-1.7b_b1_s1024_gen-128"], seq=8, gen=3)
    record = run.run_one(c)
    assert record["status"] == "ok", record.get("traceback")
    assert set(record) == shared_keys("infer", gen=64) and record["generated"] == 3


def test_a_failing_case_becomes_an_error_record(cpu_dry_run):
    record = run.run_one({"id": "x", "kind": "train", "config": "no-such-model.json", "batch": 1, "seq": 8})
    assert record["status"] == "error" and "no-such-model.json" in record["error"]
    assert record["id"] == "x" and record["case"]["config"] == "no-such-model.json"


def test_orchestrator_writes_env_line_records_and_summary(tmp_path):
    env = {**os.environ, "GPU_HARNESS_DEVICE": "cpu", "GPU_HARNESS_TINY": "1"}
    done = tmp_path / "earlier.jsonl"
    done.write_text(json.dumps({"id": "infer_qwen2.5-0.5b_b64_s1024_gen-0"}) + "\n")
    proc = subprocess.run([sys.executable, "-m", "validation.gpu.run", "--out", str(tmp_path), "--only",
                           "infer_qwen2.5-0.5b,infer_llama-3.2-3b_b16", "--skip-done", str(done), "--deadline", "120"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "measurements.jsonl").read_text().splitlines()]
    assert "env" in rows[0] and rows[0]["env"]["torch"] == torch.__version__
    assert [r["id"] for r in rows[1:]] == ["infer_llama-3.2-3b_b16_s4096_gen-0"]
    assert rows[1]["status"] == "ok" and rows[1]["case"]["batch"] == 2  # the dry run's small shape
    assert "infer_llama-3.2-3b_b16_s4096_gen-0" in (tmp_path / "summary.txt").read_text()


def test_failures_are_kept_apart_from_measurements(tmp_path):
    out = tmp_path / "measurements.jsonl"
    run.append(out, {"env": {"torch": "x"}})
    run.append(out, {"id": "a", "status": "ok"})
    run.append(tmp_path / "failures.jsonl", {"id": "b", "status": "crashed", "error": "worker exit code -11"})
    assert run.load_done(out) == ({"a", "b"}, True)
    table = run.summary(out).splitlines()
    assert [line.split()[:2] for line in table[1:]] == [["a", "ok"], ["b", "crashed"]]
