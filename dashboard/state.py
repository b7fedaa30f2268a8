"""The dashboard's inputs: their URL keys (a public format, see docs/url-format.md), frozen defaults, how a
query string is checked before the widgets read it, and how widget values become the engine's inputs.

Nothing here imports streamlit, so it is unit-tested directly (tests/test_dashboard_state.py). The engine is
imported lazily, inside functions, so this module loads even while parts of the engine are missing.

Rules of the URL format (version `v=1`):
- keys are short, lower-case and never renamed; a value equal to the default is left out of the URL;
- the defaults below are frozen for v=1: changing one would silently change what old links show;
- numbers are plain decimals; sizes given in MB are 10^6 bytes; booleans are `true`/`false`;
- selectbox values are the engine's own ids (no display labels in the URL).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping

from dashboard.safe_text import cut

URL_FORMAT_VERSION = "1"
VERSION_KEY = "v"

# Model sources that are not presets (they share the `model` key with the preset ids).
CUSTOM, CONFIG, GENERIC = "custom", "config", "generic"
SPECIAL_MODELS = (CUSTOM, CONFIG, GENERIC)
CUSTOM_RECIPE = "custom"
AUTO = "auto"  # inference weight dtype: same as the params dtype

DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "nf4", "fp4")
ACT_DTYPES = ("fp32", "bf16", "fp16")
KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4")
FAMILIES = ("llama", "gemma", "phi3", "gpt2", "gpt_neox", "deepseek", "gpt_oss")
MB = 10**6  # sizes typed in MB (decimal, like the GB axis)


@dataclass(frozen=True)
class Param:
    """One input: its URL key, widget kind, frozen default and accepted values."""

    key: str
    kind: str  # "int" | "float" | "bool" | "choice" | "text"
    default: Any
    label: str
    group: str
    lo: float | None = None
    hi: float | None = None
    step: float | None = None
    options: tuple[str, ...] = ()  # "choice": the static options (model and gpu options come from the engine)
    help: str = ""
    fields: tuple[str, ...] = ()  # engine fields this key feeds (maps engine errors back to the widget)
    short: str = ""  # widget label where two inputs share a sidebar row (the full label becomes its help)


def _p(key, kind, default, label, group, **kw) -> Param:
    return Param(key, kind, default, label, group, **kw)


# Order = sidebar order. Groups: model, mode, precision, optimizer, recompute, parallel, batch, overheads, gpu,
# display. Every key here is part of the public URL format.
PARAMS: tuple[Param, ...] = (
    # ---- model ----------------------------------------------------------------------------------------------
    _p("model", "choice", "llama-3.1-8b", "Model", "model",
       help="A preset, or: custom (architecture fields below), config (paste a config.json), "
            "generic (any network given as totals)"),
    _p("hf", "text", "", "Hugging Face id", "model",
       help="A model on the Hugging Face Hub, as org/name (e.g. Qwen/Qwen3-8B): its config.json is fetched and its "
            "checkpoint's parameters counted. While set, it is the model; pick a preset to clear it"),
    _p("h", "int", 4096, "Hidden size (h)", "arch", lo=1, hi=1_000_000, fields=("hidden_size",), short="Hidden (h)"),
    _p("layers", "int", 32, "Layers (L)", "arch", lo=1, hi=10_000, fields=("num_hidden_layers",), short="Layers (L)"),
    _p("heads", "int", 32, "Attention heads (a)", "arch", lo=1, hi=10_000, fields=("num_attention_heads",),
       short="Heads (a)"),
    _p("kvh", "int", 8, "KV heads (k)", "arch", lo=1, hi=10_000, fields=("num_key_value_heads",), short="KV heads"),
    _p("hd", "int", 0, "Head dim (0 = h / a)", "arch", lo=0, hi=100_000, fields=("head_dim",), short="Head dim"),
    _p("ffn", "int", 14336, "FFN size (intermediate_size)", "arch", lo=1, hi=10_000_000,
       fields=("intermediate_size",), short="FFN size"),
    _p("vocab", "int", 128256, "Vocabulary size (V)", "arch", lo=1, hi=100_000_000, fields=("vocab_size",),
       short="Vocab (V)"),
    _p("tie", "bool", False, "Tie input and output embeddings", "arch", fields=("tie_word_embeddings",)),
    _p("glu", "bool", True, "Gated MLP (SwiGLU/GeGLU)", "arch", fields=("gated_mlp",)),
    _p("fam", "choice", "llama", "Block layout (family)", "arch", options=FAMILIES, fields=("family",),
       help="Which block layout decides the saved activations (llama = RMSNorm + SwiGLU, gpt2 = LayerNorm + GELU…)",
       short="Family"),
    _p("norm", "choice", "rmsnorm", "Norm", "arch", options=("rmsnorm", "layernorm"), fields=("norm_type",),
       short="Norm"),
    _p("qkvb", "bool", False, "Bias on q, k, v", "arch", fields=("qkv_bias",)),
    _p("swa", "int", 0, "Sliding window (0 = full attention)", "arch", lo=0, hi=100_000_000,
       fields=("sliding_window",), short="Window"),
    _p("experts", "int", 0, "Routed experts (0 = dense)", "arch", lo=0, hi=100_000, fields=("num_experts",),
       short="Experts"),
    _p("topk", "int", 0, "Experts per token (top-k)", "arch", lo=0, hi=100_000, fields=("num_experts_per_tok",),
       short="Top-k"),
    _p("effn", "int", 0, "Expert FFN size (0 = FFN size)", "arch", lo=0, hi=10_000_000,
       fields=("moe_intermediate_size",), short="Expert FFN"),
    _p("shared", "int", 0, "Shared experts", "arch", lo=0, hi=1_000, fields=("num_shared_experts",),
       short="Shared exp."),
    _p("sffn", "int", 0, "Shared expert FFN size, total (0 = shared × expert FFN)", "arch", lo=0,
       hi=10_000_000, fields=("shared_expert_intermediate_size",), short="Shared FFN"),
    _p("cfg", "text", "", "config.json", "config", fields=("config.json",),
       help="Paste a Hugging Face config.json (used when Model = config)"),
    _p("gparams", "int", 20_000_000, "Total parameters", "generic", lo=1, hi=10**15,
       fields=("total_params",), short="Parameters"),
    _p("gact", "int", 1_000_000, "Activation elements per sample", "generic", lo=0, hi=10**15,
       fields=("activation_elements_per_sample",), short="Act. elements"),
    # ---- mode -----------------------------------------------------------------------------------------------
    _p("mode", "choice", "train", "Mode", "mode", options=("train", "infer", "rl"), fields=("mode",),
       help="train, infer, or rl: RL post-training, a trainer and a rollout engine (the RL rollout inputs below)"),
    _p("ft", "choice", "full", "Fine-tuning", "mode", options=("full", "lora", "qlora"), fields=("finetune",),
       help="full: every weight trains; lora: adapters on a frozen base; qlora: adapters on an NF4 base"),
    _p("lr", "int", 16, "LoRA rank (r)", "mode", lo=1, hi=65_536, fields=("lora_rank",), short="Rank (r)"),
    _p("lt", "choice", "all-linear", "LoRA target modules", "mode", options=("qv", "attention", "all-linear"),
       fields=("lora_targets",), short="Targets"),
    _p("lad", "choice", "fp32", "LoRA adapter dtype", "mode", options=("fp32", "params"),
       fields=("lora_adapter_dtype",),
       help="fp32: PEFT's default (adapters kept in fp32 on a bf16 base); params: the params dtype, trained "
            "per the precision recipe"),
    _p("kbit", "bool", False, "prepare_model_for_kbit_training (QLoRA)", "mode", fields=("kbit_prep",),
       help="PEFT's QLoRA recipe: every weight that is not 4-bit (embeddings, norms, LM head) is cast to fp32, and "
            "with them the residual stream and the logits"),
    _p("qkin", "bool", False, "bitsandbytes < 0.43 (4-bit linears keep inputs)", "mode",
       fields=("qlora_keeps_inputs",),
       help="QLoRA on bitsandbytes before 0.43: MatMul4Bit kept the input of every 4-bit linear for backward; "
            "since 0.43 it keeps only the packed weight"),
    # ---- precision ------------------------------------------------------------------------------------------
    _p("recipe", "choice", "mixed-bf16", "Precision recipe", "precision", fields=("precision",),
       help="A named recipe sets every dtype below; pick 'custom' to set them one by one"),
    _p("pdt", "choice", "bf16", "Params dtype", "precision", options=DTYPES, fields=("precision.params",),
       short="Params"),
    _p("gdt", "choice", "bf16", "Gradients dtype", "precision", options=DTYPES, fields=("precision.grads",),
       short="Gradients"),
    _p("mdt", "choice", "fp32", "Master weights dtype", "precision", options=("none",) + DTYPES,
       fields=("precision.master_weights",), short="Master"),
    _p("odt", "choice", "fp32", "Optimizer states dtype", "precision", options=DTYPES,
       fields=("precision.optimizer_states",), short="Optimizer"),
    _p("adt", "choice", "bf16", "Activations dtype", "precision", options=ACT_DTYPES,
       fields=("precision.activations",), short="Activations"),
    # ---- optimizer ------------------------------------------------------------------------------------------
    _p("opt", "choice", "adamw", "Optimizer", "optimizer", fields=("optimizer",)),
    _p("oimpl", "choice", "fused", "Optimizer implementation", "optimizer",
       options=("foreach", "for-loop", "fused"), fields=("optimizer_impl",),
       help="How PyTorch runs the optimizer step: fused (one kernel), foreach (multi-tensor; allocates "
            "full-size temporaries) or a for-loop"),
    # ---- recompute, attention, activation model -------------------------------------------------------------
    _p("rc", "choice", "none", "Activation recompute", "recompute", options=("none", "selective", "full", "op"),
       fields=("recompute",)),
    _p("attn", "choice", "flash", "Attention kernel", "recompute", options=("flash", "eager", "sdpa"),
       fields=("attention",),
       help="flash: FlashAttention-2; sdpa: PyTorch SDPA as transformers calls it (its flash kernel, or with a "
            "padding / sliding-window mask the memory-efficient kernel and the mask's bias); eager: matmul + softmax"),
    _p("pad", "bool", False, "Padded batch (attention mask)", "recompute", fields=("padded_batch",),
       help="an attention_mask with padding: under sdpa a 4-D mask, GQA keys/values repeated and the "
            "memory-efficient kernel's bias saved per layer (flash unpads; eager builds its mask anyway)"),
    _p("impl", "choice", "hf", "Model implementation", "recompute",
       options=("hf", "liger", "compile", "megatron-te"), fields=("impl",),
       help="The code that runs the model: transformers (hf), transformers + Liger kernels, decoder blocks "
            "compiled with torch.compile, Megatron-Core + Transformer Engine — it decides what layers and loss keep"),
    _p("act", "choice", "exact", "Activation model", "recompute", options=("exact", "textbook", "fujii"),
       fields=("activation_model",),
       help="exact: tensors the framework really saves; textbook: Korthikanti et al. 2022 + flat overhead; "
            "fujii: Fujii et al. 2024"),
    # ---- parallelism ----------------------------------------------------------------------------------------
    _p("stack", "choice", AUTO, "Training stack", "parallel",
       options=(AUTO, "hf-trainer", "ddp", "fsdp2", "deepspeed", "megatron"), fields=("stack",),
       help="How the training software holds gradients and buffers (calculator/stacks/). auto follows the layout: "
            "one GPU hf-trainer, DP ddp, a ZeRO stage deepspeed, an FSDP shard group fsdp2, TP/PP megatron"),
    _p("zg", "choice", "none", "optimizer.zero_grad", "parallel", options=("none", "zeros"),
       fields=("zero_grad_set_to_none",),
       help="none: set_to_none=True (PyTorch's default, HF Trainer): gradients freed after each step and born "
            "again in backward; zeros: zeroed in place, held for the whole step"),
    _p("bview", "bool", False, "DDP gradient_as_bucket_view", "parallel", fields=("ddp_bucket_view",),
       help="DDP only: gradients are views into DDP's buckets instead of a second copy"),
    _p("drp", "bool", False, "DDP: count the rebuild's held bucket", "parallel", fields=("ddp_rebuild_peak",),
       help="DDP only: iteration 2 can keep the first iteration's flat bucket (every gradient) alive through its "
            "forward, until NCCL's watchdog frees it — timing-dependent; on counts that worst case"),
    _p("dsa", "bool", False, "DeepSpeed: \"auto\" buckets (HF)", "parallel", fields=("ds_auto_buckets",),
       help="DeepSpeed only: a ds_config.json with \"auto\" bucket sizes, as HF Trainer / accelerate fill them "
            "(reduce_bucket_size = h², stage-3 prefetch = 0.9·h²); off: DeepSpeed's defaults (5e8 / 5e7 elements)"),
    _p("zero", "choice", "0", "ZeRO / FSDP stage", "parallel", options=("0", "1", "2", "3"),
       fields=("parallel.zero",), help="1 shards optimizer states, 2 also gradients, 3 also parameters"),
    _p("zsh", "int", 0, "ZeRO shard group (0 = DP × CP)", "parallel", lo=0, hi=1_000_000,
       fields=("parallel.zero_shard_size",), help="FSDP hybrid shard / HSDP group size"),
    _p("dopt", "bool", False, "Megatron distributed optimizer", "parallel",
       fields=("parallel.distributed_optimizer",)),
    _p("offo", "bool", False, "Offload optimizer to CPU (ZeRO-Offload)", "parallel",
       fields=("parallel.offload_optimizer",),
       help="gradients, fp32 master weights and optimizer state in host RAM; the optimizer steps on the CPU"),
    _p("offp", "bool", False, "Offload parameters to CPU (ZeRO-3 only)", "parallel",
       fields=("parallel.offload_params",), help="ZeRO-Infinity / FSDP CPUOffload: parameters gathered per unit"),
    _p("tp", "int", 1, "Tensor parallel (TP)", "parallel", lo=1, hi=4096, fields=("parallel.tp",), short="TP"),
    _p("sp", "bool", False, "Sequence parallel (with TP)", "parallel", fields=("parallel.sequence_parallel",)),
    _p("pp", "int", 1, "Pipeline parallel (PP)", "parallel", lo=1, hi=4096, fields=("parallel.pp",), short="PP"),
    _p("sched", "choice", "1f1b", "Pipeline schedule", "parallel", options=("1f1b", "interleaved"),
       fields=("parallel.schedule",)),
    _p("vpp", "int", 1, "Virtual stages per rank", "parallel", lo=1, hi=1024, fields=("parallel.virtual_stages",),
       short="Virtual stages"),
    _p("ppf", "int", 0, "First stage layers (0 = even)", "parallel", lo=0, hi=100_000,
       fields=("parallel.pp_first_stage_layers",), short="First stage layers",
       help="Uneven pipeline stages (Megatron's --decoder-first-pipeline-num-layers): decoder layers of the first "
            "stage; the middle stages split the rest evenly"),
    _p("ppl", "int", 0, "Last stage layers (0 = even)", "parallel", lo=0, hi=100_000,
       fields=("parallel.pp_last_stage_layers",), short="Last stage layers",
       help="Uneven pipeline stages (--decoder-last-pipeline-num-layers): decoder layers of the last stage"),
    _p("mb", "int", 0, "Micro-batches per step (0 = PP)", "parallel", lo=0, hi=1_000_000,
       fields=("parallel.num_microbatches",), short="Micro-batches"),
    _p("dp", "int", 1, "Data parallel (DP)", "parallel", lo=1, hi=1_000_000, fields=("parallel.dp",), short="DP"),
    _p("cp", "int", 1, "Context parallel (CP)", "parallel", lo=1, hi=4096, fields=("parallel.cp",), short="CP"),
    _p("ep", "int", 1, "Expert parallel (EP)", "parallel", lo=1, hi=4096, fields=("parallel.ep",), short="EP"),
    _p("etp", "int", 0, "Expert tensor parallel (0 = TP)", "parallel", lo=0, hi=4096, fields=("parallel.etp",),
       short="Expert TP"),
    # ---- batch and sequence ---------------------------------------------------------------------------------
    _p("mbs", "int", 1, "Micro-batch size", "batch", lo=1, hi=256, fields=("micro_batch",)),
    _p("seq", "int", 4096, "Sequence length (prompt for inference)", "batch", lo=1, hi=100_000_000,
       fields=("seq_len",), short="Sequence"),
    _p("gen", "int", 0, "Generated tokens", "batch", lo=0, hi=100_000_000, fields=("gen_tokens",), short="Generated"),
    _p("kvdt", "choice", "bf16", "KV cache dtype", "batch", options=KV_DTYPES, fields=("kv_dtype",), short="KV dtype"),
    _p("wdt", "choice", AUTO, "Inference weight dtype", "batch", options=(AUTO,) + DTYPES,
       fields=("weight_dtype",), help="auto = the params dtype; int4/nf4/fp4 add group scales", short="Weight dtype"),
    _p("qgs", "int", 128, "Quantization group size", "batch", lo=1, hi=1_000_000, fields=("quant_group_size",),
       short="Group size"),
    _p("qm", "choice", "awq", "Quantized checkpoint layout", "batch", options=("awq", "gptq", "llm-int8"),
       fields=("quant_method",), short="Layout",
       help="int4/int8 weights: GPTQ adds g_idx and a kernel buffer; llm-int8 = bitsandbytes load_in_8bit (int8 "
            "weights with a scale per row, the int8 matmul's buffers)"),
    _p("ewdt", "choice", AUTO, "Routed experts' weight dtype", "batch", options=(AUTO,) + DTYPES,
       fields=("expert_weight_dtype",), short="Expert dtype",
       help="auto = the inference weight dtype; fp4 = an MXFP4 expert checkpoint (GPT-OSS)"),
    # ---- serving engine (calculator/engines) ------------------------------------------------------------------
    _p("eng", "choice", "hf", "Serving engine", "serving", options=("hf", "vllm", "sglang"), fields=("engine",),
       help="hf: transformers generate() (the cache grows with the sequences); vllm / sglang: the engine's memory "
            "budget and the KV pool it preallocates"),
    _p("mfr", "float", None, "Engine memory fraction (empty = the engine's default)", "serving", lo=0.01, hi=1.0,
       step=0.01, fields=("serving.memory_fraction", "serving"),
       help="vLLM gpu_memory_utilization (0.9) / SGLang mem_fraction_static (its rule by GPU memory and TP)"),
    _p("mml", "int", 0, "max_model_len (0 = the model's)", "serving", lo=0, hi=100_000_000,
       fields=("serving.max_model_len",), short="max_model_len"),
    _p("mbt", "int", 0, "max_num_batched_tokens (0 = default)", "serving", lo=0, hi=10_000_000,
       fields=("serving.max_num_batched_tokens",), short="Batched tokens"),
    _p("mns", "int", 0, "max_num_seqs (0 = default)", "serving", lo=0, hi=1_000_000, fields=("serving.max_num_seqs",),
       short="Max seqs"),
    _p("bsz", "int", 0, "KV block size (0 = default)", "serving", lo=0, hi=4096, fields=("serving.block_size",),
       short="Block size"),
    _p("adp", "int", 1, "DP attention (SGLang)", "serving", lo=1, hi=4096, fields=("serving.attention_dp",),
       short="DP attention"),
    _p("ever", "choice", AUTO, "Engine release", "serving", options=(AUTO, "0.33", "0.11", "0.5.23"),
       fields=("serving.version",), short="Release",
       help="auto = the newest modelled (vLLM 0.33, SGLang 0.5.23); vLLM 0.11 is the release llm-d measured"),
    _p("pfx", "bool", True, "Prefix caching", "serving", fields=("serving.prefix_caching",)),
    _p("cg", "bool", True, "CUDA graphs", "serving", fields=("serving.cuda_graphs",)),
    # ---- RL post-training (calculator/rl.py) ------------------------------------------------------------------
    _p("rlb", "int", 32, "Rollout batch size (prompts)", "rl", lo=1, hi=1_000_000,
       fields=("rl.rollout_batch_size", "rl"), short="Rollout batch"),
    _p("rln", "int", 8, "Samples per prompt", "rl", lo=1, hi=100_000, fields=("rl.samples_per_prompt",),
       short="Samples/prompt"),
    _p("rlp", "int", 1024, "Prompt length", "rl", lo=0, hi=10_000_000, fields=("rl.prompt_len",), short="Prompt"),
    _p("rlr", "int", 8192, "Response length", "rl", lo=1, hi=10_000_000, fields=("rl.response_len",),
       short="Response"),
    _p("rle", "choice", "sglang", "Rollout engine", "rl", options=("sglang", "vllm"), fields=("rl.rollout_engine",),
       short="Engine"),
    _p("rltp", "int", 1, "GPUs per rollout engine", "rl", lo=1, hi=4096, fields=("rl.rollout_tp",),
       short="Engine TP"),
    _p("rlf", "float", None, "Rollout memory fraction (empty = engine default)", "rl", lo=0.01, hi=1.0, step=0.01,
       fields=("rl.memory_fraction",)),
    _p("rlg", "int", 0, "Rollout GPUs when apart (0 = as many)", "rl", lo=0, hi=1_000_000,
       fields=("rl.rollout_gpus",)),
    _p("rlc", "bool", True, "Rollout colocated with the trainer", "rl", fields=("rl.colocate",)),
    _p("rlo", "bool", True, "Trainer offloaded during rollout", "rl", fields=("rl.offload_train",)),
    _p("rls", "bool", True, "Engine sleeps during training", "rl", fields=("rl.engine_sleep",)),
    _p("rlref", "bool", False, "Reference model", "rl", fields=("rl.reference_model",)),
    _p("rlcr", "bool", False, "Critic (PPO)", "rl", fields=("rl.critic",)),
    _p("rlrm", "bool", False, "Reward model", "rl", fields=("rl.reward_model",)),
    _p("rlx", "bool", True, "Reference / reward offloaded when idle", "rl", fields=("rl.offload_aux",)),
    # ---- overheads ------------------------------------------------------------------------------------------
    _p("frag", "float", None, "Fragmentation override (% of peak)", "overheads", lo=0.0, hi=100.0, step=0.5,
       fields=("overheads.fragmentation_pct",),
       help="Empty: training replays PyTorch's caching allocator over the step's tensors; inference uses a share "
            "of the long-lived states plus a share of the working set (the two fields below); a number: a flat "
            "percentage of the peak allocated"),
    _p("fst", "float", 2.6, "Fragmentation: % of long-lived states", "overheads", lo=0.0, hi=100.0, step=0.1,
       fields=("overheads.fragmentation_states_pct",), short="% of states"),
    _p("fwk", "float", 24.7, "Fragmentation: % of the working set", "overheads", lo=0.0, hi=100.0, step=0.1,
       fields=("overheads.fragmentation_working_pct",), short="% of working set"),
    _p("ctx", "int", None, "CUDA context override (MB)", "overheads", lo=0, hi=100_000,
       fields=("overheads.cuda_context_bytes",), help="Empty: the GPU catalogue's measured value"),
    _p("nccl", "int", 500, "NCCL buffers per communicator (MB)", "overheads", lo=0, hi=100_000,
       fields=("overheads.nccl_bytes_per_group",)),
    _p("comm", "bool", True, "Include communication buffers", "overheads",
       fields=("overheads.include_comm_buffers",)),
    _p("exps", "bool", False, "expandable_segments (PYTORCH_CUDA_ALLOC_CONF)", "overheads",
       fields=("expandable_segments",),
       help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the caching allocator grows segments in place and "
            "keeps far less reserved-but-unused memory"),
    _p("cublas", "float", None, "cuBLAS workspace per thread override (MB)", "overheads", lo=0.0, hi=10_000.0,
       step=1.0, fields=("overheads.cublas_workspace_bytes",),
       help="Empty: the GPU's own (32 MiB on Hopper/Blackwell, 8.125 MiB before); training uses two threads"),
    _p("tbo", "float", 10.0, "Textbook flat overhead (%)", "overheads", lo=0.0, hi=100.0, step=1.0,
       fields=("overheads.textbook_overhead_pct",)),
    # ---- GPU and display ------------------------------------------------------------------------------------
    _p("gpu", "choice", "h100-sxm", "GPU", "gpu", fields=("gpu",)),
    # ---- time and cost (calculator/timing_inputs.py; editable constants of the time estimate) -----------------
    _p("price", "float", None, "Price per GPU-hour (USD; empty = no cost)", "time", lo=0.0, hi=1_000_000.0,
       step=0.1, fields=("price_per_gpu_hour",), short="$/GPU-hour",
       help="Cost per million tokens = price × GPUs × step time / tokens per step"),
    _p("mme", "float", 0.8, "GEMM efficiency (share of the dense peak)", "time", lo=0.01, hi=1.0, step=0.01,
       fields=("matmul_efficiency",), short="GEMM eff.",
       help="Calibrated on measured H200 training steps (validation/CALIBRATION.md, Step time)"),
    _p("nvl", "float", None, "NVLink GB/s per direction (empty = the GPU's datasheet / 2)", "time", lo=0.1,
       hi=100_000.0, step=1.0, fields=("nvlink_gbps",), short="NVLink GB/s"),
    _p("ib", "float", 50.0, "Network GB/s per GPU per direction (400 Gb/s = 50)", "time", lo=0.1, hi=100_000.0,
       step=1.0, fields=("ib_gbps",), short="Network GB/s"),
    _p("unit", "choice", "GB", "Units", "display", options=("GB", "GiB")),
    # ---- sections below the breakdown (dashboard/advice_view.py): open or closed, and the sweep's axis ---------
    _p("adv", "bool", False, "Remedies section open", "display"),
    _p("swp", "bool", False, "Sweeps section open", "display"),
    _p("tl", "bool", False, "Step timeline section open", "display"),
    _p("swx", "choice", "micro_batch", "Sweep over", "display", options=("micro_batch", "seq_len", "gpus"),
       help="micro_batch, seq_len, or gpus: data parallel with ZeRO-3 for training, tensor parallel for inference"),
)

BY_KEY: dict[str, Param] = {p.key: p for p in PARAMS}
DEFAULTS: dict[str, Any] = {p.key: p.default for p in PARAMS}
ARCH_KEYS = tuple(p.key for p in PARAMS if p.group == "arch")
DTYPE_KEYS = ("pdt", "gdt", "mdt", "odt", "adt")


# ---- option lists that come from the engine ------------------------------------------------------------------
@lru_cache(maxsize=1)
def model_ids() -> tuple[str, ...]:
    """Preset model ids (calculator.presets.list_models())."""
    from calculator.presets import list_models
    return tuple(m.id for m in list_models())


@lru_cache(maxsize=1)
def gpus() -> tuple:
    """The GPU catalogue (calculator.presets.list_gpus())."""
    from calculator.presets import list_gpus
    return tuple(list_gpus())


def options(key: str) -> tuple[str, ...]:
    """Every value a choice key accepts."""
    if key == "model":
        return model_ids() + SPECIAL_MODELS
    if key == "gpu":
        return tuple(g.id for g in gpus())
    if key == "recipe":
        from calculator.workload import RECIPES
        return tuple(RECIPES) + (CUSTOM_RECIPE,)
    if key == "opt":
        from calculator.workload import OPTIMIZERS
        return tuple(OPTIMIZERS)
    return BY_KEY[key].options


def load_preset(model_id: str):
    """calculator.presets.load_model(id) -> MappedConfig (the presets module caches what it loads)."""
    from calculator.presets import load_model
    return load_model(model_id)


def recipe_dtypes(recipe: str) -> dict[str, str]:
    """The per-tensor dtype keys a named precision recipe sets."""
    from calculator.workload import RECIPES
    prec = RECIPES[recipe][1]
    return {"pdt": prec.params, "gdt": prec.grads, "mdt": prec.master_weights or "none",
            "odt": prec.optimizer_states, "adt": prec.activations}


def arch_expresses(spec) -> bool:
    """Whether the custom-architecture fields describe `spec` exactly (false for MLA, per-layer attention
    patterns, QK-norm, …): only then can "edit as custom" keep the numbers."""
    try:
        custom, _ = build_model({"model": CUSTOM, **spec_to_arch(spec)})
    except InputProblems:
        return False
    skip = {"name", "model_type", "max_position_embeddings"}  # the custom fields have no context length
    return custom.model_dump(exclude=skip) == spec.model_dump(exclude=skip)


def spec_to_arch(spec) -> dict[str, Any]:
    """A ModelSpec as the custom-architecture keys (what "Edit as custom" copies into the fields)."""
    return {
        "h": spec.hidden_size, "layers": spec.num_hidden_layers, "heads": spec.num_attention_heads,
        "kvh": spec.num_key_value_heads or spec.num_attention_heads, "hd": spec.head_dim or 0,
        "ffn": spec.intermediate_size, "vocab": spec.vocab_size, "tie": spec.tie_word_embeddings,
        "glu": spec.gated_mlp, "fam": spec.family, "norm": spec.norm_type, "qkvb": spec.qkv_bias,
        "swa": spec.sliding_window or 0, "experts": spec.num_experts, "topk": spec.num_experts_per_tok,
        "effn": spec.moe_intermediate_size or 0, "shared": spec.num_shared_experts,
        "sffn": spec.shared_expert_intermediate_size or 0,
    }


# ---- query-string checks ---------------------------------------------------------------------------------------
def _fmt(value: str | list[str]) -> str:
    return ",".join(value) if isinstance(value, list) else value


class Unsafe(ValueError):
    """A value Streamlit 1.67's bound widget cannot even read (an int input given inf raises OverflowError in its
    deserializer): the page removes it from the URL and reruns before the widget sees it."""


def read_value(p: Param, raw: str, choices: Iterable[str] | None = None) -> tuple[Any, str]:
    """(value, note): what a URL string means for `p`, exactly as the bound widget reads it (note says how it
    was adjusted, e.g. a fraction truncated). ValueError if the widget drops it, Unsafe if it cannot read it."""
    if p.kind == "bool":
        low = raw.lower()
        if low not in ("true", "false"):
            raise ValueError("expected true or false")
        return low == "true", ""
    if p.kind == "choice":
        opts = tuple(choices) if choices is not None else options(p.key)
        if raw not in opts:
            shown = ", ".join(opts[:12]) + (" …" if len(opts) > 12 else "")
            raise ValueError(f"not one of {shown}")
        return raw, ""
    if p.kind == "text":
        return raw, ""
    if raw == "" and p.default is None:
        return None, ""
    try:
        num = float(raw)  # what Streamlit does with a number in the URL
    except ValueError:
        raise ValueError("not a number") from None
    if math.isnan(num):
        raise ValueError("not a number")
    if math.isinf(num):
        raise Unsafe("not a finite number")
    note = ""
    if p.kind == "int" and num != int(num):
        note = f"not a whole number: read as {int(num)}"  # Streamlit truncates toward zero
    if p.kind == "int":
        num = int(num)
    if (p.lo is not None and num < p.lo) or (p.hi is not None and num > p.hi):
        raise ValueError(f"outside {bound(p.lo)}–{bound(p.hi)}")
    return num, note


def parse_value(p: Param, raw: str, choices: Iterable[str] | None = None) -> Any:
    """The value a URL string means for `p` (see read_value); ValueError if the widget would not use it."""
    return read_value(p, raw, choices)[0]


@dataclass(frozen=True)
class LinkCheck:
    """What a shared link asked for: the values the widgets will take, one line per ignored or adjusted
    parameter, and the keys the page must remove from the URL itself (unknown, or unreadable by the widget)."""

    values: dict[str, Any] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    version: str | None = None
    unknown_keys: tuple[str, ...] = ()
    drop_keys: tuple[str, ...] = ()


def check_query_params(query: Mapping[str, str | list[str]],
                       choices: Callable[[str], Iterable[str]] = options) -> LinkCheck:
    """Validate a query string (st.query_params.to_dict() or a dict of lists) before the widgets read it.

    Bound widgets drop invalid values silently; this reports them so the page can say what was ignored. The lines
    are plain text (values cut to a readable length): a page shows them through dashboard.safe_text."""
    values: dict[str, Any] = {}
    ignored: list[str] = []
    unknown: list[str] = []
    drop: list[str] = []
    version = None
    for key, raw in query.items():
        if key == VERSION_KEY:
            version = _fmt(raw)
            if version != URL_FORMAT_VERSION:
                ignored.append(f"v={cut(version)}: this page reads link format v={URL_FORMAT_VERSION}; "
                               "the other parameters were read as v1")
            continue
        p = BY_KEY.get(key)
        if p is None:
            unknown.append(key)
            ignored.append(f"{cut(key, 40)}={cut(_fmt(raw))}: unknown parameter")
            continue
        if isinstance(raw, list):
            if len(raw) > 1:
                ignored.append(f"{key} given {len(raw)} times: only the last value is used")
            raw = raw[-1] if raw else ""  # as Streamlit reads a repeated single-value parameter
        try:
            values[key], note = read_value(p, raw, choices(key) if p.kind == "choice" else None)
            if note:
                ignored.append(f"{p.label} ({key}={cut(raw)}): {note}")
        except ValueError as exc:  # Unsafe too. The page removes the value from the URL before its widget reads
            drop.append(key)  # it: number inputs have no range of their own (dashboard.widgets), so it would stay
            ignored.append(f"{p.label} ({key}={cut(raw)}): {exc}; the default ({format_default(p)}) is used "
                           f"and shown{_what_to_enter(p)}")
    return LinkCheck(values, tuple(ignored), version, tuple(unknown), tuple(unknown + drop))


def bound(x: float) -> str:
    """A range end as people read it: 4,096, 100,000,000, 0.5."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def _what_to_enter(p: Param) -> str:
    if p.kind in ("int", "float") and p.lo is not None and p.hi is not None:
        return f" — enter {'a whole number' if p.kind == 'int' else 'a number'} from {bound(p.lo)} to {bound(p.hi)}"
    return ""


