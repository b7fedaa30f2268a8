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

from calculator.core.bounds import describe
from calculator.cli.checks import CliError, FlagError, check_command_flags, deadline, flag
from calculator.cli.parser import FLAG_PATHS, build_parser, timing_inputs
from calculator.cli.output import print_estimate, print_time
from calculator.model.config_read import MAX_CONFIG_BYTES, ConfigError, parse_config_json
from calculator.core.errors import InputError
from calculator.model.spec import GenericModel, ModelSpec
from calculator.core.units import format_bytes
from calculator.core.workload import RECIPES, Workload


def _set(d: dict, path: tuple[str, ...], value: Any) -> None:
    for k in path[:-1]:
        d = d.setdefault(k, {})
    d[path[-1]] = value


def build_inputs(args: argparse.Namespace):
    """Merge --config, --recipe and flags into (model, Workload, resolved-model-or-None)."""
    from calculator.model.resolve import resolve_model
    from calculator.model.hf_config import spec_from_hf_config
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
    """The --config file: bounded in size, nesting and numbers like a config.json (calculator.model.config_read)."""
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


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "presets":
        from calculator.model.presets import list_gpus, list_models
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
    from calculator.planning.fit_cards import estimate_with_plans as estimate
    model, workload, resolved = build_inputs(args)
    if args.command in ("advise", "sweep"):
        from calculator.cli.advise import run_advise, run_sweep
        return run_advise(args, model, workload, resolved) if args.command == "advise" else \
            run_sweep(args, model, workload)
    if args.command == "plan":
        from calculator.planning.planner import fewest_gpus, plans_for
        from calculator.model.presets import get_gpu
        if not workload.gpu:
            raise CliError("gpu: plan needs --gpu (see `python -m calculator presets`)")
        if not isinstance(model, ModelSpec):
            raise CliError("model: the planner needs a transformer architecture, not a generic network")
        capacity = get_gpu(workload.gpu).usable_bytes
        timing = timing_inputs(args, getattr(args, "timing_config", None))
        for flag in ("limit", "max_micro_batch", "max_tp", "global_batch", "concurrency"):
            if getattr(args, flag) is not None and getattr(args, flag) < 1:
                raise CliError(f"{flag.replace('_', '-')}: must be at least 1")
        if args.global_batch is not None and args.global_batch > 1 << 24:
            raise CliError(f"global-batch: at most {1 << 24:,} sequences, got {args.global_batch:,}")
        too_long = (f"max-seconds: the layout search for {model.name[:80]} ran past {args.max_seconds:g} s; "
                    f"narrow it (--gpus N, a smaller --max-tp or --max-micro-batch) or raise --max-seconds")
        with deadline(args.max_seconds, too_long):
            found = (plans_for(model, workload, args.gpus, capacity, args.max_tp, limit=args.limit, rank=args.rank,
                               timing=timing, include_unfit=args.include_unfit, max_micro_batch=args.max_micro_batch,
                               global_batch=args.global_batch, concurrency=args.concurrency)
                     if args.gpus is not None else
                     fewest_gpus(model, workload, capacity, max_tp=args.max_tp, limit=args.limit, rank=args.rank,
                                 timing=timing, max_micro_batch=args.max_micro_batch,
                                 global_batch=args.global_batch, concurrency=args.concurrency))
        if args.json:
            print(json.dumps([dict(dataclasses.asdict(p), label=p.label) for p in found]))
        elif not found:
            print(f"no layout fits {workload.gpu} within the 80% safe band")
        else:
            from calculator.cli.output import print_plans
            print_plans(found, args.rank, args.unit, args.concurrency)
        return 0
    if args.command == "export":
        from calculator.cli.export import run_export
        return run_export(args, model, workload)
    if args.command == "solve":
        from calculator.model.presets import get_gpu
        from calculator.planning.solvers import max_micro_batch, max_seq_len
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
        print_estimate(est, args.unit, resolved)
        print_time(timing, timing_note)
    return 0


TIME_KEYS = ("step_time_s", "tokens_per_step", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "model_flops",
             "cost_per_million_tokens", "ttft_s", "tpot_s", "timing", "roofline")


def _time_of(model, workload, args):
    """(TimeEstimate, None), or (None, why there is none): the time needs a GPU and a transformer."""
    from calculator.timing.step_time import estimate_time
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
