"""The answer to the mode's question, at the top of the calculator page (issue 24: inside the first 900 px):

    training   the peak and at which moment, the verdict on the chosen GPU, the largest micro-batch and the longest
               sequence that fit it, the top three remedies with what each saves
    serving    (vLLM / SGLang) whether the engine starts, concurrent sequences, the KV pool, the largest context
    RL         the peak phase and every phase's total

`lines_now` is what the estimate already holds (drawn with the headline); `lines_searched` needs the solvers and the
remedies (a few dozen estimates, ~0.1–0.4 s), so the page draws it last, in a place kept for it at the top: the
headline and the chart never wait for it. Both are plain text builders (Markdown lines), tested without a page.
"""
from __future__ import annotations

from typing import Any, Mapping

from dashboard.memo import LRU
from dashboard.safe_text import md

_SEARCHED = LRU(128, max_bytes=4 * 2**20)  # Markdown lines per distinct input: a few hundred bytes each


def _gb(n: int, unit: str) -> str:
    from calculator.core.units import format_bytes
    return format_bytes(n, unit)


def capacity_of(gpu) -> int:
    """The one capacity a verdict is made against: what PyTorch can allocate on the GPU (GPU.usable_bytes)."""
    return gpu.usable_bytes if gpu is not None else 0


def lines_now(result, values: Mapping[str, Any], unit: str, gpu, fit=None) -> list[str]:
    """The answer's first lines, from the estimate alone (no search)."""
    est = result.estimate
    if est.serving is not None:
        return _serving(est.serving, unit)
    if est.rl is not None:
        return _rl(est, unit, gpu)
    from dashboard.charts import breakdown_data
    data = breakdown_data(est, gpu)
    moment = data.moments[data.peak_bar] if data.moments and data.moments[data.peak_bar] != "peak" else ""
    at = f" at the {moment}" if moment else ""
    if fit is None or gpu is None:
        return [f"**{_gb(est.total_bytes, unit)}** per GPU{at}: pick a GPU for a verdict."]
    word = {"fits": "Fits", "tight": "Tight fit", "does not fit": "Does not fit"}.get(fit.verdict, fit.verdict)
    why = {"fits": "within the 80% safe band", "tight": "above the 80% safe band, below the capacity",
           "does not fit": f"short by {_gb(-fit.headroom_bytes, unit)}"}.get(fit.verdict, "")
    return [f"**{word} on {md(fit.name)}**: **{_gb(est.total_bytes, unit)}** per GPU{at}, of "
            f"{_gb(fit.capacity_bytes, unit)} PyTorch can allocate ({fit.utilization:.0%}; {why})."]


def _serving(sv, unit: str) -> list[str]:
    from dashboard.views.serving import ENGINE_NAMES
    name = ENGINE_NAMES.get(sv.engine, sv.engine)
    if not sv.starts:
        return [f"**{name} does not start** with max_model_len {sv.configured_max_model_len:,}: "
                f"{md(sv.start_error)}",
                f"Largest max_model_len that starts: **{sv.max_model_len:,}** tokens."]
    return [f"**{name} starts**: **{sv.max_concurrent_seqs:.2f}** concurrent sequences of "
            f"{sv.tokens_per_seq:,} tokens · KV pool **{_gb(sv.kv_pool_bytes, unit)}** "
            f"({sv.kv_pool_tokens:,} tokens) · largest context (max_model_len) that starts: "
            f"**{sv.max_model_len:,}** tokens."]


def _rl(est, unit: str, gpu) -> list[str]:
    rl = est.rl
    peak = next(p for p in rl.phases if p.name == rl.peak_phase)
    where = "" if peak.where == "every GPU" else f" ({peak.where})"
    phases = " · ".join(f"{p.name} {_gb(p.total_bytes, unit)}" for p in rl.phases)
    cap = capacity_of(gpu)
    verdict = ""
    if cap:
        from calculator.core.fit import verdict as judge
        v = judge(peak.total_bytes, cap)
        verdict = f"; {v} on {md(gpu.name)} ({peak.total_bytes / cap:.0%} of {_gb(cap, unit)} PyTorch can allocate)"
    return [f"**Peak phase: {md(peak.name)}**{where}, **{_gb(peak.total_bytes, unit)}** per GPU{verdict}.",
            f"Phases: {phases}."]


def lines_searched(result, values: Mapping[str, Any], unit: str, gpu, fit=None) -> list[str]:
    """Training and generate(): the largest micro-batch and the longest sequence that fit the GPU, and (when the job
    does not fit the 80% band) the top three remedies with what each saves. [] for serving and RL."""
    est = result.estimate
    if est.serving is not None or est.rl is not None or gpu is None:
        return []
    from dashboard.inputs import state
    key = (tuple(sorted(state.to_query(values).items())), unit, gpu.id)  # the view's inputs, as its link has them
    return list(_SEARCHED.get_or_build(key, lambda: tuple(_search(result, values, unit, gpu, fit))))


def _search(result, values, unit: str, gpu, fit) -> list[str]:
    from calculator.core.errors import InputError
    from calculator.planning.solvers import max_micro_batch, max_seq_len
    m, w = result.model, result.workload
    cap = capacity_of(gpu)
    out = []
    try:
        safe_b, full_b = max_micro_batch(m, w, cap, safe=True), max_micro_batch(m, w, cap, safe=False)
        safe_s, full_s = max_seq_len(m, w, cap, safe=True), max_seq_len(m, w, cap, safe=False)
    except InputError:
        safe_b = full_b = safe_s = full_s = None
    if safe_b is not None and not full_b.value and not full_s.value:
        out.append("No micro-batch or sequence fits as laid out: the model states alone exceed this GPU.")
    elif safe_b is not None:
        batch = "batch" if w.mode == "infer" else "micro-batch"  # generate() runs one batch of sequences
        limit = getattr(m, "max_position_embeddings", None)  # memory allows it; the model was built for less
        beyond = f" (beyond the model's context of {limit:,})" if limit and full_s.value > limit else ""
        out.append(f"Largest that fits (80% band / capacity): {batch} **{safe_b.value:,} / {full_b.value:,}** "
                   f"at {w.seq_len:,} tokens · sequence **{safe_s.value:,} / {full_s.value:,}** tokens{beyond} at "
                   f"{batch} {w.micro_batch}.")
    if fit is not None and fit.verdict != "fits" and result.estimate.mode == "train":
        from dashboard.advice import advice_for
        adv = advice_for(result, values)
        top = [r for r in adv.remedies if r.saved_bytes > 0][:3]
        if top:
            out.append("Top remedies: " + " · ".join(
                f"{md(r.change)} **−{_gb(r.saved_bytes, unit)}**" + (" (fits)" if r.fits else "") for r in top)
                + " (all: *Remedies*, below)")
    return out
