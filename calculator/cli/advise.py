"""`python -m calculator advise` (ranked remedies and a combination that fits) and `sweep` (memory against
micro-batch, sequence length or GPU count, as a table, CSV or JSON). Called from calculator.cli.main.

    python -m calculator advise --model llama-3.1-8b --mode train --seq 8192 --gpu h100-sxm --json
    python -m calculator sweep --model llama-3.1-8b --mode train --gpu h100-sxm --over seq_len --csv
"""
from __future__ import annotations

import csv
import io
import json

from calculator.core.units import format_bytes


def _url_of(model, resolved):
    """The query string that opens the calculator page on a workload (calculator.exports.page_link, the URL
    format's owner)."""
    from calculator.exports import page_link
    base = page_link.model_values(resolved, model)
    return lambda w: page_link.url_query(base, w)


def run_advise(args, model, workload, resolved) -> int:
    from calculator.cli.checks import CliError
    from calculator.cli.parser import timing_inputs
    from calculator.planning.remedies import advise
    if not workload.gpu:
        raise CliError("gpu: advise needs --gpu: a remedy is judged by whether the job fits a GPU")
    adv = advise(model, workload, timing=timing_inputs(args, getattr(args, "timing_config", None)),
                 url_of=_url_of(model, resolved))
    if args.json:
        print(json.dumps(adv.to_dict()))
        return 0
    unit = args.unit
    cur = adv.current
    what = "KV shortfall" if adv.measure == "kv_shortfall_bytes" else "total per GPU"
    print(f"now: {format_bytes(cur.total_bytes, unit)} per GPU (peak allocated "
          f"{format_bytes(cur.peak_allocated_bytes, unit)}) on {adv.gpu}: "
          + ("fits" if cur.fits else f"does not fit the 80% band ({format_bytes(adv.budget_bytes, unit)})"))
    print(f"levers, most saved first ({what}):")
    for r in adv.remedies:
        print(f"  {format_bytes(r.saved_bytes, unit):>11} saved → {format_bytes(r.total_bytes, unit):>11}"
              f" {'fits' if r.fits else '    '}  {r.change}  [{r.cost['text']}]")
    comb = adv.combined
    print("combined: " + (" + ".join(s.change for s in comb.steps) or "nothing helps") + (
        f" → {format_bytes(comb.result.total_bytes, unit)}, " + ("fits" if comb.fits else "still does not fit")
        if comb.result else ""))
    return 0


def run_sweep(args, model, workload) -> int:
    from calculator.cli.checks import CliError
    from calculator.planning.sweeps import sweep
    values = None
    if args.values:
        try:
            values = [int(v) for v in args.values.split(",") if v.strip()]
        except ValueError:
            raise CliError("values: give whole numbers separated by commas, e.g. 1,2,4,8") from None
    sw = sweep(model, workload, args.over, values)
    if args.json:
        print(json.dumps(sw.to_dict()))
        return 0
    if args.csv:
        rows = sw.rows()
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        print(buf.getvalue(), end="")
        return 0
    print(f"memory per GPU vs {sw.label} ({sw.how})" + (
        f"; safe band {format_bytes(sw.budget_bytes, args.unit)}" if sw.budget_bytes else ""))
    for p in sw.points:
        mark = "*" if p.x == sw.current else " "
        if p.error:
            print(f" {mark}{p.x:>9}  {p.error}")
        else:
            print(f" {mark}{p.x:>9}  {format_bytes(p.total_bytes, args.unit):>11}  "
                  + ("fits" if p.fits else "does not fit" if p.fits is False else "") + (f"  {p.layout}" if p.layout else ""))
    return 0
