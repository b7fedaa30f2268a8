"""Every supported model_type: the config.json transformers 5 writes (`AutoConfig.for_model(...).to_dict()`) maps,
and the engine's parameter count and tensor count equal the real model's, built from that config on the meta
device. Variants cover the switches that change tensors (MQA, Falcon's new architecture, q/k norms, biases,
parallel residuals, shared experts)."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model.hf_config import FAMILY_MAPPERS, SUPPORTED_MODEL_TYPES, spec_from_hf_config  # noqa: E402
from calculator.model.mappers.vlm_text import VLM_GROUP_TYPES, VLM_TEXT_MAPPERS  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from tests.model.mappers.counts import real_counts  # noqa: E402

BASE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=96, vocab_size=100)
GPT2_LIKE = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=32)
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=32)
SIZES: dict[str, dict] = {
    "gpt2": GPT2_LIKE, "gpt_bigcode": GPT2_LIKE,
    "falcon": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=100, ffn_hidden_size=96),
    "gemma": dict(BASE, head_dim=16), "gemma2": dict(BASE, head_dim=16), "gemma3_text": dict(BASE, head_dim=16),
    "qwen3": dict(BASE, head_dim=16), "qwen3_moe": dict(BASE, head_dim=16, num_experts=4, **MOE),
    "qwen2_moe": dict(BASE, num_experts=4, shared_expert_intermediate_size=48, **MOE),
    "mixtral": dict(BASE, num_local_experts=4, num_experts_per_tok=2),
    "gpt_oss": dict(BASE, head_dim=16, num_local_experts=4, num_experts_per_tok=2),
    "olmoe": dict(BASE, num_experts=4, num_experts_per_tok=2),
    "granitemoe": dict(BASE, num_local_experts=4, num_experts_per_tok=2),
    "granitemoeshared": dict(BASE, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=48),
    "llama4_text": dict(BASE, head_dim=16, intermediate_size_mlp=128, num_local_experts=4, num_experts_per_tok=1,
                        interleave_moe_layer_step=2, moe_layers=None, no_rope_layers=None),
    "deepseek_v2": dict(BASE, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
                        qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4, n_shared_experts=1,
                        first_k_dense_replace=1, **MOE),
}
# DeepSeek-V3's router splits the experts into n_group groups (its default 8 cannot split 4 experts: the real forward
# fails); released DeepSeek-V3 keeps 4 of 8 groups, Kimi-K2 has one group. Three layers, two dense: each kind has a
# layer ≥ 1 (layer 0 also first-saves the shared RoPE tables, validation/architectures/measure.py)
V3 = dict(SIZES["deepseek_v2"], num_hidden_layers=3, first_k_dense_replace=2)
SIZES["deepseek_v3"], SIZES["kimi_k2"] = dict(V3, n_group=2, topk_group=1), dict(V3, n_group=1, topk_group=1)
SIZES.update(helium=dict(BASE, head_dim=16), ministral=dict(BASE, head_dim=16), phi3=dict(BASE, pad_token_id=None),
             smollm3=dict(BASE, pad_token_id=None), glm=dict(BASE, head_dim=16, pad_token_id=None),
             glm4=dict(BASE, head_dim=16, pad_token_id=None), vaultgemma=dict(BASE, head_dim=16),
             exaone4=dict(BASE, head_dim=16), hunyuan_v1_dense=dict(BASE, head_dim=16))
GDN = dict(BASE, head_dim=16, num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=4,
           linear_key_head_dim=8, linear_value_head_dim=12, linear_conv_kernel_dim=3)
SIZES.update(qwen3_next=dict(GDN, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                             shared_expert_intermediate_size=24),
             qwen3_5_text=GDN, qwen3_5_moe_text=dict(GDN, num_experts=4, num_experts_per_tok=2,
                                                      moe_intermediate_size=32, shared_expert_intermediate_size=24))
MULTIMODAL = {"gemma3": "gemma3_text", "llama4": "llama4_text", "qwen3_5": "qwen3_5_text",
              "qwen3_5_moe": "qwen3_5_moe_text"}
# Qwen's VLMs: their text towers have no *ForCausalLM, so the real model is the outer *ForConditionalGeneration
# (validation/architectures/causal_lm.py) with a tiny tower; a bare text config is built inside it, its head tied as it says
# (Qwen2.5-VL's multimodal RoPE sections must sum to head_dim / 2: 8 at these sizes)
SIZES.update(qwen2_5_vl_text=dict(BASE, rope_parameters=dict(rope_type="default", rope_theta=1e6,
                                                             mrope_section=[2, 3, 3])),
             qwen3_vl_text=dict(BASE, head_dim=16),
             qwen3_vl_moe_text=dict(BASE, head_dim=16, num_experts=4, **MOE))
QWEN3_TOWER = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64,
                   deepstack_visual_indexes=[0, 1])
VL = {"qwen2_5_vl": ("qwen2_5_vl_text", dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2,
                                             out_hidden_size=64, fullatt_block_indexes=[2])),
      "qwen3_vl": ("qwen3_vl_text", QWEN3_TOWER), "qwen3_vl_moe": ("qwen3_vl_moe_text", QWEN3_TOWER)}
# Qwen2-VL (its sections as Qwen2.5-VL's) and the GLM VLMs (calculator/model/mappers/vlm_text.py): GLM's multimodal
# RoPE splits head_dim · partial_rotary_factor / 2 frequencies (4 at these sizes) into mrope_section; GLM-4.5V's three
# layers have each kind at a layer >= 1
GLM_ROPE = dict(rope_type="default", rope_theta=1e4, partial_rotary_factor=0.5, mrope_section=[1, 1, 2])
SIZES.update(qwen2_vl_text=SIZES["qwen2_5_vl_text"], glm4v_text=dict(BASE, rope_parameters=GLM_ROPE),
             glm_ocr_text=dict(BASE, rope_parameters=GLM_ROPE),
             glm4v_moe_text=dict(BASE, num_hidden_layers=3, rope_parameters=GLM_ROPE, n_routed_experts=4,
                                 n_shared_experts=1, first_k_dense_replace=2, **MOE))
GLM_TOWER = dict(depth=1, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, image_size=28)
VL.update(qwen2_vl=("qwen2_vl_text", dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2)),
          glm4v=("glm4v_text", GLM_TOWER), glm46v=("glm4v_text", GLM_TOWER), glmga=("glm4v_text", GLM_TOWER),
          glm_ocr=("glm_ocr_text", GLM_TOWER), glm4v_moe=("glm4v_moe_text", GLM_TOWER))
# Qwen2.5-Omni's thinker: Qwen2.5-VL's tower and an audio tower beside it (both left out of the text parameters)
SIZES["qwen2_5_omni_text"] = SIZES["qwen2_5_vl_text"]
VL["qwen2_5_omni_thinker"] = ("qwen2_5_omni_text", dict(VL["qwen2_5_vl"][1], depth=1, fullatt_block_indexes=[0]))
OTHER_TOWERS = {"qwen2_5_omni_thinker": dict(audio_config=dict(encoder_layers=1, encoder_attention_heads=2, d_model=32,
                                                               encoder_ffn_dim=48, output_dim=64))}
VL_TEXT: dict[str, str] = {}
for _outer, (_text, _) in VL.items():  # a text type shared by several outer types is built in the first
    VL_TEXT.setdefault(_text, _outer)

VARIANTS = [
    ("gpt_bigcode", {"multi_query": False}), ("falcon", {"multi_query": False}),
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}),
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2, "num_ln_in_parallel_attn": 1}),
    ("falcon", {"parallel_attn": False, "bias": True}), ("phi", {"qk_layernorm": True}),
    ("stablelm", {"qk_layernorm": True, "use_parallel_residual": True, "use_qkv_bias": True}),
    ("cohere", {"use_qk_norm": True, "attention_bias": True}), ("starcoder2", {"use_bias": False}),
    ("seed_oss", {"attention_bias": True, "attention_out_bias": True}), ("ernie4_5", {"use_bias": True}),
    ("llama", {"attention_bias": True, "mlp_bias": True}), ("helium", {"attention_bias": True}), ("qwen3_moe", {"decoder_sparse_step": 2}),
    ("qwen2_moe", {"mlp_only_layers": [0]}), ("glm", {"attention_bias": False}), ("glm4", {"attention_bias": False}),
    ("internlm3", {"attention_bias": True, "mlp_bias": True}), ("cwm", {"mlp_bias": True}),
    ("hunyuan_v1_dense", {"attention_bias": True}),
    ("qwen3_next", {"full_attention_interval": 2, "decoder_sparse_step": 2}), ("qwen3_next", {"mlp_only_layers": [1]}),
    ("qwen3_next", {"layer_types": ["full_attention", "linear_attention", "linear_attention", "full_attention"]}),
    ("qwen3_5_text", {"attention_bias": True}), ("qwen3_5_moe_text", {"full_attention_interval": 1}),
    ("glm4v_text", {"tie_word_embeddings": True}), ("glm4v", {"num_key_value_heads": 4}),
    ("glm_ocr_text", {"head_dim": 32, "rope_parameters": dict(GLM_ROPE, mrope_section=[2, 3, 3])}),
    ("glm4v_moe_text", {"n_shared_experts": 2, "attention_bias": False, "first_k_dense_replace": 1}),
    ("glm4v_moe", {"tie_word_embeddings": True, "n_group": 2, "topk_group": 1}),
    ("qwen2_vl_text", {"tie_word_embeddings": True}), ("qwen2_5_omni_text", {"tie_word_embeddings": False}),
]


# model types whose checkpoints ship remote code that transformers runs as one of its own types
REMOTE_CODE = {"kimi_k2": "deepseek_v3"}  # transformers models/kimi_k25: text_config kimi_k2 -> deepseek_v3


def _quiet():
    logging.getLogger("transformers").setLevel(logging.ERROR)


def written_config(model_type: str, **overrides) -> tuple[dict, object]:
    """(config.json as transformers 5 writes it, the config of the causal-LM model to build)."""
    _quiet()
    if model_type in VL:
        text, tower = VL[model_type]
        config = transformers.AutoConfig.for_model(model_type, text_config={**SIZES[text], **overrides},
                                                   vision_config=tower, **OTHER_TOWERS.get(model_type, {}))
        return config.to_dict(), config
    if model_type in VL_TEXT:
        text = transformers.AutoConfig.for_model(model_type, **{**SIZES[model_type], **overrides})
        outer = transformers.AutoConfig.for_model(VL_TEXT[model_type], text_config=text.to_dict(),
                                                  vision_config=VL[VL_TEXT[model_type]][1],
                                                  **OTHER_TOWERS.get(VL_TEXT[model_type], {}),
                                                  tie_word_embeddings=text.to_dict().get("tie_word_embeddings", False))
        return text.to_dict(), outer
    sizes = SIZES.get(MULTIMODAL.get(model_type, model_type), BASE)
    if model_type in MULTIMODAL:
        config = transformers.AutoConfig.for_model(model_type, text_config={**sizes, **overrides})
        return config.to_dict(), config.text_config
    config = transformers.AutoConfig.for_model(REMOTE_CODE.get(model_type, model_type), **{**sizes, **overrides})
    return dict(config.to_dict(), model_type=model_type), config


# issue 21's families are held to the real models by their own test modules (tests/model/test_hf_<family>.py);
# Qwen's Gated DeltaNet hybrids and the vision-language text towers (vlm_text.py) stay here
TYPES_HERE = [t for t in SUPPORTED_MODEL_TYPES
              if (t not in FAMILY_MAPPERS or t in VLM_TEXT_MAPPERS
                  or t in ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"))
              and t not in VLM_GROUP_TYPES  # tests/model/mappers/test_vlm_ocr.py, test_vlm_more.py
              and t != "chameleon"]  # tests/model/mappers/test_chameleon.py (its config needs a vocabulary_map)


@pytest.mark.parametrize("model_type", TYPES_HERE)
def test_the_config_transformers_writes_maps_to_the_real_parameter_count(model_type):
    written, config = written_config(model_type)
    counts = count_parameters(spec_from_hf_config(written).spec)
    assert (counts.total, counts.tensors) == real_counts(config)


@pytest.mark.parametrize("model_type,overrides", VARIANTS, ids=lambda v: str(v))
def test_switches_that_change_tensors(model_type, overrides):
    written, config = written_config(model_type, **overrides)
    counts = count_parameters(spec_from_hf_config(written).spec)
    assert (counts.total, counts.tensors) == real_counts(config)


def test_qwen3_moe_written_by_transformers_5_says_num_local_experts():
    """Issue 13: Qwen3MoeConfig.to_dict() writes num_local_experts (transformers 4 wrote num_experts)."""
    written, _ = written_config("qwen3_moe")
    assert "num_local_experts" in written and "num_experts" not in written
    spec = spec_from_hf_config(written).spec
    assert (spec.num_experts, spec.num_experts_per_tok) == (4, 2)


def test_gpt_bigcode_is_multi_query_with_learned_positions():
    spec = spec_from_hf_config(written_config("gpt_bigcode")[0]).spec
    assert (spec.kv_heads, spec.learned_position_embeddings, spec.family) == (1, 32, "gpt2")


def test_new_architectures_say_their_activations_are_not_traced():
    mapped = spec_from_hf_config(written_config("falcon")[0])
    assert any("not traced" in w for w in mapped.warnings)
    assert spec_from_hf_config(written_config("llama")[0]).warnings == ()


def test_qwen2_vl_as_the_hub_writes_it_flat_maps_its_top_level():
    """Qwen2-VL-*-Instruct's config.json keeps the text fields at the top level (Qwen2VLConfig.__post_init__ pops
    them into its text_config): the same text model and head."""
    _quiet()
    text = {k: v for k, v in written_config("qwen2_vl_text")[0].items() if k not in ("model_type", "architectures")}
    flat = dict(text, model_type="qwen2_vl", vision_config=VL["qwen2_vl"][1], tie_word_embeddings=False)
    config = transformers.Qwen2VLConfig(**{k: v for k, v in flat.items() if k != "model_type"})
    spec = spec_from_hf_config(flat).spec
    assert spec.model_type == "qwen2_vl" and spec.vision is not None
    counts = count_parameters(spec)
    assert (counts.total, counts.tensors) == real_counts(config)


@pytest.mark.parametrize("outer", ["glm4v", "glm_ocr", "glm4v_moe", "qwen2_vl"])
def test_a_pre_v5_text_config_that_ties_the_head_ties_it(outer):
    """Glm4vConfig / GlmOcrConfig / Glm4vMoeConfig / Qwen2VLConfig.__post_init__ tie the head when text_config says
    tie_word_embeddings although the outer config says false (pre-v5 saves kept it there)."""
    written, config = written_config(outer)
    text = dict(written["text_config"], tie_word_embeddings=True)
    written = dict(written, tie_word_embeddings=False, text_config=text)
    config = transformers.AutoConfig.for_model(**{k: v for k, v in written.items() if k != "_name_or_path"})
    assert config.tie_word_embeddings and spec_from_hf_config(written).spec.tie_word_embeddings
    counts = count_parameters(spec_from_hf_config(written).spec)
    assert (counts.total, counts.tensors) == real_counts(config)


def test_qwen2_5_omni_thinker_ties_the_head_by_its_own_default():
    """Qwen2_5OmniTextConfig defaults tie_word_embeddings to True, Qwen2_5OmniThinkerConfig to False, and the thinker's
    lm_head ties by the thinker's: a config.json without the outer field has an untied head."""
    written, config = written_config("qwen2_5_omni_thinker")
    written = {k: v for k, v in written.items() if k != "tie_word_embeddings"}
    assert written["text_config"]["tie_word_embeddings"] is True and not config.tie_word_embeddings
    spec = spec_from_hf_config(written).spec
    counts = count_parameters(spec)
    assert not spec.tie_word_embeddings and (counts.total, counts.tensors) == real_counts(config)


