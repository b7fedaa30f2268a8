"""The planner: parallel layouts that fit, at a given GPU count or the fewest, ranked by the documented key."""
import json
import time

import pytest

from calculator import Workload, estimate
from calculator.core.workload import Parallelism
from calculator.cli.main import main
from calculator.core.errors import InputError
from calculator.planning.planner import RANK_KEY, RANK_TEXT, RECOMPUTE_COST, fewest_gpus, plans_for
from calculator.planning.grid import uneven_split, workload_of
from calculator.model.presets import get_gpu, load_model

H100 = get_gpu("h100-sxm").memory_bytes
H200 = get_gpu("h200").usable_bytes


def test_every_plan_fits_the_safe_band_and_reproduces_with_estimate():
    m = load_model("llama-3.1-8b").spec
    w = Workload(seq_len=8192)
    plans = plans_for(m, w, 8, H100)
    assert plans
    for p in plans:
        assert p.tp * p.pp * p.dp * p.cp == 8 and p.utilization <= 0.8 and p.fits
        again = estimate(m, workload_of(w, p.layout), with_fits=False)
        assert again.total_bytes == p.total_bytes


def test_the_search_varies_context_parallel_zero_recompute_and_micro_batch():
    m = load_model("llama-3.1-8b").spec
    plans = plans_for(m, Workload(seq_len=8192, micro_batch=4), 8, H100)
    assert {p.cp for p in plans} >= {1, 2, 4, 8}
    assert {p.zero for p in plans} == {0, 1, 2, 3}
    assert {p.recompute for p in plans} == {"none", "selective", "full"}
    assert {p.micro_batch for p in plans} == {1, 2, 4}


def sort_key(p):
    """RANK_KEY written out: fits, fewest GPUs, largest micro-batch, least recompute, lowest memory."""
    return (not p.fits, p.gpus, -p.micro_batch, RECOMPUTE_COST[p.recompute], p.total_bytes)


def test_llama_70b_on_64_gpus_lists_layouts_in_the_documented_order():
    assert RANK_TEXT["memory"].startswith("fits, then fewest GPUs, then largest micro-batch, then least recompute")
    m = load_model("llama-3.1-70b").spec
    plans = plans_for(m, Workload(seq_len=4096, micro_batch=2), 64, H100, include_unfit=True, rank="memory")
    keys = [sort_key(p) for p in plans]
    assert keys == sorted(keys)
    fitting = [p for p in plans if p.fits]
    assert fitting and not plans[-1].fits  # some do not fit: listed after every one that does
    assert fitting[0].micro_batch == 2 and all(p.gpus == 64 for p in plans)
    assert len(plans) > 20  # no cap on the rows


def test_moe_plans_use_expert_parallelism():
    for name, gpus in (("deepseek-v3", 256), ("qwen3-235b-a22b", 64)):
        m = load_model(name).spec
        plans = plans_for(m, Workload(seq_len=4096, recompute="full"), gpus, H200, search="layout")
        assert any(p.ep > 1 for p in plans), name
        for p in plans:
            if p.ep > 1:
                assert m.num_experts % p.ep == 0 and (p.dp * p.cp * p.tp) % (p.ep * (p.etp or p.tp)) == 0


def test_deepseek_v3_61_layers_take_pp16_with_uneven_first_and_last_stages():
    m = load_model("deepseek-v3").spec
    assert uneven_split(61, 16) == (3, 2)  # 14 middle stages of 4 layers
    w = Workload(seq_len=4096, recompute="full", parallel={"tp": 8, "pp": 16, "dp": 2, "ep": 16, "etp": 1,
                                                          "zero": 1, "pp_first_stage_layers": 3,
                                                          "pp_last_stage_layers": 2})
    est = estimate(m, w, with_fits=False)
    assert [s.layers for s in est.stages][:2] == [(0, 3), (3, 7)] and est.stages[-1].layers == (59, 61)
    with pytest.raises(InputError, match="pp_first_stage_layers"):
        estimate(m, w.model_copy(update={"parallel": w.parallel.model_copy(update={"pp_last_stage_layers": 3})}))
    with pytest.raises(InputError, match="pp"):
        estimate(m, Workload(parallel={"pp": 16}))


