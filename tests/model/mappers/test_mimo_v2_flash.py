"""MiMo-V2-Flash (transformers 5.23 models/mimo_v2_flash/, calculator/model/mappers/variants_more.py
map_mimo_v2_flash) read as its spec: q and k heads of head_dim, v heads of v_head_dim, full-attention layers (layer 0
and every sixth) with num_key_value_heads and no sinks, sliding layers with twice the key/value heads and one sink
per head (ModelSpec.swa_num_key_value_heads / swa_attention_sinks, each layer type its own kind:
ModelSpec.attention_of); one dense layer, then 256 experts behind DeepSeek-V3's router. The parameter count and the
generate() cache are written out by hand and held to the engine and to the real model; one layer of each kind's
saved activations to a bf16 CPU trace (validation/architectures)."""
from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.memory import inference as inf  # noqa: E402
from calculator.model.config_read import ConfigError  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from tests.model.mappers.counts import real_counts  # noqa: E402

H, A, D, DV, KV, V, F, FE, E, L = 4096, 64, 192, 128, 4, 152576, 16384, 2048, 256, 48
FULL = (0, 5, 11, 17, 23, 29, 35, 41, 47)  # configuration_mimo_v2_flash.py: i == 0 or (i + 1) % 6 == 0


def _default() -> tuple[dict, object]:
    logging.getLogger("transformers").setLevel(logging.ERROR)
    config = transformers.AutoConfig.for_model("mimo_v2_flash")
    return config.to_dict(), config


def test_the_default_config_reads_as_mimo_v2_flash():
    m = spec_from_hf_config(_default()[0]).spec
    assert (m.head_size, m.v_head_size, m.num_key_value_heads, m.swa_num_key_value_heads) == (D, DV, KV, 2 * KV)
    assert (m.attention_sinks, m.swa_attention_sinks, m.qkv_bias, m.o_bias) == (False, True, False, False)
    assert m.sliding_window == 129 and m.rotary_dim == int(D * 0.334) == 64
    assert tuple(i for i in range(L) if not m.layer_is_sliding(i)) == FULL
    assert (m.num_experts, m.num_experts_per_tok, m.moe_intermediate_size, m.dense_layer_indices) == (E, 8, FE, (0,))
    kinds = {i: m.layer_kind(i) for i in range(L)}
    assert {(k.mixer, k.ffn, k.slot) for k in kinds.values()} == {("attention", "dense", 0), ("attention", "moe", 1),
                                                                  ("attention", "moe", 0)}
    full, sliding = m.attention_of(kinds[5]), m.attention_of(kinds[1])
    assert (full.kv_heads, full.attention_sinks) == (KV, False)
    assert (sliding.kv_heads, sliding.attention_sinks) == (2 * KV, True)


def test_parameters_written_out_equal_the_engine_and_the_real_model():
    """q, k, v, o per layer type (v and o at v_head_dim; sinks (heads,) on sliding layers), two norms per layer, the
    dense layer's SwiGLU, the experts' fused gate_up / down and router weight, embedding, LM head, final norm:
    308,778,768,832, the card's 309B total (the MTP layers the checkpoint carries are not built)."""
    full = H * A * D + H * KV * D + H * KV * DV + A * DV * H
    sliding = H * A * D + H * 2 * KV * D + H * 2 * KV * DV + A * DV * H + A
    moe = E * 3 * H * FE + E * H
    total = 9 * full + 39 * sliding + L * 2 * H + 3 * H * F + 47 * moe + 2 * V * H + H
    assert total == 308_778_768_832
    written, config = _default()
    assert count_parameters(spec_from_hf_config(written).spec).total == total == real_counts(config)[0]


def test_the_generate_cache_keeps_every_token_on_full_layers_and_w_minus_1_on_sliding_ones():
    """DynamicCache (cache_utils.py): DynamicLayer on the 9 full layers, DynamicSlidingWindowLayer keeping
    sliding_window − 1 = 128 tokens on the 39 sliding ones; K of head_dim and V of v_head_dim per KV head, bf16."""
    m = spec_from_hf_config(_default()[0]).spec
    b, s = 2, 4096
    hand = b * 2 * (9 * s * KV * (D + DV) + 39 * 128 * 2 * KV * (D + DV))
    assert inf.kv_cache_bytes(m, range(L), b, s, m.kv_heads, "bf16") == hand
    assert inf.kv_cache_bytes(m, range(L), b, 100, m.kv_heads, "bf16") == b * 2 * 100 * (9 * KV + 39 * 2 * KV) * 320