@pytest.mark.parametrize("model_type", ["qwen3_omni_moe_thinker", "qwen3_omni_moe_text"])
def test_qwen3_omni_moe_is_refused_naming_its_expert_loop(model_type):
    from calculator.model.config_read import ConfigError
    config = transformers.AutoConfig.for_model("qwen3_omni_moe_thinker")
    written = config.to_dict() if model_type.endswith("thinker") else config.text_config.to_dict()
    with pytest.raises(ConfigError, match="per-expert loop"):
        spec_from_hf_config(written)


def test_deepseek_v3_without_norm_topk_prob_keeps_no_renormalisation():
    """DeepseekV3MoE.route_tokens_to_experts divides the top-k weights by their sum only with norm_topk_prob: a MoE
    layer traced on the CPU then saves 4·T·k + 4·T bytes less (T = 32, k = 2: 384 B), as the engine says."""
    from validation.architectures import measure as M
    from validation.architectures.sources import Source
    got = {}
    for renorm in (True, False):
        written, config = written_config("deepseek_v3", norm_topk_prob=renorm)
        src = Source("deepseek_v3", written, config, "test_archs")
        spec, _ = M.spec_of(src)
        row = M.activations(src, spec, "eager")["mla+moe"]
        assert row["engine"] == row["measured"]
        got[renorm] = row["measured"]
    assert got[True] - got[False] == 4 * 32 * 2 + 4 * 32