def format_default(p: Param) -> str:
    if p.default is None:
        return "empty"
    if isinstance(p.default, bool):
        return "true" if p.default else "false"
    return str(p.default)


def to_query(values: Mapping[str, Any]) -> dict[str, str]:
    """The query parameters that reproduce `values` (defaults left out, as the bound widgets do), plus v."""
    out: dict[str, str] = {}
    for p in PARAMS:
        if p.key not in values:
            continue
        v = values[p.key]
        if v == p.default:
            continue
        if isinstance(v, bool):
            out[p.key] = "true" if v else "false"
        elif v is None:
            out[p.key] = ""
        elif isinstance(v, float) and v.is_integer():
            out[p.key] = str(int(v)) if p.kind == "int" else f"{v:g}"
        else:
            out[p.key] = str(v)
    out[VERSION_KEY] = URL_FORMAT_VERSION
    return out


# ---- widget values -> engine inputs ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """An input the engine refused, with the URL key of the widget that causes it ("" if none is known)."""

    key: str
    message: str


class InputProblems(Exception):
    def __init__(self, problems: list[Problem]):
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems


# Engine field path (as pydantic locations and InputError.field name them) -> URL key.
FIELD_TO_KEY: dict[str, str] = {}
for _param in PARAMS:
    for _f in _param.fields:
        FIELD_TO_KEY.setdefault(_f, _param.key)
        FIELD_TO_KEY.setdefault(_f.rsplit(".", 1)[-1], _param.key)
