"""Analysis for validation/CALIBRATION.md (python -m validation.published.compare --analysis): what the rows say about the
formulas, and the errors once the terms CALIBRATION.md proposes are added. Nothing here feeds the JSON.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import asdict

from calculator import estimate
from calculator.model.spec import ModelSpec
from calculator.core.workload import Parallelism, Workload
from validation.published.litgpt import LITGPT_MODELS
from validation.published.models import model_spec
from validation.published.qwen import QWEN_PRESETS, qwen_spec
from validation.published.rows import GIB, Comparison, error_pct, summarize


def linear_shapes(spec: ModelSpec) -> list[tuple[int, int]]:
    """(in, out) of every decoder-layer linear of a Llama/Qwen-style model (q, k, v, o, gate, up, down)."""
    h, qd, kvd, f = spec.hidden_size, spec.q_dim, spec.kv_dim, spec.intermediate_size
    per_layer = [(h, qd), (h, kvd), (h, kvd), (qd, h), (h, f), (h, f), (f, h)]
    return per_layer * spec.num_hidden_layers


def proposed_extra_bytes(c: Comparison, row: dict[str, str]) -> int:
    """Bytes the terms proposed in CALIBRATION.md add to (or take from) the engine's estimate of row `c`."""
    if c.source == "Qwen2.5 speed benchmark":
        fmt, n = row["param_dtype"], int(row["num_gpus"])
        spec = qwen_spec(row["model"], fmt)
        shapes = linear_shapes(spec)
        g_idx = 4 * sum(i for i, _ in shapes)
        if fmt == "GPTQ-Int4":  # exllama temp_dq per GPU + g_idx
            return n * 2 * max(i * o for i, o in shapes) + g_idx
        if fmt == "GPTQ-Int8":  # 8-bit packed zero points (1 B per group and output) + g_idx
            return sum(-(-i // 128) * o for i, o in shapes) + g_idx
        if fmt == "AWQ" and c.group.endswith("load peak"):  # load peak: weights + one V·h bf16 copy
            w = Workload(mode="infer", seq_len=1, weight_dtype="int4", quant_group_size=128)
            weights = estimate(spec, w, with_fits=False).components["weights"]
            return max(0, weights + 2 * spec.vocab_size * spec.hidden_size - c.estimated_bytes)
        return 0
    if c.source == "litgpt resource tables" and row["mode"].startswith("finetune"):
        if "nf4" not in row["mode"] or "LoRA" not in row["mode"]:
            return 0
        # QLoRA on bitsandbytes: MatMul4Bit keeps every 4-bit linear's input (MLP norm output, o_proj input, the
        # f-wide down/fc2 input) that the engine drops for frozen linears; the lm_head is NF4 in litgpt (saves
        # 1.4375 B × V·h) and is dequantised to bf16 for each matmul (2 B × V·h transient).
        spec = model_spec(LITGPT_MODELS[row["model"]])
        h, f, head = spec.hidden_size, spec.intermediate_size, spec.vocab_size * spec.hidden_size
        tokens = int(row["micro_batch"]) * int(row["seq_len"].split()[0])
        kept = spec.num_hidden_layers * tokens * 2 * (2 * h + f)
        dq = 0
        if "nf4-dq" in row["mode"]:  # double quantisation of the base: 4 B absmax per 64 -> 1 B + fp32 per 256 blocks
            blocks = -(-count_linear(spec) // 64)
            dq = 4 * blocks - (blocks + 4 * -(-blocks // 256))
        return kept + 2 * head - (2 * head - (head // 2 + 4 * -(-head // 64))) - dq
    if c.source == "litgpt resource tables" and "nf4" in row["param_dtype"]:
        spec = model_spec(LITGPT_MODELS[row["model"]])
        head = spec.vocab_size * spec.hidden_size
        q_head = head // 2 + 4 * -(-head // 64)
        if "nf4-dq" in row["param_dtype"]:  # double quantisation: 8-bit absmax per 64 + fp32 per 256 blocks
            lin = count_linear(spec)
            blocks = -(-lin // 64)  # 4 B absmax per block -> 1 B, + one fp32 per 256 blocks
            dq_saving = 4 * blocks - (blocks + 4 * -(-blocks // 256))
            hb = -(-head // 64)
            q_head = head // 2 + hb + 4 * -(-hb // 256)
        else:
            dq_saving = 0
        generate = c.estimated_bytes - (2 * head - q_head) - dq_saving
        weights = estimate(spec, Workload(mode="infer", seq_len=1, weight_dtype="nf4", quant_group_size=64),
                           with_fits=False).components["weights"] - (2 * head - q_head) - dq_saving
        load = weights + 4 * head  # the head's bf16 init + its fp16 cast while it is quantised
        return max(generate, load) - c.estimated_bytes
    return 0


def count_linear(spec: ModelSpec) -> int:
    """Decoder-layer linear parameters (what the engine quantises)."""
    from calculator.memory.parallel import stage_shards
    return stage_shards(spec, Parallelism())[0].layer_linear


def what_if(comparisons: list[Comparison], rows: list[dict[str, str]]) -> list[dict]:
    by_id = {r["id"]: r for r in rows}
    fixed = []
    for c in comparisons:
        if c.estimated_bytes is None or c.measured_bytes is None:
            continue
        extra = proposed_extra_bytes(c, by_id[c.id])
        est = c.estimated_bytes + extra
        fixed.append(Comparison(**{**asdict(c), "estimated_bytes": est, "error_pct": error_pct(est, c.measured_bytes),
                                   "comparable": c.comparable or "nf4-dq" in c.group}))
    return summarize(fixed, "group")


def qwen_increments(comparisons: list[Comparison]) -> list[tuple]:
    """Single-GPU Qwen rows: (model, format, prompt, measured − measured at prompt 1, estimated − estimated at
    prompt 1), both in bytes: the part of the peak that grows with the prompt (KV cache + prefill working set)."""
    key = {}
    for c in comparisons:
        if c.source == "Qwen2.5 speed benchmark" and "1× A100" in c.config:
            T = int(re.search(r"prompt ([\d,]+)", c.config).group(1).replace(",", ""))
            fmt = c.config.split(",")[0].split()[-1]
            key[(c.model, fmt, T)] = c
    out = []
    for (model, fmt, T), c in key.items():
        base = key.get((model, fmt, 1))
        if T == 1 or base is None or base.group.endswith("load peak"):
            continue
        out.append((model, fmt, T, c.measured_bytes - base.measured_bytes, c.estimated_bytes - base.estimated_bytes))
    return out


def analysis_text(comparisons: list[Comparison], rows: list[dict[str, str]]) -> str:
    lines = ["Qwen2.5, single GPU: growth with the prompt (peak at prompt T − peak at prompt 1), GiB",
             f"{'model':24s} {'format':10s} {'T':>6} {'measured':>9} {'engine':>9} {'engine−meas':>12}"]
    incs = qwen_increments(comparisons)
    for model, fmt, T, dm, de in incs:
        lines.append(f"{model:24s} {fmt:10s} {T:>6} {dm / GIB:9.3f} {de / GIB:9.3f} {(de - dm) / GIB:+12.3f}")
    d = [(de - dm) / GIB for *_, dm, de in incs]
    lines.append(f"engine − measured growth: median {statistics.median(d):+.3f} GiB, range {min(d):+.3f} .. "
                 f"{max(d):+.3f} GiB over {len(d)} rows (published values are rounded to 0.01 GiB)")
    lines += ["", "Qwen2.5, single GPU: measured − engine at each prompt length, GiB (T-independent = a constant term)"]
    table_: dict[tuple, dict[int, float]] = {}
    for c in comparisons:
        if c.source == "Qwen2.5 speed benchmark" and "1× A100" in c.config:
            T = int(re.search(r"prompt ([\d,]+)", c.config).group(1).replace(",", ""))
            fmt = c.config.split(",")[0].split()[-1]
            table_.setdefault((c.model, fmt), {})[T] = (c.measured_bytes - c.estimated_bytes) / GIB
    lines.append(f"{'model':24s} {'format':10s} " + " ".join(f"{t:>8}" for t in (1, 6144, 14336, 30720)))
    for (model, fmt), v in table_.items():
        lines.append(f"{model:24s} {fmt:10s} " + " ".join(f"{v[t]:+8.3f}" if t in v else f"{'':>8}"
                                                          for t in (1, 6144, 14336, 30720)))
    by_id = {r["id"]: r for r in rows}
    lines += ["", "Unmodelled constant by format: mean over prompts ≥ 6144 of (measured − engine), minus AWQ's (the "
              "engine's int4 formula is AWQ's layout), vs the proposed term, GiB",
              f"{'model':24s} {'GPTQ-Int4−AWQ':>14} {'temp_dq':>8} {'GPTQ-Int8−AWQ':>14} {'zeros+g_idx':>12}"]
    for model in QWEN_PRESETS:
        const = {fmt: statistics.fmean(v for t, v in table_.get((model, fmt), {}).items() if t >= 6144)
                 for fmt in ("AWQ", "GPTQ-Int4", "GPTQ-Int8") if table_.get((model, fmt))}
        if len(const) < 3 or len({t for t in table_[(model, "AWQ")] if t >= 6144}) < 3:
            continue
        pred = {}
        for c in comparisons:
            if c.model == model and "1× A100" in c.config and ", prompt 6,144" in c.config:
                fmt = c.config.split(",")[0].split()[-1]
                pred[fmt] = proposed_extra_bytes(c, by_id[c.id]) / GIB
        lines.append(f"{model:24s} {const['GPTQ-Int4'] - const['AWQ']:+14.3f} {pred['GPTQ-Int4']:8.3f} "
                     f"{const['GPTQ-Int8'] - const['AWQ']:+14.3f} {pred['GPTQ-Int8']:12.3f}")
    lines += ["", "Errors by group with the terms proposed in CALIBRATION.md added (nf4-dq rows included)",
              f"{'group':44s} {'comp.':>5} {'median |e|%':>11} {'worst |e|%':>10} {'(id)':>6} {'mean e%':>8}"]
    for s in what_if(comparisons, rows):
        if not s["comparable"]:
            continue
        lines.append(f"{s['group'][:44]:44s} {s['comparable']:>5} {s['median_abs_error_pct']:>11.2f} "
                     f"{s['worst_abs_error_pct']:>10.2f} {s['worst_id']:>6} {s['mean_error_pct']:>+8.2f}")
    return "\n".join(lines)
