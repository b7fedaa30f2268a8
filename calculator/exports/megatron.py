"""Megatron-LM launch: `torchrun ... pretrain_gpt.py <arguments>`.

Every flag is defined in megatron/training/arguments.py (add_megatron_arguments, many generated from
megatron/core/transformer/transformer_config.py and megatron/training/config/*.py dataclasses). The flags were read
from Megatron-LM at commit d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22) by building that parser:
tests/data/exports/megatron_flags.json, produced by validation/exports/flags.py. The megatron-core wheel does not
ship megatron/training, so tests parse the exported arguments with a parser rebuilt from that record.

Layout: --tensor/pipeline/context/expert-model-parallel-size, --expert-tensor-parallel-size, --sequence-parallel,
--num-virtual-stages-per-pipeline-rank (interleaved 1F1B), --decoder-first/last-pipeline-num-layers (uneven stages),
--use-distributed-optimizer, --optimizer-cpu-offload; batch: --micro-batch-size, --global-batch-size (micro ×
micro-batches × data parallel, so Megatron runs global / (micro × dp) micro-batches per step); precision --bf16 /
--fp16 (fp32 main grads and master weights are Megatron's default; --use-precision-aware-optimizer with
--exp-avg-dtype / --exp-avg-sq-dtype for bf16 Adam state); --recompute-granularity selective | full with
--recompute-method uniform --recompute-num-layers 1; --transformer-impl transformer_engine | local; model shape from
the Hugging Face config (--num-layers, --hidden-size, --ffn-hidden-size, attention heads and groups, MoE, MLA).
"""
from __future__ import annotations


from calculator import stacks
from calculator.exports.common import (Export, Notes, common_training_notes, global_batch, launcher,
                                       shell_command)
from calculator.model.spec import ModelSpec

NAME = "megatron"
LABEL = "Megatron-LM pretrain_gpt.py arguments"
TARGET = "Megatron-LM d98e8a64 (2026-08-22)"
MODES = ("train", "rl")
OPTIMIZERS = {"adamw": "adam", "sgd": "sgd", "sgd-momentum": "sgd", "lion": "lion"}


def model_args(m: ModelSpec, notes: Notes) -> list[str]:
    """The architecture as pretrain_gpt.py takes it."""
    a = ["--num-layers", m.num_hidden_layers, "--hidden-size", m.hidden_size,
         "--ffn-hidden-size", m.intermediate_size, "--num-attention-heads", m.num_attention_heads]
    if m.is_mla:
        a += ["--multi-latent-attention", "--kv-lora-rank", m.kv_lora_rank, "--qk-head-dim", m.qk_nope_head_dim,
              "--qk-pos-emb-head-dim", m.qk_rope_head_dim, "--v-head-dim", m.v_head_dim]
        if m.q_lora_rank:
            a += ["--q-lora-rank", m.q_lora_rank]
    else:
        if m.kv_heads != m.num_attention_heads:
            a += ["--group-query-attention", "--num-query-groups", m.kv_heads]
        if m.head_dim and m.head_dim * m.num_attention_heads != m.hidden_size:
            a += ["--kv-channels", m.head_dim]
    a += ["--normalization", "RMSNorm" if m.norm_type == "rmsnorm" else "LayerNorm"]
    if m.gated_mlp:
        if m.hidden_act not in ("silu", "swish"):
            notes.add(f"gated {m.hidden_act} MLP: Megatron's --swiglu is SiLU-gated (GeGLU needs a custom spec)")
        a.append("--swiglu")
    a += ["--position-embedding-type", "learned_absolute" if m.learned_position_embeddings else "rope"]
    if not m.tie_word_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if not (m.o_bias or m.mlp_bias):
        a.append("--disable-bias-linear")
    if m.qkv_bias:
        a.append("--add-qkv-bias")
    if m.qk_norm:
        a.append("--qk-layernorm")
    if m.num_experts:
        a += ["--num-experts", m.num_experts, "--moe-router-topk", m.num_experts_per_tok,
              "--moe-ffn-hidden-size", m.expert_intermediate_size, "--moe-grouped-gemm"]
        if m.num_shared_experts:
            shared = m.shared_expert_intermediate_size or m.num_shared_experts * m.expert_intermediate_size
            a += ["--moe-shared-expert-intermediate-size", shared]
        if m.first_k_dense_layers or m.dense_layer_indices:
            pattern = ",".join("1" if m.layer_is_moe(i) else "0" for i in range(m.num_hidden_layers))
            a += ["--moe-layer-freq", f"[{pattern}]"]
    if m.ffn_widths is not None:  # Nemotron-NAS: megatron/core/transformer/heterogeneous/heterogeneous_config.py
        notes.add("per-layer MLP widths and attention-free layers (Nemotron-NAS block_configs): --ffn-hidden-size is "
                  "the widest; add --heterogeneous-layers-config-path <the checkpoint's config.json> so that "
                  "Megatron-Core builds each layer from its block_configs")
    if m.sliding_window:
        notes.add(f"sliding-window layers ({m.sliding_window} tokens): set --window-size for the layers that "
                  "use it (Megatron applies one window to all)")
    if m.attn_logit_softcapping or m.final_logit_softcapping or m.attention_sinks:
        notes.add("logit soft-capping / attention sinks: not a pretrain_gpt.py flag")
    a += ["--vocab-size", m.vocab_size, "--tokenizer-type", "NullTokenizer"]
    notes.add("tokenizer: NullTokenizer with the model's vocabulary size; set --tokenizer-type HuggingFaceTokenizer "
              "--tokenizer-model <id> and the data paths for a real run")
    return a


