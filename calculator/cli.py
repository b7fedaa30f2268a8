"""Command line: `python -m calculator presets | estimate | solve | plan | advise | sweep`.

    python -m calculator estimate --model llama-3.1-8b --mode train --seq 4096 --zero 3 --dp 8 --gpu h100-sxm
    python -m calculator estimate --model path/to/config.json --mode infer --seq 32768 --json
    python -m calculator estimate --model Qwen/Qwen3-8B ...          # fetched from the Hub (HF_TOKEN, HF_ENDPOINT)
    python -m calculator estimate --config run.json --tp 2           # the whole input from a file, flags override
    python -m calculator solve --model llama-3.1-8b --gpu h100-sxm --for micro_batch

Bad input exits with status 2 and one line naming the field and what to change — never a traceback.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
from typing import Any

from pydantic import ValidationError

from calculator.bounds import describe
from calculator.cli_checks import PLAN_SECONDS, FlagError, check_command_flags, deadline, flag
from calculator.config_read import MAX_CONFIG_BYTES, ConfigError, parse_config_json
from calculator.errors import InputError
from calculator.impls import IMPLS
from calculator.model import GenericModel, ModelSpec
from calculator.result import COMPONENT_LABELS
from calculator.units import format_bytes
from calculator.stacks import STACKS
from calculator.workload import OPTIMIZERS, RECIPES, Workload

DTYPES = ["fp32", "bf16", "fp16", "fp8", "int8", "int4", "nf4", "fp4"]

# flag -> (path in the Workload dict)
FLAG_PATHS: dict[str, tuple[str, ...]] = {
    "mode": ("mode",), "batch": ("micro_batch",), "seq": ("seq_len",), "gen": ("gen_tokens",),
    "params_dtype": ("precision", "params"), "grads_dtype": ("precision", "grads"),
    "optimizer_dtype": ("precision", "optimizer_states"), "activation_dtype": ("precision", "activations"),
    "optimizer": ("optimizer",), "optimizer_impl": ("optimizer_impl",), "recompute": ("recompute",),
    "attention": ("attention",), "activation_model": ("activation_model",), "kv_dtype": ("kv_dtype",),
    "weight_dtype": ("weight_dtype",), "quant_group_size": ("quant_group_size",), "quant_method": ("quant_method",),
    "tp": ("parallel", "tp"), "pp": ("parallel", "pp"), "dp": ("parallel", "dp"), "cp": ("parallel", "cp"),
    "ep": ("parallel", "ep"), "etp": ("parallel", "etp"), "sequence_parallel": ("parallel", "sequence_parallel"),
    "zero": ("parallel", "zero"), "zero_shard_size": ("parallel", "zero_shard_size"),
    "distributed_optimizer": ("parallel", "distributed_optimizer"), "schedule": ("parallel", "schedule"),
    "offload_optimizer": ("parallel", "offload_optimizer"), "offload_params": ("parallel", "offload_params"),
    "vpp": ("parallel", "virtual_stages"), "microbatches": ("parallel", "num_microbatches"),
    "pp_first_stage_layers": ("parallel", "pp_first_stage_layers"),
    "pp_last_stage_layers": ("parallel", "pp_last_stage_layers"),
    "fragmentation": ("overheads", "fragmentation_pct"), "cuda_context": ("overheads", "cuda_context_bytes"),
    "gpu": ("gpu",), "stack": ("stack",), "bucket_view": ("ddp_bucket_view",), "impl": ("impl",),
    "expandable_segments": ("expandable_segments",), "finetune": ("finetune",), "lora_rank": ("lora_rank",),
    "lora_targets": ("lora_targets",), "qlora_keeps_inputs": ("qlora_keeps_inputs",), "kbit_prep": ("kbit_prep",),
    "padded_batch": ("padded_batch",),
    # serving engine (calculator/engines)
    "engine": ("engine",), "memory_fraction": ("serving", "memory_fraction"),
    "max_model_len": ("serving", "max_model_len"), "max_num_batched_tokens": ("serving", "max_num_batched_tokens"),
    "max_num_seqs": ("serving", "max_num_seqs"), "block_size": ("serving", "block_size"),
    "prefix_caching": ("serving", "prefix_caching"), "cuda_graphs": ("serving", "cuda_graphs"),
    "attention_dp": ("serving", "attention_dp"), "engine_version": ("serving", "version"),
    "expert_weight_dtype": ("expert_weight_dtype",),
    # RL post-training (calculator/rl.py)
    "rollout_batch_size": ("rl", "rollout_batch_size"), "samples_per_prompt": ("rl", "samples_per_prompt"),
    "prompt_len": ("rl", "prompt_len"), "response_len": ("rl", "response_len"),
    "rollout_engine": ("rl", "rollout_engine"), "rollout_tp": ("rl", "rollout_tp"), "colocate": ("rl", "colocate"),
    "rollout_gpus": ("rl", "rollout_gpus"), "rollout_memory_fraction": ("rl", "memory_fraction"),
    "offload_train": ("rl", "offload_train"), "engine_sleep": ("rl", "engine_sleep"),
    "reference_model": ("rl", "reference_model"), "critic": ("rl", "critic"), "reward_model": ("rl", "reward_model"),
    "offload_aux": ("rl", "offload_aux"),
}


class CliError(Exception):
    """One line for stderr; exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the flag and the allowed values), not the whole usage text."""

    def error(self, message: str):
        raise CliError(message.replace("argument ", "", 1))


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m calculator", description="LLM GPU memory calculator")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("presets", help="list model presets and GPUs").add_argument("--json", action="store_true")
    helps = {"estimate": "estimate per-GPU memory", "solve": "largest batch / sequence",
             "plan": "parallel layouts that fit a GPU",
             "advise": "ranked remedies when a job does not fit, and a combination that does",
             "sweep": "memory against micro-batch, sequence length or GPU count",
             "export": "a ready-to-run framework config for this input"}
    for name in ("estimate", "solve", "plan", "advise", "sweep", "export"):
        p = sub.add_parser(name, help=helps[name])
        p.add_argument("--model", help="preset id, path to a config.json, or a Hugging Face id (org/name)")
        p.add_argument("--config", help="JSON file with the whole input: {\"model\": ..., workload fields}")
        p.add_argument("--generic-params", type=int, help="generic network: total parameters (seed 004)")
        p.add_argument("--generic-activations", type=int, help="generic network: activation elements per sample")
        p.add_argument("--mode", choices=["train", "infer", "rl"])
        p.add_argument("--batch", type=int, help="micro-batch size")
        p.add_argument("--seq", type=int, help="sequence length (prompt length for inference)")
        p.add_argument("--gen", type=int, help="generated tokens (inference)")
        p.add_argument("--recipe", choices=list(RECIPES), help="precision recipe (dtype flags override it)")
        p.add_argument("--params-dtype", choices=DTYPES)
        p.add_argument("--grads-dtype", choices=DTYPES)
        p.add_argument("--master-weights", dest="master_weights", action="store_true", default=None)
        p.add_argument("--no-master-weights", dest="master_weights", action="store_false")
        p.add_argument("--optimizer", choices=list(OPTIMIZERS))
        p.add_argument("--optimizer-dtype", choices=DTYPES)
        p.add_argument("--optimizer-impl", choices=["fused", "foreach", "for-loop"])
        p.add_argument("--activation-dtype", choices=["fp32", "bf16", "fp16"])
        p.add_argument("--recompute", choices=["none", "selective", "full", "op"],
                       help="op: torchtitan's op-level selective AC (every other matmul output and the SDPA output kept)")
        p.add_argument("--attention", choices=["flash", "eager", "sdpa"],
                       help="flash: FlashAttention-2; sdpa: PyTorch SDPA (flash kernel, or with a padding / "
                            "sliding-window mask the efficient kernel); eager: transformers' matmul + softmax")
        p.add_argument("--activation-model", choices=["exact", "textbook", "fujii"])
        p.add_argument("--impl", choices=list(IMPLS),
                       help="model implementation: transformers (hf), + Liger kernels, compiled blocks, Megatron/TE")
        p.add_argument("--kv-dtype", choices=["fp32", "bf16", "fp16", "fp8", "int8", "int4"])
        p.add_argument("--weight-dtype", choices=DTYPES, help="inference weight precision")
        p.add_argument("--quant-group-size", type=int)
        p.add_argument("--quant-method", choices=["awq", "gptq", "llm-int8"],
                       help="int4/int8 checkpoint layout (llm-int8: bitsandbytes load_in_8bit)")
        for flag in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "microbatches", "zero-shard-size"):
            p.add_argument(f"--{flag}", type=int)
        p.add_argument("--pp-first-stage-layers", type=int,
                       help="decoder layers of the first pipeline stage (uneven stages, Megatron's "
                            "--decoder-first-pipeline-num-layers); the middle stages split the rest evenly")
        p.add_argument("--pp-last-stage-layers", type=int,
                       help="decoder layers of the last pipeline stage (--decoder-last-pipeline-num-layers)")
        p.add_argument("--zero", type=int, choices=[0, 1, 2, 3])
        p.add_argument("--sequence-parallel", action="store_true", default=None)
        p.add_argument("--distributed-optimizer", action="store_true", default=None)
        p.add_argument("--offload-optimizer", action="store_true", default=None, help="ZeRO-Offload to host RAM")
        p.add_argument("--offload-params", action="store_true", default=None, help="ZeRO-3 parameters in host RAM")
        p.add_argument("--schedule", choices=["1f1b", "interleaved"])
        p.add_argument("--fragmentation", type=float, help="allocator fragmentation, %% of peak allocated")
        p.add_argument("--cuda-context", type=int, help="CUDA context bytes (default: the GPU's own)")
        p.add_argument("--gpu", help="GPU id from `presets` (fit verdict, CUDA context)")
        p.add_argument("--stack", choices=list(STACKS),
                       help="training stack (default: follows the layout: one GPU hf-trainer, DP ddp, ZeRO deepspeed, "
                            "TP/PP megatron)")
        p.add_argument("--zero-grad", choices=["none", "zeros"],
                       help="optimizer.zero_grad: none = set_to_none=True (default, grads freed after the step), "
                            "zeros = zeroed in place (held for the whole step)")
        p.add_argument("--bucket-view", action="store_true", default=None,
                       help="DDP gradient_as_bucket_view=True (gradients are views into DDP's buckets)")
        p.add_argument("--expandable-segments", action="store_true", default=None,
                       help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
        p.add_argument("--finetune", choices=["full", "lora", "qlora"], help="full fine-tuning or adapters")
        p.add_argument("--lora-rank", type=int)
        p.add_argument("--lora-targets", choices=["qv", "attention", "all-linear"])
        p.add_argument("--kbit-prep", action="store_true", default=None,
                       help="QLoRA: peft.prepare_model_for_kbit_training (non-4-bit weights and activations in fp32)")
        p.add_argument("--qlora-keeps-inputs", action="store_true", default=None,
                       help="QLoRA on bitsandbytes < 0.43 (its 4-bit linears kept their inputs for backward)")
        p.add_argument("--padded-batch", action="store_true", default=None,
                       help="an attention_mask with padding (SDPA: 4-D mask, memory-efficient kernel)")
        _timing_flags(p)
        _serving_flags(p)
        _rl_flags(p)
        p.add_argument("--unit", choices=["GB", "GiB"], default="GB")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        if name == "solve":
            p.add_argument("--for", dest="solve_for", choices=["micro_batch", "seq_len"], default="micro_batch")
            p.add_argument("--no-safe-band", action="store_true", help="fill to 100%% instead of the 80%% band")
        if name in ("advise", "sweep"):
            from calculator.cli_advise import add_flags
            add_flags(p, name)
        if name == "export":
            from calculator.cli_export import add_flags as add_export_flags
            add_export_flags(p)
        if name == "plan":
            p.add_argument("--gpus", type=int, help="exactly this many GPUs (default: the fewest that fit)")
            p.add_argument("--max-tp", type=int, default=8, help="largest tensor-parallel size (one node)")
            p.add_argument("--rank", choices=["memory", "time", "cost"], default="memory",
                           help="order layouts by memory (fits, fewest GPUs, largest micro-batch, least recompute, "
                                "lowest memory), time (tokens/s) or cost")
            p.add_argument("--limit", type=int, help="print at most this many layouts (default: all)")
            p.add_argument("--max-micro-batch", type=int,
                           help="largest micro-batch to try (default: --batch); smaller powers of two are tried too")
            p.add_argument("--max-seconds", type=float, default=PLAN_SECONDS,
                           help="give up the search after this many seconds (default %(default)g)")
            p.add_argument("--include-unfit", action="store_true",
                           help="also list the layouts that do not fit (ranked after those that do)")
    return ap


# flag -> TimingInputs field (calculator/timing_inputs.py): the time estimate's editable constants
TIMING_FLAGS: dict[str, tuple[str, type, str]] = {
    "price_per_gpu_hour": ("price_per_gpu_hour", float, "USD per GPU-hour (cost per million tokens)"),
    "matmul_efficiency": ("matmul_efficiency", float, "share of the dense peak a GEMM reaches (0-1]"),
    "attention_efficiency": ("attention_efficiency", float, "share of the peak the flash kernel reaches (0-1]"),
    "memory_efficiency": ("memory_efficiency", float, "share of DRAM bandwidth elementwise kernels reach (0-1]"),
    "host_op_us": ("host_op_us", float, "host microseconds per forward operator (eager PyTorch)"),
    "nvlink_gbps": ("nvlink_gbps", float, "GPU-to-GPU GB/s per direction inside a node (default: catalogue / 2)"),
    "ib_gbps": ("ib_gbps", float, "network GB/s per GPU per direction across nodes (default 50 = 400 Gb/s)"),
    "gpus_per_node": ("gpus_per_node", int, "GPUs per node (default 8)"),
    "peak_tflops": ("peak_tflops", float, "dense TFLOP/s (default: the GPU catalogue's)"),
    "memory_bandwidth_gbps": ("memory_bandwidth_gbps", float, "DRAM GB/s (default: the GPU catalogue's)"),
}


def _timing_flags(p: argparse.ArgumentParser) -> None:
    for flag, (_, kind, text) in TIMING_FLAGS.items():
        p.add_argument("--" + flag.replace("_", "-"), type=kind, help=text)
    p.add_argument("--matmul-dtype", choices=["auto", "bf16", "fp16", "fp8", "fp32"],
                   help="GEMM precision for the time estimate (auto: the activation dtype)")


def timing_inputs(args: argparse.Namespace, data: dict | None = None):
    """TimingInputs from a --config's "timing" object and the timing flags (flags win)."""
    from calculator.timing_inputs import TimingInputs
    values = dict(data or {})
    for flag, (name, _, _) in TIMING_FLAGS.items():
        if getattr(args, flag, None) is not None:
            values[name] = getattr(args, flag)
    if getattr(args, "matmul_dtype", None):
        values["matmul_dtype"] = args.matmul_dtype
    return TimingInputs(**values)


