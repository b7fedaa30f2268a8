"""RL post-training (GRPO / PPO): a trainer and a rollout engine, colocated on the same GPUs or apart; the peak of
one GPU over the phases of a step.

    rollout  : the engine's weights, KV pool, activations and CUDA graphs
               + what the trainer leaves on the GPU (everything when it is not offloaded; its CUDA context and
               NCCL communicators always)
    scoring  : the trainer woken (its model states) + reference / reward weights + one forward's logits
    training : the trainer's step (calculator.stages.estimate, mode train, one sample = prompt + response tokens)
               + what the engine leaves (everything unless it sleeps; its CUDA context, NCCL and, for vLLM,
               its CUDA graphs always) + reference / reward weights unless offloaded + the critic's states

What leaves the GPU between phases follows the frameworks: slime --colocate sets offload_train (Megatron's model
and optimizer to host) and offload_rollout (SGLang release_memory_occupation frees weights, KV and, with
SGLANG_MEMORY_SAVER_CUDA_GRAPH, its graphs) (slime/utils/arguments.py); verl's hybrid engine frees the vLLM cache
(free_cache_engine) and can offload FSDP params / optimizer (verl/trainer/config/ppo_trainer.yaml); OpenRLHF
--vllm_enable_sleep / --deepspeed_enable_sleep; TRL GRPOConfig vllm_mode="colocate" with vllm_enable_sleep_mode.
vLLM's sleep releases the memory allocated under its weights and kv_cache tags (vllm/device_allocator/cumem.py);
its CUDA-graph pool stays.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from calculator.core.dtypes import nbytes
from calculator.core.errors import InputError
from calculator.model.spec import ModelSpec
from calculator.core.result import StageEstimate, Term


@dataclass(frozen=True)
class Phase:
    """One phase of an RL step on one GPU: its terms (Term objects, integer bytes)."""

    name: str
    where: str  # "every GPU" (colocated), "trainer GPUs", "rollout GPUs"
    terms: tuple[Term, ...]

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.terms)

    @property
    def parts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.terms:
            out[t.label] = out.get(t.label, 0) + t.bytes
        return out


@dataclass(frozen=True)
class RLResult:
    phases: tuple[Phase, ...]
    peak_phase: str
    rollout: object  # calculator.engines.common.Serving of one rollout GPU
    sequences: int  # rollout batch × samples per prompt
    engines: int
    tokens_per_sample: int
    kv_demand_bytes: int  # per rollout GPU: its engine's share of the sequences, every token cached at once
    kv_demand_tokens: int  # per engine
    share_at_once: float  # part of an engine's sequences its pool holds at once (1.0: all of them)
    fraction_for_demand: float  # the engine memory fraction whose pool holds every sequence at once
    trainer_gpus: int
    rollout_gpus: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {"peak_phase": self.peak_phase,
                "phases": [{"name": p.name, "where": p.where, "total_bytes": p.total_bytes, "parts": p.parts}
                           for p in self.phases],
                "rollout": self.rollout.to_dict(), "sequences": self.sequences, "engines": self.engines,
                "tokens_per_sample": self.tokens_per_sample, "kv_demand_bytes": self.kv_demand_bytes,
                "kv_demand_tokens": self.kv_demand_tokens, "share_at_once": self.share_at_once,
                "fraction_for_demand": self.fraction_for_demand,
                "trainer_gpus": self.trainer_gpus, "rollout_gpus": self.rollout_gpus, "notes": list(self.notes)}


STATES = ("weights", "master_weights", "gradients", "optimizer_states")
# The six buckets a per-GPU RL budget is usually told in (seed 002's table): where each term goes.
BUCKETS = ("Model parameters", "Gradients", "Optimizer states", "KV cache", "Activations", "Framework overhead")


def bucket_of(t: Term) -> str:
    """Weights of every model -> parameters; master + optimizer -> optimizer states; the trainer's activations,
    logits and transients -> activations; the engine's working memory, CUDA graphs, NCCL, contexts and
    fragmentation -> framework overhead."""
    if t.component == "weights":
        return "Model parameters"
    if t.component == "gradients":
        return "Gradients"
    if t.component in ("master_weights", "optimizer_states"):
        return "Optimizer states"
    if t.component == "kv_cache":
        return "KV cache"
    if t.component in ("activations", "logits", "transient") and not t.key.startswith("rollout."):
        return "Activations"
    return "Framework overhead"


def buckets(terms) -> dict[str, int]:
    out = dict.fromkeys(BUCKETS, 0)
    for t in terms:
        out[bucket_of(t)] += t.bytes
    return out


def _term(key: str, component: str, label: str, n: int, formula: str, subst: str, source: str = "rl-colocate",
          note: str = "") -> Term:
    return Term(key, component, label, int(n), formula, subst, source, note)


def _prefixed(terms, prefix: str, label_prefix: str) -> list[Term]:
    return [t._replace(key=f"{prefix}.{t.key}", label=f"{label_prefix}{t.label}") for t in terms]


def _rollout_length(rl) -> int:
    """The rollout engine's max_model_len: prompt + response (a prompt of at least one token)."""
    return max(rl.prompt_len, 1) + rl.response_len


