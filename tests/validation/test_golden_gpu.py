"""The engine against every real-GPU golden (tests/golden_gpu/**/*.json): each run through the same command line a
user would type (validation/gpu/goldens.py), held to issue 13's bounds — peak allocated within 6% per case and 1.5%
median, nvidia-smi within 4% median. A run the engine cannot describe yet is an expected failure with its reason
(strict: when the engine learns it, the test says so and the entry must go)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from validation.gpu.goldens import GOLDEN_GPU_DIR, case_argv, load_cases, measured
from validation.gpu.compare import compare
from validation.gpu.import_cases import SHARED_H200, import_cases

PEAK_WORST_PCT = 6.0
PEAK_MEDIAN_PCT = 1.5
SMI_MEDIAN_PCT = 4.0
SMI_WORST_PCT = 8.0  # not in the issue: a per-case guard so one run cannot drift far while the median holds

CASES = load_cases()
FINISHED = [r for r in CASES if r["status"] == "ok"]
TRAINING = ("train", "trainer", "lora", "qlora")

# What the engine does not describe yet, first match wins. Remove an entry when its cases pass (strict xfail).
# Owners (issue 13): model implementations, padded masks, QLoRA kbit prep, LLM.int8 — the `impl` helper; configs —
# the configs work; stacks, gradients, buffers, allocator and device — calculator/stacks/.
PEAK_GAPS: list[tuple[str, object]] = [
    ("DDP on Llama-3.2-1B held the first iteration's flat bucket (2,471,628,800 B = every bf16 gradient) through "
     "iteration 2's forward and loss backward (-6.3%); the 8B run freed it. Source (PyTorch ~2.11): distributed.py "
     "_ddp_init_helper gives iteration 1 one bucket ([sys.maxsize], find_unused_parameters=False); _pre_forward of "
     "iteration 2 -> reducer.cpp rebuild_buckets -> sync_bucket_indices (2 broadcasts) -> initialize_buckets "
     "(buckets_.clear(), then at::empty per 25 MiB bucket). ProcessGroupNCCL.cpp collective() stashed that bucket on "
     "the all-reduce's TensorShelf (asyncOp); DDP waits on the future, never work.wait(), so only Watchdog::runLoop "
     "(polls every 100 ms) hands the shelf to shelvesToUnstash_, emptied by the next workEnqueue. Freed at the rebuild "
     "only if a poll fell between iteration 1's all-reduce and the rebuild's broadcasts: ~10 ms of opt.step at 1B, "
     "~70 ms at 8B. Timing, not a rule: not fitted; --ddp-rebuild-peak counts it (calculator/stacks/ddp.py)",
     lambda c: c.get("wrap") == "ddp" and c["config"] == "llama-3.2-1b.json"),
]
# nvidia-smi = peak allocated + the caching allocator's reserved − allocated (replayed: calculator/allocator/reference.py over
# calculator/allocator/step_plan.py) + the memory outside PyTorch. Runs whose allocation order the replay does not follow yet:
SMI_GAPS: list[tuple[str, object]] = [
    ("FSDP2 all-gathers and reduce-scatters on streams of their own, whose cached blocks the default stream cannot "
     "reuse; the replay has one stream (5.8 GB of slack measured, 0.8 GB replayed)", lambda c: c.get("wrap") == "fsdp2"),
    ("GPT-2 (Conv1D, dropout masks, gelu_new's five f-wide tensors): the GPU added one fp32-logits segment in "
     "step 2 that the replay does not", lambda c: c["config"].startswith("gpt2")),
    ("autocast's per-step bf16 weight copies are not replayed (amp-fp32; Qwen3-4B with recompute: 8.1 GB of slack "
     "measured, 1.1 GB replayed)",
     lambda c: c.get("recipe") == "amp-fp32" and c["config"].startswith("qwen3-4b")),
    ("Qwen3-0.6B with full recompute: in the replay the optimizer state fits the freed bf16-logits block with 0.1 GB "
     "to spare; on the GPU it spilled into an fp32-logits block and step 2 added a 5 GB segment",
     lambda c: c["config"].startswith("qwen3-0.6b") and c.get("recompute") == "full" and c.get("attn") != "eager"),
]


def known_gap(record: dict, gaps=None) -> str | None:  # noqa: E302
    gaps = PEAK_GAPS if gaps is None else gaps
    return next((reason for reason, applies in gaps if applies(record["case"])), None)


def _param(record: dict, gaps):
    reason = known_gap(record, gaps)
    marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
    return pytest.param(record, id=record["id"], marks=marks)


MODELLED = [r for r in FINISHED if known_gap(r) is None]
MODELLED_SMI = [r for r in MODELLED if known_gap(r, SMI_GAPS) is None]


def test_every_shared_h200_case_is_a_golden():
    h200 = [r for r in CASES if r["_path"].startswith("h200/")]
    assert len(h200) == 78
    assert {r["case"]["kind"] for r in h200} == {"train", "trainer", "lora", "qlora", "infer", "infer-quant"}
    for r in h200:
        assert r["gpu"] == "h200" and r["env"]["total"] == 150_109_880_320 and r["env"]["device"] == "NVIDIA H200"
        assert r["source"]["file"].endswith("measurements.jsonl") and r["source"]["line"] >= 2
        assert "model_type" in r["config_full"]
    assert sum(r["status"] == "oom" for r in h200) == 1


@pytest.mark.skipif(not SHARED_H200.exists(), reason="the shared measurement file is not on this machine")
def test_import_reproduces_the_committed_files(tmp_path):
    written = import_cases(SHARED_H200, "h200", tmp_path, "shared/validation/gpu-h200/measurements.jsonl")
    assert len(written) == 78
    for path in written:
        assert path.read_text() == (GOLDEN_GPU_DIR / "h200" / path.name).read_text(), path.name


def test_the_measured_snapshot_is_the_steady_step_or_the_end_of_generate():
    by_id = {r["id"]: r for r in CASES}
    train = by_id["train_llama-3.1-8b_b1_s4096"]
    assert measured(train) == {"peak_allocated": 81_013_763_584, "peak_reserved": 82_403_393_536,
                               "nvidia_smi": 83_207_454_720}
    assert measured(by_id["infer_llama-3.1-8b_b16_s4096_gen-0"])["peak_allocated"] == 32_471_294_976
    assert measured(by_id["train_gemma-2-2b_b2_s4096_attn-eager"]) is None  # ran out of memory


def test_a_case_maps_to_the_flags_a_user_would_type():
    case = {"kind": "train", "config": "x.json", "batch": 2, "seq": 4096, "wrap": "ddp", "bucket_view": True,
            "recompute": "full", "attn": "eager", "opt_impl": "foreach", "alloc_conf": "expandable_segments:True"}
    assert case_argv(case) == ["--mode", "train", "--batch", "2", "--seq", "4096", "--gpu", "h200",
                               "--recipe", "pure-bf16", "--stack", "ddp", "--attention", "eager",
                               "--recompute", "full", "--optimizer-impl", "foreach", "--bucket-view",
                               "--expandable-segments"]
    infer = {"kind": "infer-quant", "config": "x.json", "batch": 4, "seq": 4096, "gen": 32, "quant": "nf4"}
    assert case_argv(infer) == ["--mode", "infer", "--batch", "4", "--seq", "4096", "--gpu", "h200", "--gen", "32",
                                "--attention", "sdpa", "--weight-dtype", "nf4", "--quant-group-size", "64"]


@pytest.mark.parametrize("record", [_param(r, PEAK_GAPS) for r in FINISHED])
def test_peak_allocated_matches_the_gpu(record):
    row = compare(record)
    assert not row.error, row.error
    assert abs(row.peak_err_pct) <= PEAK_WORST_PCT, f"peak allocated {row.peak_err_pct:+.2f}%"


@pytest.mark.parametrize("record", [_param(r, SMI_GAPS) for r in MODELLED])
def test_nvidia_smi_matches_the_gpu(record):
    row = compare(record)
    assert not row.error, row.error
    assert abs(row.smi_err_pct) <= SMI_WORST_PCT, f"nvidia-smi {row.smi_err_pct:+.2f}%"


def test_medians_over_the_modelled_cases():
    rows = [compare(r) for r in MODELLED]
    assert len(rows) >= 50
    assert statistics.median(abs(r.peak_err_pct) for r in rows) <= PEAK_MEDIAN_PCT
    smi = [compare(r) for r in MODELLED_SMI]
    if smi:
        assert statistics.median(abs(r.smi_err_pct) for r in smi) <= SMI_MEDIAN_PCT


def test_every_golden_file_is_a_record():
    for path in GOLDEN_GPU_DIR.rglob("*.json"):
        record = json.loads(path.read_text())
        assert {"id", "gpu", "env", "case", "status"} <= set(record), path
        assert path.stem == record["id"], path


def test_the_committed_gpu_comparison_is_current():
    """validation/gpu_comparison.json (the Accuracy page's GPU matrix) is what the engine gives now: after an
    engine change, run `python -m validation.gpu.compare --write`."""
    from validation.gpu.compare import JSON_PATH, build, dumps
    assert JSON_PATH.read_text() == dumps(build()), "stale: python -m validation.gpu.compare --write"