def _on_off(p: argparse.ArgumentParser, name: str, help_: str) -> None:
    p.add_argument(f"--{name}", dest=name.replace("-", "_"), action=argparse.BooleanOptionalAction, default=None,
                   help=help_)


def _serving_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("serving engine (--mode infer)")
    g.add_argument("--engine", choices=["hf", "vllm", "sglang"], help="hf: transformers generate() (default); "
                   "vllm / sglang: the engine's memory budget and KV pool")
    g.add_argument("--memory-fraction", "--gpu-memory-utilization", "--mem-fraction-static", type=float,
                   dest="memory_fraction", help="vLLM gpu_memory_utilization / SGLang mem_fraction_static "
                   "(default: the engine's)")
    for flag in ("max-model-len", "max-num-batched-tokens", "max-num-seqs", "block-size", "attention-dp"):
        g.add_argument(f"--{flag}", type=int)
    _on_off(g, "prefix-caching", "prefix caching (default on)")
    _on_off(g, "cuda-graphs", "CUDA graphs (default on; --no-cuda-graphs = --enforce-eager)")
    g.add_argument("--engine-version", help="engine release whose rules apply (vLLM 0.33 or 0.11; SGLang 0.5.23)")
    g.add_argument("--expert-weight-dtype", choices=DTYPES, help="routed experts' weight dtype (e.g. fp4: MXFP4)")


