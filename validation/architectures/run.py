"""Measure every supported model_type (measure.py) into the rows of table.json, each type time-boxed."""
from __future__ import annotations

import sys
import time
import traceback

import torch
import transformers

from calculator.core.errors import InputError
from calculator.model.hf_config import SUPPORTED_MODEL_TYPES

from . import measure as M
from .sources import source

TIME_BOX_S = 120  # per type and per check
REMOTE_WHY = ("remote code (QWenLMHeadModel, the checkpoint's modeling_qwen.py) is not in transformers: no real "
              "layer to run; parameters counted on the modules modeling_qwen.py builds")


# PyTorch's CPU SDPA runs its FlashAttention kernel only for equal q, k and v head dims (aten/src/ATen/native/
# transformers/sdp_utils_cpp.cpp check_head_dim_size_cpp), else the math path, which keeps the attention
# probabilities; CUDA runs its memory-efficient kernel for MLA's narrower v (the one the engine prices)
CPU_MATH_WHY = ("the CPU's SDPA runs its math path for MLA's unequal q·k and v head dims (sdp_utils_cpp.cpp "
                "check_head_dim_size_cpp); CUDA runs the memory-efficient kernel the engine prices")


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    return text[:240]


def row(model_type: str) -> dict:
    src = source(model_type)
    out: dict = dict(model_type=model_type, source=src.origin)
    try:
        spec, warnings = M.spec_of(src)
    except M.ConfigError as e:  # a type the mapper knows and refuses to count inexactly
        out.update(kinds=[], refused=_short(e), parameters=dict(checked=False, why=f"refused by the engine: {e}"),
                   activations={}, cache=dict(checked=False, why="refused by the engine"))
        return out
    kinds = list(M.layer_per_kind(spec))
    out.update(kinds=kinds, warnings=warnings)
    try:
        with M.time_box(TIME_BOX_S):
            out["parameters"] = dict(checked=True, **M.parameters(src, spec))
    except Exception as e:  # noqa: BLE001 - the row says why
        out["parameters"] = dict(checked=False, why=_short(e))
    if src.config is None:
        out["activations"] = {k: dict(traced=False, why=REMOTE_WHY) for k in kinds}
        out["cache"] = dict(checked=False, why=REMOTE_WHY.split(":")[0])
        return out
    out["activations"] = {}
    if spec.served_only:  # training is refused: nothing of the engine's to hold to a trace (its cache still is)
        out["activations"] = {k: dict(traced=False, why=f"refused by the engine: {spec.served_only}") for k in kinds}
    for attention in (("eager", "sdpa") if not spec.served_only else ()):
        try:
            with M.time_box(TIME_BOX_S):
                measured = M.activations(src, spec, attention)
        except Exception as e:  # noqa: BLE001
            why = (f"refused by the engine: {_short(e)}" if isinstance(e, InputError)  # e.g. DeepSeek-V4's training
                   else f"the tiny model's {attention} forward fails on the CPU: {_short(e)}")
            measured = {k: dict(traced=False, why=why) for k in kinds}
        for kind, result in measured.items():
            if attention == "eager":
                out["activations"][kind] = result
            elif result.get("traced") and out["activations"].get(kind, {}).get("traced"):
                out["activations"][kind]["sdpa"] = {k: result[k] for k in ("engine", "measured", "error_pct")}
                if spec.is_mla and spec.head_size != spec.v_head_size and kind.startswith(("mla", "dsa")):
                    out["activations"][kind]["sdpa"]["not_comparable"] = CPU_MATH_WHY
    try:
        with M.time_box(TIME_BOX_S):
            out["cache"] = M.cache(src, spec)
    except Exception as e:  # noqa: BLE001
        out["cache"] = dict(checked=False, why=f"the tiny model's prefill fails on the CPU: {_short(e)}")
    return out


def rows(types=SUPPORTED_MODEL_TYPES, log=sys.stderr) -> list[dict]:
    M.quiet()
    out = []
    for t in types:
        t0 = time.time()
        try:
            out.append(row(t))
        except Exception as e:  # noqa: BLE001 - one type's failure is its row, not the run's
            traceback.print_exc(file=log)
            out.append(dict(model_type=t, kinds=[], parameters=dict(checked=False, why=_short(e)), activations={},
                            cache=dict(checked=False, why=_short(e))))
        print(f"{t}: {time.time() - t0:.1f} s", file=log, flush=True)
    return out


def meta() -> dict:
    return dict(transformers=transformers.__version__, torch=torch.__version__.split("+")[0],
                traced=dict(batch=M.B, seq=M.S, dtype="bf16", device="cpu", reference="eager (sdpa beside it)"),
                cache=dict(batch=M.CACHE_B, prompt=M.CACHE_S, dtype="bf16"), time_box_s=TIME_BOX_S)