FIELD_TO_KEY.update({"serving.attention_dp": "adp", "serving.version": "ever", "engine": "eng",
                     "precision": "recipe", "parallel.world_size": "dp", "model": "model", "spec": "model",
                     "parallel.expert_tp": "etp", "parallel.microbatches": "mb",
                     "parallel.shard_group": "zsh"})


def key_for_field(field_path: str | None, message: str = "", group_keys: Iterable[str] = ()) -> str:
    """The widget to blame for an engine error on `field_path` (or one named in the message)."""
    if field_path:
        path = str(field_path)
        for cand in (path, path.removeprefix("workload."), path.removeprefix("model."), path.rsplit(".", 1)[-1]):
            if cand in FIELD_TO_KEY:
                return FIELD_TO_KEY[cand]
    # Cross-field checks (pydantic model validators) carry no location: find the first field they name.
    best: tuple[int, int, str] | None = None  # earliest mention; the longest name there (num_experts_per_tok)
    for name, key in FIELD_TO_KEY.items():
        if len(name) < 4 and "." not in name:
            continue
        pos = message.find(name)
        if pos >= 0 and (best is None or (pos, -len(name)) < best[:2]):
            best = (pos, -len(name), key)
    if best:
        return best[2]
    group_keys = tuple(group_keys)
    return group_keys[0] if group_keys else ""


