"""HF transformers docs rows, bert-large on a V100: nvidia-smi after training (incl. the 1343 MiB context). The
training rows are not comparable (an encoder); their peaks are traced on the meta device and calibrate the context
and the allocator's fragmentation.
"""
from __future__ import annotations

from calculator import estimate
from calculator.model.spec import GenericModel
from calculator.core.workload import RECIPES, Workload
from validation.published.models import EXPECTED_PARAMETERS
from validation.published.rows import GIB, MIB, Comparison, error_pct, resolution_pct, measured_bytes, read_rows

BERT_PARAMS = EXPECTED_PARAMETERS["bert-large-uncased + 2-class head"]


# Peak allocated of the fp32 training rows, traced on the meta device with the byte-exact tracker of
# validation/trace/tracker.py (python -m validation.published.compare --trace-bert re-derives these):
# BertForSequenceClassification (transformers, eager attention, dropout 0.1 with CUDA's 1-byte masks), fp32,
# persistent gradients (HF Trainer 2022 zeroes them in place), transformers' 2022 AdamW (per-parameter loop, one
# sqrt temporary) or transformers' Adafactor.
# (states = weights + grads + optimizer state + inputs and buffers; working = the fwd/bwd or step peak above them).
BERT_TRACED = {
    "56": {"states": 5_362_344_000, "working": 7_013_666_824},  # batch 4, AdamW
    "57": {"states": 5_362_319_400, "working": 1_766_002_696},  # batch 1, AdamW (accumulation: same peak)
    "58": {"states": 5_362_319_400, "working": 154_152_968},  # batch 1, AdamW, gradient checkpointing
    "61": {"states": 2_684_402_516, "working": 7_013_666_824},  # batch 4, Adafactor (factored 2nd moment)
}
BERT_CONTEXT_ROW = "66"  # nvidia-smi with one tiny tensor: the CUDA 11.2 context + kernels on a V100


def _hf_adamw_2022_step(params, states, lr=5e-5, betas=(0.9, 0.999), eps=1e-8, step=2) -> None:
    """transformers.optimization.AdamW as HF Trainer used it in 2022: a Python loop, in-place moment updates and
    one `denom` temporary per parameter."""
    import math
    for p in params:
        m, v = states[p]
        m.mul_(betas[0]).add_(p.grad, alpha=1 - betas[0])
        v.mul_(betas[1]).addcmul_(p.grad, p.grad, value=1 - betas[1])
        denom = v.sqrt().add_(eps)
        p.data.addcdiv_(m, denom, value=-lr * math.sqrt(1 - betas[1] ** step) / (1 - betas[0] ** step))
        del denom


def trace_bert(micro_batch: int, seq_len: int = 512, checkpointing: bool = False,
               optimizer: str = "adamw") -> dict[str, int]:
    """One fp32 training step of bert-large-uncased + 2-class head on the meta device; bytes of the persistent
    states and of the peak working set above them."""
    import torch
    from transformers import AutoConfig, BertForSequenceClassification

    from validation.trace import tracker as tr
    from validation.trace.emulation import device_emulation

    cfg = AutoConfig.for_model("bert", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                               intermediate_size=4096, vocab_size=30522, max_position_embeddings=512,
                               type_vocab_size=2, num_labels=2)
    cfg._attn_implementation = "eager"
    dev = torch.device("meta")
    with dev:
        model = BertForSequenceClassification(cfg).float()
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    params = list(model.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)
    if optimizer == "adamw":
        states = {p: (torch.zeros_like(p), torch.zeros_like(p)) for p in params}
        state_tensors, opt = [t for v in states.values() for t in v], None
    else:
        from transformers.optimization import Adafactor
        opt = Adafactor(params, scale_parameter=False, relative_step=False, warmup_init=False, lr=1e-3)
        opt.step()
        state_tensors = [t for st in opt.state.values() for t in st.values() if isinstance(t, torch.Tensor)]
        for p in params:
            p.grad.zero_()
    ids = torch.zeros((micro_batch, seq_len), dtype=torch.long, device=dev)
    token_types = torch.zeros_like(ids)
    labels = torch.zeros((micro_batch,), dtype=torch.long, device=dev)
    persistent = [*params, *(p.grad for p in params), *state_tensors, ids, token_types, labels, *model.buffers()]
    tracker = tr.MemoryTracker("meta")
    tracker.persistent_keys = tr.storage_keys(persistent)
    tr.ACTIVE.append(tracker)
    try:
        with device_emulation("meta"), tracker:
            tracker.reset_peak()
            loss = model(input_ids=ids, token_type_ids=token_types, labels=labels).loss
            loss.backward()
            del loss
            fwd_bwd, after = tracker.peak, tracker.current
            tracker.reset_peak()
            if opt is None:
                _hf_adamw_2022_step(params, states)
            else:
                opt.step()
            step = tracker.peak - after
    finally:
        tr.ACTIVE.pop()
        tracker.detach_all()
    return {"states": tr.storage_bytes(persistent), "working": max(fwd_bwd, step)}


