"""Accuracy: measured, not asserted. The engine against byte-exact traces of real transformers code (the golden
matrix, tests/golden/) and against published GPU measurements (validation/published_comparison.json).

Every number here is computed from those files by `validation.trace.compare` / `dashboard.accuracy` when the page runs.
"""
from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import accuracy as acc
from dashboard.views import entry

entry.through_app()  # a first visit straight to this page still runs inside app.py's navigation


st.set_page_config(page_title="Accuracy · LLM GPU Memory Calculator", layout="wide")  # wide tables
st.title("Accuracy: measured, not asserted")
st.caption("How close the engine is to what PyTorch really allocates, in two independent checks: byte-exact traces "
           "of real `transformers` code (the golden matrix), and memory figures published for real GPUs. "
           "Error = (predicted − measured) / measured.")

PCT = st.column_config.NumberColumn(format="%.3f")
BYTES = st.column_config.NumberColumn(format="localized")

# ---- the golden matrix ------------------------------------------------------------------------------------------
try:
    from validation.trace.compare import load_goldens, summary
    s = summary()
    meta = acc.case_meta(load_goldens())
except Exception as exc:  # the engine or a golden file changed under us: say so, keep the rest of the page
    s = None
    st.error(f"The golden matrix could not be compared with the engine ({type(exc).__name__}: {exc}).",
             icon=":material/error:")

if s is not None:
    h = acc.headline(s)
    c1, c2, c3, c4, c5 = st.columns(5)
    c1.metric("Measured cases", f"{h.cases}", help=f"{h.excluded} more traced but not compared (see below)")
    c2.metric("Architectures", f"{len(h.architectures)}", help=", ".join(h.architectures))
    c3.metric("Model states", "exact" if h.model_states_exact else f"≤ {h.model_states_worst_pct:.3f}%",
              help="Parameters, weights, master weights, gradients, optimizer states: worst |error| "
                   f"{h.model_states_worst_pct:.3f}% over every case")
    c4.metric("Activations, worst |error|", "—" if h.activations_worst_pct is None else
              f"{h.activations_worst_pct:.2f}%", help="Tensors saved for backward, loss head included")
    c5.metric("Peak allocated, worst |error|", "—" if h.peak_worst_pct is None else f"{h.peak_worst_pct:.2f}%",
              help="What torch.cuda.max_memory_allocated() would report")

st.subheader("How the measurement works", divider="gray")
st.markdown("""
- Each case builds a real `transformers` model from its public `config.json` on PyTorch's **meta device** (shapes,
  dtypes and storage sizes, no data), so a 47B-parameter model costs nothing, and runs one real training step
  (forward, loss, backward, optimizer step) or one `generate()`-style prefill + decode.
- A `TorchDispatchMode` sees every storage every operator allocates and when it is freed, so the live total, and
  its peak, are exact to the byte; **saved-tensor hooks** record what autograd keeps for the backward.
- FlashAttention-2 is **emulated** (its allocations and saved tensors, from flash-attn 2.x's source); eager
  attention is the model's own code. A CPU run of the same code cross-checks the meta trace to the byte.
- It cannot see what lives outside PyTorch's tensors: the CUDA context, the caching allocator's rounding and
  fragmentation, cuBLAS/cuDNN workspaces, NCCL buffers, `torch.compile`, CUDA graphs and fused kernels.
  Those terms are checked against **published GPU measurements** instead (second half of this page).
""")
st.caption("Details: `validation/README.md`; reproduce with `python -m validation.trace.make_golden --check` and "
           "`python -m validation.trace.compare`.")

