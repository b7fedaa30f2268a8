"""DeepSeek sparse attention and the MoE families around it (calculator/model/mappers/dsa.py, architectures/dsa.py) held to
transformers 5.23: every mapper's parameter and tensor counts against the real model on the meta device, from the
config transformers writes and from varied ones; the indexer keys each layer caches against a real CPU prefill; the
saved activations of an indexed layer against the same layer without an indexer (saved_by_module, tiny bf16 model).
"""
from __future__ import annotations

import json
import logging
import weakref
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.core.workload import Workload  # noqa: E402
from calculator.memory import activations as act  # noqa: E402
from calculator.memory import inference as inf  # noqa: E402
from calculator.model.architectures import dsa  # noqa: E402
from calculator.model.config_read import ConfigError  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.mappers.dsa import DSA_REFUSED  # noqa: E402
from calculator.model.spec import LayerKind  # noqa: E402
from validation.trace.saved_by_module import layer_parts, saved_bytes_by_module  # noqa: E402
from tests.model.mappers.counts import engine_counts, real_counts  # noqa: E402

torch.set_num_threads(1)

# small DeepSeek-family sizes (varied: q-LoRA, biases, tied embeddings, per-layer MLPs)
MLA_A = dict(vocab_size=1000, hidden_size=96, intermediate_size=160, moe_intermediate_size=48, num_hidden_layers=5,
             num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, n_shared_experts=2,
             num_experts_per_tok=2, n_group=2, topk_group=1, kv_lora_rank=40, q_lora_rank=56, qk_rope_head_dim=16,
             qk_nope_head_dim=24, v_head_dim=20)
MLA_B = dict(vocab_size=777, hidden_size=64, intermediate_size=112, moe_intermediate_size=24, num_hidden_layers=4,
             num_attention_heads=2, num_key_value_heads=2, n_routed_experts=4, n_shared_experts=1,
             num_experts_per_tok=2, n_group=1, topk_group=1, kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=8,
             qk_nope_head_dim=16, v_head_dim=12, attention_bias=True, tie_word_embeddings=True,
             mlp_layer_types=["sparse", "dense", "sparse", "dense"])
INDEX_A, INDEX_B = dict(index_n_heads=6, index_head_dim=32, index_topk=8), dict(index_n_heads=3, index_head_dim=16,
                                                                                index_topk=4)
MINIMAX = dict(vocab_size=1000, pad_token_id=0, bos_token_id=1, eos_token_id=2, hidden_size=96, intermediate_size=32,
               num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, head_dim=24, num_local_experts=8,
               num_experts_per_tok=2, dense_intermediate_size=128, shared_intermediate_size=40, rotary_dim=8,
               index_n_heads=2, index_head_dim=16, index_block_size=4, index_topk_blocks=2)
# DeepSeek-V4 (compressed attention, hyper-connections; more in test_deepseek_v4.py): one layer of each kind, a
# window of 8 and rates 4 / 8 that an 11-token prefill fills (validation/architectures measures the first)
V4_A = dict(vocab_size=500, hidden_size=64, moe_intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
            head_dim=32, q_lora_rank=48, n_routed_experts=4, num_experts_per_tok=2, hc_mult=3, sliding_window=8,
            o_groups=2, o_lora_rank=40, index_n_heads=2, index_head_dim=16, index_topk=4, num_hash_layers=1,
            layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"],
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8})
V4_B = dict(vocab_size=300, hidden_size=48, moe_intermediate_size=16, num_hidden_layers=5, num_attention_heads=2,
            head_dim=24, q_lora_rank=20, n_routed_experts=3, n_shared_experts=2, num_experts_per_tok=1, hc_mult=1,
            sliding_window=4, o_groups=4, o_lora_rank=8, index_n_heads=3, index_head_dim=8, index_topk=2,
            tie_word_embeddings=True, mlp_bias=True, compress_rate_csa=2, compress_rate_hca=16)
