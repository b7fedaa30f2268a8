"""Nemotron-NAS (remote code `DeciLMForCausalLM`, calculator/model/mappers/remote.py map_nemotron_nas) against the
modules its modeling_decilm.py builds: Llama layers whose attention block may be a no-op and whose MLP width is
each layer's own (block_configs[i].ffn.ffn_mult). Each distinct width is a kind of its own
(calculator/model/architectures/ffn_widths.py); a layer without attention holds no KV cache."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from calculator import Workload, estimate
from calculator.core.errors import InputError
from calculator.core.workload import Parallelism
from calculator.memory import activations as act
from calculator.memory import inference as inf
from calculator.model.config_read import ConfigError
from calculator.model.hf_config import SUPPORTED_MODEL_TYPES, spec_from_hf_config
from calculator.model.mappers.remote import nas_ffn_width
from calculator.model.parameters import count_parameters
from validation.architectures.causal_lm import decilm_causal_lm, decilm_config

CONFIG = Path(__file__).resolve().parents[3] / "presets" / "models" / "llama-3.3-nemotron-super-49b.json"


def _config() -> dict:
    return json.loads(CONFIG.read_text())


def _block(group: int | None, mult: float | None) -> dict:
    return {"attention": {"n_heads_in_group": group, "no_op": group is None},
            "ffn": {"ffn_mult": mult, "no_op": mult is None}}


def tiny_config() -> tuple[dict, object]:
    """(config.json, the LlamaConfig with block_configs decilm_causal_lm builds) of a tiny Nemotron-NAS: an attention
    layer with a 256-wide MLP, an MLP-only layer and an attention layer 512 wide, one without an MLP and the first
    layer's kind again (traced past layer 0), for the architecture table (validation/architectures/sources.py)."""
    written = dict(_config(), hidden_size=64, num_hidden_layers=5, num_attention_heads=4, vocab_size=1000,
                   max_position_embeddings=256, block_configs=[  # widths 256, 512, 512, none, 256
                       _block(2, 6.0), _block(None, 12.0), _block(2, 12.0), _block(2, None), _block(2, 6.0)])
    return written, decilm_config(written)


def _remote_code_counts(cfg: dict) -> tuple[int, int]:
    """(parameters, tensors) of DeciLMForCausalLM as modeling_decilm.py builds it, on the meta device."""
    torch = pytest.importorskip("torch")
    with torch.device("meta"):
        params = list(decilm_causal_lm(decilm_config(cfg)).parameters())
    return sum(p.numel() for p in params), len(params)


def test_nemotron_nas_is_a_supported_remote_code_type():
    assert "nemotron-nas" in SUPPORTED_MODEL_TYPES


def test_the_width_rule_rounds_two_thirds_of_ffn_mult_up_to_256():
    """modeling_decilm.py _ffn_mult_to_intermediate_size: int(2·m·h/3), then the next multiple of 256."""
    assert nas_ffn_width(5.25, 8192) == 28672  # exactly 3.5·h
    assert nas_ffn_width(1.3125, 8192) == 7168
    assert nas_ffn_width(0.5, 8192) == 2816  # 2730 → 2816
    assert nas_ffn_width(1.0, 64) == 256  # 42 → 256


def test_super_49b_counts_as_the_remote_code_builds_it():
    cfg = _config()
    spec = spec_from_hf_config(cfg).spec
    counts = count_parameters(spec)
    assert (counts.total, counts.tensors) == _remote_code_counts(cfg)
    assert counts.total == 49_867_145_216
    assert spec.intermediate_size == 28672 and spec.kv_heads == 8
    assert spec.layer_types.count("none") == 31 and "none" not in spec.ffn_types


def test_tiny_config_counts_as_the_remote_code_builds_it():
    written, _ = tiny_config()
    assert (count_parameters(spec_from_hf_config(written).spec).total,
            count_parameters(spec_from_hf_config(written).spec).tensors) == _remote_code_counts(written)


def test_each_distinct_width_is_a_kind_and_the_view_has_that_width():
    spec = spec_from_hf_config(_config()).spec
    kinds = {spec.layer_kind(i) for i in range(spec.num_hidden_layers)}
    widths = {spec.ffn_of(k).intermediate_size for k in kinds}
    assert widths == {2816, 5632, 7168, 14336, 17920, 28672}
    assert all(spec.ffn_of(spec.layer_kind(i)).intermediate_size == spec.ffn_widths[i] for i in range(80))