if s is not None:
    st.subheader("Golden matrix: the engine vs traced transformers code", divider="gray")
    st.caption("Compared: the engine's components and `peak_allocated_bytes` against the same quantities traced on "
               f"the meta device, over {h.cases} cases ({', '.join(h.architectures)}). Model states must be exact; "
               "activations and peaks are held to 1% by `tests/validation/test_golden.py`.")
    per_q = pd.DataFrame(acc.per_quantity_rows(s)).drop(columns=["key"])
    st.dataframe(per_q, hide_index=True, width="stretch", key="acc_per_quantity", height="content",
                 column_config={"Median |error| %": PCT, "Worst |error| %": PCT})

    st.plotly_chart(acc.scatter_figure(s), key="acc_scatter", theme=None,
                    config={"displaylogo": False, "toImageButtonOptions": {"filename": "predicted-vs-measured",
                                                                           "scale": 2}})
    st.caption("Predicted vs measured, one colour per quantity, both axes logarithmic; the dashed diagonal is "
               "y = x. Hover a point for its case and error.")

    st.markdown("**Every comparison**")
    cases = pd.DataFrame(acc.case_rows(s, meta))
    f1, f2, f3, f4 = st.columns([3, 3, 3, 2], vertical_alignment="bottom")
    archs = f1.multiselect("Architecture", sorted(cases["Architecture"].unique()), key="acc_arch",
                           placeholder="all")
    modes = f2.multiselect("Mode", sorted(cases["Mode"].unique()), key="acc_mode", placeholder="all")
    qs = f3.multiselect("Quantity", [q for q in acc.QUANTITIES if q in set(cases["Quantity"])], key="acc_quantity",
                        placeholder="all")
    nonzero = f4.toggle("Only inexact", key="acc_nonzero", help="Hide the comparisons that are exact to the byte")
    shown = cases
    if archs:
        shown = shown[shown["Architecture"].isin(archs)]
    if modes:
        shown = shown[shown["Mode"].isin(modes)]
    if qs:
        shown = shown[shown["Quantity"].isin(qs)]
    if nonzero:
        shown = shown[shown["Error %"] != 0]
    st.caption(f"{len(shown)} of {len(cases)} comparisons ({shown['Case'].nunique()} cases)")
    st.dataframe(shown, hide_index=True, width="stretch", key="acc_cases", height=420,
                 column_config={"Measured": BYTES, "Predicted": BYTES,
                                "Error %": st.column_config.NumberColumn(format="%+.4f")})

    if s["excluded"]:
        st.markdown(f"**Traced but not compared ({len(s['excluded'])} cases)**")
        st.caption("Why: " + acc.EXCLUDED_REASON + ".")
        st.dataframe(pd.DataFrame(acc.excluded_rows(s, meta)).drop(columns=["Reason"]), hide_index=True,
                     width="stretch", height="content", key="acc_excluded")

# ---- every architecture ------------------------------------------------------------------------------------------
st.subheader("Architectures: every model type, measured", divider="gray")
try:
    arch_table = acc.load_architectures()
except (OSError, ValueError) as exc:
    arch_table = None
    st.error(f"validation/architectures/table.json could not be read ({exc}).", icon=":material/error:")
if arch_table is not None:
    am = arch_table["meta"]
    st.caption(f"Every supported `model_type`, built at tiny widths from the config.json `transformers` "
               f"{am['transformers']} writes for it (the mapper tests' configs): **parameters** against the real "
               "model on the meta device; for each layer kind (token mixer + feed-forward) **one layer's saved "
               f"activations** against a CPU trace of the real layer (bf16, eager attention, batch "
               f"{am['traced']['batch']} × {am['traced']['seq']} tokens, the engine on transformers' PyTorch path; "
               "CPU-only terms such as LayerNorm's bf16 statistics are left in the reference); the **cache** "
               f"against what an eval prefill ({am['cache']['batch']} × {am['cache']['prompt']} tokens) returns. "
               "Written by `python -m validation.architectures`.")
    st.markdown("**By kind**")
    st.dataframe(acc.architecture_kind_rows(arch_table), hide_index=True, width="stretch", height="content",
                 key="arch_kinds", column_config={"Median |error| %": st.column_config.NumberColumn(format="%.2f"),
                                                  "Worst error %": st.column_config.NumberColumn(format="%+.2f")})
    st.markdown(f"**Every model type ({len(arch_table['rows'])})**")
    st.dataframe(acc.architecture_rows(arch_table), hide_index=True, width="stretch", key="arch_rows")