CASES = [
    ("deepseek_v32", {}), ("glm_moe_dsa", {}), ("glm4_moe", {}), ("glm4_moe_lite", {}), ("minimax_m3_vl_text", {}),
    ("deepseek_v4", {}), ("deepseek_v4", V4_A), ("deepseek_v4", V4_B),
    ("deepseek_v32", dict(MLA_A, first_k_dense_replace=2, **INDEX_A)), ("deepseek_v32", dict(MLA_B, **INDEX_B)),
    ("glm_moe_dsa", dict(MLA_A, first_k_dense_replace=1, index_topk_freq=2, index_skip_topk_offset=2, **INDEX_A)),
    ("glm_moe_dsa", dict(MLA_B, index_topk_pattern="FSFS", **INDEX_B)),
    ("glm4_moe_lite", dict(MLA_A, mlp_layer_types=["dense", "dense", "sparse", "sparse", "sparse"])),
    ("glm4_moe_lite", dict(MLA_B, q_lora_rank=None)),
    ("glm4_moe", dict(vocab_size=1000, hidden_size=96, intermediate_size=160, moe_intermediate_size=48,
                      num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2, n_routed_experts=8,
                      n_shared_experts=2, num_experts_per_tok=2, first_k_dense_replace=2, attention_bias=True,
                      use_qk_norm=True, head_dim=32, num_nextn_predict_layers=1)),
    ("glm4_moe", dict(vocab_size=500, hidden_size=64, intermediate_size=96, moe_intermediate_size=16,
                      num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
                      n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, tie_word_embeddings=True,
                      num_nextn_predict_layers=2)),
    ("minimax_m3_vl_text", dict(MINIMAX, sparse_attention_config={"sparse_attention_freq": [0, 1, 1, 0]},
                                moe_layer_freq=[0, 1, 1, 1])),
    ("minimax_m3_vl_text", dict(MINIMAX, num_hidden_layers=3, layer_types=["minimax_m3_sparse"] * 3,
                                tie_word_embeddings=True)),
]
PRESETS = Path(__file__).resolve().parents[3] / "presets" / "models"


def _quiet():
    logging.getLogger("transformers").setLevel(logging.ERROR)


def written(model_type: str, **kwargs):
    """(config.json as transformers 5 writes it, the config)."""
    _quiet()
    config = transformers.AutoConfig.for_model(model_type, **kwargs)
    return config.to_dict(), config


@pytest.mark.parametrize("model_type,kwargs", CASES, ids=lambda v: str(v)[:60])
def test_parameter_and_tensor_counts_equal_the_real_model(model_type, kwargs):
    cfg, config = written(model_type, **kwargs)
    assert engine_counts(cfg) == real_counts(config)


@pytest.mark.parametrize("name", ["deepseek-v3.2", "glm-5"])
def test_released_configs_count_exactly_and_carry_one_mtp_layer(name):
    cfg = json.loads((PRESETS / f"{name}.json").read_text())
    _quiet()
    config = transformers.AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items()
                                                                     if k not in ("model_type", "quantization_config")})
    mapped = spec_from_hf_config(cfg)
    assert engine_counts(cfg) == real_counts(config)
    assert mapped.spec.mtp_layers == 1 and mapped.spec.ffn_types[:4] == ("dense",) * 3 + ("moe",)