def test_the_hub_spelling_maps_the_same_and_a_layout_transformers_does_not_build_is_refused():
    """The checkpoint's config.json keys: sliding_window_size 128 (transformers: sliding_window = 128 + 1),
    swa_num_key_value_heads 8 = 2 × 4 as MiMoV2FlashAttention builds; another count is refused."""
    hub = dict(model_type="mimo_v2_flash", hidden_size=H, num_hidden_layers=L, num_attention_heads=A,
               num_key_value_heads=KV, head_dim=D, v_head_dim=DV, swa_num_key_value_heads=8, swa_head_dim=D,
               swa_v_head_dim=DV, swa_num_attention_heads=A, sliding_window=128, sliding_window_size=128,
               intermediate_size=F, moe_intermediate_size=FE, n_routed_experts=E, num_experts_per_tok=8,
               vocab_size=V, partial_rotary_factor=0.334, tie_word_embeddings=False)
    m = spec_from_hf_config(hub).spec
    assert m.sliding_window == 129 and count_parameters(m).total == 308_778_768_832
    with pytest.raises(ConfigError, match="swa_num_key_value_heads: transformers builds 8"):
        spec_from_hf_config({**hub, "swa_num_key_value_heads": 16})


def test_one_layer_of_each_kind_saves_what_the_real_layer_saves():
    """validation/architectures at the tiny sizes of test_variants.SIZES (6 layers, window 8), eager (the model
    declares no SDPA): the full MoE layer (5) exactly; layers 0 and 1 also first-save their layer type's RoPE cos /
    sin tables (2·s·rotary_dim·e = 512 B), counted once per model outside the layers."""
    from validation.architectures import measure, sources
    src = sources.source("mimo_v2_flash")
    spec, _ = measure.spec_of(src)
    rows = measure.activations(src, spec, "eager")
    assert rows["attention:full+moe"]["engine"] == rows["attention:full+moe"]["reference"]
    for kind in ("attention:full+dense", "attention:sliding+moe"):
        assert rows[kind]["reference"] - rows[kind]["engine"] == 2 * measure.S * spec.rotary_dim * 2
    assert measure.cache(src, spec)["exact"]


def test_vllm_gives_each_layer_type_its_page_and_the_sliding_layers_their_window():
    """vLLM (model_executor/models/mimo_v2_flash.py): full layers 4 KV heads, sliding 8, each page block ·
    kv · (192 + 128) · 2 B (kv_cache_interface.py): 40,960 and 81,920 B at TP1, so the full layers' block doubles to
    32 tokens (unify_kv_cache_spec_page_size); 9 full and 39 sliding layers in groups of 9 (1 + 5, the last padded),
    a block 9 · 81,920 B; the sliding window is sliding_window_size = 128."""
    from calculator.engines import vllm_kv
    m = spec_from_hf_config(_default()[0]).spec
    groups, token = vllm_kv.layer_type_groups(m, range(L), 1, 2, 16)
    assert token == 9 * KV * 320 * 2 + 39 * 2 * KV * 320 * 2
    assert (groups.page_bytes, groups.group_size, groups.full_groups, groups.sliding_groups, groups.window,
            groups.full_block, groups.sliding_block) == (81_920, 9, 1, 5, 128, 32, 16)
    assert groups.bytes_per_block == 737_280
    assert groups.blocks_per_request(4096, 16, 2048) == 4096 // 32 + 5 * (-(-(127 + 2048) // 16) + 1)


def _estimate(engine: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_default()[0]))
    return subprocess.run([sys.executable, "-m", "calculator", "estimate", "--model", str(path), "--mode", "infer",
                           "--engine", engine, "--gpu", "h200", "--tp", "8"], capture_output=True, text=True,
                          timeout=300)


def test_vllm_and_sglang_start_it(tmp_path):
    """SGLang: a hybrid SWA pool, each layer type its KV heads (calculator/engines/sglang_mimo.py)."""
    assert _estimate("vllm", tmp_path).returncode == 0
    r = _estimate("sglang", tmp_path)
    assert r.returncode == 0 and "sglang 0.5.23" in r.stdout and "starts" in r.stdout
