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
