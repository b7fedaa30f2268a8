"""Regenerate the LoRA golden files (tests/golden/*__train__lora-*.json): real `peft` LoRA on the meta device.

    python -m validation.trace.make_lora_golden                 # all LoRA cases
    python -m validation.trace.make_lora_golden --only gpt2     # cases whose id contains "gpt2"
    python -m validation.trace.make_lora_golden --check         # re-measure and compare with the committed files
    python -m validation.trace.make_lora_golden --compare       # the engine (calculator.stages.estimate) against the files

Protocol: validation/README.md, section "LoRA".  The measurement is validation/trace/lora.py.  Case ids are
``<model>__train__lora-<targets>-r<r>__<recipe>__b<b>_s<s>__<recompute>__<attention>[__input-grad|__no-input-grad]``;
the suffix marks a case whose first-layer input-grad setting was forced away from what HF/PEFT set up.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import peft
import torch
import transformers

from validation.trace import lora
from validation.trace import make_golden
from validation.trace.configs import EXPECTED_PARAMETERS, MODELS

GOLDEN_DIR = make_golden.GOLDEN_DIR


@dataclass(frozen=True)
class LoraCase:
    model: str
    targets: str
    rank: int
    micro_batch: int
    seq_len: int
    attention: str = "flash"
    recompute: str = "none"
    recipe: str = "mixed"
    input_requires_grad: bool | None = None  # None: as HF/PEFT set it up (on only with full recompute)
    optimizer: str = "adamw"
    foreach: bool = False

    @property
    def id(self) -> str:
        base = (f"{self.model}__train__lora-{self.targets}-r{self.rank}__{self.recipe}__b{self.micro_batch}"
                f"_s{self.seq_len}__{self.recompute}__{self.attention}")
        if self.input_requires_grad is True:
            base += "__input-grad"
        elif self.input_requires_grad is False:
            base += "__no-input-grad"
        return base


def C(model, targets, rank, b, s, attention="flash", recompute="none", recipe="mixed", input_grad=None):
    return LoraCase(model, targets, rank, b, s, attention, recompute, recipe, input_grad)


L8, Q25, MI, GE, PHI, G2, TL = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.1", "gemma-2-9b", "phi-3-mini-4k", "gpt2",
                                "tiny-llama")

MATRIX: list[LoraCase] = [
    # Llama-3.1-8B: the three target sets, r 8 and 16, flash and eager, recompute none and full
    C(L8, "qv", 8, 1, 4096), C(L8, "qv", 16, 1, 4096), C(L8, "attention", 16, 1, 4096),
    C(L8, "all-linear", 16, 1, 4096), C(L8, "all-linear", 8, 1, 2048),
    C(L8, "qv", 16, 1, 4096, "eager"), C(L8, "attention", 16, 1, 2048, "eager"),
    C(L8, "all-linear", 16, 1, 2048, "eager"),
    C(L8, "qv", 16, 1, 4096, recompute="full"), C(L8, "all-linear", 16, 1, 4096, recompute="full"),
    C(L8, "all-linear", 8, 1, 4096, "eager", "full"),
    # the first layer's input requiring grad (model.enable_input_require_grads()), and full recompute without it
    C(L8, "qv", 16, 1, 4096, input_grad=True), C(L8, "all-linear", 16, 1, 2048, "eager", input_grad=True),
    C(L8, "qv", 16, 1, 4096, recompute="full", input_grad=False),
    # recipes: pure bf16, and PEFT's default fp32 adapters on the bf16 base
    C(L8, "qv", 16, 1, 2048, recipe="pure-bf16"),
    C(L8, "qv", 16, 1, 4096, recipe="fp32-adapters"), C(L8, "all-linear", 16, 1, 4096, recipe="fp32-adapters"),
    # Qwen2.5-7B (qkv bias), Mistral-7B
    C(Q25, "all-linear", 16, 1, 4096), C(Q25, "all-linear", 16, 1, 4096, recompute="full"),
    C(MI, "qv", 16, 1, 4096), C(MI, "qv", 8, 1, 4096, "eager", recipe="pure-bf16"),
    # Phi-3-mini: fused qkv_proj and gate_up_proj ("qv" targets the fused qkv_proj)
    C(PHI, "all-linear", 16, 1, 2048), C(PHI, "all-linear", 16, 1, 4096, recompute="full"),
    C(PHI, "qv", 16, 1, 2048, "eager"), C(PHI, "qv", 16, 1, 2048), C(PHI, "all-linear", 8, 1, 2048, "eager"),
    # Gemma-2-9B: fp32-output norms, tied embeddings (lm_head not adapted)
    C(GE, "all-linear", 16, 1, 4096), C(GE, "all-linear", 8, 1, 2048, "eager"),
    # GPT-2: Conv1D (fan_in_fan_out), fused c_attn ("qv" = target c_attn), dropout 0.1 kept
    C(G2, "qv", 8, 4, 1024, "eager"), C(G2, "qv", 8, 4, 1024), C(G2, "all-linear", 16, 4, 1024),
    C(G2, "all-linear", 16, 4, 1024, "eager"),
    # tiny Llama (the configuration the tests cross-check on real CPU tensors)
    C(TL, "all-linear", 8, 2, 256),
]

RECIPE_NOTES = {
    "mixed": "LoRA mixed: frozen bf16 base; bf16 adapters (get_peft_model(autocast_adapter_dtype=False)) with bf16 "
             "grads, an fp32 master copy and fp32 AdamW state for the adapters only; the step casts the adapter grads "
             "to fp32 master grads at once, steps the masters, copies back.",
    "pure-bf16": "LoRA pure-bf16: frozen bf16 base; bf16 adapters (autocast_adapter_dtype=False), bf16 grads and "
                 "optimizer state, no master.",
    "fp32-adapters": "LoRA with PEFT's default autocast_adapter_dtype=True: the bf16 base stays bf16 but PEFT upcasts "
                     "the adapters to fp32, so adapter grads and AdamW state are fp32 and no master copy is needed. "
                     "No autocast: each LoRA layer casts its input to fp32 (x.to(fp32), saved by lora_A), computes "
                     "lora_B(lora_A(x)) in fp32, adds it to the bf16 base output (fp32 result) and casts back to bf16.",
}


def run_case(case: LoraCase) -> dict:
    cfg = MODELS[case.model]
    r = lora.measure_lora_train(cfg, targets=case.targets, rank=case.rank, micro_batch=case.micro_batch,
                                seq_len=case.seq_len, recipe=case.recipe, attention=case.attention,
                                recompute=case.recompute, optimizer=case.optimizer, foreach=case.foreach,
                                input_requires_grad=case.input_requires_grad, device="meta")
    m = r.measured
    assert m["trainable_parameters"] == r.details["trainable_parameters_expected"], case.id
    expected = EXPECTED_PARAMETERS.get(case.model)
    if expected is not None and m["parameters"] - m["trainable_parameters"] != expected:
        raise AssertionError(f"{case.id}: base has {m['parameters'] - m['trainable_parameters']} parameters, "
                             f"published {expected}")
    if case.recompute == "none" and not r.run["input_requires_grad"]:
        # nothing checkpointed, no leaf input: the autograd graph holds exactly the saved tensors
        assert m["activations"] == r.details["saved_tensor_bytes_excluding_persistent"], case.id
    notes = make_golden.case_notes(make_golden.Case(case.model, "train", case.micro_batch, case.seq_len, case.attention,
                                                case.recompute, "lora", case.optimizer, case.foreach), cfg, r)
    notes += " " + RECIPE_NOTES[case.recipe]
    notes += (f" peft {peft.__version__}: LoraConfig(r={case.rank}, lora_alpha={2 * case.rank}, lora_dropout=0.0, "
              f"target_modules={r.run['peft_target_modules']!r}, bias='none'); adapters found in "
              f"{r.run['adapter_dtype']}.")
    if r.run["input_requires_grad"]:
        notes += (" The first decoder layer's input requires grad (enable_input_require_grads: "
                  + ("HF's activation_checkpointing_enable turns it on" if case.input_requires_grad is None
                     else "called explicitly") + "); the embedding output is then a leaf kept by its AccumulateGrad"
                  " node until the backward.")
    else:
        notes += (" The first decoder layer's input does not require grad (frozen embedding"
                  + (", input-grad hooks removed after HF's checkpointing set them" if case.recompute == "full"
                     else "") + ").")
    measured = {k: int(m[k]) for k in MEASURED_KEYS}
    return {
        "id": case.id,
        "model": cfg,
        "run": r.run,
        "measured": measured,
        "environment": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                        "peft": peft.__version__, "device": "meta"},
        "notes": notes,
        "details": r.details,
    }


MEASURED_KEYS = ("parameters", "trainable_parameters") + make_golden.MEASURED_KEYS[1:]


def owns(stem: str) -> bool:
    """Whether a golden file (by name) is one of this matrix's."""
    return "__train__lora-" in stem


