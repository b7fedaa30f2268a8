"""The calculator page's RL view: the phases of one RL step per GPU in the six usual buckets, the rollout's KV
demand against the engine's pool, and, for seed 002's scenarios, the seed's own table beside ours."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import streamlit as st

SCENARIO_DIR = Path(__file__).resolve().parents[2] / "presets" / "scenarios"


def _gb(n: int, unit: str) -> str:
    from calculator.core.units import format_bytes
    return format_bytes(n, unit)


def matching_seed(values: Mapping[str, Any] | None) -> tuple[str, dict] | None:
    """(scenario title, the seed's table in GB) when the page shows exactly a scenario that reproduces a published
    table (dashboard.inputs.scenarios Scenario.seed_file)."""
    if not values:
        return None
    from dashboard.inputs.scenarios import SCENARIOS
    for sc in SCENARIOS:
        if sc.seed_file and all(values.get(k) == v for k, v in sc.values.items()):
            data = json.loads((SCENARIO_DIR / sc.seed_file).read_text(encoding="utf-8"))
            return sc.title, data["_seed_table_gb"]
    return None


def rl_panel(result, unit: str, values: Mapping[str, Any] | None = None) -> None:
    """`result`: dashboard.inputs.state.Result (the estimate with the model and workload it was computed for)."""
    import pandas as pd

    from calculator.stages.rl import BUCKETS, buckets
    est = result.estimate
    rl = est.rl
    st.subheader("RL post-training: the phases of one step", divider="gray")
    st.caption(f"Per GPU. The peak is the **{rl.peak_phase}** phase; the breakdown above shows it term by term.")
    row = st.container(horizontal=True, gap="small")
    row.metric("Rollout KV demand per GPU", _gb(rl.kv_demand_bytes, unit),
               help=f"{rl.sequences} sequences of {rl.tokens_per_sample:,} tokens over {rl.engines} engine(s)")
    row.metric("Engine KV pool per GPU", _gb(rl.rollout.kv_pool_bytes, unit),
               help=f"{rl.rollout.kv_pool_tokens:,} tokens at memory fraction {rl.rollout.memory_fraction:g}")
    row.metric("Held at once", f"{rl.share_at_once:.0%}", help="Share of an engine's sequences its pool holds")
    row.metric("Fraction that holds the rollout", f"{rl.fraction_for_demand:.3f}",
               help="The engine memory fraction whose pool holds every sequence at once")
    table = {ph.name: buckets(ph.terms) for ph in rl.phases}
    frame = pd.DataFrame({phase_column(ph, unit): [table[ph.name][b] / _unit(unit) for b in BUCKETS]
                          + [ph.total_bytes / _unit(unit)] for ph in rl.phases},
                         index=pd.Index(list(BUCKETS) + ["Total"], name=f"Per GPU ({unit})"))
    st.dataframe(frame.round(2), width="stretch", height="content", key="rl_phases")
    seed = matching_seed(values)
    if seed is not None:
        seed_beside_ours(result, seed)
    with st.expander("Notes on this RL estimate"):
        st.markdown("\n".join(f"- {n}" for n in rl.notes))


def phase_column(ph, unit: str) -> str:
    """A phase's column header, with its unit: `rollout (every GPU), GB`."""
    return f"{ph.name} ({ph.where}), {unit}"


def _unit(unit: str) -> int:
    from calculator.core.units import UNIT_BYTES
    return UNIT_BYTES[unit]


SEED_COLUMNS = ("Published (GB)", "Ours, peak phase (GB)", "Ours, nothing offloaded (GB)")


def seed_beside_ours(result, seed: tuple[str, dict]) -> None:
    """The seed's table (its 'GB') beside ours at the peak phase and with nothing offloaded (the seed's sum)."""
    import pandas as pd

    from calculator import estimate
    from calculator.stages.rl import BUCKETS, buckets
    title, table = seed
    est, w = result.estimate, result.workload
    st.markdown(f"**The published budget table of this example beside ours** ({title}; ours in GB = 10⁹ B; why "
                "each line differs: docs/seed-002-rl.md)")
    all_on = w.model_copy(update={"rl": w.rl.model_copy(update={"offload_train": False, "engine_sleep": False})})
    every = estimate(result.model, all_on, with_fits=False)
    peak, every_b = buckets(est.terms), buckets(every.terms)
    rows = [{"Component": b, SEED_COLUMNS[0]: table[b], SEED_COLUMNS[1]: peak[b] / 1e9,
             SEED_COLUMNS[2]: every_b[b] / 1e9} for b in BUCKETS]
    rows.append({"Component": "Total", SEED_COLUMNS[0]: table["Total"], SEED_COLUMNS[1]: est.total_bytes / 1e9,
                 SEED_COLUMNS[2]: every.total_bytes / 1e9})
    st.dataframe(pd.DataFrame(rows).round(1), hide_index=True, width="stretch", height="content",
                 key="seed_table")
