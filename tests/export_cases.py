"""Shared inputs for the export tests: real presets and workloads covering each field an export maps, and a parser
rebuilt from a framework's recorded flag definitions (tests/data/exports/*_flags.json, validation/exports/flags.py)
for the frameworks that cannot be installed here (Megatron-LM, vLLM, SGLang)."""
from __future__ import annotations

import argparse
import json
import shlex
from functools import lru_cache
from pathlib import Path

from calculator.model.presets import load_model
from calculator.core.workload import Workload

FLAGS_DIR = Path(__file__).resolve().parent / "data" / "exports"


@lru_cache(maxsize=None)
def model(preset: str):
    return load_model(preset).spec


TRAINING = {
    "zero3-dp8": ("llama-3.1-8b", Workload(mode="train", micro_batch=2, seq_len=4096, recompute="full",
                                           parallel={"dp": 8, "zero": 3, "num_microbatches": 4})),
    "tp8-pp2-dp4": ("llama-3.1-70b", Workload(mode="train", seq_len=8192, recompute="selective",
                                              parallel={"tp": 8, "pp": 2, "dp": 4, "sequence_parallel": True,
                                                        "distributed_optimizer": True, "num_microbatches": 8})),
    "offload": ("llama-3.1-8b", Workload(mode="train", parallel={"dp": 4, "zero": 3, "offload_optimizer": True,
                                                                 "offload_params": True})),
    "pure-bf16-zero2": ("qwen3-8b", Workload(mode="train", micro_batch=4, seq_len=2048,
                                             precision={"params": "bf16", "grads": "bf16", "master_weights": None,
                                                        "optimizer_states": "bf16"},
                                             parallel={"dp": 2, "zero": 2})),
    "moe-ep": ("mixtral-8x7b", Workload(mode="train", seq_len=4096, recompute="full",
                                        parallel={"tp": 2, "dp": 8, "ep": 8, "pp": 2, "schedule": "interleaved",
                                                  "virtual_stages": 2, "num_microbatches": 4})),
    "mla-cp": ("deepseek-v2-lite", Workload(mode="train", seq_len=16384, parallel={"cp": 2, "dp": 4, "zero": 1})),
    "uneven-pp16": ("deepseek-v3", Workload(mode="train", recompute="full",
                                            parallel={"pp": 16, "dp": 8, "ep": 8, "etp": 1, "zero": 1,
                                                      "pp_first_stage_layers": 2, "pp_last_stage_layers": 3,
                                                      "num_microbatches": 32})),
    "hsdp": ("llama-3.1-8b", Workload(mode="train", stack="fsdp2", parallel={"dp": 16, "zero": 3,
                                                                             "zero_shard_size": 8})),
    "single-lora": ("llama-3.1-8b", Workload(mode="train", finetune="qlora", lora_rank=32, impl="liger",
                                             optimizer="adamw-8bit", expandable_segments=True)),
}

SERVING = {
    "vllm-tp4": ("llama-3.1-70b", Workload(mode="infer", engine="vllm", seq_len=8192, gen_tokens=512, kv_dtype="fp8",
                                           parallel={"tp": 4},
                                           serving={"memory_fraction": 0.85, "max_model_len": 16384,
                                                    "max_num_seqs": 64, "max_num_batched_tokens": 8192,
                                                    "block_size": 32, "prefix_caching": False,
                                                    "cuda_graphs": False})),
    "sglang-dp-attention": ("deepseek-v3", Workload(mode="infer", engine="sglang", parallel={"tp": 8, "ep": 8, "etp": 1},
                                                     weight_dtype="fp8",
                                                     serving={"attention_dp": 8, "memory_fraction": 0.8})),
    "awq": ("qwen2.5-7b", Workload(mode="infer", weight_dtype="int4", quant_method="awq", micro_batch=8,
                                   parallel={"dp": 2})),
    "rl-rollout": ("qwen3-8b", Workload(mode="rl", rl={"rollout_engine": "vllm", "rollout_tp": 2,
                                                       "memory_fraction": 0.6, "prompt_len": 1024,
                                                       "response_len": 4096})),
}


@lru_cache(maxsize=None)
def flag_record(name: str) -> dict:
    return json.loads((FLAGS_DIR / f"{name}_flags.json").read_text(encoding="utf-8"))


def recorded_parser(name: str, positional: str | None = None) -> argparse.ArgumentParser:
    """An argparse parser with exactly the options (kinds, types, choices) the framework defines."""
    parser = argparse.ArgumentParser(prog=name, allow_abbrev=False, exit_on_error=False)
    if positional:
        parser.add_argument(positional)
    types = {"int": int, "float": float, "str": str, None: str}
    seen: dict[tuple, list[str]] = {}
    for opt, spec in flag_record(name)["flags"].items():
        seen.setdefault((spec["dest"] or opt, spec["kind"]), []).append(opt)
    for opt, spec in flag_record(name)["flags"].items():
        kw = {"dest": (spec["dest"] or opt.lstrip("-").replace("-", "_")) + "__" + opt}
        if spec["kind"] in ("store_true", "store_false"):
            parser.add_argument(opt, action=spec["kind"], **kw)
        elif spec["kind"] == "bool_optional":
            if not opt.startswith("--no-"):
                parser.add_argument(opt, action=argparse.BooleanOptionalAction, **kw)
        elif spec["kind"] == "optional_value":
            parser.add_argument(opt, nargs="?", const=True, **kw)
        else:
            nargs = spec.get("nargs")
            parser.add_argument(opt, type=types[spec["type"]], choices=spec["choices"], nargs=nargs, **kw)
    return parser


def command_args(text: str, after: str) -> list[str]:
    """The arguments of a shell command in an exported script, after the token `after`."""
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    tokens = shlex.split(body.replace("\\\n", " "))
    return tokens[tokens.index(after) + 1:]


def parsed(ns: argparse.Namespace, dest: str):
    """The value a recorded parser stored for `dest` (whichever of its spellings was given)."""
    hits = [v for k, v in vars(ns).items() if k.split("__")[0] == dest and v not in (None, False)]
    return hits[0] if hits else None
