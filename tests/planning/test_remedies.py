"""Remedies (calculator.planning.remedies, calculator.planning.levers): every lever is the engine's own estimate of the changed input,
ranked by the bytes it saves, each with a link that opens exactly that input, and a greedy combination that fits.
The CLI's `advise --json` is the issue's done-when."""
import json
from urllib.parse import parse_qs

import pytest

from calculator import Workload, estimate
from calculator.cli.main import main
from calculator.core.fit import SAFE_FRACTION
from calculator.model.presets import get_gpu, load_model
from calculator.planning.remedies import advise, apply, kv_shortfall_bytes
from dashboard.inputs import state
from calculator.exports import page_link as links

LLAMA_8B = load_model("llama-3.1-8b").spec


def _advise_cli(capsys, *args):
    assert main(["advise", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _workload_of(url_query: str):
    """The workload the calculator page builds from a remedy's link (the page's own parsing and building)."""
    query = {k: v[-1] for k, v in parse_qs(url_query, keep_blank_values=True).items()}
    check = state.check_query_params(query)
    assert check.ignored == ()
    return state.build_model(check.values)[0], state.build_workload(check.values)


def test_done_when_every_lever_is_the_engine_on_the_changed_input_and_a_combination_fits(capsys):
    out = _advise_cli(capsys, "--model", "llama-3.1-8b", "--mode", "train", "--seq", "8192", "--gpu", "h100-sxm")
    assert out["current"]["fits"] is False  # 198 GB against an 80 GB card
    levers = out["remedies"]
    assert len(levers) >= 15
    kinds = {r["lever"] for r in levers}
    assert {"recompute", "zero", "offload", "fused_loss", "optimizer", "finetune", "tp", "pp", "cp", "dp",
            "seq_len"} - {"zero"} <= kinds  # one GPU: no ZeRO stage alone helps (no data-parallel ranks)
    for r in levers + out["combined"]["steps"]:
        assert set(r) >= {"lever", "change", "peak_allocated_bytes", "total_bytes", "saved_bytes", "fits", "cost",
                          "url_query"}
        model, w = _workload_of(r["url_query"])
        est = estimate(model, w)
        assert est.peak_allocated_bytes == r["peak_allocated_bytes"], r["change"]
        assert est.total_bytes == r["total_bytes"], r["change"]
        assert r["saved_bytes"] == out["current"]["total_bytes"] - r["total_bytes"]
        assert r["fits"] == (est.total_bytes <= SAFE_FRACTION * get_gpu("h100-sxm").usable_bytes)
    saved = [r["saved_bytes"] for r in levers]
    assert saved == sorted(saved, reverse=True) and saved[-1] > 0
    comb = out["combined"]
    assert comb["fits"] is True and comb["total_bytes"] <= out["budget_bytes"]
    assert len(comb["levers"]) == len(comb["steps"]) >= 2
    assert comb["steps"][-1]["url_query"] == comb["url_query"]


def test_levers_and_their_costs_on_one_gpu():
    adv = advise(LLAMA_8B, Workload(mode="train", seq_len=8192, gpu="h100-sxm"))
    by = {r.change: r for r in adv.remedies}
    tp8 = by["tensor parallel 1 → 8 with sequence parallelism"]
    assert tp8.fits and tp8.cost["gpus"] == 8 and tp8.cost["extra_gpus"] == 7
    assert tp8.workload.parallel.tp == 8 and tp8.workload.parallel.sequence_parallel
    full = by["recompute none → full"]
    assert full.cost["step_time_ratio"] > 1.1  # the replayed forward costs time
    assert full.cost["gpus"] == 1
    offload = by["offload optimizer state, master weights and gradients to CPU (ZeRO-Offload)"]
    assert offload.cost["step_time_s"] is None and "not in the step time" in offload.cost["text"]
    # pure data: nothing in the ranking that saves nothing or that the engine refuses
    assert all(r.saved_bytes > 0 for r in adv.remedies)
    # under FlashAttention selective recompute frees only the fp32 logsumexp (4·a·T per layer, 33.5 MB here); the
    # caching allocator keeps those blocks reserved (calculator/allocator/reference.py), so the total does not move: no remedy
    sel = Workload(mode="train", seq_len=8192, gpu="h100-sxm", recompute="selective")
    assert estimate(LLAMA_8B, sel).peak_allocated_bytes == adv.current.peak_allocated_bytes - 32 * 4 * 32 * 8192
    assert "recompute none → selective" not in by


def test_micro_batch_lever_keeps_the_global_batch():
    w = Workload(mode="train", seq_len=4096, micro_batch=8, gpu="h100-sxm", parallel={"dp": 4, "zero": 1})
    adv = advise(LLAMA_8B, w)
    mb = next(r for r in adv.remedies if r.lever == "micro_batch")
    new = mb.workload
    assert new.micro_batch * new.parallel.microbatches * new.parallel.dp == 8 * 1 * 4
    assert mb.cost["step_time_s"] > 0
    zero = [r for r in adv.remedies if r.lever == "zero"]  # 4 data-parallel ranks: stages 2 and 3 apply
    assert {r.workload.parallel.zero for r in zero} == {2, 3}


def test_only_degrees_that_divide_are_proposed():
    adv = advise(load_model("llama-3.1-70b").spec, Workload(mode="train", seq_len=4096, gpu="h100-sxm"))
    for r in adv.remedies:
        p = r.workload.parallel
        assert 64 % p.tp == 0 and 80 % p.pp == 0 and p.tp <= 8


def test_a_job_that_fits_still_lists_levers_and_an_empty_combination():
    adv = advise(LLAMA_8B, Workload(mode="infer", seq_len=1024, gpu="h100-sxm"))
    assert adv.current.fits is True
    assert adv.combined.steps == () and adv.combined.fits is True
    assert all(r.fits for r in adv.remedies)


def test_serving_levers_rank_by_the_kv_shortfall():
    w = Workload(mode="infer", engine="vllm", seq_len=131072, gen_tokens=1024, micro_batch=4, gpu="a100-40gb")
    m = load_model("llama-3.1-70b").spec
    adv = advise(m, w)
    assert adv.measure == "kv_shortfall_bytes" and adv.current.fits is False
    base = kv_shortfall_bytes(estimate(m, w), w)
    for r in adv.remedies:
        assert r.saved_bytes == base - kv_shortfall_bytes(estimate(m, r.workload), r.workload)
    kinds = {r.lever for r in adv.remedies}
    assert {"tp", "kv_dtype", "weights", "memory_fraction"} <= kinds
    assert adv.combined.fits  # e.g. TP across a node: the engine starts and holds the 4 sequences
    sv = estimate(m, adv.combined.result.workload).serving
    assert sv.starts and sv.max_concurrent_seqs >= 4


def test_rl_levers_include_the_rollout():
    # the rollout phase peaks (the trainer stays on the GPU beside the engine's pool)
    w = Workload(mode="rl", gpu="h100-sxm", recompute="full", parallel={"dp": 8, "zero": 3},
                 rl={"rollout_batch_size": 64, "prompt_len": 512, "response_len": 2048, "offload_train": False})
    assert estimate(LLAMA_8B, w).rl.peak_phase == "rollout"
    adv = advise(LLAMA_8B, w)
    by = {r.lever: r for r in adv.remedies}
    assert {"offload_train", "memory_fraction"} <= set(by)
    assert by["offload_train"].saved_bytes > 15e9  # the trainer's bf16 weights, fp32 master and Adam state leave
    for r in adv.remedies:
        assert estimate(LLAMA_8B, r.workload).total_bytes == r.total_bytes
    assert adv.combined.fits
    # where training peaks, offloading the trainer during rollout saves nothing and is not listed
    w = w.model_copy(update={"recompute": "none", "rl": w.rl.model_copy(update={"response_len": 16384})})
    assert "offload_train" not in {r.lever for r in advise(LLAMA_8B, w).remedies}


def test_apply_validates_the_changed_workload():
    w = Workload(mode="train")
    assert apply(w, {"parallel": {"tp": 2}}).parallel.tp == 2
    with pytest.raises(ValueError):
        apply(w, {"parallel": {"tp": 0}})


def test_advise_needs_a_gpu(capsys):
    assert main(["advise", "--model", "llama-3.1-8b"]) == 2
    assert "gpu" in capsys.readouterr().err


def test_advise_text_output(capsys):
    assert main(["advise", "--model", "llama-3.1-8b", "--seq", "8192", "--gpu", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "does not fit the 80% band" in out and "combined:" in out and "fits" in out.splitlines()[-1]


def test_links_round_trip_every_workload_field():
    ws = [Workload(mode="train", recompute="full", impl="liger", optimizer="adamw-8bit", stack="fsdp2",
                   parallel={"dp": 8, "zero": 3, "offload_optimizer": True, "num_microbatches": 4},
                   precision={"params": "bf16", "grads": "fp32", "master_weights": None}, gpu="b200"),
          Workload(mode="infer", engine="sglang", kv_dtype="fp8", weight_dtype="int4", gpu="h200",
                   serving={"memory_fraction": 0.8, "max_model_len": 32768, "max_num_seqs": 64}),
          Workload(mode="rl", gpu="h100-sxm", rl={"rollout_batch_size": 16, "memory_fraction": 0.5,
                                                   "colocate": False, "rollout_gpus": 4})]
    for w in ws:
        assert state.build_workload(links.workload_values(w)) == w


def test_a_config_file_model_travels_in_the_link(capsys, tmp_path):
    from pathlib import Path
    cfg = Path(__file__).resolve().parents[2] / "presets/models/qwen3-8b.json"
    path = tmp_path / "config.json"
    path.write_text(cfg.read_text())
    out = _advise_cli(capsys, "--model", str(path), "--seq", "16384", "--gpu", "a100-80gb")
    r = out["remedies"][0]
    model, w = _workload_of(r["url_query"])
    assert "model=config" in r["url_query"] and model == load_model("qwen3-8b").spec.model_copy(
        update={"name": model.name})
    assert estimate(model, w).peak_allocated_bytes == r["peak_allocated_bytes"]


def test_op_level_checkpointing_is_advised_to_recompute_fully():
    """torchtitan's op-level selective checkpointing (recompute "op") sits where selective does in the recompute
    order: its advice offers full recompute, which lowers the peak (a link with rc=op raised in the remedies)."""
    m = load_model("llama-3.1-8b").spec
    w = Workload(recompute="op", finetune="lora", gpu="h100-sxm", seq_len=16384, micro_batch=4)
    adv = advise(m, w)
    change = [r for r in adv.remedies if r.change == "recompute op → full"]
    assert len(change) == 1 and change[0].saved_bytes > 0
    assert not any("→ selective" in r.change for r in adv.remedies)
