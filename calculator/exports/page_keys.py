"""The calculator page's URL format (docs/url-format.md: keys never renamed, defaults frozen for v=1 and left out of
a link, MB = 10^6 B, the engine's ids as values): every key's input kind, default, label and values. The dashboard
draws its inputs from it; the CLI and remedies write links in it (page_link.py). No streamlit; lazy engine imports."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

URL_FORMAT_VERSION = "1"
VERSION_KEY = "v"

# Model sources that are not presets (they share the `model` key with the preset ids).
CUSTOM, CONFIG, GENERIC = "custom", "config", "generic"
SPECIAL_MODELS = (CUSTOM, CONFIG, GENERIC)
CUSTOM_RECIPE = "custom"
AUTO = "auto"  # inference weight dtype: same as the params dtype

DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "nf4", "fp4", "nvfp4")
ACT_DTYPES = ("fp32", "bf16", "fp16")
KV_DTYPES = ("auto", "fp32", "bf16", "fp16", "fp8", "int8", "int4")  # auto: the runtime's pick
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


_p = Param  # _p(key, kind, default, label, group, ...)
# Order = sidebar order (groups: model, mode, precision, optimizer, recompute, parallel, ...); all public URL format.
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
    _p("qkin", "bool", False, "bitsandbytes < 0.43 (4-bit linears keep inputs)", "mode", fields=("qlora_keeps_inputs",),
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
    _p("fp8", "choice", "none", "FP8 training recipe (Megatron-Core + TE)", "recompute",
       options=("none", "delayed", "current", "blockwise", "mxfp8", "nvfp4"), fields=("fp8",),
       help="Transformer Engine's FP8 / FP4 recipe with stack megatron and impl megatron-te: weight copies cached "
            "per step, GEMM inputs saved quantized; mxfp8 / nvfp4 need a Blackwell GPU"),
    _p("f8pg", "bool", False, "FP8 parameters (--fp8-param-gather)", "recompute", fields=("fp8_param_gather",),
       help="Megatron-Core: TE linear weights stored in FP8 instead of bf16 (needs an fp8 recipe)"),
    _p("cef", "choice", "none", "Cross-entropy fusion (Megatron)", "recompute", options=("none", "te", "native"),
       fields=("cross_entropy_fusion",),
       help="Megatron --cross-entropy-loss-fusion: te keeps the bf16 logits only; native keeps a second fp32 buffer"),
    _p("gaf", "bool", True, "Gradient-accumulation fusion (Megatron)", "recompute",
       fields=("gradient_accumulation_fusion",),
       help="on (Megatron's default): TE writes weight gradients into main_grad and caches a dummy wgrad per shape"),
    _p("vdiv", "int", 128, "Vocabulary padded to a multiple of (× TP)", "recompute", lo=1, hi=1_000_000,
       fields=("make_vocab_size_divisible_by",), help="Megatron --make-vocab-size-divisible-by"),
    _p("mtp", "int", 0, "MTP layers trained (Megatron)", "recompute", lo=0, hi=64, fields=("mtp_layers",),
       help="--mtp-num-layers: each adds a decoder layer, its norms and projection, and a second loss"),
    _p("impl", "choice", "hf", "Model implementation", "recompute",
       options=("hf", "liger", "compile", "megatron-te"), fields=("impl",),
       help="The code that runs the model: transformers (hf), transformers + Liger kernels, decoder blocks "
            "compiled with torch.compile, Megatron-Core + Transformer Engine — it decides what layers and loss keep"),
    _p("mk", "choice", "fused", "Linear-attention / SSM kernels", "recompute", options=("fused", "torch"),
       fields=("mixer_kernels",),
       help="Hybrid models' Gated DeltaNet, Mamba, KDA and short-convolution layers: fused = the GPU kernels "
            "transformers calls when installed (flash-linear-attention, mamba-ssm, causal-conv1d); torch = its "
            "PyTorch fallback, which saves several times more for backward"),
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
    _p("cpc", "choice", "p2p", "Context-parallel communication", "parallel",
       options=("p2p", "a2a", "allgather", "a2a+p2p"), fields=("cp_comm_type",), help="Megatron --cp-comm-type"),
    _p("moed", "choice", "alltoall", "MoE token dispatcher", "parallel", options=("alltoall", "allgather", "flex"),
       fields=("moe_dispatcher",), help="Megatron --moe-token-dispatcher-type (flex: DeepEP / HybridEP)"),
    _p("moecf", "float", 0.0, "MoE capacity factor (0 = dropless)", "parallel", lo=0, hi=1024,
       fields=("moe_capacity_factor",), help="--moe-expert-capacity-factor: at most ceil(T·k/E × factor) rows"),
    _p("moepad", "bool", False, "MoE: pad experts to capacity", "parallel", fields=("moe_pad_to_capacity",)),
    _p("moer32", "bool", False, "MoE router in fp32", "parallel", fields=("moe_router_fp32",)),
    _p("moegg", "bool", True, "MoE grouped GEMM (Megatron)", "parallel", fields=("moe_grouped_gemm",),
       help="--moe-grouped-gemm: TE GroupedLinear experts, with 4 more TE cuBLAS workspaces"),
    _p("moeimb", "float", 1.0, "MoE routing imbalance (max / mean)", "parallel", lo=1, hi=1024,
       fields=("moe_imbalance",), help="tokens of the most loaded expert over the mean; 1 = balanced"),
    _p("det", "bool", False, "Deterministic mode (Megatron)", "parallel", fields=("deterministic",),
       help="--deterministic-mode (torch.use_deterministic_algorithms): the MoE unpermute keeps the expert rows"),
    _p("tpo", "bool", False, "TP comm overlap (Megatron userbuffers)", "parallel", fields=("tp_comm_overlap",),
       help="--tp-comm-overlap (TP > 1 with SP): TE userbuffers' own cuBLAS workspace of 3 × 32 MiB"),
    _p("pao", "bool", False, "Precision-aware optimizer (Megatron)", "parallel", fields=("precision_aware_optimizer",),
       help="--use-precision-aware-optimizer: TE FusedAdam keeps master weights (bf16: fp32's low 16 bits), moments"),
    _p("rcm", "text", "", "Recompute modules (Megatron, selective)", "recompute", fields=("recompute_modules",),
       help="--recompute-modules, comma-separated: core_attn, moe_act, mlp, moe, shared_experts, mla_up_proj, "
            "layernorm; empty = core_attn"),
    _p("ofm", "text", "", "Offloaded modules (Megatron)", "recompute", fields=("offload_modules",),
       help="--fine-grained-activation-offloading --offload-modules, comma-separated: attn_norm, qkv_linear, "
            "core_attn, attn_proj, mlp_norm, expert_fc1, moe_act; empty = off"),
    _p("oofr", "float", 1.0, "Optimizer offload fraction (Megatron)", "parallel", lo=0.0, hi=1.0, step=0.05,
       fields=("optimizer_offload_fraction",), help="--optimizer-offload-fraction with the optimizer offloaded"),
    _p("gbf16", "bool", False, "Gradients reduced in bf16 (Megatron)", "parallel", fields=("grad_reduce_in_bf16",),
       help="--grad-reduce-in-bf16 / --main-grads-dtype bf16: a bf16 gradient buffer instead of fp32"),
    _p("mfsdp", "choice", "none", "Megatron-FSDP sharding strategy", "parallel", fields=("megatron_fsdp",),
       options=("none", "no_shard", "optim", "optim_grads", "optim_grads_params"), help="--use-megatron-fsdp"),
    _p("dsa", "bool", False, "DeepSpeed: \"auto\" buckets (HF)", "parallel", fields=("ds_auto_buckets",),
       help="DeepSpeed only: a ds_config.json with \"auto\" bucket sizes, as HF Trainer / accelerate fill them "
            "(reduce_bucket_size = h², stage-3 prefetch = 0.9·h²); off: DeepSpeed's defaults (5e8 / 5e7 elements)"),
    _p("zero", "choice", "0", "ZeRO / FSDP stage", "parallel", options=("0", "1", "2", "3"),
       fields=("parallel.zero",), help="1 shards optimizer states, 2 also gradients, 3 also parameters"),
    _p("zsh", "int", 0, "ZeRO shard group (0 = DP × CP)", "parallel", lo=0, hi=1_000_000,
       fields=("parallel.zero_shard_size",), help="FSDP hybrid shard / HSDP group size"),
    _p("dopt", "bool", False, "Megatron distributed optimizer", "parallel", fields=("parallel.distributed_optimizer",)),
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
    _p("ppe", "bool", False, "Embedding counts as a layer in the split", "parallel",
       fields=("parallel.pp_embedding_in_split",), short="Embedding in split",
       help="Megatron's --account-for-embedding-in-pipeline-split: the first (virtual) stage holds one layer fewer"),
    _p("pplo", "bool", False, "Loss counts as a layer in the split", "parallel",
       fields=("parallel.pp_loss_in_split",), short="Loss in split",
       help="Megatron's --account-for-loss-in-pipeline-split: the last (virtual) stage holds one layer fewer"),
    _p("ppo", "text", "", "Pipeline layout (Megatron)", "parallel", fields=("parallel.pp_layout",),
       short="Pipeline layout",
       help="Megatron's --pipeline-model-parallel-layout, e.g. Et*4|(t*4|)*14tL: the layers of every (virtual) "
            "stage, E embedding, t decoder layer, m MTP layer, L loss"),
    _p("ppov", "bool", False, "Overlap pipeline sends (interleaved)", "parallel",
       fields=("parallel.pp_overlap_p2p",), short="P2P overlap",
       help="Megatron's overlap_p2p_comm: the interleaved schedule's sends / receives run under the chunks' compute"),
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
    _p("kvdt", "choice", "auto", "KV cache dtype", "batch", options=KV_DTYPES, fields=("kv_dtype",), short="KV dtype"),
    _p("wdt", "choice", AUTO, "Inference weight dtype", "batch", options=(AUTO,) + DTYPES,
       fields=("weight_dtype",), short="Weight dtype", help="auto: params dtype, or the checkpoint's under vLLM/SGLang"),
    _p("qgs", "int", 128, "Quantization group size", "batch", lo=1, hi=1_000_000, fields=("quant_group_size",),
       short="Group size"),
    _p("qm", "choice", "awq", "Quantized checkpoint layout", "batch", options=("awq", "gptq", "llm-int8"),
       fields=("quant_method",), short="Layout",
       help="int4/int8 weights: GPTQ adds g_idx and a kernel buffer; llm-int8 = bitsandbytes load_in_8bit (int8 "
            "weights with a scale per row, the int8 matmul's buffers)"),
    _p("ewdt", "choice", AUTO, "Routed experts' weight dtype", "batch", options=(AUTO,) + DTYPES,
       fields=("expert_weight_dtype",), short="Expert dtype",
       help="auto = the inference weight dtype (vLLM / SGLang: the checkpoint's, e.g. GPT-OSS MXFP4)"),
    # ---- vision-language models (calculator/stages/vision.py) ----------------------------------------------
    _p("img", "int", 0, "Images per sequence", "vision", lo=0, hi=4096, fields=("images_per_sample",),
       help="Vision-language models: each image's tokens join the sequence; the tower's activations are their own "
            "terms"),
    _p("imgpx", "int", 0, "Image side in pixels (0 = the family's)", "vision", lo=0, hi=65536,
       fields=("image_size",), help="Each image a square of this many pixels, resized as the model's processor does"),
    _p("vt", "choice", "frozen", "Vision tower", "vision", options=("frozen", "trained"), fields=("vision_tower",),
       help="frozen: the tower and projector only run forward; trained: they get gradients (or adapters)"),
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
    _p("lmo", "bool", False, "Language model only", "serving", fields=("serving.language_model_only",),
       help="--language-model-only: a vision-language model's tower is not loaded (both engines load it)"),
    # ---- RL post-training (calculator/stages/rl.py) ------------------------------------------------------------------
    _p("rlb", "int", 32, "Rollout batch size (prompts)", "rl", lo=1, hi=1_000_000,
       fields=("rl.rollout_batch_size", "rl"), short="Rollout batch"),
    _p("rln", "int", 8, "Samples per prompt", "rl", lo=1, hi=100_000, fields=("rl.samples_per_prompt",),
       short="Samples/prompt"),
    _p("rlp", "int", 1024, "Prompt length", "rl", lo=0, hi=10_000_000, fields=("rl.prompt_len",), short="Prompt"),
    _p("rlr", "int", 8192, "Response length", "rl", lo=1, hi=10_000_000, fields=("rl.response_len",), short="Response"),
    _p("rle", "choice", "sglang", "Rollout engine", "rl", options=("sglang", "vllm"), fields=("rl.rollout_engine",),
       short="Engine"),
    _p("rltp", "int", 1, "GPUs per rollout engine", "rl", lo=1, hi=4096, fields=("rl.rollout_tp",), short="Engine TP"),
    _p("rlf", "float", None, "Rollout memory fraction (empty = engine default)", "rl", lo=0.01, hi=1.0, step=0.01,
       fields=("rl.memory_fraction",)),
    _p("rlg", "int", 0, "Rollout GPUs when apart (0 = as many)", "rl", lo=0, hi=1_000_000, fields=("rl.rollout_gpus",)),
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
    _p("comm", "bool", True, "Include communication buffers", "overheads", fields=("overheads.include_comm_buffers",)),
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
    # ---- time and cost (calculator/timing/inputs.py; editable constants of the time estimate) -----------------
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
    # ---- sections below the breakdown (dashboard/views/sections.py): open or closed, and the sweep's axis ---------
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
    """Preset model ids (calculator.model.presets.list_models())."""
    from calculator.model.presets import list_models
    return tuple(m.id for m in list_models())


@lru_cache(maxsize=1)
def gpus() -> tuple:
    """The GPU catalogue (calculator.model.presets.list_gpus())."""
    from calculator.model.presets import list_gpus
    return tuple(list_gpus())


def options(key: str) -> tuple[str, ...]:
    """Every value a choice key accepts."""
    if key in ("model", "gpu"):
        return model_ids() + SPECIAL_MODELS if key == "model" else tuple(g.id for g in gpus())
    if key in ("recipe", "opt"):
        from calculator.core.workload import OPTIMIZERS, RECIPES
        return tuple(RECIPES) + (CUSTOM_RECIPE,) if key == "recipe" else tuple(OPTIMIZERS)
    return BY_KEY[key].options
