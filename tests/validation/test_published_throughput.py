"""The step-time model against published multi-GPU training throughput (validation/published/throughput/): every
collected row is compared or named with the reason the engine cannot express it, each keeps its source and quote,
and the errors stay where issue 23's work brought them — on the rows the GEMM efficiencies were fitted on and on
the sources they never saw — while the one-GPU H200 steps stay within 10% median."""
import pytest

from validation.published import throughput as tp
from validation.published.throughput.rows import FIT_GROUPS, read_rows


@pytest.fixture(scope="module")
def compared():
    cases, skipped = tp.load()
    results, refused = tp.evaluate(cases)
    return cases, results, skipped + refused


def test_every_row_is_compared_or_named_with_a_reason(compared):
    cases, results, skipped = compared
    rows = read_rows()
    assert len(rows) == 392 and all(r["source"].strip() and r["quote"].strip() for r in rows)
    assert len(results) + len(skipped) == len(rows)
    assert all(s.reason for s in skipped)
    assert len(results) >= 170


def test_the_fit_and_the_held_out_sources(compared):
    _, results, _ = compared
    s = tp.summary(results)
    assert {r.case.group for r in results if r.case.fit} == set(FIT_GROUPS)
    held = {r.case.group for r in results if not r.case.fit}
    assert {"nemo-long-sequence", "nemo-24.07-perf-summary", "torchtitan-benchmarks"} <= held
    n, median, worst, signed = s["fit"]
    assert n >= 120 and median < 9.0 and worst < 70 and abs(signed) < 4
    n, median, worst, signed = s["held out"]
    # 12.5 -> 10.0 (issue 23's median target): the softmax's exponentials priced at the SFUs' rate
    # (calculator.timing.efficiency.exp_rate) took the held-out median from 12.4% to 9.2%
    assert n >= 40 and median < 10.0 and worst < 65
    assert s["nemo-long-sequence"][1] < 5.5  # context parallelism at 4K–1M tokens, held out
    # the B200 CP rows at 32K–256K tokens were 12–26% fast with one attention efficiency for B200 and B300 / GB300;
    # with B200's SFU at half Blackwell Ultra's they are within 10% (worst 26.3% -> 9.7%)
    assert s["nemo-long-sequence"][2] < 12.5
    # torchtitan's float8 Llama-3.1-8B on 32 / 64 H200 with op AC: every float8 GEMM replayed (train_ops.op_mode,
    # aten._scaled_mm is not in the save list): 20.3% -> 15.3% worst
    assert s["torchtitan-benchmarks"][2] < 17.5


def test_gb200_rows_are_a_check_the_constants_never_saw(compared):
    """GB200 joined the catalogue after the GEMM efficiencies were fitted: its rows (Megatron-Bridge's tables
    included) stay out of the fit and are summarised apart ("added after the fit"), with B200's Blackwell constants and
    the switches its own recipes turned on (recipes.py: per-layer MoE router graphs from NeMo 25.11, the full-iteration
    graph and EP overlap of 26.06's MXFP8 recipes, GPT-OSS's EP overlap from 26.04). The bounds are what the rows
    reach: dense Llama / GPT / Nemotron FP8 runs read 3–31% fast; without those switches the MoE runs were up to
    126% slow (Qwen3-235B's 26.06 MXFP8 run, +126% -> −14%; Qwen3-30B's 26.04 run, +34% -> −0.5%)."""
    _, results, _ = compared
    gb200 = {r.case.id: r for r in results if r.case.workload.gpu == "gb200"}
    assert len(gb200) >= 60 and not any(r.case.fit for r in gb200.values())
    added = [r for r in results if r.case.workload.gpu == "gb200" or "Nemotron_3" in r.case.label]
    n, median, worst, _ = tp.summary(results)["added after the fit"]
    assert n == len(added) and median < 16.0 and worst < 45
    dense = [r.error_pct for r in gb200.values() if not r.case.model.is_moe]
    assert len(dense) >= 25 and all(-32 < e < 0 for e in dense)
    assert gb200["T0010"].case.timing.full_iteration_cuda_graph and abs(gb200["T0010"].error_pct) < 16
    assert gb200["T0144"].case.timing.moe_router_cuda_graph and abs(gb200["T0144"].error_pct) < 2