def test_saved_activations_follow_each_layer_s_width():
    """SwiGLU saves its f-wide tensors: the narrow layer saves less by exactly e·T·Δf per f-wide tensor, and the
    attention layers of one width equal a Llama layer of that width."""
    spec = spec_from_hf_config(_config()).spec
    w = Workload(seq_len=1024, micro_batch=1)
    d = act.dims(spec, w)
    wide, narrow = spec.layer_kind(1), spec.layer_kind(0)  # 28,672 and 14,336, both with attention
    as_llama = spec.model_copy(update={"ffn_widths": None, "layer_types": None, "ffn_types": None,
                                       "intermediate_size": 14336})
    plain = act.exact_layer(as_llama, w, act.dims(as_llama, w), as_llama.layer_kind(0))
    assert act.exact_layer(spec, w, d, narrow) == plain
    per_f = (act.exact_layer(spec, w, d, wide).mlp - plain.mlp) // (28672 - 14336)
    assert per_f > 0 and (act.exact_layer(spec, w, d, wide).mlp - plain.mlp) % (28672 - 14336) == 0


def test_only_attention_layers_hold_a_kv_cache():
    spec = spec_from_hf_config(_config()).spec
    per_layer = 2 * 8 * 128 * 2  # K and V of 8 heads of 128, bf16
    assert inf.kv_cache_bytes(spec, range(80), 1, 1000, spec.kv_heads, "bf16") == 49 * per_layer * 1000


def test_training_on_8_h200_prices_every_layer_at_its_width():
    """TP 8 splits every linear; the norms (two on the 49 attention layers, one on the 31 MLP-only ones, the final
    one) stay whole on each rank."""
    spec = spec_from_hf_config(_config()).spec
    w = Workload(seq_len=4096, gpu="h200", parallel=Parallelism(tp=8), recompute="full")
    result = estimate(spec, w)
    norms = (49 * 2 + 31 + 1) * 8192
    terms = {t.key: t for t in result.terms}
    assert terms["weights"].bytes == 2 * ((49_867_145_216 - norms) // 8 + norms)
    assert terms["activations.layers"].bytes == 80 * 2 * 4096 * 8192  # full recompute: each layer's input
    assert result.peak_allocated_bytes > terms["weights"].bytes


def test_tensor_parallelism_must_divide_every_width():
    cfg = dict(_config(), num_hidden_layers=2, block_configs=[
        {"attention": {"n_heads_in_group": 8, "no_op": False}, "ffn": {"intermediate_size": 1000, "no_op": False}},
        {"attention": {"n_heads_in_group": 8, "no_op": False}, "ffn": {"intermediate_size": 2048, "no_op": False}}])
    spec = spec_from_hf_config(cfg).spec
    with pytest.raises(InputError, match=r"intermediate_size \(1000\)"):
        estimate(spec, Workload(seq_len=1024, parallel=Parallelism(tp=16), gpu="h200"))


@pytest.mark.parametrize("edit, field", [
    (lambda c: c["block_configs"].pop(), "block_configs: must be a list of 80"),
    (lambda c: c["block_configs"].__setitem__(3, "x"), r"block_configs\[3\]: must be an object"),
    (lambda c: c["block_configs"][0]["attention"].update(n_heads_in_group=16), "n_heads_in_group differs"),
    (lambda c: c["block_configs"][0]["attention"].update(n_heads_in_group=3), r"block_configs\[0\].attention.n_heads"),
    (lambda c: c["block_configs"][2]["attention"].update(replace_with_linear=True), "replace_with_linear"),
    (lambda c: c["block_configs"][5]["ffn"].update(ffn_mult=float("nan")), r"block_configs\[5\].ffn_mult"),
    (lambda c: c["block_configs"][5]["ffn"].update(no_op=True, ffn_mult=None) or
     c["block_configs"][5]["attention"].update(no_op=True), "both attention and ffn are no_op"),
    (lambda c: c["block_configs"][1]["attention"].update(window_length=4096), "window_length"),
])
def test_bad_block_configs_are_refused_naming_the_field(edit, field):
    cfg = copy.deepcopy(_config())
    edit(cfg)
    with pytest.raises(ConfigError, match=field):
        spec_from_hf_config(cfg)


def test_vllm_serves_it_with_the_cache_of_its_attention_layers_only():
    """vLLM's nemotron_nas.py builds no attention (and no KV cache spec) for a no-op block: 49 layers of K and V, 4
    key/value heads a rank at TP 2."""
    spec = spec_from_hf_config(_config()).spec
    w = Workload(mode="infer", engine="vllm", gpu="h200", parallel=Parallelism(tp=2), seq_len=8192)
    serving = estimate(spec, w).serving
    assert serving.kv_bytes_per_token == 49 * 2 * 4 * 128 * 2
    assert serving.weights_bytes > 49_867_145_216  # half of the 2-byte weights, plus what vLLM adds
