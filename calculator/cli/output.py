"""What the command line prints for a human (without --json): the breakdown, fit verdicts, serving pool, RL
phases and the time estimate."""
from __future__ import annotations

from calculator.core.units import format_bytes

def print_estimate(est, unit: str, resolved) -> None:
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
              + (f"  needs {f.gpus_needed} GPUs" if f.gpus_needed else
                 f"  no layout of up to {f.searched_gpus:,} GPUs fits" if f.searched_gpus else "")
              + (f" ({f.layout})" if f.layout else ""))
    if est.serving is not None:
        print_serving(est.serving, unit)
    if est.rl is not None:
        print_rl(est.rl, unit)
    for w in est.warnings + (resolved.warnings if resolved else ()):
        print(f"warning: {w}")


def print_serving(sv, unit: str) -> None:
    print(f"{sv.engine} {sv.version}: memory fraction {sv.memory_fraction:g} ({sv.memory_fraction_rule})")
    print(f"  KV pool {format_bytes(sv.kv_pool_bytes, unit)}: {sv.kv_pool_tokens:,} tokens in {sv.kv_pool_blocks:,} "
          f"blocks of {sv.block_size}; {sv.max_concurrent_seqs:.2f} sequences of {sv.tokens_per_seq:,} tokens at once")
    print(f"  max_model_len {sv.configured_max_model_len:,}: " + ("starts" if sv.starts else "does not start")
          + f"; the largest that starts is {sv.max_model_len:,}")
    if sv.start_error:
        print(f"  engine error: {sv.start_error}")
    for n in sv.notes:  # where the figures come from (the checkpoint's weight dtypes, the device total, ...)
        print(f"  note: {n}")


def print_rl(rl, unit: str) -> None:
    for ph in rl.phases:
        print(f"  phase {ph.name:<10} {format_bytes(ph.total_bytes, unit):>12}  "
              + ", ".join(f"{k} {format_bytes(v, unit)}" for k, v in ph.parts.items() if v))
    print(f"  peak per GPU: {rl.peak_phase} phase")


def print_time(t, note: str | None) -> None:
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


def print_plans(plans, rank: str, unit: str, concurrency: int | None = None) -> None:
    """The planner's layouts, best first: memory on the most loaded GPU, and with a GPU's speed figures the step
    time, tokens/s per GPU, MFU, what bounds the step and the cost per million tokens; a serving engine's layouts
    (vLLM / SGLang) instead the running batch per replica at the target concurrency, output tokens/s per GPU, time
    per output token, time to first token and what bounds the decode step (calculator.timing.serving_time)."""
    from calculator.planning.ranking import RANK_TEXT, canonical
    serving = any(p.running_batch is not None for p in plans)
    text = RANK_TEXT[canonical(rank)]
    if serving:
        text = text.replace("tokens/s per GPU (MFU)", "output tokens/s per GPU") + (
            f"; at {concurrency:,} requests in flight" if concurrency else
            "; each replica running as many sequences as its engine admits")
    print(f"{len(plans)} layouts, ranked by {text}")
    for p in plans:
        if p.running_batch is not None:
            speed = (f"  batch {p.running_batch:>5,} of {p.max_seqs:>7,.1f} held {p.output_tokens_per_s_per_gpu:>9,.0f}"
                     f" out tok/s/GPU  TPOT {_ms(p.tpot_s)}  TTFT {_ms(p.ttft_s)}  {p.bottleneck}")
        else:
            speed = (f"  {p.step_time_s * 1e3:>9,.1f} ms/step {p.tokens_per_s_per_gpu:>9,.0f} tok/s/GPU "
                     f"MFU {p.mfu:5.1%}  {p.bottleneck}" if p.step_time_s is not None else "")
        cost = f"  ${p.cost_per_million_tokens:,.3f}/M tok" if p.cost_per_million_tokens is not None else ""
        print(f"{p.label:<64} {format_bytes(p.total_bytes, unit):>12} ({p.utilization:.0%}){speed}{cost}"
              + ("" if p.fits else "  does not fit"))


def _ms(s: float | None) -> str:
    return "—" if s is None else f"{s * 1e3:>8,.1f} ms"
