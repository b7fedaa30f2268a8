"""Which published MoE rows ran Megatron's per-layer CUDA graphs of the router and the dispatcher's preprocess
(validation/published/throughput/recipes.py, moe_layer_graph), read from the recipe of the row's release."""
from validation.published import throughput as tp
from validation.published.throughput.recipes import moe_layer_graph
from validation.published.throughput.rows import read_rows


def test_the_per_layer_moe_graphs_follow_the_recipes():
    rows = {r["row_id"]: r for r in read_rows()}
    assert moe_layer_graph(rows["T0371"], "h100") == (True, "printed")  # "TE CUDA graphs moe_router+moe_preprocess"
    assert moe_layer_graph(rows["T0372"], "h100")[0]  # the same card's EP-overlap A/B runs
    assert moe_layer_graph(rows["T0092"], "gb300")[0]  # GPT_OSS_120B_PRETRAIN_CONFIG_GB300_BF16_V1 (26.04.01)
    assert moe_layer_graph(rows["T0241"], "gb300")[0]  # v0.2.0 QWEN3_235B_A22B_GB300_BF16_BASE_CONFIG (25.11)
    assert not moe_layer_graph(rows["T0253"], "b200")[0]  # GPT_OSS_120B_B200_BF16_BASE_CONFIG: no graph
    assert not moe_layer_graph(rows["T0050"], "h100")[0]  # QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1: none
    assert not moe_layer_graph(rows["T0387"], "h100")[0]  # Moonlight's recipe: cuda_graph_impl="none"


def test_gb200_rows_run_their_own_recipes_switches():
    """GB200's workload configs (Megatron-Bridge v0.2.0 … v0.5.0), not GB300's: per-layer router graphs in every
    DeepSeek-V3 / Qwen3 MoE config, none in GPT-OSS's; 26.06's MXFP8 configs the full-iteration graph with the EP
    overlap; GPT-OSS's BF16 V2 the EP overlap from 26.04."""
    from validation.published.throughput.recipes import recipe_switches
    rows = {r["row_id"]: r for r in read_rows()}
    assert moe_layer_graph(rows["T0245"], "gb200")[0]  # 25.11 DeepSeek-V3 BF16 (v0.2.0: moe_router, moe_preprocess)
    assert moe_layer_graph(rows["T0149"], "gb200")[0]  # 26.04 QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2
    assert not moe_layer_graph(rows["T0139"], "gb200")[0]  # GPT-OSS on GB200: no CUDA graph (GB300's has one)
    assert recipe_switches(rows["T0010"], "gb200", {"pp": 8, "vp": 3, "ep": 32, "mbs": 1})[:2] == (True, True)
    assert recipe_switches(rows["T0103"], "gb200", {"pp": 8, "vp": 3, "ep": 32, "mbs": 1})[:2] == (False, False)
    assert recipe_switches(rows["T0139"], "gb200", {"pp": 1, "vp": 1, "ep": 64, "mbs": 4})[:2] == (True, False)
    assert recipe_switches(rows["T0183"], "gb200", {"pp": 1, "vp": 1, "ep": 64, "mbs": 4})[:2] == (False, False)


def test_the_cases_carry_the_switch():
    cases = {c.id: c for c in tp.load()[0]}
    assert cases["T0371"].timing.moe_router_cuda_graph and cases["T0219"].timing.moe_router_cuda_graph
    assert not cases["T0005"].timing.moe_router_cuda_graph  # 26.08 MXFP8: the full-iteration graph instead
    assert not cases["T0064"].timing.moe_router_cuda_graph  # dense


def test_a_misprinted_layout_runs_as_its_release_recipe():
    """T0167 (NeMo 26.02.01 ↔ Megatron-Bridge v0.3.1): the table prints PP4, VP n/a, micro-batch 2; the release's
    LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 sets PP4 VP5 and keeps WorkloadBaseConfig's micro_batch_size=1."""
    from validation.published.throughput.recipes import recipe_layout
    rows = {r["row_id"]: r for r in read_rows()}
    printed = {"pp": 4, "vp": 1, "mbs": 2, "gbs": 256}
    assert recipe_layout(rows["T0167"], "gb300", printed)[0] == {"vp": 5, "mbs": 1}
    assert recipe_layout(rows["T0203"], "gb300", {"pp": 4, "vp": 5, "mbs": 1, "gbs": 256}) == ({}, "")  # as printed
    assert recipe_layout(rows["T0169"], "gb300", {"pp": 1, "vp": 1, "mbs": 2, "gbs": 256}) == ({}, "")  # FSDP row
    case = {c.id: c for c in tp.load()[0]}["T0167"]
    par = case.workload.parallel
    assert (par.schedule, par.virtual_stages, case.workload.micro_batch, par.num_microbatches) == (
        "interleaved", 5, 1, 16)  # 256 / (1 × DP16)


