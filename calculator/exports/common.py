"""What every export module shares: the file it returns, the list of what the target cannot express, and the few
quantities every training format needs (gradient accumulation, global batch, the model's Hub id).

A format module (calculator/exports/<name>.py) exposes
    NAME, LABEL, TARGET, MODES        its id, a one-line description, the release its keys were read from, the
                                      workload modes it writes a launch for
    build(m, w) -> Export             the file; every workload field the target cannot express is one line of
                                      `Export.warnings` (and a comment in formats that have comments)

Fields that describe the estimate rather than the run (the overhead allowances, the activation model, the GPU chosen
for the fit verdict) are not settings of any framework and are not reported.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from calculator.core.dtypes import Dtype
from calculator.model.spec import ModelSpec


@dataclass(frozen=True)
class Export:
    """One ready-to-run file for one framework."""

    format: str
    target: str  # the framework release whose definitions the keys were checked against
    filename: str
    media_type: str
    text: str
    warnings: tuple[str, ...] = ()  # what the target cannot express, one line each

    def to_dict(self) -> dict:
        return {"format": self.format, "target": self.target, "filename": self.filename,
                "media_type": self.media_type, "text": self.text, "warnings": list(self.warnings)}


@dataclass
class Notes:
    """Collects what a target cannot express, each once, in the order found."""

    lines: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        if text not in self.lines:
            self.lines.append(text)

    def comment_block(self, prefix: str = "# ") -> str:
        if not self.lines:
            return ""
        return "".join(f"{prefix}NOT EXPRESSED: {line}\n" for line in self.lines)


def model_id(m, notes: Notes) -> str:
    """The Hugging Face id (or local path) a launch line names: the preset's / config's `_name_or_path`."""
    name = getattr(m, "name", "") or ""
    if "/" in name:
        return name
    notes.add("the model has no Hugging Face id or path (custom or generic architecture): replace "
              "MODEL_PATH with the checkpoint's")
    return "MODEL_PATH"


def gradient_accumulation(w) -> int:
    """Micro-batches per optimizer step on one data-parallel rank (Parallelism.microbatches: default pp)."""
    return w.parallel.microbatches


def global_batch(w) -> int:
    """Sequences per optimizer step over the whole job: micro-batch × micro-batches × data-parallel degree."""
    return w.micro_batch * gradient_accumulation(w) * w.parallel.dp


TORCH_DTYPE: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def compute_dtype(w) -> Dtype:
    """The dtype the forward runs in: the parameters' when they are half precision, else the activations'
    (PyTorch AMP keeps fp32 parameters and autocasts to bf16)."""
    p = w.precision
    return p.params if p.params in ("bf16", "fp16") else p.activations


def common_training_notes(m, w, notes: Notes, *, peft: bool = False, liger: bool = False, compile_: bool = False,
                          attention: bool = False, alloc_env: bool = False) -> None:
    """The workload fields most training configs have no key for; a format passes True for what it does express."""
    if w.mode == "rl":
        rl = w.rl
        notes.add("RL job: this is the trainer only; the rollout engine (export vllm / sglang), "
                  + ("offloading the trainer during rollout, " if rl.offload_train else "")
                  + ("sleeping the engine during training, " if rl.engine_sleep else "")
                  + "reference / reward / critic models are the RL framework's settings (slime, verl, OpenRLHF)")
    if w.finetune != "full" and not peft:
        adapters = {"qv": '["q_proj", "v_proj"]', "attention": '["q_proj", "k_proj", "v_proj", "o_proj"]',
                    "all-linear": '"all-linear"'}[w.lora_targets]
        notes.add(f"{w.finetune.upper()} adapters are set in the training script, not here: peft.LoraConfig(r="
                  f"{w.lora_rank}, target_modules={adapters})"
                  + (" on a base loaded with BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4')"
                     if w.finetune == "qlora" else ""))
    if w.impl == "liger" and not liger:
        notes.add("Liger kernels (impl liger) are applied in the script: liger_kernel.transformers."
                  "apply_liger_kernel_to_<model>() or AutoLigerKernelForCausalLM")
    if w.impl == "compile" and not compile_:
        notes.add("compiled decoder blocks (impl compile): torch.compile each block in the script")
    if w.attention != "flash" and not attention:
        notes.add(f"{w.attention} attention: load the model with attn_implementation='{w.attention}' (the "
                  "framework's flash kernel is assumed otherwise)")
    if w.expandable_segments and not alloc_env:
        notes.add("expandable segments: export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before launching")
    if not w.zero_grad_set_to_none:
        notes.add("zero_grad(set_to_none=False) is a training-loop choice, not a config key")


def is_moe(m) -> bool:
    return isinstance(m, ModelSpec) and m.num_experts > 0


def shell_command(command: str, args: list[str]) -> str:
    """`command` then one flag per line (a flag with its value, or a bare flag / subcommand), shell-quoted."""
    lines = [command]
    i = 0
    while i < len(args):
        if args[i].startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            lines.append(f"{args[i]} {shlex.quote(args[i + 1])}")
            i += 2
        else:
            lines.append(shlex.quote(args[i]))
            i += 1
    return " \\\n    ".join(lines) + "\n"


def launcher(w, entry: str) -> str:
    """torchrun over the job's GPUs (8 per node), with the allocator setting the estimate assumed."""
    world = w.parallel.world_size
    env = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True " if w.expandable_segments else ""
    nodes = f"--nnodes {world // 8} " if world > 8 and world % 8 == 0 else ""
    return f"{env}torchrun {nodes}--nproc_per_node {min(world, 8)} {entry}"


@dataclass(frozen=True)
class ServingView:
    """The engine settings a serving export writes: the inference workload's own, or an RL job's rollout engine."""

    tp: int
    pp: int
    dp: int
    ep: int
    memory_fraction: float | None
    max_model_len: int | None
    max_num_batched_tokens: int | None
    max_num_seqs: int | None
    block_size: int | None


def serving_view(w, engine: str, notes: Notes) -> ServingView:
    s, p = w.serving, w.parallel
    if w.mode == "rl":
        rl = w.rl
        if rl.rollout_engine != engine:
            notes.add(f"the RL job's rollout engine is {rl.rollout_engine}; these are {engine} flags for the same "
                      "rollout")
        notes.add("RL frameworks (slime, verl, OpenRLHF) start the rollout engine themselves: pass these settings "
                  "through their engine options")
        return ServingView(rl.rollout_tp, 1, 1, 1, rl.memory_fraction, rl.prompt_len + rl.response_len, None, None,
                           None)
    if w.engine not in ("hf", engine):
        notes.add(f"the estimate is for the {w.engine} engine; re-estimate with engine {engine} for its own budget")
    elif w.engine == "hf":
        notes.add(f"the estimate is transformers generate(); re-estimate with engine {engine} for its KV pool")
    if w.micro_batch > 1:
        notes.add(f"{w.micro_batch} concurrent sequences of {w.seq_len} + {w.gen_tokens} tokens are the clients' load, "
                  "not a server flag")
    return ServingView(p.tp, p.pp, p.dp, p.ep, s.memory_fraction, s.max_model_len, s.max_num_batched_tokens,
                       s.max_num_seqs, s.block_size)
