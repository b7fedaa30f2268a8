"""The case kinds of the shared protocol: `train` (plain PyTorch loop, optionally wrapped in DDP or FSDP2),
`infer` (`generate()` or one prefill forward) and `trainer` (`transformers.Trainer` itself).

Each function takes a case dict and returns the record's measured part, with the keys of
`../shared/validation/gpu-h200/measurements.jsonl`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time

import torch

from . import protocol as P


def padding_mask(batch: int, seq: int) -> torch.Tensor:
    """Half the batch with its last quarter padded, as a tokenizer's right padding produces."""
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[batch // 2:, seq - seq // 4:] = 0
    return mask.to(P.DEVICE)


def decoder_layers(model) -> torch.nn.ModuleList:
    n = model.config.num_hidden_layers
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            return module
    raise RuntimeError("decoder layer list not found")


def init_single_rank_group() -> None:
    """A world-size-1 process group (NCCL on the GPU, gloo in a CPU dry run)."""
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if P.on_cuda() else "gloo", rank=0, world_size=1)


def wrap(model, case: dict):
    """DDP (buckets allocated at wrap time) or FSDP2 (`fully_shard` per decoder layer, then the root)."""
    if case.get("wrap") == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        init_single_rank_group()
        return DistributedDataParallel(model, device_ids=[0] if P.on_cuda() else None,
                                       gradient_as_bucket_view=bool(case.get("bucket_view", False)))
    if case.get("wrap") == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        init_single_rank_group()
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in decoder_layers(model):
            fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
    return model


def make_optimizer(params, case: dict):
    kind = case.get("opt_impl", "fused")
    return torch.optim.AdamW(params, lr=1e-5, fused=kind == "fused", foreach=kind == "foreach")


def train_step(forward, backward, step) -> dict:
    """One step with a snapshot after the forward, after the backward and after the optimizer step, timed
    between two device synchronisations."""
    P.sync()
    start = time.perf_counter()
    loss = forward()
    fwd = P.snapshot()
    backward(loss)
    del loss
    fwd_bwd = P.snapshot()
    step()
    after = P.snapshot()
    return {"fwd": fwd, "fwd_bwd": fwd_bwd, "step": after, "seconds": time.perf_counter() - start}


def two_steps(forward, backward, step) -> dict:
    """Step 1 (optimizer state is born), the peak reset, step 2 (the steady state)."""
    out = {"step1": train_step(forward, backward, step)}
    P.reset_peak()
    out["steady_before"] = P.snapshot()
    out["step2"] = train_step(forward, backward, step)
    return out


def run_train(case: dict) -> dict:
    recipe = case.get("recipe", "pure-bf16")
    config = P.load_config(case["config"], case.get("layers"))
    model = P.build_model(config, torch.float32 if recipe == "amp-fp32" else torch.bfloat16,
                          case.get("attn", "sdpa"))
    if case.get("recompute", "none") == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    counts = P.parameter_counts(model)
    ids = P.random_ids(config, case["batch"], case["seq"])
    mask = padding_mask(case["batch"], case["seq"]) if case.get("padmask") else None
    wrapped = wrap(model, case)
    opt = make_optimizer(wrapped.parameters(), case)
    record = {"config_full": config.to_dict(), **counts, "after_build": P.snapshot()}
    autocast = (lambda: torch.autocast(P.DEVICE, dtype=torch.bfloat16)) if recipe == "amp-fp32" \
        else contextlib.nullcontext
    set_to_none = case.get("set_to_none", True)

    def forward():
        with autocast():
            return wrapped(input_ids=ids, labels=ids, attention_mask=mask).loss

    def step():
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)

    record.update(two_steps(forward, lambda loss: loss.backward(), step))
    return record


def kv_cache_bytes(cache) -> int:
    total = 0
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def run_infer(case: dict) -> dict:
    """`generate()` with the default dynamic cache (greedy, exactly `gen` new tokens); `gen: 0` is one prefill
    forward that keeps the cache and the last position's logits. `end` is taken after the outputs are dropped."""
    config = P.load_config(case["config"], case.get("layers"))
    model = P.build_model(config, torch.bfloat16, case.get("attn", "sdpa")).eval()
    counts = P.parameter_counts(model)
    ids = P.random_ids(config, case["batch"], case["seq"])
    record = {"config_full": config.to_dict(), "n_params": counts["n_params"], "param_bytes": counts["param_bytes"],
              "after_build": P.snapshot()}
    gen = case["gen"]
    P.sync()
    start = time.perf_counter()
    if gen == 0:
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        P.sync()
        record["cache_bytes"] = kv_cache_bytes(out.past_key_values)
    else:
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=gen, min_new_tokens=gen,
                             do_sample=False, pad_token_id=0)
        P.sync()
        record["generated"] = out.shape[1] - case["seq"]
    record["seconds"] = time.perf_counter() - start
    del out
    record["end"] = P.snapshot()
    return record


def run_trainer(case: dict) -> dict:
    """`transformers.Trainer` itself: 3 steps, `bf16=True`, its default optimizer; one snapshot per step end,
    the peak reset at each step's start."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    recipe = case.get("recipe", "pure-bf16")
    config = P.load_config(case["config"], case.get("layers"))
    model = P.build_model(config, torch.float32 if recipe == "amp-fp32" else torch.bfloat16,
                          case.get("attn", "sdpa"))
    ids = P.random_ids(config, case["batch"] * 3, case["seq"]).cpu()
    data = [{"input_ids": row, "labels": row} for row in ids]
    steps: list[dict] = []

    class Probe(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            P.reset_peak()

        def on_step_end(self, args, state, control, **kwargs):
            steps.append(P.snapshot())

    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(output_dir=tmp, per_device_train_batch_size=case["batch"], max_steps=3,
                                 bf16=P.on_cuda(), use_cpu=not P.on_cuda(), report_to="none", save_strategy="no",
                                 logging_strategy="no", learning_rate=1e-5,
                                 gradient_checkpointing=case.get("recompute", "none") == "full",
                                 gradient_checkpointing_kwargs={"use_reentrant": False})
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[Probe()])
        trainer.train()
        optim = str(args.optim)
    best = max(steps, key=lambda s: s["max_allocated"])
    return {"config_full": config.to_dict(), "steps": steps, "optim": optim, "step2": {"step": best}}