# ---- the real-GPU matrix -----------------------------------------------------------------------------------------
st.subheader("On a real GPU: per training stack, model implementation and kind of run", divider="gray")
try:
    gpu = acc.load_gpu_matrix()
except (OSError, ValueError) as exc:
    gpu = None
    st.error(f"validation/gpu_comparison.json could not be read ({exc}).", icon=":material/error:")
if gpu is not None:
    st.caption("The shared H200 runs (PyTorch 2.11, CUDA 13.0, transformers 5.17; `tests/golden_gpu/`), each given to "
               "the engine as the command line a user would type: peak allocated against "
               "`torch.cuda.max_memory_allocated`, the total against nvidia-smi (peak + the caching allocator's "
               "reserved − allocated, replayed over the step's tensors + 0.84 GB outside PyTorch). Held by "
               "`tests/validation/test_golden_gpu.py`: peak within 6% per run and 1.5% median, nvidia-smi within 4% median; the "
               "runs not described yet are listed there with the reason. Beside the CPU traces above, this is where "
               "the terms a trace cannot see (allocator, context, stacks' buffers) are measured.")
    st.dataframe(acc.gpu_group_rows(gpu), hide_index=True, width="stretch", key="gpu_groups", height="content",
                 column_config={k: PCT for k in ("Peak median |error| %", "Peak worst |error| %",
                                                 "nvidia-smi median |error| %", "nvidia-smi worst |error| %")})
    with st.expander(f"All {len(gpu['cases'])} GPU runs"):
        st.dataframe(acc.gpu_case_rows(gpu), hide_index=True, width="stretch", key="gpu_cases", height="content",
                     column_config={"Peak error %": st.column_config.NumberColumn(format="%+.2f"),
                                    "nvidia-smi error %": st.column_config.NumberColumn(format="%+.2f")})
    st.caption("Reproduce with `python -m validation.gpu.compare`; the allocator replay per run: "
               "`python -m validation.gpu.allocator_compare`.")
    st.markdown("**Published runs of whole stacks** (torchtitan, ms-swift: max reserved as the stack logs it; each "
                "row's command is what the engine was given; a *capacity* figure is the card's whole memory)")
    st.dataframe(list(acc.published_stack_rows()), hide_index=True, width="stretch", key="stack_rows", height="content",
                 column_config={"Error %": st.column_config.NumberColumn(format="%+.1f")})

# ---- published GPU measurements ----------------------------------------------------------------------------------
st.subheader("Published GPU measurements", divider="gray")
try:
    pub = acc.load_published()
except (OSError, ValueError) as exc:
    pub = None
    st.error(f"validation/published_comparison.json could not be read ({exc}).", icon=":material/error:")

if pub is not None:
    ph = acc.published_headline(pub)
    st.markdown(f"""
Memory figures published for real GPUs ({ph['rows']} rows from {len(pub['sources'])} sources, each with its
citation in `validation/published.csv`), compared with the engine's estimate of **the same metric**;
{ph['comparable']} rows are comparable and the {ph['groups']} groups that have any are each held to an error bound
by `tests/validation/test_published.py` ({ph['within_bound']} of {ph['groups']} within it now). What is compared with what:

- `torch.cuda.max_memory_allocated()` (Qwen2.5 speed benchmark, litgpt) ↔ the engine's **peak allocated**: no CUDA
  context, no allocator slack;
- `nvidia-smi` "used" (bert-large on a V100) ↔ the engine's **total per GPU**: peak × (1 + fragmentation) + the
  CUDA context, the two terms the traces cannot see, so these rows calibrate them;
- DeepSpeed's estimator ↔ the engine's model states; torchao's optimizer rows ↔ differences of the
  optimizer-state component.

Rows the engine cannot express (encoders, CPU offload, unstated batch or sequence, out-of-memory runs…) are kept
with the reason.
""")
    groups = pd.DataFrame(acc.group_rows(pub))
    st.dataframe(groups, hide_index=True, width="stretch", key="pub_groups", height="content",
                 column_config={"Median |error| %": PCT, "Worst |error| %": PCT,
                                "Bound ±%": st.column_config.NumberColumn(format="%.1f")})
    with st.expander("What each metric means"):
        st.markdown("\n".join(f"- `{m}`: {acc.METRIC_MEANING.get(m, '')}"
                              for m in sorted({r["metric"] for r in pub["rows"]})))

    st.markdown("**Rows and their notes**")
    rows = pd.DataFrame(acc.published_rows(pub))
    g1, g2 = st.columns([4, 1], vertical_alignment="bottom")
    pick = g1.multiselect("Group", list(groups["Group"]), key="pub_group", placeholder="all groups")
    only = g2.toggle("Comparable only", value=True, key="pub_comparable")
    shown_pub = rows
    if pick:
        shown_pub = shown_pub[shown_pub["Group"].isin(pick)]
    if only:
        shown_pub = shown_pub[shown_pub["Comparable"]]
    st.caption(f"{len(shown_pub)} of {len(rows)} rows")
    st.dataframe(shown_pub, hide_index=True, width="stretch", key="pub_rows", height=420,
                 column_config={"Measured (bytes)": BYTES, "Estimated (bytes)": BYTES,
                                "Error %": st.column_config.NumberColumn(format="%+.2f"),
                                "Note": st.column_config.TextColumn(width="large")})

