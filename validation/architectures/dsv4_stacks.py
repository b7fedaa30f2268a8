"""What the data-parallel stacks do with DeepSeek-V4's two parameter dtypes, measured on the CPU with the real
PyTorch 2.13 code: two processes (torch.multiprocessing, gloo on 127.0.0.1) each holding the tiny model of
dsv4_golden.py (DEEPSEEK_V4_TINY) as from_pretrained loads it in bf16 (the _keep_in_fp32_modules_strict parameters
fp32: validation.architectures.measure.tiny_bf16), one micro-batch of 32 tokens a rank, two iterations. Writes
tests/golden_stacks/deepseek-v4-tiny.json, which tests/stacks/test_fp32_kept.py holds the engine to.

    python -m validation.architectures.dsv4_stacks            # regenerate the golden
    python -m validation.architectures.dsv4_stacks --check    # re-measure and compare with it
    python -m validation.architectures.dsv4_stacks --whole    # the whole-step goldens of the cast model (below)

Recorded, rank 0's:
- ddp: torch.nn.parallel.DistributedDataParallel as HF Trainer wraps it without gradient checkpointing
  (find_unused_parameters=True, trainer.py: `not model.is_activation_checkpointing`): each gradient bucket as a
  registered comm hook sees it (GradBucket.buffer(): dtype, bytes) in both iterations, the reducer's own
  bucket_sizes (_get_ddp_logging_data), and the .grad bytes by dtype after the backward;
- ddp_checkpointing: with gradient checkpointing HF Trainer passes find_unused_parameters=False: the error the
  second iteration raises (the CSA indexers' parameters get no gradient), and the buckets with True;
- fsdp2_bf16_model: fully_shard on each decoder layer of the bf16 model as loaded: the AssertionError of its lazy
  init (_fsdp_param_group.py FSDPParamGroup._init_mp_dtypes);
- fsdp2_accelerate: accelerate 1.15's recipe (fsdp_utils.py fsdp2_prepare_model upcasts every trainable parameter
  to fp32; MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16, output_dtype=bf16), utils/dataclasses.py
  set_mixed_precision): the local shard bytes by dtype, the gradient shard bytes, and the dtype a formerly
  fp32-kept parameter (layers.0.attn_hc.fn) has while its module runs;
- saved_tensors: one process's saved-for-backward bytes with the fp32-kept parameters as loaded and cast to bf16
  (what FSDP2's and DeepSpeed's bf16 compute runs): the modules whose bytes differ; and FSDP2's rank 0's own
  (fsdp2_accelerate.saved_total: every storage its forward saved that is not a parameter, gathered ones included);
- deepspeed: DeepSpeed 0.19's engine (DS_ACCELERATOR=cpu) with bf16 and ZeRO-2 / ZeRO-3: the parameters' dtypes
  after deepspeed.initialize (runtime/engine.py _cast_module_mixed_precision), the rank's fp32 master partition
  and the forward's saved bytes.

--whole writes tests/golden_stacks/deepseek-v4-tiny-cast__*: whole training steps of the same model with every
parameter bf16 (make_golden's protocol and bf16 build, validation/trace/models.build_model: bf16 gradients, fp32
master weights and AdamW states, the "mixed" recipe; gradients and AdamW states only for the parameters a backward
reaches, optimizer.build_reached_train_states, as one process of PyTorch holds them), which is what FSDP2's units
compute with.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from unittest import mock

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

OUT = Path(__file__).resolve().parents[2] / "tests" / "golden_stacks" / "deepseek-v4-tiny.json"
CAST = "deepseek-v4-tiny-cast"
TOKENS = 32
PORT = "29541"


def _model():
    import transformers
    from validation.architectures.dsv4_golden import DEEPSEEK_V4_TINY
    from validation.architectures.measure import tiny_bf16
    fields = {k: v for k, v in DEEPSEEK_V4_TINY.items() if k not in ("model_type", "architectures", "torch_dtype")}
    return tiny_bf16(transformers.AutoConfig.for_model("deepseek_v4", **fields), "eager")


def _by_dtype(tensors) -> dict[str, int]:
    """Bytes of the tensors' elements by dtype (a view counts its own elements, not its storage's)."""
    out: dict[str, int] = {}
    for t in tensors:
        out[str(t.dtype)] = out.get(str(t.dtype), 0) + t.numel() * t.element_size()
    return out


def _storages(tensors) -> int:
    """Bytes of the distinct storages the tensors live in."""
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def _ddp(model, ids, find_unused: bool) -> dict:
    from torch.nn.parallel import DistributedDataParallel
    ddp = DistributedDataParallel(model, find_unused_parameters=find_unused)
    seen: list = []

    def hook(state, bucket):
        b = bucket.buffer()
        seen.append([bucket.index(), str(b.dtype), b.untyped_storage().nbytes()])
        return dist.all_reduce(b, async_op=True).get_future().then(lambda f: f.value()[0])

    ddp.register_comm_hook(None, hook)
    out = {"find_unused_parameters": find_unused, "buckets": []}
    for _ in range(2):
        seen.clear()
        try:
            ddp(ids, labels=ids).loss.backward()
        except RuntimeError as err:
            out["error"] = str(err).splitlines()[0]
            return out
        out["buckets"].append(sorted(seen))
        out["grads"] = _by_dtype(p.grad for p in model.parameters() if p.grad is not None)
        out["params_without_grad"] = sum(p.grad is None for p in model.parameters())
        model.zero_grad(set_to_none=True)
    out["reducer_bucket_sizes"] = [int(x) for x in ddp._get_ddp_logging_data()["bucket_sizes"].split(", ")]
    return out


def _saved_total(model, ids) -> int:
    """Bytes of the distinct storages a forward with labels saved for backward and still holds when it ends, the
    storages of the parameters as they are when the tensor is saved (FSDP2's gathered ones while their unit runs)
    not counted."""
    import weakref
    kept: list[tuple] = []

    def param_storages() -> set[int]:
        local = (p.to_local() if hasattr(p, "to_local") else p for p in model.parameters())
        return {t.untyped_storage().data_ptr() for t in local}

    def pack(t):
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            if st.nbytes() and st.data_ptr() not in param_storages():
                kept.append((weakref.ref(t), st.data_ptr(), st.nbytes()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(ids, labels=ids)
    total = sum({ptr: n for ref, ptr, n in kept if ref() is not None}.values())  # alive, each storage once
    del out
    return total


def _fsdp2(ids) -> tuple[str, dict]:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    model = _model()
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    try:
        model(ids, labels=ids)
        refused = ""
    except AssertionError as err:
        refused = str(err)
    model = _model()
    for p in model.parameters():  # accelerate's fsdp2_prepare_model: trainable parameters upcast to fp32
        p.data = p.data.float()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                                  output_dtype=torch.bfloat16)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    running = {}
    model.model.layers[0].attn_hc.register_forward_pre_hook(lambda m, a: running.update(fn=str(m.fn.dtype)))
    saved = _saved_total(model, ids)
    model(ids, labels=ids).loss.backward()
    return refused, {"shards": _by_dtype(p.to_local() for p in model.parameters()),
                     "grad_shards": _by_dtype(p.grad.to_local() for p in model.parameters() if p.grad is not None),
                     "grad_shard_storages": _storages(p.grad.to_local() for p in model.parameters()
                                                      if p.grad is not None),
                     "params_without_grad": sum(p.grad is None for p in model.parameters()),
                     "attn_hc_fn_dtype_in_forward": running["fn"], "saved_total": saved}


def _saved_in_bf16(ids) -> dict:
    """Saved-for-backward bytes of one forward (validation/trace/saved_by_module.py) with the fp32-kept parameters
    as loaded, and cast to bf16 as FSDP2's param_dtype and DeepSpeed's engine run them (buffers untouched): the
    totals and each module whose bytes differ, [kept fp32, computed in bf16]."""
    from validation.trace.saved_by_module import saved_bytes_by_module
    kept = saved_bytes_by_module(_model(), ids)
    model = _model()
    for p in model.parameters():
        p.data = p.data.to(torch.bfloat16)
    cast = saved_bytes_by_module(model, ids)
    return {"kept_fp32": sum(kept.values()), "computed_in_bf16": sum(cast.values()),
            "computed_in_bf16_total": _saved_total(model, ids),
            "differ": {k: [kept.get(k, 0), cast.get(k, 0)] for k in sorted(set(kept) | set(cast))
                       if kept.get(k, 0) != cast.get(k, 0)}}


def _deepspeed(ids, stage: int) -> dict:
    """deepspeed.initialize with bf16 and ZeRO `stage` (AdamW, torch's): the parameters' dtypes after the engine's
    cast, this rank's fp32 master partition (elements), the forward's saved bytes, one step."""
    import deepspeed
    model = _model()
    engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config={
        "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": stage},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}})
    flat = opt.fp32_partitioned_groups_flat if stage == 3 else opt.single_partition_of_fp32_groups
    out = {"param_elements": {str(k): sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel()
                                          for p in engine.module.parameters() if p.dtype == k)
                              for k in (torch.bfloat16, torch.float32)},
           "fp32_partition_elements": sum(t.numel() for t in flat), "saved_total": _saved_total(engine, ids)}
    engine.backward(engine(ids, labels=ids).loss)
    engine.step()
    return out


def _rank(rank: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=PORT, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(rank)
    ids = torch.randint(3, 1000, (1, TOKENS))
    model = _model()
    doc = {"world_size": 2, "tokens_per_rank": TOKENS, "params": _by_dtype(model.parameters()),
           "parameters": sum(p.numel() for p in model.parameters()),
           "fp32_parameters": sum(p.numel() for p in model.parameters() if p.dtype == torch.float32),
           "ddp": _ddp(model, ids, True)}
    checkpointed = {}
    for find_unused in (False, True):
        model = _model()
        model.gradient_checkpointing_enable()
        checkpointed[str(find_unused)] = _ddp(model, ids, find_unused)
    doc["ddp_checkpointing"] = checkpointed
    doc["fsdp2_bf16_model"], doc["fsdp2_accelerate"] = _fsdp2(ids)
    doc["deepspeed"] = {f"zero{stage}": _deepspeed(ids, stage) for stage in (2, 3)}
    if rank == 0:
        doc["saved_tensors"] = _saved_in_bf16(ids)
        queue.put(doc)
    dist.destroy_process_group()


def measure() -> dict:
    os.environ["DS_ACCELERATOR"] = "cpu"  # DeepSpeed's CPU accelerator, over the gloo group already initialised
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, queue)) for r in range(2)]
    for p in procs:
        p.start()
    doc = queue.get(timeout=600)
    for p in procs:
        p.join()
    doc["versions"] = {"torch": torch.__version__, "transformers": __import__("transformers").__version__}
    return doc


def whole_steps(check: bool) -> int:
    """make_golden's whole-step goldens of the tiny model with every parameter bf16 (its plain build), written to
    tests/golden_stacks/ beside the trace (not tests/golden/: the one-GPU matrix keeps the fp32-kept ones)."""
    from validation.architectures.dsv4_golden import DEEPSEEK_V4_TINY
    from validation.trace import make_golden
    from validation.trace.make_golden import T

    def run_case(case) -> dict:
        doc = make_golden.run_case(case)
        doc["notes"] += (" Every parameter bf16, the fp32-kept ones of _keep_in_fp32_modules_strict too, as FSDP2's "
                         "param_dtype and DeepSpeed's bf16 engine run them (validation/architectures/dsv4_stacks.py).")
        return doc

    matrix = [T(CAST, 1, 128, "eager"), T(CAST, 2, 128, "eager"), T(CAST, 1, 128, "eager", "full")]
    from validation.trace import accounting, optimizer
    with mock.patch.dict(make_golden.MODELS, {CAST: DEEPSEEK_V4_TINY}), \
            mock.patch.object(accounting, "build_train_states", optimizer.build_reached_train_states):
        return make_golden.run_matrix(matrix, run_case, lambda stem: stem.startswith(CAST + "__"), out=OUT.parent,
                                      only=None, check=check)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--whole", action="store_true")
    args = ap.parse_args(argv)
    if args.whole:
        return whole_steps(args.check)
    doc = measure()
    if args.check:
        same = json.loads(OUT.read_text()) == json.loads(json.dumps(doc))
        print("unchanged" if same else "CHANGED")
        return 0 if same else 1
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
