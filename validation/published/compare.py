"""Published GPU memory measurements against the engine's estimate of the same number.

    python -m validation.published.compare            # print the table and the summary, write published_comparison.json
    python -m validation.published.compare --check    # exit 1 if the committed JSON is not what this produces now

`validation/published.csv` is a copy of the shared table of published numbers (one row per configuration, each
with its citation and notes; see the `kind`, `metric`, `unit` and `notes` columns). Every row is kept. A row is
*comparable* when the engine can express the configuration and the number means the same thing as one of the
engine's outputs:

* ``torch.cuda.max_memory_allocated`` rows  -> ``Estimate.peak_allocated_bytes`` (summed over GPUs when the
  source sums them);
* nvidia-smi rows                           -> ``Estimate.total_bytes`` (peak x (1 + fragmentation) + context);
* DeepSpeed estimator rows                  -> the model-state components (+ the ZeRO-3 gather buffer);
* torchao optimizer rows                    -> the optimizer-state component, as a difference between two rows
  (the absolute numbers have no stated batch/sequence).

Rows the engine cannot express (LLaMA-Adapter fine-tunes, FSDP runs that peak while loading, encoder and
encoder-decoder models, CPU offload, NF4 double quantisation, unstated batch or sequence, OOM) are kept with
``comparable = False`` and the reason; where the engine can still say something useful the row carries an
informational ``estimated_bytes``. Single-GPU LoRA / QLoRA rows use the engine's LoRA mode.

Error = (estimated - measured) / measured. Findings and the calibrated constants: validation/CALIBRATION.md.

The rows of each source are mapped in their own module (published_qwen, published_litgpt, published_bert,
published_deepspeed, published_torchao, published_not_comparable); the record, units and bounds are in
published_rows, the non-preset models in published_models, the CALIBRATION.md analysis in published_analysis.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from validation.published.analysis import analysis_text
from validation.published.bert import (BERT_PARAMS, BERT_TRACE_RUNS, BERT_TRACED, bert, bert_fragmentation,
                                       trace_bert)
from validation.published.deepspeed import deepspeed
from validation.published.litgpt import litgpt
from validation.published.not_comparable import accelerate, peft
from validation.published.qwen import qwen
from validation.published.rows import MIB, Comparison, gib, measured_bytes, read_rows, summarize
from validation.published.torchao import torchao

JSON_PATH = Path(__file__).resolve().parents[1] / "published_comparison.json"

MAPPERS = {
    "Qwen2.5 speed benchmark": qwen,
    "litgpt resource tables": litgpt,
    "HuggingFace transformers docs (bert-large on V100)": bert,
    "DeepSpeed memory estimator docs": deepspeed,
    "accelerate big-model-inference benchmark": accelerate,
    "HF PEFT README": peft,
}


def compare(rows: list[dict[str, str]] | None = None) -> list[Comparison]:
    rows = read_rows() if rows is None else rows
    by_id = {r["id"]: r for r in rows}
    out = []
    for r in rows:
        if r["source"] == "torchao low-bit optimizer benchmarks":
            out.append(torchao(r, by_id))
        else:
            out.append(MAPPERS[r["source"]](r))
    return out


def calibration(rows: list[dict[str, str]] | None = None) -> dict:
    """The constants the published rows calibrate (each with its source); CALIBRATION.md explains them."""
    rows = read_rows() if rows is None else rows
    by_id = {r["id"]: r for r in rows}
    frag = bert_fragmentation(rows)
    ctx = frag["context_bytes"]
    load_slack = measured_bytes(by_id["65"]) - ctx - 4 * BERT_PARAMS
    constants = [
        {"name": "CUDA context, V100, CUDA 11.2 driver 460 (kernels loaded eagerly)", "value": ctx, "unit": "bytes",
         "source": "row 66: HF transformers docs, nvidia-smi after torch.ones((1, 1)).cuda(); = the catalogue's "
                   "v100 cuda_context_bytes"},
        {"name": "allocator slack after loading weights only", "value": round(100 * load_slack / (4 * BERT_PARAMS), 3),
         "unit": "% of the weights", "source": "row 65 − row 66 − 335,143,938 × 4 B"},
        {"name": "fragmentation (reserved − allocated), share of the model states", "value": frag["a_states"],
         "unit": "fraction", "source": "rows 56, 57, 58, 61 (nvidia-smi − row 66) − traced peak allocated; "
                                       "least squares with the next constant"},
        {"name": "fragmentation (reserved − allocated), share of the fwd/bwd (or step) working set",
         "value": frag["b_working"], "unit": "fraction", "source": "as above"},
        {"name": "GPTQ 4-bit (exllama v1) dequantisation scratch per GPU", "value": 2, "unit": "bytes × max(in·out)",
         "source": "Qwen2.5 GPTQ-Int4 − AWQ rows (7B–72B; AutoGPTQ temp_dq buffer)"},
        {"name": "GPTQ 8-bit packed zero points", "value": 1, "unit": "byte per group of 128 per output",
         "source": "GPTQ checkpoint layout (qzeros int32 packing 4 zeros); Qwen2.5 GPTQ-Int8 rows are above it"},
        {"name": "AWQ load peak, tied-embedding model", "value": 2, "unit": "bytes × vocab × hidden above the weights",
         "source": "Qwen2.5-0.5B/1.5B/3B AWQ at prompt 1 (rows 335, 351, 367)"},
        {"name": "bitsandbytes 4-bit load transient (litgpt / Lightning)", "value": 4,
         "unit": "bytes × elements of the largest linear (lm_head)", "source": "litgpt nf4 and nf4-dq generate rows"},
        {"name": "NCCL communication buffers", "value": None, "unit": "", "source": "not calibrated: no published row "
         "isolates them (device_map pipelines use no NCCL; the DeepSpeed rows count model states only)"},
    ]
    return {"constants": constants, "bert_fragmentation": frag}


def build(comparisons: list[Comparison] | None = None) -> dict:
    comparisons = compare() if comparisons is None else comparisons
    return {
        "about": ("Published GPU memory numbers vs the engine's estimate of the same metric. "
                  "error_pct = (estimated - measured) / measured × 100. Rows with comparable = false are kept with "
                  "the reason (why_not); their estimated_bytes, when present, is informational. Findings and the "
                  "calibrated constants: validation/CALIBRATION.md."),
        "generated_by": "python -m validation.published.compare",
        "data": "validation/published.csv",
        "sources": summarize(comparisons, "source"),
        "groups": summarize(comparisons, "group"),
        "calibration": calibration(),
        "rows": [asdict(c) for c in comparisons],
    }


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def table(comparisons: list[Comparison]) -> str:
    lines = [f"{'id':>4}  {'group':36s} {'measured GiB':>12} {'estimate GiB':>12} {'error %':>8}  config / why not"]
    for c in comparisons:
        err = "" if c.error_pct is None else f"{c.error_pct:+8.2f}"
        tail = c.config if c.comparable else f"[not comparable] {c.why_not}"
        lines.append(f"{c.id:>4}  {c.group[:36]:36s} {gib(c.measured_bytes):>12} {gib(c.estimated_bytes):>12} "
                     f"{err:>8}  {tail}")
    return "\n".join(lines)


def summary_text(data: dict) -> str:
    lines = ["", f"{'source / group':60s} {'rows':>5} {'comp.':>5} {'median |e|%':>11} {'worst |e|%':>10} "
                 f"{'(id)':>6} {'mean e%':>8} {'bound':>6}"]
    for kind in ("sources", "groups"):
        key = kind[:-1]
        for s in data[kind]:
            med = "—" if s["median_abs_error_pct"] is None else f"{s['median_abs_error_pct']:.2f}"
            worst = "—" if s["worst_abs_error_pct"] is None else f"{s['worst_abs_error_pct']:.2f}"
            mean = "—" if s["mean_error_pct"] is None else f"{s['mean_error_pct']:+.2f}"
            bound = f"{s['bound_pct']:g}" if "bound_pct" in s else ""
            lines.append(f"{s[key][:60]:60s} {s['rows']:>5} {s['comparable']:>5} {med:>11} {worst:>10} "
                         f"{s['worst_id'] or '':>6} {mean:>8} {bound:>6}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed JSON is stale (writes nothing)")
    ap.add_argument("--quiet", action="store_true", help="summary only")
    ap.add_argument("--analysis", action="store_true", help="print the CALIBRATION.md analysis (writes nothing)")
    ap.add_argument("--trace-bert", action="store_true",
                    help="re-trace the BERT training rows (needs torch + transformers) and compare with BERT_TRACED")
    args = ap.parse_args(argv)
    rows = read_rows()
    comparisons = compare(rows)
    if args.analysis:
        print(analysis_text(comparisons, rows))
        frag = bert_fragmentation(rows)
        print(f"\nBERT V100 rows: nvidia-smi − context ({frag['context_bytes'] / MIB:.0f} MiB) − traced peak allocated")
        for r in frag["rows"]:
            print(f"  row {r['id']}: states {r['states'] / MIB:8.1f} MiB, working {r['working'] / MIB:8.1f} MiB, "
                  f"slack {r['slack'] / MIB:7.1f} MiB = {r['slack_pct_of_peak']:5.2f}% of peak; fit "
                  f"{r['fit_slack'] / MIB:7.1f} MiB")
        print(f"  fit: slack = {frag['a_states']:.4f} × states + {frag['b_working']:.4f} × working set")
        return 0
    if args.trace_bert:
        ok = True
        for rid, (b, ck, opt) in BERT_TRACE_RUNS.items():
            got = trace_bert(b, 512, ck, opt)
            ok &= got == BERT_TRACED[rid]
            print(f"row {rid}: traced {got}, recorded {BERT_TRACED[rid]}{'' if got == BERT_TRACED[rid] else '  DIFFERS'}")
        return 0 if ok else 1
    data = build(comparisons)
    text = dumps(data)
    if args.check:
        current = JSON_PATH.read_text(encoding="utf-8") if JSON_PATH.exists() else ""
        if current != text:
            print(f"{JSON_PATH} is stale: run python -m validation.published.compare", file=sys.stderr)
            return 1
        print(f"{JSON_PATH.name} is up to date")
        return 0
    if not args.quiet:
        print(table(comparisons))
    print(summary_text(data))
    JSON_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {JSON_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
