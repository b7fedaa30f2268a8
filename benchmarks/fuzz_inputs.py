"""Input generators for benchmarks/fuzz.py: plausible values with hostile ones mixed in (wrong types, NaN,
infinities, 10^400, negative and zero counts, markdown and HTML), seeded by the caller's random.Random."""
from __future__ import annotations

import contextlib
import copy
import json
import math
import random

from calculator.core import bounds as B
from calculator.model.hf_config import SUPPORTED_MODEL_TYPES

NAN, INF = float("nan"), float("inf")
# values no field should take, mixed into every generator
HOSTILE = [0, -1, 1, 2, 3, 7, 2**31, 2**63, 10**30, 10**400, 1.5, 2.0, -0.0, NAN, INF, -INF, True, False, "8", "",
           "abc", None, [], {}, [1, 2], {"a": 1}, "`![x](http://evil.invalid/x.png)`"]


HOSTILE_RATE = [0.0]  # share of fields given a hostile value in the input being generated (set per input)


def pick(rng: random.Random, plausible: list, hostile: float = 1.0):
    return rng.choice(HOSTILE) if rng.random() < hostile * HOSTILE_RATE[0] else rng.choice(plausible)


def log_int(rng: random.Random, hi: int) -> int:
    return int(2 ** rng.uniform(0, math.log2(hi)))


def gen_workload(rng: random.Random) -> dict:
    """A Workload dict: plausible values (layouts that often hold), with hostile ones at HOSTILE_RATE."""
    HOSTILE_RATE[0] = rng.choice([0.0, 0.0, 0.0, 0.03, 0.1])
    mode = pick(rng, ["train", "train", "infer", "infer", "rl"], 0.3)
    w = {"mode": mode}
    choices = {
        "micro_batch": lambda: rng.choice([1, 2, 4, 8, log_int(rng, B.MAX_BATCH)]),
        "seq_len": lambda: rng.choice([128, 1024, 4096, 32768, log_int(rng, B.MAX_TOKENS)]),
        "gen_tokens": lambda: rng.choice([0, 128, 4096, log_int(rng, B.MAX_TOKENS)]),
        "optimizer": lambda: rng.choice(["adamw", "adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion", "none"]),
        "optimizer_impl": lambda: rng.choice(["fused", "foreach", "for-loop"]),
        "recompute": lambda: rng.choice(["none", "selective", "full"]),
        "attention": lambda: rng.choice(["flash", "eager"]),
        "activation_model": lambda: rng.choice(["exact", "textbook", "fujii"]),
        "impl": lambda: rng.choice(["hf", "liger", "compile", "megatron-te"]),
        "kv_dtype": lambda: rng.choice(["bf16", "fp8", "int8", "int4", "fp32"]),
        "weight_dtype": lambda: rng.choice([None, "int4", "nf4", "fp8", "int8", "fp4"]),
        "expert_weight_dtype": lambda: rng.choice([None, "fp4", "int4"]),
        "quant_group_size": lambda: rng.choice([32, 64, 128, log_int(rng, B.MAX_GROUP_SIZE)]),
        "quant_method": lambda: rng.choice(["awq", "gptq"]),
        "finetune": lambda: rng.choice(["full", "lora", "qlora"]),
        "lora_rank": lambda: rng.choice([8, 16, 64, log_int(rng, B.MAX_LORA_RANK)]),
        "lora_targets": lambda: rng.choice(["qv", "attention", "all-linear"]),
        "stack": lambda: rng.choice([None, "hf-trainer", "ddp", "fsdp2", "deepspeed", "megatron"]),
        "zero_grad_set_to_none": lambda: rng.random() < 0.7,
        "ddp_bucket_view": lambda: rng.random() < 0.3,
        "ddp_rebuild_peak": lambda: rng.random() < 0.3,
        "ds_auto_buckets": lambda: rng.random() < 0.3,
        "expandable_segments": lambda: rng.random() < 0.3,
        "engine": lambda: rng.choice(["hf", "vllm", "sglang"]) if mode != "train" else "hf",
        "gpu": lambda: rng.choice([None, "h100-sxm", "h200", "a100-80gb", "rtx-4090", "nope"]),
    }
    for key, make in choices.items():
        if rng.random() < 0.4:
            w[key] = rng.choice(HOSTILE) if rng.random() < HOSTILE_RATE[0] else make()
    par = {}
    for key, plausible in {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "dp": [1, 2, 8, 64], "cp": [1, 2], "ep": [1, 2, 8],
                           "etp": [1, 2], "zero": [0, 1, 2, 3], "virtual_stages": [1, 2],
                           "num_microbatches": [None, 1, 8, 64], "zero_shard_size": [None, 8]}.items():
        if rng.random() < 0.3:
            par[key] = pick(rng, plausible + [log_int(rng, 1 << 17)] * (rng.random() < 0.1))
    for key in ("sequence_parallel", "distributed_optimizer", "offload_optimizer", "offload_params"):
        if rng.random() < 0.15:
            par[key] = rng.random() < 0.5
    if rng.random() < 0.1:
        par["schedule"] = rng.choice(["1f1b", "interleaved"])
        par["virtual_stages"] = pick(rng, [2, 4])
    if par.get("offload_params"):
        par["zero"] = 3
    if mode == "rl" and rng.random() < 0.9:
        w["gpu"] = rng.choice(["h100-sxm", "h200", "b200"])
    if par:
        w["parallel"] = par
    if rng.random() < 0.15:
        w["overheads"] = {"fragmentation_pct": pick(rng, [None, 0, 5.0, 30.0, 100.0])}
    if w.get("engine") in ("vllm", "sglang") and rng.random() < 0.5:
        w["serving"] = {k: pick(rng, v) for k, v in {
            "memory_fraction": [0.5, 0.9, 1.0], "max_model_len": [None, 4096, 131072, log_int(rng, 1 << 27)],
            "max_num_seqs": [None, 1, 256], "block_size": [None, 1, 16, 64], "attention_dp": [1, 2]}.items()
            if rng.random() < 0.4}
        w.setdefault("gpu", rng.choice(["h100-sxm", "h200", None]))
    if mode == "rl" and rng.random() < 0.6:
        w["rl"] = {k: pick(rng, v) for k, v in {
            "rollout_batch_size": [1, 32, 512], "samples_per_prompt": [1, 8, 64], "prompt_len": [0, 1024, 8192],
            "response_len": [1, 8192, 65536], "rollout_tp": [1, 2, 8], "colocate": [True, False],
            "rollout_gpus": [None, 1, 8], "memory_fraction": [None, 0.5, 0.85], "critic": [True, False],
            "reference_model": [True, False]}.items() if rng.random() < 0.4}
    if rng.random() > HOSTILE_RATE[0] * 5 and "ep" in par:
        del par["ep"]  # expert parallelism only for MoE models: kept in hostile inputs
    if rng.random() < 0.2:
        from calculator.core.workload import RECIPES
        w["precision"] = RECIPES[rng.choice(list(RECIPES))][1].model_dump()
    return w


