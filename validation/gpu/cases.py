"""The new H200 cases: models, stacks and shapes the 78 shared cases do not hold.

`MAIN` runs in one process, case after case, as the shared plain cases did; `OWN` cases (DDP, FSDP2, DeepSpeed,
an allocator setting) each get a fresh process. Order is priority: a run that meets its deadline drops the tail.
"""

from __future__ import annotations

EXPANDABLE = "expandable_segments:True"
# id parts that the shared ids leave out when they hold their default value
ID_DEFAULTS = {"attn": "sdpa", "recompute": "none"}
ID_SKIP = ("id", "kind", "config", "batch", "seq", "gen", "alloc_conf", "set_to_none")


def case_id(case: dict) -> str:
    """The shared ids: `train_llama-3.2-1b_b2_s4096_wrap-ddp_bucket_view-True`, `..._persistent-grads`,
    `..._expandable`; dict-valued settings (a DeepSpeed config) stay out of the id."""
    parts = [case["kind"], case["config"].removesuffix(".json"), f"b{case['batch']}", f"s{case['seq']}"]
    if "gen" in case:
        parts.append(f"gen-{case['gen']}")
    for key, value in case.items():
        if key in ID_SKIP or isinstance(value, dict) or ID_DEFAULTS.get(key) == value:
            continue
        parts.append(f"{key}-{value}")
    if case.get("set_to_none") is False:
        parts.append("persistent-grads")
    if case.get("alloc_conf"):
        parts.append("expandable")
    return "_".join(parts)


def ds_config(batch: int, stage: int, zero_overrides: dict | None = None) -> dict:
    """The DeepSpeed config of a world-size-1 bf16 run: ZeRO settings at DeepSpeed's defaults unless overridden."""
    zero = {"stage": stage, **(zero_overrides or {})}
    return {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True}, "zero_optimization": zero, "zero_allow_untested_optimizer": True,
            "gradient_clipping": 0.0, "steps_per_print": 1_000_000, "wall_clock_breakdown": False}


def case(kind: str, model: str, batch: int, seq: int, **extra) -> dict:
    c = {"kind": kind, "config": f"{model}.json", "batch": batch, "seq": seq, **extra}
    return {"id": case_id(c), **c}


def T(model, batch, seq, **extra):
    return case("train", model, batch, seq, **extra)


def I(model, batch, seq, gen, **extra):
    return case("infer", model, batch, seq, gen=gen, **extra)


def DS(model, batch, seq, stage, variant=None, overrides=None, **extra):
    extra = {"wrap": "deepspeed", "zero": stage, **({"variant": variant} if variant else {}),
             "recipe": "mixed-bf16", **extra}
    return T(model, batch, seq, **extra, ds_config=ds_config(batch, stage, overrides))


SMALL_BUCKETS = {"reduce_bucket_size": 50_000_000, "allgather_bucket_size": 50_000_000}
SMALL_STAGE3 = {"stage3_prefetch_bucket_size": 5_000_000, "stage3_max_live_parameters": 100_000_000,
                "stage3_max_reuse_distance": 100_000_000, "reduce_bucket_size": 50_000_000}

