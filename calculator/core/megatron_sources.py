"""Sources of the Megatron-Core + Transformer Engine training terms (calculator/memory/megatron_core.py, fp8.py,
moe_dispatch.py; calculator/stacks/megatron*.py; calculator/impls/megatron_te*.py). Read at NVIDIA/Megatron-LM
d98e8a64 (2026-08-22) and NVIDIA/TransformerEngine d0067d0d (2026-08-22)."""
from __future__ import annotations

from calculator.core.citation import Source

_MLM = "https://github.com/NVIDIA/Megatron-LM/blob/d98e8a64ddf34856e74b24714e3bedb2f5a39553/"
_TE = "https://github.com/NVIDIA/TransformerEngine/blob/d0067d0da6cb01811b8072a7d304f0e00344ce2b/"

MEGATRON_SOURCES: dict[str, Source] = {
    "te-dummy-wgrad": Source(
        "TransformerEngine pytorch/module/base.py get_dummy_wgrad (called by linear.py, layernorm_linear.py, "
        "grouped_linear.py)", _TE + "transformer_engine/pytorch/module/base.py",
        "with gradient-accumulation fusion the wgrad GEMM writes into main_grad and the module returns a dummy "
        "tensor cached in _dummy_wgrads per (shape, dtype): one per distinct local weight shape, kept for the run"),
    "te-fused-adam": Source(
        "TransformerEngine pytorch/optimizers/fused_adam.py FusedAdam._initialize_state (store_param_remainders); "
        "Megatron-LM megatron/core/optimizer/__init__.py, distrib_optimizer.py, optimizer_config.py",
        _TE + "transformer_engine/pytorch/optimizers/fused_adam.py",
        "--use-precision-aware-optimizer: the distributed optimizer hands FusedAdam the bf16 parameter shards and "
        "builds no fp32 copies; FusedAdam keeps master_param (fp32 stored as its int16 low half beside the bf16 "
        "weight when store_param_remainders, Megatron's default) and exp_avg / exp_avg_sq in their own dtypes"),
    "te-workspace": Source(
        "TransformerEngine pytorch/cpp_extensions/gemm.py get_cublas_workspace / get_cublas_workspace_size_bytes",
        _TE + "transformer_engine/pytorch/cpp_extensions/gemm.py",
        "one cuBLASLt workspace of 32 MiB + 1 KiB on compute capability ≥ 9 (4 MiB before), cached for the run; "
        "grouped GEMMs add one per cuBLAS stream (4)"),
    "te-attention-backend": Source(
        "TransformerEngine common/fused_attn/fused_attn.cpp nvte_get_fused_attn_backend, pytorch/attention/"
        "dot_product_attention/utils.py get_attention_backend / get_qkv_layout, backends.py FlashAttention.forward",
        _TE + "transformer_engine/common/fused_attn/fused_attn.cpp",
        "cuDNN attention preferred on Hopper+, but Blackwell deterministic training leaves it: always before TE "
        "2.12, from 2.12 unless cuDNN >= 9.18.1 with no dropout and no bias, on sm 120 always from 2.14; "
        "FlashAttention then keeps bshd copies of q, k, v and, at micro-batch > 1, its own output beside the "
        "returned copy; q, k, v not interleaved views of the fused qkv output are made contiguous"),
    "megatron-fsdp": Source(
        "Megatron-LM megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py "
        "(ParamAndGradBuffer._init_each_parameter_group_buffers, AllGatherPipeline, GradReducePipeline), "
        "megatron_fsdp.py, mcore_fsdp_adapter.py",
        _MLM + "megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py",
        "--data-parallel-sharding-strategy optim / optim_grads / optim_grads_params shards the main weights, then "
        "the gradients, then the model weights over data parallelism; TransformerLayers are gathered per unit, "
        "the modules outside them stay gathered; unsharded gradient buckets wait for the end of the backward"),
    "megatron-vocab-padding": Source(
        "Megatron-LM megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding",
        _MLM + "megatron/training/tokenizer/tokenizer.py",
        "the vocabulary is padded up to a multiple of make_vocab_size_divisible_by (128) × tensor-parallel size; "
        "the embedding, the output layer and the logits have the padded width"),
    "megatron-fused-cross-entropy": Source(
        "Megatron-LM megatron/core/fusions/fused_cross_entropy.py (native) and TransformerEngine "
        "pytorch/cross_entropy.py (te)", _MLM + "megatron/core/fusions/fused_cross_entropy.py",
        "native: the jit-fused steps keep the fp32 softmax and build a second fp32 buffer beside it; te: the "
        "Triton kernel writes the gradient into the model-dtype logits in place and saves them, no fp32 copy"),
    "megatron-dropout": Source(
        "Megatron-LM megatron/core/fusions/fused_bias_dropout.py (bias_dropout_add, jit-fused)",
        _MLM + "megatron/core/fusions/fused_bias_dropout.py",
        "hidden dropout after attention and after the MLP keeps a 1-byte mask per element of its h-wide input"),
    "megatron-cp": Source(
        "TransformerEngine pytorch/attention/dot_product_attention/context_parallel.py (AttnFuncWithCPAndKVP2P, "
        "AttnFuncWithCPAndKVAllGather, AttnFuncWithCPAndQKVOA2A)",
        _TE + "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py",
        "p2p: the ring keeps two K/V chunks in flight (send and receive) and per-step outputs and softmax "
        "statistics; allgather: the whole sequence's K/V; a2a: q, k, v re-split by heads (one copy each way)"),
    "megatron-mtp": Source(
        "Megatron-LM megatron/core/transformer/multi_token_prediction.py (MultiTokenPredictionLayer)",
        _MLM + "megatron/core/transformer/multi_token_prediction.py",
        "per MTP layer: enorm, hnorm, eh_proj (2h → h), one transformer layer and a final norm, on the last "
        "pipeline stage; the embedding and the output layer are shared, each layer adds its own logits and loss"),
    "megatron-fine-grained-offload": Source(
        "Megatron-LM megatron/core/pipeline_parallel/fine_grained_activation_offload.py (PipelineOffloadManager."
        "post_warmup_callback, ChunkOffloadHandler.bulk_offload_group / should_bulk_offload, OffloadTensorPool)",
        _MLM + "megatron/core/pipeline_parallel/fine_grained_activation_offload.py",
        "--offload-modules: the tensors saved inside each listed module of at least 1,048,576 elements go to "
        "pinned host memory after its forward and come back before its backward; from the second iteration the "
        "last group of each module in the first chunk back-propagated stays on the GPU"),
    "te-fp8": Source(
        "TransformerEngine pytorch/module/base.py (_fp8_workspaces, get_weight_workspace), "
        "pytorch/quantization.py (recipe support), pytorch/tensor/*_tensor.py (FP8 / MXFP8 / blockwise / NVFP4 "
        "storage)", _TE + "transformer_engine/pytorch/quantization.py",
        "per-tensor FP8 keeps 1 B per element row-wise and a 1 B transpose; MXFP8 one E8M0 scale per 32 "
        "elements each way; blockwise an fp32 scale per 128×128 weight block or 1×128 activation block; NVFP4 "
        "0.5 B per element and an E4M3 scale per 16; delayed scaling keeps an fp32 amax history per tensor; weight "
        "copies are cached from the first micro-batch to the end of the step; MXFP8/NVFP4 need compute capability "
        "10.x (NVFP4 also 12.x), FP8 8.9+, blockwise 9.0+"),
    "megatron-global-buffer": Source(
        "Megatron-LM megatron/core/utils.py GlobalMemoryBuffer.get_tensor (\"mpu\"), used by "
        "tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication (sequence-parallel all-gather of "
        "the output layer's input) and tensor_parallel/mappings.py _gather_along_first_dim (use_global_buffer, the "
        "allgather MoE dispatcher)", _MLM + "megatron/core/utils.py",
        "one buffer per (name, dtype), allocated at the largest request and kept for the run; later requests are "
        "views into it"),
    "megatron-moe-dispatch": Source(
        "Megatron-LM megatron/core/transformer/moe/token_dispatcher.py (MoEAlltoAllTokenDispatcher, "
        "MoEAllGatherTokenDispatcher, MoEFlexTokenDispatcher) and moe_utils.py (permute, get_capacity)",
        _MLM + "megatron/core/transformer/moe/token_dispatcher.py",
        "tokens are permuted into T·k expert rows and exchanged; allgather gathers every EP rank's tokens first; "
        "capacity = ceil(T·k/E × factor) per expert, padded to it when asked; the router runs in fp32 when "
        "moe_router_dtype is fp32"),
}