def gen_custom_spec(rng: random.Random) -> dict:
    h = pick(rng, [64, 1024, 4096, log_int(rng, B.MAX_HIDDEN)])
    spec = {"name": "fuzz", "hidden_size": h, "num_hidden_layers": pick(rng, [1, 2, 32, log_int(rng, B.MAX_LAYERS)]),
            "num_attention_heads": pick(rng, [1, 8, 32, 64]), "num_key_value_heads": pick(rng, [1, 8, 32]),
            "intermediate_size": pick(rng, [128, 4096, log_int(rng, B.MAX_FFN)]),
            "vocab_size": pick(rng, [100, 32000, 262144, log_int(rng, B.MAX_VOCAB)]),
            "family": rng.choice(["llama", "gemma", "phi3", "gpt2", "gpt_neox", "deepseek", "gpt_oss"])}
    if rng.random() < 0.3:
        e = pick(rng, [0, 8, 64, 256])
        spec.update(num_experts=e, num_experts_per_tok=pick(rng, [1, 2, 8]),
                    moe_intermediate_size=pick(rng, [None, 256, 2048]))
    if rng.random() < 0.2:
        spec["sliding_window"] = pick(rng, [None, 1, 512, 4096])
    if rng.random() < 0.2:
        spec["head_dim"] = pick(rng, [None, 64, 128, 256])
    return spec


