"""The config each supported model_type is measured from: the config.json transformers 5 writes, at the tiny sizes
the mapper tests already hold the engine to (tests/model/mappers/*.py). Those modules are loaded from their files
and their own `written_config` / `written` helpers and SIZES tables are called, so the table and the tests measure
the same configs."""
from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
MAPPER_TESTS = ROOT / "tests" / "model" / "mappers"


@dataclass(frozen=True)
class Source:
    model_type: str
    written: dict  # config.json as transformers writes it (what the engine reads)
    config: Any  # the transformers config of the causal-LM model to build (None: not a transformers type)
    origin: str  # which test module's config it is
    remote_counts: Callable[[], tuple[int, int]] | None = None  # (params, tensors) of a remote-code model


@lru_cache(maxsize=None)
def _module(name: str):
    """A mapper test module, loaded from its file (tests/ is not a package)."""
    path = MAPPER_TESTS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"validation_arch_src_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _written(name: str, t: str) -> Source:
    """The config mapper test module `name` writes for type t (its written_config)."""
    written, config = _module(name).written_config(t)
    return Source(t, written, config, f"tests/model/mappers/{name}.py")


def _linear(t: str) -> Source:
    m = _module("test_linear")
    written, config = m.written(t, **m.SIZES[t])
    return Source(t, written, config, "tests/model/mappers/test_linear.py")


def _dsa(t: str) -> Source:
    """The first tiny case of the type in test_dsa.CASES (its first cases are the full-size defaults)."""
    m = _module("test_dsa")
    kwargs = next(kw for mt, kw in m.CASES if mt == t and kw)
    written, config = m.written(t, **kwargs)
    return Source(t, written, config, "tests/model/mappers/test_dsa.py")


GEMMA_NEXT = {"gemma3n_text": "3n shared + sparse", "gemma4_text": "4 PLE + 6 shared + double-wide",
              "gemma4_unified_text": "4 unified + 6 shared"}


def _gemma_next(t: str) -> Source:
    config = _module("test_gemma_next").CONFIGS[GEMMA_NEXT[t]]()
    return Source(t, json.loads(json.dumps(config.to_dict())), config,
                  f"tests/model/mappers/test_gemma_next.py CONFIGS[{GEMMA_NEXT[t]!r}]")


def _remote(t: str) -> Source:
    """Qwen v1 (remote code: QWenLMHeadModel is not in transformers): Qwen-7B's published config.json, counted with
    the modules modeling_qwen.py builds (test_remote's meta-device replica)."""
    m = _module("test_remote")
    cfg = m._config("qwen-7b")  # noqa: SLF001 - the test's own loader of the published config
    counts = m._remote_code_counts  # noqa: SLF001
    return Source(t, cfg, None, "validation/published/qwen_v1/qwen-7b.json (tests/model/mappers/test_remote.py)",
                  remote_counts=lambda: counts(cfg))


def _mimo(t: str) -> Source:
    """MiMo (remote code MiMoForCausalLM: transformers' Qwen2 model plus MTP blocks its forward never calls): a tiny
    MiMo-7B-Base config, traced as the Qwen2 model it runs, counted with the modules modeling_mimo.py builds
    (test_remote_mimo's meta-device replica)."""
    m = _module("test_remote_mimo")
    written, config = m.tiny_config()
    counts = m._remote_code_counts  # noqa: SLF001 - the test's own replica
    return Source(t, written, config, "presets/models/mimo-7b-base.json at tiny sizes "
                  "(tests/model/mappers/test_remote_mimo.py)", remote_counts=lambda: counts(written))


def _nas(t: str) -> Source:
    """Nemotron-NAS (remote code DeciLMForCausalLM): a tiny Super-49B config, traced and counted on the modules
    modeling_decilm.py builds from transformers' Llama classes (validation/architectures/causal_lm.py)."""
    written, config = _module("test_remote_nas").tiny_config()
    return Source(t, written, config, "presets/models/llama-3.3-nemotron-super-49b.json at tiny sizes "
                  "(tests/model/mappers/test_remote_nas.py)")


def source(model_type: str) -> Source:
    """The Source of a supported type, from the test module that holds its mapper to the real model."""
    if model_type in GEMMA_NEXT:
        return _gemma_next(model_type)
    if model_type == "qwen":
        return _remote(model_type)
    if model_type == "mimo":
        return _mimo(model_type)
    if model_type == "nemotron-nas":
        return _nas(model_type)
    if model_type in _module("test_linear").SIZES:
        return _linear(model_type)
    for name in ("test_olmo_hybrid", "test_ssm", "test_variants", "test_longcat", "test_mistral4",
                 "test_axk1_and_refusals", "test_vlm_ocr", "test_vlm_more", "test_chameleon"):
        if model_type in _module(name).SIZES:  # each module has SIZES and written_config
            return _written(name, model_type)
    if any(mt == model_type for mt, _ in _module("test_dsa").CASES):
        return _dsa(model_type)
    if model_type in _module("test_archs").TYPES_HERE:
        return _written("test_archs", model_type)
    raise KeyError(f"{model_type}: no mapper test writes its config")