# ---------------------------------------------------------------------------------------------------------------
# The engine against the files
# ---------------------------------------------------------------------------------------------------------------

COMPARED = ("weights", "gradients", "master_weights", "optimizer_states", "activations", "peak_allocated")


def engine_numbers(doc: dict) -> dict:
    """The engine's numbers for a LoRA golden, mapped exactly as tests/validation/test_golden.py maps it."""
    from validation.trace.compare import predicted
    return predicted(doc)


def compare(paths) -> int:
    worst = 0.0
    print(f"{'case':<78} {'quantity':<17} {'measured':>16} {'engine':>16} {'error':>9}")
    for path in paths:
        doc = json.loads(path.read_text())
        eng = engine_numbers(doc)
        for k in COMPARED:
            meas, pred = doc["measured"][k], eng[k]
            err = 100.0 * (pred - meas) / meas if meas else (0.0 if pred == 0 else float("inf"))
            flag = "  <-- over 1%" if abs(err) > 1 else ""
            worst = max(worst, abs(err))
            print(f"{doc['id']:<78} {k:<17} {meas:>16,} {pred:>16,} {err:+8.3f}%{flag}")
    print(f"worst |error| {worst:.3f}%")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="only cases whose id contains this string")
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    ap.add_argument("--compare", action="store_true", help="print the engine against the committed files")
    ap.add_argument("--out", type=Path, default=GOLDEN_DIR)
    args = ap.parse_args(argv)

    if args.compare:
        return compare([args.out / f"{c.id}.json" for c in make_golden.select(MATRIX, args.only)])
    return make_golden.run_matrix(MATRIX, run_case, owns, out=args.out, only=args.only, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
