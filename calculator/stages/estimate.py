"""estimate(model, workload) -> Estimate: per-GPU memory of every pipeline stage, term by term.

Training peak (what torch.cuda.max_memory_allocated reports):
    model states (weights + master + gradients + optimizer)
  + max(forward/backward: saved activations + loss head + transients,  optimizer step transients)
  + ZeRO-3/FSDP gather buffers
nvidia-smi total = peak allocated + allocator fragmentation + NCCL buffers + CUDA context.
How gradients live and which buffers exist is the training stack's (calculator/stacks/); one stage is priced by
calculator/stages/training.py or stages/inference.py, its overheads by stages/terms.py; this module assembles.
"""
from __future__ import annotations

from functools import lru_cache, partial

from calculator import impls
from calculator.stages import pipeline
from calculator import stacks
from calculator.memory import model_states as tr
from calculator.core.bounds import check_stages
from calculator.core.dtypes import nbytes
from calculator.core.fit import fits_for
from calculator.model.spec import GenericModel, ModelSpec
from calculator.memory.inference import with_kv_dtype
from calculator.memory.parallel import StageShard, check_divisibility, stage_shards
from calculator.model.parameters import count_parameters
from calculator.core.result import Estimate, LazyStage
from calculator.stages.inference import inference_stage  # one generate() stage
from calculator.stages.terms import TermList, all_gpus, dtype_bytes_text, finish_stage, gpu_of  # the term list and the overheads
from calculator.stages.training import training_stage  # one training stage


def _generic(model: GenericModel, w) -> Estimate:
    """Seed 004: params × bytes + grads × bytes (+ optimizer) + batch × activation elements × bytes."""
    t, prec = TermList(), w.precision
    n = model.total_params
    t.add("weights", "weights", f"Weights ({prec.params})", nbytes(n, prec.params), "N × b_param",
          f"{n:,} × {dtype_bytes_text(prec.params)}", "generic-network")
    if w.mode == "train":
        if prec.master_weights:
            t.add("master_weights", "master_weights", "Master weights", nbytes(n, prec.master_weights),
                  "N × b_master", f"{n:,} × {dtype_bytes_text(prec.master_weights)}", "mixed-precision")
        t.add("gradients", "gradients", f"Gradients ({prec.grads})", nbytes(n, prec.grads), "N × b_grad",
              f"{n:,} × {dtype_bytes_text(prec.grads)}", "generic-network")
        opt = tr.optimizer_state_bytes(n, 0, w.optimizer, prec.optimizer_states)
        t.add("optimizer_states", "optimizer_states", f"Optimizer states ({w.optimizer})", opt,
              "per optimizer", f"{n:,} params", "transformer-math")
    elems = model.activation_elements_per_sample
    a = w.micro_batch * nbytes(elems, prec.activations)
    t.add("activations", "activations", "Activations", a, "batch × elements per sample × b_act",
          f"{w.micro_batch} × {elems:,} × {dtype_bytes_text(prec.activations)}", "generic-network")
    gpu = gpu_of(w.gpu)
    shard = StageShard(0, 0, 0, n, 0, 0, n, True, True)
    stage = finish_stage(t, w, shard, gpu)
    check_stages((stage,), model, w)
    fits = partial(fits_for, stage, all_gpus(), 1, w.overheads.cuda_context_bytes, None)
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
    if (m.attention_sinks or m.swa_attention_sinks) and w.attention != "eager":
        out.append("attention sinks (GPT-OSS) need FA3-class kernels; FlashAttention-2 numbers here are not "
                   "validated (the eager path is)" + ("; transformers runs MiMo-V2-Flash without SDPA "
                                                      "(_supports_sdpa = False)" if m.swa_attention_sinks else ""))
    if w.activation_model == "textbook":
        out.append("textbook model (Korthikanti et al.): ignores GQA, SwiGLU, fp32 norm copies and the loss head; "
                   "flat overhead instead of line items")
    if w.impl != "hf" and w.mode == "train":
        out.extend(impls.warnings(m, w))
    if w.mode == "train":  # what the stack's own rules say of this model (e.g. DDP and unused parameters)
        out.extend(getattr(stacks.module(w), "warnings", lambda m, w: ())(m, w))
    if m.compressed is not None and w.mode == "train":  # DeepSeek-V4 training (compressed_saved.py)
        out.append("DeepSeek-V4 training: transformers' eager modules, held to whole-step goldens of a tiny model; "
                   "the model's buffers (hash-routing tid2eid tables, RoPE inv_freq) are not counted")
    elif m.compressed is not None:  # DeepSeek-V4 (architectures/compressed.py): held to transformers but for this
        out.append("DeepSeek-V4: parameters and cache are held to transformers; the prefill / decode working set is "
                   "the engine's generic eager layer (transformers runs V4 with eager attention only), not traced for "
                   "compressed attention and its hc_mult residual streams")
    tokens = w.seq_len + (w.gen_tokens if w.mode == "infer" else 0)
    if m.learned_position_embeddings and tokens > m.learned_position_embeddings and w.engine == "hf":
        out.append(f"{tokens:,} tokens is past this model's {m.learned_position_embeddings:,} learned positions: "
                   "transformers fails in the position-embedding lookup (an index out of range) before any of this "
                   "memory is used; the figures are for a model with that many positions")
    if w.attention == "eager" and w.seq_len >= 8192:
        out.append("eager attention at long sequence: the a·b·s² scores dominate; FlashAttention avoids them")
    return tuple(out)