def _check_rollout_length(m: ModelSpec, rl) -> None:
    """The rollout engine refuses its max_model_len past the model's length (calculator.engines.common.
    check_context); verl asserts it first (workers/rollout/vllm_rollout: "model context length should be greater
    than total sequence length")."""
    from calculator.engines.common import ENGINE_NAMES, derived_context
    limit, tokens = derived_context(m, rl.rollout_engine), _rollout_length(rl)
    if limit is not None and tokens > limit:
        raise InputError("rl.response_len", f"prompt {rl.prompt_len:,} + response {rl.response_len:,} = {tokens:,} "
                                            f"tokens is more than the {limit:,} this model's config allows, which "
                                            f"the {ENGINE_NAMES[rl.rollout_engine]} rollout refuses as its "
                                            "max_model_len: shorten the prompt or the response")


def _rollout_workload(w):
    """The rollout engine's own Workload: inference of the policy in bf16 (its weight dtype), TP = GPUs per
    engine, max_model_len = prompt + response."""
    from calculator.core.workload import Parallelism, Precision, ServingConfig, Workload
    rl = w.rl
    params = w.precision.params if w.precision.params in ("bf16", "fp16") else "bf16"
    return Workload(mode="infer", engine=rl.rollout_engine, gpu=w.gpu, seq_len=max(rl.prompt_len, 1),
                    gen_tokens=rl.response_len, precision=Precision(params=params), kv_dtype=w.kv_dtype,
                    weight_dtype=w.weight_dtype, expert_weight_dtype=w.expert_weight_dtype,
                    parallel=Parallelism(tp=rl.rollout_tp),
                    serving=ServingConfig(memory_fraction=rl.memory_fraction,
                                          max_model_len=_rollout_length(rl)),
                    overheads=w.overheads)


