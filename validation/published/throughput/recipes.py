"""What Megatron-Bridge's performance recipes turned on for a published row, beyond its printed layout: the EP
all-to-all overlap (moe_a2a_overlap → Megatron's --overlap-moe-expert-parallel-comm), the full-iteration CUDA
graph (cuda_graph_impl="full_iteration", with the sync-free MoE dispatch it needs) and the per-layer CUDA graphs
of the MoE router and preprocess (cuda_graph_impl="transformer_engine", cuda_graph_scope with "moe_router" and
"moe_preprocess": MOE_GRAPH_RULES, moe_layer_graph).

Each rule is read from the workload configs of the Megatron-Bridge release the row's container shipped
(github.com/NVIDIA-NeMo/Megatron-Bridge, scripts/performance/configs/<family>/*workload_base_configs.py at the tag
named), matched on the row's model, system, precision and printed layout; a row no rule matches ran with neither.
The container ↔ tag pairing: NeMo 25.09 / 25.11 ↔ v0.2.0, 26.02 / 26.02.01 ↔ v0.3.0 / v0.3.1, 26.04 / 26.04.01 ↔
v0.4.0 / v0.4.2, 26.06 and later ↔ v0.5.0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    model: str  # pattern on the lower-cased model name
    system: str  # GPU key (rows.GPUS)
    first: tuple[int, ...]  # first container (year, month[, patch]) it applies to
    last: tuple[int, ...] | None  # last one (None: every later one)
    ep_overlap: bool
    full_graph: bool
    layout: dict  # printed degrees it requires (pp, vp, ep, mbs; absent: any)
    precision: str = ""  # pattern on the lower-cased precision ("": any)
    source: str = ""


RULES: tuple[Rule, ...] = (
    # v0.2.0 deepseek/workload_base_configs.py DEEPSEEK_V3_H100_BASE_CONFIG: "moe_a2a_overlap=True",
    # "moe_flex_dispatcher_backend='deepep'", pp_layout "Et|(tt|)*30mL"
    Rule(r"deepseek", "h100", (25, 9), (25, 11), True, False, {}, source="v0.2.0 DEEPSEEK_V3_H100_BASE_CONFIG"),
    # v0.2.0 qwen3/workload_base_configs.py QWEN3_235B_A22B_H100_{BF16,FP8_CS}_BASE_CONFIG and v0.3.0 / v0.3.1
    # qwen/qwen3_workload_base_configs.py QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V1 / V2: moe_a2a_overlap=True
    Rule(r"235b", "h100", (25, 11), None, True, False, {"pp": 8, "vp": 4}, source="QWEN3_235B_A22B_*_H100_*"),
    # v0.2.0 QWEN3_30B_A3B_H100_*_BASE_CONFIG and v0.3.0 QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 (PP2, VP12,
    # EP8): moe_a2a_overlap=True; the PP1 EP16 layout of 26.04 on (v0.3.1 ..._H100_FP8_CS_V1) turned it off
    Rule(r"30b", "h100", (25, 11), None, True, False, {"pp": 2}, source="QWEN3_30B_A3B_*_H100_*"),
    # v0.4.2 deepseek/deepseek_workload_base_configs.py DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (PP8 VP2 EP32,
    # deepep): moe_a2a_overlap=True
    Rule(r"deepseek", "b200", (26, 4), None, True, False, {"pp": 8, "vp": 2, "ep": 32},
         source="v0.4.2 DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2"),
    # v0.3.0 qwen/qwen3_workload_base_configs.py QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2 (PP8 VP4 EP8):
    # moe_a2a_overlap=True
    Rule(r"235b", "b300", (26, 2), (26, 2, 1), True, False, {"pp": 8, "vp": 4},
         source="v0.3.0 QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2"),
    # v0.5.0 (26.06): the MXFP8 GB300 recipes of DeepSeek-V3, Qwen3-235B, Qwen3-30B and GPT-OSS and the MXFP8 B300
    # Qwen3-30B one: cuda_graph_impl="full_iteration", moe_a2a_overlap=True (DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_
    # FP8_MX_V1/V2, QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2, QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1,
    # GPT_OSS_120B_PRETRAIN_CONFIG_GB300_FP8_MX_V2, QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1)
    Rule(r"deepseek|235b|30b|gpt oss", "gb300", (26, 6), None, True, True, {}, "mx", "v0.5.0 *_GB300_FP8_MX_*"),
    Rule(r"30b", "b300", (26, 6), None, True, True, {}, "mx", "v0.5.0 QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1"),
    # GB200 (its configs read at v0.2.0, v0.2.2, v0.3.0, v0.3.1, v0.4.0, v0.4.2 and v0.5.0; the default variant V2
    # where one exists): v0.5.0's MXFP8 recipes run cuda_graph_impl="full_iteration" with moe_a2a_overlap=True —
    # deepseek/deepseek_workload_base_configs.py DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V1 (L98-L104) and _V2
    # (L209), qwen/qwen3_workload_base_configs.py QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 (L388-L397) and
    # QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 (L229-L236: the 256-GPU EP32 one; V1 keeps per-layer graphs),
    # gpt_oss/gpt_oss_workload_base_configs.py GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 (L211-L220)
    Rule(r"235b", "gb200", (26, 6), None, True, True, {"ep": 32}, "mx",
         "v0.5.0 QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    Rule(r"deepseek|30b|gpt oss", "gb200", (26, 6), None, True, True, {}, "mx", "v0.5.0 *_GB200_FP8_MX_*"),
    # v0.4.0, v0.4.2 and v0.5.0 GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2: moe_a2a_overlap=True (v0.5.0 L177), no
    # CUDA graph (v0.3.x's V2 and every V1 leave the overlap off)
    Rule(r"gpt oss", "gb200", (26, 4), None, True, False, {}, "", "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2"),
)


def container(version: str) -> tuple[int, ...] | None:
    """(year, month[, patch]) of a "NeMo 26.04.01" container; None when the row names none."""
    m = re.search(r"NeMo\s*(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if not m:
        return None
    return tuple(int(x) for x in m.groups() if x is not None)


def recipe_switches(row: dict, gpu_key: str, layout: dict) -> tuple[bool, bool, str]:
    """(EP all-to-all overlap, full-iteration CUDA graph, the rule's source) of a Megatron-Bridge row."""
    when = container(row.get("framework_version", ""))
    if when is None or row.get("source_group") != "megatron-bridge-perf-summary":
        return False, False, ""
    low, prec = row["model"].lower(), row["precision"].lower()
    for rule in RULES:
        if (rule.system != gpu_key or not re.search(rule.model, low) or when < rule.first
                or (rule.last is not None and when[:len(rule.last)] > rule.last)
                or (rule.precision and rule.precision not in prec)
                or any(layout.get(k) != v for k, v in rule.layout.items())):
            continue
        return rule.ep_overlap, rule.full_graph, rule.source
    return False, False, ""


@dataclass(frozen=True)
class GraphRule:
    """A recipe that captured the MoE router and the dispatcher's preprocess in per-layer CUDA graphs."""

    group: str  # source group
    model: str  # pattern on the lower-cased model name
    system: str  # pattern the GPU key (rows.GPUS) must match whole
    first: tuple[int, ...] | None  # first container (None: the row names none, a skills card)
    last: tuple[int, ...] | None  # last one (None: every later one)
    precision: str  # pattern on the lower-cased precision ("": any)
    layout: dict  # printed degrees it requires (pp, vp, ep, mbs; absent: any)
    source: str


PERF = "megatron-bridge-perf-summary"
# Each from the workload configs of the release (scripts/performance/configs/<family>/*workload_base_configs.py,
# MXFP8 names aliased to the FP8_CS config where the file says so), the V1 / V2 variant whose layout the row prints:
# cuda_graph_impl="transformer_engine" with "moe_router" and "moe_preprocess" in cuda_graph_scope.
MOE_GRAPH_RULES: tuple[GraphRule, ...] = (
    # v0.2.0 GPT_OSS_120B_GB300_BF16_BASE_CONFIG, v0.3.0 … v0.4.2 GPT_OSS_120B_PRETRAIN_CONFIG_GB300_BF16_V1 / V2,
    # v0.3.0 … v0.4.2 GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V1 / V2: ["attn", "moe_router", "moe_preprocess"]
    GraphRule(PERF, r"gpt oss", "gb300", (25, 11), (26, 4, 1), "bf16", {}, "GPT_OSS_120B_*_GB300_BF16_*"),
    GraphRule(PERF, r"gpt oss", "b300", (26, 2), (26, 4, 1), "bf16", {}, "GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_*"),
    # v0.5.0 GPT_OSS_120B_PRETRAIN_CONFIG_B300_FP8_MX_V2 (EP8): ["attn", "moe_router", "moe_preprocess"]
    GraphRule(PERF, r"gpt oss", "b300", (26, 6), None, "mx", {"ep": 8}, "v0.5.0 GPT_OSS_120B_*_B300_FP8_MX_V2"),
    # v0.2.0 QWEN3_30B_A3B_{GB300,B200}_FP8_MX_BASE_CONFIG = ..._FP8_CS_BASE_CONFIG, v0.3.0 … v0.4.2
    # QWEN3_30B_A3B_PRETRAIN_CONFIG_{GB300,B300,B200}_FP8_MX_V1 = ..._FP8_CS_V1: ["moe_router", "moe_preprocess"]
    # (B200 from v0.3.1: with "attn")
    GraphRule(PERF, r"30b", "gb300|b300|b200", (25, 11), (26, 4, 1), "mx", {}, "QWEN3_30B_A3B_*_FP8_MX_* = *_FP8_CS_*"),
    # v0.2.0 QWEN3_235B_A22B_GB300_BF16_BASE_CONFIG: ["moe_router", "moe_preprocess"]
    GraphRule(PERF, r"235b", "gb300", (25, 11), (25, 11), "bf16", {}, "v0.2.0 QWEN3_235B_A22B_GB300_BF16_BASE_CONFIG"),
    # v0.3.0 … v0.4.2 QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 = ..._FP8_CS_V2 (PP4, EP32):
    # ["attn", "moe_router", "moe_preprocess"]
    GraphRule(PERF, r"235b", "gb300", (26, 2), (26, 4, 1), "mx", {"pp": 4, "ep": 32},
              "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2"),
    # v0.2.0 DEEPSEEK_V3_GB300_{BF16,FP8_MX}_BASE_CONFIG = DEEPSEEK_V3_GB300_BASE_CONFIG:
    # ["attn", "moe_router", "moe_preprocess"]
    GraphRule(PERF, r"deepseek", "gb300", (25, 11), (25, 11), "", {}, "v0.2.0 DEEPSEEK_V3_GB300_BASE_CONFIG"),
    # v0.4.2 / v0.5.0 DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX_V2 (PP8, micro-batch 2) and B200_FP8_MX_V2 (PP8 VP2
    # EP32): ["attn", "moe_router", "moe_preprocess"]
    GraphRule(PERF, r"deepseek", "b300", (26, 4, 1), None, "mx", {"pp": 8, "mbs": 2},
              "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX_V2"),
    GraphRule(PERF, r"deepseek", "b200", (26, 4, 1), None, "mx", {"pp": 8, "vp": 2, "ep": 32},
              "v0.4.2 DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2"),
    # GB200: every DeepSeek-V3, Qwen3-235B-A22B and Qwen3-30B-A3B workload config from v0.2.0 (NeMo 25.11) to v0.5.0
    # sets cuda_graph_impl="transformer_engine" with "moe_router" and "moe_preprocess" in cuda_graph_scope ("attn"
    # too, but at DeepSeek's v0.2.x): e.g. v0.3.0 DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_V1 (L82-L83), v0.4.2
    # QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_CS_V2 (L103-L104), v0.2.0 QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG
    # (L198-L199); the v0.5.0 MXFP8 ones run the full-iteration graph instead (RULES); GPT-OSS's GB200 configs set none
    GraphRule(PERF, r"deepseek|235b|30b", "gb200", (25, 11), None, "", {}, "*_GB200_* (v0.2.0 … v0.5.0)"),
    # Nemotron-3 Nano: v0.3.1 nemotronh/nemotron_3_nano_workload_base_configs.py and v0.4.0 … v0.5.0
    # nemotronh/nemotron_3_workload_base_configs.py, the base config (L31-L40): cuda_graph_impl="transformer_engine",
    # cuda_graph_scope ["attn", "mamba", "moe_router", "moe_preprocess"] on GB300, GB200, B300 and B200 (every other
    # precision an alias of BF16's; no full-iteration graph, no EP overlap); H100's keep the router out (L78-L87)
    GraphRule(PERF, r"nemotron_3_nano", "gb300|gb200|b300|b200", (26, 2, 1), None, "", {},
              "v0.3.1 … v0.5.0 NEMOTRON_3_NANO_PRETRAIN_CONFIG_*"),
    # skills/nemo-mbridge-perf-moe-hardware-configs/card.yaml qwen3_30b_h100_16 (and its earlier_overlap_ab runs):
    # cuda_graph: "moe_router, moe_preprocess" (the v0.3.1+ QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_BF16_V1 scope)
    GraphRule("megatron-bridge-skills", r"qwen3 30b", "h100", None, None, "bf16", {}, "card.yaml qwen3_30b_h100_16"),
)


def moe_layer_graph(row: dict, gpu_key: str, layout: dict | None = None) -> tuple[bool, str]:
    """(whether the row's recipe captured the MoE router and preprocess in per-layer CUDA graphs, the rule's
    source); a row that prints "CUDA graphs moe_router" says so itself. `layout`: the printed pp, vp, ep, mbs."""
    if re.search(r"cuda graphs? moe_router", row.get("other_settings", "").lower()):
        return True, "printed"
    when = container(row.get("framework_version", ""))
    low, prec = row["model"].lower(), row["precision"].lower()
    for rule in MOE_GRAPH_RULES:
        if (rule.group != row.get("source_group") or not re.fullmatch(rule.system, gpu_key)
                or not re.search(rule.model, low) or not re.search(rule.precision, prec)
                or any((layout or {}).get(k) != v for k, v in rule.layout.items())):
            continue
        if rule.first is not None and (when is None or when < rule.first
                                       or (rule.last is not None and when[:len(rule.last)] > rule.last)):
            continue
        return True, rule.source
    return False, ""


@dataclass(frozen=True)
class LayoutRule:
    """A row whose table cell disagrees with the workload config of its release: the layout the recipe ran."""

    model: str  # pattern on the lower-cased model name
    system: str  # GPU key (rows.GPUS)
    release: tuple[int, ...]  # the container (year, month[, patch]) of the row
    precision: str  # pattern on the lower-cased precision
    printed: dict  # the printed degrees the row shows (pp, vp, ep, mbs, gbs)
    ran: dict  # what the recipe set instead (pp, vp, ep, mbs)
    source: str


LAYOUT_RULES: tuple[LayoutRule, ...] = (
    # NeMo 26.02.01 ↔ v0.3.1 llama/llama3_workload_base_configs.py LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 =
    # replace(BASE_LLAMA3_70B_CONFIG_GBS256, pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=5)
    # with WorkloadBaseConfig's micro_batch_size=1 (scripts/performance/utils/utils.py): the table prints VP "n/a"
    # and micro-batch 2 (the FSDP row's) where the recipe ran VP5 at micro-batch 1, as the 26.02 and 26.04 rows of
    # the same config print (T0203, T0123, T0075: 4596-4864 tokens/s/GPU against this row's 4798; plain 1F1B at
    # PP4 with 8 micro-batches would idle 3/8 of the step)
    LayoutRule(r"llama3_70b", "gb300", (26, 2, 1), "mx", {"pp": 4, "vp": 1, "mbs": 2, "gbs": 256},
               {"vp": 5, "mbs": 1}, "v0.3.1 LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX_V2"),
    # NeMo 25.11 ↔ v0.2.0 (and v0.2.2, the tag whose docs first print the 25.11 table)
    # gpt_oss/workload_base_configs.py GPT_OSS_120B_B200_BF16_BASE_CONFIG = replace(BASE_GPT_OSS_120B_CONFIG,
    # expert_model_parallel_size=64, micro_batch_size=4, ...): the table prints the base's EP8 beside the config's
    # own GBS 512 and micro-batch 4; the B200 recipe became EP8 only with v0.4.0's ..._B200_BF16_V2 (the 26.04 rows)
    LayoutRule(r"gpt oss", "b200", (25, 11), "bf16", {"ep": 8, "mbs": 4, "gbs": 512}, {"ep": 64},
               "v0.2.0 GPT_OSS_120B_B200_BF16_BASE_CONFIG"),
    # NeMo 26.02.01 ↔ v0.3.1 qwen/qwen3_workload_base_configs.py QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 =
    # replace(BASE_QWEN3_30B_A3B_CONFIG, expert_model_parallel_size=16, moe_a2a_overlap=False, hybridep): no PP;
    # the table repeats 26.02's PP2 VP12 EP8 cell (v0.3.0's config) while its 9058 tokens/s/GPU is the PP1 EP16
    # layout's (26.04 / 26.04.01 print PP1 EP16 at 8901 / 8960) and not 26.02's 5113
    LayoutRule(r"30b", "h100", (26, 2, 1), "fp8", {"pp": 2, "vp": 12, "ep": 8, "mbs": 1, "gbs": 1024},
               {"pp": 1, "vp": 1, "ep": 16}, "v0.3.1 QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1"),
    # NeMo 25.11 ↔ v0.2.0 / v0.2.2 qwen3/workload_base_configs.py QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG =
    # replace(BASE_QWEN3_30B_A3B_CONFIG (EP8, GBS 512), pipeline_model_parallel_size=2,
    # virtual_pipeline_model_parallel_size=12, moe_a2a_overlap=True) with WorkloadBaseConfig's micro_batch_size=1,
    # which utils/helpers.py set_workload_base_configs writes over the recipe's: the table prints VP24 and micro-batch
    # 2 (GA 32) where the release ran VP12 at micro-batch 1 — the layout the 26.02 table prints for the same config
    # (v0.3.0 ..._H100_FP8_CS_V1, T0228) at 5113 tokens/s/GPU against this row's 5275
    LayoutRule(r"30b", "h100", (25, 11), "fp8", {"pp": 2, "vp": 24, "ep": 8, "mbs": 2, "gbs": 512},
               {"vp": 12, "mbs": 1}, "v0.2.0 QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG"),
    # NeMo 25.11 ↔ v0.2.0 / v0.2.2 deepseek/deepseek_llm_pretrain.py deepseek_v3_gb300_config builds the recipe with
    # DEEPSEEK_V3_GB300_BASE_CONFIG's PP4 VP4, so deepseek_v3.py set_deepseek_v3_pipeline_model_parallel_layout sets
    # layout_map[(4, 4)], 16 stages (E + 4t | 4t × 14 | t + L: splits.py); at the printed PP2 those are 8 virtual
    # stages a rank (Megatron-Core transformer_config.py: the VP size is the layout's stages / PP, and a VP that
    # disagrees is refused, so the printed VP4 cannot have run with it; 61 layers split into no 8 equal stages
    # otherwise). The 26.02 and later tables print the same GB300 run as PP2 VP8 with that layout.
    LayoutRule(r"deepseek", "gb300", (25, 11), "", {"pp": 2, "vp": 4, "ep": 32}, {"vp": 8},
               "v0.2.0 deepseek_v3_gb300_config: layout_map[(4, 4)] at PP2"),
)


def recipe_layout(row: dict, gpu_key: str, printed: dict) -> tuple[dict, str]:
    """(the degrees the release's recipe ran where the table misprints them, the rule's source); ({}, "") when
    the printed layout is the recipe's."""
    when = container(row.get("framework_version", ""))
    low, prec = row["model"].lower(), row["precision"].lower()
    for rule in LAYOUT_RULES:
        if (rule.system == gpu_key and when == rule.release and re.search(rule.model, low)
                and re.search(rule.precision, prec) and all(printed.get(k) == v for k, v in rule.printed.items())):
            return dict(rule.ran), rule.source
    return {}, ""


def mtp_layers(row: dict) -> int:
    """MTP layers a Megatron-Bridge performance row trained: DeepSeek-V3's recipe sets one
    (src/megatron/bridge/recipes/deepseek/deepseek_v3.py: v0.2.0 pretrain_config(mtp_num_layers=1), v0.3.0 on
    cfg.model.mtp_num_layers = 1, with the 'm' of its pipeline layouts: splits.py), unless the row says
    "w/o MTP" (NeMo 25.11's table runs it both ways)."""
    low = row["model"].lower()
    if row.get("source_group") != "megatron-bridge-perf-summary" or "deepseek" not in low or "w/o mtp" in low:
        return 0
    return 1


# Megatron-Bridge's Moonlight-16B recipe the skills card ran (skills/nemo-mbridge-perf-activation-recompute/card.yaml
# at a67b5735d: bridge 600d069b, "TP2_PP1_CP1_EP8_DP4"): src/megatron/bridge/recipes/moonlight/h100/moonlight_16b.py
# moonlight_16b_pretrain_8gpu_h100_bf16_config at 600d069b sets moe_token_dispatcher_type = "alltoall" (not the
# flex dispatcher) and comm_overlap = CommOverlapConfig(tp_comm_overlap=False)
SKILLS_RECIPES = ((r"moonlight", {"moe_dispatcher": "alltoall", "tp_comm_overlap": False},
                   "600d069b moonlight_16b_pretrain_8gpu_h100_bf16_config"),)
# --recompute-modules the engine does not price (calculator.memory.megatron_core refuses them: their one published
# measurement frees less than the checkpoint's source implies, calculator/impls/megatron_recompute.py)
UNPRICED_MODULES = ("layernorm", "mla_up_proj")


def skills_recipe(row: dict) -> tuple[dict, str]:
    """(the dispatcher and TP-overlap settings, the source) of a skills-card row's recipe (SKILLS_RECIPES); ({},
    "") for any other row."""
    if row.get("source_group") != "megatron-bridge-skills":
        return {}, ""
    for pattern, settings, source in SKILLS_RECIPES:
        if re.search(pattern, row["model"].lower()):
            return dict(settings), source
    return {}, ""


def selective_modules(text: str) -> tuple[str, ...] | None:
    """The --recompute-modules of a row that prints "selective ['core_attn']" (the skills card's sweep: an empty
    list is its no-recompute control), less UNPRICED_MODULES; None for a row that prints no selective list."""
    m = re.search(r"selective\s*\[([^\]]*)\]", text or "")
    if not m:
        return None
    names = re.findall(r"[a-z_]+", m.group(1))
    return tuple(n for n in names if n not in UNPRICED_MODULES)
