"""One-click example scenarios. Each is a set of URL keys (dashboard.inputs.state) applied over the defaults, so a
scenario is exactly what its link reproduces. Every example fits its GPU per the engine (training and generate():
the peak within what PyTorch can allocate; vLLM / SGLang: the engine starts; RL: the peak phase), or it is marked
`oom` and says "OOM example" in its title (tests/dashboard/test_dashboard_state.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    summary: str
    values: dict[str, Any]
    seed_file: str = ""  # presets/scenarios/<file>: the published table this scenario reproduces
    oom: bool = False  # an out-of-memory example on purpose (its title says so)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "pretrain-8b", "Pretrain 8B · 8×H100",
        "Pretraining Llama-3.1-8B on 8×H100: Megatron mixed precision with the distributed optimizer "
        "(ZeRO-1 style) over DP=4, TP=2 + sequence parallel, selective recompute, 8k sequences.",
        {"model": "llama-3.1-8b", "mode": "train", "recipe": "megatron", "dopt": True, "tp": 2, "sp": True,
         "dp": 4, "rc": "selective", "seq": 8192, "mbs": 1, "gpu": "h100-sxm"}),
    Scenario(
        "finetune-70b-zero3", "Fine-tune 70B · ZeRO-3 + CPU offload",
        "Full fine-tuning of Llama-3.1-70B on 8×H100: DeepSpeed mixed bf16 with ZeRO-3 over 8 GPUs and the optimizer "
        "offloaded to the CPU (ZeRO-Offload: fp32 master weights and Adam states, ~840 GB, in host RAM; the step "
        "runs on the CPU), full activation checkpointing, 4k sequences. Without the offload the sharded states "
        "alone exceed an H100 (~197% of it): the fit cards say how many GPUs that layout would need.",
        {"model": "llama-3.1-70b", "mode": "train", "recipe": "mixed-bf16", "zero": "3", "dp": 8, "rc": "full",
         "offo": True, "stack": "deepspeed", "seq": 4096, "mbs": 1, "gpu": "h100-sxm"}),
    Scenario(
        "serve-8b-32k", "Serve 8B · 32k context",
        "Serving Llama-3.1-8B: bf16 weights and KV cache, 4 concurrent sequences of 30,720 prompt + 2,048 "
        "generated tokens on one H100.",
        {"model": "llama-3.1-8b", "mode": "infer", "seq": 30720, "gen": 2048, "mbs": 4, "kvdt": "bf16",
         "gpu": "h100-sxm"}),
    Scenario(
        "qwen25-7b-tp4", "Qwen2.5-7B · TP=4",
        "The practical guide's worked example: Qwen-2.5-7B trained with bf16 AdamW, TP=4 × DP=2 on 8 H100s, "
        "sequence 8192, micro-batch 1, selective recompute, distributed optimizer.",
        {"model": "qwen2.5-7b", "mode": "train", "recipe": "mixed-bf16", "tp": 4, "dp": 2, "dopt": True,
         "seq": 8192, "mbs": 1, "rc": "selective", "gpu": "h100-sxm"}),
    Scenario(
        "serve-8b-vllm", "Serve 8B · vLLM",
        "Llama-3.1-8B under vLLM on one H100 with its defaults (gpu_memory_utilization 0.9, 8,192 batched tokens, "
        "1,024 sequences, CUDA graphs): the KV pool, how many 16,000-token sequences it holds, the longest "
        "max_model_len that starts.",
        {"model": "llama-3.1-8b", "mode": "infer", "eng": "vllm", "seq": 16000, "gpu": "h100-sxm"}),
    Scenario(
        "seed002-rl-8", "RL · Qwen2.5-7B · 8×H100",
        "Seed 002's RL worked example as slime runs it: Megatron trainer (TP=4 × DP=2, distributed optimizer, "
        "full recompute) and SGLang rollout engines (2 GPUs each, mem_fraction_static 0.7) colocated; rollout "
        "batch 32 × 8 samples × 8,192 tokens. The seed's own table is shown beside ours.",
        {"model": "qwen2.5-7b", "mode": "rl", "recipe": "megatron", "tp": 4, "dp": 2, "sp": True, "dopt": True,
         "rc": "full", "mbs": 1, "seq": 8192, "gpu": "h100-sxm", "rlb": 32, "rln": 8, "rlp": 0, "rlr": 8192,
         "rle": "sglang", "rltp": 2, "rlf": 0.7}, "seed-002-rl-8gpu.json"),
    Scenario(
        "seed002-rl-4", "RL · 4×H100, optimized",
        "Seed 002's 4-card configuration: rollout batch 16 × 4 samples × 4,096 tokens, TP=4 on 4 H100s; the "
        "seed's table beside ours.",
        {"model": "qwen2.5-7b", "mode": "rl", "recipe": "megatron", "tp": 4, "dp": 1, "sp": True, "dopt": True,
         "rc": "full", "mbs": 1, "seq": 4096, "gpu": "h100-sxm", "rlb": 16, "rln": 4, "rlp": 0, "rlr": 4096,
         "rle": "sglang", "rltp": 2, "rlf": 0.7}, "seed-002-rl-4gpu.json"),
    Scenario(
        "mixtral-ep8", "Mixtral-8x7B · EP=8 · OOM example",
        "An out-of-memory example: MoE training of Mixtral-8x7B with its experts spread over 8 H100s (EP=8 inside "
        "DP=8), ZeRO-1, full recompute, 4k sequences does not fit (~156%): with EP=8 each GPU holds all the "
        "optimizer states of its experts, which ZeRO-1 over DP cannot shard. The remedies and the fit cards say "
        "what fits (ZeRO-3 and 16 GPUs, CPU offload, or H200s).",
        {"model": "mixtral-8x7b", "mode": "train", "recipe": "mixed-bf16", "ep": 8, "dp": 8, "zero": "1",
         "rc": "full", "seq": 4096, "mbs": 1, "gpu": "h100-sxm"}, oom=True),
)

BY_ID = {s.id: s for s in SCENARIOS}