def test_the_25_11_qwen3_30b_h100_row_runs_its_release_layout():
    """T0260 (NeMo 25.11 ↔ v0.2.0): QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG is PP2 VP12 EP8 at GBS 512 with
    WorkloadBaseConfig's micro-batch 1 where the table prints VP24 and micro-batch 2: 512 / (1 × DP8) = 64
    micro-batches, the EP overlap on (moe_a2a_overlap=True)."""
    par = {c.id: c for c in tp.load()[0]}["T0260"].workload.parallel
    case = {c.id: c for c in tp.load()[0]}["T0260"]
    assert (par.pp, par.virtual_stages, par.ep, case.workload.micro_batch, par.num_microbatches) == (2, 12, 8, 1, 64)
    assert case.timing.ep_comm_overlap


def test_rows_whose_release_ran_another_expert_layout_run_it():
    """T0253 (NeMo 25.11 ↔ v0.2.0): GPT_OSS_120B_B200_BF16_BASE_CONFIG set EP64 where the table prints EP8 (the
    26.04 rows T0095 / T0141 ran EP8, v0.4.0's ..._B200_BF16_V2); T0191 (26.02.01 ↔ v0.3.1):
    QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 is PP1 EP16 without the EP overlap where the table repeats 26.02's
    PP2 VP12 EP8 (T0228, which keeps it)."""
    cases = {c.id: c for c in tp.load()[0]}
    assert cases["T0253"].workload.parallel.ep == 64 and cases["T0095"].workload.parallel.ep == 8
    par = cases["T0191"].workload.parallel
    assert (par.pp, par.virtual_stages, par.ep, par.dp, par.num_microbatches) == (1, 1, 16, 16, 64)
    assert not cases["T0191"].timing.ep_comm_overlap  # the PP2 rule (moe_a2a_overlap=True) no longer matches
    assert cases["T0228"].workload.parallel.pp == 2 and cases["T0228"].timing.ep_comm_overlap


def test_the_moonlight_sweep_runs_its_recipe_and_its_printed_modules():
    """Moonlight-16B (skills card, bridge 600d069b moonlight_16b_pretrain_8gpu_h100_bf16_config): the alltoall
    dispatcher, no TP overlap, and each run's --recompute-modules as printed, less the ones the engine does not
    price (layernorm, mla_up_proj)."""
    from validation.published.throughput.recipes import selective_modules
    assert selective_modules("selective []") == () and selective_modules("not stated") is None
    assert selective_modules("selective ['layernorm','moe_act']") == ("moe_act",)
    assert selective_modules("selective ['mla_up_proj', 'mlp']") == ("mlp",)
    cases = {c.id: c for c in tp.load()[0]}
    control, attn = cases["T0387"], cases["T0388"]
    assert control.workload.moe_dispatcher == "alltoall" and not control.timing.tp_comm_overlap
    assert (control.workload.recompute, control.workload.recompute_modules) == ("selective", ())
    assert attn.workload.recompute_modules == ("core_attn",)
    assert cases["T0371"].workload.moe_dispatcher == "flex"  # the Qwen3-30B card prints HybridEP


def test_deepseek_on_gb300_at_25_11_runs_the_recipes_sixteen_stage_layout():
    """T0237 / T0238 (NeMo 25.11, printed PP2 VP4): v0.2.0's GB300 recipe sets layout_map[(4, 4)], 16 stages of
    E + 4t | 4t × 14 | t + L, which Megatron-Core runs at PP2 as 8 virtual stages a rank."""
    cases = {c.id: c for c in tp.load()[0]}
    for rid in ("T0237", "T0238"):
        par = cases[rid].workload.parallel
        assert (par.pp, par.virtual_stages, par.schedule) == (2, 8, "interleaved")
        assert par.pp_layout == "Et*4|(t*4|)*14tL"  # w/o MTP: the layout's 'm' dropped
    res, _ = tp.evaluate([cases["T0237"]])
    assert res[0].note == ""  # runs as the recipe laid it out, not the harness's 1F1B fallback
