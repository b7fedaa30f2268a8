"""What is being run: training or inference, batch and sequence, precisions, optimizer, recompute, attention
kernel, parallelism and the overhead allowances. Pydantic models, validated on construction; a parallel degree
that does not divide the model is rejected by `calculator.memory.parallel.check_divisibility` with a message naming
the field.
"""
from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from calculator.core import bounds as B
from calculator.core.hash_once import HashedOnce
from calculator.core.dtypes import Dtype

Mode = Literal["train", "infer", "rl"]
Engine = Literal["hf", "vllm", "sglang"]  # hf: transformers generate(); vllm / sglang: calculator/engines/
Optimizer = Literal["adamw", "adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion", "none"]
Recompute = Literal["none", "selective", "full", "op"]
# Megatron-Core's --recompute-modules under --recompute-granularity selective (transformer_config.py)
RecomputeModule = Literal["core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe", "shared_experts"]
OffloadModule = Literal["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1",
                        "moe_act"]
# flash: FlashAttention-2 (transformers flash_attention_2: no mask, unpads a padded batch); sdpa: PyTorch SDPA as
# transformers calls it on CUDA (its flash kernel, or with a mask the efficient kernel: calculator/memory/sdpa.py); eager
Attention = Literal["flash", "eager", "sdpa"]
ActivationModel = Literal["exact", "textbook", "fujii"]
Finetune = Literal["full", "lora", "qlora"]
LoraTargets = Literal["qv", "attention", "all-linear"]
Schedule = Literal["1f1b", "interleaved"]
OptimizerImpl = Literal["foreach", "for-loop", "fused"]
Stack = Literal["hf-trainer", "ddp", "fsdp2", "deepspeed", "megatron"]
Impl = Literal["hf", "liger", "compile", "megatron-te"]  # model implementation (calculator.impls)

OPTIMIZERS: dict[str, str] = {
    "adamw": "AdamW (m and v)",
    "adamw-8bit": "AdamW 8-bit (bitsandbytes, blockwise)",
    "sgd": "SGD (no state)",
    "sgd-momentum": "SGD with momentum",
    "adafactor": "Adafactor (factored second moment)",
    "lion": "Lion (momentum only)",
    "none": "No optimizer (forward + backward only)",
}


