"""One-click example scenarios. Each is a set of URL keys (dashboard.state) applied over the defaults, so a
scenario is exactly what its link reproduces."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    summary: str
    values: dict[str, Any]


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "pretrain-8b", "Pretrain 8B · 8×H100",
        "Pretraining Llama-3.1-8B on 8×H100: Megatron mixed precision with the distributed optimizer "
        "(ZeRO-1 style) over DP=4, TP=2 + sequence parallel, selective recompute, 8k sequences.",
        {"model": "llama-3.1-8b", "mode": "train", "recipe": "megatron", "dopt": True, "tp": 2, "sp": True,
         "dp": 4, "rc": "selective", "seq": 8192, "mbs": 1, "gpu": "h100-sxm"}),
    Scenario(
        "finetune-70b-zero3", "Fine-tune 70B · ZeRO-3",
        "Fine-tuning Llama-3.1-70B on 8×H100: DeepSpeed mixed bf16 with ZeRO-3 over 8 GPUs (fused Adam), "
        "full activation checkpointing, 4k sequences. The fit cards say whether 8 GPUs are enough and how "
        "many the job needs.",
        {"model": "llama-3.1-70b", "mode": "train", "recipe": "mixed-bf16", "zero": "3", "dp": 8, "rc": "full",
         "seq": 4096, "mbs": 1, "gpu": "h100-sxm"}),
    Scenario(
        "serve-8b-32k", "Serve 8B · 32k context",
        "Serving Llama-3.1-8B: bf16 weights and KV cache, 4 concurrent sequences of 30,720 prompt + 2,048 "
        "generated tokens on one H100.",
        {"model": "llama-3.1-8b", "mode": "infer", "seq": 30720, "gen": 2048, "mbs": 4, "kvdt": "bf16",
         "gpu": "h100-sxm"}),
    Scenario(
        "qwen25-7b-tp4", "Qwen2.5-7B · TP=4 (seed 002)",
        "The practical guide's worked example: Qwen-2.5-7B trained with bf16 AdamW, TP=4 × DP=2 on 8 H100s, "
        "sequence 8192, micro-batch 1, selective recompute, distributed optimizer.",
        {"model": "qwen2.5-7b", "mode": "train", "recipe": "mixed-bf16", "tp": 4, "dp": 2, "dopt": True,
         "seq": 8192, "mbs": 1, "rc": "selective", "gpu": "h100-sxm"}),
    Scenario(
        "mixtral-ep8", "Mixtral-8x7B · EP=8",
        "MoE training of Mixtral-8x7B: experts spread over 8 GPUs (EP=8 inside DP=8), ZeRO-1, full recompute, "
        "4k sequences.",
        {"model": "mixtral-8x7b", "mode": "train", "recipe": "mixed-bf16", "ep": 8, "dp": 8, "zero": "1",
         "rc": "full", "seq": 4096, "mbs": 1, "gpu": "h100-sxm"}),
)

BY_ID = {s.id: s for s in SCENARIOS}
