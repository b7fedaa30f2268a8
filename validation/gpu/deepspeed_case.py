"""DeepSpeed ZeRO stage 0/1/2/3 at world size 1, bf16 (bf16 model, fp32 master partitions), the shared `train`
protocol around `engine(...)`, `engine.backward(loss)`, `engine.step()`.

The optimizer is `torch.optim.AdamW(fused=True)` handed to `deepspeed.initialize` as the client optimizer: it
keeps the same two fp32 moments per master element as DeepSpeed's FusedAdam (whose CUDA extension would have to
be JIT-compiled on the machine), and it is on ZeRO's list of supported optimizers. The case carries the exact
DeepSpeed config (`ds_config`) and the ZeRO settings DeepSpeed resolved from it (`ds_resolved`: bucket sizes,
prefetch, live-parameter limits at their defaults unless the case sets them).
"""

from __future__ import annotations

import torch

from . import loops
from . import protocol as P

RESOLVED_KEYS = ("stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "allgather_partitions",
                 "allgather_bucket_size", "overlap_comm", "round_robin_gradients", "prefetch_bucket_size",
                 "param_persistence_threshold", "model_persistence_threshold", "max_live_parameters",
                 "max_reuse_distance", "gather_16bit_weights_on_model_save", "use_all_reduce_for_fetch_params")


def resolved_zero(engine) -> dict:
    zero = engine._config.zero_config.model_dump()
    out = {k: zero[k] for k in RESOLVED_KEYS if k in zero}
    out["optimizer_wrapper"] = type(engine.optimizer).__name__
    out["client_optimizer"] = "torch.optim.AdamW(fused=True)"
    return out


def run_deepspeed(case: dict) -> dict:
    import deepspeed

    loops.init_single_rank_group()
    deepspeed.init_distributed(dist_backend="nccl" if P.on_cuda() else "gloo")
    P.fresh_allocator()
    config = P.load_config(case["config"], case.get("layers"))
    model = P.build_model(config, torch.bfloat16, case.get("attn", "sdpa"))
    if case.get("recompute", "none") == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    counts = P.parameter_counts(model)
    ids = P.random_ids(config, case["batch"], case["seq"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=case["ds_config"])
    case["ds_resolved"] = resolved_zero(engine)
    record = {"config_full": config.to_dict(), **counts, "after_build": P.snapshot()}

    def forward():
        return engine(input_ids=ids, labels=ids).loss

    record.update(loops.two_steps(forward, engine.backward, engine.step))
    return record