def _validation_problems(exc, prefix: str, fallback: str) -> list[Problem]:
    out = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err.get("loc", ()) if not isinstance(x, int))
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        path = f"{prefix}{loc}" if loc else ""
        key = key_for_field(path, msg, (fallback,)) if (path or msg) else fallback
        label = BY_KEY[key].label if key in BY_KEY else ""
        out.append(Problem(key, f"{label}: {msg}" if loc and label else msg))
    return out


def _none_if_zero(v):
    return None if not v else int(v)


def hub_model(model_id: str, fetched):
    """A model fetched from the Hub (calculator.hub.HubModel) -> calculator.model_source.ResolvedModel, with the
    checkpoint's own parameter count; InputProblems on `hf` if the engine cannot map its config.json."""
    from calculator.hf_config import ConfigError, spec_from_hf_config
    from calculator.model_source import ResolvedModel
    try:
        mapped = spec_from_hf_config(fetched.config, name=model_id)
    except ConfigError as exc:
        raise InputProblems([Problem("hf", f"{model_id}: {exc}")]) from None
    ck = fetched.checkpoint
    return ResolvedModel(mapped, "hub", model_id, ck.total_parameters if ck else None,
                         tuple(sorted(ck.parameters_by_dtype.items())) if ck else (), tuple(fetched.warnings))