def test_uneven_stages_equal_even_ones_where_they_coincide():
    m = load_model("llama-3.1-8b").spec
    even = estimate(m, Workload(parallel={"pp": 4}), with_fits=False)
    same = estimate(m, Workload(parallel={"pp": 4, "pp_first_stage_layers": 8, "pp_last_stage_layers": 8}),
                    with_fits=False)
    assert [s.total_bytes for s in even.stages] == [s.total_bytes for s in same.stages]


def test_fewest_gpus_for_70b_training_is_more_than_one_node_and_minimal():
    m = load_model("llama-3.1-70b").spec
    w = Workload(seq_len=4096)
    plans = fewest_gpus(m, w, H100, search="layout")
    n = plans[0].gpus
    assert n > 8 and all(p.gpus == n for p in plans)
    assert plans_for(m, w, n - 8, H100, search="layout") == []  # one node fewer: nothing fits


def test_inference_of_8b_fits_one_gpu():
    m = load_model("llama-3.1-8b").spec
    plans = fewest_gpus(m, Workload(mode="infer", seq_len=8192), H100)
    assert plans[0].gpus == 1 and plans[0].tp == 1


def test_serving_plans_use_no_zero_and_no_recompute():
    m = load_model("llama-3.1-70b").spec
    plans = plans_for(m, Workload(mode="infer", seq_len=8192), 8, H100)
    assert plans and {(p.zero, p.recompute, p.cp) for p in plans} == {(0, "none", 1)}


def test_serving_engine_plans_start_and_hold_the_batch():
    m = load_model("llama-3.1-8b").spec
    w = Workload(mode="infer", engine="vllm", seq_len=8192, micro_batch=16, gpu="h100-sxm")
    plans = fewest_gpus(m, w, H100)
    assert plans and plans[0].gpus == 1
    est = estimate(m, workload_of(w, plans[0].layout), with_fits=False)
    assert est.serving.starts and est.serving.max_concurrent_seqs >= 16


def test_rl_is_refused_with_a_message():
    m = load_model("llama-3.1-8b").spec
    with pytest.raises(InputError, match="mode"):
        plans_for(m, Workload(mode="rl"), 8, H100)