def test_config_json_without_the_derived_lists_maps_as_transformers_derives_them():
    """A config.json may give the legacy fields only: GLM-5's index_topk_freq / offset, DeepSeek's
    first_k_dense_replace, MiniMax's sparse_attention_config and moe_layer_freq."""
    cfg, config = written("glm_moe_dsa", **dict(MLA_A, index_topk_freq=2, index_skip_topk_offset=1, **INDEX_A))
    raw = {k: v for k, v in cfg.items() if k not in ("indexer_types", "mlp_layer_types", "layer_types")}
    raw.update(index_topk_freq=2, index_skip_topk_offset=1)
    assert engine_counts(raw) == real_counts(config)
    assert spec_from_hf_config(raw).spec.layer_types == tuple(
        "indexed_attention" if t == "full" else "full_attention" for t in config.indexer_types)
    legacy = dict(MINIMAX, sparse_attention_config={"sparse_attention_freq": [1, 0, 1, 0], "sparse_index_dim": 8},
                  moe_layer_freq=[1, 1, 0, 1])
    cfg, config = written("minimax_m3_vl_text", **legacy)
    raw = {k: v for k, v in cfg.items() if k not in ("layer_types", "mlp_layer_types")}
    raw.update(index_head_dim=16, sparse_attention_config=legacy["sparse_attention_config"],
               moe_layer_freq=[1, 1, 0, 1])
    assert engine_counts(raw) == real_counts(config)
    assert spec_from_hf_config(raw).spec.indexer.head_dim == 8


def test_glm5_shared_layers_are_plain_mla_and_glm4_moe_counts_its_mtp_layers():
    spec = spec_from_hf_config(written("glm_moe_dsa", **dict(MLA_B, index_topk_pattern="FSFS", **INDEX_B))[0]).spec
    assert [spec.layer_kind(i).mixer for i in range(4)] == ["dsa", "mla", "dsa", "mla"]
    glm = spec_from_hf_config(written("glm4_moe", num_nextn_predict_layers=2)[0]).spec
    assert (glm.mtp_layers, glm.head_dim, glm.first_k_dense_layers) == (2, 4096 // 96, 1)


@pytest.mark.parametrize("model_type", sorted(DSA_REFUSED))
def test_types_beyond_the_vocabulary_are_refused_with_what_is_missing(model_type):
    cfg, _ = written(model_type)
    with pytest.raises(ConfigError, match="cannot be described exactly yet: the calculator has no"):
        spec_from_hf_config(cfg)


# ---- the cache after a prefill --------------------------------------------------------------------------------------
def _cache_bytes(layer) -> int:
    seen, total = set(), 0
    for value in vars(layer).values():
        if isinstance(value, torch.Tensor) and value.dim() >= 3 and id(value) not in seen:
            seen.add(id(value))
            total += value.numel() * value.element_size()
    return total


CACHE_CASES = [("deepseek_v32", dict(MLA_B, num_hidden_layers=2, mlp_layer_types=None, **INDEX_B)),
               ("glm_moe_dsa", dict(MLA_B, num_hidden_layers=2, mlp_layer_types=None, index_topk_pattern="FS",
                                    **INDEX_B)),
               ("minimax_m3_vl_text", dict(MINIMAX, num_hidden_layers=2, layer_types=["full_attention",
                                                                                      "minimax_m3_sparse"]))]


@pytest.mark.parametrize("model_type,kwargs", CACHE_CASES, ids=lambda v: str(v)[:30])
def test_kv_bytes_per_token_equal_the_cache_after_a_prefill(model_type, kwargs):
    cfg, config = written(model_type, **kwargs)
    spec = spec_from_hf_config(cfg).spec
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="eager")
    b, s = 2, 11
    with torch.no_grad():
        cache = model(input_ids=torch.randint(3, 100, (b, s)), use_cache=True).past_key_values
    kvh = spec.kv_heads
    for i, layer in enumerate(cache.layers):
        per_token = inf.kv_bytes_per_token_per_layer(spec, kvh, "bf16")
        if spec.layer_kind(i).mixer == "dsa":
            per_token += dsa.kv_bytes_per_token(spec, "bf16")
        assert _cache_bytes(layer) == b * s * per_token, i
    everything = range(spec.num_hidden_layers)
    assert sum(map(_cache_bytes, cache.layers)) == (inf.kv_cache_bytes(spec, everything, b, s, kvh, "bf16")
                                                    + inf.extra_kv_bytes(spec, everything, b, s, "bf16"))