def _rl_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("RL post-training (--mode rl)")
    g.add_argument("--rollout-batch-size", type=int, help="prompts per rollout step")
    g.add_argument("--samples-per-prompt", "--n-samples-per-prompt", type=int, dest="samples_per_prompt")
    g.add_argument("--prompt-len", type=int)
    g.add_argument("--response-len", "--rollout-max-response-len", type=int, dest="response_len")
    g.add_argument("--rollout-engine", choices=["sglang", "vllm"])
    g.add_argument("--rollout-tp", "--rollout-num-gpus-per-engine", type=int, dest="rollout_tp")
    g.add_argument("--rollout-gpus", type=int, help="GPUs of the rollout engines when not colocated")
    g.add_argument("--rollout-memory-fraction", type=float, help="the rollout engine's memory fraction")
    _on_off(g, "colocate", "rollout engines on the trainer's GPUs (default on)")
    _on_off(g, "offload-train", "trainer state leaves the GPU during rollout (default on)")
    _on_off(g, "engine-sleep", "the rollout engine frees weights and KV during training (default on)")
    _on_off(g, "reference-model", "a frozen reference policy (KL)")
    _on_off(g, "critic", "a PPO critic trained like the actor")
    _on_off(g, "reward-model", "a reward model (forward only)")
    _on_off(g, "offload-aux", "reference / reward weights leave the GPU when idle (default on)")