def engine_figures(m: ModelSpec, w):
    """(Estimate.total_bytes, .peak_allocated_bytes, .serving) of estimate(m, w) for a serving engine's job (vLLM /
    SGLang), without building the Estimate: the same checks, shards and budgets (calculator.engines.figures; the
    Serving lacks the checkpoint-weights note, a text). Raises InputError where estimate() does."""
    from calculator import engines
    check_divisibility(m, w)
    return engines.figures(m, w, stage_shards(m, w.parallel), gpu_of(w.gpu))


def estimate(model: ModelSpec | GenericModel, workload, *, with_fits: bool = True, needed=None) -> Estimate:
    """Per-GPU memory of every pipeline stage for `workload` on `model`. Raises InputError on bad input.
    with_fits: fit cards for every GPU of the catalogue, computed on first use. needed(m, w, gpu) -> (Plan | None,
    bound): the fewest GPUs of that kind a real layout needs, for the cards (calculator.planning.fit_cards passes
    the planner's search); without it a card's GPUs needed is the sharding estimate (calculator.core.fit)."""
    w = workload
    if isinstance(model, GenericModel):
        return _generic(model, w)
    m = model
    check_divisibility(m, w)
    if w.mode != "rl":  # kv_dtype "auto" as the runtime picks it (an RL job's rollout engine resolves its own)
        w = with_kv_dtype(m, w)
    if w.mode == "train":
        stacks.check(w)
    p = w.parallel
    shards = stage_shards(m, p)
    gpu = gpu_of(w.gpu)
    if w.mode == "rl":  # a trainer and a rollout engine: the peak over the phases of a step (calculator/stages/rl.py)
        from calculator.stages.rl import estimate_rl
        return estimate_rl(m, w, estimate, gpu, with_fits)
    if w.mode == "infer" and w.engine != "hf":  # a serving engine preallocates its KV pool: calculator/engines
        from calculator import engines
        stages, serving = engines.run(m, w, shards, gpu)
        worst = max(range(len(stages)), key=lambda i: stages[i].total_bytes)
        fits = engines.fits_callable(m, w, shards, all_gpus(), partial(needed, m, w) if needed else None) \
            if with_fits else None
        counts = count_parameters(m)
        return Estimate(m.name, w.mode, counts.total, counts.active_per_token, stages, worst, fits, _warnings(m, w),
                        serving.notes, serving=serving)
    build = training_stage if w.mode == "train" else inference_stage
    stages = pipeline.build(build, m, w, shards, gpu)
    check_stages([s for s in stages if not isinstance(s, LazyStage)], m, w)
    worst = max((i for i, s in enumerate(stages) if not isinstance(s, LazyStage)), key=lambda i: stages[i].total_bytes)
    fits = partial(fits_for, stages[worst], all_gpus(), p.world_size, w.overheads.cuda_context_bytes,
                   None, partial(needed, m, w) if needed else None) if with_fits else None
    assumptions = _assumptions(w.optimizer_impl, w.precision.activations, w.attention)
    counts = count_parameters(m)
    return Estimate(m.name, w.mode, counts.total, counts.active_per_token, stages, worst, fits, _warnings(m, w),
                    assumptions)
