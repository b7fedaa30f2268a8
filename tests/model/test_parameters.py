"""Every preset's parameter count equals the real `transformers` model built from the same config.

The model is built on the meta device (shapes only, no memory), full size: every layer of DeepSeek-V3 and
Llama-3.1-405B is built, so no count is extrapolated. Quantized checkpoints (DeepSeek-V3/R1 fp8, GPT-OSS mxfp4)
are built without their quantization_config: the calculator counts the logical (dequantized) parameters.
"""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.hf_config import TEXT_MODEL_TYPES  # noqa: E402
from validation.architectures.causal_lm import (IMAGE_TEXT_ONLY, causal_lm, decilm_causal_lm, decilm_config,  # noqa: E402
                                               mimo_causal_lm)
from calculator.model.parameters import count_parameters  # noqa: E402
from calculator.model.presets import list_models, load_model  # noqa: E402

PRESET_IDS = [m.id for m in list_models()]
_BUILT: dict[str, torch.nn.Module] = {}


def hf_text_config(raw: dict) -> dict:
    """The config transformers should build: a multimodal config's text_config, without quantization."""
    cfg = dict(raw)
    if isinstance(raw.get("text_config"), dict) and "hidden_size" not in raw:
        cfg = dict(raw["text_config"])
        if "model_type" not in cfg:  # (Kimi-K2.5's text_config names its own: kimi_k2)
            cfg["model_type"] = TEXT_MODEL_TYPES[raw["model_type"]]
        if "tie_word_embeddings" in raw:
            cfg.setdefault("tie_word_embeddings", raw["tie_word_embeddings"])
    for key in ("_name_or_path", "quantization_config", "auto_map"):
        cfg.pop(key, None)
    # Kimi-K2's config.json says model_type "kimi_k2" (a remote-code type transformers 5.23 does not register) and
    # architectures DeepseekV3ForCausalLM: its blocks are DeepSeek-V3's
    if cfg.get("model_type") == "kimi_k2":
        cfg["model_type"] = "deepseek_v3"
    # Llama-4's Hub config says "attn_temperature_tuning": 4 (written when transformers declared the field an int);
    # transformers now declares it a bool and its strict config validation rejects the int.
    if "attn_temperature_tuning" in cfg:
        cfg["attn_temperature_tuning"] = bool(cfg["attn_temperature_tuning"])
    # Nemotron-H-56B's config writes time_step_limit [0.0, Infinity] (Python's json.dump of inf); the engine's reader
    # keeps such a value unreadable, transformers wants the float
    if isinstance(cfg.get("time_step_limit"), list):
        cfg["time_step_limit"] = tuple(x if isinstance(x, (int, float)) else float("inf") for x in cfg["time_step_limit"])
    return cfg


class TextOf(torch.nn.Module):
    """The language model and head of a *ForConditionalGeneration (its vision tower left out)."""

    def __init__(self, full: torch.nn.Module):
        super().__init__()
        self.language_model, self.lm_head = full.model.language_model, full.lm_head

    def get_input_embeddings(self):
        return self.language_model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head


def hf_model(preset_id: str) -> torch.nn.Module:
    if preset_id not in _BUILT:
        raw = load_model(preset_id).raw
        logging.getLogger("transformers").setLevel(logging.ERROR)
        if raw["model_type"] in ("mimo", "nemotron-nas"):  # remote code: the modules its modeling file builds
            with torch.device("meta"):
                _BUILT[preset_id] = (mimo_causal_lm(raw) if raw["model_type"] == "mimo"
                                     else decilm_causal_lm(decilm_config(raw)))
            return _BUILT[preset_id]
        if raw["model_type"] in IMAGE_TEXT_ONLY:  # no *ForCausalLM: the real model is the outer one
            config = transformers.AutoConfig.for_model(**{k: v for k, v in raw.items() if k != "_name_or_path"})
            with torch.device("meta"):
                _BUILT[preset_id] = TextOf(causal_lm(config))
            return _BUILT[preset_id]
        config = transformers.AutoConfig.for_model(**hf_text_config(raw))
        with torch.device("meta"):
            _BUILT[preset_id] = transformers.AutoModelForCausalLM.from_config(config)
    return _BUILT[preset_id]


