"""Megatron-Core + Transformer Engine rules that more than one layer reads: when they apply, the padded vocabulary,
TE's cuBLASLt workspaces and cached dummy weight gradients, the hidden-dropout masks, the loss variants and the
context-parallel buffers. One function per rule, each citing the file it is read from (NVIDIA/Megatron-LM at
d98e8a64, NVIDIA/TransformerEngine at d0067d0d; keys in calculator/core/megatron_sources.py).

They apply to a training run with stack "megatron" and impl "megatron-te" named (`applies`): the layout's default
stack keeps the earlier, implementation-neutral estimate, which the planner's fast byte model reproduces.
"""
from __future__ import annotations

from functools import lru_cache

from calculator.core.errors import InputError
from calculator.memory import fp8, moe_dispatch
from calculator.memory.fp8 import compute_capability

TE_CUBLAS_STREAMS = 4  # transformer_engine/common/util/multi_stream.cpp: num_compute_streams
TE_UB_STREAMS = 3  # transformer_engine/pytorch/cpp_extensions/gemm.py _NUM_MAX_UB_STREAMS


def applies(w) -> bool:
    """Megatron-Core's own buffers are priced when a full training run names both the stack and the
    implementation (LoRA keeps the fused layer's estimate)."""
    return w.mode == "train" and w.stack == "megatron" and w.impl == "megatron-te" and w.finetune == "full"


def padded_vocab(vocab: int, divisible_by: int, tp: int) -> int:
    """megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding: round the vocabulary up to a multiple
    of make_vocab_size_divisible_by × tensor-parallel size."""
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


def te_workspace_bytes(gpu_id: str | None, grouped_gemm: bool, userbuffers: bool = False) -> tuple[int, int]:
    """(bytes, workspaces) of TE's cuBLASLt workspaces (transformer_engine/pytorch/cpp_extensions/gemm.py
    get_cublas_workspace): 32 MiB + 1 KiB each on compute capability ≥ 9 (4 MiB before); one for the plain GEMMs,
    one per cuBLAS stream (4) once a grouped GEMM (MoE experts) runs, and with userbuffers (--tp-comm-overlap) one
    tensor of _NUM_MAX_UB_STREAMS = 3 of them for the overlapped GEMMs (`get_cublas_workspace(ub=True)`, at
    TransformerEngine 4220403e; the userbuffers themselves are cudaMalloc'd / cuMemCreate'd in C++,
    comm_gemm_overlap.cpp, outside PyTorch's allocator). Unknown GPU: Hopper's size."""
    cc = compute_capability(gpu_id)
    each = 32 * 2**20 + 1024 if cc is None or cc[0] >= 9 else 4_194_304
    n = 1 + (TE_CUBLAS_STREAMS if grouped_gemm else 0) + (TE_UB_STREAMS if userbuffers else 0)
    return n * each, n


