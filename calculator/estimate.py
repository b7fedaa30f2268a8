"""estimate(model, workload) -> Estimate: per-GPU memory of every pipeline stage, term by term.

Training peak (what torch.cuda.max_memory_allocated reports):
    model states (weights + master + gradients + optimizer)
  + max(forward/backward: saved activations + loss head + transients,  optimizer step transients)
  + ZeRO-3/FSDP gather buffers
nvidia-smi total = peak allocated + allocator fragmentation + NCCL buffers + CUDA context.
Gradients are persistent buffers (DDP, Megatron and DeepSpeed keep them for the whole step).
"""
from __future__ import annotations

from functools import lru_cache, partial
from types import SimpleNamespace

from calculator import activations as act
from calculator import autocast
from calculator import sdpa
from calculator import impls
from calculator import lora
from calculator import inference as inf
from calculator import training as tr
from calculator.dtypes import DTYPE_BITS, nbytes
from calculator.errors import InputError
from calculator.hardware import DEFAULT_CUBLAS_WORKSPACE_BYTES, DEFAULT_CUDA_CONTEXT_BYTES, fits_for
from calculator.model import GenericModel, ModelSpec
from calculator.parallel import (StageShard, check_divisibility, communicators, in_flight_microbatches,
                                 kv_heads_per_rank, stage_shards)
from calculator import parameters as params
from calculator.bounds import check_stages
from calculator.parameters import count_parameters, model_tensor_shapes
from calculator.result import ALLOCATED_COMPONENTS, Estimate, LazyStage, StageEstimate, Term
from calculator import pipeline_stages
from calculator import stacks
from calculator import step_trace
from calculator.stacks.common import StackContext, backward_peak, layer_grad_params, tied_embedding_extra


@lru_cache(maxsize=None)
def _b(dtype: str | None) -> str:
    """'2 B' / '0.5 B' for formulas."""
    if dtype is None:
        return "0 B"
    bits = DTYPE_BITS[dtype]
    return f"{bits // 8} B" if bits % 8 == 0 else f"{bits / 8:g} B"


_new_term = tuple.__new__  # Term(...) without the NamedTuple constructor's Python frame


class _Terms:
    """Collects the terms of one stage."""

    def __init__(self) -> None:
        self.items: list[Term] = []
        # (long-lived bytes, allocated bytes) of each phase of the step: reserved memory only grows, so the
        # fragmentation of every phase counts, not only that of the allocation peak
        self.phases: list[tuple[int, int]] = []
        self.by_component: dict[str, int] = {}
        self.host: list[Term] = []  # moved to CPU RAM by offloading
        # the step's moments for the timeline: (name, long-lived bytes, allocated bytes), in order
        self.timeline: list[tuple[str, int, int]] = []
        self.plan = None  # the step's allocation order (calculator/step_trace.py) for the allocator replay

    def add(self, key: str, component: str, label: str, nbytes_: int, formula: str, substituted: str,
            source: str, note: str = "", keep: bool = False) -> None:
        if nbytes_ or component == "weights" or keep:
            n = int(nbytes_)
            self.items.append(_new_term(Term, (key, component, label, n, formula, substituted, source, note)))
            by = self.by_component
            by[component] = by.get(component, 0) + n

    def extend(self, terms: tuple[Term, ...]) -> None:
        """Terms built (and filtered by add) before."""
        self.items.extend(terms)
        by = self.by_component
        for x in terms:
            by[x.component] = by[x.component] + x.bytes if x.component in by else x.bytes

    def total(self, components: frozenset[str] | None = None) -> int:
        if components is None:
            return sum(self.by_component.values())
        return sum(v for k, v in self.by_component.items() if k in components)


@lru_cache(maxsize=64)
def _gpu(w_gpu: str | None):
    if not w_gpu:
        return None
    from calculator.presets import get_gpu  # data loader; imported lazily so the math has no I/O at import
    return get_gpu(w_gpu)


@lru_cache(maxsize=1)
def _all_gpus() -> tuple:
    from calculator.presets import list_gpus
    return tuple(list_gpus())


_LONG_LIVED = frozenset({"weights", "master_weights", "gradients", "optimizer_states", "kv_cache"})


@lru_cache(maxsize=256)
def _nccl_label(groups: tuple[tuple[str, int], ...]) -> str:
    return "NCCL buffers (" + ", ".join(f"{k}={v}" for k, v in groups) + ")"


def _overheads(t: _Terms, w, gpu, peak_allocated: int, comm_groups: dict[str, int]) -> None:
    """Line items outside the tensors: allocator fragmentation, NCCL communicators, CUDA context."""
    o = w.overheads
    if o.fragmentation_pct is not None:
        frag = int(peak_allocated * o.fragmentation_pct / 100)
        t.add("fragmentation", "fragmentation", "Allocator fragmentation (flat)", frag,
              "frag% × peak allocated", ("{:g}% × {:,} B", o.fragmentation_pct, peak_allocated), "allocator",
              "reserved − allocated in PyTorch's caching allocator, as a flat share you set")
    elif t.plan is not None:
        r = step_trace.replayed(t.plan, w.expandable_segments)
        # a peak the replay does not reach (a transient it does not order) lands in blocks the replay left free
        frag = max(0, r.peak_reserved - max(r.peak_allocated, peak_allocated))
        t.add("fragmentation", "fragmentation", "Allocator: reserved − allocated", frag,
              "max reserved (replayed over build + two steps) − max(replayed, estimated peak allocated)",
              ("{:,} − max({:,}, {:,}) B{}", r.peak_reserved, r.peak_allocated, peak_allocated,
               " (expandable segments)" if w.expandable_segments else ""),
              "caching-allocator", "PyTorch's caching allocator rules (segments of 2 / 20 MiB or the request "
              "rounded to 2 MiB, best-fit reuse of freed blocks, splitting, no release without empty_cache) over "
              "the step's tensors in the order they are allocated and freed")
    else:
        phases = t.phases or [(t.total(_LONG_LIVED), peak_allocated)]
        a, b = o.fragmentation_states_pct / 100, o.fragmentation_working_pct / 100
        reserved, states, working = max((alloc + a * long + b * (alloc - long), long, alloc - long)
                                        for long, alloc in phases)
        frag = max(0, int(reserved) - peak_allocated)
        t.add("fragmentation", "fragmentation", "Allocator fragmentation", frag,
              "max over phases (allocated + a × long-lived + b × working set) − peak allocated",
              ("{:g}% × {:,} + {:g}% × {:,} B{}", o.fragmentation_states_pct, states, o.fragmentation_working_pct,
               working, " at the phase whose reserved memory is highest" if len(phases) > 1 else ""),
              "allocator-calibration", "reserved − allocated: the churn of short-lived blocks fragments far more "
              "than long-lived states (fit to published nvidia-smi figures; an upper value with FlashAttention)")
    if o.include_comm_buffers and comm_groups:
        n = len(comm_groups)
        t.add("comm_buffers", "comm_buffers", _nccl_label(tuple(comm_groups.items())), n * o.nccl_bytes_per_group,
              "n_communicators × buffer per communicator", ("{} × {:,} B", n, o.nccl_bytes_per_group), "nccl")
    if o.cuda_context_bytes is not None:
        ctx, where = o.cuda_context_bytes, "set by you"
    elif gpu is not None:
        ctx, where = gpu.cuda_context_bytes, f"typical on {gpu.name}"
    else:
        ctx, where = DEFAULT_CUDA_CONTEXT_BYTES, "default; pick a GPU for its own value"
    t.add("cuda_context", "cuda_context", "CUDA context", ctx, "C_ctx", ("{:,} B ({})", ctx, where), "cuda-context")