st.subheader("Step time on a real H200", divider="gray")
st.caption("The time estimate (calculator.timing.step_time) against the measured wall time of each training step "
           "(`step2.seconds`, steady state, synchronised) and each `generate()` call of the shared H200 cases "
           "(PyTorch 2.11, transformers 5.17, eager code). The efficiencies were fitted on the \"fit\" models only; "
           "\"unseen\" are models the fit never saw; \"out of scope\" are runs whose kernels the time model does "
           "not describe (Liger, compile, padding masks, DDP/FSDP2 wrappers, kbit prep).")
time_rows = acc.timing_rows()
st.dataframe(acc.timing_group_rows(time_rows), hide_index=True, width="stretch", height="content",
             key="time_groups")
with st.expander(f"All {len(time_rows)} timed cases"):
    st.dataframe(time_rows, hide_index=True, width="stretch", key="time_cases", height="content",
                 column_config={"Error %": st.column_config.NumberColumn(format="%+.1f")})

st.subheader("Multi-GPU step time against published runs", divider="gray")
st.caption("The same time estimate against published training throughput with its exact configuration "
           "(`validation/published/throughput/rows.csv`: Megatron-Bridge / NeMo performance tables, NeMo's "
           "long-context tables, torchtitan; every row cites its source and quotes the figure). Published step time "
           "= tokens per step / (tokens/s per GPU × GPUs). The GEMM and fused-attention efficiencies per GPU "
           "generation and the Megatron MoE host constant were fitted on the newest Megatron-Bridge tables "
           "(\"fitted\"); every other source is held out (`python -m validation.published.throughput`).")
st.dataframe(acc.throughput_group_rows(), hide_index=True, width="stretch", height="content", key="tput_groups",
             column_config={"Median error %": st.column_config.NumberColumn(format="%+.1f")})
tput_rows = acc.throughput_rows()
with st.expander(f"All {len(tput_rows)} compared runs"):
    st.dataframe(tput_rows, hide_index=True, width="stretch", key="tput_cases", height="content",
                 column_config={"Error %": st.column_config.NumberColumn(format="%+.1f")})
skipped_rows = acc.throughput_skipped_rows()
with st.expander(f"{len(skipped_rows)} published runs the engine cannot express, and why"):
    st.dataframe(skipped_rows, hide_index=True, width="stretch", key="tput_skipped", height="content")

st.subheader("Calibrated constants", divider="gray")
table = acc.calibrated_constants_markdown()
if table:
    st.caption("From `validation/CALIBRATION.md`: what the published GPU rows say about the terms the traces "
               "cannot see, each constant with its source.")
    st.markdown(table)
else:
    st.info("validation/CALIBRATION.md has no \"Calibrated constants\" section.", icon=":material/info:")