MAIN = [
    # hf-trainer loop (plain PyTorch, fused AdamW, set_to_none) on models the shared set does not hold
    T("mistral-7b-v0.1", 1, 4096),
    T("qwen2.5-7b", 1, 4096),
    T("qwen2.5-3b", 2, 4096),
    T("phi-3-mini-4k", 2, 4096),
    T("olmo-2-7b", 1, 4096),
    T("mixtral-8x7b", 1, 4096, layers=2),
    T("qwen1.5-moe-a2.7b", 2, 4096, layers=6),
    T("gemma-2-2b", 1, 4096, attn="eager", recompute="full"),
    T("llama-3.2-3b", 2, 4096),
    T("smollm2-1.7b", 4, 2048),
    T("mistral-7b-v0.1", 2, 4096, recompute="full"),
    T("qwen2.5-3b", 4, 4096, recompute="full"),
    T("qwen2.5-3b", 2, 2048, attn="eager"),
    T("qwen2.5-3b", 2, 4096, set_to_none=False),
    T("qwen2.5-3b", 4, 2048, padmask=True),
    T("phi-3-mini-4k", 2, 2048, attn="eager"),
    T("gemma-2-2b", 2, 2048, attn="eager"),  # transformers refuses SDPA for Gemma-2
    T("mixtral-8x7b", 2, 2048, layers=4),
    T("qwen2.5-1.5b", 2, 4096, recipe="amp-fp32"),
    T("qwen2.5-1.5b", 2, 4096, opt_impl="foreach"),
    T("qwen2.5-0.5b", 8, 2048),
    T("pythia-1.4b", 4, 2048),
    T("llama-3.2-3b", 4, 4096, recompute="full"),
    # step-time scaling at a fixed model (issue 9): batch at s2048, then sequence at b2
    T("smollm2-1.7b", 1, 2048),
    T("smollm2-1.7b", 2, 2048),
    T("smollm2-1.7b", 8, 2048),
    T("smollm2-1.7b", 2, 1024),
    T("smollm2-1.7b", 2, 4096),
    T("smollm2-1.7b", 2, 8192),
    T("smollm2-1.7b", 4, 4096, recompute="full"),
    T("mistral-7b-v0.1", 1, 2048),
    # generate() on unseen models (prefill + decode, default dynamic cache)
    I("mistral-7b-v0.1", 8, 4096, 64),
    I("qwen2.5-7b", 4, 8192, 32),
    I("phi-3-mini-4k", 8, 3072, 32),
    I("olmo-2-7b", 4, 2048, 64),
    I("gemma-2-2b", 8, 4096, 32, attn="eager"),
    I("mixtral-8x7b", 2, 4096, 16),
    I("qwen2.5-14b", 4, 8192, 32),
    I("qwen1.5-moe-a2.7b", 4, 4096, 32),
    I("mistral-nemo-12b", 4, 8192, 16),
    I("qwen3-14b", 1, 32768, 16),
    I("smollm2-1.7b", 32, 2048, 64),
    I("qwen2.5-0.5b", 64, 1024, 0),
    I("llama-3.2-3b", 16, 4096, 0),
    # decode-time scaling (issue 9)
    I("smollm2-1.7b", 1, 1024, 128),
    I("smollm2-1.7b", 16, 1024, 128),
    I("qwen2.5-7b", 1, 1024, 128),
    # transformers.Trainer itself on unseen models
    case("trainer", "qwen2.5-1.5b", 4, 2048),
    case("trainer", "smollm2-1.7b", 4, 2048, recompute="full"),
    # the largest dense model whose pure-bf16 states (8 B/param) fit beside its activations
    T("qwen2.5-14b", 1, 2048, recompute="full"),
]

OWN = [
    # DeepSpeed ZeRO at world size 1, bf16, default buckets; then small buckets to isolate what they cost
    DS("qwen2.5-1.5b", 2, 4096, 1),
    DS("qwen2.5-1.5b", 2, 4096, 2),
    DS("qwen2.5-1.5b", 2, 4096, 3),
    DS("qwen2.5-1.5b", 2, 4096, 2, variant="small-buckets", overrides=SMALL_BUCKETS),
    DS("qwen2.5-1.5b", 2, 4096, 3, variant="small-buckets", overrides=SMALL_STAGE3),
    DS("qwen2.5-1.5b", 2, 4096, 0),
    DS("llama-3.2-3b", 1, 4096, 2),
    DS("llama-3.2-3b", 1, 4096, 3),
    DS("qwen2.5-1.5b", 2, 4096, 2, variant="overlap-comm", overrides={"overlap_comm": True}),
    DS("llama-3.2-3b", 2, 4096, 3, recompute="full"),
    DS("llama-3.2-3b", 1, 4096, 1),
    # DDP and FSDP2 on unseen models
    T("qwen2.5-3b", 2, 4096, wrap="ddp"),
    T("qwen2.5-3b", 2, 4096, wrap="ddp", bucket_view=True),
    T("qwen2.5-3b", 2, 4096, wrap="fsdp2", recipe="amp-fp32", opt_impl="foreach"),
    T("smollm2-1.7b", 4, 2048, wrap="fsdp2", recipe="amp-fp32", opt_impl="foreach"),
    T("mistral-7b-v0.1", 1, 4096, wrap="ddp"),
    T("qwen2.5-1.5b", 2, 4096, wrap="fsdp2", recipe="amp-fp32"),
    T("qwen2.5-3b", 4, 4096, wrap="fsdp2", recipe="amp-fp32", opt_impl="foreach", recompute="full"),
    T("smollm2-1.7b", 4, 2048, wrap="ddp", recompute="full"),
    # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True twins of MAIN cases
    T("mistral-7b-v0.1", 1, 4096, alloc_conf=EXPANDABLE),
    T("qwen2.5-3b", 2, 4096, alloc_conf=EXPANDABLE),
    I("qwen2.5-7b", 4, 8192, 32, alloc_conf=EXPANDABLE),
]

ALL = MAIN + OWN
BY_ID = {c["id"]: c for c in ALL}
assert len(BY_ID) == len(ALL), "duplicate case ids"


def needs_own_process(c: dict) -> bool:
    return bool(c.get("wrap") or c.get("alloc_conf"))
