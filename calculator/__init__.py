"""LLM GPU Memory Calculator: per-GPU memory of training and inference of transformer models, term by term.

    from calculator import estimate, ModelSpec, Workload
    from calculator.model.presets import load_model
    est = estimate(load_model("llama-3.1-8b").spec, Workload(mode="train", seq_len=4096))
    est.peak_allocated_bytes, est.total_bytes, est.components, est.terms
    est.fits  # a fit card per GPU, with the planner's fewest GPUs of that kind and its layout

`calculator.estimate` is calculator.planning.fit_cards.estimate_with_plans; the estimate without the planner's search
is calculator.stages.estimate.estimate. The layout and what each part may import: docs/architecture.md.
"""
from calculator.core.errors import InputError
from calculator.planning.fit_cards import estimate_with_plans as estimate  # fit cards with the planner's search
from calculator.model.spec import GenericModel, ModelSpec
from calculator.core.result import Estimate, Fit, StageEstimate, Term
from calculator.core.workload import Overheads, Parallelism, Precision, Workload

__all__ = ["estimate", "ModelSpec", "GenericModel", "Workload", "Precision", "Parallelism", "Overheads",
           "Estimate", "StageEstimate", "Term", "Fit", "InputError"]
