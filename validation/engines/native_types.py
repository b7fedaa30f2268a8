"""Which architectures vLLM 0.33.0 and SGLang 0.5.23 can load, read from their released wheels, written to
calculator/engines/native_types.py (calculator/engines/support.py checks each served model against it).

An engine loads the class a config.json's `architectures` names:
- natively when its registry has it: vLLM's `vllm/model_executor/models/registry.py` _TEXT_GENERATION_MODELS and
  _MULTIMODAL_MODELS; SGLang's `EntryClass` of each `sglang/srt/models/*.py` (models/registry.py
  import_model_classes registers each entry under its class name);
- else through its Transformers backend: vLLM's _TRANSFORMERS_SUPPORTED_MODELS, or any transformers class that
  passes the engine's gate (vLLM registry.py _try_resolve_transformers: is_backend_compatible() or
  _can_set_attn_implementation(); SGLang model_loader/utils.py resolve_transformers_arch, with model_impl auto:
  is_backend_compatible());
- not at all otherwise: vLLM names the version that last had it (_PREVIOUSLY_SUPPORTED_MODELS).

The classes checked: for each model type the calculator maps (and each outer vision type), the classes transformers
5.23's auto mappings give it for generation (causal LM, image-text-to-text, vision-to-sequence), plus the classes
remote-code checkpoints name (REMOTE_CLASSES). The class's gate is read from the installed transformers.

Run: .venv/bin/python -m validation.engines.native_types VLLM_WHEEL_DIR SGLANG_WHEEL_DIR   (unzipped wheels)
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "calculator" / "engines" / "native_types.py"
# the architectures remote-code checkpoints name in config.json: Qwen (v1)'s modeling_qwen.py QWenLMHeadModel (its
# own attention module: no transformers attention interface), Kimi-K2's DeepSeek-V3 class, MiMo's, Step-3.5's
REMOTE_CLASSES = {"qwen": ("QWenLMHeadModel",), "kimi_k2": ("DeepseekV3ForCausalLM",),
                  "mimo": ("MiMoForCausalLM",),  # XiaomiMiMo/MiMo-7B's modeling_mimo.py
                  "step3p5": ("Step3p5ForCausalLM",)}  # stepfun-ai/Step-3.5-Flash's own class (transformers: none)
GENERATION_MAPPINGS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
                       "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES", "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES")


def _dict_keys(path: Path, names: tuple[str, ...]) -> dict[str, object]:
    """{key: value} of the module-level dict literals `names` of a Python file."""
    out: dict[str, object] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets) \
                and isinstance(node.value, ast.Dict):
            for k, v in zip(node.value.keys, node.value.values):
                if isinstance(k, ast.Constant):
                    out[k.value] = v.value if isinstance(v, ast.Constant) else None
    return out


def vllm_registry(wheel: Path) -> tuple[set[str], set[str], dict[str, str]]:
    """(native classes, Transformers-backend classes, {removed class: last version})."""
    reg = wheel / "vllm/model_executor/models/registry.py"
    native = set(_dict_keys(reg, ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS")))
    listed = set(_dict_keys(reg, ("_TRANSFORMERS_SUPPORTED_MODELS",)))
    removed = {k: str(v) for k, v in _dict_keys(reg, ("_PREVIOUSLY_SUPPORTED_MODELS",)).items()}
    return native, listed, removed


def sglang_registry(wheel: Path) -> set[str]:
    out: set[str] = set()
    for path in sorted((wheel / "sglang/srt/models").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                    for t in node.targets):
                out |= {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
    return out


def classes_by_type() -> dict[str, tuple[str, ...]]:
    """{model_type: its generation classes} for the calculator's types and outer vision types that have any."""
    from transformers.models.auto import modeling_auto
    from calculator.model.hf_config import SUPPORTED_MODEL_TYPES
    from calculator.model.vision.mapping import VISION_TYPES
    out: dict[str, list[str]] = {t: list(REMOTE_CLASSES.get(t, ())) for t in (*SUPPORTED_MODEL_TYPES, *VISION_TYPES)}
    for name in GENERATION_MAPPINGS:
        for t, cls in getattr(modeling_auto, name, {}).items():
            if t in out:
                out[t] += [c for c in ((cls,) if isinstance(cls, str) else cls) if c not in out[t]]
    return {t: tuple(c) for t, c in sorted(out.items()) if c}


def gates(cls_name: str) -> tuple[bool, bool]:
    """(vLLM's, SGLang's) Transformers-backend gate for a transformers class (False when transformers lacks it)."""
    import transformers
    cls = getattr(transformers, cls_name, None)
    if cls is None:
        return False, False
    compatible = bool(cls.is_backend_compatible())
    return compatible or bool(cls._can_set_attn_implementation()), compatible


def render(vllm, sglang) -> str:
    native, listed, removed = vllm
    by_type = classes_by_type()
    checked = sorted({c for cs in by_type.values() for c in cs})
    gate = {c: gates(c) for c in checked}
    lines = ['"""Which architectures vLLM 0.33.0 and SGLang 0.5.23 load, and how (generated by',
             "validation/engines/native_types.py from the engines' wheels and transformers 5.23; do not edit by hand).",
             '"""', "", "# each model type the calculator maps: the generation classes transformers gives it",
             "CLASSES_OF_TYPE = {"]
    lines += [f"    {t!r}: {cs!r},".replace("'", '"') for t, cs in by_type.items()]
    lines += ["}", "", "# vLLM 0.33.0's own models (registry.py _TEXT_GENERATION_MODELS, _MULTIMODAL_MODELS)"]
    lines += _frozenset("VLLM_NATIVE", native)
    lines += ["", "# classes vLLM 0.33.0 runs through its Transformers backend (_TRANSFORMERS_SUPPORTED_MODELS, or the",
              "# transformers class passes _try_resolve_transformers' gate)"]
    lines += _frozenset("VLLM_TRANSFORMERS", {c for c in checked if c not in native and (c in listed or gate[c][0])}
                        | (listed - native))
    lines += ["", "# vLLM's _PREVIOUSLY_SUPPORTED_MODELS: the last version that had each", "VLLM_REMOVED = {"]
    lines += _pairs(sorted(removed.items()))
    lines += ["}", "", "# SGLang 0.5.23's own models (every EntryClass of sglang/srt/models/)"]
    lines += _frozenset("SGLANG_NATIVE", sglang)
    lines += ["", "# classes SGLang 0.5.23 runs through its Transformers backend (is_backend_compatible())"]
    lines += _frozenset("SGLANG_TRANSFORMERS", {c for c in checked if c not in sglang and gate[c][1]})
    return "\n".join(lines) + "\n"


def _frozenset(name: str, names) -> list[str]:
    return [f"{name} = frozenset({{"] + _packed([f'"{n}",' for n in sorted(names)]) + ["})"]


def _pairs(items) -> list[str]:
    return _packed([f'"{k}": "{v}",' for k, v in items])


def _packed(items: list[str]) -> list[str]:
    out, line = [], "   "
    for item in items:
        if len(line) + 1 + len(item) > 119:
            out.append(line)
            line = "   "
        line += " " + item
    return out + [line] if line.strip() else out


if __name__ == "__main__":
    vllm_dir, sglang_dir = (Path(a) for a in sys.argv[1:3])
    OUT.write_text(render(vllm_registry(vllm_dir), sglang_registry(sglang_dir)))
    print(f"wrote {OUT.relative_to(ROOT)}")