def mutate_config(rng: random.Random, cfg: dict, types: tuple[str, ...] | None = None) -> str:
    """A config.json text: a real config with 1-4 fields changed, removed or nested, sometimes mangled as text."""
    cfg = copy.deepcopy(cfg)
    target = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) and rng.random() < 0.7 else cfg
    for _ in range(rng.randint(1, 4)):
        keys = list(target) or ["hidden_size"]
        key = rng.choice(keys + ["model_type", "num_local_experts", "layer_types", "sliding_window",
                                 "decoder_sparse_step", "interleave_moe_layer_step", "num_experts_per_tok",
                                 "architectures", "quantization_config", "moe_latent_size", "additional_vocab_size"])
        r = rng.random()
        if r < 0.5:
            target[key] = rng.choice(HOSTILE)
        elif r < 0.6:
            target.pop(key, None)
        elif r < 0.7:
            target["model_type"] = rng.choice(list(SUPPORTED_MODEL_TYPES if types is None else types)
                                              + ["brand_new", "", "llama " * 50])
        elif r < 0.8:
            n = target.get("num_hidden_layers") if isinstance(target.get("num_hidden_layers"), int) else 4
            target["layer_types"] = [rng.choice(["full_attention", "sliding_attention", "linear_attention", 3])
                                     for _ in range(max(0, min(n, 300) + rng.choice([0, 0, 1, -1])))]
        elif r < 0.9 and isinstance(target.get(key), (int, float)) and not isinstance(target.get(key), bool):
            target[key] = target[key] * rng.choice([0, -1, 2, 1000, 10**6, 10**12])
        else:
            target[key] = {"nested": [target.get(key)]}
    text = json.dumps(cfg)
    r = rng.random()
    if r < 0.05:
        text = "[" * rng.choice([33, 1000, 100_000]) + text
    elif r < 0.1:
        text = text.replace(": 2", ": 1" + "0" * rng.choice([20, 400, 5000]), 1)
    elif r < 0.13:
        text = text.replace(": 1", ": 1e400", 1)
    elif r < 0.15:
        text = text[: rng.randint(0, len(text))]
    return text


def base_configs(types: tuple[str, ...] | None = None, presets: tuple[str, ...] | None = None) -> list[dict]:
    """The presets' config.json files (`presets`: these ids, default all) and the config transformers writes for
    each model type (`types`, default every supported one)."""
    from calculator.model.presets import MODELS_DIR
    configs = [json.loads(p.read_text()) for p in sorted(MODELS_DIR.glob("*.json"))
               if presets is None or p.stem in presets]
    try:  # the configs transformers 5 writes for every supported type (their default sizes)
        import logging

        import transformers
        logging.getLogger("transformers").setLevel(logging.ERROR)
        for t in (SUPPORTED_MODEL_TYPES if types is None else types):
            with contextlib.suppress(Exception):
                configs.append(transformers.AutoConfig.for_model(t, pad_token_id=None).to_dict())
    except ImportError:
        pass
    return configs


CLI_FLAGS = {  # flag -> plausible values (hostile ones are mixed in)
    "--mode": ["train", "infer", "rl"], "--batch": ["1", "4"], "--seq": ["512", "4096", "131072"],
    "--gen": ["0", "256"], "--recipe": ["mixed-bf16", "pure-bf16", "fp32"], "--optimizer": ["adamw", "sgd"],
    "--recompute": ["none", "full"], "--attention": ["flash", "eager"], "--impl": ["hf", "liger", "compile"],
    "--kv-dtype": ["bf16", "fp8"], "--weight-dtype": ["int4", "bf16"], "--quant-group-size": ["128"],
    "--tp": ["1", "2", "8"], "--pp": ["1", "2"], "--dp": ["1", "8"], "--cp": ["1", "2"], "--ep": ["1", "8"],
    "--vpp": ["1", "2"], "--microbatches": ["8"], "--zero": ["0", "1", "2", "3"], "--zero-shard-size": ["8"],
    "--fragmentation": ["5", "30"], "--cuda-context": ["500000000"], "--gpu": ["h100-sxm", "h200", "a100-80gb"],
    "--stack": ["hf-trainer", "ddp", "fsdp2", "deepspeed", "megatron"], "--finetune": ["full", "lora", "qlora"],
    "--lora-rank": ["8", "64"], "--engine": ["hf", "vllm", "sglang"], "--memory-fraction": ["0.9"],
    "--max-model-len": ["8192"], "--max-num-seqs": ["256"], "--block-size": ["16"], "--engine-version": ["0.11"],
    "--rollout-batch-size": ["32"], "--response-len": ["4096"], "--rollout-tp": ["1", "2"],
    "--rollout-memory-fraction": ["0.5"], "--price-per-gpu-hour": ["2.5"], "--matmul-efficiency": ["0.6"],
    "--host-op-us": ["40"], "--nvlink-gbps": ["450"], "--gpus-per-node": ["8"], "--peak-tflops": ["990"],
    "--memory-bandwidth-gbps": ["3350"], "--unit": ["GB", "GiB"], "--max-tp": ["8"], "--gpus": ["1", "8"],
    "--rank": ["memory", "time"], "--for": ["micro_batch", "seq_len"], "--over": ["micro_batch", "seq_len", "gpus"],
    "--values": ["1,2,4", "1024,4096", "1,8,64"], "--max-micro-batch": ["4", "64"], "--limit": ["3"],
}
SWITCHES = ["--csv", "--include-unfit", "--sequence-parallel", "--distributed-optimizer", "--offload-optimizer", "--master-weights",
            "--expandable-segments", "--bucket-view", "--no-colocate", "--critic", "--no-safe-band", "--json"]
