"""About the estimate: what is modelled, what is not, and how accurate it is."""
from __future__ import annotations

import streamlit as st

from calculator.core.result import COMPONENT_LABELS
from dashboard.views import entry

entry.through_app()  # a first visit straight to this page still runs inside app.py's navigation


st.title("About the estimate")

st.markdown("""
The calculator estimates the memory of **one GPU** — the most loaded one — for training or inference of a
decoder transformer (dense or mixture-of-experts; multi-head, grouped-query or latent attention; full or
sliding-window), or of any network given only as totals (parameters and activation elements per sample).
Every number comes from the engine in `calculator/`; each term carries its formula, the formula with values
substituted, and its source (see **Formulas & references**).
""")

st.subheader("What is modelled")
st.markdown("""
**Models**: a preset, a custom architecture, a pasted `config.json`, **any model on the Hugging Face Hub by its
id** (its `config.json` is fetched and its checkpoint's parameters counted exactly, from the Hub's API or the
safetensors headers; a token field opens up gated and private repos), or a generic network given as totals.
""")
st.markdown("Each estimate is the sum of these components (zero where they do not apply):")
st.markdown("\n".join(f"- **{label}**" for label in COMPONENT_LABELS.values()))
st.markdown("""
- **Precision** per tensor family (params, gradients, fp32 master copy, optimizer states, activations), named
  recipes (DeepSpeed/FSDP mixed bf16, Megatron, PyTorch AMP, pure bf16, fp32) or custom.
- **Fine-tuning**: full, LoRA and QLoRA (adapters of a chosen rank on the attention, q/v or all linear
  layers of a frozen base, which QLoRA stores in NF4).
- **Optimizers**: AdamW, 8-bit AdamW, SGD with or without momentum, Adafactor, Lion, none; the optimizer
  step's temporary memory depends on the PyTorch implementation (foreach, for-loop, fused).
- **Activations**, three models: *exact* (the tensors the framework really saves, traced from PyTorch +
  transformers code), *textbook* (Korthikanti et al. 2022 plus a flat overhead) and *fujii* (Fujii et al. 2024);
  recompute none / selective / full; FlashAttention or eager attention.
- **Parallelism**: ZeRO 1/2/3 and FSDP (with hybrid shard groups), Megatron's distributed optimizer, tensor
  and sequence parallel, pipeline parallel (1F1B and interleaved, one bar per stage), data, context and
  expert parallel, and CPU offload (ZeRO-Offload / ZeRO-Infinity / FSDP CPUOffload: the host RAM it needs per
  rank is shown under the headline).
- **Inference**: KV cache (by dtype, GQA/MQA/MLA, sliding windows), quantized weights with group scales
  (AWQ or GPTQ layout), the prefill working set.
- **Serving engines** (`vllm`, `sglang`; `hf` is transformers' generate()): the engine's own budget — vLLM's
  `gpu_memory_utilization` (0.9) of the device, its profile run's activation peak at `max_num_batched_tokens`,
  non-torch memory and CUDA graphs; SGLang's `mem_fraction_static` rule — and the KV pool it leaves, in blocks
  (vLLM 16 tokens, 64 for MLA) or pages (SGLang 1), with GQA, MLA latents, sliding-window layers in vLLM's hybrid
  allocator, the KV dtype and TP/PP/DP-attention layouts: tokens held, concurrent sequences at your prompt +
  generated length, and whether a `max_model_len` starts (vLLM refuses one whose blocks do not fit; the
  largest that starts is given). Checked against published vLLM start-up logs (validation/published/serving.py).
- **RL post-training** (mode `rl`): the trainer (any precision, optimizer, parallelism and recompute above) and
  a vLLM or SGLang rollout engine, colocated or on their own GPUs, with reference, reward and critic models;
  what the frameworks offload or put to sleep between phases (slime, verl, OpenRLHF, TRL); the peak per GPU over
  the rollout, scoring and training phases; the rollout's KV demand against the engine's pool.
- **Overheads** outside the tensors: allocator fragmentation (a calibrated share of the long-lived states
  and of the working set, or your own flat percentage), the CUDA context of the chosen GPU (or your own
  figure) and NCCL communicator buffers.
""")

st.subheader("What is not modelled")
st.markdown("""
- NVMe offload.
- The peak while a checkpoint loads (an AWQ checkpoint with tied embeddings materialises a bf16 copy of them;
  bitsandbytes quantizing on the GPU holds a bf16 copy of the largest linear): the estimate is the running peak.
- Serving engines other than vLLM and SGLang (TensorRT-LLM, TGI, llama.cpp), speculative decoding's draft
  model, multimodal encoders' profile runs, and engine-side connectors (LMCache) that hold GPU buffers.
- `torch.compile` and custom-kernel workspaces in training; dataloader and pinned host memory.
- Architectures other than decoder transformers, except through the generic totals.
""")

st.subheader("How to read the verdicts")
st.markdown("""
A GPU **fits** when the estimate is at most 80% of its memory, is **tight** between 80% and 100%, and
**does not fit** above it. The 80% line follows Fujii et al. 2024
([arXiv:2411.06465](https://arxiv.org/abs/2411.06465)): none of their 454 training runs whose estimate stayed
under 80% of the GPU's capacity ran out of memory. GB are 10⁹ bytes and GiB are 2³⁰ bytes; the page always
says which.
""")

st.subheader("Accuracy against measurements")
with st.container(border=True, key="validation_summary"):
    try:
        from dashboard import accuracy as acc
        from validation.trace.compare import summary
        h = acc.headline(summary())
        ph = acc.published_headline(acc.load_published())
    except Exception as exc:  # a changed golden file or engine must not take this page down
        st.warning(f"The accuracy figures could not be computed ({type(exc).__name__}: {exc}).",
                   icon=":material/warning:")
    else:
        states = "exact to the byte" if h.model_states_exact else f"within {h.model_states_worst_pct:.3f}%"
        act = "—" if h.activations_worst_pct is None else f"{h.activations_worst_pct:.2f}%"
        peak = "—" if h.peak_worst_pct is None else f"{h.peak_worst_pct:.2f}%"
        st.markdown(f"""
Against **{h.cases} measured cases** of {len(h.architectures)} architectures ({", ".join(h.architectures)}),
traced byte by byte from real `transformers` code: model states are **{states}**, activations within **{act}**
and the peak allocated within **{peak}** (worst case). Against **{ph['comparable']} comparable published GPU
measurements** ({ph['rows']} rows in all), {ph['within_bound']} of {ph['groups']} groups are within their error
bound. The numbers are computed from the golden files and the published comparison each time this page runs.
""")
        st.page_link("pages/accuracy.py", label="See the Accuracy page: every case, the scatter and the published rows",
                     icon=":material/rule:")
