"""torchao low-bit optimizer rows, Llama-2-7B full bf16 fine-tune (torchtune): optimizer-state deltas only."""
from __future__ import annotations

from calculator import estimate
from calculator.core.workload import RECIPES, Workload
from validation.published.models import hf_spec
from validation.published.rows import GIB, Comparison, error_pct, resolution_pct, measured_bytes

# torchtune (mid-2024, torchtune/utils/memory.py get_memory_stats) divides max_memory_allocated by 1024**3; the
# README labels it "GB". Assumed GiB.
TORCHAO_UNIT = GIB
TORCHAO_REFERENCE = "102"  # PyTorch fused AdamW, bf16 states


def _llama2_7b_optimizer_states(optimizer: str) -> int:
    w = Workload(mode="train", micro_batch=1, seq_len=512, precision=RECIPES["pure-bf16"][1], optimizer=optimizer,
                 optimizer_impl="fused")
    return estimate(hf_spec("Llama-2-7B"), w, with_fits=False).components["optimizer_states"]


def torchao(row: dict[str, str], by_id: dict[str, dict[str, str]]) -> Comparison:
    meas_abs = measured_bytes(row, TORCHAO_UNIT)
    config = f"Llama-2-7B full bf16 fine-tune (torchtune), {row['optimizer']}"
    if row["id"] == TORCHAO_REFERENCE:
        return Comparison(row["id"], row["source"], "torchao optimizer delta", "Llama-2-7B", config,
                          "peak_allocated", meas_abs, None, None, False,
                          "absolute peak: batch size, sequence lengths and activation checkpointing are not stated; "
                          "used as the reference of the deltas", "", resolution_pct(row["value"]))
    if "4-bit" in row["optimizer"]:
        return Comparison(row["id"], row["source"], "torchao optimizer delta", "Llama-2-7B", config,
                          "optimizer-state delta vs fused AdamW", measured_bytes(by_id[TORCHAO_REFERENCE],
                                                                                 TORCHAO_UNIT) - meas_abs,
                          None, None, False, "4-bit optimizer states are not an engine option")
    meas = measured_bytes(by_id[TORCHAO_REFERENCE], TORCHAO_UNIT) - meas_abs
    est = _llama2_7b_optimizer_states("adamw") - _llama2_7b_optimizer_states("adamw-8bit")
    return Comparison(row["id"], row["source"], "torchao optimizer delta", "Llama-2-7B",
                      config + " vs PyTorch fused AdamW (bf16 states)", "optimizer-state delta vs fused AdamW", meas,
                      est, error_pct(est, meas), True, "",
                      "unit assumed GiB (torchtune get_memory_stats / 1024**3); 8-bit: 1 B per state element + one "
                      "fp32 absmax per 256 (bnb and torchao both use 256-element blocks)",
                      round(100 * 2 * 0.05 * GIB / meas, 3))