HOSTILE_ARGS = ["nan", "inf", "-inf", "-1", "0", "1e400", "99999999999999999999999", "", "abc", "1.5", "--tp",
                "x" * 300, "\x00"]


def gen_argv(rng: random.Random, config_paths: list[str]) -> list[str]:
    command = rng.choice(["estimate"] * 6 + ["solve", "plan", "sweep", "advise"])
    r = rng.random()
    if r < 0.7:
        model = ["--model", rng.choice(["llama-3.2-1b", "qwen3-8b", "gpt2", "qwen3-30b-a3b", "gemma-3-1b",
                                        "deepseek-v3", "mixtral-8x7b", "llama-3.1-8b"])]
    elif r < 0.8 and config_paths:
        model = ["--model", rng.choice(config_paths)]
    elif r < 0.9:
        model = ["--generic-params", rng.choice(["7000000000", "0", "-5", "1e9", "99999999999999999999"])]
    else:
        model = ["--model", rng.choice(["", "nope", "x" * 300, "a/" * 200, "../../etc/passwd", "org/name\x00"])]
    argv = [command] + model
    for flag in rng.sample(list(CLI_FLAGS), rng.randint(0, 6)):
        value = rng.choice(HOSTILE_ARGS) if rng.random() < 0.15 else rng.choice(CLI_FLAGS[flag])
        argv += [flag, value]
    argv += rng.sample(SWITCHES, rng.randint(0, 2))
    if command != "estimate" and "--gpu" not in argv and rng.random() < 0.8:
        argv += ["--gpu", "h100-sxm"]
    return argv


def gen_query(rng: random.Random, texts: list[str]) -> dict[str, str]:
    from dashboard.inputs import state
    query = {}
    for p in rng.sample(state.PARAMS, rng.randint(0, 8)):
        if rng.random() < 0.2:
            value = str(rng.choice(HOSTILE + ["1e400", "-1e400", "9" * 500, "Infinity", "`", "</div><img src=x>"]))
        elif p.kind == "bool":
            value = rng.choice(["true", "false"])
        elif p.kind == "choice":
            value = rng.choice(state.options(p.key) or ("x",))
        elif p.kind == "text":
            value = rng.choice(texts) if p.key == "cfg" and texts else rng.choice(["", "org/name", "a`b"])
        else:
            lo, hi = p.lo if p.lo is not None else 0, p.hi if p.hi is not None else 1e6
            value = f"{rng.uniform(lo, hi):.3g}" if p.kind == "float" else str(int(2 ** rng.uniform(0, math.log2(
                max(hi, 2)))) if rng.random() < 0.5 else rng.choice([lo, p.default or lo]))
        query[p.key] = value
    if rng.random() < 0.05:
        query[rng.choice(["zz", "`x`", "![a](http://evil.invalid)"])] = "1"
    if query.get("hf"):
        del query["hf"]  # a Hub id is fetched by the page, not by state; the AppTest sample covers the page
    return query
