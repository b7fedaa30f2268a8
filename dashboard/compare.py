"""The compare page's logic: 2–4 calculator views side by side, each given as a calculator link and kept in the
compare page's URL as a repeated `cmp` parameter (the calculator view's query string, URL-encoded).

Nothing here imports streamlit (tests/dashboard/test_dashboard_compare.py). Every number comes from the engine through
dashboard.inputs.state.compute, exactly as the calculator page computes it; the figure uses dashboard.charts' colours.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence
from urllib.parse import parse_qs, urlencode, urlsplit

import plotly.graph_objects as go

from dashboard.inputs import state
from dashboard.safe_text import cut
from dashboard.charts import COLORS, UNIT_AXIS, AXIS_GRID, CHART_STYLE

CMP_KEY = "cmp"
MIN_SCENARIOS, MAX_SCENARIOS = 2, 4
MAX_LINK_CHARS = 16_000  # one stored link; a pasted config.json (cfg) of the largest presets needs under 5,000


def to_cmp(link: str) -> str:
    """What a pasted link is stored as: its query string (a full URL, `?a=1&b=2` or `a=1&b=2`)."""
    text = link.strip()
    if "?" in text:
        text = text.split("?", 1)[1]
    return text.split("#", 1)[0].strip()


def cmp_of(values: dict) -> str:
    """The `cmp` value of a calculator view."""
    return urlencode(state.to_query(values))


@dataclass(frozen=True)
class Scenario:
    index: int  # 1-based, as the page numbers them
    raw: str  # the stored query string
    values: dict | None = None
    estimate: Any = None
    problem: str = ""  # why it cannot be used ("" if it can)
    result: Any = None  # dashboard.inputs.state.Result (model and workload too: the time estimate needs them)

    @property
    def ok(self) -> bool:
        return not self.problem

    label: str = ""  # what tells it apart from the first usable scenario (set by `scenarios`)

    @property
    def name(self) -> str:
        """Its label: the first usable scenario described, each other one by what differs from it."""
        return self.label or (f"{self.index}: " + base_label(self.values) if self.values is not None else f"{self.index}")


def base_label(v: dict) -> str:
    """The first scenario's label: model, mode, fine-tuning, layout, recompute, batch and sequence."""
    bits = [v["model"], "train" if v["mode"] == "train" else v["mode"]]
    if v["mode"] == "train" and v["ft"] != "full":
        bits.append(v["ft"])
    layout = "×".join(f"{k.upper()}{v[k]}" for k in ("tp", "pp", "dp") if v[k] != 1)
    if layout:
        bits.append(layout)
    if v["zero"] != "0":
        bits.append(f"ZeRO-{v['zero']}")
    if v["rc"] != "none":
        bits.append(f"rc {v['rc']}")
    bits.append(f"b{v['mbs']}×s{v['seq']}")
    return " ".join(bits)


# How a differing input reads in a label (one phrase per value: two scenarios whose inputs differ never share one).
_NAMED = {"stack": {"fsdp2": "FSDP2", "deepspeed": "DeepSpeed", "megatron": "Megatron", "ddp": "DDP",
                    "hf-trainer": "HF Trainer", "auto": "stack auto"},
          "impl": {"liger": "Liger", "compile": "torch.compile", "hf": "transformers", "megatron-te": "Megatron-TE"},
          "offo": {True: "+ CPU offload (optimizer)", False: "no CPU offload (optimizer)"},
          "offp": {True: "+ CPU offload (params)", False: "no CPU offload (params)"}}
_FORMATS = {"zero": "ZeRO-{}", "rc": "recompute {}", "tp": "TP{}", "pp": "PP{}", "dp": "DP{}", "cp": "CP{}",
            "ep": "EP{}", "mbs": "micro-batch {}", "seq": "seq {}", "gpu": "{}", "model": "{}", "mode": "{}",
            "ft": "{} fine-tuning", "recipe": "{}", "eng": "engine {}"}


