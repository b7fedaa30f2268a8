"""LLM GPU Memory Calculator: per-GPU memory of training and inference of transformer models, term by term.

    from calculator import estimate, ModelSpec, Workload
    from calculator.presets import load_model
    est = estimate(load_model("llama-3.1-8b").spec, Workload(mode="train", seq_len=4096))
    est.peak_allocated_bytes, est.total_bytes, est.components, est.terms
"""
from calculator.errors import InputError
from calculator.estimate import estimate
from calculator.model import GenericModel, ModelSpec
from calculator.result import Estimate, Fit, StageEstimate, Term
from calculator.workload import Overheads, Parallelism, Precision, Workload

__all__ = ["estimate", "ModelSpec", "GenericModel", "Workload", "Precision", "Parallelism", "Overheads",
           "Estimate", "StageEstimate", "Term", "Fit", "InputError"]