def arguments(m, w, notes: Notes) -> list[str]:
    p, prec = w.parallel, w.precision
    a: list = []
    if isinstance(m, ModelSpec):
        a += model_args(m, notes)
        a += ["--max-position-embeddings", max(w.seq_len, m.max_position_embeddings or 0)]
    else:
        notes.add("a generic network has no transformer shape: give --num-layers, --hidden-size, ... yourself")
    a += ["--seq-length", w.seq_len, "--micro-batch-size", w.micro_batch, "--global-batch-size", global_batch(w),
          "--tensor-model-parallel-size", p.tp, "--pipeline-model-parallel-size", p.pp,
          "--context-parallel-size", p.cp]
    if p.ep > 1 or p.etp:
        a += ["--expert-model-parallel-size", p.ep, "--expert-tensor-parallel-size", p.expert_tp]
    if p.sequence_parallel:
        a.append("--sequence-parallel")
    if p.pp > 1 and p.schedule == "interleaved":
        a += ["--num-virtual-stages-per-pipeline-rank", p.virtual_stages]
    first, last = p.pp_first_stage_layers, p.pp_last_stage_layers
    if first is not None:
        a += ["--decoder-first-pipeline-num-layers", first]
    if last is not None:
        a += ["--decoder-last-pipeline-num-layers", last]
    if p.pp_embedding_in_split:  # TransformerConfig.account_for_embedding/loss_in_pipeline_split
        a.append("--account-for-embedding-in-pipeline-split")
    if p.pp_loss_in_split:
        a.append("--account-for-loss-in-pipeline-split")
    if p.pp_layout:
        a += ["--pipeline-model-parallel-layout", p.pp_layout]
    if w.megatron_fsdp != "none":  # stacks/megatron_fsdp.py; Megatron-FSDP v1 runs with the distributed optimizer
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", w.megatron_fsdp,
              "--use-distributed-optimizer",
              "--megatron-fsdp-main-params-dtype", prec.master_weights or "auto", "--megatron-fsdp-main-grads-dtype",
              prec.grads if prec.grads in ("fp32", "bf16", "fp16") else "auto", "--ckpt-format", "fsdp_dtensor"]
    elif p.distributed_optimizer or p.zero:
        a.append("--use-distributed-optimizer")
        if p.zero >= 2:
            notes.add(f"ZeRO-{p.zero}: Megatron's distributed optimizer shards the fp32 master weights and optimizer "
                      "state only (ZeRO-1); gradients" + (" and parameters" if p.zero == 3 else "")
                      + " are not sharded (Megatron-FSDP: --use-megatron-fsdp, the estimate's megatron_fsdp)")
    if p.zero_shard_size:
        notes.add(f"hybrid sharding over {p.zero_shard_size} ranks: not a pretrain_gpt.py flag in this layout")
    if p.offload_optimizer:
        a.append("--optimizer-cpu-offload")
        if w.optimizer_offload_fraction != 1.0:
            a += ["--optimizer-offload-fraction", w.optimizer_offload_fraction]
        if not (p.distributed_optimizer or p.zero):
            a.append("--use-distributed-optimizer")  # Megatron's CPU offload lives in the distributed optimizer
    if p.offload_params:
        notes.add("parameter offload (ZeRO-Infinity): Megatron keeps the parameters on the GPU")
    # precision
    if prec.params == "bf16":
        a.append("--bf16")
    elif prec.params == "fp16":
        a.append("--fp16")
    elif prec.activations != "fp32":
        notes.add(f"fp32 parameters with {prec.activations} autocast: Megatron runs the model in its params dtype")
    if prec.params in ("bf16", "fp16") and prec.master_weights is None and w.megatron_fsdp == "none":
        notes.add("no fp32 master weights: Megatron always keeps fp32 main parameters for bf16/fp16 training")
    # --optimizer-cpu-offload asserts --use-precision-aware-optimizer (megatron/training/arguments.py)
    if prec.optimizer_states == "bf16" or w.precision_aware_optimizer or p.offload_optimizer:
        a.append("--use-precision-aware-optimizer")
        if prec.optimizer_states == "bf16":
            a += ["--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
        if not (p.distributed_optimizer or p.zero):
            notes.add("--use-precision-aware-optimizer needs --use-distributed-optimizer")
    if w.grad_reduce_in_bf16 and prec.params == "bf16":
        a.append("--grad-reduce-in-bf16")
    # optimizer
    if w.optimizer in OPTIMIZERS:
        a += ["--optimizer", OPTIMIZERS[w.optimizer]]
        if w.optimizer == "sgd-momentum":
            a += ["--sgd-momentum", 0.9]
        elif w.optimizer == "sgd":
            a += ["--sgd-momentum", 0.0]
    else:
        notes.add(f"optimizer {w.optimizer}: Megatron's --optimizer is adam, sgd, lion, muon or soap")
    if w.recompute == "selective":
        a += ["--recompute-granularity", "selective"]
        mods = w.recompute_modules
        if mods:
            a += ["--recompute-modules", *mods]
        elif mods is not None:  # Megatron-LM's flag takes one or more (nargs '+'); Megatron-Bridge takes []
            notes.add("recompute_modules []: Megatron-LM's --recompute-modules needs at least one module; set "
                      "model.recompute_modules = [] in a Megatron-Bridge config, or use --recompute none")
    elif w.recompute == "full":
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", 1]
    if w.offload_modules:  # impls/megatron_offload.py: the listed modules' saved tensors to pinned host memory
        a += ["--fine-grained-activation-offloading", "--offload-modules", *w.offload_modules]
    a += ["--transformer-impl", "transformer_engine" if w.impl == "megatron-te" else "local"]
    if w.impl not in ("megatron-te", "hf"):
        notes.add(f"model implementation {w.impl}: Megatron runs its own layers (transformer_engine or local)")
    # eager: Megatron's unfused softmax path; PyTorch SDPA is the cuDNN / TE fused kernel ("fused")
    a += ["--attention-backend", {"flash": "flash", "eager": "unfused", "sdpa": "fused"}[w.attention]]
    if stacks.resolve(w) != NAME:
        notes.add(f"the estimate is for the {stacks.resolve(w)} stack; re-estimate with stack megatron for "
                  "Megatron's persistent fp32 gradient buffer")
    return [str(x) for x in a]


def build(m, w) -> Export:
    notes = Notes()
    args = arguments(m, w, notes)
    common_training_notes(m, w, notes, attention=True, alloc_env=True, compile_=True, liger=True)
    body = shell_command(launcher(w, "pretrain_gpt.py"), args)
    head = f"#!/usr/bin/env bash\n# {TARGET}: {LABEL}\n" + notes.comment_block()
    return Export(NAME, TARGET, "megatron_pretrain_gpt.sh", "text/x-shellscript",
                  head + body, tuple(notes.lines))
