"""Golden files for architectures the main matrix lacks: MLA + MoE with a shared expert (DeepSeek-V3), attention
sinks + biased experts + alternating sliding/full layers (GPT-OSS-20B), q/k norms + 5:1 sliding/global (Gemma-3-1B).
They are written to tests/golden/ beside the main matrix (this module owns the files of its models).

    python -m validation.trace.make_mla_golden            # regenerate its cases in tests/golden/
    python -m validation.trace.make_mla_golden --check    # re-measure and compare with the files there
    python -m validation.trace.make_mla_golden --only gemma

Same protocol, JSON schema and code as validation/trace/make_golden.py (its Case, T/I, run_case and run_matrix); the
models come from configs_staging.STAGING_MODELS.  DeepSeek-V3 and GPT-OSS-20B keep their real widths with 4 layers.

GPT-OSS runs eager only: its attention passes the per-head sinks as `s_aux` to the attention function;
FlashAttention-2 (flash-attn 2.x, which the flash emulation mirrors) has no sinks argument, so an FA2 run would
silently drop them (HF lists only FA3/FA4/vllm kernels with sink support as compatible with GPT-OSS).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

from validation.trace import make_golden
from validation.trace.configs_staging import STAGING_EXPECTED_PARAMETERS, STAGING_FULL_DEPTH, STAGING_MODELS
from validation.trace.make_golden import I, T
from validation.trace.models import build_model, count_parameters

STAGING_DIR = Path(__file__).resolve().parents[2] / "tests" / "golden"

DS, OSS, G3 = "deepseek-v3-4l", "gpt-oss-20b-4l", "gemma-3-1b"

MATRIX = [
    # DeepSeek-V3, 4 layers (2 dense + 2 MoE), real widths
    T(DS, 1, 2048), T(DS, 1, 2048, "eager"), T(DS, 1, 2048, recompute="full"),
    I(DS, 1, 2048, 8), I(DS, 1, 2048, 8, "eager"),
    # GPT-OSS-20B, 4 layers (sliding, full, sliding, full): eager only (FA2 has no sinks)
    T(OSS, 1, 2048, "eager"), T(OSS, 1, 2048, "eager", "full"),
    I(OSS, 1, 2048, 8, "eager"),
    # Gemma-3-1B, all 26 layers
    T(G3, 1, 2048), T(G3, 1, 2048, recompute="full"),
    I(G3, 1, 4096, 8),
]

EXTRA_NOTES = {
    DS: "DeepSeek-V3 reduced to 4 layers (first_k_dense_replace 2: layers 0-1 dense SwiGLU, 2-3 MoE with 256 routed "
        "+ 1 shared expert, top-8, grouped_mm experts); all widths real. The cache holds MLA's compressed latents "
        "(kv_lora_rank + qk_rope_head_dim per token), as transformers' DeepseekV3Attention stores them.",
    OSS: "GPT-OSS-20B reduced to 4 layers (sliding 128, full, sliding 128, full); all widths real; grouped_mm "
         "experts with biases. Eager only: FlashAttention-2 has no attention-sink input.",
    G3: "Gemma-3-1B text model, all 26 layers (5 sliding-512 : 1 global).",
}


def _check_full_depth() -> None:
    """The 4-layer reductions' full-depth configs must give the published parameter counts."""
    for name, (layers, dense, expected) in STAGING_FULL_DEPTH.items():
        cfg = dict(STAGING_MODELS[name], num_hidden_layers=layers)
        if dense is not None:
            cfg["first_k_dense_replace"] = dense
        if "layer_types" in cfg:
            cfg["layer_types"] = [cfg["layer_types"][i % 2] for i in range(layers)]
        n = count_parameters(build_model(cfg, "bf16", "eager"))
        if n != expected:
            raise AssertionError(f"{name} at {layers} layers: {n} parameters, published {expected}")


def run_case(case) -> dict:
    with mock.patch.dict(make_golden.MODELS, STAGING_MODELS), \
            mock.patch.dict(make_golden.EXPECTED_PARAMETERS, STAGING_EXPECTED_PARAMETERS):
        doc = make_golden.run_case(case)
    doc["notes"] += " " + EXTRA_NOTES[case.model]
    return doc


def owns(stem: str) -> bool:
    return any(stem.startswith(m + "__") for m in STAGING_MODELS)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="only cases whose id contains this string")
    ap.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    ap.add_argument("--out", type=Path, default=STAGING_DIR)
    args = ap.parse_args(argv)
    _check_full_depth()
    return make_golden.run_matrix(MATRIX, run_case, owns, out=args.out, only=args.only, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
