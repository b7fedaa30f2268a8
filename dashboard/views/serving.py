"""The calculator page's serving-engine and RL parts: their sidebar inputs and their result panels. app.py calls
`sidebar_serving`, `sidebar_rl` and `panel`; every number shown comes from the engine's result
(`Estimate.serving`, `Estimate.rl`)."""
from __future__ import annotations

from typing import Any, Mapping

import streamlit as st

from dashboard.inputs.widgets import field

SERVING_PAIRS = ("mml", "mbt", "mns", "bsz", "adp", "ever")
RL_PAIRS = ("rlb", "rln", "rlp", "rlr", "rle", "rltp")
ENGINE_NAMES = {"hf": "transformers generate()", "vllm": "vLLM", "sglang": "SGLang"}
MODE_TITLES = {"train": "training", "infer": "inference", "rl": "RL post-training (peak over the phases)"}


def _pairs(keys, problems, disabled) -> None:
    if any(k in problems for k in keys):
        for key in keys:
            field(key, problems, disabled=disabled)
        return
    box = st.container(horizontal=True, wrap=True, gap="small")
    for key in keys:
        field(key, problems, disabled=disabled, container=box, width=110)


def sidebar_serving(values: Mapping[str, Any], problems) -> None:
    """Serving engine inputs (inference mode only), drawn in the page's "Serving engine" section."""
    infer = values["mode"] == "infer"
    field("eng", problems, disabled=not infer, caption=None if values["eng"] == "hf" else
          "The engine preallocates its KV pool inside its memory fraction: the result below says how many tokens "
          "and sequences fit and whether it starts.")
    engine = infer and values["eng"] != "hf"
    field("mfr", problems, disabled=not engine)
    _pairs(SERVING_PAIRS, problems, not engine)
    row = st.container(horizontal=True, gap="small")
    field("pfx", problems, disabled=not engine, container=row)
    field("cg", problems, disabled=not engine, container=row)
    field("lmo", problems, disabled=not engine, container=row)


def sidebar_rl(values: Mapping[str, Any], problems) -> None:
    """RL post-training inputs (mode rl): the rollout and its engine; the trainer is the rest of the sidebar.
    Drawn in the page's "RL rollout" section."""
    rl = values["mode"] == "rl"
    st.caption("The trainer is set above (precision, optimizer, parallelism, recompute, micro-batch); a training "
               "sample is prompt + response tokens.")
    _pairs(RL_PAIRS, problems, not rl)
    field("rlf", problems, disabled=not rl)
    field("rlg", problems, disabled=not rl or values["rlc"])
    for key in ("rlc", "rlo", "rls", "rlref", "rlcr", "rlrm", "rlx"):
        field(key, problems, disabled=not rl)


def _gb(n: int, unit: str) -> str:
    from calculator.core.units import format_bytes
    return format_bytes(n, unit)


def panel(result, unit: str, values: Mapping[str, Any] | None = None) -> None:
    """The serving section (KV pool, tokens, concurrency, max_model_len) and the RL phases, when present.
    `result`: dashboard.inputs.state.Result."""
    est = result.estimate
    if est.serving is not None:
        serving_panel(est.serving, unit)
    if getattr(est, "rl", None) is not None:
        from dashboard.views.rl import rl_panel
        rl_panel(result, unit, values)


def serving_panel(sv, unit: str) -> None:
    st.subheader(f"Serving engine: {ENGINE_NAMES.get(sv.engine, sv.engine)} {sv.version}", divider="gray")
    if sv.starts:
        st.success(f"Starts with max_model_len {sv.configured_max_model_len:,}: the pool holds "
                   f"{sv.kv_pool_tokens:,} tokens; {sv.max_concurrent_seqs:.2f} sequences of "
                   f"{sv.tokens_per_seq:,} tokens at once.", icon=":material/check_circle:")
    else:
        st.error(f"The engine refuses to start: {sv.start_error}", icon=":material/cancel:")
    row = st.container(horizontal=True, gap="small")
    row.metric("KV pool", _gb(sv.kv_pool_bytes, unit), help="What the engine's budget leaves for the KV cache")
    row.metric("Tokens in the pool", f"{sv.kv_pool_tokens:,}",
               help=f"{sv.kv_pool_blocks:,} blocks of {sv.block_size} tokens")
    row.metric("Concurrent sequences", f"{sv.max_concurrent_seqs:.2f}",
               help=f"Sequences of {sv.tokens_per_seq:,} tokens (prompt + generated) held at once")
    row.metric("Largest max_model_len that starts", f"{sv.max_model_len:,}")
    import pandas as pd
    rows = [("Memory fraction", f"{sv.memory_fraction:g}", sv.memory_fraction_rule),
            ("Budget", _gb(sv.budget_bytes, unit), "fraction × the total CUDA reports, what PyTorch can allocate "
                                                   "(SGLang: × the free memory before loading)"),
            ("Weights", _gb(sv.weights_bytes, unit), "as the engine loads them, with the RoPE cache"),
            ("Activation peak", _gb(sv.activation_peak_bytes, unit),
             f"max_num_batched_tokens {sv.max_num_batched_tokens:,}, max_num_seqs {sv.max_num_seqs:,}"),
            ("Non-torch memory", _gb(sv.non_torch_bytes, unit), "NCCL, all-reduce buffers"),
            ("CUDA graphs", _gb(sv.cuda_graph_bytes, unit),
             f"{sv.cuda_graph_sizes} captures; " + ("taken from the pool" if sv.cuda_graphs_in_budget
                                                     else "outside the pool")),
            ("KV pool", _gb(sv.kv_pool_bytes, unit), f"{sv.kv_bytes_per_token:,} B per token on this GPU")]
    st.dataframe(pd.DataFrame(rows, columns=["Item", "Value", "How"]), hide_index=True, width="stretch",
                 height="content", key="serving_table")
    with st.expander("Notes on this engine estimate"):
        st.markdown("\n".join(f"- {n}" for n in sv.notes))
