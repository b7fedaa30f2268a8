"""The per-kind summary of table.json, and its rows as text (no torch: the Accuracy page and docs read these)."""
from __future__ import annotations

import json
from pathlib import Path
from statistics import median

from . import TABLE


def load(path: Path = TABLE) -> dict:
    return json.loads(path.read_text())


def params_cell(p: dict) -> str:
    if not p.get("checked"):
        return f"not checked: {p.get('why', '')}"
    if p["exact"]:
        return "exact"
    return f"{p['diff']:+,} ({p['error_pct']:+.3f}%)"


def activation_cell(a: dict) -> str:
    if not a.get("traced"):
        return f"not traced: {a.get('why', '')}"
    return f"{a['error_pct']:+.2f}%"


def cache_cell(c: dict) -> str:
    if not c.get("checked"):
        return f"not checked: {c.get('why', '')}"
    return "exact" if c["exact"] else f"{c['error_pct']:+.2f}%"


def kinds_of(row: dict) -> tuple[set[str], set[str]]:
    """(the token mixer kinds, the feed-forward kinds) of a row's layer kinds ("mixer+ffn")."""
    mixers = {k.split("+")[0].split(":")[0] for k in row.get("kinds", [])}  # "attention:sliding": attention
    ffns = {k.split("+")[1].split(":")[0] for k in row.get("kinds", [])}  # "dense:14336": dense (its width)
    return mixers, ffns


def per_kind(table: dict) -> list[dict]:
    """One entry per kind (mixer kinds, then feed-forward kinds): the types that have it, how many of them count
    their parameters exactly, and the |error| of one traced layer of that kind (eager, median and worst, signed)."""
    groups: dict[tuple[str, str], dict] = {}
    for row in table["rows"]:
        mixers, ffns = kinds_of(row)
        for role, names in (("mixer", mixers), ("ffn", ffns)):
            for name in names:
                g = groups.setdefault((role, name), dict(role=role, kind=name, types=[], params_exact=0,
                                                        errors=[], not_traced=0))
                g["types"].append(row["model_type"])
                g["params_exact"] += bool(row["parameters"].get("exact"))
                for kind, a in row["activations"].items():
                    mixer, ffn = kind.split("+")
                    mixer, ffn = mixer.split(":")[0], ffn.split(":")[0]
                    if (mixer if role == "mixer" else ffn) != name:
                        continue
                    if a.get("traced"):
                        g["errors"].append(a["error_pct"])
                    else:
                        g["not_traced"] += 1
    out = []
    for (role, _), g in sorted(groups.items(), key=lambda kv: (kv[0][0] != "mixer", kv[0][1])):
        errs = g.pop("errors")
        g.update(n_types=len(g["types"]), traced=len(errs),
                 median_abs_pct=round(median(abs(e) for e in errs), 3) if errs else None,
                 worst_pct=max(errs, key=abs) if errs else None,
                 exact_layers=sum(e == 0 for e in errs))
        out.append(g)
    return out


def summary_markdown(table: dict) -> str:
    lines = ["| kind | types | parameters exact | layers traced | exact layers | median abs. error | worst |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for g in per_kind(table):
        med = "–" if g["median_abs_pct"] is None else f"{g['median_abs_pct']:.2f}%"
        worst = "–" if g["worst_pct"] is None else f"{g['worst_pct']:+.2f}%"
        lines.append(f"| {g['role']}: {g['kind']} | {g['n_types']} | {g['params_exact']}/{g['n_types']} | "
                     f"{g['traced']} | {g['exact_layers']} | {med} | {worst} |")
    return "\n".join(lines)


def rows_text(table: dict) -> str:
    out = []
    for row in table["rows"]:
        acts = "; ".join(f"{k} {activation_cell(a)}" for k, a in row["activations"].items()) or "–"
        out.append(f"{row['model_type']:<22} params {params_cell(row['parameters'])[:60]:<24} | acts {acts[:120]} | "
                   f"cache {cache_cell(row['cache'])[:50]}")
    return "\n".join(out)