def build_model(values: Mapping[str, Any], hub=None):
    """(ModelSpec | GenericModel, notes) for the selected model source; InputProblems if it cannot be built.
    `hub` (a ResolvedModel from hub_model) is the model when given: a Hugging Face id overrides `model`."""
    from pydantic import ValidationError

    from calculator.model import GenericModel, ModelSpec
    if hub is not None:
        return hub.spec, tuple(hub.mapped.warnings)
    v = {**DEFAULTS, **values}
    source = v["model"]
    if source == CUSTOM:
        try:
            spec = ModelSpec(
                name="custom", family=v["fam"], hidden_size=int(v["h"]), num_hidden_layers=int(v["layers"]),
                num_attention_heads=int(v["heads"]), num_key_value_heads=int(v["kvh"]),
                head_dim=_none_if_zero(v["hd"]), intermediate_size=int(v["ffn"]), vocab_size=int(v["vocab"]),
                tie_word_embeddings=bool(v["tie"]), gated_mlp=bool(v["glu"]), norm_type=v["norm"],
                qkv_bias=bool(v["qkvb"]), sliding_window=_none_if_zero(v["swa"]),
                num_experts=int(v["experts"]), num_experts_per_tok=int(v["topk"]),
                moe_intermediate_size=_none_if_zero(v["effn"]), num_shared_experts=int(v["shared"]),
                shared_expert_intermediate_size=_none_if_zero(v["sffn"]))
        except ValidationError as exc:
            raise InputProblems(_validation_problems(exc, "", "h")) from None
        return spec, ()
    if source == GENERIC:
        try:
            return GenericModel(total_params=int(v["gparams"]),
                                activation_elements_per_sample=int(v["gact"])), ()
        except ValidationError as exc:
            raise InputProblems(_validation_problems(exc, "", "gparams")) from None
    if source == CONFIG:
        from calculator.hf_config import ConfigError, parse_config_json, spec_from_hf_config
        text = (v["cfg"] or "").strip()
        if not text:
            raise InputProblems([Problem("cfg", "Paste a config.json to estimate it (Model = config).")])
        try:  # bounded in size, nesting and number magnitude before the JSON parser runs
            mapped = spec_from_hf_config(parse_config_json(text))
        except ConfigError as exc:
            raise InputProblems([Problem("cfg", str(exc))]) from None
        return mapped.spec, tuple(mapped.warnings)
    if source not in model_ids():
        raise InputProblems([Problem("model", f"unknown model preset {source!r}")])
    mapped = load_preset(source)
    return mapped.spec, tuple(getattr(mapped, "warnings", ()))