class Precision(HashedOnce):
    """The dtype of each tensor family. `master_weights=None` means no separate fp32 copy of the weights."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    params: Dtype = "bf16"
    grads: Dtype = "bf16"
    master_weights: Dtype | None = "fp32"
    optimizer_states: Dtype = "fp32"
    activations: Literal["fp32", "bf16", "fp16"] = "bf16"


# The precision recipes people actually run, by name (see calculator.core.sources for each one's reference).
RECIPES: dict[str, tuple[str, Precision]] = {
    "mixed-bf16": ("DeepSpeed / FSDP mixed precision: bf16 params and grads, fp32 master + optimizer (16 B/param)",
                   Precision(params="bf16", grads="bf16", master_weights="fp32", optimizer_states="fp32")),
    "megatron": ("Megatron-LM mixed precision: bf16 params, fp32 main grads, fp32 master + Adam (18 B/param)",
                 Precision(params="bf16", grads="fp32", master_weights="fp32", optimizer_states="fp32")),
    "amp-fp32": ("PyTorch AMP: fp32 params, grads and optimizer, bf16 autocast activations (16 B/param)",
                 Precision(params="fp32", grads="fp32", master_weights=None, optimizer_states="fp32",
                           activations="bf16")),
    "pure-bf16": ("Pure bf16 (torchtune / litgpt): bf16 params, grads and optimizer state, no master (8 B/param)",
                  Precision(params="bf16", grads="bf16", master_weights=None, optimizer_states="bf16")),
    "fp32": ("Full fp32: params, grads, optimizer and activations in fp32 (16 B/param)",
             Precision(params="fp32", grads="fp32", master_weights=None, optimizer_states="fp32",
                       activations="fp32")),
}


class Parallelism(HashedOnce):
    """Parallel degrees and sharding. The world size is tp·pp·dp·cp (EP lives inside dp·cp·tp, as in Megatron)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(default=1, ge=1, le=B.MAX_DEGREE, strict=True)
    pp: int = Field(default=1, ge=1, le=B.MAX_PIPELINE_STAGES, strict=True)
    dp: int = Field(default=1, ge=1, le=B.MAX_DEGREE, strict=True)
    cp: int = Field(default=1, ge=1, le=B.MAX_DEGREE, strict=True)
    ep: int = Field(default=1, ge=1, le=B.MAX_DEGREE, strict=True)
    etp: int | None = Field(default=None, ge=1, le=B.MAX_DEGREE, strict=True)  # expert tensor parallel (defaults to tp)
    sequence_parallel: bool = False
    zero: int = Field(default=0, ge=0, le=3, strict=True)  # ZeRO stage / FSDP: 1 optimizer, 2 + grads, 3 + params
    # FSDP hybrid shard / HSDP group (defaults to dp·cp)
    zero_shard_size: int | None = Field(default=None, ge=1, le=B.MAX_DEGREE ** 2, strict=True)
    distributed_optimizer: bool = False  # Megatron's: shards fp32 master + optimizer over dp·cp
    # ZeRO-Offload / FSDP CPUOffload: master weights and optimizer state (and the step) on the CPU; with ZeRO-3
    # the parameters too (ZeRO-Infinity), gathered to the GPU one unit at a time.
    offload_optimizer: bool = False
    offload_params: bool = False
    schedule: Schedule = "1f1b"
    virtual_stages: int = Field(default=1, ge=1, le=B.MAX_DEGREE, strict=True)  # interleaved 1F1B chunks per rank
    # Uneven pipeline stages: decoder layers of the first / last stage (None: an even split); the other stages
    # share the rest evenly. Megatron-LM --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers
    # (TransformerConfig.num_layers_in_first/last_pipeline_stage); torchtitan's first/last_stage_less_layers.
    pp_first_stage_layers: int | None = Field(default=None, ge=1, le=B.MAX_DEGREE, strict=True)
    pp_last_stage_layers: int | None = Field(default=None, ge=1, le=B.MAX_DEGREE, strict=True)
    # The embedding / the loss counted as one layer each in the even split (Megatron-Core
    # account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split): rank 0's first chunk and the
    # last rank's last chunk hold one decoder layer fewer. calculator/memory/pipeline_split.py
    pp_embedding_in_split: bool = False
    pp_loss_in_split: bool = False
    # Megatron-Core --pipeline-model-parallel-layout, e.g. "Et*4|(t*4|)*14tmL": the layers of every (virtual) stage
    pp_layout: str | None = Field(default=None, min_length=1, max_length=4096)
    # Megatron-Core overlap_p2p_comm (Megatron-LM --no-overlap-p2p-communication turns it off; Megatron-Bridge and
    # NeMo set it for VP > 1): the interleaved schedule's sends / receives run under the chunks' compute
    # (calculator/timing/pipeline_bubble.py). No effect with 1F1B, where Megatron turns it off.
    pp_overlap_p2p: bool = False
    # per step (gradient accumulation); default pp
    num_microbatches: int | None = Field(default=None, ge=1, le=B.MAX_MICROBATCHES, strict=True)

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def shard_group(self) -> int:
        """Ranks a ZeRO/FSDP shard is spread over."""
        return self.zero_shard_size or self.dp * self.cp

    @property
    def microbatches(self) -> int:
        return self.num_microbatches or self.pp


