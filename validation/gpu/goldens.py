"""Real-GPU golden cases (tests/golden_gpu/**/*.json) and the one mapping from a case to the engine's inputs.

A case says how it ran in its `case` fields (the harness protocol of shared/validation/gpu-h200/README.md); the
engine is given the same run as the command line a user would type:

    python -m calculator estimate --model <config_full as a file> --mode train --batch 1 --seq 4096 \
        --recipe pure-bf16 --stack hf-trainer --attention sdpa --gpu h200 ...

`case_argv` is that mapping (the only one); `engine_inputs` parses it with the CLI's own parser, so the tests,
`validation/gpu/compare.py` and the CLI cannot disagree. `measured` reads the snapshot the engine's two totals
stand for: `torch.cuda.max_memory_allocated` and the driver's `total − free` (what nvidia-smi shows).
"""
from __future__ import annotations

import hashlib
import json
import tempfile
from functools import lru_cache
from pathlib import Path

GOLDEN_GPU_DIR = Path(__file__).resolve().parents[2] / "tests" / "golden_gpu"
TRAINING_KINDS = ("train", "trainer", "lora", "qlora")


def load_cases(root: Path = GOLDEN_GPU_DIR) -> list[dict]:
    """Every golden record under tests/golden_gpu/, recursively (new harnesses add folders of their own)."""
    out = []
    for path in sorted(root.rglob("*.json")):
        record = json.loads(path.read_text())
        if isinstance(record, dict) and "case" in record:
            record["_path"] = str(path.relative_to(root))
            out.append(record)
    return out


def stack_of(case: dict) -> str:
    """The training stack a case ran under (calculator/stacks/); inference runs HF generate."""
    if case["kind"] not in TRAINING_KINDS:
        return "hf-generate"
    return {"ddp": "ddp", "fsdp2": "fsdp2", "deepspeed": "deepspeed", "megatron": "megatron"}.get(
        case.get("wrap", ""), "hf-trainer")


def group_of(record: dict) -> str:
    """stack / model implementation / kind of run: the rows of the GPU accuracy matrix."""
    case = record["case"]
    return f"{stack_of(case)} / {case.get('impl', 'hf')} / {case['kind']}"


def case_argv(case: dict, gpu: str = "h200") -> list[str]:
    """The `python -m calculator estimate` flags (without --model) that describe one measured run."""
    kind = case["kind"]
    argv = ["--batch", str(case["batch"]), "--seq", str(case["seq"]), "--gpu", gpu]
    attention = {"sdpa": "sdpa", "eager": "eager"}[case.get("attn", "sdpa")]
    if kind in ("infer", "infer-quant"):
        argv = ["--mode", "infer"] + argv + ["--gen", str(case.get("gen", 0)), "--attention", attention]
        quant = case.get("quant")
        if quant == "nf4":  # bitsandbytes NF4: 64-element blocks
            argv += ["--weight-dtype", "nf4", "--quant-group-size", "64"]
        elif quant == "int8":  # bitsandbytes LLM.int8
            argv += ["--weight-dtype", "int8", "--quant-method", "llm-int8"]
    else:
        stack = stack_of(case)
        recipe = case.get("recipe", "pure-bf16")
        if stack == "fsdp2":  # fp32 shards, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)
            recipe = "mixed-bf16"
        argv = ["--mode", "train"] + argv + ["--recipe", recipe, "--stack", stack, "--attention", attention,
                                             "--recompute", case.get("recompute", "none")]
        if kind in ("lora", "qlora"):
            targets = {"all-linear": "all-linear", "qv": "qv"}[case["lora"]]
            argv += ["--finetune", kind, "--lora-rank", "16", "--lora-targets", targets]
        if case.get("opt") == "adamw-8bit":
            argv += ["--optimizer", "adamw-8bit"]
        argv += ["--optimizer-impl", case.get("opt_impl", "fused")]
        if case.get("set_to_none") is False:
            argv += ["--zero-grad", "zeros"]
        if case.get("bucket_view"):
            argv += ["--bucket-view"]
        if case.get("kbit_prep"):
            argv += ["--kbit-prep"]
    if case.get("impl"):
        argv += ["--impl", case["impl"]]
    if case.get("padmask"):
        argv += ["--padded-batch"]
    if case.get("alloc_conf") == "expandable_segments:True":
        argv += ["--expandable-segments"]
    return argv


@lru_cache(maxsize=None)
def _config_file(text: str) -> str:
    """config_full written once to a temporary file, as a user would pass it with --model."""
    folder = Path(tempfile.gettempdir()) / "calculator-golden-gpu-configs"
    folder.mkdir(exist_ok=True)
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.exists():
        path.write_text(text)
    return str(path)


def full_argv(record: dict) -> list[str]:
    """The whole command line: estimate --model <config file> + case_argv."""
    config = _config_file(json.dumps(record["config_full"], sort_keys=True))
    return ["estimate", "--model", config] + case_argv(record["case"], record.get("gpu", "h200"))


def engine_inputs(record: dict):
    """(ModelSpec, Workload) of a record, through the CLI's parser. Raises the CLI's errors (CliError,
    InputError, ConfigError, pydantic ValidationError) when the engine cannot describe the run yet."""
    from calculator.cli.main import build_inputs
    from calculator.cli.parser import build_parser
    args = build_parser().parse_args(full_argv(record))
    model, workload, _ = build_inputs(args)
    return model, workload


def measured_snapshot(record: dict) -> dict | None:
    """The snapshot whose max_allocated is the run's peak: step 2's whole step (steady state with the optimizer
    state present) for training, the end of generate() for inference; None for a run that did not finish."""
    if record.get("status") != "ok":
        return None
    if record["case"]["kind"] in TRAINING_KINDS:
        return record["step2"]["step"]
    return record["end"]


def measured(record: dict) -> dict | None:
    """peak allocated, peak reserved and nvidia-smi (device used) of a finished run, in bytes."""
    snap = measured_snapshot(record)
    if snap is None:
        return None
    return {"peak_allocated": snap["max_allocated"], "peak_reserved": snap["max_reserved"],
            "nvidia_smi": snap["device_used"]}
