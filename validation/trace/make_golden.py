"""Regenerate every golden file in tests/golden/ from the validation matrix.

    python -m validation.trace.make_golden                 # all cases
    python -m validation.trace.make_golden --only gpt2     # cases whose id contains "gpt2" (others untouched)
    python -m validation.trace.make_golden --check         # re-measure and compare with the committed files

All models are built on the meta device from the config dicts in validation/trace/configs.py; nothing is downloaded.
The output is deterministic: the same torch/transformers versions give byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import transformers

from validation.trace import accounting as trace
from validation.trace.configs import EXPECTED_PARAMETERS, MODELS
from validation.trace.optimizer import RECIPES

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "tests" / "golden"


@dataclass(frozen=True)
class Case:
    model: str
    mode: str  # "train" | "infer"
    micro_batch: int
    seq_len: int  # sequence length (train) or prompt length (infer)
    attention: str = "flash"
    recompute: str = "none"
    recipe: str = "mixed"  # train only
    optimizer: str = "adamw"
    foreach: bool = False
    gen_tokens: int = 0  # infer only
    dtype: str = "bf16"  # infer only

    @property
    def id(self) -> str:
        if self.mode == "train":
            base = (f"{self.model}__train__{self.recipe}__b{self.micro_batch}_s{self.seq_len}"
                    f"__{self.recompute}__{self.attention}")
            if self.optimizer != "adamw":
                base += f"__{self.optimizer}"
            if self.foreach:
                base += "__foreach"
            return base
        return (f"{self.model}__infer__{self.dtype}__b{self.micro_batch}_p{self.seq_len}_g{self.gen_tokens}"
                f"__none__{self.attention}")


def T(model, b, s, attention="flash", recompute="none", recipe="mixed", optimizer="adamw", foreach=False):
    return Case(model, "train", b, s, attention, recompute, recipe, optimizer, foreach)


def I(model, b, prompt, gen, attention="flash", dtype="bf16"):
    return Case(model, "infer", b, prompt, attention, gen_tokens=gen, dtype=dtype)


L8, Q25, Q3, MI, GE, PHI, G2, MX, Q3M, TL = ("llama-3.1-8b", "qwen2.5-7b", "qwen3-8b", "mistral-7b-v0.1",
                                             "gemma-2-9b", "phi-3-mini-4k", "gpt2", "mixtral-8x7b", "qwen3-30b-a3b",
                                             "tiny-llama")

MATRIX: list[Case] = [
    # Llama-3.1-8B: the reference dense GQA model
    T(L8, 1, 4096), T(L8, 1, 4096, "eager"),
    T(L8, 1, 4096, recompute="selective"), T(L8, 1, 4096, "eager", "selective"),
    T(L8, 1, 4096, recompute="full"), T(L8, 1, 4096, "eager", "full"),
    T(L8, 2, 2048), T(L8, 4, 1024), T(L8, 1, 8192), T(L8, 1, 8192, recompute="full"), T(L8, 2, 4096, recompute="full"),
    T(L8, 1, 512, "eager"), T(L8, 1, 4096, "sdpa"),
    T(L8, 1, 4096, foreach=True), T(L8, 1, 2048, recipe="pure-bf16"), T(L8, 1, 2048, "eager", recipe="fp32"),
    T(L8, 1, 2048, optimizer="sgd-momentum"),
    # Qwen2.5-7B: qkv bias
    T(Q25, 1, 4096), T(Q25, 1, 4096, "eager"), T(Q25, 1, 4096, recompute="selective"),
    T(Q25, 1, 4096, recompute="full"), T(Q25, 2, 2048), T(Q25, 1, 8192, recompute="selective"),
    # Qwen3-8B: q/k RMSNorm, head_dim 128
    T(Q3, 1, 4096), T(Q3, 1, 4096, "eager"), T(Q3, 1, 4096, recompute="full"), T(Q3, 4, 1024),
    T(Q3, 1, 2048, "eager", "selective"), T(Q3, 1, 8192, recompute="full"),
    # Mistral-7B-v0.1: sliding window 4096
    T(MI, 1, 4096), T(MI, 1, 4096, "eager"), T(MI, 1, 8192), T(MI, 1, 8192, "sdpa"), T(MI, 2, 2048, recompute="full"),
    T(MI, 1, 4096, recipe="pure-bf16", optimizer="sgd-momentum"),
    # Gemma-2-9B: 4 norms, soft-capping, head_dim 256, tied embeddings, alternating sliding window
    T(GE, 1, 4096), T(GE, 1, 4096, "eager"), T(GE, 1, 4096, recompute="full"), T(GE, 1, 4096, recompute="selective"),
    T(GE, 1, 2048), T(GE, 2, 1024, "eager"), T(GE, 1, 8192, recompute="full"),
    # Phi-3-mini-4k: fused qkv and gate_up, MHA, sliding window 2047
    T(PHI, 1, 2048), T(PHI, 1, 2048, "eager"), T(PHI, 1, 4096), T(PHI, 1, 4096, recompute="full"),
    T(PHI, 2, 1024, recompute="selective"), T(PHI, 1, 4096, recipe="pure-bf16"),
    T(PHI, 1, 1024, "eager", recipe="fp32", optimizer="sgd-momentum"),
    # GPT-2 124M: LayerNorm, learned positions, tied, gelu_new, dropout 0.1 (kept: train mode)
    T(G2, 4, 1024), T(G2, 4, 1024, "eager"), T(G2, 4, 1024, "sdpa"), T(G2, 4, 1024, "eager", "full"),
    T(G2, 4, 1024, "eager", "selective"), T(G2, 8, 512, "eager", recipe="fp32"),
    T(G2, 2, 1024, "eager", foreach=True), T(G2, 2, 1024, "eager"), T(G2, 4, 1024, "eager", optimizer="sgd-momentum"),
    # Mixtral-8x7B: MoE top-2 of 8 (grouped_mm experts)
    T(MX, 1, 4096), T(MX, 1, 4096, "eager"), T(MX, 1, 4096, recompute="full"), T(MX, 2, 2048, recompute="selective"),
    # Qwen3-30B-A3B: MoE top-8 of 128
    T(Q3M, 1, 4096), T(Q3M, 1, 4096, recompute="full"), T(Q3M, 1, 2048, "eager"),
    # tiny Llama (the configuration the tests cross-check on real CPU tensors)
    T(TL, 2, 256), T(TL, 2, 256, "eager"), T(TL, 2, 256, "sdpa"), T(TL, 2, 256, recompute="full"),
    T(TL, 2, 256, "eager", recipe="fp32"),
    # Inference: prefill + decode with DynamicCache
    I(L8, 1, 4096, 16), I(L8, 4, 1024, 32, "eager"), I(L8, 1, 8192, 8, "sdpa"),
    I(Q25, 1, 2048, 16), I(Q3, 2, 4096, 8),
    I(MI, 1, 8192, 8), I(MI, 1, 2048, 16, "eager"),
    I(GE, 1, 8192, 8), I(GE, 1, 2048, 8, "eager"),
    I(PHI, 1, 4096, 8),
    I(G2, 8, 512, 64, "eager"), I(G2, 1, 1000, 24),
    I(MX, 1, 4096, 8), I(Q3M, 1, 4096, 8),
    I(TL, 2, 128, 16, "eager"),
]


def case_notes(case: Case, cfg: dict, result: trace.Measurement) -> str:
    n = []
    if case.attention == "flash":
        n.append("flash = emulated FlashAttention-2 (flash-attn 2.x allocations and saved tensors; math path not "
                 "recorded).")
    elif case.attention == "sdpa":
        n.append("sdpa = PyTorch SDPA as dispatched on CPU (backend chosen by the CPU dispatcher; CUDA would pick "
                 "differently).")
    else:
        n.append("eager = transformers eager_attention_forward as is.")
    if case.recompute == "full":
        n.append("full recompute: HF activation checkpointing of every decoder layer, use_reentrant=False.")
    elif case.recompute == "selective":
        n.append("selective recompute: only the attention function call is checkpointed (non-reentrant).")
    if case.mode == "train":
        if RECIPE_NOTES.get(case.recipe):
            n.append(RECIPE_NOTES[case.recipe])
        n.append(f"optimizer {case.optimizer} foreach={case.foreach}; optimizer_states include "
                 f"{result.details['optimizer_step_scalars']} B of per-tensor `step` scalars that live on "
                 f"{','.join(result.details['optimizer_step_scalars_device']) or 'n/a'} (host memory on CUDA too).")
        n.append("peaks exclude input_ids/labels (" + str(result.details["inputs"]) + " B) and are relative to the "
                 "persistent states; peak_allocated also counts buffers (" + str(result.details["buffers"]) + " B).")
    else:
        n.append(f"generate()-like greedy loop: prefill of {case.seq_len} tokens (logits_to_keep=1) then "
                 f"{case.gen_tokens} one-token decode forwards; the cache ends at "
                 f"{result.details['cache_seq_length']} positions; peaks are above weights+buffers.")
    sw = cfg.get("sliding_window")
    if sw and cfg.get("use_sliding_window", True) is not False:
        n.append(f"sliding window {sw}" + (" (active: sequence exceeds it)" if case.seq_len + case.gen_tokens > sw
                                           else " (inactive at this length)") + ".")
    if cfg.get("model_type") == "gpt2" and case.mode == "train":
        n.append("GPT-2 dropout 0.1 kept (model.train()); dropout runs as CUDA's fused native_dropout, saving 1-byte "
                 "bool masks.")
    if case.model == "tiny-llama":
        n.append("tiny-llama is not a published model: the config the tests cross-check on real CPU tensors.")
    return " ".join(n)


RECIPE_NOTES = {
    "mixed": "mixed: bf16 params+grads, fp32 master weights; step casts all grads to fp32 master grads at once "
             "(4 B/param transient), steps the master, copies back, frees the fp32 grads.",
    "fp32": "fp32: fp32 params, grads and optimizer states, no master.",
    "pure-bf16": "pure-bf16: bf16 params, grads and optimizer states, no master.",
}


def run_case(case: Case) -> dict:
    cfg = MODELS[case.model]
    if case.mode == "train":
        r = trace.measure_train(cfg, micro_batch=case.micro_batch, seq_len=case.seq_len, recipe=case.recipe,
                                attention=case.attention, recompute=case.recompute, optimizer=case.optimizer,
                                foreach=case.foreach, device="meta")
        params_dtype, grads_dtype, master_dtype, opt_dtype = RECIPES[case.recipe]
        if case.optimizer == "sgd-momentum":
            opt_dtype = master_dtype or params_dtype
        run = {"mode": "train", "micro_batch": case.micro_batch, "seq_len": case.seq_len, "gen_tokens": 0,
               "recipe": case.recipe, "params_dtype": params_dtype, "grads_dtype": grads_dtype,
               "master_weights_dtype": master_dtype, "optimizer": case.optimizer, "optimizer_dtype": opt_dtype,
               "optimizer_foreach": case.foreach, "recompute": case.recompute, "attention": case.attention}
        if case.recompute == "none":
            # both ways of counting activations must agree when nothing is checkpointed
            assert r.measured["activations"] == r.details["saved_tensor_bytes_excluding_persistent"], case.id
    else:
        r = trace.measure_infer(cfg, micro_batch=case.micro_batch, prompt_len=case.seq_len,
                                gen_tokens=case.gen_tokens, dtype=case.dtype, attention=case.attention, device="meta")
        run = {"mode": "infer", "micro_batch": case.micro_batch, "seq_len": case.seq_len,
               "gen_tokens": case.gen_tokens, "recipe": None, "params_dtype": case.dtype, "grads_dtype": None,
               "master_weights_dtype": None, "optimizer": None, "optimizer_dtype": None, "optimizer_foreach": None,
               "recompute": "none", "attention": case.attention}
    expected = EXPECTED_PARAMETERS.get(case.model)
    if expected is not None and r.measured["parameters"] != expected:
        raise AssertionError(f"{case.id}: {r.measured['parameters']} parameters, published {expected}")
    measured = {k: int(r.measured[k]) for k in MEASURED_KEYS}
    return {
        "id": case.id,
        "model": cfg,
        "run": run,
        "measured": measured,
        "environment": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                        "device": "meta"},
        "notes": case_notes(case, cfg, r),
        "details": r.details,
    }


MEASURED_KEYS = ("parameters", "weights", "master_weights", "gradients", "optimizer_states", "activations",
                 "loss_head", "peak_fwd_bwd", "peak_step", "peak_allocated", "kv_cache", "peak_prefill",
                 "peak_decode")


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2) + "\n"


def owns(stem: str) -> bool:
    """Whether a golden file (by name) is one of this matrix's; the LoRA cases belong to
    validation/trace/make_lora_golden.py, the DeepSeek / GPT-OSS / Gemma-3 ones to validation/trace/make_mla_golden.py,
    DeepSeek-V4's to validation/architectures/dsv4_golden.py."""
    from validation.trace.configs_staging import STAGING_MODELS
    if any(stem.startswith(name + "__") for name in (*STAGING_MODELS, "deepseek-v4-tiny")):
        return False
    return ("__train__" in stem or "__infer__" in stem) and "__train__lora-" not in stem


