"""DeepSpeed memory estimator rows: exact formulas (model states only)
  ZeRO-2: offload 2P, else 4P + 16P/N;  ZeRO-3: 4·LL (+ 2P/N with params on GPU) or 4·LL + 18P/N
"""
from __future__ import annotations

from calculator import estimate
from calculator.model.spec import ModelSpec
from calculator.core.workload import Parallelism, Precision, Workload
from validation.published.models import EXPECTED_PARAMETERS
from validation.published.rows import Comparison, error_pct, resolution_pct, measured_bytes

T5 = {"t5-3b": (EXPECTED_PARAMETERS["t5-3b"], 32_899_072), "t5-large": (EXPECTED_PARAMETERS["t5-large"], 32_899_072)}

# The estimator's inputs are only the parameter count P and the largest layer LL. The engine needs a decoder, so
# each T5 is stood in for by a decoder with exactly P parameters whose largest ZeRO-3 unit is the tied embedding of
# LL = 32128 × 1024 elements (found by search; tests/validation/test_published.py checks both counts).
STAND_INS = {
    "t5-large": ModelSpec(name="t5-large stand-in", hidden_size=1024, num_hidden_layers=25, num_attention_heads=16,
                          intermediate_size=11716, vocab_size=32128, tie_word_embeddings=True, gated_mlp=False,
                          norms_per_layer=2),
    "t5-3b": ModelSpec(name="t5-3b stand-in", hidden_size=512, num_hidden_layers=128, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=128, intermediate_size=13806, vocab_size=64256,
                       tie_word_embeddings=True, gated_mlp=True, mlp_bias=True, norms_per_layer=1),
}
DS_PRECISION = Precision(params="fp16", grads="fp32", master_weights="fp32", optimizer_states="fp32",
                         activations="fp16")  # DeepSpeed fp16: 2 B params + 16 B (fp32 grad, master, m, v)


def deepspeed_formula(stage: int, P: int, LL: int, N: int, offload_optimizer: bool, offload_params: bool) -> int:
    """deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs /
    stage3.estimate_zero3_model_states_mem_needs, GPU side."""
    if stage == 2:
        return 2 * P if offload_optimizer else 4 * P + int(16 * P / N)
    if offload_optimizer:
        return 4 * LL if offload_params else 4 * LL + int(2 * P / N)
    return 4 * LL + int(18 * P / N)


def _ds_case(row: dict[str, str]) -> tuple[str, int, int, bool, bool]:
    model = "t5-3b" if row["model"].startswith("t5-3b") else "t5-large"
    N = int(row["num_gpus"])
    stage = 2 if row["zero_fsdp"] == "ZeRO-2" else 3
    off = row["offload"]
    if "case" in off:  # t5-large rows: case1 no offload, case2 params+optimizer, case3 optimizer only
        opt, par = ("case2" in off or "case3" in off), ("case2" in off)
    else:
        opt, par = "offload_optimizer=cpu" in off, "offload_param=cpu" in off
    return model, N, stage, opt, par


def deepspeed_engine(model: str, N: int, stage: int) -> dict[str, int]:
    """The engine's model states and ZeRO-3 gather buffer on one GPU for the stand-in of `model`."""
    w = Workload(mode="train", micro_batch=1, seq_len=512, precision=DS_PRECISION, optimizer="adamw",
                 optimizer_impl="fused", parallel=Parallelism(dp=N, zero=stage))
    e = estimate(STAND_INS[model], w, with_fits=False)
    c = e.components
    states = c["weights"] + c["master_weights"] + c["gradients"] + c["optimizer_states"]
    # the estimator's largest-layer term is the gathered module and its gradient; DeepSpeed's runtime buffers
    # (reduce bucket, prefetch: calculator/stacks/deepspeed.py) are not in the estimator
    return {"model_states": states, "gather": sum(t.bytes for t in e.terms if t.key == "sharding.gather")}


def deepspeed(row: dict[str, str]) -> Comparison:
    model, N, stage, opt, par = _ds_case(row)
    P, LL = T5[model]
    meas = measured_bytes(row)
    formula = deepspeed_formula(stage, P, LL, N, opt, par)
    off = "params+optimizer" if par else ("optimizer" if opt else "none")
    config = f"{model} ({P:,} params, largest layer {LL:,}), ZeRO-{stage}, {N} GPUs, offload {off}"
    note = f"DeepSpeed formula, exact: {formula:,} B"
    if opt or par:
        return Comparison(row["id"], row["source"], "DeepSpeed estimator", model, config, "model_states", meas, None,
                          None, False, "CPU offload: the engine has no offload option", note,
                          resolution_pct(row["value"]))
    e = deepspeed_engine(model, N, stage)
    est = e["model_states"] + e["gather"]
    if stage == 2:
        return Comparison(row["id"], row["source"], "DeepSpeed estimator", model, config, "model_states", meas, est,
                          error_pct(est, meas), False,
                          "different accounting by design: DeepSpeed's ZeRO-2 estimate keeps an unpartitioned fp16 "
                          "gradient copy (4P = params + grads, + 16P/N); the engine shards the gradients (2P + 16P/N)",
                          note, resolution_pct(row["value"]))
    note += (f"; engine model states {e['model_states']:,} B = 18P/N + 4 B AdamW step per tensor; engine gather "
             f"buffer {e['gather']:,} B = 2·LL·2 B + LL·4 B (unit + prefetch + its fp32 grad) vs DeepSpeed's 4·LL")
    return Comparison(row["id"], row["source"], "DeepSpeed estimator ZeRO-3", model, config,
                      "model_states (+ ZeRO-3 gather)", meas, est, error_pct(est, meas), True, "", note,
                      resolution_pct(row["value"]))