BERT_TRACE_RUNS = {"56": (4, False, "adamw"), "57": (1, False, "adamw"), "58": (1, True, "adamw"),
                   "61": (4, False, "adafactor")}


def bert_fragmentation(rows: list[dict[str, str]] | None = None) -> dict:
    """reserved − allocated on the BERT rows (nvidia-smi − context − traced peak) and the least-squares fit
    reserved − allocated = a · states + b · working set."""
    rows = read_rows() if rows is None else rows
    by_id = {r["id"]: r for r in rows}
    ctx = measured_bytes(by_id[BERT_CONTEXT_ROW])
    points = []
    for rid, t in BERT_TRACED.items():
        slack = measured_bytes(by_id[rid]) - ctx - t["states"] - t["working"]
        points.append((rid, t["states"], t["working"], slack))
    # normal equations for slack = a·s + b·w
    ss = sum(s * s for _, s, _, _ in points)
    ww = sum(w * w for _, _, w, _ in points)
    sw = sum(s * w for _, s, w, _ in points)
    sy = sum(s * y for _, s, _, y in points)
    wy = sum(w * y for _, _, w, y in points)
    det = ss * ww - sw * sw
    a, b = (sy * ww - wy * sw) / det, (wy * ss - sy * sw) / det
    return {
        "context_bytes": ctx,
        "rows": [{"id": rid, "states": s, "working": w, "peak_allocated": s + w, "slack": y,
                  "slack_pct_of_peak": round(100 * y / (s + w), 2),
                  "fit_slack": round(a * s + b * w)} for rid, s, w, y in points],
        "a_states": round(a, 4), "b_working": round(b, 4),
    }


def bert(row: dict[str, str]) -> Comparison:
    meas = measured_bytes(row)
    fp32 = Workload(mode="infer", micro_batch=1, seq_len=1, precision=RECIPES["fp32"][1], gpu="v100-16gb")
    if row["mode"].startswith("weights only"):
        model = GenericModel(name="bert-large-uncased (+2-class head), weights only", total_params=BERT_PARAMS,
                             activation_elements_per_sample=0)
        est = estimate(model, fp32).total_bytes
        return Comparison(row["id"], row["source"], "bert-large V100 nvidia-smi, weights only", model.name,
                          "bert-large fp32 weights loaded to a V100 16GB (nothing else)", "total (nvidia-smi)", meas,
                          est, error_pct(est, meas), True, "",
                          f"weights {BERT_PARAMS:,} × 4 B + default 5% fragmentation + V100 context (catalogue)",
                          resolution_pct(row["value"]))
    if row["mode"].startswith("CUDA context"):
        model = GenericModel(name="torch.ones((1, 1)).cuda()", total_params=1, activation_elements_per_sample=0)
        est = estimate(model, fp32).total_bytes
        return Comparison(row["id"], row["source"], "bert-large V100 nvidia-smi, context", model.name,
                          "CUDA context after a 1-element tensor on a V100 (CUDA 11.2)", "total (nvidia-smi)", meas,
                          est, error_pct(est, meas), False,
                          "calibration source: the GPU catalogue's V100 cuda_context_bytes is this measurement "
                          "(comparing would be circular)", "", resolution_pct(row["value"]))
    note = ""
    if row["id"] in BERT_TRACED:
        t = BERT_TRACED[row["id"]]
        peak = t["states"] + t["working"]
        slack = meas - measured_bytes({"value": "1343", "unit": "MB (MiB)", "id": "66"}) - peak
        note = (f"traced peak allocated {peak / GIB:.3f} GiB (states {t['states'] / GIB:.3f} + working set "
                f"{t['working'] / GIB:.3f}); nvidia-smi − 1343 MiB context − traced = {slack / MIB:.0f} MiB "
                f"({100 * slack / peak:.1f}% of the peak) allocator slack")
    recipe = "AMP fp16" if "AMP" in row["param_dtype"] else "fp32"
    config = (f"bert-large seq-cls {recipe}, {row['optimizer']}, micro-batch {row['micro_batch']} × accumulation "
              f"{row['grad_accum']}, seq {row['seq_len']}, recompute {row['recompute'].split()[0]}")
    return Comparison(row["id"], row["source"], "bert-large V100 nvidia-smi, training", row["model"], config,
                      "total (nvidia-smi)", meas, None, None, False,
                      "encoder model (BERT, post-LN, HF Trainer 2022): the engine models decoder LMs; used for the "
                      "context / fragmentation calibration (CALIBRATION.md)", note, resolution_pct(row["value"]))
