"""Resolve what a user typed as a model — a preset id, a path to a config.json, or a Hugging Face Hub id — to a
ModelSpec, keeping where it came from and the checkpoint's own parameter count when the Hub gives one."""
from __future__ import annotations

import os
from dataclasses import dataclass

from calculator.core.errors import InputError
from calculator.model.hf_config import ConfigError, MappedConfig, spec_from_hf_config
from calculator.model.parameters import count_parameters


@dataclass(frozen=True)
class ResolvedModel:
    mapped: MappedConfig
    origin: str  # "preset" | "file" | "hub" | "inline"
    label: str
    checkpoint_parameters: int | None = None
    checkpoint_dtypes: tuple[tuple[str, int], ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def spec(self):
        return self.mapped.spec

    @property
    def parameter_mismatch(self) -> str | None:
        """A warning when the architecture-derived count differs from the checkpoint's own count."""
        if self.checkpoint_parameters is None:
            return None
        ours = count_parameters(self.mapped.spec).total
        if ours == self.checkpoint_parameters:
            return None
        diff = ours - self.checkpoint_parameters
        return (f"architecture-derived parameter count {ours:,} differs from the checkpoint's {self.checkpoint_parameters:,} "
                f"({diff:+,}; quantized or packed tensors, extra heads such as MTP, or vision towers explain most)")


def resolve_model(name: str, *, token: str | None = None, endpoint: str | None = None,
                  timeout: float = 10.0) -> ResolvedModel:
    """A preset id, a config.json path, or an 'org/name' Hub id -> ResolvedModel. Raises InputError."""
    from calculator.model import presets
    text = (name or "").strip()
    if not text:
        raise InputError("model", "give a preset id (see `python -m calculator presets`), a config.json path, "
                                  "or a Hugging Face id such as Qwen/Qwen3-8B")
    if len(text) > presets.MAX_MODEL_NAME_CHARS:
        raise InputError("model", f"the model name is {len(text):,} characters; a preset id, path or Hub id has at "
                                  f"most {presets.MAX_MODEL_NAME_CHARS:,}")
    if os.path.exists(text) or text.endswith(".json"):
        return ResolvedModel(presets.load_model(text), "file", text)
    known = {p.id for p in presets.list_models()}
    if text.lower() in known:
        mapped = presets.load_model(text.lower())
        return ResolvedModel(mapped, "preset", text.lower(), warnings=mapped.warnings)
    from calculator.model.hub import client as hub
    if not hub.looks_like_hub_id(text):
        return ResolvedModel(presets.load_model(text), "preset", text)  # raises InputError with suggestions
    try:
        fetched = hub.fetch_model(text, token=token, endpoint=endpoint, timeout=timeout)
    except hub.HubError as exc:
        raise InputError("model", str(exc)) from None
    try:
        mapped = spec_from_hf_config(fetched.config, name=text)
    except ConfigError as exc:
        raise InputError("model", f"{text}: {exc}") from None
    ck = fetched.checkpoint
    resolved = ResolvedModel(
        mapped, "hub", text, ck.total_parameters if ck else None,
        tuple(sorted(ck.parameters_by_dtype.items())) if ck else (), fetched.warnings + mapped.warnings)
    mismatch = resolved.parameter_mismatch
    if mismatch:
        resolved = ResolvedModel(resolved.mapped, resolved.origin, resolved.label, resolved.checkpoint_parameters,
                                 resolved.checkpoint_dtypes, resolved.warnings + (mismatch,))
    return resolved
