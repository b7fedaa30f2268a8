"""The command line's flags: one argparse parser for every sub-command, and the map from flags to the Workload
fields they set (calculator/cli/main.py merges them with --config)."""
from __future__ import annotations

import argparse

from calculator.cli.checks import PLAN_SECONDS, CliError
from calculator.impls import IMPLS
from calculator.stacks import STACKS
from calculator.core.workload import OPTIMIZERS, RECIPES

DTYPES = ["fp32", "bf16", "fp16", "fp8", "int8", "int4", "nf4", "fp4", "nvfp4"]

# flag -> (path in the Workload dict)
FLAG_PATHS: dict[str, tuple[str, ...]] = {
    "mode": ("mode",), "batch": ("micro_batch",), "seq": ("seq_len",), "gen": ("gen_tokens",),
    "params_dtype": ("precision", "params"), "grads_dtype": ("precision", "grads"),
    "optimizer_dtype": ("precision", "optimizer_states"), "activation_dtype": ("precision", "activations"),
    "optimizer": ("optimizer",), "optimizer_impl": ("optimizer_impl",), "recompute": ("recompute",),
    "attention": ("attention",), "activation_model": ("activation_model",), "kv_dtype": ("kv_dtype",),
    "weight_dtype": ("weight_dtype",), "quant_group_size": ("quant_group_size",), "quant_method": ("quant_method",),
    "tp": ("parallel", "tp"), "pp": ("parallel", "pp"), "dp": ("parallel", "dp"), "cp": ("parallel", "cp"),
    "ep": ("parallel", "ep"), "etp": ("parallel", "etp"), "sequence_parallel": ("parallel", "sequence_parallel"),
    "zero": ("parallel", "zero"), "zero_shard_size": ("parallel", "zero_shard_size"),
    "distributed_optimizer": ("parallel", "distributed_optimizer"), "schedule": ("parallel", "schedule"),
    "offload_optimizer": ("parallel", "offload_optimizer"), "offload_params": ("parallel", "offload_params"),
    "vpp": ("parallel", "virtual_stages"), "microbatches": ("parallel", "num_microbatches"),
    "pp_first_stage_layers": ("parallel", "pp_first_stage_layers"),
    "pp_last_stage_layers": ("parallel", "pp_last_stage_layers"),
    "fragmentation": ("overheads", "fragmentation_pct"), "cuda_context": ("overheads", "cuda_context_bytes"),
    "gpu": ("gpu",), "stack": ("stack",), "bucket_view": ("ddp_bucket_view",), "impl": ("impl",),
    "mixer_kernels": ("mixer_kernels",),
    "ddp_rebuild_peak": ("ddp_rebuild_peak",), "ds_auto_buckets": ("ds_auto_buckets",),
    "expandable_segments": ("expandable_segments",), "finetune": ("finetune",), "lora_rank": ("lora_rank",),
    "lora_targets": ("lora_targets",), "qlora_keeps_inputs": ("qlora_keeps_inputs",), "kbit_prep": ("kbit_prep",),
    "padded_batch": ("padded_batch",),
    # Megatron-Core + Transformer Engine (stack megatron, impl megatron-te; calculator/memory/megatron_core.py)
    "fp8": ("fp8",), "fp8_param_gather": ("fp8_param_gather",), "ce_fusion": ("cross_entropy_fusion",),
    "no_grad_accum_fusion": ("gradient_accumulation_fusion",), "vocab_divisible_by": ("make_vocab_size_divisible_by",),
    "cp_comm_type": ("cp_comm_type",), "mtp_layers": ("mtp_layers",), "moe_dispatcher": ("moe_dispatcher",),
    "moe_capacity_factor": ("moe_capacity_factor",), "moe_pad_to_capacity": ("moe_pad_to_capacity",),
    "moe_router_fp32": ("moe_router_fp32",), "moe_imbalance": ("moe_imbalance",),
    "no_moe_grouped_gemm": ("moe_grouped_gemm",), "deterministic": ("deterministic",),
    "precision_aware_optimizer": ("precision_aware_optimizer",), "grad_reduce_in_bf16": ("grad_reduce_in_bf16",),
    "recompute_modules": ("recompute_modules",), "optimizer_offload_fraction": ("optimizer_offload_fraction",),
    "megatron_fsdp": ("megatron_fsdp",), "offload_modules": ("offload_modules",),
    # serving engine (calculator/engines)
    "engine": ("engine",), "memory_fraction": ("serving", "memory_fraction"),
    "max_model_len": ("serving", "max_model_len"), "max_num_batched_tokens": ("serving", "max_num_batched_tokens"),
    "max_num_seqs": ("serving", "max_num_seqs"), "block_size": ("serving", "block_size"),
    "prefix_caching": ("serving", "prefix_caching"), "cuda_graphs": ("serving", "cuda_graphs"),
    "language_model_only": ("serving", "language_model_only"),
    "attention_dp": ("serving", "attention_dp"), "engine_version": ("serving", "version"),
    "expert_weight_dtype": ("expert_weight_dtype",),
    # vision-language models (calculator/stages/vision.py)
    "images": ("images_per_sample",), "image_size": ("image_size",), "vision_tower": ("vision_tower",),
    # RL post-training (calculator/stages/rl.py)
    "rollout_batch_size": ("rl", "rollout_batch_size"), "samples_per_prompt": ("rl", "samples_per_prompt"),
    "prompt_len": ("rl", "prompt_len"), "response_len": ("rl", "response_len"),
    "rollout_engine": ("rl", "rollout_engine"), "rollout_tp": ("rl", "rollout_tp"), "colocate": ("rl", "colocate"),
    "rollout_gpus": ("rl", "rollout_gpus"), "rollout_memory_fraction": ("rl", "memory_fraction"),
    "offload_train": ("rl", "offload_train"), "engine_sleep": ("rl", "engine_sleep"),
    "reference_model": ("rl", "reference_model"), "critic": ("rl", "critic"), "reward_model": ("rl", "reward_model"),
    "offload_aux": ("rl", "offload_aux"),
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the flag and the allowed values), not the whole usage text, and no
    flag is taken for another by its prefix (argparse's allow_abbrev: `--micro 2` would silently be --microbatches)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise CliError(message.replace("argument ", "", 1))


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m calculator", description="LLM GPU memory calculator")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("presets", help="list model presets and GPUs").add_argument("--json", action="store_true")
    helps = {"estimate": "estimate per-GPU memory", "solve": "largest batch / sequence",
             "plan": "parallel layouts that fit a GPU",
             "advise": "ranked remedies when a job does not fit, and a combination that does",
             "sweep": "memory against micro-batch, sequence length or GPU count",
             "export": "a ready-to-run framework config for this input"}
    for name in ("estimate", "solve", "plan", "advise", "sweep", "export"):
        p = sub.add_parser(name, help=helps[name])
        p.add_argument("--model", help="preset id, path to a config.json, or a Hugging Face id (org/name)")
        p.add_argument("--config", help="JSON file with the whole input: {\"model\": ..., workload fields}")
        p.add_argument("--generic-params", type=int, help="generic network: total parameters (seed 004)")
        p.add_argument("--generic-activations", type=int, help="generic network: activation elements per sample")
        p.add_argument("--mode", choices=["train", "infer", "rl"])
        p.add_argument("--batch", type=int, help="micro-batch size")
        p.add_argument("--seq", type=int, help="sequence length (prompt length for inference)")
        p.add_argument("--gen", type=int, help="generated tokens (inference)")
        p.add_argument("--recipe", choices=list(RECIPES), help="precision recipe (dtype flags override it)")
        p.add_argument("--params-dtype", choices=DTYPES)
        p.add_argument("--grads-dtype", choices=DTYPES)
        p.add_argument("--master-weights", dest="master_weights", action="store_true", default=None)
        p.add_argument("--no-master-weights", dest="master_weights", action="store_false")
        p.add_argument("--optimizer", choices=list(OPTIMIZERS))
        p.add_argument("--optimizer-dtype", choices=DTYPES)
        p.add_argument("--optimizer-impl", choices=["fused", "foreach", "for-loop"])
        p.add_argument("--activation-dtype", choices=["fp32", "bf16", "fp16"])
        p.add_argument("--recompute", choices=["none", "selective", "full", "op"],
                       help="op: torchtitan's op-level selective AC (every other matmul output and the SDPA output kept)")
        p.add_argument("--attention", choices=["flash", "eager", "sdpa"],
                       help="flash: FlashAttention-2; sdpa: PyTorch SDPA (flash kernel, or with a padding / "
                            "sliding-window mask the efficient kernel); eager: transformers' matmul + softmax")
        p.add_argument("--activation-model", choices=["exact", "textbook", "fujii"])
        p.add_argument("--mixer-kernels", choices=["fused", "torch"],
                       help="hybrid models' linear-attention / SSM layers: GPU kernels (fused) or transformers' "
                            "PyTorch fallback (torch)")
        p.add_argument("--impl", choices=list(IMPLS),
                       help="model implementation: transformers (hf), + Liger kernels, compiled blocks, Megatron/TE")
        p.add_argument("--fp8", choices=["none", "delayed", "current", "blockwise", "mxfp8", "nvfp4"],
                       help="Megatron-Core + TE training recipe (--fp8-recipe; mxfp8 / nvfp4 on Blackwell only)")
        p.add_argument("--fp8-param-gather", action="store_true", default=None,
                       help="Megatron --fp8-param-gather: TE linear weights stored in FP8")
        p.add_argument("--ce-fusion", choices=["none", "te", "native"],
                       help="Megatron --cross-entropy-loss-fusion with --cross-entropy-fusion-impl (none: unfused)")
        p.add_argument("--no-grad-accum-fusion", action="store_false", default=None,
                       help="Megatron --no-gradient-accumulation-fusion (no TE dummy weight gradients)")
        p.add_argument("--vocab-divisible-by", type=int, help="Megatron --make-vocab-size-divisible-by (128)")
        p.add_argument("--cp-comm-type", choices=["p2p", "a2a", "allgather", "a2a+p2p"])
        p.add_argument("--mtp-layers", type=int, help="multi-token-prediction layers trained (Megatron "
                                                      "--mtp-num-layers; DeepSeek-V3's config has 1)")
        p.add_argument("--moe-dispatcher", choices=["alltoall", "allgather", "flex"])
        p.add_argument("--moe-capacity-factor", type=float, help="expert capacity factor (default: dropless)")
        p.add_argument("--moe-pad-to-capacity", action="store_true", default=None)
        p.add_argument("--moe-router-fp32", action="store_true", default=None, help="--moe-router-dtype fp32")
        p.add_argument("--no-moe-grouped-gemm", action="store_false", default=None,
                       help="Megatron without --moe-grouped-gemm: one TE linear per local expert")
        p.add_argument("--moe-imbalance", type=float, help="routing imbalance: max tokens per expert / mean (≥ 1)")
        p.add_argument("--deterministic", action="store_true", default=None,
                       help="Megatron --deterministic-mode (torch.use_deterministic_algorithms)")
        p.add_argument("--precision-aware-optimizer", action="store_true", default=None,
                       help="Megatron --use-precision-aware-optimizer: TE FusedAdam keeps the master weights (16-bit "
                            "remainders of bf16 weights) and Adam's moments in --optimizer-dtype")
        p.add_argument("--grad-reduce-in-bf16", action="store_true", default=None,
                       help="Megatron --grad-reduce-in-bf16 / --main-grads-dtype bf16: a bf16 gradient buffer")
        p.add_argument("--megatron-fsdp", choices=["none", "no_shard", "optim", "optim_grads", "optim_grads_params"],
                       help="Megatron --use-megatron-fsdp with this --data-parallel-sharding-strategy (main grads in "
                            "--grads-dtype, fp32 main weights with --master-weights)")
        p.add_argument("--optimizer-offload-fraction", type=float, metavar="F",
                       help="Megatron --optimizer-offload-fraction with --offload-optimizer (default 1: all)")
        p.add_argument("--recompute-modules", nargs="*", metavar="MODULE",
                       choices=["core_attn", "moe_act", "mlp", "moe", "shared_experts", "mla_up_proj", "layernorm"],
                       help="Megatron --recompute-modules with --recompute selective (default core_attn; none "
                            "listed: nothing recomputed)")
        p.add_argument("--offload-modules", nargs="+", metavar="MODULE",
                       choices=["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1",
                                "moe_act"],
                       help="Megatron --fine-grained-activation-offloading of these modules' saved tensors to host")
        p.add_argument("--kv-dtype", choices=["auto", "fp32", "bf16", "fp16", "fp8", "int8", "int4"],
                       help="auto (default): bf16, or the checkpoint's FP8 KV scheme under vLLM / SGLang")
        p.add_argument("--weight-dtype", choices=DTYPES, help="inference weight precision")
        p.add_argument("--quant-group-size", type=int)
        p.add_argument("--quant-method", choices=["awq", "gptq", "llm-int8"],
                       help="int4/int8 checkpoint layout (llm-int8: bitsandbytes load_in_8bit)")
        for flag in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "microbatches", "zero-shard-size"):
            p.add_argument(f"--{flag}", type=int)
        p.add_argument("--pp-first-stage-layers", type=int,
                       help="decoder layers of the first pipeline stage (uneven stages, Megatron's "
                            "--decoder-first-pipeline-num-layers); the middle stages split the rest evenly")
        p.add_argument("--pp-last-stage-layers", type=int,
                       help="decoder layers of the last pipeline stage (--decoder-last-pipeline-num-layers)")
        p.add_argument("--zero", type=int, choices=[0, 1, 2, 3])
        p.add_argument("--sequence-parallel", action="store_true", default=None)
        p.add_argument("--distributed-optimizer", action="store_true", default=None)
        p.add_argument("--offload-optimizer", action="store_true", default=None, help="ZeRO-Offload to host RAM")
        p.add_argument("--offload-params", action="store_true", default=None, help="ZeRO-3 parameters in host RAM")
        p.add_argument("--schedule", choices=["1f1b", "interleaved"])
        p.add_argument("--fragmentation", type=float, help="allocator fragmentation, %% of peak allocated")
        p.add_argument("--cuda-context", type=int, help="CUDA context bytes (default: the GPU's own)")
        p.add_argument("--gpu", help="GPU id from `presets` (fit verdict, CUDA context)")
        p.add_argument("--stack", choices=list(STACKS),
                       help="training stack (default: follows the layout: one GPU hf-trainer, DP ddp, ZeRO deepspeed, "
                            "TP/PP megatron)")
        p.add_argument("--zero-grad", choices=["none", "zeros"],
                       help="optimizer.zero_grad: none = set_to_none=True (default, grads freed after the step), "
                            "zeros = zeroed in place (held for the whole step)")
        p.add_argument("--bucket-view", action="store_true", default=None,
                       help="DDP gradient_as_bucket_view=True (gradients are views into DDP's buckets)")
        p.add_argument("--ddp-rebuild-peak", action="store_true", default=None,
                       help="DDP: count the first iteration's flat bucket held through iteration 2's forward (NCCL "
                            "stash until its watchdog polls; timing-dependent, the worst case)")
        p.add_argument("--ds-auto-buckets", action="store_true", default=None,
                       help="DeepSpeed: a ds_config with \"auto\" buckets, as HF's integration fills them "
                            "(reduce_bucket_size h², stage3_prefetch_bucket_size 0.9·h²); default: DeepSpeed's own")
        p.add_argument("--expandable-segments", action="store_true", default=None,
                       help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
        p.add_argument("--finetune", choices=["full", "lora", "qlora"], help="full fine-tuning or adapters")
        p.add_argument("--lora-rank", type=int)
        p.add_argument("--lora-targets", choices=["qv", "attention", "all-linear"])
        p.add_argument("--kbit-prep", action="store_true", default=None,
                       help="QLoRA: peft.prepare_model_for_kbit_training (non-4-bit weights and activations in fp32)")
        p.add_argument("--qlora-keeps-inputs", action="store_true", default=None,
                       help="QLoRA on bitsandbytes < 0.43 (its 4-bit linears kept their inputs for backward)")
        p.add_argument("--padded-batch", action="store_true", default=None,
                       help="an attention_mask with padding (SDPA: 4-D mask, memory-efficient kernel)")
        _timing_flags(p)
        _serving_flags(p)
        _vision_flags(p)
        _rl_flags(p)
        p.add_argument("--unit", choices=["GB", "GiB"], default="GB")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        if name == "solve":
            p.add_argument("--for", dest="solve_for", choices=["micro_batch", "seq_len"], default="micro_batch")
            p.add_argument("--no-safe-band", action="store_true", help="fill to 100%% instead of the 80%% band")
        if name in ("advise", "sweep"):
            _advise_flags(p, name)
        if name == "export":
            _export_flags(p)
        if name == "plan":
            p.add_argument("--gpus", type=int, help="exactly this many GPUs (default: the fewest that fit)")
            p.add_argument("--max-tp", type=int, default=8, help="largest tensor-parallel size (one node)")
            p.add_argument("--rank", choices=["fastest", "fewest-gpus", "cheapest", "most-headroom", "memory",
                                              "time", "cost"], default="fastest",
                           help="order the layouts that fit: fastest (tokens/s per GPU, the default), fewest-gpus, "
                                "cheapest (cost per million tokens: --price-per-gpu-hour), most-headroom, or memory "
                                "(fewest GPUs, largest micro-batch, least recompute, lowest memory); time = fastest, "
                                "cost = cheapest")
            p.add_argument("--global-batch", type=int, help="sequences per optimizer step, the same for every "
                           "layout (micro-batch × gradient accumulation × DP; default: PP micro-batches per step)")
            p.add_argument("--concurrency", type=int, help="serving (--engine vllm|sglang): requests in flight over "
                           "the whole layout, spread over its DP replicas; each replica decodes min(its share, the "
                           "sequences its KV pool holds, max_num_seqs) and layouts rank by output tokens/s per GPU "
                           "(default: as many as each engine admits)")
            p.add_argument("--limit", type=int, help="print at most this many layouts (default: all)")
            p.add_argument("--max-micro-batch", type=int,
                           help="largest micro-batch to try (default: --batch); smaller powers of two are tried too")
            p.add_argument("--max-seconds", type=float, default=PLAN_SECONDS,
                           help="give up the search after this many seconds (default %(default)g)")
            p.add_argument("--include-unfit", action="store_true",
                           help="also list the layouts that do not fit (ranked after those that do)")
    return ap


# flag -> TimingInputs field (calculator/timing/inputs.py): the time estimate's editable constants
TIMING_FLAGS: dict[str, tuple[str, type, str]] = {
    "price_per_gpu_hour": ("price_per_gpu_hour", float, "USD per GPU-hour (cost per million tokens)"),
    "matmul_efficiency": ("matmul_efficiency", float, "share of the dense peak a GEMM reaches (0-1]"),
    "attention_efficiency": ("attention_efficiency", float, "share of the peak the flash kernel reaches (0-1]"),
    "memory_efficiency": ("memory_efficiency", float, "share of DRAM bandwidth elementwise kernels reach (0-1]"),
    "host_op_us": ("host_op_us", float, "host microseconds per forward operator (eager PyTorch)"),
    "nvlink_gbps": ("nvlink_gbps", float, "GPU-to-GPU GB/s per direction inside a node (default: catalogue / 2)"),
    "ib_gbps": ("ib_gbps", float, "network GB/s per GPU per direction across nodes (default 50 = 400 Gb/s)"),
    "gpus_per_node": ("gpus_per_node", int, "GPUs per NVLink domain (default 8; 72 on GB300 NVL72)"),
    "moe_layer_host_ms": ("moe_layer_host_ms", float, "host ms a MoE layer adds per micro-batch (default: "
                          "Megatron-Core's fitted constant with --impl megatron-te, else 0)"),
    "peak_tflops": ("peak_tflops", float, "dense TFLOP/s (default: the GPU catalogue's)"),
    "memory_bandwidth_gbps": ("memory_bandwidth_gbps", float, "DRAM GB/s (default: the GPU catalogue's)"),
}


# on / off flags -> TimingInputs field: how the stack overlaps its communication (calculator/timing/overlap.py)
TIMING_SWITCHES = {"overlap_grad_reduce": "Megatron's --overlap-grad-reduce (default: the stack's own; Megatron off)",
                   "overlap_param_gather": "Megatron's --overlap-param-gather (default: the stack's own)",
                   "tp_comm_overlap": "Megatron's --tp-comm-overlap / torchtitan's async TP (default off)",
                   "ep_comm_overlap": "Megatron's --overlap-moe-expert-parallel-comm (default off)",
                   "full_iteration_cuda_graph": "a full-iteration CUDA graph: no per-operator host time (default off)"}


def _timing_flags(p: argparse.ArgumentParser) -> None:
    for flag, (_, kind, text) in TIMING_FLAGS.items():
        p.add_argument("--" + flag.replace("_", "-"), type=kind, help=text)
    p.add_argument("--matmul-dtype", choices=["auto", "bf16", "fp16", "fp8", "fp32"],
                   help="GEMM precision for the time estimate (auto: the activation dtype)")
    for name, text in TIMING_SWITCHES.items():
        _on_off(p, name.replace("_", "-"), text)


def timing_inputs(args: argparse.Namespace, data: dict | None = None):
    """TimingInputs from a --config's "timing" object and the timing flags (flags win)."""
    from calculator.timing.inputs import TimingInputs
    values = dict(data or {})
    for flag, (name, _, _) in TIMING_FLAGS.items():
        if getattr(args, flag, None) is not None:
            values[name] = getattr(args, flag)
    if getattr(args, "matmul_dtype", None):
        values["matmul_dtype"] = args.matmul_dtype
    for name in TIMING_SWITCHES:
        if getattr(args, name, None) is not None:
            values[name] = getattr(args, name)
    return TimingInputs(**values)


def _on_off(p: argparse.ArgumentParser, name: str, help_: str) -> None:
    p.add_argument(f"--{name}", dest=name.replace("-", "_"), action=argparse.BooleanOptionalAction, default=None,
                   help=help_)


def _serving_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("serving engine (--mode infer)")
    g.add_argument("--engine", choices=["hf", "vllm", "sglang"], help="hf: transformers generate() (default); "
                   "vllm / sglang: the engine's memory budget and KV pool")
    g.add_argument("--memory-fraction", "--gpu-memory-utilization", "--mem-fraction-static", type=float,
                   dest="memory_fraction", help="vLLM gpu_memory_utilization / SGLang mem_fraction_static "
                   "(default: the engine's)")
    for flag in ("max-model-len", "max-num-batched-tokens", "max-num-seqs", "block-size", "attention-dp"):
        g.add_argument(f"--{flag}", type=int)
    _on_off(g, "prefix-caching", "prefix caching (default on)")
    _on_off(g, "cuda-graphs", "CUDA graphs (default on; --no-cuda-graphs = --enforce-eager)")
    _on_off(g, "language-model-only", "a vision-language model's tower not loaded (default: both engines load it)")
    g.add_argument("--engine-version", help="engine release whose rules apply (vLLM 0.33 or 0.11; SGLang 0.5.23)")
    g.add_argument("--expert-weight-dtype", choices=DTYPES, help="routed experts' weight dtype (e.g. fp4: MXFP4)")


def _vision_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("vision-language models (a model with a vision tower)")
    g.add_argument("--images", type=int, help="images per sequence (their tokens join the sequence; default 0)")
    g.add_argument("--image-size", type=int, help="each image's side in pixels (default: the model family's)")
    g.add_argument("--vision-tower", choices=["frozen", "trained"], help="train the tower and projector too")


def _rl_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("RL post-training (--mode rl)")
    g.add_argument("--rollout-batch-size", type=int, help="prompts per rollout step")
    g.add_argument("--samples-per-prompt", "--n-samples-per-prompt", type=int, dest="samples_per_prompt")
    g.add_argument("--prompt-len", type=int)
    g.add_argument("--response-len", "--rollout-max-response-len", type=int, dest="response_len")
    g.add_argument("--rollout-engine", choices=["sglang", "vllm"])
    g.add_argument("--rollout-tp", "--rollout-num-gpus-per-engine", type=int, dest="rollout_tp")
    g.add_argument("--rollout-gpus", type=int, help="GPUs of the rollout engines when not colocated")
    g.add_argument("--rollout-memory-fraction", type=float, help="the rollout engine's memory fraction")
    _on_off(g, "colocate", "rollout engines on the trainer's GPUs (default on)")
    _on_off(g, "offload-train", "trainer state leaves the GPU during rollout (default on)")
    _on_off(g, "engine-sleep", "the rollout engine frees weights and KV during training (default on)")
    _on_off(g, "reference-model", "a frozen reference policy (KL)")
    _on_off(g, "critic", "a PPO critic trained like the actor")
    _on_off(g, "reward-model", "a reward model (forward only)")
    _on_off(g, "offload-aux", "reference / reward weights leave the GPU when idle (default on)")


def _advise_flags(p: argparse.ArgumentParser, name: str) -> None:
    """`advise` and `sweep` (calculator/cli/advise.py)."""
    if name == "sweep":
        p.add_argument("--over", choices=["micro_batch", "seq_len", "gpus"], default="micro_batch",
                       help="the input to vary (gpus: data parallel with ZeRO-3 for training, TP for inference)")
        p.add_argument("--values", help="comma-separated values (default: powers of two around the current one)")
        p.add_argument("--csv", action="store_true", help="print CSV (one row per point, bytes per component)")


def _export_flags(p: argparse.ArgumentParser) -> None:
    """`export` (calculator/cli/export.py)."""
    from calculator.exports import FORMATS
    p.add_argument("--format", choices=list(FORMATS), required=True, help="the framework to launch with")
    p.add_argument("--output", "-o", help="write the file here (default: print it)")
