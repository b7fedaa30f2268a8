"""How the Megatron-Bridge performance recipe of a published row ran its pipeline: the split of the decoder layers
over its (virtual) stages where the printed PP × VP does not divide the layers — the embedding and the loss counted in the
split (Megatron-Core account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split), or a
pipeline_model_parallel_layout string (calculator/memory/pipeline_split.py) — and the P2P overlap of the
interleaved schedule.

Read from github.com/NVIDIA-NeMo/Megatron-Bridge at the tags the rows' containers shipped (the pairing of
validation/published/throughput/recipes.py): v0.2.0 7af9601c, v0.3.0 21b02e0c, v0.3.1 9c9dd848, v0.4.0 0fbfe7d3,
v0.4.2 c8101293, v0.5.0 fcbb6031.

- Llama 3.1 405B (126 layers): src/megatron/bridge/recipes/llama/llama3.py llama31_405b_pretrain_config sets
  account_for_embedding_in_pipeline_split = account_for_loss_in_pipeline_split = True at every tag above
  (126 + 2 = 128 = PP8 × VP8 × 2, PP8 × VP4 × 4).
- Qwen3-235B-A22B (94 layers): src/megatron/bridge/recipes/qwen/qwen3_moe.py qwen3_235b_a22b_pretrain_config, the
  same two flags at every tag (94 + 2 = 96 = PP4 × VP12 × 2, PP8 × VP4 × 3, PP8 × VP2 × 6).
- DeepSeek-V3 (61 layers): a layout per (PP, VP). src/megatron/bridge/recipes/deepseek/deepseek_v3.py
  set_deepseek_v3_pipeline_model_parallel_layout layout_map (v0.2.0 … v0.5.0: (16, 1), (8, 2) and (4, 4) as
  E + 4t | 4t × 14 | t + MTP + L; (8, 1) and (4, 2) as E + 8t | 8t × 6 | 5t + MTP + L); the PP2 VP8 GB300 and
  PP8 VP2 B200 configs of scripts/performance/configs/deepseek/deepseek_workload_base_configs.py
  (v0.3.0 on: pp_layout="Et*4|(t*4|)*14tmL"); the H100 PP8 VP4 config: scripts/performance/configs/deepseek/
  deepseek_llm_pretrain.py deepseek_v3_h100_config layout="Et|(tt|)*30mL" (v0.2.0), pp_layout of
  DEEPSEEK_V3_PRETRAIN_CONFIG_H100_* from v0.3.0. These recipes train one MTP layer (deepseek_v3.py
  mtp_num_layers = 1; recipes.mtp_layers), placed with the loss: the layouts keep the 'm'.
- Kimi-K2 (61 layers): src/megatron/bridge/recipes/kimi/kimi_k2.py _get_kimi_k2_pipeline_layout (v0.3.1 on),
  (4, 4): E + 4t | 4t × 14 | t + L, used by scripts/performance/configs/kimi/kimi_llm_pretrain.py when the
  workload config names no pp_layout (the GB300 ones do not).

Not switched on here: the P2P overlap of the interleaved schedule (Parallelism.pp_overlap_p2p, its sends and
receives run under the chunks' compute, calculator/timing/pipeline_bubble.py), which these stacks set —
Megatron-Bridge src/megatron/bridge/training/comm_overlap.py CommOverlapConfig (every tag above:
overlap_p2p_comm = True, batch_p2p_comm = False when PP > 1 and VP > 1), NeMo v2.2.0 (7192a2c9)
nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py (the same rule; its performance scripts require the
callback), Megatron-LM megatron/training/arguments.py --no-overlap-p2p-communication (on unless given). Rows that
already ran as printed keep their numbers; switched on for those three sources (measured at 2592a65) the fit rows
go from 8.4% median / 63.1% worst to 8.4% / 54.9% (the Qwen3-235B PP4 VP12 GB300 rows 26–63% → 12–51%), the
held-out ones from 12.4% to 13.7% median (NeMo 25.02's B200 rows, already 9–29% fast, faster still), and 20
interleaved rows that ran as printed before move.

DeepSeek-V3 (w/o MTP) PP2 "VP4" on GB300 (NeMo 25.11, v0.2.0): the GB300 recipe builds its layout at the base
config's PP4 VP4 (layout_map[(4, 4)], 16 stages), which at PP2 is VP8 (recipes.LAYOUT_RULES says why).
"""
from __future__ import annotations

