"""More VLM text towers (calculator/model/mappers/vlm_more.py): the config.json transformers
5.23 writes maps, and the engine's parameter and tensor counts equal the real model's, built from that config on the
meta device. SIZES and written_config are read by validation/architectures/sources.py too."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.config_read import ConfigError  # noqa: E402
from calculator.model.hf_config import REFUSED_MODEL_TYPES, SUPPORTED_MODEL_TYPES, spec_from_hf_config  # noqa: E402
from calculator.model.mappers import vlm_more  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from tests.model.mappers.counts import engine_counts, real_counts  # noqa: E402

BASE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=96, vocab_size=100)
# Muse-Glimmer: four layers, so that the default layer_types has sliding layers (0-2) and a full NoPE one (3)
SIZES: dict[str, dict] = {
    "emu3_text_model": dict(BASE, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "molmo2_text": dict(BASE, head_dim=16, additional_vocab_size=0),
    "muse_glimmer_text": dict(BASE, num_hidden_layers=4, head_dim=16, sliding_window=32, pad_token_id=0,
                              bos_token_id=1, eos_token_id=2),
    # Step-3.5: sliding layers with 6 query heads beside the full layers' 4, a dense then three MoE layers
    "step3p5": dict(BASE, num_hidden_layers=4, head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
                    moe_intermediate_size=32, share_expert_dim=32, mlp_layer_types=["dense", "sparse", "sparse",
                                                                                    "sparse"],
                    layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
                    sliding_window=8, num_sliding_attention_heads=6),
    # ERNIE-4.5-VL: a dense then a sparse layer of 4 text experts (width 32) and 4 vision experts (width 16)
    "ernie4_5_vl_moe_text": dict(BASE, moe_intermediate_size=[32, 16], moe_num_experts=4, moe_k=2,
                                 moe_num_shared_experts=1, rope_parameters=dict(rope_type="default",
                                                                                rope_theta=500000.0,
                                                                                mrope_section=[3, 3, 2])),
}
# outer type -> (its text type, a tiny tower's config fields, other outer fields)
VL = {
    "molmo2": ("molmo2_text", dict(vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                                      num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                                                      image_size=[28, 28], num_position_embeddings=4),
                                   adapter_config=dict(vision_feature_layer=[-1], hidden_size=32, head_dim=16,
                                                       num_attention_heads=2, num_key_value_heads=2,
                                                       intermediate_size=48, text_hidden_size=64))),
    "muse_glimmer": ("muse_glimmer_text", dict(vision_config=dict(hidden_size=32, intermediate_size=48,
                                                                  num_hidden_layers=2, num_attention_heads=2,
                                                                  layer_types=["window_attention",
                                                                               "full_attention"]),
                                               out_hidden_size=128, projector_hidden_size=48)),
    "emu3": ("emu3_text_model", {}),
    "ernie4_5_vl_moe": ("ernie4_5_vl_moe_text", dict(vision_config=dict(depth=1, hidden_size=32, num_heads=2,
                                                                         intermediate_size=64))),
    "step3p7": ("step3p5", dict(vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                   num_attention_heads=2, image_size=28, patch_size=14))),
}
VL_TEXT = {text: outer for outer, (text, _) in VL.items()}
SIZES.update({outer: SIZES[text] for outer, (text, _) in VL.items()})  # sources.py finds a type by SIZES
MAPPED = sorted(SIZES)
REFUSED = {"muse_spark": "residual gates",
           "muse_spark_text": "residual gates", "glm5_next": "unweighted mean",
           "glm5_next_text": "unweighted mean"}

VARIANTS = [
    ("emu3_text_model", {"attention_bias": True, "tie_word_embeddings": True}),
    ("emu3", {"attention_dropout": 0.0}),
    ("molmo2_text", {"qk_norm_type": "olmo", "attention_bias": True}),
    ("molmo2_text", {"norm_after": True, "tie_word_embeddings": True}),
    ("ernie4_5_vl_moe_text", {"use_bias": True}),  # every linear biased but the head
    ("ernie4_5_vl_moe_text", {"mlp_layer_types": ["sparse", "sparse"], "moe_num_shared_experts": 0}),
    ("ernie4_5_vl_moe", {"mlp_layer_types": ["dense", "dense"], "moe_intermediate_size": [16, 16]}),
    ("muse_glimmer_text", {"tie_word_embeddings": True}),
    ("muse_glimmer", {"layer_types": ["sliding_attention", "full_attention"] * 2, "head_dim": 32}),
]


def _quiet():
    logging.getLogger("transformers").setLevel(logging.ERROR)


def written_config(model_type: str, **overrides):
    """(config.json as transformers 5.23 writes it, the config of the model to build): an outer type's whole config
    (its *ForConditionalGeneration, towers left out of the counts), a text type's own config (built inside its outer
    model, as transformers registers no causal LM for it; AutoModelForCausalLM builds Emu3ForCausalLM from Emu3Config's
    text_config)."""
    _quiet()
    if model_type in VL:
        text, outer = VL[model_type]
        config = transformers.AutoConfig.for_model(model_type, text_config={**SIZES[text], **overrides}, **outer)
        return config.to_dict(), config
    if model_type == "step3p5":  # Step3p7TextConfig: no AutoConfig entry of its own
        from transformers.models.step3p7.configuration_step3p7 import Step3p7TextConfig
        text = Step3p7TextConfig(**{**SIZES[model_type], **overrides})
    else:
        text = transformers.AutoConfig.for_model(model_type, **{**SIZES[model_type], **overrides})
    outer_type = VL_TEXT[model_type]
    outer = transformers.AutoConfig.for_model(outer_type, text_config=text.to_dict(), **VL[outer_type][1],
                                              tie_word_embeddings=text.tie_word_embeddings)
    return text.to_dict(), outer


@pytest.mark.parametrize("model_type", MAPPED)
def test_the_config_transformers_writes_maps_to_the_real_parameter_count(model_type):
    written, config = written_config(model_type)
    assert engine_counts(written) == real_counts(config)


@pytest.mark.parametrize("model_type,overrides", VARIANTS, ids=lambda v: str(v))
def test_switches_that_change_tensors(model_type, overrides):
    written, config = written_config(model_type, **overrides)
    assert engine_counts(written) == real_counts(config)


def test_the_group_is_registered_as_the_engine_sees_it():
    assert set(MAPPED) <= set(SUPPORTED_MODEL_TYPES)
    assert set(REFUSED) | {"qwen4_exp", "qwen4_exp_text", *vlm_more.NOT_MODELLED} == \
        vlm_more.REFUSED
    assert set(REFUSED) <= REFUSED_MODEL_TYPES


def _default_written(model_type: str) -> dict:
    _quiet()
    return transformers.AutoConfig.for_model(model_type).to_dict()


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_refused_types_name_what_the_engine_lacks(model_type):
    with pytest.raises(ConfigError, match=f"^model_type: .*{REFUSED[model_type]}"):
        spec_from_hf_config(_default_written(model_type))


@pytest.mark.parametrize("outer", ["muse_spark", "glm5_next"])
def test_an_outer_text_config_without_its_model_type_is_still_refused(outer):
    written = _default_written(outer)
    written["text_config"].pop("model_type", None)
    with pytest.raises(ConfigError, match=f"^model_type: .*{REFUSED[outer]}"):
        spec_from_hf_config(written)


@pytest.mark.parametrize("extra", [128, 7])
def test_molmo2_extra_vocabulary_rows_widen_the_embedding_not_the_head(extra):
    """Molmo2TextModel's embedding has vocab_size + additional_vocab_size rows (default 128; every released config
    has some), its lm_head vocab_size (ModelSpec.embedding_rows): counted as the real model builds them."""
    written, config = written_config("molmo2", additional_vocab_size=extra)
    assert engine_counts(written) == real_counts(config)
    spec = spec_from_hf_config(written).spec
    assert (spec.embedding_vocab_size, spec.vocab_size) == (100 + extra, 100)
    default = spec_from_hf_config(_default_written("molmo2")).spec
    assert (default.embedding_rows, default.vocab_size) == (151936 + 128, 151936)


def test_molmo2_never_ties_its_head():
    """Molmo2ForConditionalGeneration declares no tied weights: tie_word_embeddings true still builds an lm_head."""
    written, config = written_config("molmo2", tie_word_embeddings=True)
    written = dict(written, tie_word_embeddings=True)
    config.tie_word_embeddings = True
    spec = spec_from_hf_config(written).spec
    assert not spec.tie_word_embeddings and engine_counts(written) == real_counts(config)


def test_molmo2_olmo_norms_span_the_projection():
    mapped = spec_from_hf_config(written_config("molmo2_text", qk_norm_type="olmo")[0])
    assert mapped.spec.variant.qk_norm_layout == "full_width"
    assert any("mm_token_type_ids" in w for w in mapped.warnings)  # SDPA's mask in training: said, not priced
    with pytest.raises(ConfigError, match="^qk_norm_type: "):
        spec_from_hf_config(dict(written_config("molmo2_text")[0], qk_norm_type="gemma"))


def test_emu3_drops_out_both_residual_branches_by_attention_dropout():
    """Emu3DecoderLayer: nn.Dropout(attention_dropout) on the attention and MLP outputs (Emu3TextConfig default
    0.1), no embedding dropout; 0 is Llama's layer."""
    spec = spec_from_hf_config(written_config("emu3")[0]).spec
    assert spec.dropout == pytest.approx(0.1) and not spec.variant.embedding_dropout
    plain = spec_from_hf_config(written_config("emu3", attention_dropout=0.0)[0]).spec
    assert plain.dropout == 0 and plain.variant is None