class Overheads(HashedOnce):
    """Memory outside the tensors the model code allocates. Each is an explicit, editable line item."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # None: the GPU catalogue's value for the chosen GPU
    cuda_context_bytes: int | None = Field(default=None, ge=0, le=B.MAX_OVERHEAD_BYTES, strict=True)
    # Caching-allocator slack (reserved − allocated). None: the calibrated two-part model below; a number: a flat
    # percentage of the peak allocated.
    fragmentation_pct: float | None = Field(default=None, ge=0, le=100, allow_inf_nan=False)
    # of long-lived states (validation/CALIBRATION.md)
    fragmentation_states_pct: float = Field(default=2.6, ge=0, le=100, allow_inf_nan=False)
    # of the short-lived working set
    fragmentation_working_pct: float = Field(default=24.7, ge=0, le=100, allow_inf_nan=False)
    # per communicator of size > 1 (Fujii et al.)
    nccl_bytes_per_group: int = Field(default=500_000_000, ge=0, le=B.MAX_OVERHEAD_BYTES, strict=True)
    include_comm_buffers: bool = True
    # cuBLAS workspace per thread that runs matmuls (None: the GPU's own, presets/gpus.json; 0 for a CPU trace)
    cublas_workspace_bytes: int | None = Field(default=None, ge=0, le=B.MAX_OVERHEAD_BYTES, strict=True)
    # flat % used by the textbook model only
    textbook_overhead_pct: float = Field(default=10.0, ge=0, le=100, allow_inf_nan=False)


class ServingConfig(HashedOnce):
    """A serving engine's own settings (vLLM / SGLang); None means the engine's default for the device, as the
    engine itself resolves it (see calculator/engines/vllm.py and sglang.py for each rule and its source)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # vLLM gpu_memory_utilization (0.9) / SGLang mem_fraction_static (its rule by GPU memory and TP)
    memory_fraction: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    # None: the model's length as the engine derives it (engines.common: max_position_embeddings, model_max_length,
    # RoPE scaling); a longer one is refused, as the engines refuse it
    max_model_len: int | None = Field(default=None, gt=0, le=B.MAX_TOKENS, strict=True)
    # SGLang: chunked_prefill_size
    max_num_batched_tokens: int | None = Field(default=None, gt=0, le=B.MAX_TOKENS, strict=True)
    # SGLang: max_running_requests / CUDA-graph max bs
    max_num_seqs: int | None = Field(default=None, gt=0, le=B.MAX_BATCH, strict=True)
    # vLLM 16 tokens per block; SGLang page_size 1
    block_size: int | None = Field(default=None, gt=0, le=B.MAX_TOKENS, strict=True)
    prefix_caching: bool = True
    cuda_graphs: bool = True
    # vLLM / SGLang --language-model-only (vLLM also: --limit-mm-per-prompt 0 for every modality): a vision-language
    # model's tower is not loaded; by default both engines load it (calculator/engines/towers.py)
    language_model_only: bool = False
    # SGLang --enable-dp-attention --dp-size: attention TP = tp / this
    attention_dp: int = Field(default=1, ge=1, le=B.MAX_DEGREE, strict=True)
    # engine release whose rules apply (None: the newest modelled)
    version: str | None = Field(default=None, max_length=40)
    # Hybrid models' per-sequence state (Mamba, Gated DeltaNet, KDA, short conv, lightning layers;
    # calculator/engines/states.py). The conv state: vLLM --mamba-cache-dtype ("auto": the model dtype), SGLang
    # SGLANG_MAMBA_CONV_DTYPE ("auto": bf16). The SSM / recurrent state: vLLM --mamba-ssm-cache-dtype ("auto": the
    # model's rule, else the conv dtype), SGLang --mamba-ssm-dtype ("auto": the config's mamba_ssm_dtype, else fp32)
    mamba_cache_dtype: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    mamba_ssm_cache_dtype: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    # SGLang --mamba-full-memory-ratio (None: 0.9), state pool : token pool
    mamba_full_memory_ratio: float | None = Field(default=None, gt=0, le=1000, allow_inf_nan=False)
    # SGLang --max-mamba-cache-size: state slots (None: by mamba_full_memory_ratio)
    max_mamba_cache_size: int | None = Field(default=None, gt=0, le=B.MAX_BATCH, strict=True)
    # SGLang --mamba-radix-cache-strategy: state slots a request holds with the radix cache ("auto": extra_buffer for
    # Qwen3-Next / Qwen3.5 / Kimi-Linear / Nemotron-H / Falcon-H1 / GraniteMoeHybrid, else no_buffer)
    mamba_radix_cache_strategy: Literal["auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"] = "auto"
    # vLLM's Gated DeltaNet prefill kernel ("auto": FlashInfer on Hopper, Triton elsewhere): with prefix caching,
    # FlashInfer aligns the hybrid block to 64 tokens and holds one more state block per request
    gdn_prefill_backend: Literal["auto", "flashinfer", "triton"] = "auto"