def phrase(key: str, value: Any) -> str:
    """One differing input in words: `+ CPU offload (optimizer)`, `FSDP2`, `TP2`, `Gradients dtype fp32`…"""
    if value in _NAMED.get(key, {}):
        return _NAMED[key][value]
    if key in _FORMATS:
        return _FORMATS[key].format(value)
    p = state.BY_KEY[key]
    name = p.short or p.label
    if p.kind == "bool":
        return f"+ {name}" if value else f"no {name}"
    if key == "cfg":
        return f"config.json of {len(value):,} characters" if value else "no config.json"
    return f"{name} {'default' if value is None else cut(str(value), 40)}"


def differing_keys(a: dict, b: dict) -> list[str]:
    """The inputs (page display switches left out) whose values differ, in the sidebar's order."""
    return [p.key for p in state.PARAMS if p.group != "display" and a.get(p.key) != b.get(p.key)]


def labels(values: Sequence[dict], indexes: Sequence[int]) -> list[str]:
    """Each scenario's label: the first described, every other one by its inputs that differ from the first."""
    if not values:
        return []
    out = [f"{indexes[0]}: " + base_label(values[0])]
    for v, i in zip(values[1:], indexes[1:]):
        keys = differing_keys(values[0], v)
        out.append(f"{i}: " + (", ".join(phrase(k, v[k]) for k in keys) if keys else f"same inputs as {indexes[0]}"))
    return out


def offload_note(scs: Sequence[Scenario]) -> str:
    """What the time table leaves out when a scenario offloads to the CPU ("" when none does): calculator.timing
    counts no time for an offloaded optimizer step (it runs on the host) and none for the host-GPU copies."""
    off = [s for s in scs if s.values["offo"] or s.values["offp"]]
    if not off:
        return ""
    which = ", ".join(str(s.index) for s in off)
    return (f"Scenario{'s' if len(off) > 1 else ''} {which} offload{'' if len(off) > 1 else 's'} to the CPU: the "
            "time model leaves out CPU offload's cost (the optimizer step on the host and the copies of gradients, "
            "parameters and optimizer state over PCIe), so its step time here is too short and may read faster "
            "than a scenario that keeps everything on the GPU.")


def scenario(index: int, raw: str) -> Scenario:
    """Read one stored link: every parameter must be valid and the engine must accept the view."""
    raw = to_cmp(raw)
    if len(raw) > MAX_LINK_CHARS:
        return Scenario(index, raw[:200] + "…", problem=f"the link is {len(raw):,} characters long, over the "
                        f"{MAX_LINK_CHARS:,} a calculator link can need: paste the calculator's own link")
    try:
        query = parse_qs(raw, keep_blank_values=True, strict_parsing=True) if raw else {}
    except ValueError:
        return Scenario(index, raw, problem="not a calculator link (no key=value parameters)")
    if not any(k in state.BY_KEY for k in query):
        return Scenario(index, raw, problem="not a calculator link: it has none of the calculator's parameters")
    link = state.check_query_params(query)
    if link.ignored:
        return Scenario(index, raw, problem="; ".join(link.ignored))
    values = {**state.DEFAULTS, **link.values}
    if values["hf"]:
        return Scenario(index, raw, values, problem=f"a Hugging Face model ({cut(values['hf'])}) is not fetched "
                                                    "on this page; compare presets, custom or config models")
    try:
        result = state.compute(values)
    except state.InputProblems as exc:
        return Scenario(index, raw, values, problem="the calculator cannot estimate it: "
                        + "; ".join(p.message for p in exc.problems))
    return Scenario(index, raw, values, result.estimate, result=result)


def scenarios(raws: Sequence[str]) -> list[Scenario]:
    """Each stored link read; the usable ones labelled by what differs from the first usable one."""
    from dataclasses import replace
    scs = [scenario(i + 1, r) for i, r in enumerate(raws[:MAX_SCENARIOS])]
    good = [s for s in scs if s.ok]
    names = dict(zip((s.index for s in good), labels([s.values for s in good], [s.index for s in good])))
    return [replace(s, label=names[s.index]) if s.index in names else s for s in scs]


def _components(sc: Scenario) -> dict[str, int]:
    return sc.estimate.components  # the most loaded GPU (worst pipeline stage), as the calculator's headline


def shown_components(scs: Sequence[Scenario]) -> list[str]:
    from calculator.core.result import COMPONENTS
    return [c for c in COMPONENTS if any(_components(s).get(c, 0) for s in scs)]