def build_workload(values: Mapping[str, Any]):
    """The engine's Workload for the widget values; InputProblems (naming the widgets) if pydantic refuses."""
    from pydantic import ValidationError

    from calculator.workload import RECIPES, Overheads, Parallelism, Precision, RLConfig, ServingConfig, Workload
    v = {**DEFAULTS, **values}
    problems: list[Problem] = []

    def attempt(build, prefix, fallback):
        try:
            return build()
        except ValidationError as exc:
            problems.extend(_validation_problems(exc, prefix, fallback))
            return None

    if v["recipe"] == CUSTOM_RECIPE:
        precision = attempt(lambda: Precision(
            params=v["pdt"], grads=v["gdt"], master_weights=None if v["mdt"] == "none" else v["mdt"],
            optimizer_states=v["odt"], activations=v["adt"]), "precision.", "recipe")
    elif v["recipe"] in RECIPES:
        precision = RECIPES[v["recipe"]][1]
    else:
        precision = None
        problems.append(Problem("recipe", f"unknown precision recipe {v['recipe']!r}"))
    parallel = attempt(lambda: Parallelism(
        tp=int(v["tp"]), pp=int(v["pp"]), dp=int(v["dp"]), cp=int(v["cp"]), ep=int(v["ep"]),
        etp=_none_if_zero(v["etp"]), sequence_parallel=bool(v["sp"]), zero=int(v["zero"]),
        zero_shard_size=_none_if_zero(v["zsh"]), distributed_optimizer=bool(v["dopt"]),
        offload_optimizer=bool(v["offo"]), offload_params=bool(v["offp"]),
        schedule=v["sched"], virtual_stages=int(v["vpp"]), num_microbatches=_none_if_zero(v["mb"]),
        pp_first_stage_layers=_none_if_zero(v["ppf"]), pp_last_stage_layers=_none_if_zero(v["ppl"])),
        "parallel.", "tp")
    overheads = attempt(lambda: Overheads(
        cuda_context_bytes=None if v["ctx"] is None else int(v["ctx"]) * MB,
        fragmentation_pct=None if v["frag"] is None else float(v["frag"]),
        fragmentation_states_pct=float(v["fst"]), fragmentation_working_pct=float(v["fwk"]),
        nccl_bytes_per_group=int(v["nccl"]) * MB,
        include_comm_buffers=bool(v["comm"]), textbook_overhead_pct=float(v["tbo"]),
        cublas_workspace_bytes=None if v["cublas"] is None else int(float(v["cublas"]) * MB)), "overheads.", "frag")
    serving = attempt(lambda: ServingConfig(
        memory_fraction=None if v["mfr"] is None else float(v["mfr"]), max_model_len=_none_if_zero(v["mml"]),
        max_num_batched_tokens=_none_if_zero(v["mbt"]), max_num_seqs=_none_if_zero(v["mns"]),
        block_size=_none_if_zero(v["bsz"]), prefix_caching=bool(v["pfx"]), cuda_graphs=bool(v["cg"]),
        attention_dp=int(v["adp"]), version=None if v["ever"] == AUTO else v["ever"]), "serving.", "eng")
    rl = attempt(lambda: RLConfig(
        rollout_batch_size=int(v["rlb"]), samples_per_prompt=int(v["rln"]), prompt_len=int(v["rlp"]),
        response_len=int(v["rlr"]), rollout_engine=v["rle"], rollout_tp=int(v["rltp"]), colocate=bool(v["rlc"]),
        rollout_gpus=_none_if_zero(v["rlg"]), memory_fraction=None if v["rlf"] is None else float(v["rlf"]),
        offload_train=bool(v["rlo"]), engine_sleep=bool(v["rls"]), reference_model=bool(v["rlref"]),
        critic=bool(v["rlcr"]), reward_model=bool(v["rlrm"]), offload_aux=bool(v["rlx"])), "rl.", "rlb")
    if problems:
        raise InputProblems(problems)
    workload = attempt(lambda: Workload(
        mode=v["mode"], finetune=v["ft"], lora_rank=int(v["lr"]), lora_targets=v["lt"],
        lora_adapter_dtype=v["lad"], kbit_prep=bool(v["kbit"]), qlora_keeps_inputs=bool(v["qkin"]),
        padded_batch=bool(v["pad"]),
        micro_batch=int(v["mbs"]), seq_len=int(v["seq"]), gen_tokens=int(v["gen"]),
        precision=precision, optimizer=v["opt"], optimizer_impl=v["oimpl"], recompute=v["rc"],
        attention=v["attn"], impl=v["impl"], activation_model=v["act"], kv_dtype=v["kvdt"],
        weight_dtype=None if v["wdt"] == AUTO else v["wdt"], quant_group_size=int(v["qgs"]), quant_method=v["qm"],
        parallel=parallel, overheads=overheads, gpu=v["gpu"] or None,
        stack=None if v["stack"] == AUTO else v["stack"], zero_grad_set_to_none=v["zg"] == "none",
        ddp_bucket_view=bool(v["bview"]), ddp_rebuild_peak=bool(v["drp"]), ds_auto_buckets=bool(v["dsa"]),
        expandable_segments=bool(v["exps"]),
        engine=v["eng"], serving=serving, rl=rl,
        expert_weight_dtype=None if v["ewdt"] == AUTO else v["ewdt"]), "", "mode")
    if problems:
        raise InputProblems(problems)
    return workload