def select(matrix: list, only: str | None) -> list:
    """The cases of `matrix` whose id contains `only` (all without it); the ids must be unique."""
    ids = [c.id for c in matrix]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    return [c for c in matrix if not only or only in c.id]


def run_matrix(matrix: list, run_case: Callable[[Any], dict], owns: Callable[[str], bool], *, out: Path,
               only: str | None, check: bool) -> int:
    """Measure the cases of `matrix` whose id contains `only` and write each as out/<id>.json, or with `check`
    compare it with the file there.  A full write (no `only`, no `check`) then deletes the files in `out` that
    `owns` claims by name and no case of `matrix` writes.  Returns the exit status: 1 if a checked file differs."""
    ids = [c.id for c in matrix]
    cases = select(matrix, only)
    out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    mismatches = 0
    for i, case in enumerate(cases, 1):
        t0 = time.perf_counter()
        text = dumps(run_case(case))
        path = out / f"{case.id}.json"
        if check:
            same = path.exists() and path.read_text() == text
            mismatches += not same
            status = "same" if same else "DIFFERENT"
        else:
            path.write_text(text)
            status = "written"
        print(f"[{i:3d}/{len(cases)}] {case.id}: {status} ({time.perf_counter() - t0:.1f} s)", flush=True)
    if not only and not check:
        for stale in sorted(out.glob("*.json")):
            if stale.stem not in ids and owns(stale.stem):
                stale.unlink()
                print(f"removed stale {stale.name}")
    print(f"{len(cases)} cases in {time.perf_counter() - t_all:.0f} s" + (f", {mismatches} different" if check
                                                                           else ""))
    return 1 if mismatches else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="only cases whose id contains this string")
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    ap.add_argument("--out", type=Path, default=GOLDEN_DIR)
    args = ap.parse_args(argv)
    return run_matrix(MATRIX, run_case, owns, out=args.out, only=args.only, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