def decoder_layers(model: torch.nn.Module, n_layers: int) -> torch.nn.ModuleList:
    """The ModuleList of decoder blocks (model.layers, transformer.h, gpt_neox.layers ...)."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n_layers]
    assert lists, f"no ModuleList of {n_layers} layers in {type(model).__name__}"
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))


def numel(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("preset_id", PRESET_IDS)
def test_total_and_tensor_count_match_transformers(preset_id):
    ours = count_parameters(load_model(preset_id).spec)
    params = list(hf_model(preset_id).parameters())
    assert ours.total == sum(p.numel() for p in params)
    assert ours.tensors == len(params)


@pytest.mark.parametrize("preset_id", PRESET_IDS)
def test_every_layer_matches_transformers(preset_id):
    spec = load_model(preset_id).spec
    ours = count_parameters(spec)
    layers = decoder_layers(hf_model(preset_id), spec.num_hidden_layers)
    assert [l.total for l in ours.layers] == [numel(layer) for layer in layers]
    assert [l.tensors for l in ours.layers] == [len(list(layer.parameters())) for layer in layers]


@pytest.mark.parametrize("preset_id", PRESET_IDS)
def test_embedding_and_head_match_transformers(preset_id):
    spec = load_model(preset_id).spec
    ours = count_parameters(spec)
    model = hf_model(preset_id)
    assert ours.embedding == sum(numel(m) for m in model.modules() if isinstance(m, torch.nn.Embedding))
    head = model.get_output_embeddings()
    tied = head.weight is model.get_input_embeddings().weight
    assert tied == spec.tie_word_embeddings
    assert ours.lm_head == (0 if tied else head.weight.numel())


@pytest.mark.parametrize("preset_id", [p for p in PRESET_IDS if load_model(p).spec.is_moe])
def test_routed_experts_match_transformers(preset_id):
    """The routed-expert share (what expert parallelism shards) equals each layer's `experts` module."""
    spec = load_model(preset_id).spec
    ours = count_parameters(spec)
    layers = decoder_layers(hf_model(preset_id), spec.num_hidden_layers)
    theirs = [sum(numel(m) for name, m in layer.named_modules() if (name == "experts" or name.endswith(".experts"))) for layer in layers]
    assert [l.routed_experts for l in ours.layers] == theirs


def test_layers_of_a_kind_share_one_count_and_are_grouped_by_kind():
    """A model's layers are counted once per kind (dense, MoE): DeepSeek-V3's 3 dense + 58 MoE layers share two
    LayerParams objects, kind_counts groups them, and layer_shapes(i) is its kind's shapes."""
    from calculator.model.parameters import kind_counts, kind_shapes, layer_kinds, layer_shapes
    from calculator.model.spec import LayerKind
    m = load_model("deepseek-v3").spec
    layers = count_parameters(m).layers
    dense_kind, moe_kind = LayerKind("mla", "dense"), LayerKind("mla", "moe")
    assert layer_kinds(m) == ((dense_kind, 3), (moe_kind, 58))
    assert [(p is layers[0], n) for p, n in kind_counts(layers)] == [(True, 3), (False, 58)]
    assert layers[3] is layers[60] and layers[0] is not layers[3]
    assert layer_shapes(m, 0) == {k: list(v) for k, v in kind_shapes(m, dense_kind)}
    assert layer_shapes(m, 60)["routed_experts"] == list(dict(kind_shapes(m, moe_kind))["routed_experts"])
    dense = load_model("llama-3.1-8b").spec
    assert layer_kinds(dense) == ((LayerKind("attention", "dense"), 32),)
    assert len(kind_counts(count_parameters(dense).layers)) == 1