def test_muse_glimmer_layers_slide_except_every_fourth_from_the_last():
    """MuseGlimmerTextConfig.__post_init__: layer_types full on every 4th layer counted back from the last; a
    config.json without layer_types gets the same."""
    written, _ = written_config("muse_glimmer_text", num_hidden_layers=6)
    spec = spec_from_hf_config(written).spec
    slide, full = "sliding_attention", "full_attention"
    assert spec.layer_types == (slide, full, slide, slide, slide, full) and spec.sliding_window == 32
    bare = {k: v for k, v in written.items() if k != "layer_types"}
    assert spec_from_hf_config(bare).spec.layer_types == spec.layer_types
    mapped = spec_from_hf_config(written)
    assert any("embed_norm" in w for w in mapped.warnings)
    assert mapped.spec.variant.attention_gate == "sigmoid" and mapped.spec.final_logit_softcapping == 20.0


@pytest.mark.parametrize("outer_tie", [None, True])
def test_muse_glimmer_ties_its_head_by_the_outer_config(outer_tie):
    """MuseGlimmerForConditionalGeneration ties lm_head by the outer config's tie_word_embeddings (absent: False), not
    by a text_config that says true."""
    text, outer = VL["muse_glimmer"]
    tie = {} if outer_tie is None else {"tie_word_embeddings": outer_tie}
    config = transformers.AutoConfig.for_model("muse_glimmer", text_config=dict(SIZES[text], tie_word_embeddings=True),
                                               **outer, **tie)
    written = config.to_dict()
    assert spec_from_hf_config(written).spec.tie_word_embeddings is bool(outer_tie)
    assert engine_counts(written) == real_counts(config)