def test_vllm_keeps_132_bytes_of_fp8_indexer_keys_per_token_at_head_dim_128():
    v32 = spec_from_hf_config(written("deepseek_v32")[0]).spec
    assert dsa.vllm_kv_bytes_per_token(v32) == 132 and dsa.kv_bytes_per_token(v32, "bf16") == 256
    assert dsa.linear_flops_per_token(v32, 1000) == 2 * 64 * 129 * 1000
    assert dsa.attended_keys(v32, 100) == 100 and dsa.attended_keys(v32, 10**6) == 2048


# ---- saved activations ----------------------------------------------------------------------------------------------
PARTS = {"attention": ("self_attn",), "norms": ("input_layernorm", "post_attention_layernorm")}
SAVED_MLA = dict(vocab_size=100, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, n_shared_experts=1,
                 num_experts_per_tok=2, n_group=1, topk_group=1, kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=8,
                 qk_nope_head_dim=16, v_head_dim=16, first_k_dense_replace=1)


def _saved(model_type: str, kwargs: dict, b: int, s: int) -> tuple[dict, dict]:
    _, config = written(model_type, **kwargs)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="eager")
    model.train()
    by_module = saved_bytes_by_module(model, torch.randint(3, 100, (b, s)))
    return by_module, {i: layer_parts(by_module, i, PARTS) for i in range(config.num_hidden_layers)}


def test_an_indexed_layer_saves_what_the_same_mla_layer_saves():
    """DeepseekV32Indexer.forward runs under @torch.no_grad(): the indexer saves nothing, and the top-k folded into
    the mask leaves the attention's saved tensors as DeepSeek-V3's (every layer, dense and MoE)."""
    b, s = 2, 24
    v32_modules, v32 = _saved("deepseek_v32", dict(SAVED_MLA, index_n_heads=2, index_head_dim=16, index_topk=4), b, s)
    _, v3 = _saved("deepseek_v3", SAVED_MLA, b, s)
    assert not any(".indexer" in name for name in v32_modules)
    for i in range(2):
        assert v32[i]["attention"] > 0 and (v32[i]["attention"], v32[i]["norms"]) == (v3[i]["attention"],
                                                                                      v3[i]["norms"])
    cfg32 = written("deepseek_v32", **dict(SAVED_MLA, index_n_heads=2, index_head_dim=16, index_topk=4))[0]
    m32, m3 = spec_from_hf_config(cfg32).spec, spec_from_hf_config(written("deepseek_v3", **SAVED_MLA)[0]).spec
    w = Workload(seq_len=s, micro_batch=b, attention="eager")
    for ffn in ("dense", "moe"):
        assert act.exact_layer(m32, w, act.dims(m32, w), LayerKind("dsa", ffn)) == \
            act.exact_layer(m3, w, act.dims(m3, w), LayerKind("mla", ffn))
    assert dsa.saved(m32, act.dims(m32, w), w) == 0 and dsa.trainable_saved(m32, act.dims(m32, w)) > 0


