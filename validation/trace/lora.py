"""Exact byte accounting of one LoRA fine-tuning step, with the real `peft` library on a real `transformers` model.

Same method and protocol as `trace.measure_train` (validation/README.md), with these differences:

- The base model is built in bf16 (``params_dtype``) and frozen; ``peft.get_peft_model`` adds
  ``LoraConfig(r, lora_alpha = 2r, lora_dropout = 0.0, target_modules, bias = "none")`` adapters.  Only the adapter
  parameters (``requires_grad``) get persistent gradients, a master copy (recipe ``mixed``) and optimizer state.
- The adapter dtype is whatever PEFT leaves: ``get_peft_model(..., autocast_adapter_dtype=True)`` (PEFT's default)
  upcasts bf16/fp16 adapters to fp32; with ``autocast_adapter_dtype=False`` they take the base layer's dtype.
  The recipes ``mixed`` and ``pure-bf16`` pass ``False`` (bf16 adapters); ``fp32-adapters`` is PEFT's default.
  The dtype found on the built model is recorded (``adapter_dtype``), not assumed.
- Whether the first decoder layer's input requires grad is recorded (``input_requires_grad``): by default the
  frozen embedding's output does not; ``model.enable_input_require_grads()`` makes it a leaf that requires grad.
  HF's ``activation_checkpointing_enable`` calls ``enable_input_require_grads`` itself for causal LMs, so full
  recompute has it on unless it is switched off again (``input_requires_grad=False``).

The step itself is trace.py's: ``trace_optimizer.train_states`` (master copy, initialised optimizer) and
``trace.run_train_step`` (the traced forward, backward and optimizer step, and the numbers taken from them), so
the two measurements cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import torch

from validation.trace import accounting as trace
from validation.trace.models import DTYPES, build_model, count_parameters, decoder_layers
from validation.trace.optimizer import TrainStates, optimizer_state_tensors, train_states
from validation.trace.tracker import MemoryTracker, storage_bytes

# The LoRA target sets, named as calculator.memory.lora.TARGETS names them, as PEFT `target_modules` per architecture.
TARGET_MODULES: dict[str, dict[str, list[str] | str]] = {
    "qv": {"default": ["q_proj", "v_proj"], "phi3": ["qkv_proj"], "gpt2": ["c_attn"]},
    "attention": {"default": ["q_proj", "k_proj", "v_proj", "o_proj"], "phi3": ["qkv_proj", "o_proj"],
                  "gpt2": ["c_attn", "attn.c_proj"]},
    "all-linear": {"default": "all-linear"},
}

# recipe: (adapter dtype asked of PEFT or None for PEFT's default autocast, grads, master, optimizer state)
LORA_RECIPES = {
    "mixed": ("bf16", "bf16", "fp32", "fp32"),
    "pure-bf16": ("bf16", "bf16", None, "bf16"),
    "fp32-adapters": (None, "fp32", None, "fp32"),  # PEFT's default: autocast_adapter_dtype=True upcasts to fp32
}
BASE_DTYPE = "bf16"


def peft_target_modules(model_type: str, targets: str):
    table = TARGET_MODULES[targets]
    return table.get(model_type, table["default"])


def lora_config(model_type: str, targets: str, rank: int):
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, bias="none",
                      target_modules=peft_target_modules(model_type, targets), task_type="CAUSAL_LM",
                      fan_in_fan_out=model_type == "gpt2")


def build_lora_model(model_cfg: dict, *, targets: str, rank: int, recipe: str, attention: str, recompute: str,
                     device: str, num_hidden_layers: int | None = None, seed: int = 0,
                     input_requires_grad: bool | None = None):
    """The frozen bf16 base with PEFT LoRA adapters.  Returns (peft_model, hf_model).  `input_requires_grad`:
    None keeps what HF/PEFT set up (on with full recompute), True/False forces it."""
    import warnings

    from peft import get_peft_model

    hf = build_model(model_cfg, BASE_DTYPE, attention, recompute, device, num_hidden_layers, seed)
    hf.train()
    if recompute == "full":
        trace.enable_full_recompute(hf)  # also calls hf.enable_input_require_grads() (transformers >= 4.35)
    adapter_dtype = LORA_RECIPES[recipe][0]
    cfg = lora_config(model_cfg["model_type"], targets, rank)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fan_in_fan_out for GPT-2's Conv1D, tied-embedding notices
        # not under torch.device(device): PEFT creates the adapters on the host and moves them to the base layer's
        # device and dtype (_move_adapter_to_device_of_base_layer skips adapters that are already on meta, which
        # would leave them fp32)
        model = get_peft_model(hf, cfg, autocast_adapter_dtype=adapter_dtype is None)
    if input_requires_grad is not None:
        _set_input_requires_grad(hf, input_requires_grad)
    model.train()
    return model, hf


def _set_input_requires_grad(hf, flag: bool) -> None:
    """Remove every `make_inputs_require_grads` hook from the input embeddings (HF's checkpointing and PEFT may
    each have registered one, and `disable_input_require_grads` only removes the last set), then add one back if
    `flag`."""
    emb = hf.get_input_embeddings()
    for key, fn in list(emb._forward_hooks.items()):
        if getattr(fn, "__name__", "") == "make_inputs_require_grads":
            del emb._forward_hooks[key]
    hf._require_grads_hooks = []
    if flag:
        hf.enable_input_require_grads()


def _first_tensor(args, kwargs) -> torch.Tensor:
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    return kwargs["hidden_states"]


def _dtype_name(dt: torch.dtype) -> str:
    return {v: k for k, v in DTYPES.items()}[dt]


def build_lora_states(trainable: list, recipe: str, optimizer: str, foreach: bool) -> TrainStates:
    """trace_optimizer.build_train_states for the trainable (adapter) parameters only: persistent grads in the adapter
    dtype, an fp32 master copy for `mixed`, an optimizer that has taken one step with zero gradients."""
    _, _, master_dtype, _ = LORA_RECIPES[recipe]
    for p in trainable:
        p.grad = torch.zeros_like(p)  # the gradient's dtype must be the parameter's
    return train_states(trainable, master_dtype, optimizer, foreach)


@dataclass
class LoraMeasurement(trace.Measurement):
    run: dict


def expected_trainable(hf_model) -> int:
    """Σ r·(in + out) over the LoRA-wrapped linears (Hu et al. 2021 §4.1), from the base layers' shapes."""
    from peft.tuners.lora import LoraLayer

    total = 0
    for mod in hf_model.modules():
        if isinstance(mod, LoraLayer):
            r = mod.r["default"]
            total += r * (mod.in_features + mod.out_features)
    return total


