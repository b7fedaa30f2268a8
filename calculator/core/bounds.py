"""Physical bounds on every input and on every result, in one place.

Each size, count, degree and token length the engine takes has an upper bound well above any model or cluster
that exists (the largest published decoders have < 200 layers, hidden sizes < 30k, vocabularies < 300k, a few
hundred experts; contexts reach 10M tokens; the largest clusters ~10^5 GPUs), and far below what would make the
engine's own work grow without bound: the per-layer loops (parameter counts, pipeline stages) are bounded by
MAX_LAYERS, so no input makes one estimate take more than milliseconds. The pydantic models (`ModelSpec`,
`Workload`) enforce these on construction, before any work; `calculator.model.hf_config` enforces them on a raw
config.json before it is mapped.

A result above MAX_RESULT_BYTES (10^18 B = 1 EB per GPU, ~10^4 times the largest GPU memory) is not a memory
figure but the sign of inputs no job can have: `check_plausible` refuses it with a message naming the inputs.
"""
from __future__ import annotations

import typing

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ValidationError

# ---- the model ---------------------------------------------------------------------------------------------------
MAX_HIDDEN = 1 << 20  # hidden size, q/k/v widths, low-rank MLA widths
MAX_LAYERS = 10_000  # decoder layers: bounds every per-layer loop of the engine
MAX_HEADS = 1 << 16  # attention and KV heads
MAX_HEAD_DIM = 1 << 17
MAX_FFN = 1 << 24  # MLP / expert widths
MAX_VOCAB = 1 << 27
MAX_EXPERTS = 1 << 20
MAX_SHARED_EXPERTS = 1 << 16
MAX_WINDOW = 1 << 30  # sliding window, tokens
MAX_POSITIONS = 1 << 27  # learned position-embedding rows
MAX_NORMS_PER_LAYER = 16
MAX_PARAMS = 10**15  # generic network: total parameters
MAX_ACTIVATION_ELEMENTS = 10**15  # generic network: activation elements per sample
MAX_NAME_CHARS = 1000

# ---- the workload ------------------------------------------------------------------------------------------------
MAX_TOKENS = 1 << 26  # sequence length, generated tokens (67,108,864)
MAX_BATCH = 1 << 20
MAX_DEGREE = 1 << 16  # any one parallel degree (tp, dp, cp, ep, etp, virtual stages)
MAX_PIPELINE_STAGES = 512  # pp: every stage is estimated on its own (the largest runs use 16–64)
MAX_MICROBATCHES = 1 << 20
MAX_LORA_RANK = 1 << 16
MAX_GROUP_SIZE = 1 << 20
MAX_OVERHEAD_BYTES = 10**13  # CUDA context, NCCL buffers: 10 TB is beyond any device

# ---- results -----------------------------------------------------------------------------------------------------
MAX_RESULT_BYTES = 10**18


def check_plausible(figures: dict[str, int], inputs: str) -> None:
    """Raise InputError when any figure (bytes) is negative or above MAX_RESULT_BYTES; `inputs` names the inputs."""
    from calculator.core.errors import InputError
    for what, value in figures.items():
        if value < 0:
            raise InputError("workload", f"{what} came out negative ({value:,} B) for {inputs}; this is a bug, "
                                         f"please report the inputs")
        if value > MAX_RESULT_BYTES:
            raise InputError("workload", f"{what} would be {value:.3g} bytes per GPU, above the physical bound of "
                                         f"{MAX_RESULT_BYTES:.0e} B; no job has {inputs}: lower them")


def check_stages(stages, model, w) -> None:
    """Refuse an estimate whose per-GPU figures exceed the physical bound, naming the inputs that produced it (the
    message is built only then)."""
    for s in stages:
        total, host = s.total_bytes, s.host_bytes
        if 0 <= total <= MAX_RESULT_BYTES and 0 <= host <= MAX_RESULT_BYTES:
            continue
        if hasattr(model, "total_params"):
            size = f"{model.total_params:,} parameters"
        else:
            size = (f"{model.num_hidden_layers:,} layers, hidden size {model.hidden_size:,}, "
                    f"vocabulary {model.vocab_size:,}")
        inputs = (f"micro_batch={w.micro_batch:,}, seq_len={w.seq_len:,}, gen_tokens={w.gen_tokens:,} "
                  f"with a model of {size}")
        check_plausible({f"pipeline stage {s.stage}'s total": total, f"pipeline stage {s.stage}'s host RAM": host},
                        inputs)


# ---- messages ----------------------------------------------------------------------------------------------------
def _field_annotation(model: type[BaseModel], loc: tuple) -> tuple[typing.Any, list]:
    """The annotation and metadata of the field at `loc` (nested models followed), or (None, [])."""
    ann, meta = model, []
    for part in loc:
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            inner = [a for a in typing.get_args(ann) if isinstance(a, type) and issubclass(a, BaseModel)]
            if not inner:
                return None, []
            ann = inner[0]
        info = ann.model_fields.get(str(part))
        if info is None:
            return None, []
        ann, meta = info.annotation, info.metadata
    return ann, meta


def allowed_range(model: type[BaseModel], loc: tuple) -> str:
    """'1–10,000' for a bounded numeric field at `loc`, '' when the field has no numeric bounds."""
    _, meta = _field_annotation(model, loc)
    lo = hi = None
    for m in meta:
        if isinstance(m, Ge):
            lo = m.ge
        elif isinstance(m, Gt):
            lo = m.gt + 1 if isinstance(m.gt, int) else m.gt
        elif isinstance(m, Le):
            hi = m.le
        elif isinstance(m, Lt):
            hi = m.lt
    if lo is None and hi is None:
        return ""
    fmt = (lambda v: f"{v:,}" if isinstance(v, int) else f"{v:g}")
    if hi is None:
        return f"at least {fmt(lo)}"
    if lo is None:
        return f"at most {fmt(hi)}"
    return f"{fmt(lo)}–{fmt(hi)}"


def describe(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> tuple[str, str]:
    """(field path, one line) for the first error of a pydantic ValidationError: the field, what is wrong, and the
    allowed range where the field has one."""
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if not isinstance(p, int))
    where = prefix + ".".join(str(p) for p in loc) if loc else (prefix.rstrip(".") or "input")
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    rng = allowed_range(model, loc) if loc else ""
    if rng and err["type"] in ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "int_type",
                               "int_parsing", "int_from_float", "float_type", "finite_number"):
        msg += f" (allowed: {rng})"
    ctx = err.get("ctx") or {}
    if "expected" in ctx:
        msg += f" (allowed: {ctx['expected']})"
    if err["type"] in ("int_type", "bool_type", "float_type", "string_type") and "input" in err:
        msg += f"; got {type(err['input']).__name__} {str(err['input'])[:40]!r}"
    return where, msg
