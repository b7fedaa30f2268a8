"""The levers an engineer pulls when a job does not fit: every change to a workload that can lower the memory of
the most loaded GPU, for the job as it is (training, inference with transformers' generate(), a vLLM / SGLang
server, RL post-training). Each lever is a plain change to the Workload's fields; calculator.planning.remedies re-estimates
every one with the engine and ranks them.

Tiers (the order the combined remedy tries them, calculator.planning.remedies.combine):
    0  the same job on the same GPUs, the same numbers out (recompute, smaller micro-batches with gradient
       accumulation, ZeRO / FSDP over the GPUs already there, EP inside them, fused kernels, stack)
    1  the same job on the same GPUs, much slower: CPU offload (ZeRO-Offload / ZeRO-Infinity)
    2  the same job on more GPUs (TP, PP, CP, DP with ZeRO-3)
    3  a different job (shorter sequence, fewer sequences at once, 8-bit / factored optimizer, LoRA / QLoRA,
       quantized weights or KV cache, serving and rollout settings)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from calculator.memory.inference import kv_cache_dtype, serving_weight_dtypes
from calculator.model.spec import ModelSpec

SAME_JOB, OFFLOAD, MORE_GPUS, OTHER_JOB = 0, 1, 2, 3
TIERS = ("same job", "same job, offloaded", "more GPUs", "different job")
MAX_TP = 8  # tensor parallelism stays inside one node (NVLink)
RECOMPUTE_ORDER = ("none", "selective", "full")
KV_SMALLER = {"fp32": "bf16", "bf16": "fp8", "fp16": "fp8"}
DTYPE_BITS_ORDER = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4, "nf4": 4, "fp4": 4, "nvfp4": 4}


@dataclass(frozen=True)
class Lever:
    """One change to the workload: `updates` is a nested dict of Workload fields (as Workload.model_dump())."""

    lever: str  # its kind: "recompute", "micro_batch", "tp", ...
    change: str  # what changes, in words: "recompute none → full"
    updates: dict[str, Any] = field(hash=False)
    tier: int = SAME_JOB
    cost: str = ""  # what it costs, in words (the step-time and GPU figures are added by calculator.planning.remedies)


def _p(**kw) -> dict:
    return {"parallel": kw}


def training_levers(m: ModelSpec | None, w) -> list[Lever]:
    """Levers of a training step (also the trainer of an RL job)."""
    p, out = w.parallel, []
    add = out.append
    # torchtitan's op-level selective checkpointing replays about what selective does (ranking.RECOMPUTE_COST): full next
    i = RECOMPUTE_ORDER.index("selective" if w.recompute == "op" else w.recompute)
    for level in RECOMPUTE_ORDER[i + 1:]:
        add(Lever("recompute", f"recompute {w.recompute} → {level}", {"recompute": level}, SAME_JOB,
                  "the forward is replayed in backward: " + ("the attention core (a few % more FLOPs)"
                                                            if level == "selective" else "about 1/3 more FLOPs")))
    if w.micro_batch > 1:
        b = w.micro_batch // 2
        m_now = p.microbatches
        add(Lever("micro_batch", f"micro-batch {w.micro_batch} → {b}, gradient accumulation {m_now} → "
                                 f"{m_now * 2} (same global batch)",
                  {"micro_batch": b, **_p(num_microbatches=m_now * 2)}, SAME_JOB,
                  f"{m_now * 2} micro-batches per step instead of {m_now}: smaller kernels, more launches"))
    group = p.dp * p.cp
    if group > 1:
        for stage in range(p.zero + 1, 4):
            add(Lever("zero", f"ZeRO / FSDP stage {p.zero} → {stage} over the {group} data-parallel ranks",
                          _p(zero=stage), SAME_JOB, "more collectives per step" + (
                              " (parameters gathered in forward and backward)" if stage == 3 else "")))
    from calculator.stacks import STACKS, resolve
    now = resolve(w)
    if not p.offload_optimizer and w.optimizer != "none":  # FSDP2 shards everything together: stage 3
        add(Lever("offload", "offload optimizer state, master weights and gradients to CPU (ZeRO-Offload)",
                  _p(offload_optimizer=True, zero=3 if now == "fsdp2" else max(p.zero, 1)), OFFLOAD,
                  "the optimizer steps on the CPU: host RAM and PCIe traffic, a much slower step"))
    if not p.offload_params and m is not None:
        add(Lever("offload", "offload parameters to CPU too (ZeRO-Infinity, ZeRO-3)",
                  _p(offload_params=True, offload_optimizer=True, zero=3), OFFLOAD,
                  "every parameter crosses PCIe twice per step: the slowest option"))
    if w.impl == "hf" and w.activation_model == "exact":
        add(Lever("fused_loss", "Liger kernels: fused linear cross-entropy, RMSNorm, SwiGLU (impl liger)",
                  {"impl": "liger"}, SAME_JOB, "a dependency (liger-kernel); no logits are materialised"))
    for stack in STACKS:
        if stack != now:
            add(Lever("stack", f"training stack {now} → {stack}", {"stack": stack}, SAME_JOB,
                      "another framework for the same step"))
    if w.optimizer in ("adamw", "lion", "sgd-momentum"):
        add(Lever("optimizer", f"optimizer {w.optimizer} → 8-bit AdamW (bitsandbytes)", {"optimizer": "adamw-8bit"},
                  OTHER_JOB, "blockwise-quantized optimizer state: a numerics change (usually loss-neutral)"))
    if w.optimizer in ("adamw", "adamw-8bit", "lion", "sgd-momentum"):
        add(Lever("optimizer", f"optimizer {w.optimizer} → Adafactor (factored second moment)",
                  {"optimizer": "adafactor"}, OTHER_JOB, "a different optimizer: retune the learning rate"))
    if w.finetune == "full" and m is not None:
        add(Lever("finetune", "LoRA adapters (r = 16, all linear layers) on a frozen base", {"finetune": "lora"},
                  OTHER_JOB, "parameter-efficient fine-tuning: fewer trainable weights, a different result"))
        add(Lever("finetune", "QLoRA: LoRA on an NF4-quantized base", {"finetune": "qlora"}, OTHER_JOB,
                  "4-bit base weights: dequantized per matmul (slower), a different result"))
    elif w.finetune == "lora":
        add(Lever("finetune", "LoRA → QLoRA (NF4 base)", {"finetune": "qlora"}, OTHER_JOB,
                  "4-bit base weights: dequantized per matmul (slower)"))
    return out


def parallel_levers(m: ModelSpec | None, w, train: bool) -> list[Lever]:
    """More GPUs: degrees that divide what they split (the engine refuses the rest, and those are dropped)."""
    if m is None:
        return []
    p, out = w.parallel, []
    for f in (2, 4, 8):
        tp = p.tp * f
        if tp <= MAX_TP and m.num_attention_heads % tp == 0:
            out.append(Lever("tp", f"tensor parallel {p.tp} → {tp}" + (" with sequence parallelism" if train else ""),
                             _p(tp=tp, sequence_parallel=train or p.sequence_parallel), MORE_GPUS,
                             f"{f}× the GPUs; TP all-reduces every layer (keep it inside a node)"))
    for f in (2, 4):
        pp = p.pp * f
        if m.num_hidden_layers % pp == 0:
            upd = {"pp": pp}
            if train:
                upd["num_microbatches"] = max(p.microbatches, pp)
            out.append(Lever("pp", f"pipeline parallel {p.pp} → {pp}", _p(**upd), MORE_GPUS,
                             f"{f}× the GPUs; a pipeline bubble of (p − 1)/m of the step"))
    if train:
        for f in (2, 4):
            cp = p.cp * f
            if w.seq_len % (2 * cp) == 0:
                out.append(Lever("cp", f"context parallel {p.cp} → {cp}", _p(cp=cp), MORE_GPUS,
                                 f"{f}× the GPUs; the sequence is split, attention exchanges K/V (ring)"))
        for f in (2, 4, 8):
            dp = p.dp * f
            out.append(Lever("dp", f"data parallel {p.dp} → {dp} with ZeRO-3 / FSDP full shard",
                             _p(dp=dp, zero=3), MORE_GPUS,
                             f"{f}× the GPUs (and {f}× the global batch, or fewer accumulation steps); "
                             "parameters gathered every layer"))
    if m.is_moe:
        room = p.dp * p.cp * p.tp
        for ep in (2, 4, 8, 16, 32, 64):
            if ep > p.ep and m.num_experts % ep == 0 and room % (ep * p.expert_tp) == 0:
                out.append(Lever("ep", f"expert parallel {p.ep} → {ep}", _p(ep=ep), SAME_JOB if train else MORE_GPUS,
                                 "routed experts spread over the data-parallel ranks: all-to-all per MoE layer"))
    return out


def inference_levers(m: ModelSpec | None, w) -> list[Lever]:
    """generate() with transformers, or the model part of a serving engine."""
    out = []
    if w.micro_batch > 1:
        b = w.micro_batch // 2
        out.append(Lever("micro_batch", f"sequences at once {w.micro_batch} → {b}", {"micro_batch": b}, OTHER_JOB,
                         "half the sequences per generate() call: about half the throughput"))
    runs = kv_cache_dtype(m, w)  # "auto": what the runtime picks
    if runs in KV_SMALLER:
        kv = KV_SMALLER[runs]
        out.append(Lever("kv_dtype", f"KV cache {runs} → {kv}", {"kv_dtype": kv}, OTHER_JOB,
                         "a quantized cache: small accuracy change; needs a kernel that reads it"))
    wdt = serving_weight_dtypes(m, w)[0]
    for q in ("int8", "int4"):
        if DTYPE_BITS_ORDER.get(wdt, 16) > DTYPE_BITS_ORDER[q]:
            out.append(Lever("weights", f"weights {wdt} → {q} (AWQ, groups of {w.quant_group_size})",
                             {"weight_dtype": q, "quant_method": "awq"}, OTHER_JOB,
                             "a quantized checkpoint: some accuracy loss"))
    return out


def sequence_lever(w) -> list[Lever]:
    if w.seq_len < 256:
        return []
    s = w.seq_len // 2
    return [Lever("seq_len", f"sequence {w.seq_len:,} → {s:,} tokens", {"seq_len": s}, OTHER_JOB,
                  "shorter samples (truncate or re-pack the data): a different job" if w.mode == "train" else
                  "shorter prompts: a different workload")]


def serving_levers(w, serving) -> list[Lever]:
    """A vLLM / SGLang server: its memory fraction, max_model_len and max_num_seqs (`serving`: its Serving)."""
    out = []
    frac = serving.memory_fraction
    if frac < 0.95:
        up = round(min(0.95, frac + 0.05), 2)
        out.append(Lever("memory_fraction", f"engine memory fraction {frac:g} → {up:g}",
                         {"serving": {"memory_fraction": up}}, OTHER_JOB,
                         "less room for anything else on the GPU (other processes, a second engine)"))
    need = w.seq_len + w.gen_tokens
    if serving.configured_max_model_len > need:
        out.append(Lever("max_model_len", f"max_model_len {serving.configured_max_model_len:,} → {need:,} "
                                          "(the prompt + generated tokens of this workload)",
                         {"serving": {"max_model_len": need}}, OTHER_JOB,
                         "requests longer than that are refused"))
    if serving.max_num_seqs > 1:
        seqs = max(1, serving.max_num_seqs // 2)
        out.append(Lever("max_num_seqs", f"max_num_seqs {serving.max_num_seqs} → {seqs}",
                         {"serving": {"max_num_seqs": seqs}}, OTHER_JOB,
                         "fewer sequences scheduled at once: lower peak throughput"))
    return out


def rl_levers(w, rl_result) -> list[Lever]:
    """RL post-training: the rollout's demand and the engine's share of the GPU."""
    rl, out = w.rl, []
    if rl.rollout_batch_size > 1:
        out.append(Lever("rollout_batch", f"rollout batch {rl.rollout_batch_size} → {rl.rollout_batch_size // 2} "
                                          "prompts", {"rl": {"rollout_batch_size": rl.rollout_batch_size // 2}},
                         OTHER_JOB, "twice the rollout steps for the same number of prompts"))
    if rl.samples_per_prompt > 1:
        out.append(Lever("samples_per_prompt", f"samples per prompt {rl.samples_per_prompt} → "
                                               f"{rl.samples_per_prompt // 2}",
                         {"rl": {"samples_per_prompt": rl.samples_per_prompt // 2}}, OTHER_JOB,
                         "a smaller GRPO group: a noisier advantage estimate"))
    if rl.response_len >= 256:
        out.append(Lever("response_len", f"response length {rl.response_len:,} → {rl.response_len // 2:,}",
                         {"rl": {"response_len": rl.response_len // 2}}, OTHER_JOB,
                         "responses cut at half the length: a different task"))
    frac = rl_result.rollout.memory_fraction
    lower = round(frac - 0.1, 2)
    if lower >= 0.2:
        out.append(Lever("memory_fraction", f"rollout memory fraction {frac:g} → {lower:g}",
                         {"rl": {"memory_fraction": lower}}, OTHER_JOB,
                         "a smaller KV pool: fewer sequences at once, a longer rollout"))
    for flag, text in (("offload_train", "offload the trainer during rollout"),
                       ("engine_sleep", "put the engine to sleep during training"),
                       ("offload_aux", "offload reference / reward models when idle")):
        if not getattr(rl, flag) and rl.colocate:
            out.append(Lever(flag, text, {"rl": {flag: True}}, OFFLOAD, "host RAM and a copy each way per step"))
    return out


def levers(m: ModelSpec | None, w, est) -> list[Lever]:
    """Every lever that applies to the workload `w` (whose estimate is `est`). `m` None: a generic network."""
    if w.mode == "train":
        return training_levers(m, w) + parallel_levers(m, w, True) + sequence_lever(w)
    if w.mode == "rl":
        return rl_levers(w, est.rl) + training_levers(m, w) + parallel_levers(m, w, True)
    if w.engine != "hf":
        return serving_levers(w, est.serving) + inference_levers(m, w) + parallel_levers(m, w, False)
    return inference_levers(m, w) + parallel_levers(m, w, False) + sequence_lever(w)