def _model_states(t: _Terms, m: ModelSpec, w, shard: StageShard) -> tuple[int, int]:
    """Weights, master weights, gradients and optimizer state of one GPU; returns (params held, largest tensor)."""
    p, prec = w.parallel, w.precision
    dense_group = p.shard_group
    expert_group = max(1, (p.dp * p.cp * p.tp) // (p.ep * p.expert_tp))
    if p.zero_shard_size:
        expert_group = min(expert_group, p.zero_shard_size)

    def sharded(stage_min: int, label: str) -> tuple[int, str, str]:
        """Params of this GPU after ZeRO/FSDP at `stage_min`, with formula pieces."""
        on = p.zero >= stage_min or (label == "opt" and p.distributed_optimizer)
        if not on or (dense_group == 1 and expert_group == 1):
            return shard.total, "N_gpu", f"{shard.total:,}"
        n = -(-shard.dense // dense_group) + -(-shard.experts // expert_group)
        if shard.experts:
            return n, "N_dense/d + N_experts/d_exp", f"{shard.dense:,}/{dense_group} + {shard.experts:,}/{expert_group}"
        return n, "N_gpu / d", f"{shard.total:,} / {dense_group}"

    n_w, f_w, s_w = sharded(3, "w")
    t.add("weights", "weights", f"Weights ({prec.params})", tr.weight_bytes(n_w, prec.params),
          f"{f_w} × b_param", f"{s_w} × {_b(prec.params)}",
          ("fsdp" if p.zero_shard_size else "zero") if p.zero >= 3 else "transformer-math")
    n_o, f_o, s_o = sharded(1, "opt")
    src_o = "megatron-distopt" if p.distributed_optimizer else ("zero" if p.zero else "mixed-precision")
    if prec.master_weights:
        t.add("master_weights", "master_weights", f"Master weights ({prec.master_weights})",
              tr.master_weight_bytes(n_o, prec.master_weights), f"{f_o} × b_master",
              f"{s_o} × {_b(prec.master_weights)}", src_o)
    n_g, f_g, s_g = sharded(2, "g")
    t.add("gradients", "gradients", f"Gradients ({prec.grads})", tr.gradient_bytes(n_g, prec.grads),
          f"{f_g} × b_grad", f"{s_g} × {_b(prec.grads)}", "zero" if p.zero >= 2 else (
              "megatron-memory" if prec.grads == "fp32" and prec.params != "fp32" else "transformer-math"))
    frac = tr.adafactor_factored_fraction(model_tensor_shapes(m)) if w.optimizer == "adafactor" else 1.0
    opt_bytes = tr.optimizer_state_bytes(n_o, shard.tensors, w.optimizer, prec.optimizer_states, frac)
    b_opt, o = _b(prec.optimizer_states), w.optimizer
    whole = o == "adamw-8bit" and n_o == count_parameters(m).total  # every tensor unsplit on this GPU
    if whole:
        opt_bytes = tr.bnb_adamw8bit_state_bytes(model_tensor_shapes(m))
    if o == "adamw":
        formula, subst, src = ("2 × N × b_opt + 4 B × n_tensors", f"2 × {s_o} × {b_opt} + 4 B × {shard.tensors}",
                               "torch-adamw")
    elif o == "adamw-8bit" and whole:
        formula, subst, src = ("Σ_tensors (2·n + 8·⌈n/256⌉, or 8·n under 4096 elements) + 2 KiB of maps",
                               f"{n_o:,} params in {shard.tensors} tensors", "bnb-8bit")
    elif o == "adamw-8bit":
        formula, subst, src = ("2 × (N × 1 B + ⌈N/256⌉ × 4 B) + 4 B × n_tensors",
                               f"2 × ({s_o} × 1 B + ⌈{n_o:,}/256⌉ × 4 B) + 4 B × {shard.tensors}", "bnb-8bit")
    elif o in ("sgd-momentum", "lion"):
        formula, subst, src = ("N × b_opt", f"{s_o} × {b_opt}", "sgd" if o == "sgd-momentum" else "lion")
    elif o == "adafactor":
        formula, subst, src = ("N × φ × b_opt + 4 B × n_tensors (φ = factored elements per param)",
                               f"{s_o} × {frac:.5f} × {b_opt} + 4 B × {shard.tensors}", "adafactor")
    else:  # sgd without momentum, or no optimizer
        formula, subst, src = ("0", "0", "sgd")
    t.add("optimizer_states", "optimizer_states", f"Optimizer states ({w.optimizer})", opt_bytes, formula, subst, src)
    return n_o, params.largest_tensor(m) // p.tp


@lru_cache(maxsize=256)
def _states_of_shard(m: ModelSpec, parallel, precision, optimizer: str, shard: StageShard) -> tuple:
    """(terms, params held, largest tensor) of _model_states: the same for every batch and sequence, built once."""
    t = _Terms()
    n_o, largest = _model_states(t, m, SimpleNamespace(parallel=parallel, precision=precision, optimizer=optimizer),
                                 shard)
    return tuple(t.items), n_o, largest


def _lora_model_states(t: _Terms, m: ModelSpec, w, shard: StageShard) -> tuple[int, int]:
    """LoRA / QLoRA: the frozen base (QLoRA: NF4 linears) plus trainable adapters with their master weights,
    gradients and optimizer state (Hu et al. 2021; Dettmers et al. 2023)."""
    p, prec = w.parallel, w.precision
    moe_layers = shard.moe_layers
    dense_layers = (shard.last_layer - shard.first_layer) - moe_layers
    per_dense = lora.adapter_params(m, w.lora_rank, w.lora_targets, False)
    per_moe = lora.adapter_params(m, w.lora_rank, w.lora_targets, True) if moe_layers else 0
    n_t = -(-(dense_layers * per_dense + moe_layers * per_moe) // p.tp)
    tensors = dense_layers * lora.adapter_tensors(m, w.lora_targets, False) + (
        moe_layers * lora.adapter_tensors(m, w.lora_targets, True) if moe_layers else 0)
    zero3 = p.zero >= 3 and p.shard_group > 1
    g = p.shard_group if zero3 else 1
    if w.finetune == "qlora":
        linear, rest = shard.layer_linear, shard.total - shard.layer_linear
        base = inf.quantized_weight_bytes(linear, "nf4", 64) + nbytes(rest, prec.params)
        t.add("weights", "weights", f"Frozen base weights (NF4 linears, {prec.params} embeddings/norms)",
              -(-base // g), "N_linear × 0.5 B + ⌈N_linear/64⌉ × 4 B + N_other × b_param" + (" / d" if zero3 else ""),
              f"{linear:,} × 0.5 B + absmax + {rest:,} × {_b(prec.params)}" + (f" / {g}" if zero3 else ""),
              "peft-kbit" if w.kbit_prep else "quantization",
              "prepare_model_for_kbit_training cast every non-4-bit weight to fp32" if w.kbit_prep else "")
    else:
        t.add("weights", "weights", f"Frozen base weights ({prec.params})", -(-nbytes(shard.total, prec.params) // g),
              "N_gpu × b_param" + (" / d" if zero3 else ""), f"{shard.total:,} × {_b(prec.params)}"
              + (f" / {g}" if zero3 else ""), "transformer-math")
    fp32 = w.lora_adapter_dtype == "fp32"  # PEFT's autocast_adapter_dtype: adapters, grads in fp32, no master
    a_dtype, g_dtype, master = ("fp32", "fp32", None) if fp32 else (prec.params, prec.grads, prec.master_weights)
    t.add("weights.adapters", "weights", f"LoRA adapters (r = {w.lora_rank}, {w.lora_targets}, {a_dtype})",
          nbytes(n_t, a_dtype), "Σ_adapted r·(in + out) × b_adapter",
          f"{n_t:,} × {_b(a_dtype)}", "lora")
    n_o = -(-n_t // p.shard_group) if (p.zero >= 1 or p.distributed_optimizer) else n_t
    n_g = -(-n_t // p.shard_group) if p.zero >= 2 else n_t
    if master:
        t.add("master_weights", "master_weights", f"Adapter master weights ({master})",
              nbytes(n_o, master), "N_trainable × b_master", f"{n_o:,} × {_b(master)}", "mixed-precision")
    t.add("gradients", "gradients", f"Adapter gradients ({g_dtype})", nbytes(n_g, g_dtype),
          "N_trainable × b_grad", f"{n_g:,} × {_b(g_dtype)}", "lora")
    t.add("optimizer_states", "optimizer_states", f"Optimizer states ({w.optimizer}, adapters only)",
          tr.optimizer_state_bytes(n_o, tensors, w.optimizer, prec.optimizer_states), "per optimizer, N_trainable",
          f"{n_o:,} trainable params, {tensors} tensors", "lora")
    largest = max((w.lora_rank * max(i, o) for _, i, o in lora.adapted_linears(m, w.lora_targets, False)),
                  default=0)
    return n_o, largest


def _stage_training(m: ModelSpec, w, shard: StageShard, gpu) -> StageEstimate:
    t = _Terms()
    shared = pipeline_stages.shared_by_stages(m, w)
    w, stack, ws, d, code = shared.w, shared.stack, shared.ws, shared.d, shared.code
    p = ws.parallel
    if w.finetune == "full":
        terms, n_opt, largest_tensor = _states_of_shard(m, p, ws.precision, ws.optimizer, shard)
        t.extend(terms)
    else:
        n_opt, largest_tensor = _lora_model_states(t, m, ws, shard)
    if p.offload_optimizer or p.offload_params:
        _offload(t, ws, shard)
    grads = born = t.by_component.get("gradients", 0)
    sm = stack.memory(StackContext(m, ws, shard, grads, _grad_dtype(ws), original=w))
    if sm.grads_whole_step:
        born = 0
        if sm.gradient_note:
            t.items = [x._replace(note=sm.gradient_note) if x.component == "gradients" else x for x in t.items]
    else:  # born in backward, freed after the step: counted where the backward is, not with the states
        t.items = [x for x in t.items if x.component != "gradients"]
        t.by_component["gradients"] = 0
    for x in sm.persistent:
        t.add(*x.__dict__.values())
    if w.activation_model != "textbook":  # the textbook model has a flat overhead instead
        _cublas(t, w, gpu, threads=2)
    states = t.total(_LONG_LIVED) + sum(x.bytes for x in sm.persistent if x.component not in _LONG_LIVED) + \
        t.by_component.get("transient", 0)
    flight = in_flight_microbatches(p, shard.stage)
    layers = range(shard.first_layer, shard.last_layer)
    n_moe = shard.moe_layers
    n_dense = len(layers) - n_moe
    recompute_ws = loss_ws = 0
    dense_l = moe_l = head = None
    if w.activation_model == "textbook":
        per = act.textbook_layer(m, w)
        t.add("activations.layers", "activations", "Activations (Korthikanti et al.)", int(flight * len(layers) * per),
              "m_inflight × L_stage × s·b·h·(34 + 5·a·s/h)" if w.recompute == "none" else
              ("m_inflight × L_stage × 34·s·b·h" if w.recompute == "selective" else "m_inflight × L_stage × 2·s·b·h"),
              ("{:g} × {} × {:,} B", flight, len(layers), per), "korthikanti")
    elif w.activation_model == "fujii":
        per_dense, per_moe = act.fujii_layer(m, w, False), act.fujii_layer(m, w, True) if n_moe else 0
        t.add("activations.layers", "activations", "Activations (Fujii et al.)",
              int(flight * (n_dense * per_dense + n_moe * per_moe)),
              "m_inflight × L_stage × s·b·h·(12 + 4k/a + 8f/h) / (t·c)",
              ("{:g} × ({} × {:,} + {} × {:,}) B", flight, n_dense, per_dense, n_moe, per_moe), "fujii")
    else:
        lora_ft = w.finetune != "full"
        # PEFT without checkpointing: the first layer's input does not require grad, so its first norm saves nothing
        first_discount = int(flight * code.first_layer_without_input_grad(m, d)) if (
            lora_ft and w.recompute not in ("full", "op") and shard.has_embedding) else 0
        masked = sdpa.masked_layers(m, w, layers)  # SDPA layers with a padding or sliding-window mask
        dense_l = shared.layer(False) if n_dense else None
        moe_l = shared.layer(True) if n_moe else None
        if w.recompute in ("full", "op"):
            if w.recompute == "full":
                per = act.full_recompute_layer(d)
                t.add("activations.layers", "activations", "Layer inputs (full recompute)",
                      int(flight * len(layers) * per), "m_inflight × L_stage × e·T·h",
                      ("{:g} × {} × {} × {:,} × {:,}", flight, len(layers), d.e, d.T, d.h_sp),
                      "pipeline-1f1b" if p.pp > 1 else "hf-checkpointing")
            else:
                per = act.op_selective_layer(m, d)
                per_moe = act.op_selective_layer(m, d, moe=True) if n_moe else 0
                t.add("activations.layers", "activations", "Layer inputs + kept matmul and SDPA outputs (op-level "
                      "selective AC)", int(flight * (n_dense * per + n_moe * per_moe)),
                      "m_inflight × L_stage × (e·T·(h + Σ every other mm output + qd) + 4·a·T)",
                      ("{:g} × ({} × {:,} + {} × {:,}) B", flight, n_dense, per, n_moe, per_moe),
                      "torchtitan-op-sac")
            if w.attention == "eager":
                # the backward peaks in the attention's softmax backward: the layer's norms and attention part,
                # plus fp32 gradients of the scores beyond the saved (4 + e) bytes per score
                recompute_ws = max(x.norms + x.attention for x in (dense_l, moe_l) if x is not None) + (
                    (8 - d.e) * d.a * d.b * d.s * d.s_kv)
            else:
                recompute_ws = max(x.total for x in (dense_l, moe_l) if x is not None)
            if masked:  # a masked layer recomputes SDPA's efficient kernel with its bias
                recompute_ws += sdpa.masked_layer_extra(d, m, False)
        else:
            attn_src = "mla" if m.is_mla else ("hf-eager-attention" if w.attention == "eager" else "flash-attention")
            code_src = impls.SOURCES[w.impl]
            sources = ("pipeline-1f1b" if p.pp > 1 else code_src, attn_src, "hf-moe" if n_moe else code_src)
            for i, (key, term_key, label) in enumerate(_ACTIVATION_PARTS):
                per_dense = dense_l[i] if dense_l else 0  # LayerActivations = (norms, attention, mlp)
                per_moe = moe_l[i] if moe_l else 0
                total = int(flight * (n_dense * per_dense + n_moe * per_moe))
                formula = _ACTIVATION_FORMULA[key].format(d.T)
                if i == 0 and first_discount:
                    total -= first_discount
                    formula += " − first layer's input norm (no input grads)"
                subst = (("{:g} × ({} × {:,} + {} × {:,}) B", flight, n_dense, per_dense, n_moe, per_moe) if n_moe
                         else ("{:g} × {} × {:,} B", flight, n_dense, per_dense))
                t.add(term_key, "activations", label, total, formula, subst, sources[i], _exact_note(key, m, w))
        input_grads = not lora_ft or w.recompute in ("full", "op")  # HF enables input grads for checkpointing
        if shard.has_embedding:
            emb = act.embedding_saved(m, d, input_grads)
            if emb:
                t.add("activations.embedding", "activations", "Embedding dropout mask", int(flight * emb),
                      "m_inflight × T·h × 1 B", ("{:g} × {:,} B", flight, emb), "hf-llama")
        shared = act.rotary_saved(m, d)
        if shared:
            t.add("activations.rotary", "activations", "RoPE cos/sin tables", int(flight * shared),
                  "m_inflight × 2·s·d_head·e",
                  ("{:g} × 2 × {:,} × {} × {}", flight, d.s, shared // (2 * d.s * d.e), d.e),
                  "hf-llama")
        if w.attention == "eager" and w.recompute != "none" and not m.is_mla:
            mask = act.eager_mask_saved(d)
            t.add("activations.mask", "activations", "Causal mask (input of the recomputed calls)", int(flight * mask),
                  "m_inflight × e·b·s·s", ("{:g} × {} × {} × {:,} × {:,}", flight, d.e, d.b, d.s, d.s_kv),
                  "hf-checkpointing")
        elif masked and w.recompute == "full":
            n_masks = sdpa.mask_tensors(m, w, layers)
            t.add("activations.mask", "activations", "4-D attention masks (inputs of the recomputed calls)",
                  int(flight * n_masks * sdpa.mask_bytes(d)), "m_inflight × masks × 1 B × b·s·s",
                  ("{:g} × {} × {} × {:,} × {:,}", flight, n_masks, d.b, d.s, d.s_kv), "sdpa-mask")
        elif masked:
            per = sdpa.masked_layer_extra(d, m, w.recompute == "selective")
            t.add("activations.sdpa_mask", "activations", "SDPA with a mask: bias and repeated k/v per masked layer",
                  int(flight * masked * per), "m_inflight × L_masked × (e·b·s·s + e·T·2·(qd − kvd) if repeated)",
                  ("{:g} × {} × {:,} B", flight, masked, per), "sdpa-mask",
                  "padded batch" if w.padded_batch else f"sliding-window layers ({m.sliding_window:,} < {w.seq_len:,})")
        if w.finetune == "full" and autocast.applies(w):
            head_w = -(-m.vocab_size * m.hidden_size // p.tp) if shard.has_head else 0
            copies = autocast.weight_copy_bytes(shard.layer_linear, head_w, d.e)
            t.add("activations.autocast_weights", "activations", "bf16 weight copies cached by autocast",
                  copies, "e × (N_layer_linear + V·h/t)", ("{} × ({:,} + {:,})", d.e, shard.layer_linear, head_w),
                  "torch-autocast", "kept by each linear from the forward to its backward")
        head = code.head(m, w, d) if shard.has_head else None
        if head:
            for h in head.saved:
                t.add(f"logits.{h.key}", "logits", h.label, h.bytes, h.formula, h.substituted, h.source)
            loss_ws = head.transient
        # Backward peaks either at the loss (logits and their gradients) or, with full recompute, while one layer
        # is recomputed — by then the loss head's saved tensors are freed.
        freed = t.by_component.get("logits", 0)
        if recompute_ws and recompute_ws - freed > loss_ws:
            t.add("transient.recompute", "transient", "One layer recomputed during backward", recompute_ws - freed,
                  "activations of one layer − the loss head's (freed by then)",
                  ("{:,} − {:,} B", recompute_ws, freed),
                  "hf-checkpointing", f"exceeds the loss backward's {loss_ws:,} B")
        elif loss_ws:
            t.add("transient.loss", "transient", head.transient_label, loss_ws, head.transient_formula,
                  head.transient_substituted, head.transient_source,
                  f"one recomputed layer needs {max(0, recompute_ws - freed):,} B" if recompute_ws else "")
    if w.finetune == "qlora":
        dq = 2 * params.largest_layer_linear(m) // p.tp
        t.add("transient.dequant", "transient", "bf16 dequantization of one 4-bit linear", dq,
              "2 B × max(in × out)", f"2 × {dq // 2:,}", "quantization",
              "bitsandbytes dequantizes each NF4 weight to bf16 for its matmul, one linear at a time")
    if w.activation_model != "textbook" and not (stacks.resolve(w) == "deepspeed" and p.shard_group == 1
                                                  and p.zero >= 3):
        for x in sm.at_peak:
            t.add(*x.__dict__.values())
    # The replayed loop is data parallel only (no 1F1B schedule, no TP/CP/EP buffers). It runs for one GPU and for a
    # stack the user names (--stack fsdp2 --dp 8); a layout over several GPUs with the default stack keeps the
    # calibrated shares: a replay costs tens of ms, too much for the planner's hundreds of layouts.
    if w.activation_model == "exact" and (dense_l or moe_l) and p.pp == p.tp == p.cp == p.ep == 1 and (
            p.world_size == 1 or w.stack is not None) and len(layers) <= step_trace.MAX_REPLAY_LAYERS:
        t.plan = step_trace.training_plan(m, w, ws, shard, d, dense_l or moe_l, head, sm, _grad_dtype(ws))
    fwd_bwd = t.total() - states  # everything above the long-lived states during forward and backward
    saved = t.by_component.get("activations", 0) + t.by_component.get("logits", 0)
    if born:
        fwd_bwd = _gradients_born_in_backward(t, m, ws, shard, sm, born, fwd_bwd, recompute_ws, flight)
    # Optimizer step: activations are freed; its temporaries can exceed the fwd/bwd peak.
    # PEFT's fp32 adapters are their own master copy: their fp32 gradients need no upcast
    fp32_adapters = w.finetune != "full" and w.lora_adapter_dtype == "fp32"
    chunk = min(n_opt, sm.step_chunk or n_opt)  # DeepSpeed ZeRO-3: one sub-group at a time
    step = 0 if (w.activation_model == "textbook" or p.offload_optimizer) else tr.optimizer_step_transient(
        chunk, largest_tensor, ws, upcast_grads=not fp32_adapters,
        cast_source=nbytes(chunk, _grad_dtype(ws)) if sm.step_flattens else 0) + born
    t.phases = [(states, states + fwd_bwd), (states, states + step)]
    t.timeline = [("model states", states, states), ("forward: tensors saved", states, states + saved),
                  ("backward: peak", states, states + fwd_bwd), ("optimizer step", states, states + step)]
    if step > fwd_bwd:
        t.add("transient.optimizer_step", "transient", "Optimizer step beyond the fwd/bwd peak", step - fwd_bwd,
              "max(0, step temporaries − fwd/bwd working set)", ("{:,} − {:,} B", step, fwd_bwd), "torch-adamw",
              f"{w.optimizer_impl} optimizer step temporaries{' + fp32 upcast of the gradients' if ws.precision.master_weights and ws.precision.grads != ws.precision.master_weights else ''}"
              + (" + every gradient (born in backward, freed after the step)" if born else ""))
    return _finish(t, w, shard, gpu, sm.nccl_communicators)


def _grad_dtype(w) -> str:
    return "fp32" if w.finetune != "full" and w.lora_adapter_dtype == "fp32" else w.precision.grads


def _cublas(t: _Terms, w, gpu, threads: int) -> None:
    """cuBLAS workspaces: PyTorch gives each (cuBLAS handle, stream) its own workspace from the caching allocator
    (aten/src/ATen/cuda/CublasHandlePool.cpp, getChosenWorkspaceSize: 32 MiB on Hopper and Blackwell, 8.125 MiB
    before); handles are per thread, and autograd runs the backward on its own device thread: 2 in training."""
    o = w.overheads
    each = o.cublas_workspace_bytes if o.cublas_workspace_bytes is not None else (
        gpu.cublas_workspace_bytes if gpu is not None else DEFAULT_CUBLAS_WORKSPACE_BYTES)
    t.add("transient.cublas", "transient", "cuBLAS workspaces", threads * each, "threads × W_cublas",
          ("{} × {:,} B", threads, each), "cublas-workspace",
          "forward thread + autograd's backward thread" if threads == 2 else "one thread")


@lru_cache(maxsize=256)
def _layer_grad_bytes(m: ModelSpec, first: int, last: int, tp: int, expert_split: int, per_param: float) -> tuple:
    """Gradient bytes of each decoder layer of a stage (`per_param` bytes per parameter on this GPU)."""
    return tuple(int(n * per_param) for n in layer_grad_params(m, first, last, tp, expert_split))


def _gradients_born_in_backward(t: _Terms, m: ModelSpec, w, shard: StageShard, sm, grads: int, loss_peak: int,
                                recompute_ws: int, flight: float) -> int:
    """Gradients created in backward and freed after the step (stacks/common.backward_peak): the gradients line
    holds what is alive at the forward/backward peak beyond the loss backward. Returns the new fwd/bwd peak."""
    p = w.parallel
    per_param = grads / shard.total if shard.total else 0.0  # gradient bytes per parameter on this GPU
    acts = t.by_component.get("activations", 0)
    n_layers = shard.last_layer - shard.first_layer
    layer_total = sum(x.bytes for x in t.items if x.key.startswith("activations.") and x.key.split(".")[1] in
                      ("norms", "attention", "mlp", "layers"))
    layer_acts = (layer_total // n_layers,) * n_layers if n_layers else ()
    if w.finetune == "full":
        layer_grads = _layer_grad_bytes(m, shard.first_layer, shard.last_layer, p.tp, p.ep * p.expert_tp, per_param)
        counts = count_parameters(m)
        head = (counts.final_norm + -(-(counts.lm_head or counts.embedding) // p.tp)) if shard.has_head else 0
        emb = -(-counts.embedding // p.tp) if shard.has_embedding and not (m.tie_word_embeddings and shard.has_head) \
            else 0
        tied = tied_embedding_extra(m, p.tp, _grad_dtype(w), w.precision.params == w.precision.activations) if (
            shard.has_head and shard.has_embedding) else 0
        head_g, emb_g = int(head * per_param), int(emb * per_param)
    else:  # adapters only: spread over the layers
        layer_grads = (grads // max(n_layers, 1),) * n_layers
        head_g = emb_g = tied = 0
    peak = backward_peak(loss_peak=loss_peak, activations=acts, layer_acts=layer_acts, layer_grads=layer_grads,
                         head_grads=head_g, embedding_grads=emb_g, tied_extra=tied, recompute_ws=int(flight * recompute_ws),
                         layer_backward=sm.layer_backward)
    t.add("gradients", "gradients", f"Gradients ({_grad_dtype(w)}) alive at the peak", peak.bytes - loss_peak,
          "max(loss, first layer, last layer, embedding backward) − loss backward",
          partial(_born_text, grads, peak), stacks.module(w).SOURCE,
          "no gradient exists during the forward pass: each is born as its layer is back-propagated and "
          "zero_grad(set_to_none=True) frees all after the step", keep=True)
    return peak.bytes


_NOTES = {
    "norms": "HF RMSNorm keeps an fp32 copy of its input (4 B/elem) plus the normalised input: ~12·s·b·h per layer "
             "in bf16, not the textbook 4",
    "flash": "FlashAttention: q, k, v unexpanded (GQA), output, fp32 logsumexp — no s² term",
    "eager": "eager: expanded k/v and the a·b·s² scores in fp32 + model dtype",
    "sdpa": "SDPA: FlashAttention's tensors without a mask; a masked layer adds its bias and repeated k/v (below)",
    "selective": "selective recompute: the attention core is recomputed; its inputs q, k, v stay saved",
    "moe": "MoE: every token is copied to its top-k experts",
    "gated": "gated MLP: gate, up, activation and product (4·e·T·f)",
    "plain": "plain MLP: fc1 output and activation output",
}


_ACTIVATION_PARTS = (("norms", "activations.norms", "Activations: norms"),
                     ("attention", "activations.attention", "Activations: attention"),
                     ("mlp", "activations.mlp", "Activations: MLP"))
_ACTIVATION_FORMULA = {k: f"m_inflight × L_stage × A_{k}(T={{:,}})" for k in ("norms", "attention", "mlp")}


def _born_text(grads: int, peak) -> str:
    where = ", ".join(f"{name} {b / 1e9:.2f} GB" for name, b in peak.positions)
    return f"{grads:,} B in all, born in backward; peak at the {peak.position} ({where})"


def _exact_note(key: str, m: ModelSpec, w) -> str:
    if w.impl != "hf" and key in ("norms", "mlp") and not m.is_moe:
        return impls.FUSED_NOTES[key]
    if key == "norms":
        return _NOTES["norms"]
    if key == "attention":
        return _NOTES["selective" if w.recompute == "selective" else w.attention]
    return _NOTES["moe" if m.is_moe else ("gated" if m.gated_mlp else "plain")]


def _finish(t: _Terms, w, shard: StageShard, gpu, extra_groups: dict[str, int] | None = None) -> StageEstimate:
    peak = t.total(ALLOCATED_COMPONENTS)
    if w.activation_model == "textbook" and w.mode == "train":
        pct = w.overheads.textbook_overhead_pct
        t.add("framework_overhead", "framework_overhead", f"Framework overhead (flat {pct:g}%)",
              int(peak * pct / 100), "overhead% × (weights + grads + optimizer + activations)",
              ("{:g}% × {:,} B", pct, peak), "textbook-overhead")
    else:
        _overheads(t, w, gpu, peak, {**communicators(w.parallel), **extra_groups} if extra_groups else
                   communicators(w.parallel))
    return StageEstimate(shard.stage, (shard.first_layer, shard.last_layer), tuple(t.items), peak, t.total(),
                         tuple(t.host), tuple(t.timeline))


def _offload(t: _Terms, w, shard: StageShard) -> None:
    """ZeRO-Offload (Ren et al. 2021) / FSDP CPUOffload: gradients, fp32 master weights and optimizer state live in
    host RAM and the optimizer steps on the CPU; with ZeRO-3 the parameters too (ZeRO-Infinity). The GPU keeps
    the gradients of one unit until they are copied out."""
    p = w.parallel
    moved = {"master_weights", "optimizer_states", "gradients"} | ({"weights"} if p.offload_params else set())
    keep = []
    for term in t.items:
        if term.component in moved:
            t.host.append(term._replace(component="host", note="in host RAM (offloaded)"))
            t.by_component[term.component] -= term.bytes
        else:
            keep.append(term)
    t.items = keep
    if p.offload_params:  # keep a (zero) weights line so the breakdown still names it
        t.items.insert(0, Term("weights", "weights", "Weights (offloaded to host)", 0, "0", "0", "zero-offload"))
    unit = shard.largest_unit
    t.add("transient.grad_offload", "transient", "Gradients of one unit before the copy to host",
          nbytes(unit, w.precision.grads), "U × b_grad (U = largest unit)",
          ("{:,} × {}", unit, _b(w.precision.grads)),
          "zero-offload")


def _stage_inference(m: ModelSpec, w, shard: StageShard, gpu) -> StageEstimate:
    p, t = w.parallel, _Terms()
    wdt = w.weight_dtype or w.precision.params
    layers = range(shard.first_layer, shard.last_layer)
    quantizable = shard.layer_linear  # attention, MLP and expert weights; embeddings, head, norms stay
    rest = shard.total - quantizable
    qbytes = inf.quantized_weight_bytes(quantizable, wdt, w.quant_group_size, w.quant_method)
    llm_int8 = w.quant_method == "llm-int8" and wdt == "int8"
    if llm_int8:  # bitsandbytes: an fp32 scale per output row instead of per group
        out_rows = params.layer_linear_out_rows(m) * len(layers) // (m.num_hidden_layers * p.tp)
        qbytes = inf.llm_int8_weight_bytes(quantizable, out_rows)
    rbytes = nbytes(rest, w.precision.params)
    gptq = w.quant_method == "gptq" and wdt in ("int4", "int8")
    if gptq:
        in_rows = params.layer_linear_in_rows(m) * len(layers) // (m.num_hidden_layers * p.tp)
        g_idx, kernel_buffer = inf.gptq_extras(in_rows, params.largest_layer_linear(m) // p.tp, wdt)
        qbytes += g_idx
    t.add("weights", "weights", f"Weights ({wdt} layers, {w.precision.params} embeddings/norms)", qbytes + rbytes,
          "N_linear × b_w (+ scales per group) + N_other × b_param",
          ("{:,} × {} (+ scales) + {:,} × {}", quantizable, _b(wdt), rest, _b(w.precision.params)),
          "llm-int8" if llm_int8 else ("quantization" if wdt in inf.GROUP_SCALE_BYTES else "transformer-math"))
    kvh = kv_heads_per_rank(m, p.tp)
    total_tokens = w.seq_len + w.gen_tokens
    kv = inf.kv_cache_bytes(m, layers, w.micro_batch, total_tokens, kvh, w.kv_dtype)
    per_tok = inf.kv_bytes_per_token_per_layer(m, kvh, w.kv_dtype)
    if m.is_mla:
        formula = "b × tokens × L_stage × (kv_lora_rank + rope_dim) × b_kv"
        subst = ("{} × {:,} × {} × ({} + {}) × {}", w.micro_batch, total_tokens, len(layers), m.kv_lora_rank,
                 m.qk_rope_head_dim, _b(w.kv_dtype))
        src = "mla"
    else:
        formula = "b × Σ_layers min(tokens, window) × 2 × kv_heads × head_dim × b_kv"
        subst = ("{} × {:,} tokens × {} layers × {:,} B/token/layer{}", w.micro_batch, total_tokens, len(layers),
                 per_tok, "")
        if any(m.layer_is_sliding(i) for i in layers):
            subst = subst[:-1] + (f" (sliding layers capped at {m.sliding_window:,})",)
            src = "sliding-window"
        else:
            src = "kv-cache"
    t.add("kv_cache", "kv_cache", f"KV cache ({w.kv_dtype})", kv, formula, subst, src)
    if gptq and kernel_buffer:
        t.add("transient.gptq_buffer", "transient", "GPTQ 4-bit kernel dequantization buffer", kernel_buffer,
              "2 B × max(in × out)", ("2 × {:,}", kernel_buffer // 2), "quantization",
              "exllama keeps one fp16 buffer of the largest quantized linear per GPU")
    d = act.dims(m, w)
    rope = 0 if m.learned_position_embeddings else (m.qk_rope_head_dim if m.is_mla else m.head_size)
    mlp = inf.prefill_mlp_phase(m, d.T, d.e, m.hidden_size, d.f, rope, p.expert_tp)
    if llm_int8 and m.gated_mlp and not m.is_moe:
        mlp += inf.llm_int8_mlp_extra(d.T, d.e, m.hidden_size, d.f, w.precision.activations == "fp16")
    attn = inf.prefill_attention_phase(m, d.T, d.e, m.hidden_size, d.qd, d.kvd, d.a, d.b, d.s, d.s_kv, rope,
                                       w.attention == "eager")
    # The prefill peak is at the last layer of the stage, with the whole prompt cached in every layer (sliding
    # layers too: the window is applied at the first decode step); the decode peak is the final cache.
    prompt_kv = len(layers) * w.micro_batch * w.seq_len * per_tok
    prefill_peak = prompt_kv + max(mlp, attn)
    decode_peak = kv + inf.decode_working_set(m, d.b, d.e, m.hidden_size, d.f, m.vocab_size // p.tp)
    extra = max(prefill_peak, decode_peak) - kv
    phase = "attention" if attn > mlp else "MLP"
    weights = t.by_component["weights"]
    t.phases = [(weights + prompt_kv, weights + prefill_peak), (weights + kv, weights + decode_peak)]
    if prefill_peak >= decode_peak:
        t.add("activations.prefill", "activations", f"Prefill working set (at the last layer's {phase})", extra,
              "prompt KV + max(MLP phase, attention phase) − final KV",
              ("{:,} + max({:,}, {:,}) − {:,} B", prompt_kv, mlp, attn, kv), "kv-cache",
              "MLP phase: 4·e·T·h + 3·e·T·f + RoPE; eager attention adds (e + 8) B per score and the causal mask")
    else:
        t.add("activations.decode", "activations", "Decode working set (one token, fp32 logits)", extra,
              "b·(4·e·h + 3·e·f + V·(e + 4))", ("{:,} B", decode_peak - kv), "kv-cache")
    _cublas(t, w, gpu, threads=1)
    loaded = weights + t.by_component.get("transient", 0)  # weights + cuBLAS workspace (+ GPTQ's buffer)
    t.timeline = [("weights loaded", loaded, loaded), ("prefill: peak", loaded + prompt_kv, loaded + prefill_peak)]
    for i in sorted({1, max(1, w.gen_tokens // 2), w.gen_tokens} if w.gen_tokens else {0}):
        kv_i = inf.kv_cache_bytes(m, layers, w.micro_batch, w.seq_len + i, kvh, w.kv_dtype)
        t.timeline.append((f"decode: token {i:,}" if i else "decode: last logits", loaded + kv_i,
                           loaded + kv_i + decode_peak - kv))
    return _finish(t, w, shard, gpu)


def _generic(model: GenericModel, w) -> Estimate:
    """Seed 004: params × bytes + grads × bytes (+ optimizer) + batch × activation elements × bytes."""
    t, prec = _Terms(), w.precision
    n = model.total_params
    t.add("weights", "weights", f"Weights ({prec.params})", nbytes(n, prec.params), "N × b_param",
          f"{n:,} × {_b(prec.params)}", "generic-network")
    if w.mode == "train":
        if prec.master_weights:
            t.add("master_weights", "master_weights", "Master weights", nbytes(n, prec.master_weights),
                  "N × b_master", f"{n:,} × {_b(prec.master_weights)}", "mixed-precision")
        t.add("gradients", "gradients", f"Gradients ({prec.grads})", nbytes(n, prec.grads), "N × b_grad",
              f"{n:,} × {_b(prec.grads)}", "generic-network")
        opt = tr.optimizer_state_bytes(n, 0, w.optimizer, prec.optimizer_states)
        t.add("optimizer_states", "optimizer_states", f"Optimizer states ({w.optimizer})", opt,
              "per optimizer", f"{n:,} params", "transformer-math")
    elems = model.activation_elements_per_sample
    a = w.micro_batch * nbytes(elems, prec.activations)
    t.add("activations", "activations", "Activations", a, "batch × elements per sample × b_act",
          f"{w.micro_batch} × {elems:,} × {_b(prec.activations)}", "generic-network")
    gpu = _gpu(w.gpu)
    shard = StageShard(0, 0, 0, n, 0, 0, n, True, True)
    stage = _finish(t, w, shard, gpu)
    check_stages((stage,), model, w)
    fits = partial(fits_for, stage, _all_gpus(), 1, w.overheads.cuda_context_bytes, None)
    return Estimate(model.name, w.mode, n, n, (stage,), 0, fits, (), ("generic network: totals given by you",))


@lru_cache(maxsize=64)
def _assumptions(optimizer_impl: str, activations: str, attention: str) -> tuple[str, ...]:
    return ("gradients are persistent buffers for the whole step (DDP / Megatron / DeepSpeed)",
            f"optimizer step implementation: {optimizer_impl}",
            f"activation dtype {activations}; attention: {attention}")


def _warnings(m: ModelSpec, w) -> tuple[str, ...]:
    out = []
    prec = w.precision
    if w.mode == "train" and prec.master_weights and prec.master_weights == prec.params:
        out.append(f"master weights in {prec.master_weights} duplicate {prec.params} params: usually only kept when "
                   f"params are lower precision")
    if m.attention_sinks and w.attention != "eager":
        out.append("attention sinks (GPT-OSS) need FA3-class kernels; FlashAttention-2 numbers here are not "
                   "validated (the eager path is)")
    if w.activation_model == "textbook":
        out.append("textbook model (Korthikanti et al.): ignores GQA, SwiGLU, fp32 norm copies and the loss head; "
                   "flat overhead instead of line items")
    if w.impl != "hf" and w.mode == "train":
        out.extend(impls.warnings(m, w))
    if w.attention == "eager" and w.seq_len >= 8192:
        out.append("eager attention at long sequence: the a·b·s² scores dominate; FlashAttention avoids them")
    return tuple(out)


def planned_gpus(m: ModelSpec, w, gpu):
    """(plan, bound): the planner's fewest GPUs of this kind for the job and that layout
    (calculator.planner.gpus_needed; None when no layout of up to `bound` GPUs fits), for the fit cards;
    (None, None) when the search for the card would be too large (calculator.planner.CARD_LAYOUT_BUDGET)."""
    from calculator.planner import card_bound, gpus_needed, layout_free
    bound = card_bound(m, layout_free(w, gpu.id))
    plan = gpus_needed(m, w, gpu.id, getattr(gpu, "usable_bytes", gpu.memory_bytes), bound)
    return (None, None) if isinstance(plan, str) else (plan, bound)  # OVER_BUDGET: the sharding estimate stands


def estimate(model: ModelSpec | GenericModel, workload, *, with_fits: bool = True) -> Estimate:
    """Per-GPU memory of every pipeline stage for `workload` on `model`. Raises InputError on bad input."""
    w = workload
    if isinstance(model, GenericModel):
        return _generic(model, w)
    m = model
    check_divisibility(m, w)
    if w.mode == "train":
        stacks.check(w)
    p = w.parallel
    shards = stage_shards(m, p)
    gpu = _gpu(w.gpu)
    if w.mode == "rl":  # a trainer and a rollout engine: the peak over the phases of a step (calculator/rl.py)
        from calculator.rl import estimate_rl
        return estimate_rl(m, w, estimate, gpu, with_fits)
    if w.mode == "infer" and w.engine != "hf":  # a serving engine preallocates its KV pool: calculator/engines
        from calculator import engines
        stages, serving = engines.run(m, w, shards, gpu)
        worst = max(range(len(stages)), key=lambda i: stages[i].total_bytes)
        fits = engines.fits_callable(m, w, shards, _all_gpus(), partial(planned_gpus, m, w)) if with_fits else None
        counts = count_parameters(m)
        return Estimate(m.name, w.mode, counts.total, counts.active_per_token, stages, worst, fits, _warnings(m, w),
                        serving.notes, serving=serving)
    build = _stage_training if w.mode == "train" else _stage_inference
    stages = pipeline_stages.build(build, m, w, shards, gpu)
    check_stages([s for s in stages if not isinstance(s, LazyStage)], m, w)
    worst = max((i for i, s in enumerate(stages) if not isinstance(s, LazyStage)), key=lambda i: stages[i].total_bytes)
    fits = partial(fits_for, stages[worst], _all_gpus(), p.world_size, w.overheads.cuda_context_bytes,
                   None, partial(planned_gpus, m, w)) if with_fits else None
    assumptions = _assumptions(w.optimizer_impl, w.precision.activations, w.attention)
    counts = count_parameters(m)
    return Estimate(m.name, w.mode, counts.total, counts.active_per_token, stages, worst, fits, _warnings(m, w),
                    assumptions)