class RLConfig(HashedOnce):
    """RL post-training (GRPO / PPO): a trainer and a rollout engine, colocated on the same GPUs or apart.
    The trainer is the rest of the Workload (precision, optimizer, parallel, recompute, micro-batch); one
    training sample is prompt_len + response_len tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rollout_batch_size: int = Field(default=32, gt=0, le=B.MAX_BATCH, strict=True)  # prompts per rollout step
    # responses sampled per prompt (GRPO group size)
    samples_per_prompt: int = Field(default=8, gt=0, le=B.MAX_BATCH, strict=True)
    prompt_len: int = Field(default=1024, ge=0, le=B.MAX_TOKENS, strict=True)
    response_len: int = Field(default=8192, gt=0, le=B.MAX_TOKENS, strict=True)
    rollout_engine: Literal["sglang", "vllm"] = "sglang"
    rollout_tp: int = Field(default=1, ge=1, le=B.MAX_DEGREE, strict=True)  # GPUs per rollout engine
    colocate: bool = True  # rollout engines on the trainer's GPUs (slime --colocate, verl hybrid engine)
    # apart: GPUs of the rollout engines (None: as many)
    rollout_gpus: int | None = Field(default=None, ge=1, le=B.MAX_DEGREE, strict=True)
    # the engine's fraction (None: its default)
    memory_fraction: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    offload_train: bool = True  # trainer weights, grads, optimizer leave the GPU during rollout
    engine_sleep: bool = True  # the engine frees its weights and KV pool during training
    reference_model: bool = False  # a frozen reference policy for the KL term
    critic: bool = False  # PPO value model, trained like the actor
    reward_model: bool = False  # a model scoring the responses (forward only)
    offload_aux: bool = True  # reference / reward weights leave the GPU when not in use


class Workload(HashedOnce):
    """Everything about how the model is run, apart from the model itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = "train"
    micro_batch: int = Field(default=1, gt=0, le=B.MAX_BATCH, strict=True)
    # training sequence, or the prompt length for inference
    seq_len: int = Field(default=4096, gt=0, le=B.MAX_TOKENS, strict=True)
    # inference: tokens generated after the prompt
    gen_tokens: int = Field(default=0, ge=0, le=B.MAX_TOKENS, strict=True)
    precision: Precision = Precision()
    optimizer: Optimizer = "adamw"
    # Fused kernels (Megatron/DeepSpeed FusedAdam, HF Trainer's adamw_torch_fused) keep no temporaries; PyTorch's
    # foreach path allocates a full-size sqrt(v) list; the for-loop path one tensor's worth.
    optimizer_impl: OptimizerImpl = "fused"
    recompute: Recompute = "none"
    attention: Attention = "flash"
    activation_model: ActivationModel = "exact"
    # The code that runs the model, where it changes what the layers and the loss keep (calculator.impls):
    # transformers eager, + Liger kernels, compiled decoder blocks, Megatron-Core + Transformer Engine.
    impl: Impl = "hf"
    # Token mixers other than softmax attention (Gated DeltaNet, Mamba, short convolutions, KDA): "fused" is the GPU
    # kernels transformers calls when installed (flash-linear-attention, mamba-ssm, causal-conv1d), "torch" its
    # PyTorch fallback (what runs without them), which saves several times more for backward
    mixer_kernels: Literal["fused", "torch"] = "fused"
    # "auto": what the runtime picks (memory.inference.kv_cache_dtype): the checkpoint's FP8 KV scheme under vLLM /
    # SGLang, else bf16
    kv_dtype: Literal["auto", "fp32", "bf16", "fp16", "fp8", "int8", "int4"] = "auto"
    weight_dtype: Dtype | None = None  # inference weights (None: precision.params); int4/nf4 add group scales
    # elements per scale for 4/8-bit integer weights
    quant_group_size: int = Field(default=128, gt=0, le=B.MAX_GROUP_SIZE, strict=True)
    # int4/int8 checkpoint layout: GPTQ adds g_idx and a kernel buffer; llm-int8 is bitsandbytes' load_in_8bit
    # (an fp32 scale per output row, the int8 matmul's int32/fp16 buffers)
    quant_method: Literal["awq", "gptq", "llm-int8"] = "awq"
    parallel: Parallelism = Parallelism()
    overheads: Overheads = Overheads()
    # catalogue id for the fit verdict / CUDA context, e.g. "h100-sxm"
    gpu: str | None = Field(default=None, max_length=100)
    # Parameter-efficient fine-tuning: adapters on a frozen base (QLoRA: the base in NF4).
    finetune: Finetune = "full"
    lora_rank: int = Field(default=16, gt=0, le=B.MAX_LORA_RANK, strict=True)
    lora_targets: LoraTargets = "all-linear"
    # PEFT's default (autocast_adapter_dtype=True) keeps adapters in fp32 on a bf16 base: fp32 weights and grads,
    # no separate master copy. "params": adapters in the params dtype, trained per the precision recipe.
    lora_adapter_dtype: Literal["fp32", "params"] = "fp32"
    # bitsandbytes before 0.43: MatMul4Bit saved the input of every 4-bit linear (ctx.tensors = (A, B)); since then
    # only the packed weight, so a 4-bit base keeps what a frozen bf16 linear keeps (calculator/memory/lora.py)
    qlora_keeps_inputs: bool = False
    # peft.prepare_model_for_kbit_training (the HF QLoRA recipe): every parameter that is not 4-bit is cast to fp32,
    # so the embeddings, norms and LM head are fp32 and so is the residual stream and the loss (calculator/memory/lora.py)
    kbit_prep: bool = False
    # a padded batch: an attention_mask with padding. Under SDPA transformers builds a 4-D boolean mask, repeats GQA
    # keys/values for it and SDPA runs its memory-efficient kernel with an additive bias (calculator/memory/sdpa.py)
    padded_batch: bool = False
    # The training stack (calculator/stacks/): how gradients live and which buffers exist. None: the layout's
    # usual one (calculator.stacks.default_stack: one GPU hf-trainer, DP ddp, ZeRO deepspeed, TP/PP megatron).
    stack: Stack | None = None
    # optimizer.zero_grad(set_to_none=True) (PyTorch's default, HF Trainer): gradients are freed after each step
    # and born again in the next backward; False zeroes them in place and keeps them for the whole step.
    zero_grad_set_to_none: bool = True
    ddp_bucket_view: bool = False  # DistributedDataParallel(gradient_as_bucket_view=True): grads are bucket views
    # DDP's one bucket rebuild (iteration 2) can keep the first iteration's flat bucket alive through that forward
    # and loss backward (NCCL's stash, freed by its 100 ms watchdog: timing-dependent): True counts it (worst case)
    ddp_rebuild_peak: bool = False
    # DeepSpeed config with "auto" buckets, as HF's integration fills them (transformers/integrations/deepspeed.py
    # trainer_config_finalize: reduce_bucket_size = h², stage3_prefetch_bucket_size = 0.9·h²) — the ds_config.json most
    # HF Trainer / accelerate / ms-swift / LLaMA-Factory users run; False: DeepSpeed's own defaults (5e8 / 5e7)
    ds_auto_buckets: bool = False
    # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow in place, far less reserved-but-unused memory
    expandable_segments: bool = False
    # Serving engine (inference) and RL post-training (mode "rl").
    engine: Engine = "hf"
    serving: ServingConfig = ServingConfig()
    rl: RLConfig = RLConfig()
    expert_weight_dtype: Dtype | None = None  # routed experts' inference dtype (None: weight_dtype), e.g. MXFP4
    # Vision-language models (calculator/stages/vision.py): images per sequence (0: text only), each a square of
    # image_size pixels (None: the family's size, calculator.model.vision.VisionSpec.default_image_px); their tokens
    # join the LM's sequence (seq_len counts the text). vision_tower: the tower and projector frozen, or trained
    # (full fine-tuning: every weight; LoRA / QLoRA: adapters on their linears).
    images_per_sample: int = Field(default=0, ge=0, le=4096, strict=True)
    image_size: int | None = Field(default=None, gt=0, le=1 << 16, strict=True)
    vision_tower: Literal["frozen", "trained"] = "frozen"
    # Megatron-Core + Transformer Engine training (read with stack "megatron" and impl "megatron-te"; refused
    # elsewhere when not at their defaults; calculator/memory/megatron_core.py, fp8.py, moe_dispatch.py).
    # TE's FP8 / FP4 training recipe (--fp8-recipe: delayed, tensorwise = current, blockwise, mxfp8, nvfp4)
    fp8: Literal["none", "delayed", "current", "blockwise", "mxfp8", "nvfp4"] = "none"
    fp8_param_gather: bool = False  # --fp8-param-gather: the parameters themselves are kept in FP8
    # --cross-entropy-loss-fusion with --cross-entropy-fusion-impl te / native; "none": the unfused vocab-parallel loss
    cross_entropy_fusion: Literal["none", "te", "native"] = "none"
    gradient_accumulation_fusion: bool = True  # Megatron's default; --no-gradient-accumulation-fusion turns it off
    make_vocab_size_divisible_by: int = Field(default=128, ge=1, le=B.MAX_VOCAB, strict=True)
    cp_comm_type: Literal["p2p", "a2a", "allgather", "a2a+p2p"] = "p2p"  # --cp-comm-type
    mtp_layers: int = Field(default=0, ge=0, le=64, strict=True)  # --mtp-num-layers trained (0: none)
    moe_dispatcher: Literal["alltoall", "allgather", "flex"] = "alltoall"  # --moe-token-dispatcher-type
    # --moe-expert-capacity-factor (None: dropless) and --moe-pad-expert-input-to-capacity
    moe_capacity_factor: float | None = Field(default=None, le=1024, allow_inf_nan=False)  # > 0 (InputError)
    moe_pad_to_capacity: bool = False
    moe_router_fp32: bool = False  # --moe-router-dtype fp32
    moe_grouped_gemm: bool = True  # --moe-grouped-gemm (TE GroupedLinear); off: one TE linear per local expert
    moe_imbalance: float = Field(default=1.0, le=1024, allow_inf_nan=False)  # max tokens per expert / mean, ≥ 1
    # --deterministic-mode: torch.use_deterministic_algorithms(True); the unfused MoE unpermute then keeps its rows
    deterministic: bool = False
    # --tp-comm-overlap: TE userbuffers (outside PyTorch's allocator) and their own cuBLAS workspace (3 streams)
    tp_comm_overlap: bool = False
    # --use-precision-aware-optimizer: TE's FusedAdam holds the master weights (bf16 weights: their fp32 low 16 bits)
    # and Adam's moments in precision.optimizer_states (--exp-avg-dtype / --exp-avg-sq-dtype)
    precision_aware_optimizer: bool = False
    # --grad-reduce-in-bf16 (or --main-grads-dtype bf16): the gradient buffer in bf16 instead of fp32
    grad_reduce_in_bf16: bool = False
    # --use-megatron-fsdp with this --data-parallel-sharding-strategy ("none": Megatron's DDP buffers;
    # calculator/stacks/megatron_fsdp.py): main weights in precision.master_weights, main grads in precision.grads
    megatron_fsdp: Literal["none", "no_shard", "optim", "optim_grads", "optim_grads_params"] = "none"
    # --optimizer-offload-fraction with parallel.offload_optimizer (Megatron's HybridDeviceOptimizer; default 1.0)
    optimizer_offload_fraction: float = Field(default=1.0, ge=0, le=1, allow_inf_nan=False)
    # --recompute-modules with recompute "selective" (None: Megatron's default, core_attn; () recomputes nothing)
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(default=None, max_length=7)
    # --fine-grained-activation-offloading --offload-modules (Megatron-Core; () off): the listed modules' saved
    # tensors go to pinned host memory after the forward (calculator/impls/megatron_offload.py)
    offload_modules: tuple[OffloadModule, ...] = Field(default=(), max_length=7)

    @model_validator(mode="after")
    def _check(self) -> "Workload":
        if self.parallel.schedule == "interleaved" and self.parallel.virtual_stages < 2:
            raise ValueError("parallel.virtual_stages must be at least 2 for the interleaved schedule")
        if self.engine != "hf" and self.mode == "train":
            raise ValueError(f"engine {self.engine!r} serves inference: use mode 'infer' (or 'rl' for a rollout)")
        if self.mode == "infer" and self.quant_method == "llm-int8" and self.weight_dtype != "int8":
            raise ValueError("quant_method 'llm-int8' is bitsandbytes' 8-bit layout: set weight_dtype to 'int8'")
        if self.parallel.offload_params and self.parallel.zero < 3:
            raise ValueError("parallel.offload_params needs ZeRO stage 3 / FSDP full shard (zero = 3)")
        return self
