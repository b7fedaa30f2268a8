"""Issue 21's variant decoders (calculator/model/mappers/variants.py, variants_more.py): the config.json transformers
5.23 writes for each type maps, and the engine's parameter and tensor counts equal the real model's, built from that
config on the meta device (plus one variant that switches on each type's optional tensors); the types the engine
cannot describe are refused with what it lacks. For the MoE and attention variants of the spec, one decoder layer's
saved activations (engine: calculator.memory.activations.exact_layer) equal what a tiny bf16 model saves on the CPU
(validation/trace/saved_by_module.py), part by part."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


from calculator import Workload  # noqa: E402
from calculator.memory import activations as act  # noqa: E402
from calculator.model import variants  # noqa: E402
from calculator.model.config_read import ConfigError  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.mappers.variants import VARIANT_MAPPERS  # noqa: E402
from validation.trace.saved_by_module import KeepStorages, layer_parts, saved_bytes_by_module  # noqa: E402
from tests.model.mappers.counts import engine_counts, real_counts  # noqa: E402

S = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=101, intermediate_size=96,
         num_hidden_layers=3)
MOE = dict(S, head_dim=16, moe_intermediate_size=40, num_experts_per_tok=2)
MLA = dict(S, num_key_value_heads=4, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
           q_lora_rank=32)
GPTJ = dict(n_embd=64, n_head=4, n_layer=2, vocab_size=101, rotary_dim=8)
ROPE2 = {t: {"rope_type": "default", "rope_theta": 10000.0} for t in ("full_attention", "sliding_attention")}
FOUR = dict(num_hidden_layers=4)

# the config each type is written from (small sizes; the spec's minimal fixes where a default cannot be built:
# HunYuan's head_dim, dots1's expert counts, DBRX's rope_theta, Cohere Compass's per-layer-type RoPE)
SIZES: dict[str, dict] = {
    "minimax_m2": dict(MOE, num_local_experts=6), "hunyuan_v1_moe": dict(S, head_dim=16, num_experts=5, moe_topk=2),
    "ernie4_5_moe": dict(S, moe_intermediate_size=40, moe_num_experts=6, moe_k=2),
    "phimoe": dict(S, num_local_experts=4), "dots1": dict(MOE, n_routed_experts=8, n_shared_experts=1),
    "afmoe": dict(MOE, num_experts=8), "apertus": S, "exaone_moe": dict(MOE, num_experts=8),
    "mellum": dict(MOE, num_local_experts=8), "laguna": dict(MOE, num_experts=8, shared_expert_intermediate_size=24),
    "cohere2_moe": dict(MOE, num_experts=6), "flex_olmo": dict(S, num_experts=5, num_experts_per_tok=2, pad_token_id=0),
    "solar_open": dict(MOE, n_routed_experts=8), "hy_v3": dict(MOE, num_experts=8), "nanochat": S,
    "jais2": dict(S, head_dim=16), "hyperclovax": S, "olmo": S, "bitnet": S, "diffllama": S,
    "cohere_compass_text": dict(S, rope_parameters=ROPE2), "youtu": MLA, "minicpm3": MLA, "gptj": GPTJ,
    "codegen": dict(GPTJ, n_ctx=128, n_positions=128),
    "gpt_neo": dict(hidden_size=64, num_heads=4, num_layers=2, vocab_size=101, max_position_embeddings=128,
                    attention_types=[[["global", "local"], 1]], window_size=8),
    "bloom": dict(hidden_size=64, n_head=4, n_layer=2, vocab_size=101),
    "mpt": dict(d_model=64, n_heads=4, n_layers=2, vocab_size=101),
    "opt": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=101, ffn_dim=96,
                max_position_embeddings=128, word_embed_proj_dim=64),
    "xglm": dict(d_model=64, attention_heads=4, num_layers=2, vocab_size=101, ffn_dim=96),
    "biogpt": dict(S, max_position_embeddings=128), "persimmon": dict(S, num_key_value_heads=4), "granite_swa": S,
    "granitemoe_swa": dict(S, num_local_experts=4, num_experts_per_tok=2),
    "aria_text": dict(S, head_dim=16, moe_num_experts=4, moe_topk=2),
    "kolibri1": dict(MOE, num_local_experts=8, shared_expert_intermediate_size=24),
    "flint": dict(MOE, **FOUR, num_experts=8, shared_expert_intermediate_size=24),
    "beam": dict(MOE, **FOUR, num_experts=8, n_group=2, topk_group=1),
    # clip_qkv as released DBRX sets it: with None, modeling_dbrx's clamp(min=None, max=None) fails
    "dbrx": dict(d_model=64, n_heads=4, n_layers=2, vocab_size=101,
                 attn_config=dict(kv_n_heads=2, rope_theta=1e4, clip_qkv=8),
                 ffn_config=dict(moe_num_experts=4, moe_top_k=2, ffn_hidden_size=40)),
    "jetmoe": dict(S, kv_channels=16, num_local_experts=4, num_experts_per_tok=2), "doge": S,
    "zaya": dict(S, head_dim=16, num_experts=4, moe_intermediate_size=40, router_hidden_size=32),
    "mimo_v2_flash": dict(MOE, num_hidden_layers=6, head_dim=24, v_head_dim=16, n_routed_experts=8, sliding_window=8),
    "ctrl": dict(n_embd=64, n_head=4, n_layer=2, vocab_size=101, dff=96, n_positions=128),
    # three layers: only the last one's attention holds dense_bias
    "gpt_neox_japanese": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=3, vocab_size=101,
                              max_position_embeddings=128),
    "openai-gpt": dict(n_embd=64, n_head=4, n_layer=2, vocab_size=101, n_positions=128),
}
SIZES["cohere_compass"] = SIZES["cohere_compass_text"]
# one variant per type: the switches that add or remove tensors
VARIANTS = [
    ("minimax_m2", dict(tie_word_embeddings=True)), ("hunyuan_v1_moe", dict(attention_bias=True, head_dim=20)),
    ("ernie4_5_moe", dict(num_hidden_layers=6, moe_num_shared_experts=2, moe_layer_end_index=4, moe_layer_interval=2,
                          use_bias=True)),
    ("phimoe", dict(attention_bias=True, lm_head_bias=True, tie_word_embeddings=True)),
    ("dots1", dict(n_shared_experts=2, first_k_dense_replace=1, attention_bias=True, sliding_window=8,
                   max_window_layers=1)),
    ("afmoe", dict(FOUR, num_shared_experts=1, num_dense_layers=2, attention_bias=True, sliding_window=8)),
    ("apertus", dict(attention_bias=True, hidden_act="gelu")),
    ("exaone_moe", dict(num_hidden_layers=5, num_shared_experts=2, first_k_dense_replace=2, sliding_window=8)),
    ("mellum", dict(attention_bias=True, mlp_layer_types=["dense", "sparse", "sparse"], sliding_window=8,
                    layer_types=["full_attention", "sliding_attention", "full_attention"])),
    ("laguna", dict(attention_bias=True, gating="per-element")),
    ("cohere2_moe", dict(FOUR, num_shared_experts=1, prefix_dense_intermediate_size=72, first_k_dense_replace=1,
                         attention_bias=True, tie_word_embeddings=False, rms_norm_eps=1e-6)),
    ("flex_olmo", dict(attention_bias=True, tie_word_embeddings=True)),
    ("solar_open", dict(n_shared_experts=2, attention_bias=True)), ("hy_v3", dict(attention_bias=True, mlp_bias=True)),
    ("nanochat", dict(attention_bias=True, tie_word_embeddings=True)),
    ("jais2", dict(attention_bias=False, mlp_bias=False)), ("hyperclovax", dict(use_post_norm=False, mlp_bias=True)),
    ("olmo", dict(attention_bias=True)), ("bitnet", dict(attention_bias=True)), ("diffllama", dict(head_dim=16)),
    ("cohere_compass_text", dict(FOUR, attention_bias=True, layer_types=["sliding_attention"] * 3 + ["full_attention"],
                                 sliding_window=8, tie_word_embeddings=False)),
    ("youtu", dict(q_lora_rank=None, attention_bias=True, tie_word_embeddings=False)),
    ("minicpm3", dict(q_lora_rank=None, attention_bias=True, mlp_bias=True)), ("gptj", dict(n_inner=96)),
    ("codegen", dict(tie_word_embeddings=True)), ("gpt_neo", dict(attention_types=[[["global"], 2]])),
    ("bloom", dict(tie_word_embeddings=False)), ("mpt", dict(expansion_ratio=3, no_bias=False)),
    ("opt", dict(enable_bias=False, layer_norm_elementwise_affine=False, tie_word_embeddings=False)),
    ("xglm", dict(tie_word_embeddings=False)), ("biogpt", dict(tie_word_embeddings=False)),
    ("persimmon", dict(qk_layernorm=False)), ("granite_swa", dict(attention_bias=True, tie_word_embeddings=False)),
    ("granitemoe_swa", dict(shared_intermediate_size=24, attention_bias=True)),
    ("aria_text", dict(moe_num_shared_experts=1, mlp_bias=True)), ("kolibri1", dict(sliding_window=8)),
    ("flint", dict(mlp_only_layers=[0], decoder_sparse_step=2, attention_bias=True)),
    ("beam", dict(attention_bias=True, mlp_layer_types=["dense", "sparse", "dense", "sparse"])),
    ("dbrx", dict(ffn_config=dict(moe_num_experts=3, moe_top_k=1, ffn_hidden_size=24))),
    ("ctrl", dict(tie_word_embeddings=False)),
    ("gpt_neox_japanese", dict(tie_word_embeddings=False, intermediate_multiple_size=2, rotary_pct=0.5)),
]
REFUSED = ("jetmoe", "doge", "zaya", "openai-gpt")


def written_config(model_type: str, **overrides) -> tuple[dict, object]:
    """(config.json as transformers 5 writes it, the config of the causal-LM model to build)."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    if model_type == "cohere_compass":  # the multimodal wrapper: its text model
        config = transformers.AutoConfig.for_model(model_type, text_config={**SIZES[model_type], **overrides})
        return config.to_dict(), config.text_config
    config = transformers.AutoConfig.for_model(model_type, **{**SIZES[model_type], **overrides})
    return config.to_dict(), config