def _set(d: dict, path: tuple[str, ...], value: Any) -> None:
    for k in path[:-1]:
        d = d.setdefault(k, {})
    d[path[-1]] = value


def build_inputs(args: argparse.Namespace):
    """Merge --config, --recipe and flags into (model, Workload, resolved-model-or-None)."""
    from calculator.model_source import resolve_model
    from calculator.hf_config import spec_from_hf_config
    data: dict = {}
    if args.config:
        data = _read_run_file(args.config)
    file_data = copy.deepcopy(data)  # what the file itself set, before the flags are merged in
    data = {k: v for k, v in data.items() if not k.startswith("_")}  # "_doc" and other comments
    model_field = data.pop("model", None)
    args.timing_config = data.pop("timing", None)
    workload: dict = data
    if args.recipe:
        workload["precision"] = RECIPES[args.recipe][1].model_dump()
    for flag, path in FLAG_PATHS.items():
        value = getattr(args, flag, None)
        if value is not None:
            _set(workload, path, value)
    if getattr(args, "zero_grad", None) is not None:
        _set(workload, ("zero_grad_set_to_none",), args.zero_grad == "none")
    if args.master_weights is not None:
        _set(workload, ("precision", "master_weights"), "fp32" if args.master_weights else None)
    generic = args.generic_params is not None or args.generic_activations is not None
    check_command_flags(args, file_data, workload.get("mode", "train"), generic)
    resolved = None
    if generic:
        model = GenericModel(total_params=args.generic_params or 0,
                             activation_elements_per_sample=args.generic_activations or 0)
    elif args.model or isinstance(model_field, str):
        resolved = resolve_model(args.model or model_field)
        model = resolved.spec
    elif isinstance(model_field, dict) and "total_params" in model_field:
        model = GenericModel(**model_field)
    elif isinstance(model_field, dict):
        model = spec_from_hf_config(model_field).spec
    else:
        raise CliError("model: give --model (preset id, config.json path or org/name), or a \"model\" in --config")
    return model, Workload(**workload), resolved


