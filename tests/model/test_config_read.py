"""A hostile config.json: bounded before parsing, strictly typed after, every refusal naming the field.
Each case of issue 12's "Config mapping" bullet is here."""
import json
import re
import time

import pytest

from calculator.model.config_read import MAX_CONFIG_BYTES, ConfigError, parse_config_json
from calculator.model.hf_config import spec_from_hf_config
from calculator.model.presets import load_model

LLAMA = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000}


def refused(text_or_cfg) -> str:
    """The one-line refusal of a config given as JSON text or as a dict."""
    with pytest.raises(ConfigError) as err:
        cfg = parse_config_json(text_or_cfg) if isinstance(text_or_cfg, str) else text_or_cfg
        spec_from_hf_config(cfg)
    assert "\n" not in str(err.value)
    return str(err.value)


def with_(preset: str, **fields) -> dict:
    return {**load_model(preset).raw, **fields}


# ---- bounded before parsing -----------------------------------------------------------------------------------
def test_deep_nesting_is_refused_before_the_parser_recurses():
    start = time.perf_counter()
    assert refused("[" * 100_000) == "config.json nests 100,000 levels deep; at most 32 are read"
    assert time.perf_counter() - start < 1


def test_a_text_over_the_size_bound_is_refused_unread():
    assert f"at most {MAX_CONFIG_BYTES:,}" in refused(" " * (MAX_CONFIG_BYTES + 1))


def test_brackets_inside_strings_do_not_count_as_nesting():
    assert parse_config_json('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}') == {"a": "[" * 44}


def test_numbers_that_cannot_be_held_are_kept_out_of_the_parse():
    """10^400 as an integer (an OverflowError in estimate.py before), as a float (inf) and NaN: the parse
    succeeds, the field that uses them is refused by name, a field the math does not use is ignored."""
    big = "1" + "0" * 400
    assert refused(json.dumps(LLAMA)[:-1] + f', "num_hidden_layers": {big}}}').startswith(
        "num_hidden_layers: must be a whole number")
    assert refused(json.dumps(LLAMA)[:-1] + ', "vocab_size": 1e400}').startswith("vocab_size:")
    assert refused(json.dumps(LLAMA)[:-1] + ', "intermediate_size": NaN}').startswith("intermediate_size:")
    unused = parse_config_json(json.dumps(LLAMA)[:-1] + f', "rope_theta": {big}, "initializer_range": NaN}}')
    assert spec_from_hf_config(unused).spec.hidden_size == 256


def test_a_config_with_a_billion_layers_is_refused_at_once():
    start = time.perf_counter()
    assert refused({**LLAMA, "num_hidden_layers": 1_000_000_000}) == (
        "num_hidden_layers: must be from 1 to 10,000, got 1,000,000,000")
    assert time.perf_counter() - start < 0.1


# ---- strict types ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [["llama"], {"a": 1}, 3, True])
def test_model_type_must_be_a_string(value):
    assert refused({**LLAMA, "model_type": value}).startswith("model_type: must be a string")


@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "vocab_size", "num_key_value_heads"])
def test_true_is_not_an_integer(field):
    assert refused({**LLAMA, field: True}) == f"{field}: must be a whole number from 1 to " + {
        "hidden_size": "1,048,576", "num_hidden_layers": "10,000", "vocab_size": "134,217,728",
        "num_key_value_heads": "65,536"}[field] + ", got true"


def test_a_whole_float_is_read_as_the_integer_it_is():
    assert spec_from_hf_config({**LLAMA, "hidden_size": 256.0}).spec.hidden_size == 256
    assert refused({**LLAMA, "hidden_size": 256.5}).startswith("hidden_size: must be a whole number")


def test_gemma3_sliding_window_true_is_not_a_one_token_window():
    assert refused(with_("gemma-3-1b", sliding_window=True)).startswith("sliding_window: must be a whole number")


def test_mixtral_with_zero_experts_and_top_k_2_is_refused_not_computed_as_dense():
    assert refused(with_("mixtral-8x7b", num_local_experts=0)) == (
        "num_local_experts: must be from 1 to 1,048,576, got 0")
    assert refused(with_("mixtral-8x7b", num_experts_per_tok=9)).startswith("num_experts_per_tok: must be from 1 to 8")


@pytest.mark.parametrize("field,value", [("decoder_sparse_step", "Infinity"), ("decoder_sparse_step", "0"),
                                         ("decoder_sparse_step", "1e400")])
def test_qwen_moe_sparse_step_must_be_a_positive_integer(field, value):
    text = json.dumps(load_model("qwen3-30b-a3b").raw)[:-1] + f', "{field}": {value}}}'
    assert refused(text).startswith(f"{field}:")


def test_llama4_interleave_step_must_be_positive():
    text = {k: v for k, v in load_model("llama-4-scout").raw["text_config"].items() if k != "moe_layers"}
    assert refused({**text, "interleave_moe_layer_step": -1}).startswith("interleave_moe_layer_step: must be from 1")