def test_every_variant_type_has_a_written_config():
    assert sorted(VARIANT_MAPPERS) == sorted(SIZES)


@pytest.mark.parametrize("model_type", sorted(t for t in VARIANT_MAPPERS if t not in REFUSED))
def test_the_config_transformers_writes_maps_to_the_real_parameter_count(model_type):
    written, config = written_config(model_type)
    assert engine_counts(written) == real_counts(config)


@pytest.mark.parametrize("model_type,overrides", VARIANTS, ids=lambda v: str(v))
def test_switches_that_change_tensors(model_type, overrides):
    written, config = written_config(model_type, **overrides)
    assert engine_counts(written) == real_counts(config)


@pytest.mark.parametrize("model_type", REFUSED)
def test_a_type_the_engine_cannot_describe_is_refused_with_what_it_lacks(model_type):
    written, config = written_config(model_type)
    real_counts(config)  # transformers builds it
    with pytest.raises(ConfigError, match="cannot be computed exactly yet: .*the engine"):
        spec_from_hf_config(written)


@pytest.mark.parametrize("model_type,lacks", [("openai-gpt", "no final LayerNorm.*no KV cache")])
def test_a_refusal_names_the_missing_piece(model_type, lacks):
    with pytest.raises(ConfigError, match=f"^model_type: '{model_type}' cannot be computed exactly yet: .*{lacks}"):
        spec_from_hf_config(written_config(model_type)[0])


