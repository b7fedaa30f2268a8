"""What the time estimate needs beyond the workload: achievable efficiencies, links, price (all editable).

The efficiency defaults are calibrated on measured training steps and generate() calls of Hugging Face
`transformers` eager code on one H200 (validation/gpu/timing_compare.py; constants and their fit in
validation/CALIBRATION.md, "Step time"); `matmul_efficiency` is the Hopper BF16 figure, scaled per GPU generation and
GEMM dtype by calculator.timing.efficiency (fitted on published multi-GPU runs, validation/published/throughput/).
Bandwidths: GB/s = 10⁹ bytes per second, per direction.

How the stack overlaps its communication (each None: the stack's own default, calculator.timing.overlap):
- overlap_grad_reduce / overlap_param_gather: Megatron-LM's --overlap-grad-reduce / --overlap-param-gather
  (off by default: megatron/core/distributed/distributed_data_parallel_config.py, so the gradient reduce-scatter
  or all-reduce and the parameter all-gather are exposed); PyTorch DDP and FSDP2 always overlap (bucketed hooks,
  prefetch); DeepSpeed's overlap_comm (off for ZeRO-1/2, on for ZeRO-3: deepspeed/runtime/zero/config.py).
- tp_comm_overlap: Megatron's --tp-comm-overlap (Transformer Engine userbuffers: the TP all-gather / reduce-scatter
  chunked under the GEMMs; off by default), torchtitan's async TP.
- ep_comm_overlap: Megatron's --overlap-moe-expert-parallel-comm (the EP all-to-alls of one micro-batch under another
  micro-batch's compute; off by default).
- full_iteration_cuda_graph: Megatron's full-iteration CUDA graph (the forward-backward replayed from one graph: no
  host time per operator, no MoE host sync; off by default).
- moe_router_cuda_graph: Megatron's per-layer CUDA graphs of the MoE router and the dispatcher's preprocess
  (--cuda-graph-impl transformer_engine --cuda-graph-modules moe_router moe_preprocess): their host work replayed
  by one launch, the rest of the MoE layer's host time and its wait kept (moe_sync.moe_graph_captured_share; off
  by default).
The job's own communication choices are Workload fields (Megatron's --cp-comm-type, --moe-token-dispatcher-type),
priced by calculator.timing.comm_time.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MatmulDtype = Literal["auto", "bf16", "fp16", "fp8", "fp32"]


class TimingInputs(BaseModel):
    """Efficiencies (fractions of the datasheet peaks), host overheads, links and price."""

    # Floors keep every time finite and plausible: a 1% efficiency, 0.1 GB/s link, 10 GFLOP/s, 1 GB/s DRAM.
    model_config = ConfigDict(frozen=True, extra="forbid")

    matmul_efficiency: float = Field(default=0.8, ge=0.01, le=1)  # share of the dense peak a BF16 GEMM reaches on Hopper
    attention_efficiency: float = Field(default=0.485, ge=0.01, le=1)  # share of the peak the flash kernel reaches
    memory_efficiency: float = Field(default=0.478, ge=0.01, le=1)  # share of the DRAM bandwidth elementwise kernels reach
    host_op_us: float = Field(default=47.5, ge=0, le=10_000)  # host time per forward operator (Python + dispatch)
    host_backward_op_us: float = Field(default=14.8, ge=0, le=10_000)  # per backward operator (autograd engine)
    host_inference_op_us: float = Field(default=5.2, ge=0, le=10_000)  # per operator without autograd (generate)
    kernel_gap_us: float = Field(default=2.0, ge=0, le=10_000)  # GPU idle time between dependent kernels
    step_overhead_ms: float = Field(default=2.7, ge=0, le=100_000)  # per training step (Python loop, zero_grad, …)
    decode_step_overhead_ms: float = Field(default=65.8, ge=0, le=100_000)  # per generate() step beyond its kernels
    comm_efficiency: float = Field(default=0.80, ge=0.01, le=1)  # share of a link's bandwidth NCCL reaches
    collective_latency_us: float = Field(default=15.0, ge=0, le=100_000)  # per collective call
    nvlink_gbps: float | None = Field(default=None, ge=0.1, le=100_000)  # per direction; None: the catalogue's / 2
    ib_gbps: float = Field(default=50.0, ge=0.1, le=100_000)  # per GPU per direction: 400 Gb/s NDR = 50 GB/s
    gpus_per_node: int | None = Field(default=None, ge=1, le=1024)  # None: 72 on an NVL72 rack, else 8
    price_per_gpu_hour: float | None = Field(default=None, ge=0, le=1_000_000)  # USD per GPU-hour
    peak_tflops: float | None = Field(default=None, ge=0.01, le=1_000_000)  # override the catalogue's dense peak
    memory_bandwidth_gbps: float | None = Field(default=None, ge=1, le=1_000_000)  # override the catalogue's
    matmul_dtype: MatmulDtype = "auto"  # auto: the activation dtype (fp8: Transformer Engine style FP8 GEMMs)
    overlap_grad_reduce: bool | None = None  # None: the stack's default (calculator.timing.overlap)
    overlap_param_gather: bool | None = None
    tp_comm_overlap: bool = False
    ep_comm_overlap: bool = False  # Megatron's --overlap-moe-expert-parallel-comm (comm_time.ep_exposed_with_overlap)
    full_iteration_cuda_graph: bool = False  # full-iteration CUDA graph: no host time (train_ops.graph_host_share)
    moe_router_cuda_graph: bool = False  # per-layer graphs of the MoE router + preprocess (moe_sync.moe_layer_host_s)
    # host time a MoE layer adds per micro-batch (None: Megatron-Core's fitted constant with impl megatron-te, less
    # what moe_router_cuda_graph captures, else 0; calculator.timing.moe_sync.moe_layer_host_s)
    moe_layer_host_ms: float | None = Field(default=None, ge=0, le=10_000)
