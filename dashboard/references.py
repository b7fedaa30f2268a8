"""Which engine terms cite which source: collected by running the engine over configurations that reach its
branches (optimizers, recompute modes, attention kernels, activation models, inference, MoE, MLA, sliding
window, pipeline schedules, sharding, a generic network). Nothing here computes memory itself."""
from __future__ import annotations

from dataclasses import dataclass

from dashboard.inputs.scenarios import SCENARIOS
from dashboard.inputs.state import InputProblems, compute, model_ids
from dashboard.memo import Shared

CATALOG = Shared(1, max_bytes=8 * 2**20)  # the Formulas page's catalog, built once per server (~100 kB)

# URL-key overrides (dashboard.inputs.state) that each reach a different part of the engine.
VARIANTS: tuple[dict, ...] = (
    {},
    {"opt": "adamw-8bit"}, {"opt": "sgd"}, {"opt": "sgd-momentum"}, {"opt": "adafactor"}, {"opt": "lion"},
    {"opt": "none"}, {"oimpl": "fused"}, {"oimpl": "for-loop"},
    {"rc": "selective"}, {"rc": "full"}, {"attn": "eager"},
    {"act": "textbook"}, {"act": "fujii", "tp": 2, "sp": True},
    {"recipe": "megatron", "dopt": True, "dp": 8}, {"recipe": "pure-bf16"}, {"recipe": "amp-fp32"},
    {"recipe": "fp32"},
    {"zero": "1", "dp": 8}, {"zero": "2", "dp": 8}, {"zero": "3", "dp": 8}, {"zero": "3", "dp": 8, "zsh": 4},
    {"zero": "3", "dp": 8, "offo": True, "offp": True},
    {"pp": 4, "mb": 8}, {"pp": 4, "sched": "interleaved", "vpp": 2, "mb": 8}, {"cp": 2, "dp": 2},
    {"mode": "infer", "gen": 1024}, {"mode": "infer", "wdt": "int4", "kvdt": "fp8"},
    {"mode": "infer", "wdt": "nf4"}, {"mode": "infer", "wdt": "fp4"}, {"mode": "infer", "wdt": "int8"},
    {"model": "mixtral-8x7b", "ep": 8, "dp": 8}, {"model": "qwen3-30b-a3b", "mode": "infer"},
    {"model": "deepseek-v2-lite", "mode": "infer"}, {"model": "deepseek-v2-lite"},
    {"model": "gemma-2-2b", "mode": "infer", "seq": 16384}, {"model": "gemma-2-2b"},
    {"model": "gpt2"}, {"model": "pythia-1.4b"}, {"model": "phi-3-mini-4k"}, {"model": "gpt-oss-20b"},
    {"model": "generic", "recipe": "fp32", "opt": "none"}, {"model": "generic"},
    {"ctx": 600}, {"comm": False}, {"frag": 5.0},
    {"ft": "lora"}, {"ft": "qlora", "lt": "qv"}, {"ft": "lora", "lt": "attention", "zero": "3", "dp": 4},
    {"mode": "infer", "wdt": "int4", "qm": "gptq"}, {"mode": "infer", "wdt": "int8", "qm": "gptq"},
) + tuple(s.values for s in SCENARIOS)


@dataclass(frozen=True)
class TermUse:
    key: str
    label: str
    component: str
    formula: str


def term_catalog() -> dict[str, list[TermUse]]:
    """source key -> the distinct terms (term key and formula) citing it, across VARIANTS."""
    presets = set(model_ids())
    seen: set[tuple[str, str, str]] = set()
    by_source: dict[str, list[TermUse]] = {}
    for overrides in VARIANTS:
        model = overrides.get("model")
        if model and model not in presets and model not in ("custom", "config", "generic"):
            continue
        try:
            est = compute(overrides).estimate
        except InputProblems:
            continue
        for stage in est.stages:
            for t in stage.terms:
                ident = (t.source, t.key, t.formula)  # one term key (optimizer_states) has a formula per method
                if ident in seen:
                    continue
                seen.add(ident)
                by_source.setdefault(t.source, []).append(TermUse(t.key, t.label, t.component, t.formula))
    return by_source