@pytest.mark.parametrize("model_type,overrides,field", [
    ("laguna", dict(num_attention_heads_per_layer=[4, 8, 2]), "num_attention_heads_per_layer"),
    ("dots1", dict(n_shared_experts=0), "n_shared_experts"), ("hunyuan_v1_moe", dict(head_dim=None), "head_dim"),
    ("opt", dict(word_embed_proj_dim=32), "word_embed_proj_dim"),
])
def test_what_a_mapper_cannot_make_exact_is_refused_naming_the_field(model_type, overrides, field):
    written, _ = written_config(model_type)
    with pytest.raises(ConfigError, match=f"^{field}:"):
        spec_from_hf_config({**written, **overrides})


@pytest.mark.parametrize("model_type,fp32,untrained", [
    ("ernie4_5_moe", 2 * (6 * 64 + 6), 2 * 6), ("hunyuan_v1_moe", 3 * 5 * 64, 0), ("afmoe", 0, 2 * 8),
    ("laguna", 0, 2 * 8), ("minimax_m2", 0, 0)])
def test_fp32_and_untrained_parameters_are_the_real_models(model_type, fp32, untrained):
    """ERNIE's router and moe_statics and HunYuan's wg stay fp32 in a bf16 model; ERNIE's moe_statics, AFMoE's
    expert_bias and Laguna's e_score_correction_bias are Parameters with requires_grad=False."""
    written, config = written_config(model_type)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    params = list(model.parameters())
    real = (sum(p.numel() for p in params if p.dtype == torch.float32),
            sum(p.numel() for p in params if not p.requires_grad))
    m = spec_from_hf_config(written).spec
    assert real == (variants.fp32_parameters(m), variants.untrained_parameters(m)) == (fp32, untrained)


