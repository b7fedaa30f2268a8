"""litgpt resource table rows (Oct 2023): generate.py rows, and LoRA / QLoRA fine-tunes on one GPU (the engine's
LoRA mode).
"""
from __future__ import annotations

from calculator import estimate
from calculator.core.workload import Parallelism, Precision, Workload
from validation.published.models import model_spec
from validation.published.rows import GIB, Comparison, error_pct, resolution_pct, measured_bytes

LITGPT_MODELS = {
    "phi-1.5 1.3 B": "phi-1.5", "StableLM Alpha 3 B": "StableLM-Alpha-3B", "Llama 2 7 B": "Llama-2-7B",
    "Llama 2 13 B": "Llama-2-13B", "CodeLlama 34 B": "CodeLlama-34B",
    "Falcon 40 B": "Falcon-40B (litgpt, untied lm_head)", "Llama 2 70 B": "Llama-2-70B",
}
LITGPT_PROMPT = 6  # 'Hello, my name is' with BOS (5-6 tokens by tokenizer; immaterial next to the weights)
LITGPT_NEW_TOKENS = 50


LITGPT_LORA_RANK = 8  # litgpt finetune/lora.py defaults (Oct 2023): r=8, alpha=16, adapters on query and value


def litgpt_finetune(row: dict[str, str]) -> Comparison:
    """litgpt finetune/lora.py and finetune/adapter*.py (Oct 2023): bf16-true, micro-batch padded to the longest
    Alpaca sample, torch AdamW on the adapters (bnb PagedAdamW with a quantised base)."""
    key = LITGPT_MODELS[row["model"]]
    meas = measured_bytes(row)
    mode = row["mode"]
    mb, T, n = int(row["micro_batch"]), int(row["seq_len"].split()[0]), int(row["num_gpus"])
    dq, nf4 = "nf4-dq" in mode, "nf4" in mode
    ckpt = "checkpointing" in row["recompute"]
    base = "nf4-dq" if dq else ("nf4" if nf4 else "bf16")
    config = (f"{key} {'LoRA r=8 on q,v' if 'LoRA' in mode else mode.split('finetune ')[1].split(' +')[0]}, "
              f"{base} base, micro-batch {mb} × {T:,} tokens, {'checkpointing per block, FSDP ' if ckpt else ''}"
              f"{n}× A100-40GB")
    rp = resolution_pct(row["value"])
    if "Adapter" in mode:
        return Comparison(row["id"], row["source"], "litgpt adapter fine-tune", key, config, "peak_allocated", meas,
                          None, None, False, "LLaMA-Adapter / Adapter v2 fine-tune: no engine mode", "", rp)
    opt_dtype = "fp32" if nf4 else "bf16"  # bnb PagedAdamW keeps 32-bit state; torch AdamW follows the bf16 params
    w = Workload(mode="train", micro_batch=mb, seq_len=T, optimizer="adamw", optimizer_impl="fused" if nf4 else
                 "foreach", precision=Precision(params="bf16", grads="bf16", master_weights=None,
                                                optimizer_states=opt_dtype, activations="bf16"),
                 finetune="qlora" if nf4 else "lora", lora_rank=LITGPT_LORA_RANK, lora_targets="qv",
                 lora_adapter_dtype="params",  # litgpt's bf16-true: the adapters are bf16 like the base
                 qlora_keeps_inputs=nf4,  # Oct 2023: bitsandbytes 0.41, MatMul4Bit saved its input
                 recompute="full" if ckpt else "none", attention="flash",
                 parallel=Parallelism(dp=n, zero=3) if n > 1 else Parallelism(), gpu="a100-40gb")
    est = estimate(model_spec(key), w, with_fits=False).peak_allocated_bytes
    notes = ["litgpt's own GPT and LoRA code (fused qkv adapter with zero-padding, bf16 chunked cross-entropy), "
             "not PEFT on transformers, which the engine's LoRA activations are traced on"]
    if nf4:
        notes.append("bitsandbytes 0.41's MatMul4Bit kept the input of every 4-bit linear for backward "
                     "(ctx.tensors = (A, B); since 0.43 only the weight): qlora_keeps_inputs; litgpt also quantises "
                     "lm_head")
    note = "; ".join(notes)
    if meas is None:
        return Comparison(row["id"], row["source"], "litgpt fine-tune, no number", key, config, "peak_allocated",
                          None, est, None, False, f"{row['value']} on A100-40GB (no number); the engine's peak "
                          f"allocated is {est / GIB:.1f} GiB (~39.4 GiB usable)", note)
    if n > 1:
        return Comparison(row["id"], row["source"], "litgpt LoRA FSDP", key, config, "peak_allocated", meas, est,
                          error_pct(est, meas), False,
                          "FSDP runs measure about the single-GPU number (Llama-2-7B 22.18 GB on 2 GPUs with "
                          "checkpointing vs 21.30 on 1 without), consistent with every rank holding the full bf16 "
                          "model at some point (unsharded checkpoint load); the engine models the sharded steady "
                          "state", note, rp)
    if dq:
        return Comparison(row["id"], row["source"], "litgpt QLoRA nf4-dq", key, config, "peak_allocated", meas, est,
                          error_pct(est, meas), False, "bnb double quantisation is not an engine format (estimate shown: "
                          "plain NF4 base)", note, rp)
    group = "litgpt QLoRA nf4" if nf4 else "litgpt LoRA bf16"
    return Comparison(row["id"], row["source"], group, key, config, "peak_allocated", meas, est, error_pct(est, meas), True,
                      "", note, rp)