def _read_run_file(path: str) -> dict:
    """The --config file: bounded in size, nesting and numbers like a config.json (calculator.config_read)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise CliError(f"config: cannot read {path[:200]}: {exc.strerror or exc}") from None
    try:
        data = parse_config_json(raw, path[:200])
    except ConfigError as exc:
        raise CliError(f"config: {exc}") from None
    if not isinstance(data, dict):
        raise CliError(f"config: {path[:200]} must hold a JSON object")
    return data


_PATH_FLAGS = {path: flag(dest) for dest, path in FLAG_PATHS.items()}
_MODELS = {"Workload": Workload, "GenericModel": GenericModel, "ModelSpec": ModelSpec}


def _validation_line(exc: ValidationError) -> str:
    """One line: the flag (and the field it sets), what is wrong, and the allowed range."""
    where, msg = describe(exc, _MODELS.get(exc.title, Workload))
    path = tuple(where.split("."))
    shown = f"{_PATH_FLAGS[path]} ({where})" if path in _PATH_FLAGS else where
    return f"{shown}: {msg}"


def _print_estimate(est, unit: str, resolved) -> None:
    print(f"{est.model_name} — {est.mode} — {est.parameters:,} parameters"
          + (f" ({est.active_parameters:,} active per token)" if est.active_parameters != est.parameters else ""))
    if resolved is not None and resolved.checkpoint_parameters is not None:
        print(f"checkpoint parameters (Hub): {resolved.checkpoint_parameters:,}")
    stage = est.peak
    print(f"most loaded GPU: pipeline stage {stage.stage} (layers {stage.layers[0]}–{stage.layers[1] - 1})")
    width = max(len(t.label) for t in stage.terms)
    for t in stage.terms:
        print(f"  {t.label:<{width}}  {format_bytes(t.bytes, unit):>12}   {t.formula} = {t.substituted}")
    print(f"  {'peak allocated (torch.cuda.max_memory_allocated)':<{width}}  {format_bytes(est.peak_allocated_bytes, unit):>12}")
    print(f"  {'total (nvidia-smi)':<{width}}  {format_bytes(est.total_bytes, unit):>12}")
    if stage.host_bytes:
        print(f"  {'host RAM per rank (CPU offload)':<{width}}  {format_bytes(stage.host_bytes, unit):>12}")
    if len(est.stages) > 1:
        print("stages: " + ", ".join(f"{s.stage}: {format_bytes(s.total_bytes, unit)}" for s in est.stages))
    for f in est.fits:
        print(f"  {f.name:<24} {f.verdict:<13} {f.utilization:6.1%}  headroom {format_bytes(f.headroom_bytes, unit)}"
              + (f"  needs {f.gpus_needed} GPUs" if f.gpus_needed else "")
              + (f" ({f.layout})" if f.layout else ""))
    if est.serving is not None:
        _print_serving(est.serving, unit)
    if est.rl is not None:
        _print_rl(est.rl, unit)
    for w in est.warnings + (resolved.warnings if resolved else ()):
        print(f"warning: {w}")


def _print_serving(sv, unit: str) -> None:
    print(f"{sv.engine} {sv.version}: memory fraction {sv.memory_fraction:g} ({sv.memory_fraction_rule})")
    print(f"  KV pool {format_bytes(sv.kv_pool_bytes, unit)}: {sv.kv_pool_tokens:,} tokens in {sv.kv_pool_blocks:,} "
          f"blocks of {sv.block_size}; {sv.max_concurrent_seqs:.2f} sequences of {sv.tokens_per_seq:,} tokens at once")
    print(f"  max_model_len {sv.configured_max_model_len:,}: " + ("starts" if sv.starts else "does not start")
          + f"; the largest that starts is {sv.max_model_len:,}")
    if sv.start_error:
        print(f"  engine error: {sv.start_error}")


def _print_rl(rl, unit: str) -> None:
    for ph in rl.phases:
        print(f"  phase {ph.name:<10} {format_bytes(ph.total_bytes, unit):>12}  "
              + ", ".join(f"{k} {format_bytes(v, unit)}" for k, v in ph.parts.items() if v))
    print(f"  peak per GPU: {rl.peak_phase} phase")


def run(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "presets":
        from calculator.presets import list_gpus, list_models
        models, gpus = list_models(), list_gpus()
        if args.json:
            print(json.dumps({"models": [m.__dict__ for m in models], "gpus": [g.__dict__ for g in gpus]}, indent=1))
        else:
            print("models:")
            for m in models:
                print(f"  {m.id:<24} {m.hub_id}")
            print("gpus:")
            for g in gpus:
                print(f"  {g.id:<16} {g.name:<28} {g.memory_bytes:>16,} B")
        return 0
    from calculator.estimate import estimate
    model, workload, resolved = build_inputs(args)
    if args.command in ("advise", "sweep"):
        from calculator.cli_advise import run_advise, run_sweep
        return run_advise(args, model, workload, resolved) if args.command == "advise" else \
            run_sweep(args, model, workload)
    if args.command == "plan":
        from calculator.planner import fewest_gpus, plans_for
        from calculator.presets import get_gpu
        if not workload.gpu:
            raise CliError("gpu: plan needs --gpu (see `python -m calculator presets`)")
        if not isinstance(model, ModelSpec):
            raise CliError("model: the planner needs a transformer architecture, not a generic network")
        capacity = get_gpu(workload.gpu).usable_bytes
        timing = timing_inputs(args, getattr(args, "timing_config", None))
        for flag in ("limit", "max_micro_batch", "max_tp"):
            if getattr(args, flag) is not None and getattr(args, flag) < 1:
                raise CliError(f"{flag.replace('_', '-')}: must be at least 1")
        too_long = (f"max-seconds: the layout search for {model.name[:80]} ran past {args.max_seconds:g} s; "
                    f"narrow it (--gpus N, a smaller --max-tp or --max-micro-batch) or raise --max-seconds")
        with deadline(args.max_seconds, too_long):
            found = (plans_for(model, workload, args.gpus, capacity, args.max_tp, limit=args.limit, rank=args.rank,
                               timing=timing, include_unfit=args.include_unfit, max_micro_batch=args.max_micro_batch)
                     if args.gpus is not None else
                     fewest_gpus(model, workload, capacity, max_tp=args.max_tp, limit=args.limit, rank=args.rank,
                                 timing=timing, max_micro_batch=args.max_micro_batch))
        if args.json:
            print(json.dumps([dict(dataclasses.asdict(p), label=p.label) for p in found]))
        elif not found:
            print(f"no layout fits {workload.gpu} within the 80% safe band")
        else:
            from calculator.planner import RANK_KEY
            print(f"{len(found)} layouts, ranked by " + (RANK_KEY if args.rank == "memory" else
                                                          f"fits, fewest GPUs, then {args.rank}"))
            for p in found:
                speed = (f"  {p.step_time_s * 1e3:>9,.1f} ms/step {p.tokens_per_s:>11,.0f} tok/s"
                         if p.step_time_s is not None else "")
                cost = f"  ${p.cost_per_million_tokens:,.3f}/M tok" if p.cost_per_million_tokens is not None else ""
                print(f"{p.label:<64} {format_bytes(p.total_bytes, args.unit):>12} ({p.utilization:.0%}){speed}{cost}"
                      + ("" if p.fits else "  does not fit"))
        return 0
    if args.command == "export":
        from calculator.cli_export import run_export
        return run_export(args, model, workload)
    if args.command == "solve":
        from calculator.presets import get_gpu
        from calculator.solvers import max_micro_batch, max_seq_len
        if not workload.gpu:
            raise CliError("gpu: solve needs --gpu (see `python -m calculator presets`)")
        capacity = get_gpu(workload.gpu).usable_bytes
        solver = max_micro_batch if args.solve_for == "micro_batch" else max_seq_len
        sol = solver(model, workload, capacity, safe=not args.no_safe_band)
        if args.json:
            print(json.dumps(sol.__dict__))
        elif sol.value == 0:
            print(f"no {sol.field} fits {workload.gpu}: even the smallest needs "
                  f"{format_bytes(sol.used_bytes, args.unit)} of a {format_bytes(sol.budget_bytes, args.unit)} budget")
        else:
            print(f"largest {sol.field} that fits {workload.gpu}: {sol.value} "
                  f"({format_bytes(sol.used_bytes, args.unit)} of {format_bytes(sol.budget_bytes, args.unit)} budget)")
        return 0
    est = estimate(model, workload)
    timing, timing_note = _time_of(model, workload, args)
    if args.json:
        out = est.to_dict()
        out.update(timing.to_dict() if timing else dict.fromkeys(TIME_KEYS))
        if timing_note:
            out["timing_note"] = timing_note
        if resolved is not None:
            out["model_source"] = {"origin": resolved.origin, "label": resolved.label,
                                   "checkpoint_parameters": resolved.checkpoint_parameters,
                                   "warnings": list(resolved.warnings)}
        print(json.dumps(out))
    else:
        _print_estimate(est, args.unit, resolved)
        _print_time(timing, timing_note)
    return 0


TIME_KEYS = ("step_time_s", "tokens_per_step", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "model_flops",
             "cost_per_million_tokens", "ttft_s", "tpot_s", "timing", "roofline")


def _time_of(model, workload, args):
    """(TimeEstimate, None), or (None, why there is none): the time needs a GPU and a transformer."""
    from calculator.timing import estimate_time
    inputs = timing_inputs(args, getattr(args, "timing_config", None))
    if not workload.gpu:
        return None, "no GPU chosen: give --gpu for step time, tokens/s, MFU and the roofline table"
    if not isinstance(model, ModelSpec):
        return None, "the time estimate needs a transformer architecture, not a generic network"
    try:
        return estimate_time(model, workload, inputs), None
    except InputError as exc:  # the catalogue lacks a figure for this GPU: the memory estimate still stands
        if exc.field in ("peak_tflops", "memory_bandwidth_gbps"):
            return None, str(exc)
        raise


def _print_time(t, note: str | None) -> None:
    if t is None:
        print(f"time: {note}")
        return
    what = "training step" if t.mode == "train" else "generate() call"
    line = (f"time on {t.gpu}: {what} {t.step_time_s * 1e3:,.1f} ms, {t.tokens_per_s:,.0f} tokens/s "
            f"({t.world_size} GPUs), MFU {t.mfu:.1%}")
    if t.ttft_s is not None:
        line += f", time to first token {t.ttft_s * 1e3:,.1f} ms"
    if t.tpot_s is not None:
        line += f", per output token {t.tpot_s * 1e3:,.2f} ms"
    if t.cost_per_million_tokens is not None:
        line += f", ${t.cost_per_million_tokens:,.4f} per million tokens"
    print(line)
    width = max(len(r.name) for r in t.roofline)
    for r in t.roofline:
        print(f"  {r.name:<{width}}  {r.phase:<13} {r.flops:>11.3g} FLOP {r.bytes:>11.3g} B  "
              f"{r.intensity:>8.1f} FLOP/B  {r.bound:<13} {r.time_s * 1e3:>9.3f} ms")
    for n in t.notes:
        print(f"note: {n}")


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except (InputError, CliError, FlagError) as exc:
        print(f"error: {exc}", file=sys.stderr)
    except ConfigError as exc:
        print(f"error: model: {exc}", file=sys.stderr)
    except ValidationError as exc:
        print(f"error: {_validation_line(exc)}", file=sys.stderr)
    except BrokenPipeError:  # the reader went away (e.g. `| head`): not an error of ours
        sys.stdout = None
        return 0
    return 2