def _indexer_only_saved(model, indexer, input_ids, use_cache: bool) -> int:
    """Bytes of the storages only the indexer saved that a graph still holds after the forward. Each saved tensor is
    packed as a detached alias: saved_by_module's wrapper holds the tensor itself, which ties a node that saves its
    own output into a reference cycle through C++ that never frees, so a graph the loss cannot reach (MiniMax's
    indexer) would look retained there."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    inside, packed, outside = [False], [], set()

    def pack(t):
        alias, ptr = t.detach(), t.untyped_storage().data_ptr()
        if ptr not in params:
            if inside[0]:
                packed.append((weakref.ref(alias), ptr, t.untyped_storage().nbytes()))
            else:
                outside.add(ptr)
        return alias

    hooks = [indexer.register_forward_pre_hook(lambda mod, args: inside.__setitem__(0, True)),
             indexer.register_forward_hook(lambda mod, args, out: inside.__setitem__(0, False))]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        out = model(input_ids=input_ids, labels=input_ids, use_cache=use_cache)
    for h in hooks:
        h.remove()
    own = {ptr: n for ref, ptr, n in packed if ref() is not None and ptr not in outside}
    out.loss.backward()
    return sum(own.values())


def test_minimax_block_indexer_keeps_nothing_for_backward():
    """MiniMaxM3VLIndexer runs with grad but hands on only integer block indices: its graph is freed at once (what
    it shares with the attention, its input and the RoPE tables, is the attention's) and it gets no gradient. With a
    cache in the forward's output (use_cache, the config's default) the cached key keeps its k_norm's graph alive
    while that output lives: the zero-centred RMSNorm's fp32 copies, 8·T·dI + 4·T + 4·dI."""
    _, config = written("minimax_m3_vl_text", **dict(MINIMAX, num_hidden_layers=2, mlp_layer_types=["dense"] * 2,
                                                    layer_types=["full_attention", "minimax_m3_sparse"]))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="eager")
    indexer, ids = model.model.layers[1].self_attn.indexer, torch.randint(3, 100, (2, 16))
    assert _indexer_only_saved(model.train(), indexer, ids, use_cache=False) == 0
    assert all(p.grad is None for p in indexer.parameters())
    T, dI = ids.numel(), config.index_head_dim
    assert _indexer_only_saved(model, indexer, ids, use_cache=True) == 8 * T * dI + 4 * T + 4 * dI
    spec = spec_from_hf_config(config.to_dict()).spec
    assert spec.layer_kind(1) == LayerKind("dsa", "dense") and dsa.saved(spec, None, None) == 0


# MiniMax-M3 as validation/architectures measures it: a dense layer, two indexed MoE layers, a full-attention MoE one
M3_SAVED = dict(MINIMAX, sparse_attention_config={"sparse_attention_freq": [0, 1, 1, 0]}, moe_layer_freq=[0, 1, 1, 1])


def _m3_traced(attention: str, b: int, s: int):
    cfg, config = written("minimax_m3_vl_text", **M3_SAVED)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16,
                                                          attn_implementation=attention)
    model.config.use_cache = False
    by_module = saved_bytes_by_module(model.train(), torch.randint(3, 100, (b, s)))
    spec = spec_from_hf_config(cfg).spec
    w = Workload(seq_len=s, micro_batch=b, attention=attention, mixer_kernels="torch")
    return by_module, spec, w, act.dims(spec, w)


def _zero_centred_norm(rows: int, width: int) -> int:
    """MiniMaxM3VLRMSNorm on rows of width: fp32 input, fp32 normalised x, fp32 rsqrt per row, the fp32 (1 + w)."""
    return 8 * rows * width + 4 * rows + 4 * width


def test_minimax_clamped_swiglu_keeps_seven_f_wide_tensors_per_token():
    """MiniMaxM3VLDenseMLP.forward and MiniMaxM3VLExperts._apply_gate (GPT-OSS's clamped SwiGLU, chunked): the gate
    and up clamps keep their inputs, views of the gate_up output (2f); the clamped gate, sigmoid(α·gate), glu, up + 1
    and the product (down_proj's input), f each: 7·e·T·f, beside gate_up_proj's input e·T·h. The routed experts
    keep the same per routed pair (S = T·k) besides the gathered input and expert output e·S·2h, int64 indices 24·S,
    fp32 routing weights 4·S and int32 offsets 4·E; the sigmoid router its fp32 scores 4·T·E, int64 top-k 8·T·k and
    the renormalisation 4·T·k + 4·T."""
    b, s = 2, 16
    by_module, spec, w, d = _m3_traced("eager", b, s)
    e, T, h, k, E = 2, b * s, spec.hidden_size, spec.num_experts_per_tok, spec.num_experts
    f, f_shared, f_expert = spec.intermediate_size, spec.shared_expert_intermediate_size, spec.expert_intermediate_size
    S = T * k
    dense = layer_parts(by_module, 0, {"mlp": ("mlp",)})
    assert dense["mlp"] == e * T * h + 7 * e * T * f
    moe = layer_parts(by_module, 3, {"shared": ("mlp.shared_experts",), "experts": ("mlp.experts",),
                                     "router": ("mlp.gate",)})
    assert moe["shared"] == e * T * h + 7 * e * T * f_shared
    assert moe["experts"] == e * S * (7 * f_expert + 2 * h) + 24 * S + 4 * S + 4 * E
    assert moe["router"] == 4 * T * E + 8 * T * k + 4 * T * k + 4 * T
    assert act.mlp_saved(d, spec, f) == 7 * e * T * f
    assert act.shared_expert_saved(d, spec) == 7 * e * T * f_shared
    assert act.moe_saved(d, spec, 1) == moe["experts"] + moe["router"]