def test_nemotron_3_nano_runs_held_out_with_its_recipes_router_graphs(compared):
    """Nemotron-3 Nano (hybrid Mamba-2 / attention MoE, the nemotron-3-nano-30b-a3b preset), never in the fit: its
    Blackwell recipes capture the MoE router in per-layer CUDA graphs (recipes.py), H100's do not. What the rows
    reach: H100 within 7%; every Blackwell row 20-31% fast, compute-bound (the Mamba-2 layers' chunked scan priced at
    Blackwell's peaks, which its kernels do not reach: not calibrated, no per-kernel measurement here)."""
    _, results, _ = compared
    nano = [r for r in results if "Nemotron_3_Nano" in r.case.label]
    assert len(nano) == 20 and not any(r.case.fit for r in nano)
    hopper = [r for r in nano if r.case.workload.gpu == "h100-sxm"]
    assert len(hopper) == 4 and all(abs(r.error_pct) < 7 and not r.case.timing.moe_router_cuda_graph for r in hopper)
    blackwell = [r for r in nano if r.case.workload.gpu != "h100-sxm"]
    assert all(r.case.timing.moe_router_cuda_graph and -31 < r.error_pct < -20 for r in blackwell)


def test_a_context_parallel_group_inside_a_node():
    """Llama-2-7B at 32K tokens on 32 H100 (NeMo's long-context table: TP2 × CP2 × DP8, the CP pair inside a node),
    held out, its step time from NeMo's own non-causal FLOP count: within 5%."""
    case = next(c for c in tp.load()[0] if c.id == "T0302")
    (result,), _ = tp.evaluate([case])
    assert case.workload.parallel.cp == 2 and abs(result.error_pct) < 5


def test_the_long_context_step_time_uses_nemos_non_causal_flop_count():
    """NeMo's flops_formulas.llama2 / llama3 (nemo/utils/flops_formulas.py as of the 25.04 tables) count the
    attention term 12·s/h, not halved for the causal mask: a 1M-token Llama-2-7B step is then within 10%."""
    from validation.published.throughput.rows import nemo_llama_flops
    case = next(c for c in tp.load()[0] if c.id == "T0307")
    m, s = case.model, case.workload.seq_len
    per_token = nemo_llama_flops(m, 1, s) / s
    L, h = m.num_hidden_layers, m.hidden_size
    assert per_token - nemo_llama_flops(m, 1, 1) == pytest.approx(L * h * h * 12 * (s - 1) / h)
    (result,), _ = tp.evaluate([case])
    assert abs(result.error_pct) < 10


def test_the_recipes_switches_are_read_per_release():
    """Megatron-Bridge's 26.06 MXFP8 GB300 recipes run the whole iteration as one CUDA graph with the EP
    all-to-alls overlapped; the 26.04 ones with neither (validation/published/throughput/recipes.py)."""
    cases = {c.id: c for c in tp.load()[0]}
    assert cases["T0051"].timing.full_iteration_cuda_graph and cases["T0051"].timing.ep_comm_overlap
    assert not cases["T0148"].timing.full_iteration_cuda_graph and not cases["T0148"].timing.ep_comm_overlap
    assert cases["T0106"].timing.ep_comm_overlap  # Qwen3-235B on H100: moe_a2a_overlap=True
    assert cases["T0372"].timing.ep_comm_overlap is False and cases["T0373"].timing.ep_comm_overlap


def test_the_one_gpu_h200_steps_stay_within_10_percent_median():
    from validation.gpu import timing_compare as tc
    s = tc.summary(tc.comparisons())
    assert s["fit"]["median_abs_error"] < 0.10 and s["unseen (other models)"]["median_abs_error"] < 0.10


def test_a_figure_its_source_flags_as_a_regression_is_named_not_compared(compared):
    """T0021 (GPT-OSS 120B, 64 GB300, NeMo 26.06.01: 20,288 tokens/s/GPU) carries the table's [^gpt-oss-note], "a
    known issue ... resolved with the next container release"; the same layout at 26.06 and 26.08 is compared."""
    _, results, skipped = compared
    reasons = {s.id: s.reason for s in skipped}
    assert "cudnn-frontend#256" in reasons["T0021"]
    compared_ids = {r.case.id for r in results}
    assert {"T0005", "T0044"} <= compared_ids