def test_unknown_layer_types_are_refused_not_taken_as_full_attention():
    msg = refused(with_("gemma-2-9b", layer_types=["sliding_attention", "linear_attention"] * 21))
    assert msg.startswith("layer_types[1]: \"linear_attention\" is not a layer type")
    assert refused({**LLAMA, "layer_types": ["full_attention", 7]}).startswith("layer_types[1]")


def test_gpt2_resid_pdrop_must_be_a_probability():
    assert refused(with_("gpt2", resid_pdrop="abc")) == 'resid_pdrop: must be a number from 0 to 0.999, got "abc"'
    assert refused(with_("gpt2", resid_pdrop=1.5)).startswith("resid_pdrop: must be from 0")


@pytest.mark.parametrize("field,value", [("tie_word_embeddings", "yes"), ("attention_bias", 1),
                                         ("hidden_act", ["silu"]), ("mlp_only_layers", "all")])
def test_every_field_the_math_uses_is_typed(field, value):
    cfg = {**LLAMA, "model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2,
           "moe_intermediate_size": 64, field: value}
    assert refused(cfg).startswith(f"{field}:")


def test_quantization_fields_are_typed():
    assert refused({**LLAMA, "quantization_config": {"quant_method": "gptq", "bits": "four"}}).startswith("bits:")


def test_a_very_long_name_is_cut_not_refused():
    spec = spec_from_hf_config({**LLAMA, "_name_or_path": "x" * 5000}).spec
    assert len(spec.name) == 200


# ---- any config.json: a mapped model or one refusal naming a field (hypothesis) -------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from calculator import InputError, Workload, estimate  # noqa: E402
from calculator.model.presets import MODELS_DIR, list_models  # noqa: E402

# the files as Python's json reads them (Nemotron-H's time_step_limit holds Infinity, which the engine's own reader
# keeps as an unreadable marker json.dumps cannot write back)
PRESET_CONFIGS = {m.id: json.loads((MODELS_DIR / f"{m.id}.json").read_text()) for m in list_models()}
JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                        st.text(max_size=20), st.lists(st.integers(-3, 3), max_size=3),
                        st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
                        st.sampled_from(["full_attention", "sliding_attention", "linear_attention"]))
FIELDS = st.sampled_from(["model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings",
                          "sliding_window", "layer_types", "num_local_experts", "num_experts", "num_experts_per_tok",
                          "moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers", "attention_bias",
                          "hidden_act", "quantization_config", "text_config", "n_routed_experts", "kv_lora_rank",
                          "first_k_dense_replace", "interleave_moe_layer_step", "max_position_embeddings"])


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(PRESET_CONFIGS)), st.lists(st.tuples(FIELDS, JSON_VALUES), min_size=1, max_size=3),
       st.booleans())
def test_a_mutated_config_maps_or_is_refused_naming_the_field(preset, changes, into_text_config):
    """Any real config with fields set to any JSON value (as text, through the bounded parser): one ConfigError
    whose message starts with a field name, or a model the engine estimates with bounded figures."""
    cfg = json.loads(json.dumps(PRESET_CONFIGS[preset]))
    target = cfg["text_config"] if into_text_config and isinstance(cfg.get("text_config"), dict) else cfg
    for field, value in changes:
        target[field] = value
    try:
        mapped = spec_from_hf_config(parse_config_json(json.dumps(target if target is not cfg else cfg)))
    except ConfigError as exc:
        msg = str(exc)
        assert "\n" not in msg and re.match(r"(config\.json |[a-z_0-9]+(\[\d+\])?: )", msg), msg
        return
    try:
        e = estimate(mapped.spec, Workload(seq_len=1024), with_fits=False)
    except InputError:
        return
    assert 0 < e.peak_allocated_bytes <= e.total_bytes < 10**18


def test_a_field_holding_an_object_with_an_unreadable_number_is_shown_in_the_refusal():
    """Found by hypothesis: {"model_type": {"": 10000000000000000000}} raised TypeError while the refusal was
    written (the 20-digit number is kept out of the parse as a marker json.dumps could not show)."""
    text = json.dumps(LLAMA)[:-1] + ', "model_type": {"": 10000000000000000000}}'
    assert refused(text) == 'model_type: must be a string of at most 100 characters, got {"": "10000000000000000000"}'


@pytest.mark.parametrize("model_type", [[], {}, ["paligemma"]])
def test_a_nested_config_whose_model_type_is_no_string_is_refused_naming_it(model_type):
    """Hypothesis found {"model_type": [], "text_config": {}} beside a flat hidden_size raising a TypeError in the
    outer-type check (an unhashable list looked up in a frozenset)."""
    cfg = dict(load_model("deepseek-r1").raw, model_type=model_type, text_config={})
    with pytest.raises(ConfigError, match="model_type"):
        spec_from_hf_config(cfg)