def test_cli_plan_json(capsys):
    assert main(["plan", "--model", "llama-3.1-8b", "--mode", "infer", "--seq", "4096", "--gpu", "l4",
                 "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert plans and all(p["utilization"] <= 0.8 for p in plans) and "label" in plans[0]


def test_cli_plan_moe_and_limit(capsys):
    assert main(["plan", "--model", "qwen3-235b-a22b", "--seq", "4096", "--gpu", "h200",
                 "--gpus", "64", "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 layouts, ranked by " + RANK_KEY) and out.count("64 GPUs:") == 3


def test_cli_plan_needs_a_gpu(capsys):
    assert main(["plan", "--model", "llama-3.1-8b"]) == 2
    assert "gpu" in capsys.readouterr().err


def test_cli_uneven_stage_flags(capsys):
    assert main(["estimate", "--model", "deepseek-v3", "--pp", "16", "--pp-first-stage-layers", "3",
                 "--pp-last-stage-layers", "2", "--tp", "8", "--ep", "8", "--etp", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stages"][0]["layers"] == [0, 3] and out["stages"][-1]["layers"] == [59, 61]
    assert main(["estimate", "--model", "deepseek-v3", "--pp", "16", "--pp-first-stage-layers", "5"]) == 2


def test_gpus_needed_on_the_fit_cards_is_the_planners_layout():
    from dashboard import planner as page_planner
    from dashboard.inputs import state
    m = load_model("llama-3.1-70b").spec
    w = Workload(mode="infer", seq_len=131_072, gen_tokens=1_024, gpu="a100-40gb")
    fits = {f.gpu: f for f in estimate(m, w).fits}
    a100 = fits["a100-40gb"]
    assert a100.verdict == "does not fit" and a100.gpus_needed == 16 and a100.layout == "TP8 × PP2"
    for f in fits.values():  # real degrees only, and no ZeRO advice for serving
        par = f.layout_parallel
        if par:
            assert m.num_attention_heads % par["tp"] == 0 and par["tp"] not in (5, 6, 7, 10)
            assert par["zero"] == 0 and "ZeRO" not in f.note and f.gpus_needed == par["tp"] * par["pp"]
    # the card's link opens the calculator on that layout, which fits the A100's safe band
    values = page_planner.fit_layout_values({**state.DEFAULTS, "model": "llama-3.1-70b", "mode": "infer",
                                             "seq": 131_072, "gen": 1_024, "gpu": "a100-40gb"}, a100)
    est = state.compute(values).estimate
    assert est.total_bytes <= 0.8 * get_gpu("a100-40gb").usable_bytes
    assert [f.verdict for f in est.fits if f.gpu == "a100-40gb"] == ["fits"]


def test_a_model_deeper_than_the_planner_plans_is_refused_before_any_estimate():
    from calculator.planning.planner import MAX_PLAN_LAYERS, check_plannable
    base = load_model("llama-3.1-8b").spec
    check_plannable(base.model_copy(update={"num_hidden_layers": MAX_PLAN_LAYERS}))
    deep = base.model_copy(update={"num_hidden_layers": 10_000})
    for call in (lambda: plans_for(deep, Workload(gpu="h100-sxm"), 8, 80 * 10**9),
                 lambda: fewest_gpus(deep, Workload(gpu="h100-sxm"), 80 * 10**9)):
        start = time.perf_counter()
        with pytest.raises(InputError, match=f"num_hidden_layers: the planner lays out models of at most "
                                             f"{MAX_PLAN_LAYERS} layers .* has 10,000"):
            call()
        assert time.perf_counter() - start < 0.1


def test_pipeline_layouts_pair_with_zero_1_at_most_unless_fsdp2_is_chosen():
    """Megatron-LM and DeepSpeed pipeline with the distributed optimizer / ZeRO-1 at most; FSDP2 + PP
    (torchtitan) is searched when the stack is named."""
    m = load_model("llama-3.1-8b").spec
    default = plans_for(m, Workload(seq_len=8192), 16, H100)
    assert any(p.pp > 1 for p in default) and not any(p.pp > 1 and p.zero >= 2 for p in default)
    fsdp = plans_for(m, Workload(seq_len=8192, stack="fsdp2"), 16, H100)
    assert any(p.pp > 1 and p.zero >= 2 for p in fsdp)


def _fitting_layouts(m, w, n: int, budget: float) -> list[Parallelism]:
    """Every layout of exactly n GPUs that estimate() prices within `budget`, by brute force over the degrees
    (TP up to a node of 8, PP dividing the layers, CP 1–8, DP the rest, ZeRO 0–3; pipelines with ZeRO-1 at most,
    as Megatron-LM and DeepSpeed run them), the job's micro-batch and recompute."""
    out = []
    for tp in (1, 2, 4, 8):
        for pp in range(1, n // tp + 1):
            for cp in (1, 2, 4, 8):
                if n % (tp * pp * cp) or m.num_hidden_layers % pp:
                    continue
                dp = n // (tp * pp * cp)
                for zero in range(4 if pp == 1 else 2):
                    if zero and dp * cp == 1:
                        continue
                    par = Parallelism(tp=tp, pp=pp, dp=dp, cp=cp, zero=zero, sequence_parallel=tp > 1,
                                      num_microbatches=pp)
                    try:
                        est = estimate(m, w.model_copy(update={"parallel": par}), with_fits=False)
                    except InputError:
                        continue
                    if est.total_bytes <= budget:
                        out.append(par)
    return out


def test_training_fit_card_needs_the_fewest_gpus_a_real_layout_fits_on():
    """Llama-3.1-70B, full training at 4k on H100: the card names N GPUs and a layout; that layout, estimated,
    fits the 80% band; no layout of N/2 GPUs does (brute force over the degrees, estimate() on each)."""
    m = load_model("llama-3.1-70b").spec
    w = Workload(seq_len=4096, gpu="h100-sxm")
    card = estimate(m, w).fits_on(["h100-sxm"])[0]
    budget = 0.8 * get_gpu("h100-sxm").usable_bytes
    n, par = card.gpus_needed, card.layout_parallel
    assert card.verdict == "does not fit" and n == par["tp"] * par["pp"] * par["dp"] * par["cp"]
    assert par["recompute"] == "none" and par["micro_batch"] == 1  # the job's own, not changed
    laid = Parallelism(tp=par["tp"], pp=par["pp"], dp=par["dp"], cp=par["cp"], zero=par["zero"],
                       sequence_parallel=par["tp"] > 1, num_microbatches=par["pp"])
    assert estimate(m, w.model_copy(update={"parallel": laid}), with_fits=False).total_bytes <= budget
    assert _fitting_layouts(m, w, n, budget)
    assert not _fitting_layouts(m, w, n // 2, budget)
    degrees = [f"{k.upper()}{par[k]}" for k in ("tp", "pp", "dp", "cp") if par[k] > 1]
    assert card.layout == " × ".join(degrees) + (f", ZeRO-{par['zero']}" if par["zero"] else "")


def test_training_fit_card_says_plainly_when_no_layout_fits():
    m = load_model("llama-3.1-70b").spec
    card = estimate(m, Workload(seq_len=131_072)).fits_on(["a100-40gb"])[0]
    assert card.gpus_needed is None and not card.layout
    assert card.note.startswith("no layout of up to 4,096 of these GPUs fits the 80% safe band")


def test_fit_cards_share_estimates_across_gpus_byte_for_byte():
    """Jobs the fast byte model does not cover (LoRA here) estimate each layout once per cuBLAS workspace size and
    swap the CUDA context: equal to estimate() on each GPU."""
    from calculator.core.fit import FIT_CARD_GPUS
    from calculator.planning.prices import training_totals
    from calculator.planning.grid import Layout
    m = load_model("llama-3.1-8b").spec
    for gid in FIT_CARD_GPUS + ("v100-16gb", "l4"):
        w = Workload(seq_len=2048, finetune="lora", gpu=gid)
        for lay in (Layout(2, 1, 2, zero=1), Layout(1, 2, 2), Layout(4, 1, 1, cp=2)):
            est = estimate(m, workload_of(w, lay), with_fits=False)
            assert training_totals(m, w, lay) == (est.total_bytes, est.peak_allocated_bytes), (gid, lay)


def test_fit_cards_compute_only_the_gpus_asked_for():
    m = load_model("llama-3.1-8b").spec
    est = estimate(m, Workload(seq_len=8192, finetune="lora"))
    two = est.fits_on(["h200", "a100-40gb", "no-such-gpu"])
    assert [f.gpu for f in two] == ["h200", "a100-40gb"] and set(est.__dict__["_fits_by_gpu"]) == {"h200", "a100-40gb"}
    assert {f.gpu: f for f in est.fits}["h200"] == two[0]  # the whole catalogue agrees


def test_jobs_priced_layout_by_layout_search_a_bounded_number_of_layouts_on_a_card():
    """Without the fast byte model (LoRA, a stack you chose, ...) each layout is a full estimate(): a card searches
    up to CARD_MAX_GPUS_ESTIMATED GPUs and CARD_LAYOUT_BUDGET layouts (benchmarks/fuzz.py: DeepSeek-V3 with LoRA
    and Qwen3-235B under a named stack ran past 30 s without them); past the budget the card says so."""
    from calculator.planning.planner import CARD_LAYOUT_BUDGET, CARD_MAX_GPUS, CARD_MAX_GPUS_ESTIMATED, card_bound
    from calculator.planning.grid import Layout, layouts_of, workload_of
    m = load_model("llama-3.1-70b").spec
    assert card_bound(m, Workload()) == CARD_MAX_GPUS and card_bound(m, Workload(mode="infer")) == CARD_MAX_GPUS
    assert card_bound(m, Workload(stack="deepspeed")) == CARD_MAX_GPUS_ESTIMATED
    lora = Workload(finetune="lora", gpu="a100-80gb")
    card = estimate(m, lora).fits_on(["a100-80gb"])[0]
    assert card.gpus_needed == 8  # the layout: the fastest of the 8-GPU layouts (test_fit_cards_follow_the_ranking)
    assert estimate(m, workload_of(lora, Layout(8, 1, 1)), with_fits=False).total_bytes <= 0.8 * card.capacity_bytes
    assert not any(estimate(m, workload_of(lora, lay), with_fits=False).total_bytes <= 0.8 * card.capacity_bytes
                   for lay in layouts_of(m, lora, 4, search="layout"))
    big = load_model("deepseek-v3").spec
    start = time.perf_counter()
    cards = estimate(big, Workload(finetune="lora")).fits
    assert time.perf_counter() - start < 5  # was 33 s
    h100 = {f.gpu: f for f in cards}["h100-sxm"]
    assert h100.gpus_needed is None and "Planner page" in h100.note and CARD_LAYOUT_BUDGET == 200


def test_fit_cards_of_a_model_too_deep_to_plan_search_nothing():
    from calculator.planning.planner import MAX_PLAN_LAYERS
    deep = load_model("llama-3.1-8b").spec.model_copy(update={"num_hidden_layers": MAX_PLAN_LAYERS + 1})
    start = time.perf_counter()
    card = estimate(deep, Workload(seq_len=1024)).fits_on(["h100-sxm"])[0]
    assert card.gpus_needed is None and "256 layers" in card.note and time.perf_counter() - start < 5


@pytest.mark.parametrize("model_id,w", [
    ("qwen3-32b", Workload(mode="infer", engine="vllm", seq_len=32768, gpu="h100-sxm")),
    ("qwen3-30b-a3b", Workload(mode="infer", engine="sglang", seq_len=8192, gpu="h100-sxm")),
])
def test_serving_plans_equal_estimate_layout_by_layout(model_id, w):
    """The planner prices a serving engine once per replica shape (DP replicas are independent engines): every
    plan, whatever its replicas, carries the bytes and concurrency estimate() gives its own layout."""
    from calculator.planning.grid import layouts_of
    from calculator.planning.planner import evaluate
    m = load_model(model_id).spec
    layouts = [lay for n in (1, 2, 4, 8, 16) for lay in layouts_of(m, w, n)]
    plans = evaluate(m, w, layouts, H100, include_unfit=True)
    assert len({p.dp for p in plans}) > 1
    for p in plans:
        est = estimate(m, workload_of(w, p.layout), with_fits=False)
        assert (p.total_bytes, p.peak_allocated_bytes, p.max_seqs) == (
            est.total_bytes, est.peak_allocated_bytes, est.serving.max_concurrent_seqs), p.layout


def test_generate_plans_of_a_model_the_fast_model_skips_reproduce_estimate_at_every_dp():
    """Gemma 4 (KV-shared layers: a kind the fast model does not price) generate() is planned by one estimate() per
    replica shape: over a grid of 4, 8 and 16 GPUs a DP-2 or DP-4 layout keeps the data-parallel communicator's
    buffer its DP-1 twin lacks (the DP-1 estimate was reused for them, 500 MB low)."""
    from calculator.planning import fast
    from calculator.planning.grid import layouts_of
    from calculator.planning.planner import evaluate
    m = load_model("gemma-4-26b-a4b").spec
    w = Workload(mode="infer", seq_len=8192, gpu="h100-sxm")
    assert not fast.covers(m, w)
    layouts = [lay for n in (4, 8, 16) for lay in layouts_of(m, w, n) if lay.ep == 1]
    plans = evaluate(m, w, layouts, get_gpu("h100-sxm").usable_bytes, include_unfit=True)
    assert {p.dp for p in plans} >= {1, 2, 4}
    for p in plans:
        assert p.total_bytes == estimate(m, workload_of(w, p.layout), with_fits=False).total_bytes
