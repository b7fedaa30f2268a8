"""What a time estimate is made of: a roofline row per operation (or collective), the estimate itself, and the
few sums every time estimate shares: an operation's GPU time, rows summed per (operation, phase), the host's
operator time and the cost per million tokens."""
from __future__ import annotations

from dataclasses import dataclass, field

from calculator.timing import roofline as R
from calculator.timing.inputs import TimingInputs
from calculator.timing.roofline import Op, Rates


@dataclass(frozen=True)
class RooflineRow:
    name: str
    phase: str
    flops: float
    bytes: float
    intensity: float
    bound: str  # compute / memory / communication
    time_s: float  # GPU time (communication: link time)
    host_ops: int
    formula: str
    source: str


@dataclass(frozen=True)
class TimeEstimate:
    mode: str
    gpu: str
    step_time_s: float  # training: one optimizer step; inference: the whole generate() call
    tokens_per_step: int
    tokens_per_s: float  # all GPUs; inference: generated tokens (prompt tokens when gen = 0)
    mfu: float
    hfu: float
    model_flops: float  # per step, all GPUs
    gpu_time_s: float  # the critical GPU's kernels, per step
    host_time_s: float  # its host operators, per step
    comm_time_s: float  # exposed communication per step
    bubble_fraction: float
    world_size: int
    cost_per_million_tokens: float | None
    ttft_s: float | None = None
    tpot_s: float | None = None
    roofline: tuple[RooflineRow, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    bottleneck: str = ""  # what bounds the step: compute, memory, host, TP/EP/PP/CP/DP comm, bubble, optimizer

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.world_size

    def to_dict(self) -> dict:
        return {"step_time_s": self.step_time_s, "tokens_per_step": self.tokens_per_step,
                "tokens_per_s": self.tokens_per_s, "tokens_per_s_per_gpu": self.tokens_per_s / self.world_size,
                "mfu": self.mfu, "hfu": self.hfu, "model_flops": self.model_flops,
                "cost_per_million_tokens": self.cost_per_million_tokens, "ttft_s": self.ttft_s,
                "tpot_s": self.tpot_s, "timing": {"gpu": self.gpu, "gpu_time_s": self.gpu_time_s,
                                                  "host_time_s": self.host_time_s, "comm_time_s": self.comm_time_s,
                                                  "bubble_fraction": self.bubble_fraction, "bottleneck": self.bottleneck,
                                                  "world_size": self.world_size, "notes": list(self.notes)},
                "roofline": [r.__dict__ for r in self.roofline]}


def op_seconds(op: Op, r: Rates, fp32_peak: float) -> float:
    """GPU time of an operation (roofline, calculator.timing.roofline.gpu_seconds); fp32 matmuls run at the FP32 peak."""
    if op.kind == "matmul_fp32":
        return R.gpu_seconds(op._replace(kind="matmul"), r._replace(peak_flops=fp32_peak))
    return R.gpu_seconds(op, r)


def host_seconds(ops: list[Op], inputs: TimingInputs) -> float:
    """Host time of the operators: Python + dispatch (+ autograd recording) per forward operator, the autograd
    engine per backward one, no autograd at all for inference (generate() runs under no_grad)."""
    per = {"backward": inputs.host_backward_op_us, "prefill": inputs.host_inference_op_us,
           "decode": inputs.host_inference_op_us}
    return sum(o.host_ops * per.get(o.phase, inputs.host_op_us) for o in ops) * 1e-6


def aggregate_rows(ops: list[Op], times: list[float], r: Rates, times_n: float) -> list[RooflineRow]:
    """One row per (operation, phase), summed, × times_n (micro-batches)."""
    rows: dict[tuple[str, str], list] = {}
    for op, t in zip(ops, times):
        key = (op.name, op.phase)
        if key in rows:
            acc = rows[key]
            rows[key] = [acc[0]._replace(flops=acc[0].flops + op.flops, bytes=acc[0].bytes + op.bytes,
                                         host_ops=acc[0].host_ops + op.host_ops), acc[1] + t]
        else:
            rows[key] = [op, t]
    out = []
    for op, t in rows.values():
        out.append(RooflineRow(op.name, op.phase, op.flops * times_n, op.bytes * times_n, op.intensity,
                               R.bound(op, r), t * times_n, int(op.host_ops * times_n), op.formula, op.source))
    return out


def cost_per_million(price_per_gpu_hour: float | None, gpus: int, seconds: float, tokens: float) -> float | None:
    """USD per million tokens: price × GPUs × seconds / 3600 / tokens × 10⁶."""
    if price_per_gpu_hour is None or tokens <= 0:
        return None
    return price_per_gpu_hour * gpus * seconds / 3600 / tokens * 1e6
