"""Where every formula comes from. Each Term's `source` is a key of SOURCES."""
from __future__ import annotations

from calculator.core.citation import Source
from calculator.core.engine_sources import ENGINE_SOURCES  # serving engines and RL: their own file
from calculator.core.megatron_sources import MEGATRON_SOURCES  # Megatron-Core + TE training: their own file


SOURCES: dict[str, Source] = {
    "transformer-math": Source(
        "EleutherAI, Transformer Math 101 (Anthony, Biderman, Schoelkopf, 2023)",
        "https://blog.eleuther.ai/transformer-math/",
        "Memory requirements: model parameters, optimizer states (12 B/param mixed Adam), gradients"),
    "zero": Source(
        "Rajbhandari et al., ZeRO: Memory Optimizations Toward Training Trillion Parameter Models (2019)",
        "https://arxiv.org/abs/1910.02054",
        "§3 and Figure 1: stage 1 shards optimizer states, stage 2 also gradients, stage 3 also parameters"),
    "mixed-precision": Source(
        "Micikevicius et al., Mixed Precision Training (2017)",
        "https://arxiv.org/abs/1710.03740",
        "§3.1: an fp32 master copy of the weights is updated; fp16/bf16 copies feed forward and backward"),
    "megatron-memory": Source(
        "Megatron-LM, theoretical_memory_usage.py",
        "https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/training/theoretical_memory_usage.py",
        "compute_weight_and_optimizer_memory: 18 B/param, or 6 + 12/d with the distributed optimizer; "
        "activations of the first pipeline stage hold p in-flight micro-batches; interleaved × (1 + (p−1)/(p·v))"),
    "megatron-distopt": Source(
        "Megatron-LM distributed optimizer (docs/source/api-guide/dist_optimizer.md)",
        "https://github.com/NVIDIA/Megatron-LM/blob/main/docs/source/api-guide/dist_optimizer.md",
        "bf16 params 2 B + fp32 main grads 4 B per param kept whole; fp32 master + Adam 12 B sharded over DP"),
    "deepspeed-zero3": Source(
        "DeepSpeed ZeRO-3 memory estimator (deepspeed/runtime/zero/stage3.py)",
        "https://github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/runtime/zero/stage3.py",
        "estimate_zero3_model_states_mem_needs: largest-layer gather buffer on top of 18·P/N sharded state"),
    "fsdp": Source(
        "PyTorch FSDP (Zhao et al., PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel, 2023)",
        "https://arxiv.org/abs/2304.11277",
        "§3.2–3.4: one FSDP unit is unsharded at a time, plus the prefetched next unit; hybrid sharding"),
    "torch-adamw": Source(
        "PyTorch torch/optim/adamw.py (_multi_tensor_adamw / _single_tensor_adamw)",
        "https://github.com/pytorch/pytorch/blob/main/torch/optim/adam.py",
        "exp_avg, exp_avg_sq per param + a step tensor per param tensor; foreach allocates a full-size sqrt "
        "temporary of exp_avg_sq"),
    "bnb-8bit": Source(
        "Dettmers et al., 8-bit Optimizers via Block-wise Quantization (2021); bitsandbytes",
        "https://arxiv.org/abs/2110.02861",
        "§2: 8-bit states quantized in blocks of 2048 (bitsandbytes blocksize 256 for optimizers) with one "
        "fp32 absmax per block"),
    "adafactor": Source(
        "Shazeer & Stern, Adafactor: Adaptive Learning Rates with Sublinear Memory Cost (2018); torch.optim.Adafactor",
        "https://arxiv.org/abs/1804.04235",
        "§3: the second moment of an r×c matrix is kept as r + c factors; no first moment by default"),
    "lion": Source(
        "Chen et al., Symbolic Discovery of Optimization Algorithms (Lion, 2023)",
        "https://arxiv.org/abs/2302.06675",
        "Algorithm 2: Lion keeps only the momentum"),
    "sgd": Source(
        "PyTorch torch/optim/sgd.py",
        "https://github.com/pytorch/pytorch/blob/main/torch/optim/sgd.py",
        "momentum_buffer per parameter when momentum > 0; no state otherwise"),
    "korthikanti": Source(
        "Korthikanti et al., Reducing Activation Recomputation in Large Transformer Models (2022)",
        "https://arxiv.org/abs/2205.05198",
        "§4, Eq. 1–4, Table 2: s·b·h·(34 + 5·a·s/h) per layer; selective recompute drops 5·a·s/h; "
        "full recompute keeps 2·s·b·h; TP/SP divide by t"),
    "fujii": Source(
        "Fujii, Watanabe, Yokota, Accelerating LLM Training with 4D Parallelism and Memory Consumption "
        "Estimator (2024)",
        "https://arxiv.org/abs/2411.06465",
        "§3: activations s·b·h·(12 + 4k/a + 8f/h) per layer (bf16, flash, SP), NCCL ≈ 0.5 GB per communicator; "
        "estimates under 80% of capacity did not OOM in 454 runs"),
    "hf-llama": Source(
        "Hugging Face transformers, models/llama/modeling_llama.py (v5.23), measured by tracing",
        "https://github.com/huggingface/transformers/blob/main/src/transformers/models/llama/modeling_llama.py",
        "LlamaRMSNorm upcasts to fp32 (saved), SwiGLU saves gate/up/act/product; see validation/README.md"),
    "flash-attention": Source(
        "Dao, FlashAttention-2 (2023)",
        "https://arxiv.org/abs/2307.08691",
        "§3.1: the backward recomputes the scores from q, k, v, the output and the fp32 logsumexp — no s² tensor"),
    "hf-eager-attention": Source(
        "Hugging Face transformers eager_attention_forward (modeling_llama.py)",
        "https://github.com/huggingface/transformers/blob/main/src/transformers/models/llama/modeling_llama.py",
        "repeat_kv expands k and v; softmax in fp32 is saved, and its cast back to the model dtype"),
    "hf-moe": Source(
        "Hugging Face transformers MoE experts (grouped_mm), e.g. models/mixtral/modeling_mixtral.py",
        "https://github.com/huggingface/transformers/blob/main/src/transformers/models/mixtral/modeling_mixtral.py",
        "each token is copied to its top-k experts: the gathered input and expert outputs scale with top_k"),
    "hf-loss": Source(
        "Hugging Face transformers ForCausalLMLoss (loss/loss_utils.py)",
        "https://github.com/huggingface/transformers/blob/main/src/transformers/loss/loss_utils.py",
        "logits are upcast to fp32 and cross_entropy saves the fp32 log_softmax (4·b·s·V bytes)"),
    "llm-int8": Source(
        "Dettmers et al., LLM.int8(): 8-bit Matrix Multiplication for Transformers at Scale (2022); bitsandbytes",
        "https://github.com/bitsandbytes-foundation/bitsandbytes/blob/main/bitsandbytes/autograd/_functions.py",
        "Int8Params: int8 weights (CB) + an fp32 absmax per output row (SCB); MatMul8bitLt quantizes the input "
        "row-wise to int8, multiplies into int32 and dequantizes to fp16 (backends/cuda/ops.py)"),
    "torch-autocast": Source(
        "PyTorch autocast (aten/src/ATen/autocast_mode.h cached_cast, autocast_mode.cpp op lists)",
        "https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/autocast_mode.h",
        "fp32 weights that require grad are cast to bf16 once per autocast region and cached; each linear saves "
        "its bf16 weight and its own bf16 input copy; ops outside the lists (embedding, add, mul) stay fp32"),
    "sdpa-mask": Source(
        "transformers masking_utils.sdpa_mask + integrations/sdpa_attention.py; PyTorch SDPA kernel selection",
        "https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/transformers/attention.cpp",
        "a padded batch gets a 4-D boolean mask; GQA k/v are repeated; FlashAttention cannot take a mask, so the "
        "memory-efficient kernel runs and saves the mask as an additive bias in the query dtype per layer"),
    "peft-kbit": Source(
        "PEFT prepare_model_for_kbit_training (peft/utils/other.py); bitsandbytes Linear4bit (nn/modules.py)",
        "https://github.com/huggingface/peft/blob/main/src/peft/utils/other.py",
        "every fp16/bf16 parameter that is not 4-bit is cast to fp32: embeddings, norms and LM head, and with "
        "them the residual stream and the logits"),
    "hf-checkpointing": Source(
        "torch.utils.checkpoint (non-reentrant), as used by transformers gradient_checkpointing_enable",
        "https://pytorch.org/docs/stable/checkpoint.html",
        "each checkpointed layer keeps only its input; one layer is recomputed at a time during backward"),
    "torchtitan-op-sac": Source(
        "torchtitan op-level selective activation checkpointing (torchtitan/distributed/activation_checkpoint.py "
        "`_custom_policy`; torch.utils.checkpoint.create_selective_checkpoint_contexts)",
        "https://github.com/pytorch/torchtitan/blob/main/torchtitan/distributed/activation_checkpoint.py",
        "saves the outputs of aten.mm (every other one per block), of the SDPA kernels and of reduce-scatter; "
        "recomputes the rest of the block in backward"),
    "pipeline-1f1b": Source(
        "Narayanan et al., Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM (2021)",
        "https://arxiv.org/abs/2104.04473",
        "§2.2: with 1F1B stage r keeps at most p − r micro-batches in flight; interleaved schedules keep "
        "(p − r − 1)·2 + (v − 1)·p + 1 model-chunk micro-batches"),
    "kv-cache": Source(
        "Pope et al., Efficiently Scaling Transformer Inference (2022); transformers DynamicCache",
        "https://arxiv.org/abs/2211.05102",
        "§3.1: K and V per layer per token: 2·kv_heads·head_dim elements; GQA/MQA shrink kv_heads"),
    "mla": Source(
        "DeepSeek-AI, DeepSeek-V2 (2024), §2.1.2 Multi-head Latent Attention",
        "https://arxiv.org/abs/2405.04434",
        "the cache holds the compressed latent c_KV (kv_lora_rank) and the decoupled RoPE key (qk_rope_head_dim)"),
    "sliding-window": Source(
        "Jiang et al., Mistral 7B (2023), §2 Sliding Window Attention / rolling buffer cache",
        "https://arxiv.org/abs/2310.06825",
        "a sliding-window layer caches at most W tokens"),
    "quantization": Source(
        "Frantar et al., GPTQ (2022) and Dettmers et al., QLoRA (2023)",
        "https://arxiv.org/abs/2305.14314",
        "group-wise scales: GPTQ/AWQ fp16 scale + 4-bit zero per group; NF4 fp32 absmax per 64-element block; "
        "MXFP4 one 8-bit scale per 32 elements (OCP MX spec)"),
    "cuda-context": Source(
        "Measured CUDA context sizes (validation/README.md, shared/validation/published_public.csv)",
        "https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
        "the CUDA/ROCm context, kernels and library handles live outside the caching allocator: nvidia-smi "
        "shows them, torch.cuda.max_memory_allocated does not"),
    "allocator": Source(
        "PyTorch CUDA caching allocator (docs: CUDA semantics › memory management)",
        "https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
        "reserved − allocated: block rounding and fragmentation; an editable percentage of the peak"),
    "allocator-calibration": Source(
        "Fragmentation fit to published nvidia-smi measurements (validation/CALIBRATION.md)",
        "https://github.com/huggingface/transformers/blob/main/docs/source/en/model_memory_anatomy.md",
        "HF bert-large on V100 (rows 56–61): slack = 0.026 × states + 0.247 × working set, within 17 MiB on all "
        "four runs; PyTorch 1.x allocator, eager attention — an upper value for FlashAttention on PyTorch 2.x"),
    "hf-trainer-grads": Source(
        "PyTorch autograd AccumulateGrad + Optimizer.zero_grad(set_to_none=True); transformers Trainer",
        "https://github.com/pytorch/pytorch/blob/main/torch/csrc/autograd/functions/accumulate_grad.h",
        "a parameter's .grad is created when the backward reaches it and set to None after the step "
        "(torch/optim/optimizer.py zero_grad); measured on an H200: tests/golden_gpu/h200"),
    "ddp-buckets": Source(
        "PyTorch DistributedDataParallel (torch/nn/parallel/distributed.py, torch/csrc/distributed/c10d/reducer.cpp)",
        "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/reducer.cpp",
        "Reducer::initialize_buckets: flat gradient buckets over every trainable parameter, allocated at wrap time; "
        "gradient_as_bucket_view makes param.grad a view into them"),
    "ddp-rebuild-hold": Source(
        "PyTorch DDP bucket rebuild (torch/nn/parallel/distributed.py _ddp_init_helper, _pre_forward; reducer.cpp "
        "rebuild_buckets, initialize_buckets) + ProcessGroupNCCL.cpp (collective() TensorShelf stash, "
        "Watchdog::runLoop, workEnqueue; pytorch/pytorch#150398)",
        "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
        "the first iteration's single flat bucket is still stashed by the NCCL all-reduce that used it unless the "
        "100 ms watchdog saw it finish before iteration 2's rebuild: then it lives until the next all-reduce; "
        "H200: +2.47 GB in both Llama-3.2-1B DDP runs, 0 in the Llama-3.1-8B one"),
    "fsdp2": Source(
        "PyTorch FSDP2 fully_shard (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, _fsdp_state.py, "
        "_fsdp_collectives.py)",
        "https://github.com/pytorch/pytorch/tree/main/torch/distributed/fsdp/_fully_shard",
        "fp32 sharded parameters; units all-gathered in param_dtype and resharded after forward (the root unit "
        "is not); gradients reduce-scattered in reduce_dtype"),
    "deepspeed-zero": Source(
        "DeepSpeed ZeRO (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py, config.py)",
        "https://github.com/deepspeedai/DeepSpeed/tree/master/deepspeed/runtime/zero",
        "reduce (IPG) bucket of reduce_bucket_size elements, contiguous gradient partition, stage-3 prefetch "
        "bucket and max live parameters, the stage-3 step's fp32 gradients one sub-group at a time"),
    "megatron-grad-buffer": Source(
        "Megatron-Core param_and_grad_buffer.py / distributed_data_parallel.py",
        "https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/distributed/param_and_grad_buffer.py",
        "_ParamAndGradBuffer: one contiguous main-grad buffer (fp32 for bf16 training) allocated at construction "
        "and never freed; params in a contiguous buffer with the distributed optimizer"),
    "cublas-workspace": Source(
        "PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp (getChosenWorkspaceSize)",
        "https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/cuda/CublasHandlePool.cpp",
        "one workspace per cuBLAS handle and stream from the caching allocator: 32 MiB on Hopper/Blackwell, "
        "8.125 MiB before; handles are per thread (H200: 32 MiB in inference, 64 MiB in training)"),
    "caching-allocator": Source(
        "PyTorch c10/cuda/CUDACachingAllocator.cpp (round_size, get_allocation_size, get_free_block, should_split, "
        "try_merge_blocks, ExpandableSegment)",
        "https://github.com/pytorch/pytorch/blob/main/c10/cuda/CUDACachingAllocator.cpp",
        "replayed over the step's tensors (calculator/allocator/reference.py, calculator/allocator/step_plan.py): 512 B rounding, "
        "2 MiB small / 20 MiB or 2 MiB-rounded large segments, best-fit reuse and splitting; checked against the "
        "78 H200 runs (validation/CALIBRATION.md)"),
    "allocator-h200": Source(
        "Caching-allocator slack measured on an H200 (PyTorch 2.11, CUDA 13.0): validation/CALIBRATION.md",
        "https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
        "max_reserved − max_allocated of the 78 shared H200 runs, with and without expandable_segments"),
    "zero-offload": Source(
        "Ren et al., ZeRO-Offload: Democratizing Billion-Scale Model Training (2021); Rajbhandari et al., "
        "ZeRO-Infinity (2021)",
        "https://arxiv.org/abs/2101.06840",
        "§4: gradients, fp32 master weights and optimizer state move to CPU memory and the optimizer steps on the "
        "CPU; ZeRO-Infinity also offloads the parameters of ZeRO-3"),
    "nccl": Source(
        "NCCL environment variables (NCCL_BUFFSIZE) and Fujii et al. 2024 §3",
        "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html",
        "each communicator allocates its own buffers outside PyTorch's allocator (≈ 0.5 GB per communicator "
        "measured by Fujii et al.)"),
    "lora": Source(
        "Hu et al., LoRA: Low-Rank Adaptation of Large Language Models (2021); Dettmers et al., QLoRA (2023)",
        "https://arxiv.org/abs/2106.09685",
        "§4.1: W + B·A with A in×r, B r×out: r·(in + out) trainable parameters per adapted linear; only the "
        "adapters have gradients and optimizer state (QLoRA §3: the frozen base in NF4)"),
    "generic-network": Source(
        "Training memory of a generic network: parameters, gradients and stored activations",
        "https://pytorch.org/docs/stable/notes/autograd.html#saved-tensors",
        "params × bytes + grads × bytes + batch × activation elements per sample × bytes"),
    "textbook-overhead": Source(
        "Flat framework overhead of the textbook estimate (10%, range 5–20%)",
        "https://blog.eleuther.ai/transformer-math/",
        "a flat percentage for allocator, NCCL buffers and kernel workspaces; used only by the textbook model"),
    # ---- time (calculator/timing/roofline.py, timing.py, comm.py) ----
    "roofline": Source(
        "Williams, Waterman and Patterson, Roofline: An Insightful Visual Performance Model for Multicore "
        "Architectures (CACM 2009)",
        "https://doi.org/10.1145/1498765.1498785",
        "attainable FLOP/s = min(peak FLOP/s, arithmetic intensity × peak bandwidth); the ridge point peak / "
        "bandwidth separates memory-bound from compute-bound kernels"),
    "kaplan-scaling": Source(
        "Kaplan et al., Scaling Laws for Neural Language Models (2020) §2.1; Narayanan et al., Efficient Large-Scale "
        "Language Model Training on GPU Clusters Using Megatron-LM (SC21), appendix",
        "https://arxiv.org/abs/2001.08361",
        "a forward pass costs 2·N FLOPs per token (2·in·out per linear), training 6·N (backward = 2 × forward); "
        "Narayanan et al.: 96·B·s·l·h²·(1 + s/6h + V/16lh) per iteration for a GPT block"),
    # ---- token mixers other than softmax attention (calculator/model/architectures/) -------------------------
    "gated-deltanet": Source(
        "Yang, Kautz, Hatamizadeh, Gated Delta Networks: Improving Mamba2 with Delta Rule (ICLR 2025); transformers "
        "models/qwen3_next/modeling_qwen3_next.py and qwen3_5/modeling_qwen3_5.py (Qwen3NextGatedDeltaNet); "
        "flash-linear-attention fla/ops/gated_delta_rule/chunk.py (ChunkGatedDeltaRuleFunction)",
        "https://arxiv.org/abs/2412.06464",
        "parameters, the conv + fp32 recurrent state per sequence, and what the chunked delta rule saves (PyTorch path "
        "traced on the CPU; the fused kernels' ctx.save_for_backward read from source)"),
    "mamba": Source(
        "Dao & Gu, Transformers are SSMs: Generalized Models and Efficient Algorithms Through Structured State Space "
        "Duality (Mamba-2, 2024); Gu & Dao, Mamba (2023); transformers models/mamba2/modeling_mamba2.py Mamba2Mixer "
        "and models/mamba/modeling_mamba.py MambaMixer; mamba_ssm ssd_combined.py / selective_scan_interface.py",
        "https://arxiv.org/abs/2405.21060",
        "in_proj / conv1d / dt_bias / A_log / D / gated norm / out_proj, the conv and fp32 SSM state per sequence, "
        "and the chunked scan's saved tensors (PyTorch path traced; the fused kernels read from source)"),
    "short-conv": Source(
        "LFM2 short convolutions: transformers models/lfm2/modeling_lfm2.py Lfm2ShortConv; causal-conv1d "
        "causal_conv1d_interface.py CausalConv1dFn",
        "https://huggingface.co/docs/transformers/model_doc/lfm2",
        "in_proj (B, C, x), depthwise causal conv of L_cache taps, out_proj; the conv state per sequence"),
    "kda": Source(
        "Kimi Team, Kimi Linear: An Expressive, Efficient Attention Architecture (2025); transformers "
        "models/kimi_linear/modeling_kimi_linear.py; flash-linear-attention fla/ops/kda",
        "https://arxiv.org/abs/2510.26692",
        "Kimi Delta Attention: channel-wise gates, the conv + fp32 recurrent state per sequence, the chunk kernel's "
        "saved tensors"),
    "lightning-attention": Source(
        "MiniMax, MiniMax-01: Scaling Foundation Models with Lightning Attention (2025); transformers "
        "models/minimax/modeling_minimax.py MiniMaxLightningAttention",
        "https://arxiv.org/abs/2501.08313",
        "the lightning attention block recurrence and its per-head d × d state per sequence"),
    "dsa": Source(
        "DeepSeek-AI, DeepSeek-V3.2: Pushing the Frontier of Open Large Language Models with DeepSeek Sparse "
        "Attention (2025); transformers models/deepseek_v32/modeling_deepseek_v32.py DeepseekV32Indexer; vLLM "
        "sparse MLA indexer cache",
        "https://arxiv.org/abs/2512.02556",
        "the lightning indexer's tensors, its key cache per token (bf16 in transformers; fp8 + a fp32 scale per 128 "
        "in vLLM), no gradient through it in transformers (torch.no_grad)"),
    "compressed-attention": Source(
        "DeepSeek-AI, DeepSeek-V4 (2026): compressed sparse and heavily compressed attention, manifold-constrained "
        "hyper-connections; transformers models/deepseek_v4/modeling_deepseek_v4.py DeepseekV4Attention, "
        "DeepseekV4CSACompressor, DeepseekV4HCACompressor, DeepseekV4CSACache / DeepseekV4HCACache",
        "https://github.com/huggingface/transformers/blob/main/src/transformers/models/deepseek_v4/"
        "modeling_deepseek_v4.py",
        "the attention's, compressors' and indexer's tensors; the cache per layer: the last window − 1 keys (= "
        "values), one compressed entry per r tokens, the T mod r projected tokens of the open window"),
    "flash-attention-2": Source(
        "Dao, FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning (2023)",
        "https://arxiv.org/abs/2307.08691",
        "§4.1: forward FLOPs 4·seqlen²·head_dim·heads, halved with a causal mask; backward 2.5 × forward"),
    "nccl-tests": Source(
        "NVIDIA nccl-tests, doc/PERFORMANCE.md (bus bandwidth)",
        "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md",
        "busBW = algBW × 2(n−1)/n for all-reduce, × (n−1)/n for all-gather, reduce-scatter and all-to-all"),
    "pipeline-bubble": Source(
        "Narayanan et al., Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM (SC21)",
        "https://arxiv.org/abs/2104.04473",
        "§2.2: the 1F1B pipeline bubble is (p − 1)/m of the ideal time, (p − 1)/(v·m) with v interleaved chunks; "
        "§3.2: two all-reduces per layer forward and two backward under tensor parallelism"),
    "mfu": Source(
        "Chowdhery et al., PaLM (2022) appendix B; Korthikanti et al., Reducing Activation Recomputation (2022) §6",
        "https://arxiv.org/abs/2204.02311",
        "MFU: the model's FLOPs per second (no recomputation) over the peak; HFU counts the recomputed FLOPs too"),
    "overhead-bound": Source(
        "He, Making Deep Learning Go Brrrr From First Principles (2022)",
        "https://horace.io/brrr_intro.html",
        "compute-, memory-bandwidth- and overhead-bound regimes: eager PyTorch's per-operator host cost is hidden "
        "only while the GPU's queue stays full"),
    "decode-inference": Source(
        "Pope et al., Efficiently Scaling Transformer Inference (2022) §2; transformers cache_utils.py DynamicLayer",
        "https://arxiv.org/abs/2211.05102",
        "a decode step reads every weight and the KV cache once per token batch (memory-bound at small batch); HF's "
        "dynamic cache appends with torch.cat"),
    "liger-kernel": Source(
        "Liger Kernel 0.8.5 (LinkedIn): ops/rms_norm.py, ops/swiglu.py, ops/fused_linear_cross_entropy.py, "
        "transformers/monkey_patch.py",
        "https://github.com/linkedin/Liger-Kernel/tree/main/src/liger_kernel",
        "LigerRMSNormFunction saves X and an fp32 RSTD; LigerSiLUMulFunction saves a and b; the fused linear "
        "cross-entropy computes the loss and its gradients chunk by chunk in the forward and keeps grad_input and "
        "grad_weight (never the logits); measured on an H200 (tests/golden_gpu)"),
    "torch-compile": Source(
        "PyTorch torch/_functorch/partitioners.py (min_cut_rematerialization_partition), torch.compile per block",
        "https://github.com/pytorch/pytorch/blob/main/torch/_functorch/partitioners.py",
        "AOTAutograd saves the min-cut set of a compiled block and recomputes cheap pointwise ops (norm upcasts, "
        "SiLU) in the backward; measured on an H200 (tests/golden_gpu)"),
    "transformer-engine": Source(
        "NVIDIA TransformerEngine, pytorch/module/layernorm_linear.py and layernorm_mlp.py",
        "https://github.com/NVIDIA/TransformerEngine/tree/main/transformer_engine/pytorch/module",
        "fused norm + GEMM keeps the norm input, fp32 rsigma and the normalised GEMM input; fc1 keeps its output "
        "and the activation output"),
    "megatron-cross-entropy": Source(
        "Megatron-LM, megatron/core/tensor_parallel/cross_entropy.py (_VocabParallelCrossEntropy)",
        "https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/tensor_parallel/cross_entropy.py",
        "logits upcast to fp32, turned into the softmax in place and saved (4·T·V/t); the backward reuses it"),
}

SOURCES.update(ENGINE_SOURCES)
SOURCES.update(MEGATRON_SOURCES)