def litgpt(row: dict[str, str]) -> Comparison:
    if row["mode"].startswith("finetune"):
        return litgpt_finetune(row)
    key = LITGPT_MODELS[row["model"]]
    meas = measured_bytes(row)
    dq = "nf4-dq" in row["param_dtype"]
    wdt = "nf4" if "nf4" in row["param_dtype"] else None
    spec = model_spec(key)
    w = Workload(mode="infer", micro_batch=1, seq_len=LITGPT_PROMPT, gen_tokens=LITGPT_NEW_TOKENS, weight_dtype=wdt,
                 quant_group_size=64, gpu="a100-40gb")
    est = estimate(spec, w, with_fits=False).peak_allocated_bytes
    fmt = "nf4-dq" if dq else (wdt or "bf16")
    config = f"{key} {fmt} weights, generate {LITGPT_PROMPT} + {LITGPT_NEW_TOKENS} tokens, 1× A100-40GB"
    notes = []
    if wdt:
        notes.append("Lightning's BitsandbytesPrecision quantises every nn.Linear incl. lm_head (the engine keeps "
                     "the head in bf16); measured includes the load-time quantisation transient of the largest "
                     "linear (bf16 init + fp16 cast, ≈ 4 B × its elements), not modelled")
    if key == "phi-1.5":
        notes.append("phi-1.5 mapped as GPT-NeoX-shaped (one LayerNorm, biases, fused qkv as in litgpt)")
    if meas is None:
        why = (f"{row['value']} on A100-40GB (no number); the engine's peak allocated is {est / GIB:.1f} GiB "
               f"(A100-40GB: 40 GiB total, ~39.4 GiB usable by PyTorch)")
        return Comparison(row["id"], row["source"], "litgpt generate, no number", key, config, "peak_allocated",
                          None, est, None, False, why, "; ".join(notes))
    if dq:
        why = ("bnb double quantisation (absmax stored as 8-bit per 64 + fp32 per 256 blocks: 0.516 B/param) is not "
               "an engine format; estimate shown is plain nf4 (0.5625 B/param)")
        return Comparison(row["id"], row["source"], "litgpt generate nf4-dq", key, config, "peak_allocated", meas,
                          est, error_pct(est, meas), False, why, "; ".join(notes), resolution_pct(row["value"]))
    group = "litgpt generate nf4, load peak" if wdt else "litgpt generate bf16"
    return Comparison(row["id"], row["source"], group, key, config, "peak_allocated", meas, est, error_pct(est, meas),
                      True, "", "; ".join(notes), resolution_pct(row["value"]))
