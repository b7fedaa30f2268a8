"""Exact byte accounting of one training step and one inference step of a real `transformers` model.

The model is built from a config dict (never from downloaded weights), normally on the ``meta`` device so that
full-size 8B/47B configs cost no memory, and every tensor storage that an operator allocates is recorded by a
``TorchDispatchMode`` together with a weakref finaliser that fires when the storage dies.  The live total and its
peak are therefore exact in bytes (no allocator rounding; a 512-byte rounded shadow total is kept as well).  What
autograd saves is recorded with ``torch.autograd.graph.saved_tensors_hooks``, deduplicated by storage.

See validation/README.md for the protocol (what exists before the step, what is measured, what the trace cannot
see) and for how CUDA kernels (FlashAttention-2, fused dropout) are emulated on meta/CPU.

The pieces: trace_tracker.py (the tracker and byte counting), trace_emulation.py (CUDA kernels on meta/CPU),
trace_models.py (model construction and phase hooks), trace_optimizer.py (optimizer states and step). This module
runs one step with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from validation.trace.emulation import device_emulation
from validation.trace.models import install_phase_hooks, build_model, count_parameters
from validation.trace.optimizer import RECIPES, TrainStates, build_train_states, optimizer_state_tensors, optimizer_step
from validation.trace.tracker import ACTIVE, MemoryTracker, round_cuda, storage_bytes, storage_keys


@dataclass
class Measurement:
    measured: dict
    details: dict


def enable_full_recompute(model):
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})


def measure_train(model_cfg: dict, *, micro_batch: int, seq_len: int, recipe: str = "mixed", attention: str = "flash",
                  recompute: str = "none", optimizer: str = "adamw", foreach: bool = False, device: str = "meta",
                  num_hidden_layers: int | None = None, seed: int = 0,
                  inspect: Callable[[MemoryTracker], None] | None = None) -> Measurement:
    """One training step under the protocol of validation/README.md.  `inspect`, if given, is called with the
    tracker at the end of the forward (e.g. ``lambda t: print(t.live_entries("layer.1"))``)."""
    params_dtype = RECIPES[recipe][0]
    model = build_model(model_cfg, params_dtype, attention, recompute, device, num_hidden_layers, seed)
    model.train()
    if recompute == "full":
        enable_full_recompute(model)
    states = build_train_states(model, recipe, optimizer, foreach)
    dev = torch.device(device)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab, (micro_batch, seq_len), generator=g).to(dev)

    params = states.params
    buffers = [b for b in model.buffers()]
    opt_tensors = optimizer_state_tensors(states.optimizer)
    step_scalars = [t for t in opt_tensors if t.dim() == 0]
    measured = {
        "parameters": count_parameters(model),
        "weights": storage_bytes(params),
        "master_weights": storage_bytes(states.master or []),
        "gradients": storage_bytes([p.grad for p in params]),
        "optimizer_states": storage_bytes(opt_tensors),
    }
    details = {
        "buffers": storage_bytes(buffers),
        "optimizer_step_scalars": storage_bytes(step_scalars),
        "optimizer_step_scalars_device": sorted({t.device.type for t in step_scalars}),
        "inputs": storage_bytes([input_ids]),
        "num_param_tensors": len(params),
    }

    run_train_step(model, states, input_ids, measured, details, inspect=inspect)
    return Measurement(measured, details)


def run_train_step(model, states: TrainStates, input_ids: torch.Tensor, measured: dict, details: dict, *,
                   hf_model=None, inspect: Callable[[MemoryTracker], None] | None = None,
                   more_hooks: Callable[[], list] | None = None) -> None:
    """Protocol steps 2 and 3 under a MemoryTracker: the forward of `model` with labels = input_ids, the backward
    and `optimizer_step(states)`.  Persistent (not traced): the model's parameters and buffers, the grads of
    `states.params`, the master copy, the optimizer state and `input_ids`.

    `hf_model` is the transformers model inside `model` (the phase hooks go on its layers; default `model`);
    `more_hooks`, if given, registers further hooks after the phase hooks and returns their handles.  `measured`
    must hold weights, master_weights, gradients and optimizer_states, `details` buffers; both are completed with
    what the step measured (activations, loss_head, the peaks, ...)."""
    hf_model = model if hf_model is None else hf_model
    tracker = MemoryTracker(input_ids.device.type)
    tracker.persistent_keys = (storage_keys(model.parameters()) | storage_keys([p.grad for p in states.params])
                               | storage_keys(model.buffers()) | storage_keys(states.master or [])
                               | storage_keys(optimizer_state_tensors(states.optimizer)) | storage_keys([input_ids]))
    hooks = install_phase_hooks(hf_model, tracker)
    if more_hooks is not None:
        hooks += more_hooks()
    ACTIVE.append(tracker)
    try:
        with device_emulation(tracker.device_type), tracker:
            tracker.phase = "pre"
            tracker.reset_peak()
            with torch.autograd.graph.saved_tensors_hooks(tracker.pack_hook, tracker.unpack_hook):
                out = model(input_ids=input_ids, labels=input_ids, use_cache=False)
            loss = out.loss
            del out
            loss_key = storage_keys([loss])
            by_phase = tracker.live_by_phase(exclude_keys=loss_key)
            if inspect is not None:
                inspect(tracker)
            end_fwd_live = sum(by_phase.values())
            saved = dict(tracker.saved)
            peak_fwd = tracker.peak
            peak_fwd_phase = tracker.peak_phase
            tracker.phase = "backward"
            loss.backward()
            del loss
            peak_fwd_bwd = tracker.peak
            peak_fwd_bwd_rounded = tracker.peak_rounded
            peak_fwd_bwd_phase = tracker.peak_phase
            peak_fwd_bwd_op = tracker.peak_op
            peak_fwd_bwd_by_phase = _group_phases(tracker.peak_by_phase)
            after_bwd = tracker.current
            tracker.phase = "step"
            tracker.reset_peak()
            optimizer_step(states)
            peak_step_op = tracker.peak_op
            peak_step = tracker.peak - after_bwd
            peak_step_rounded = tracker.peak_rounded - round_cuda(after_bwd) if after_bwd else tracker.peak_rounded
            after_step = tracker.current
    finally:
        ACTIVE.pop()
        for h in hooks:
            h.remove()
        tracker.detach_all()

    layer_phases = [f"layer.{i}" for i in range(hf_model.config.num_hidden_layers)]
    per_layer = [by_phase.get(p, 0) for p in layer_phases]
    saved_act = sum(nb for nb, _, kind in saved.values() if kind == "activation")
    saved_persist = sum(nb for nb, _, kind in saved.values() if kind == "persistent")
    persistent = (measured["weights"] + details["buffers"] + measured["master_weights"] + measured["gradients"]
                  + measured["optimizer_states"])
    measured.update({
        "activations": end_fwd_live,
        "loss_head": by_phase.get("head", 0),
        "peak_fwd_bwd": peak_fwd_bwd,
        "peak_step": peak_step,
        "peak_allocated": persistent + max(peak_fwd_bwd, peak_step),
        "kv_cache": 0,
        "peak_prefill": 0,
        "peak_decode": 0,
    })
    details.update({
        "activations_non_layer_by_phase": {k: by_phase[k] for k in sorted(by_phase, key=_phase_order)
                                           if not k.startswith("layer.")},
        "activations_per_layer": per_layer,
        "activations_non_layer": end_fwd_live - sum(per_layer),
        "saved_tensor_bytes_excluding_persistent": saved_act,
        "saved_persistent_bytes_excluded": saved_persist,
        "peak_forward": peak_fwd,
        "peak_forward_phase": peak_fwd_phase,
        "peak_fwd_bwd_phase": peak_fwd_bwd_phase,
        "peak_fwd_bwd_op": peak_fwd_bwd_op,
        "peak_fwd_bwd_by_allocation_phase": peak_fwd_bwd_by_phase,
        "peak_fwd_bwd_cuda_rounded": peak_fwd_bwd_rounded,
        "peak_step_op": peak_step_op,
        "peak_step_cuda_rounded": peak_step_rounded,
        "persistent_total": persistent,
        "live_after_backward": after_bwd,
        "live_after_step": after_step,
        "allocations": tracker.n_allocs,
    })


def _group_phases(by_phase: dict[str, int]) -> dict[str, int]:
    """Live bytes grouped by where they were allocated: pre, layers (all decoder layers), final_norm, head,
    backward (gradients and recomputation)."""
    out: dict[str, int] = {}
    for p, nb in by_phase.items():
        key = "layers" if p.startswith("layer.") else p
        out[key] = out.get(key, 0) + nb
    order = ["pre", "layers", "final_norm", "head", "backward"]
    return {k: out[k] for k in sorted(out, key=lambda k: order.index(k) if k in order else len(order))}


def _phase_order(p: str):
    if p.startswith("layer."):
        return (1, int(p.split(".")[1]))
    return ({"pre": 0, "final_norm": 2, "head": 3}.get(p, 4), 0)


# ---------------------------------------------------------------------------------------------------------------
# Inference step
# ---------------------------------------------------------------------------------------------------------------


def cache_tensors(cache) -> list:
    ts = []
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                ts.append(t)
    return ts


def measure_infer(model_cfg: dict, *, micro_batch: int, prompt_len: int, gen_tokens: int, dtype: str = "bf16",
                  attention: str = "flash", device: str = "meta", num_hidden_layers: int | None = None,
                  seed: int = 0) -> Measurement:
    """generate()-like greedy loop: prefill of `prompt_len` tokens (logits_to_keep=1, fp32 copy of the last
    logits, argmax), then `gen_tokens` decode forwards of one token each, with a DynamicCache."""
    from transformers import DynamicCache

    model = build_model(model_cfg, dtype, attention, "none", device, num_hidden_layers, seed)
    model.eval()
    dev = torch.device(device)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab, (micro_batch, prompt_len), generator=g).to(dev)
    params = list(model.parameters())
    buffers = list(model.buffers())
    measured = {
        "parameters": count_parameters(model),
        "weights": storage_bytes(params),
        "master_weights": 0, "gradients": 0, "optimizer_states": 0, "activations": 0, "loss_head": 0,
        "peak_fwd_bwd": 0, "peak_step": 0,
    }
    details = {"buffers": storage_bytes(buffers), "inputs": storage_bytes([input_ids])}
    tracker = MemoryTracker(dev.type)
    tracker.persistent_keys = storage_keys(params) | storage_keys(buffers) | storage_keys([input_ids])
    ACTIVE.append(tracker)
    try:
        with device_emulation(dev.type), tracker, torch.no_grad():
            tracker.phase = "prefill"
            tracker.reset_peak()
            cache = DynamicCache(config=model.config)
            ids = input_ids
            out = model(input_ids=ids.clone(), past_key_values=cache, use_cache=True, logits_to_keep=1)
            next_logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
            del out
            next_tokens = torch.argmax(next_logits, dim=-1)
            del next_logits
            ids = torch.cat([ids, next_tokens[:, None]], dim=-1)
            peak_prefill = tracker.peak
            peak_prefill_op = tracker.peak_op
            peak_prefill_rounded = tracker.peak_rounded
            kv_after_prefill = storage_bytes(cache_tensors(cache))
            live_after_prefill = tracker.current
            tracker.phase = "decode"
            tracker.reset_peak()
            for _ in range(gen_tokens):
                out = model(input_ids=ids[:, -1:].clone(), past_key_values=cache, use_cache=True, logits_to_keep=1)
                next_logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
                del out
                next_tokens = torch.argmax(next_logits, dim=-1)
                del next_logits
                ids = torch.cat([ids, next_tokens[:, None]], dim=-1)
            peak_decode = tracker.peak if gen_tokens else 0
            peak_decode_op = tracker.peak_op if gen_tokens else ""
            peak_decode_rounded = tracker.peak_rounded if gen_tokens else 0
            kv_cache = storage_bytes(cache_tensors(cache))
            kv_view_bytes = sum(t.numel() * t.element_size() for t in cache_tensors(cache))
            cache_len = cache.get_seq_length()
            live_end = tracker.current
            del cache, ids, next_tokens
    finally:
        ACTIVE.pop()
        tracker.detach_all()
    measured.update({
        "peak_allocated": measured["weights"] + details["buffers"] + max(peak_prefill, peak_decode),
        "kv_cache": kv_cache,
        "peak_prefill": peak_prefill,
        "peak_decode": peak_decode,
    })
    details.update({
        "kv_cache_after_prefill": kv_after_prefill,
        "kv_cache_view_bytes": kv_view_bytes,
        "cache_seq_length": cache_len,
        "live_after_prefill": live_after_prefill,
        "live_end": live_end,
        "peak_prefill_op": peak_prefill_op,
        "peak_decode_op": peak_decode_op,
        "peak_prefill_cuda_rounded": peak_prefill_rounded,
        "peak_decode_cuda_rounded": peak_decode_rounded,
        "allocations": tracker.n_allocs,
    })
    return Measurement(measured, details)