@dataclass(frozen=True)
class Result:
    model: Any
    workload: Any
    estimate: Any
    notes: tuple[str, ...] = ()


def timing_inputs(values: Mapping[str, Any]):
    """The time estimate's editable constants from the page's inputs (InputProblems naming the key if refused)."""
    from pydantic import ValidationError

    from calculator.timing_inputs import TimingInputs
    try:
        return TimingInputs(price_per_gpu_hour=None if values["price"] is None else float(values["price"]),
                            matmul_efficiency=float(values["mme"]),
                            nvlink_gbps=None if values["nvl"] is None else float(values["nvl"]),
                            ib_gbps=float(values["ib"]))
    except ValidationError as exc:
        raise InputProblems(_validation_problems(exc, "", "price")) from None


def compute(values: Mapping[str, Any], hub=None) -> Result:
    """Build the inputs and run the engine; InputProblems for anything the engine refuses (never a number).
    `hub`: the model fetched for the `hf` key (hub_model), which then replaces the `model` key's source."""
    from calculator import estimate
    from calculator.errors import InputError
    problems: list[Problem] = []
    model = workload = None
    notes: tuple[str, ...] = ()
    try:
        model, notes = build_model(values, hub)
    except InputProblems as exc:
        problems.extend(exc.problems)
    try:
        workload = build_workload(values)
    except InputProblems as exc:
        problems.extend(exc.problems)
    if problems:
        raise InputProblems(problems)
    try:
        est = estimate(model, workload)
    except InputError as exc:
        key = key_for_field(exc.field, exc.message)
        raise InputProblems([Problem("hf" if hub is not None and key == "model" else key, exc.message)]) from None
    return Result(model, workload, est, notes)


def current_values(session: Mapping[str, Any], link_values: Mapping[str, Any]) -> dict[str, Any]:
    """Every input's value before the widgets are drawn: the widget state when it exists, else what the link
    asked for, else the default (what each bound widget will itself resolve to on this run)."""
    return {p.key: session[p.key] if p.key in session else link_values.get(p.key, p.default) for p in PARAMS}


def reset_values(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults for every input (the display unit excepted) with `overrides` applied: what a scenario sets."""
    out = {p.key: p.default for p in PARAMS if p.group != "display"}
    out.update(overrides)
    return out