def test_minimax_sdpa_keeps_a_copy_of_its_output_and_the_indexed_layers_their_per_head_mask():
    """Under SDPA (layers 3 and 1 of the trace: full attention, indexed): apply_rotary_pos_emb's torch.cat leaves q
    contiguous in (b, a, s, d); SDPA's flash kernel writes its output in q's layout, so transformers'
    transpose(1, 2).contiguous() hands o_proj a copy, e·T·qd beside the output SDPA keeps. An indexed layer's
    build_block_mask gives SDPA an additive mask per query head, e·b·a·s·s, which it keeps, and with a mask
    transformers repeats k and v to every head, e·T·2·(qd − kvd). On a GPU that masked call runs the
    memory-efficient kernel, which writes (b, s, a, d): the engine prices no copy there (the CPU trace has it)."""
    b, s = 2, 16
    by_module, spec, w, d = _m3_traced("sdpa", b, s)
    e, T, h, a, kv, hd = 2, b * s, spec.hidden_size, spec.num_attention_heads, spec.kv_heads, spec.head_size
    qd, kvd = a * hd, kv * hd
    flash = (_zero_centred_norm(T * a, hd) + _zero_centred_norm(T * kv, hd) + e * T * (qd + 2 * kvd)
             + e * T * qd + 4 * a * T)  # q/k norms; q, k, v; SDPA's output and fp32 logsumexp
    copy, mask, repeated = e * T * qd, e * b * a * s * s, e * T * 2 * (qd - kvd)
    parts = {i: layer_parts(by_module, i, {"attention": ("self_attn",)})["attention"] for i in (1, 3)}
    assert parts[3] == e * T * h + flash + copy  # + q_proj's input
    assert parts[1] == e * T * h + flash + copy + mask + repeated
    assert act.exact_layer(spec, w, d, spec.layer_kind(3)).attention == flash + copy
    assert act.exact_layer(spec, w, d, spec.layer_kind(1)).attention == flash + mask + repeated
    eager = Workload(seq_len=s, micro_batch=b, attention="eager", mixer_kernels="torch")
    assert dsa.saved(spec, act.dims(spec, eager), eager) == 0


@pytest.mark.parametrize("tie", [False, True])
def test_minimax_m3_vl_text_config_without_its_model_type_is_the_text_model(tie):
    """Released MiniMax-M3 configs (nvidia/MiniMax-M3-NVFP4) nest a text_config that names no model_type;
    MiniMaxM3VLConfig reads it as MiniMaxM3VLTextConfig, and its __post_init__ ties the head when the text config
    says so, as the outer *ForConditionalGeneration's tied keys then do."""
    _quiet()
    text = dict(MINIMAX, tie_word_embeddings=tie)
    outer = transformers.AutoConfig.for_model("minimax_m3_vl", text_config=text).to_dict()
    outer["text_config"].pop("model_type")
    outer.pop("tie_word_embeddings", None)
    spec = spec_from_hf_config(outer).spec
    assert spec.model_type == "minimax_m3_vl_text" and spec.tie_word_embeddings is tie
    cfg, config = written("minimax_m3_vl_text", **text)
    assert engine_counts(cfg) == real_counts(config)
    assert spec.model_copy(update={"name": "x", "architecture": None}) == \
        spec_from_hf_config(cfg).spec.model_copy(update={"name": "x", "architecture": None})