# ---- one layer's saved activations, measured -------------------------------------------------------------------
PARTS = {"attention": ("self_attn",), "mlp": ("mlp",),
         "norms": ("input_layernorm", "post_attention_layernorm", "pre_mlp_layernorm", "post_mlp_layernorm",
                   "attention_layernorm", "feedforward_layernorm", "post_feedforward_layernorm",
                   "post_self_attn_layernorm")}
E_BYTES = 2  # bf16
# two shapes: (batch, sequence, sizes); f dense width, fe expert width, E experts, k per token
SHAPES = {"shape1": (2, 16, dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16), 96, 40,
                     8, 2),
          "shape2": (3, 12, dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=8), 80, 24,
                     6, 3)}
# What the CPU run keeps that a GPU run does not (the engine prices the GPU), by name:
# - "rope_copy" (G6): RoPE written as split + cat hands SDPA a BHSD-contiguous query; the flash kernel returns a
#   BHSD output that transformers' transpose(1, 2).contiguous() copies (e·T·qd). The CUDA kernels allocate their output
#   like q too (calculator.memory.sdpa.output_copy), so a mapper that sets ModelSpec.rope_concat (MiniMax-M2) prices
#   it; the term is taken out here only for the types not mapped so (Laguna);
# - "layernorm_stats": LayerNorm's mean and rstd are bf16 on the CPU (2 + 2 B per row), fp32 on CUDA: 4·T per norm.


def measured_cases(shape: str) -> list[tuple]:
    """(model type, layer (≥ 1: layer 0 also first-saves the shared RoPE tables; a full-attention one), config,
    CPU-only terms)."""
    _, _, dims, f, fe, n_exp, k = SHAPES[shape]
    h = dict(dims, vocab_size=128, num_hidden_layers=2)
    x = dict(h, intermediate_size=f, moe_intermediate_size=fe, num_experts_per_tok=k)
    four = dict(x, num_hidden_layers=4, sliding_window=8)
    return [(shape,) + case for case in [
        ("minimax_m2", 1, dict(h, intermediate_size=fe, num_local_experts=n_exp, num_experts_per_tok=k), ()),
        ("hunyuan_v1_moe", 1, dict(h, intermediate_size=fe, num_experts=n_exp, moe_topk=k), ()),
        ("ernie4_5_moe", 1, dict(x, moe_num_experts=n_exp, moe_k=k, moe_num_shared_experts=2), ()),
        ("ernie4_5_moe", 1, dict(x, moe_num_experts=n_exp, moe_k=k, moe_num_shared_experts=0), ()),
        ("phimoe", 1, dict(h, intermediate_size=fe, num_local_experts=n_exp, num_experts_per_tok=2),
         ("layernorm_stats",)),
        ("dots1", 1, dict(x, n_routed_experts=n_exp, n_shared_experts=1, first_k_dense_replace=1), ()),
        ("dots1", 1, dict(x, n_routed_experts=n_exp, n_shared_experts=2, norm_topk_prob=True), ()),
        ("afmoe", 3, dict(four, num_experts=n_exp, num_shared_experts=1), ()),
        ("afmoe", 1, dict(x, num_experts=n_exp, num_shared_experts=1, num_dense_layers=2,
                          layer_types=["full_attention"] * 2), ()),
        ("apertus", 1, dict(h, intermediate_size=f), ()),
        ("exaone_moe", 3, dict(four, num_experts=n_exp, num_shared_experts=1), ()),
        ("mellum", 1, dict(x, num_local_experts=n_exp), ()),
        ("mellum", 1, dict(x, num_local_experts=n_exp, norm_topk_prob=False, mlp_layer_types=["sparse", "dense"]), ()),
        ("laguna", 1, dict(x, num_experts=n_exp, shared_expert_intermediate_size=fe), ("rope_copy",)),
        ("laguna", 1, dict(x, num_experts=n_exp, shared_expert_intermediate_size=fe, gating="per-element"),
         ("rope_copy",)),
        ("cohere2_moe", 3, dict(four, intermediate_size=fe, num_experts=n_exp), ()),
        ("cohere2_moe", 3, dict(four, intermediate_size=fe, num_experts=n_exp, expert_selection_fn="sigmoid",
                                rms_norm_eps=1e-6, num_shared_experts=1), ()),
        ("flex_olmo", 1, dict(h, intermediate_size=fe, num_experts=n_exp, pad_token_id=0), ()),
        ("solar_open", 1, dict(x, n_routed_experts=n_exp, n_shared_experts=1), ()),
        ("hy_v3", 1, dict(x, num_experts=n_exp, num_shared_experts=1), ()),
        ("kolibri1", 1, dict(x, num_local_experts=n_exp, shared_expert_intermediate_size=fe), ()),
        # layer 4 of 5: full attention without RoPE (a windowed model's global layers), renormalised router
        ("kolibri1", 4, dict(x, num_hidden_layers=5, sliding_window=8, num_local_experts=n_exp,
                             shared_expert_intermediate_size=fe, norm_topk_prob=True), ()),
    ]]