def test_muse_glimmer_with_head_dim_null_takes_its_default():
    """A config.json writing "head_dim": null means MuseGlimmerTextConfig's default, 128, for the heads and for the
    output gate's width alike (the fuzz's seed 107 found the gate read before the default was applied)."""
    written, _ = written_config("muse_glimmer_text")
    spec = spec_from_hf_config(dict(written, head_dim=None)).spec
    gate = spec.variant.attention_tensors[0]
    assert spec.head_size == 128 and gate == (spec.num_attention_heads * 128, spec.hidden_size)


@pytest.mark.parametrize("outer, refused", [("recurrent_gemma", "recurrent_gemma"), ("rwkv", "rwkv"),
                                            ("xlstm", "xlstm"), ("zamba", "zamba"), ("mllama", "mllama_text_model"),
                                            ("idefics", "idefics"), ("git", "git")])
def test_a_known_type_the_engine_cannot_describe_is_refused_saying_what_it_lacks(outer, refused):
    """The config transformers 5.23 writes for each (an outer multimodal type through its text_config) is refused
    with the piece the engine lacks, not the generic unknown-type message; none of them is listed as supported."""
    _quiet()
    written = transformers.AutoConfig.for_model(outer).to_dict()
    with pytest.raises(ConfigError, match=f"model_type: '{refused}' cannot be described exactly yet: the calculator "
                                          "has no ") as info:
        spec_from_hf_config(written)
    assert vlm_more.NOT_MODELLED[refused][:30] in str(info.value) and refused not in SUPPORTED_MODEL_TYPES