def figure(scs: Sequence[Scenario], unit: str = "GB") -> go.Figure:
    """One stacked bar per scenario (its most loaded GPU), components in the calculator's colours."""
    from calculator.core.result import COMPONENT_LABELS
    from calculator.core.units import UNIT_BYTES, format_bytes
    scale = UNIT_BYTES[unit]
    xs = [wrap(s.name) for s in scs]
    data = []
    for comp in shown_components(scs):
        values = [_components(s).get(comp, 0) for s in scs]
        label = COMPONENT_LABELS.get(comp, comp)
        data.append(dict(type="bar", name=label, x=xs, y=[b / scale for b in values],
                         marker=dict(color=COLORS.get(comp)), customdata=[format_bytes(b, unit) for b in values],
                         hovertemplate=f"{label}: %{{customdata}}<extra>%{{x}}</extra>"))
    totals = [s.estimate.total_bytes for s in scs]
    data.append(dict(type="scatter", x=xs, y=[t / scale for t in totals], mode="text", name="total",
                     text=[format_bytes(t, unit) for t in totals], textposition="top center", showlegend=False,
                     hoverinfo="skip"))
    top = max(totals) / scale if totals else 1
    layout = dict(CHART_STYLE, barmode="stack", height=480, bargap=0.4, margin=dict(l=10, r=10, t=16, b=10),
                  legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0, traceorder="normal"),
                  yaxis=dict(AXIS_GRID, title=dict(text=f"Memory per GPU ({UNIT_AXIS[unit]})"), range=[0, top * 1.12]),
                  xaxis=dict(AXIS_GRID), hovermode="closest")
    return go.Figure(dict(data=data, layout=layout))


def wrap(label: str, width: int = 28) -> str:
    """A label as a chart's category: its phrases on lines of about `width` characters."""
    lines, line = [], ""
    for part in label.split(", "):
        if line and len(line) + len(part) > width:
            lines.append(line + ",")
            line = part
        else:
            line = f"{line}, {part}" if line else part
    return "<br>".join(lines + [line])


def signed(n: int, unit: str) -> str:
    from calculator.core.units import format_bytes
    if n == 0:
        return "±0"
    return ("+" if n > 0 else "−") + format_bytes(abs(n), unit)


def table(scs: Sequence[Scenario], unit: str = "GB") -> list[dict]:
    """One row per component (and the total): each scenario's bytes, and the delta of scenarios 2… against 1."""
    from calculator.core.result import COMPONENT_LABELS
    from calculator.core.units import format_bytes
    rows = []
    comps = [(COMPONENT_LABELS.get(c, c), lambda s, c=c: _components(s).get(c, 0)) for c in shown_components(scs)]
    comps.append(("Total per GPU", lambda s: s.estimate.total_bytes))
    for label, get in comps:
        row = {"Component": label}
        base = get(scs[0])
        for s in scs:
            row[s.name] = format_bytes(get(s), unit)
        for s in scs[1:]:
            row[f"Δ {s.index} vs {scs[0].index}"] = signed(get(s) - base, unit)
        rows.append(row)
    return rows


def time_table(scs: Sequence[Scenario]) -> list[dict]:
    """The time estimate of each scenario (calculator.timing.step_time, the page's price and link inputs of each link):
    step or inference batch time, tokens/s, MFU and cost per million tokens; a blank cell where there is none."""
    from dashboard.views.timing import format_seconds, time_of
    times = [time_of(s.result, s.values)[0] for s in scs]
    lines = [("Step / inference batch time", lambda t: format_seconds(t.step_time_s)),
             ("Tokens/s (all GPUs)", lambda t: f"{t.tokens_per_s:,.0f}"),
             ("MFU", lambda t: f"{t.mfu:.1%}"),
             ("Cost per million tokens", lambda t: "" if t.cost_per_million_tokens is None
              else f"${t.cost_per_million_tokens:,.4f}")]
    rows = []
    for label, show in lines:
        row = {"Time and cost": label}
        for s, t in zip(scs, times):
            row[s.name] = "" if t is None else show(t)
        rows.append(row)
    return rows