def measure_lora_train(model_cfg: dict, *, targets: str, rank: int, micro_batch: int, seq_len: int,
                       recipe: str = "mixed", attention: str = "flash", recompute: str = "none",
                       optimizer: str = "adamw", foreach: bool = False, device: str = "meta",
                       input_requires_grad: bool | None = None, num_hidden_layers: int | None = None, seed: int = 0,
                       inspect: Callable[[MemoryTracker], None] | None = None) -> LoraMeasurement:
    """One LoRA training step under the protocol of validation/README.md (section LoRA)."""
    if recompute == "selective":
        raise ValueError("selective recompute is not in the LoRA matrix")
    model, hf = build_lora_model(model_cfg, targets=targets, rank=rank, recipe=recipe,
                                             attention=attention, recompute=recompute, device=device,
                                             num_hidden_layers=num_hidden_layers, seed=seed,
                                             input_requires_grad=input_requires_grad)
    all_params = list(model.parameters())
    trainable = [p for p in all_params if p.requires_grad]
    frozen = [p for p in all_params if not p.requires_grad]
    adapter_dtypes = sorted({_dtype_name(p.dtype) for p in trainable})
    assert len(adapter_dtypes) == 1, adapter_dtypes
    adapter_dtype = adapter_dtypes[0]
    states = build_lora_states(trainable, recipe, optimizer, foreach)
    dev = torch.device(device)
    vocab = hf.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab, (micro_batch, seq_len), generator=g).to(dev)

    buffers = list(model.buffers())
    opt_tensors = optimizer_state_tensors(states.optimizer)
    step_scalars = [t for t in opt_tensors if t.dim() == 0]
    n_trainable = sum(p.numel() for p in trainable)
    measured = {
        "parameters": count_parameters(model),
        "trainable_parameters": n_trainable,
        "weights": storage_bytes(all_params),
        "master_weights": storage_bytes(states.master or []),
        "gradients": storage_bytes([p.grad for p in trainable]),
        "optimizer_states": storage_bytes(opt_tensors),
    }
    details = {
        "buffers": storage_bytes(buffers),
        "base_weights": storage_bytes(frozen),
        "adapter_weights": storage_bytes(trainable),
        "trainable_parameters_expected": expected_trainable(hf),
        "optimizer_step_scalars": storage_bytes(step_scalars),
        "optimizer_step_scalars_device": sorted({t.device.type for t in step_scalars}),
        "inputs": storage_bytes([input_ids]),
        "num_param_tensors": len(trainable),
        "num_frozen_param_tensors": len(frozen),
        "lora_modules": sorted({re.sub(r"\.\d+\.", ".*.", n) for n, m in hf.named_modules() if hasattr(m, "lora_A")}),
    }

    observed: list[bool] = []  # does the first decoder layer's input require grad? (observed, not assumed)

    def observe_first_layer_input() -> list:
        return [decoder_layers(hf)[0].register_forward_pre_hook(
            lambda mod, args, kwargs: observed.append(_first_tensor(args, kwargs).requires_grad), with_kwargs=True)]

    trace.run_train_step(model, states, input_ids, measured, details, hf_model=hf, inspect=inspect,
                         more_hooks=observe_first_layer_input)
    assert len(observed) == 1, observed
    input_grad = observed[0]

    _, grads_dtype, master_dtype, opt_dtype = LORA_RECIPES[recipe]
    if optimizer == "sgd-momentum":
        opt_dtype = master_dtype or adapter_dtype
    run = {"mode": "train", "micro_batch": micro_batch, "seq_len": seq_len, "gen_tokens": 0, "recipe": recipe,
           "params_dtype": BASE_DTYPE, "grads_dtype": adapter_dtype, "master_weights_dtype": master_dtype,
           "optimizer": optimizer, "optimizer_dtype": opt_dtype, "optimizer_foreach": foreach,
           "recompute": recompute, "attention": attention,
           "finetune": "lora", "lora_rank": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.0,
           "lora_targets": targets, "peft_target_modules": peft_target_modules(model_cfg["model_type"], targets),
           "input_requires_grad": input_grad, "adapter_dtype": adapter_dtype,
           "peft_autocast_adapter_dtype": LORA_RECIPES[recipe][0] is None}
    assert run["grads_dtype"] == grads_dtype, (run["grads_dtype"], grads_dtype)
    return LoraMeasurement(measured, details, run)