@pytest.mark.parametrize("model_type", ["ernie4_5_vl_moe_text", "ernie4_5_vl_moe"])
def test_a_text_step_never_reaches_ernie_vl_vision_router_and_experts(model_type):
    """ERNIE-4.5-VL's sparse layer holds text and vision expert sets: after a real text-only backward exactly the
    vision router's weight and the vision experts' two tensors keep .grad None (moe_statics are requires_grad=False
    Parameters, counted apart), as the engine counts them: 4 × 64 + 4 × (2·16·64 + 64·16) = 12,544 parameters in 3
    tensors, 12,288 of them routed experts."""
    from calculator.model import architectures
    from validation.architectures.causal_lm import causal_lm, text_parameters
    written, config = written_config(model_type)
    torch.manual_seed(0)
    model = causal_lm(config).float().train()
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    none = [p for p in text_parameters(model) if p.requires_grad and p.grad is None]
    m = spec_from_hf_config(written).spec
    assert architectures.no_grad_parameters(m, 0, m.num_hidden_layers) == \
        (sum(p.numel() for p in none), len(none)) == (12_544, 3)
    assert architectures.no_grad_expert_parameters(m, 0, m.num_hidden_layers) == 12_288


def test_ernie_vl_vision_experts_are_left_out_per_gpu_under_expert_parallelism():
    """Under a torch.optim stack (no gradient, no AdamW state for what backward never reaches) each GPU leaves out
    the vision router whole and its EP share of the vision experts; flat-buffer stacks hold them."""
    from calculator.core.workload import RECIPES, Parallelism
    from calculator.memory.parallel import stage_shards
    from calculator.stages.held import states_of_shard
    written, _ = written_config("ernie4_5_vl_moe_text")
    m = spec_from_hf_config(written).spec
    precision = RECIPES["pure-bf16"][1]
    for ep, left_out in ((1, 12_544), (2, 256 + 12_288 // 2), (4, 256 + 12_288 // 4)):
        p = Parallelism(dp=4, ep=ep)
        shard = stage_shards(m, p)[0]
        grads = {keeps: sum(t.bytes for t in states_of_shard(m, p, precision, "adamw", shard, keeps)[0]
                            if t.component == "gradients") for keeps in ((False, False), (True, True))}
        assert grads[(True, True)] - grads[(False, False)] == 2 * left_out


def test_ernie_vl_28b_default_config_counts_as_the_real_model():
    """Ernie4_5_VLMoeConfig's defaults (baidu/ERNIE-4.5-VL-28B-A3B-PT): the language model (its tower and resampler
    left out) is 28,624,635,776 parameters on the meta device, 6,799,196,160 of them (23.8%) the vision routers and
    experts a text step never reaches."""
    from calculator.model import architectures
    written = _default_written("ernie4_5_vl_moe")
    assert engine_counts(written) == real_counts(transformers.AutoConfig.for_model("ernie4_5_vl_moe")) == \
        (28_624_635_776, 470)
    m = spec_from_hf_config(written).spec
    assert architectures.no_grad_parameters(m, 0, m.num_hidden_layers) == (6_799_196_160, 81)
