"""What the CLI refuses before it computes: a flag the chosen command, mode or model would silently ignore, and
out-of-range values of the command's own flags. Every refusal is one line naming the flag (exit 2).

    plan --tp 2            the planner chooses tp, pp, dp, cp, ep, zero, sequence parallel and recompute itself
    estimate --generic-params 7e9 --model llama-3.1-8b     a generic network has no architecture, layout or tokens
    solve --for seq_len --seq 4096                         the solver chooses seq_len
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import threading
import time

from calculator.core import bounds as B



class CliError(Exception):
    """One line for stderr; exit status 2."""


PLAN_SECONDS = 20.0  # default wall-clock bound of one `plan` search (--max-seconds)

# Flags the planner sets itself for every layout it tries (calculator.planning.planner.plans_for).
PLANNER_CHOOSES = ("tp", "pp", "dp", "cp", "ep", "etp", "zero", "sequence_parallel", "vpp", "recompute",
                   "pp_first_stage_layers", "pp_last_stage_layers")
# Workload fields (in a --config file) the planner overrides, with the flag that sets each.
PLANNER_FIELDS = {("parallel", "tp"): "tp", ("parallel", "pp"): "pp", ("parallel", "dp"): "dp",
                  ("parallel", "cp"): "cp", ("parallel", "ep"): "ep", ("parallel", "zero"): "zero",
                  ("parallel", "sequence_parallel"): "sequence_parallel", ("parallel", "virtual_stages"): "vpp",
                  ("parallel", "etp"): "etp", ("parallel", "pp_first_stage_layers"): "pp_first_stage_layers",
                  ("parallel", "pp_last_stage_layers"): "pp_last_stage_layers", ("recompute",): "recompute"}
# A generic network (seed 004) is totals only: no layers to split, no tokens, no attention, no adapters.
GENERIC_IGNORES = ("model", "seq", "gen", "recompute", "attention", "activation_model", "kv_dtype", "weight_dtype",
                   "quant_group_size", "quant_method", "tp", "pp", "dp", "cp", "ep", "etp", "vpp", "microbatches",
                   "zero_shard_size", "zero", "sequence_parallel", "distributed_optimizer", "offload_optimizer",
                   "offload_params", "schedule", "finetune", "lora_rank", "lora_targets")


class FlagError(Exception):
    """One line for stderr; the CLI exits with status 2."""


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _given(args: argparse.Namespace, dests) -> list[str]:
    return [flag(d) for d in dests if getattr(args, d, None) is not None]


def _in_file(data: dict, path: tuple[str, ...]) -> bool:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return False
        data = data[key]
    return True


def check_command_flags(args: argparse.Namespace, file_data: dict, mode: str, generic: bool) -> None:
    """Raise FlagError for a flag (or --config field) that `args.command` in `mode` would not use."""
    if generic:
        extra = _given(args, GENERIC_IGNORES) + (["a \"model\" in --config"] if file_data.get("model") else [])
        if extra:
            raise FlagError(f"generic-params: a generic network is given as totals; {', '.join(extra)} "
                            f"{'does' if len(extra) == 1 else 'do'} not apply to it (drop "
                            f"{'it' if len(extra) == 1 else 'them'}, or drop --generic-params)")
    if args.command == "plan":
        chosen = _given(args, PLANNER_CHOOSES) + [f"{'.'.join(p)} in --config" for p in PLANNER_FIELDS
                                                  if _in_file(file_data, p)]
        if chosen:
            raise FlagError(f"{chosen[0].lstrip('-')}: plan chooses tp, pp (with uneven first / last stages), dp, cp, "
                            f"ep, zero, recompute and micro-batch itself (1F1B, no interleaving); drop "
                            f"{', '.join(chosen)}, or use estimate for one layout")
        if args.gpus is not None and not 1 <= args.gpus <= B.MAX_DEGREE:
            raise FlagError(f"gpus: must be from 1 to {B.MAX_DEGREE:,} (leave it out for the fewest GPUs that fit), "
                            f"got {args.gpus}")
        if not 1 <= args.max_tp <= B.MAX_DEGREE:
            raise FlagError(f"max-tp: must be from 1 to {B.MAX_DEGREE:,}, got {args.max_tp}")
        if not 0 < args.max_seconds <= 3600:
            raise FlagError(f"max-seconds: must be above 0 and at most 3,600, got {args.max_seconds:g}")
        mmb = getattr(args, "max_micro_batch", None)
        if mmb is not None and not 1 <= mmb <= B.MAX_BATCH:
            raise FlagError(f"max-micro-batch: must be from 1 to {B.MAX_BATCH:,}, got {mmb}")
    if args.command == "sweep" and args.values:
        _check_sweep_values(args.over, args.values)
    if args.command == "solve":
        solved = "batch" if args.solve_for == "micro_batch" else "seq"
        if getattr(args, solved) is not None:
            raise FlagError(f"{solved}: solve --for {args.solve_for} finds {args.solve_for} itself; drop "
                            f"{flag(solved)}")
        if generic and args.solve_for == "seq_len":
            raise FlagError("for: a generic network has no sequence length; solve --for micro_batch")


MAX_SWEEP_POINTS = 64
SWEEP_BOUNDS = {"micro_batch": B.MAX_BATCH, "seq_len": B.MAX_TOKENS, "gpus": B.MAX_DEGREE}


def _check_sweep_values(axis: str, text: str) -> None:
    """sweep --values: at most MAX_SWEEP_POINTS whole numbers, each within the axis' physical bound."""
    parts = [v.strip() for v in text.split(",") if v.strip()]
    if len(parts) > MAX_SWEEP_POINTS:
        raise FlagError(f"values: at most {MAX_SWEEP_POINTS} points per sweep, got {len(parts):,}")
    hi = SWEEP_BOUNDS.get(axis, B.MAX_DEGREE)
    for v in parts:
        if not (v.isdigit() and len(v) <= 12 and 1 <= int(v) <= hi):
            raise FlagError(f"values: each {axis} must be a whole number from 1 to {hi:,}, got {v[:30]!r}")


@contextlib.contextmanager
def deadline(seconds: float, message: str):
    """Raise FlagError(message) if the block runs past `seconds` of wall-clock time (main thread only; an outer
    timer, e.g. a caller's own deadline, is honoured and restored)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    fired = []

    def fire(signum, frame):
        fired.append(True)
        raise FlagError(message)

    previous = signal.signal(signal.SIGALRM, fire)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, 0)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer) if outer else seconds)
    start = time.monotonic()
    try:
        yield
        # the alarm's exception can land where Python swallows it (a gc callback, a __del__): the block then ends
        # normally after the bound, and is refused here all the same
        if fired or time.monotonic() - start > seconds:
            raise FlagError(message)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, outer - (time.monotonic() - start)))