@lru_cache(maxsize=256)
def te_weight_shapes(m, tp: int, etp: int) -> tuple[tuple[int, int], ...]:
    """Local 2-D weight shapes of the TE linears of one decoder layer of each kind (megatron/core/models/gpt/
    gpt_layer_specs.py: TELayerNormColumnParallelLinear qkv and fc1, TERowParallelLinear proj and fc2, TE
    GroupedLinear experts holding one weight per expert; MLA's down/up projections). The router, the embedding
    and the output layer are Megatron's own modules, not TE's."""
    h, hd = m.hidden_size, m.head_size
    a = m.num_attention_heads // tp
    shapes: set[tuple[int, int]] = set()
    if m.is_mla:
        q_in = m.q_lora_rank or h
        if m.q_lora_rank:
            shapes.add((m.q_lora_rank, h))
        shapes |= {(a * hd, q_in), (m.kv_lora_rank + m.qk_rope_head_dim, h),
                   (a * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank), (h, a * m.v_head_size)}
    else:
        kv = max(m.kv_heads // tp, 1)
        shapes |= {((a + 2 * kv) * hd, h), (h, a * hd)}
    gate = 2 if m.gated_mlp else 1
    has_dense = any(not m.layer_is_moe(i) for i in range(m.num_hidden_layers))
    for f in set(m.ffn_widths or (m.intermediate_size,)) if has_dense else ():  # per-layer widths: each one
        shapes |= {(gate * f // tp, h), (h, f // tp)}
    if m.is_moe:
        fe = m.expert_intermediate_size // etp
        shapes |= {(gate * fe, h), (h, fe)}
        if m.num_shared_experts or m.shared_expert_intermediate_size:
            fs = (m.shared_expert_intermediate_size or m.num_shared_experts * m.expert_intermediate_size) // tp
            shapes |= {(gate * fs, h), (h, fs)}
    return tuple(sorted(shapes))


def dummy_wgrad_bytes(m, tp: int, etp: int, weight_bytes: int) -> tuple[int, int]:
    """(bytes, tensors) of TE's dummy weight gradients (transformer_engine/pytorch/module/base.py get_dummy_wgrad):
    with gradient-accumulation fusion each TE linear writes its weight gradient into main_grad and hands autograd
    a dummy tensor from a cache keyed by (shape, dtype), created once and kept: one per distinct local weight
    shape, in the weight's dtype."""
    shapes = te_weight_shapes(m, tp, etp)
    return sum(r * c for r, c in shapes) * weight_bytes, len(shapes)


def dropout_masks(T: int, h_sp: int, p: float) -> int:
    """megatron/core/fusions/fused_bias_dropout.py: the jit-fused bias-dropout-add after the attention and after
    the MLP keeps a 1-byte mask of its T × h_sp input each (none when the hidden dropout is 0)."""
    return 2 * T * h_sp if p > 0 else 0


def norm_stats(T: int, h_sp: int, h: int, layernorm: bool) -> int:
    """TE's fused norm keeps fp32 statistics per row it normalises: mu and rsigma for LayerNorm, rsigma for RMSNorm
    (transformer_engine/pytorch/module/layernorm_linear.py saves mu, rsigma); rows are the local tokens, T·h_sp/h
    under sequence parallelism."""
    return (8 if layernorm else 4) * (T * h_sp // h)


def loss_terms(fusion: str, T: int, v_local: int, e: int) -> tuple[int, int, str, str]:
    """(saved, working set beyond it, saved formula, working-set formula) of the loss on this rank's T × V/t logits:
    - none (megatron/core/tensor_parallel/cross_entropy.py): the fp32 upcast becomes the softmax in place and is
      saved; the backward writes the gradient into it and casts it back to the model dtype beside it;
    - native (megatron/core/fusions/fused_cross_entropy.py): its jit-fused steps return a new fp32 buffer each
      instead of writing in place: a second fp32 buffer beside the saved softmax, and the model-dtype gradient;
    - te (transformer_engine/pytorch/cross_entropy.py): the Triton kernel writes the gradient into the
      model-dtype logits in place and saves them; no fp32 copy.
    fp32 logits (a run without --bf16 / --fp16, e = 4): `.float()` returns the logits themselves, so the softmax,
    the saved tensor and the gradient are that one buffer and no cast follows (cross_entropy.py calculate_logits_max,
    calculate_gradients: in place); unfused, nothing beyond the saved softmax."""
    if fusion == "none" and e == 4:
        return 4 * T * v_local, 0, "4·T·V_pad/t", "0 (fp32 logits: gradient in place, no cast)"
    if fusion == "te":
        return e * T * v_local, 0, "e·T·V_pad/t", "0"
    if fusion == "native":
        return 4 * T * v_local, (4 + e) * T * v_local, "4·T·V_pad/t", "(4 + e)·T·V_pad/t"
    return 4 * T * v_local, e * T * v_local, "4·T·V_pad/t", "e·T·V_pad/t"


def sp_gather_buffer(T: int, h: int, e: int, tp: int, sp: bool) -> int:
    """Megatron's own output layer (tensor_parallel/layers.py ColumnParallelLinear →
    LinearWithGradAccumulationAndAsyncCommunication) all-gathers its sequence-parallel input of T × h into the global
    memory buffer "mpu" (megatron/core/utils.py GlobalMemoryBuffer.get_tensor: allocated once at its largest
    request, never freed), in forward and again in backward: e·T·h for the micro-batch's T tokens on this CP rank,
    when TP > 1 with sequence parallelism (the TE layers gather into their own, freed buffers)."""
    return e * T * h if sp and tp > 1 else 0


def cp_ring_saved(e: int, T: int, qd: int, kvd: int) -> int:
    """What TE's ring attention (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
    AttnFuncWithCPAndKVP2P.forward, bf16) keeps beyond the query and the fp32 softmax statistics: the last K/V ring
    buffer `p2p_comm_buffers[-1]` (k and v concatenated by torch.cat into a new tensor, then exchanged: 2·e·T·kvd)
    and its output twice in the model dtype — `out_part = out.to(fwd_nominal_dtype)` saved for backward and a
    second `out.to(fwd_nominal_dtype)` returned to the output projection, which keeps it (e·T·qd each). It saves
    no k or v of its own: the fused qkv output stays only while the query is a view of it."""
    return 2 * e * T * kvd + 2 * e * T * qd


def cp_working_set(comm: str, cp: int, e: int, T: int, qd: int, kvd: int, a: int) -> int:
    """Bytes one layer's context-parallel attention allocates beyond what it saves, while it runs
    (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py):
    - p2p (AttnFuncWithCPAndKVP2P): the ring's two K/V chunks in flight (send and receive buffers, 2·e·T·kvd
      each), two per-step outputs and their fp32 softmax statistics being merged into the output;
    - allgather (AttnFuncWithCPAndKVAllGather): K and V of the whole sequence, cp·2·e·T·kvd;
    - a2a (AttnFuncWithCPAndQKVOA2A): q, k, v and the output re-split by heads, one copy each;
    - a2a+p2p: the all-to-all copies and the ring's buffers."""
    if cp <= 1:
        return 0
    ring = 2 * 2 * e * T * kvd + 2 * (e * T * qd + 4 * a * T)
    if comm == "allgather":
        return cp * 2 * e * T * kvd
    if comm == "a2a":
        return e * T * (2 * qd + 2 * kvd)
    if comm == "a2a+p2p":
        return e * T * (2 * qd + 2 * kvd) + ring
    return ring


def check(m, w) -> None:
    """Refuse what cannot run, naming the field: values out of range (moe_dispatch.check), an FP8 recipe the GPU
    lacks (fp8.check), Megatron-Core inputs away from their defaults without stack megatron and impl megatron-te,
    MoE inputs on a dense model, padding to capacity without a capacity factor."""
    if w.mode != "train":
        return
    moe_dispatch.check(w)
    fp8.check(w)
    off_default = [name for name, default in _DEFAULTS.items() if getattr(w, name) != default]
    if off_default and not applies(w):
        raise InputError(off_default[0], f"{off_default[0]} is an input of Megatron-Core + Transformer Engine "
                                         f"training: set stack 'megatron' and impl 'megatron-te', or put "
                                         f"{off_default[0]} back to {_DEFAULTS[off_default[0]]!r}")
    if w.moe_dispatcher != "alltoall" or w.moe_capacity_factor is not None or w.moe_imbalance != 1.0 \
            or w.moe_pad_to_capacity or w.moe_router_fp32:
        if not m.is_moe:
            raise InputError("moe_dispatcher", "the MoE inputs (dispatcher, capacity factor, imbalance, router "
                                               "dtype) need a mixture-of-experts model: leave them at their "
                                               "defaults")
    if w.tp_comm_overlap and not (w.parallel.tp > 1 and w.parallel.sequence_parallel):
        raise InputError("tp_comm_overlap", "--tp-comm-overlap overlaps tensor-parallel communication with the "
                                            "GEMMs: it needs tp > 1 and sequence parallelism (Megatron's "
                                            "arguments.py), or turn it off")
    _check_optimizer(w)
    _check_recompute_modules(m, w)
    _check_offload_modules(w)
    if w.optimizer_offload_fraction != 1.0 and not w.parallel.offload_optimizer:
        raise InputError("optimizer_offload_fraction", "--optimizer-offload-fraction is read with "
                                                       "--optimizer-cpu-offload: turn offload_optimizer on or leave "
                                                       "the fraction at 1")
    if w.moe_pad_to_capacity and w.moe_capacity_factor is None:
        raise InputError("moe_pad_to_capacity", "padding to capacity needs a capacity factor: set "
                                                "moe_capacity_factor (e.g. 1.0) or turn padding off")


def _check_optimizer(w) -> None:
    """Megatron-Core's optimizer rules (megatron/core/optimizer/optimizer_config.py __post_init__,
    megatron/core/optimizer/__init__.py): the precision-aware optimizer is TE's FusedAdam, Adam only, with the
    distributed optimizer; without it Adam's moments are fp32."""
    if not applies(w):
        return
    if w.precision_aware_optimizer:
        if w.optimizer != "adamw":
            raise InputError("precision_aware_optimizer", "--use-precision-aware-optimizer is TE's FusedAdam: set "
                                                          "optimizer 'adamw' or turn it off")
        if not w.parallel.distributed_optimizer:
            raise InputError("precision_aware_optimizer", "--use-precision-aware-optimizer only runs with the "
                                                          "distributed optimizer: turn on distributed_optimizer")
    elif w.optimizer == "adamw" and w.precision.optimizer_states != "fp32":
        raise InputError("precision.optimizer_states", "Megatron-Core keeps Adam's moments in fp32 unless "
                                                       "--use-precision-aware-optimizer is on: set "
                                                       "optimizer_states 'fp32' or turn precision_aware_optimizer on")


def _check_recompute_modules(m, w) -> None:
    """Megatron-Core's rules for --recompute-modules (megatron/core/transformer/transformer_config.py
    __post_init__): a list only under selective granularity, moe_act with the grouped GEMM and not under delayed
    FP8 scaling; under the other FP8 recipes TE re-saves fc2's original input (set_save_original_input), which is
    not modelled: refused, as are mla_up_proj and layernorm under FP8 (calculator/impls/megatron_recompute.py)."""
    mods = w.recompute_modules
    if mods is None or not applies(w):
        return
    if w.recompute != "selective":
        raise InputError("recompute_modules", "--recompute-modules takes effect with --recompute-granularity "
                                               "selective: set recompute 'selective' or leave the modules unset")
    if "moe_act" in mods and not w.moe_grouped_gemm:
        raise InputError("recompute_modules", "moe_act recompute is only supported with --moe-grouped-gemm: turn "
                                               "the grouped GEMM on or drop moe_act")
    for name in ("mla_up_proj", "layernorm"):
        if name in mods and w.fp8 != "none":
            raise InputError("recompute_modules", f"{name} recompute under an FP8 recipe is not modelled (the "
                                                   "linears after it keep quantized or original inputs, "
                                                   "set_for_recompute_input_layernorm): drop it or train in bf16")
    if w.fp8 != "none" and "moe_act" in mods:
        raise InputError("recompute_modules", "moe_act recompute under an FP8 recipe is not modelled (delayed "
                                               "scaling refuses it; the others re-save fc2's original input): drop "
                                               "it or train in bf16")


def _check_offload_modules(w) -> None:
    """Megatron-Core's rules for --offload-modules (megatron/core/transformer/transformer_config.py __post_init__):
    attn_proj only with core_attn (its input is the core's output, which core_attn's backward needs), no expert_fc1
    / moe_act while the whole MoE layer is recomputed; under an FP8 recipe the linears save quantized inputs, which
    calculator/impls/megatron_offload.py does not price: refused."""
    mods = w.offload_modules
    if not mods or not applies(w):
        return
    if "attn_proj" in mods and "core_attn" not in mods:
        raise InputError("offload_modules", "attn_proj cannot be offloaded without core_attn (Megatron's "
                                            "transformer_config.py): add core_attn or drop attn_proj")
    if w.recompute == "selective" and "moe" in (w.recompute_modules or ()) and {"expert_fc1", "moe_act"} & set(mods):
        raise InputError("offload_modules", "expert_fc1 / moe_act cannot be offloaded while moe recompute wraps the "
                                            "whole MoE layer: drop them or drop moe from the recompute modules")
    if w.fp8 != "none":
        raise InputError("offload_modules", "fine-grained activation offloading under an FP8 recipe is not "
                                            "modelled (the offloaded inputs are quantized): train in bf16 or "
                                            "leave the offload modules empty")


_DEFAULTS = {"fp8": "none", "fp8_param_gather": False, "cross_entropy_fusion": "none", "cp_comm_type": "p2p",
             "mtp_layers": 0, "moe_dispatcher": "alltoall", "moe_capacity_factor": None,
             "moe_pad_to_capacity": False, "moe_router_fp32": False, "moe_imbalance": 1.0,
             "make_vocab_size_divisible_by": 128, "gradient_accumulation_fusion": True, "moe_grouped_gemm": True,
             "deterministic": False, "tp_comm_overlap": False, "precision_aware_optimizer": False,
             "grad_reduce_in_bf16": False, "recompute_modules": None, "optimizer_offload_fraction": 1.0,
             "megatron_fsdp": "none", "offload_modules": ()}
