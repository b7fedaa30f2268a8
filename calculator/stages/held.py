"""What a training stage holds for the whole step: weights, fp32 master weights, gradients and optimizer states of
its parameter shard (full fine-tuning), of the adapters with the frozen base (LoRA / QLoRA), and what CPU offload
moves to host RAM. calculator/stages/training.py adds the forward/backward and the optimizer step on top."""

from functools import lru_cache
from types import SimpleNamespace

from calculator.memory import inference as inf
from calculator.memory import lora
from calculator.model import architectures
from calculator.model import parameters as params
from calculator.memory import model_states as tr
from calculator.core.dtypes import nbytes
from calculator.model.spec import ModelSpec
from calculator.memory.parallel import StageShard
from calculator.model.parameters import count_parameters, model_tensor_shapes
from calculator.core.result import Term
from calculator.stacks.common import no_grad_rule
from calculator.stages.terms import TermList, dtype_bytes_text


def _model_states(t: TermList, m: ModelSpec, w, shard: StageShard) -> tuple[int, int]:
    """Weights, master weights, gradients and optimizer state of one GPU; returns (params the optimizer steps,
    largest tensor). w.keeps (grads, states): whether the stack holds a gradient and optimizer state for the
    parameters backward never reaches (stacks.common.NoGradRule; architectures.no_grad_parameters)."""
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
          f"{f_w} × b_param", f"{s_w} × {dtype_bytes_text(prec.params)}",
          ("fsdp" if p.zero_shard_size else "zero") if p.zero >= 3 else "transformer-math")
    n_o, f_o, s_o = sharded(1, "opt")
    src_o = "megatron-distopt" if p.distributed_optimizer else ("zero" if p.zero else "mixed-precision")
    if prec.master_weights:
        t.add("master_weights", "master_weights", f"Master weights ({prec.master_weights})",
              tr.master_weight_bytes(n_o, prec.master_weights), f"{f_o} × b_master",
              f"{s_o} × {dtype_bytes_text(prec.master_weights)}", src_o)
    keeps_grads, keeps_states = w.keeps
    ng, ng_tensors = ((0, 0) if keeps_grads and keeps_states else
                      architectures.no_grad_of_stage(m, shard.first_layer, shard.last_layer, shard.has_embedding))

    ng_experts = architectures.no_grad_expert_parameters(m, shard.first_layer, shard.last_layer) if ng else 0

    def less_no_grad(n: int, f: str, s: str, stage_min: int, label: str) -> tuple[int, str, str]:
        """n, formula and values without the parameters that get no gradient (this GPU's share of them: routed
        experts split over EP × expert TP, and by ZeRO over the expert group)."""
        on = p.zero >= stage_min or (label == "opt" and p.distributed_optimizer)
        dense, experts = ng - ng_experts, -(-ng_experts // (p.ep * p.expert_tp))
        share = (-(-dense // dense_group) if on and dense_group > 1 else dense) + (
            -(-experts // expert_group) if on and expert_group > 1 else experts)
        return n - share, f"({f} − N_no_grad)", f"({s} − {share:,} parameters without gradient)"

    n_g, f_g, s_g = sharded(2, "g")
    if ng and not keeps_grads:
        n_g, f_g, s_g = less_no_grad(n_g, f_g, s_g, 2, "g")
    t.add("gradients", "gradients", f"Gradients ({prec.grads})", tr.gradient_bytes(n_g, prec.grads),
          f"{f_g} × b_grad", f"{s_g} × {dtype_bytes_text(prec.grads)}", "zero" if p.zero >= 2 else (
              "megatron-memory" if prec.grads == "fp32" and prec.params != "fp32" else "transformer-math"))
    if m.compressed is not None:  # DeepSeek-V4's fp32-kept parameters
        _fp32_kept(t, m, prec, w.optimizer, shard, w.keeps)
    tensors = shard.tensors
    if ng and not keeps_states:
        n_o, f_o, s_o = less_no_grad(n_o, f_o, s_o, 1, "opt")
        tensors -= ng_tensors
    frac = tr.adafactor_factored_fraction(model_tensor_shapes(m)) if w.optimizer == "adafactor" else 1.0
    opt_bytes = tr.optimizer_state_bytes(n_o, tensors, w.optimizer, prec.optimizer_states, frac)
    b_opt, o = dtype_bytes_text(prec.optimizer_states), w.optimizer
    whole = o == "adamw-8bit" and n_o + (ng if not keeps_states else 0) == count_parameters(m).total  # all unsplit
    if whole:
        opt_bytes = tr.bnb_adamw8bit_state_bytes(model_tensor_shapes(m)) - (
            tr.bnb_adamw8bit_state_bytes(architectures.no_grad_shapes(m, 0, m.num_hidden_layers)
                                         + architectures.idle_shapes(m))
            if ng and not keeps_states else 0)
    if o == "adamw":
        formula, subst, src = ("2 × N × b_opt + 4 B × n_tensors", f"2 × {s_o} × {b_opt} + 4 B × {tensors}",
                               "torch-adamw")
    elif o == "adamw-8bit" and whole:
        formula, subst, src = ("Σ_tensors (2·n + 8·⌈n/256⌉, or 8·n under 4096 elements) + 2 KiB of maps",
                               f"{n_o:,} params in {tensors} tensors", "bnb-8bit")
    elif o == "adamw-8bit":
        formula, subst, src = ("2 × (N × 1 B + ⌈N/256⌉ × 4 B) + 4 B × n_tensors",
                               f"2 × ({s_o} × 1 B + ⌈{n_o:,}/256⌉ × 4 B) + 4 B × {tensors}", "bnb-8bit")
    elif o in ("sgd-momentum", "lion"):
        formula, subst, src = ("N × b_opt", f"{s_o} × {b_opt}", "sgd" if o == "sgd-momentum" else "lion")
    elif o == "adafactor":
        formula, subst, src = ("N × φ × b_opt + 4 B × n_tensors (φ = factored elements per param)",
                               f"{s_o} × {frac:.5f} × {b_opt} + 4 B × {tensors}", "adafactor")
    else:  # sgd without momentum, or no optimizer
        formula, subst, src = ("0", "0", "sgd")
    t.add("optimizer_states", "optimizer_states", f"Optimizer states ({w.optimizer})", opt_bytes, formula, subst, src)
    return n_o, params.largest_tensor(m) // p.tp


def _fp32_kept(t: TermList, m: ModelSpec, prec, optimizer: str, shard: StageShard,
               keeps: tuple[bool, bool] = (True, True)) -> None:
    """The parameters from_pretrained keeps in fp32 in a low-precision model (DeepseekV4PreTrainedModel.
    _keep_in_fp32_modules_strict; architectures.compressed.fp32_parameters, N32) beside the precision's rule:
    their weights are fp32, autograd gives each an fp32 gradient (a gradient has its parameter's dtype), and
    torch.optim.AdamW's exp_avg / exp_avg_sq (zeros_like of the optimized tensor: the fp32 master, or the
    parameter itself without one) are fp32. Each term is the bytes beyond the precision's own: N32 × (4 − b); the
    gradient and optimizer ones without the CSA indexers' (no gradient) where the stack `keeps` none for them."""
    layers = range(shard.first_layer, shard.last_layer)
    n32 = architectures.compressed.fp32_parameters(m, layers, shard.has_head)
    graded = n32 - architectures.compressed.indexer_fp32_parameters(m, layers)
    opt_dtype = prec.master_weights or prec.params
    for key, component, dtype, per, label, n in (
            ("weights.fp32", "weights", prec.params, 1, "Weights kept in fp32", n32),
            ("gradients.fp32", "gradients", prec.grads, 1, "fp32 gradients of the fp32-kept weights",
             n32 if keeps[0] else graded),
            ("optimizer_states.fp32", "optimizer_states", opt_dtype if optimizer in ("adamw", "sgd-momentum", "lion")
             and prec.optimizer_states != "fp32" else "fp32", 2 if optimizer == "adamw" else 1,
             "fp32 optimizer states of the fp32-kept weights", n32 if keeps[1] else graded)):
        extra = per * (4 - nbytes(1, dtype)) * n
        if extra > 0:
            t.add(key, component, label + f" (DeepSeek-V4, {n:,} parameters)", int(extra),
                  f"{per} × N_fp32 × (4 − b)", f"{per} × {n:,} × (4 − {nbytes(1, dtype):g})", "compressed-attention")


def fp32_not_upcast(m: ModelSpec, w, shard: StageShard, stack=None) -> int:
    """What the optimizer step's gradient upcast (model_states.optimizer_step_transient) does not allocate for
    DeepSeek-V4's fp32-kept parameters (_fp32_kept): their gradients are fp32 already and .to(fp32) returns them,
    4 × N_fp32 under full fine-tuning with fp32 master weights and low-precision gradients; 0 otherwise."""
    prec = w.precision
    if m.compressed is None or w.finetune != "full" or w.optimizer == "none" or not prec.master_weights or (
            prec.grads == prec.master_weights) or w.parallel.offload_optimizer:
        return 0
    layers = range(shard.first_layer, shard.last_layer)
    n32 = architectures.compressed.fp32_parameters(m, layers, shard.has_head)
    if stack is not None and not no_grad_rule(stack, w).states:  # the CSA indexers' are not stepped at all
        n32 -= architectures.compressed.indexer_fp32_parameters(m, layers)
    return 4 * n32


@lru_cache(maxsize=256)
def states_of_shard(m: ModelSpec, parallel, precision, optimizer: str, shard: StageShard,
                    keeps: tuple[bool, bool] = (True, True)) -> tuple:
    """(terms, params stepped, largest tensor) of _model_states: the same for every batch and sequence, built once.
    keeps: the stack's NoGradRule (grads, states)."""
    t = TermList()
    n_o, largest = _model_states(t, m, SimpleNamespace(parallel=parallel, precision=precision, optimizer=optimizer,
                                                       keeps=keeps), shard)
    return tuple(t.items), n_o, largest


def states_for_stack(m: ModelSpec, stack, w, shard: StageShard) -> tuple:
    """(terms, params stepped, largest tensor, gradient bytes left out) of full fine-tuning under `stack` (its
    NoGradRule for the parameters that get no gradient); the last is what those parameters' gradients would be,
    which a stack's own buffers may still hold (DDP's buckets)."""
    rule = no_grad_rule(stack, w)
    terms, n_o, largest = states_of_shard(m, w.parallel, w.precision, w.optimizer, shard, (rule.grads, rule.states))
    left_out = 0
    if not rule.grads:
        every = states_of_shard(m, w.parallel, w.precision, w.optimizer, shard, (True, rule.states))[0]
        left_out = sum(x.bytes for x in every if x.component == "gradients") - sum(
            x.bytes for x in terms if x.component == "gradients")
    return terms, n_o, largest, left_out


def lora_model_states(t: TermList, m: ModelSpec, w, shard: StageShard, stack=None) -> tuple[int, int, int]:
    """LoRA / QLoRA: the frozen base (QLoRA: NF4 linears) plus trainable adapters with their master weights,
    gradients and optimizer state (Hu et al. 2021; Dettmers et al. 2023). Adapters backward never reaches (on a
    top-k indexer's linears: lora.no_grad_adapter_params) get the `stack`'s NoGradRule. Returns (params the
    optimizer steps, largest adapter tensor, gradient bytes left out: what a stack's buckets still hold)."""
    p, prec = w.parallel, w.precision
    layers = range(shard.first_layer, shard.last_layer)
    lora.check_targets(m, w.lora_targets)  # what PEFT refuses (all-linear on its Mamba types, no target found)
    n_layers, tensors = lora.layers_adapter_params(m, w.lora_rank, w.lora_targets, layers)
    rule = no_grad_rule(stack, w) if stack is not None else None
    ng, ng_tensors = (lora.no_grad_adapter_params(m, w.lora_rank, w.lora_targets, layers)
                      if rule is not None and not (rule.grads and rule.states) else (0, 0))
    if shard.has_embedding:  # adapters outside the layers (Gemma 3n / 4 all-linear), with the embedding's stage
        n_outer, t_outer = lora.outer_adapter_params(m, w.lora_rank, w.lora_targets)
        n_layers, tensors = n_layers + n_outer, tensors + t_outer
    n_t = -(-n_layers // p.tp)
    zero3 = p.zero >= 3 and p.shard_group > 1
    g = p.shard_group if zero3 else 1
    if w.finetune == "qlora":
        linear, rest = shard.layer_linear, shard.total - shard.layer_linear
        base = inf.quantized_weight_bytes(linear, "nf4", 64) + nbytes(rest, prec.params)
        t.add("weights", "weights", f"Frozen base weights (NF4 linears, {prec.params} embeddings/norms)",
              -(-base // g), "N_linear × 0.5 B + ⌈N_linear/64⌉ × 4 B + N_other × b_param" + (" / d" if zero3 else ""),
              f"{linear:,} × 0.5 B + absmax + {rest:,} × {dtype_bytes_text(prec.params)}" + (f" / {g}" if zero3 else ""),
              "peft-kbit" if w.kbit_prep else "quantization",
              "prepare_model_for_kbit_training cast every non-4-bit weight to fp32" if w.kbit_prep else "")
    else:
        t.add("weights", "weights", f"Frozen base weights ({prec.params})", -(-nbytes(shard.total, prec.params) // g),
              "N_gpu × b_param" + (" / d" if zero3 else ""), f"{shard.total:,} × {dtype_bytes_text(prec.params)}"
              + (f" / {g}" if zero3 else ""), "transformer-math")
    fp32 = w.lora_adapter_dtype == "fp32"  # PEFT's autocast_adapter_dtype: adapters, grads in fp32, no master
    a_dtype, g_dtype, master = ("fp32", "fp32", None) if fp32 else (prec.params, prec.grads, prec.master_weights)
    t.add("weights.adapters", "weights", f"LoRA adapters (r = {w.lora_rank}, {w.lora_targets}, {a_dtype})",
          nbytes(n_t, a_dtype), "Σ_adapted r·(in + out) × b_adapter",
          f"{n_t:,} × {dtype_bytes_text(a_dtype)}", "lora")
    n_o = -(-n_t // p.shard_group) if (p.zero >= 1 or p.distributed_optimizer) else n_t
    n_g = -(-n_t // p.shard_group) if p.zero >= 2 else n_t
    no_grad = f" (the indexers' {ng:,} left out: no gradient)" if ng else ""
    left_out = 0
    ng_t = -(-ng // p.tp)  # this TP rank's no-grad adapters, then its share where ZeRO / FSDP shards the counts above
    if ng and not rule.grads:
        share = -(-ng_t // p.shard_group) if p.zero >= 2 else ng_t
        n_g -= share
        left_out = nbytes(share, g_dtype)
    if ng and not rule.states:
        share = -(-ng_t // p.shard_group) if (p.zero >= 1 or p.distributed_optimizer) else ng_t
        n_o, tensors = n_o - share, tensors - ng_tensors
    if master:
        t.add("master_weights", "master_weights", f"Adapter master weights ({master})",
              nbytes(n_o, master), "N_trainable × b_master", f"{n_o:,} × {dtype_bytes_text(master)}", "mixed-precision")
    t.add("gradients", "gradients", f"Adapter gradients ({g_dtype})", nbytes(n_g, g_dtype),
          "N_trainable × b_grad", f"{n_g:,} × {dtype_bytes_text(g_dtype)}" + (
              no_grad if ng and not rule.grads else ""), "lora")
    t.add("optimizer_states", "optimizer_states", f"Optimizer states ({w.optimizer}, adapters only)",
          tr.optimizer_state_bytes(n_o, tensors, w.optimizer, prec.optimizer_states), "per optimizer, N_trainable",
          f"{n_o:,} trainable params, {tensors} tensors" + (no_grad if ng and not rule.states else ""), "lora")
    firsts = {m.layer_kind(i): i for i in reversed(layers)}  # one layer of each kind (the experts' tensors included)
    largest = max((n for i in firsts.values() for n in lora.layer_adapter_tensors(m, w.lora_rank, w.lora_targets, i)),
                  default=0)
    return n_o, largest, left_out


def add_offload(t: TermList, w, shard: StageShard, moves_gradients: bool = True, fraction: float = 1.0) -> None:
    """ZeRO-Offload (Ren et al. 2021) / FSDP CPUOffload: gradients, fp32 master weights and optimizer state live in
    host RAM and the optimizer steps on the CPU; with ZeRO-3 the parameters too (ZeRO-Infinity). The GPU keeps
    the gradients of one unit until they are copied out. A stack whose gradient buffer stays on the GPU
    (`moves_gradients` False: Megatron's HybridDeviceOptimizer) moves the master weights and optimizer state only,
    `fraction` of them (--optimizer-offload-fraction: parameters in order until that share of the elements,
    cpu_offloading/hybrid_optimizer.py _get_sub_optimizer_param_groups); the rest stays with the GPU's optimizer."""
    p = w.parallel
    moved = {"master_weights", "optimizer_states"} | ({"gradients"} if moves_gradients else set()) | (
        {"weights"} if p.offload_params else set())
    keep = []
    for term in t.items:
        if term.component in moved:
            if fraction >= 1:
                t.host.append(term._replace(component="host", note="in host RAM (offloaded)"))
                t.by_component[term.component] -= term.bytes
                continue
            out = int(term.bytes * fraction)
            t.host.append(term._replace(component="host", bytes=out, note="in host RAM (offloaded)",
                                        formula=f"({term.formula}) × f_offload",
                                        text=f"({term.substituted}) × {fraction:g}"))
            t.by_component[term.component] -= out
            keep.append(term._replace(bytes=term.bytes - out, label=f"{term.label}, kept on the GPU",
                                      formula=f"({term.formula}) − offloaded",
                                      text=f"({term.substituted}) − {out:,} B offloaded"))
        else:
            keep.append(term)
    t.items = keep
    if p.offload_params:  # keep a (zero) weights line so the breakdown still names it
        t.items.insert(0, Term("weights", "weights", "Weights (offloaded to host)", 0, "0", "0", "zero-offload"))
    if not moves_gradients:
        return
    unit = shard.largest_unit
    t.add("transient.grad_offload", "transient", "Gradients of one unit before the copy to host",
          nbytes(unit, w.precision.grads), "U × b_grad (U = largest unit)",
          ("{:,} × {}", unit, dtype_bytes_text(w.precision.grads)),
          "zero-offload")