import re

from validation.published.throughput.recipes import container

_E4 = "Et*4|(t*4|)*14tL"  # E + 4t | 4t × 14 | t + L: 61 layers over 16 stages (Kimi-K2)
_E4M = "Et*4|(t*4|)*14tmL"  # E + 4t | 4t × 14 | t + MTP + L (DeepSeek-V3)
_E8M = "Et*8|(t*8|)*6t*5mL"  # E + 8t | 8t × 6 | 5t + MTP + L: 61 layers over 8 stages

# (pattern on the lower-cased model name, {(pp, vp): layout} or "embedding+loss", first container, source)
SPLITS: tuple[tuple[str, object, tuple[int, ...], str], ...] = (
    (r"405b", "embedding+loss", (25, 9), "llama3.py llama31_405b_pretrain_config"),
    (r"235b", "embedding+loss", (25, 9), "qwen3_moe.py qwen3_235b_a22b_pretrain_config"),
    (r"deepseek", {(16, 1): _E4M, (8, 2): _E4M, (4, 4): _E4M, (8, 1): _E8M, (4, 2): _E8M,
                   (8, 4): "Et|(tt|)*30mL"}, (25, 9),
     "deepseek_v3.py layout_map / deepseek_llm_pretrain.py H100 layout"),
    (r"deepseek", {(2, 8): _E4M}, (26, 2), "deepseek_workload_base_configs.py DEEPSEEK_V3_PRETRAIN_CONFIG_GB300"),
    (r"deepseek", {(2, 8): _E4M}, (25, 11), "deepseek_v3.py layout_map[(4, 4)] at PP2 (recipes.LAYOUT_RULES)"),
    (r"kimi", {(4, 4): _E4}, (26, 2), "kimi_k2.py _get_kimi_k2_pipeline_layout"),
)


# NeMo 25.02's Llama 3.1 405B: NVIDIA/NeMo v2.2.0 (7192a2c9) nemo/collections/llm/recipes/llama31_405b.py trainer()
# account_for_embedding_in_pipeline_split = account_for_loss_in_pipeline_split = True, the recipe
# scripts/llm/performance/pretrain_llama31_405b.py builds on (pretrain_recipe(performance_mode=True))
NEMO_SPLITS = {"nemo-25.02-perf-summary": ((r"405b", "llama31_405b.py trainer() (NeMo v2.2.0)"),)}


def pipeline_settings(row: dict, pp: int, vp: int) -> tuple[dict, str]:
    """(Parallelism fields, source) of the recipe's uneven pipeline split for a row (SPLITS, NEMO_SPLITS); ({}, "")
    for any other row."""
    group = row.get("source_group", "")
    if pp < 2:
        return {}, ""
    out, sources = {}, []
    low = row["model"].lower()
    for pattern, source in NEMO_SPLITS.get(group, ()):
        if re.search(pattern, low):
            out.update(pp_embedding_in_split=True, pp_loss_in_split=True)
            sources.append(source)
    when = container(row.get("framework_version", ""))
    if when is None or group != "megatron-bridge-perf-summary":
        return out, "; ".join(sources)
    for pattern, split, first, source in SPLITS:
        if not re.search(pattern, low) or when < first:
            continue
        if split == "embedding+loss":
            out.update(pp_embedding_in_split=True, pp_loss_in_split=True)
        elif (pp, vp) in split:
            out["pp_layout"] = split[(pp, vp)]
        else:
            continue
        sources.append(source)
        break
    return out, "; ".join(sources)