MEASURED = measured_cases("shape1") + measured_cases("shape2")


def measured_parts(config, layer: int, b: int, seq: int) -> dict[str, int]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16)
    model.train()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.02)
    ids = torch.randint(0, config.vocab_size, (b, seq))
    with KeepStorages():
        by_module = saved_bytes_by_module(model, ids)
    return layer_parts(by_module, layer, PARTS)


@pytest.mark.parametrize("shape,model_type,layer,kw,cpu_only", MEASURED,
                         ids=[f"{c[1]}-{c[0]}-{i}" for i, c in enumerate(MEASURED)])
def test_one_layers_saved_activations_are_what_the_real_layer_saves(shape, model_type, layer, kw, cpu_only):
    """The engine's parts: norms (each norm's copies and the norm outputs the next linears keep), attention, mlp. The
    measurement attributes a norm output to the module that first saved it (q_proj, the router or a shared expert),
    so e·T·h moves from attention (and from the MLP, when it keeps its input) to the norms."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    b, seq = SHAPES[shape][:2]
    config = transformers.AutoConfig.for_model(model_type, **kw)
    measured = measured_parts(config, layer, b, seq)
    assert set(measured) == set(PARTS), "a module of the layer was not assigned a part"
    m = spec_from_hf_config(config.to_dict()).spec
    w = Workload(seq_len=seq, micro_batch=b, attention="sdpa")
    kind = m.layer_kind(layer)
    engine = act.exact_layer(m, w, act.dims(m, w), kind)
    T = b * seq
    out = E_BYTES * T * m.hidden_size
    shared = bool(m.num_shared_experts or m.shared_expert_intermediate_size)
    mlp_keeps_input = not m.parallel_residual and (kind.ffn == "dense" or variants.moe_input_kept(m.variant, shared))
    moved = {"attention": out, "mlp": out if mlp_keeps_input else 0}
    expected = {"norms": measured["norms"] + moved["attention"] + moved["mlp"],
                "attention": measured["attention"] - moved["attention"], "mlp": measured["mlp"] - moved["mlp"]}
    if "rope_copy" in cpu_only:
        expected["attention"] -= E_BYTES * T * m.q_dim
    if "layernorm_stats" in cpu_only:
        expected["norms"] += 4 * T * m.norms_per_layer
    assert engine._asdict() == expected


def test_xglm_keeps_no_rope_tables():
    """XGLM's positions are a sinusoidal buffer added to the embeddings (XGLMSinusoidalPositionalEmbedding): no
    layer rotates q and k, so no cos / sin tables are saved (the engine counted 2·s·head_dim·e once per model)."""
    spec = spec_from_hf_config(written_config("xglm")[0]).spec
    assert not spec.variant.rope and act.rotary_saved(spec, act.dims(spec, Workload(seq_len=16, micro_batch=2))) == 0