def _aux_weights(m: ModelSpec, w, counts_total: int) -> int:
    """A frozen copy of the policy (reference or reward model) in the params dtype, sharded like the trainer
    (TP × PP; ZeRO-3 over DP when the trainer shards parameters)."""
    p = w.parallel
    shard = -(-counts_total // (p.tp * p.pp))
    if p.zero >= 3:
        shard = -(-shard // p.shard_group)
    return nbytes(shard, w.precision.params if w.precision.params != "fp32" else "bf16")


def estimate_rl(m: ModelSpec, w, estimate_fn, gpu, with_fits: bool = True):
    """RL step on `m`: the phases of one GPU and the peak over them."""
    from calculator import engines
    from calculator.memory.parallel import stage_shards
    from calculator.model.parameters import count_parameters
    from calculator.core.result import Estimate

    rl, p = w.rl, w.parallel
    if gpu is None:
        raise InputError("gpu", "RL post-training sizes the rollout engine's pool from the GPU's memory: pick a "
                                "GPU (--gpu)")
    tokens = rl.prompt_len + rl.response_len
    _check_rollout_length(m, rl)
    w_train = w.model_copy(update={"mode": "train", "seq_len": tokens, "engine": "hf"})
    train = estimate_fn(m, w_train, with_fits=False)
    trainer_gpus = p.world_size
    rollout_gpus = trainer_gpus if rl.colocate else (rl.rollout_gpus or trainer_gpus)
    if rollout_gpus % rl.rollout_tp:
        raise InputError("rl.rollout_tp", f"{rollout_gpus} rollout GPUs do not split into engines of "
                                          f"{rl.rollout_tp} GPUs: pick a GPUs-per-engine that divides it")
    w_roll = _rollout_workload(w)
    shards = stage_shards(m, w_roll.parallel)
    stages, sv = engines.run(m, w_roll, shards, gpu)
    n_engines = rollout_gpus // rl.rollout_tp
    sequences = rl.rollout_batch_size * rl.samples_per_prompt
    per_engine = -(-sequences // n_engines)
    demand_tokens = per_engine * tokens
    demand = demand_tokens * sv.kv_bytes_per_token
    at_once = min(1.0, sv.kv_pool_tokens / demand_tokens) if demand_tokens else 1.0
    # the pool grows by the fraction's base (device total for vLLM, free memory before loading for SGLang)
    slope = sv.budget_bytes / sv.memory_fraction
    needed_fraction = sv.memory_fraction + (demand - sv.kv_available_bytes) / slope

    t_terms = train.peak.terms
    trainer_context = [t for t in t_terms if t.component == "cuda_context"]
    trainer_comm = [t for t in t_terms if t.component == "comm_buffers"]
    states = [t for t in t_terms if t.component in STATES]
    eng_terms = stages[0].terms
    eng_context = [t for t in eng_terms if t.component == "cuda_context"]
    eng_comm = [t for t in eng_terms if t.component == "comm_buffers"]
    eng_graphs = [t for t in eng_terms if t.key == "transient.cuda_graphs"]
    total = count_parameters(m).total
    aux = []
    for on, name in ((rl.reference_model, "Reference model"), (rl.reward_model, "Reward model")):
        if on:
            n = _aux_weights(m, w, total)
            aux.append(_term(f"aux.{name.split()[0].lower()}", "weights", f"{name} weights", n,
                             "N / (tp·pp) × b_param", f"{total:,} / {p.tp * p.pp} × 2 B"))
    critic = [t._replace(key=f"critic.{t.key}", label=f"Critic {t.label[0].lower()}{t.label[1:]}") for t in states]

    where = "every GPU" if rl.colocate else None
    roll_terms = _prefixed([t for t in eng_terms if t.component != "cuda_context"], "rollout", "Rollout: ")
    roll_terms += _prefixed(eng_context, "rollout", "Rollout engine ")
    phases = []
    if rl.colocate:
        resident = [] if rl.offload_train else states + (critic if rl.critic else [])
        roll = roll_terms + _prefixed(resident + trainer_comm + trainer_context, "trainer", "Trainer: ")
        roll += [] if rl.offload_aux else aux
        phases.append(Phase("rollout", where, tuple(roll)))
        logits = nbytes(w.micro_batch * tokens * (m.vocab_size // p.tp), "fp32")
        scoring = _prefixed(states, "trainer", "Trainer: ") + aux + [
            _term("scoring.logits", "logits", "Log-prob forward: fp32 logits of a micro-batch", logits,
                  "b × (prompt + response) × V/tp × 4 B", f"{w.micro_batch} × {tokens:,} × {m.vocab_size // p.tp:,} × 4")]
        left = ([] if rl.engine_sleep else [t for t in roll_terms if t.component in ("weights", "kv_cache")]) + (
            eng_graphs if rl.rollout_engine == "vllm" or not rl.engine_sleep else [])
        scoring += _prefixed(left + eng_comm + eng_context, "rollout", "Rollout engine (asleep): ") + trainer_comm \
            + trainer_context
        phases.append(Phase("scoring", where, tuple(scoring)))
        training = list(t_terms) + ([] if rl.offload_aux else aux) + (critic if rl.critic and not rl.offload_train
                                                                      else [])
        training += _prefixed(left + eng_comm + eng_context, "rollout", "Rollout engine (asleep): ")
        phases.append(Phase("training", where, tuple(training)))
    else:
        phases.append(Phase("rollout", "rollout GPUs", tuple(roll_terms)))
        training = list(t_terms) + aux + (critic if rl.critic else [])
        phases.append(Phase("training", "trainer GPUs", tuple(training)))
    peak = max(phases, key=lambda ph: ph.total_bytes)
    notes = [f"{sequences} sequences ({rl.rollout_batch_size} prompts × {rl.samples_per_prompt} samples) of up to "
             f"{tokens:,} tokens over {n_engines} engine(s) of {rl.rollout_tp} GPU(s): {per_engine} per engine",
             f"the pool holds {at_once:.0%} of an engine's sequences at once" + (
                 "; the rest wait for free blocks (longer rollout, no OOM)" if at_once < 1 else ""),
             "trainer and engine run as separate processes: each has its own CUDA context"]
    if rl.critic and rl.offload_train:
        notes.append("critic: offloaded like the actor, the two take turns on the GPU (slime forces offload_train "
                     "with a critic)")
    notes.append(f"a memory fraction of {needed_fraction:.3f} (now {sv.memory_fraction:g}) sizes the pool to hold "
                 "every sequence at once: the engine's memory lever; batch, samples and length change the demand")
    result = RLResult(tuple(phases), peak.name, sv, sequences, n_engines, tokens, demand, demand_tokens, at_once,
                      needed_fraction, trainer_gpus, rollout_gpus, tuple(notes))
    terms = peak.terms
    # torch.cuda.max_memory_allocated over the step: the highest allocated peak of any phase, which need not be the
    # phase with the highest total (the training phase's fragmentation can lift its total above a rollout whose
    # KV pool allocates more)
    allocated = max(sum(t.bytes for t in ph.terms if t.component not in ("comm_buffers", "cuda_context",
                                                                          "fragmentation")) for ph in phases)
    stage = StageEstimate(0, train.peak.layers, terms, allocated, peak.total_bytes)
    fits = partial(_fit_cards, m, w, estimate_fn) if with_fits else None
    return Estimate(m.name, "rl", train.parameters, train.active_parameters, (stage,), 0, fits,
                    train.warnings, train.assumptions + tuple(notes), rl=result)


def _fit_cards(m: ModelSpec, w, estimate_fn, only: frozenset | None = None) -> tuple:
    """Per GPU of the catalogue: the whole step again on that GPU (the engine's pool follows its memory), then
    the 80% safe band on the peak phase, against what PyTorch can allocate (GPU.usable_bytes)."""
    from calculator.core.fit import verdict
    from calculator.model.presets import list_gpus
    from calculator.core.result import Fit
    out = []
    for g in list_gpus():
        if only is not None and g.id not in only:
            continue
        est = estimate_rl(m, w.model_copy(update={"gpu": g.id}), estimate_fn, g, with_fits=False)
        used, cap = est.total_bytes, g.usable_bytes  # what PyTorch can allocate, as the training cards
        out.append(Fit(g.id, g.name, cap, used, cap - used, used / cap, verdict(used, cap),
                       w.parallel.world_size if used <= cap else None, f"peak in the {est.rl.peak_phase} phase"))
    return tuple(out)
