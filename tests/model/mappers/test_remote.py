"""Remote-code model types (calculator/model/mappers/remote.py) against the real checkpoints: Qwen v1's published
config.json files map, and the engine's parameter count equals the real one — the modules QWenLMHeadModel's
modeling_qwen.py builds (transcribed below, built on the meta device: transformers 5.23 ships no `qwen` class) and
the published totals (Qwen-7B's README: 7,721,324,544; Qwen-72B's model.safetensors.index.json: total_size
144,575,840,256 bytes of bf16 = 72,287,920,128)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calculator.model.config_read import ConfigError
from calculator.model.hf_config import SUPPORTED_MODEL_TYPES, spec_from_hf_config
from calculator.model.parameters import count_parameters

CONFIGS = Path(__file__).resolve().parents[3] / "validation" / "published" / "qwen_v1"  # with their sources
# qwen-7b.json: Qwen/Qwen-7B config.json as mirrored in github.com/zhangningboo/Qwen-7B (commit abcb6d6d);
# qwen-72b.json: Qwen/Qwen-72B config.json as mirrored in github.com/mapengAdam/qianwen-72B (commit 46228648), whose
# model.safetensors.index.json (commit 3334bfe3) gives total_size 144,575,840,256 (bf16) and 8 tensors per block
PUBLISHED = {"qwen-7b": 7_721_324_544, "qwen-72b": 144_575_840_256 // 2}


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _remote_code_counts(cfg: dict) -> tuple[int, int]:
    """(parameters, tensors) of QWenLMHeadModel as modeling_qwen.py builds it (Qwen/Qwen-7B; alibaba/MNN
    transformers/llm/export/llm_models/Qwen-1_8B/modeling_qwen.py): QWenAttention.c_attn = Linear(h, 3·proj),
    c_proj = Linear(h, proj, bias=not no_bias); QWenMLP.w1 / w2 = Linear(h, ffn // 2, bias=not no_bias),
    c_proj = Linear(ffn // 2, h, bias=not no_bias); RMSNorm ln_1, ln_2 (weight only); QWenModel.wte, ln_f;
    lm_head = Linear(h, V, bias=False)."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    h, ffn, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    proj = cfg.get("kv_channels", 128) * cfg["num_attention_heads"]
    bias = not cfg.get("no_bias", True)
    with torch.device("meta"):
        def block():
            return nn.ModuleDict(dict(
                ln_1=nn.ParameterDict(dict(weight=nn.Parameter(torch.ones(h)))),
                attn=nn.ModuleDict(dict(c_attn=nn.Linear(h, 3 * proj), c_proj=nn.Linear(h, proj, bias=bias))),
                ln_2=nn.ParameterDict(dict(weight=nn.Parameter(torch.ones(h)))),
                mlp=nn.ModuleDict(dict(w1=nn.Linear(h, ffn // 2, bias=bias), w2=nn.Linear(h, ffn // 2, bias=bias),
                                       c_proj=nn.Linear(ffn // 2, h, bias=bias)))))
        model = nn.ModuleDict(dict(
            transformer=nn.ModuleDict(dict(wte=nn.Embedding(vocab, h),
                                           h=nn.ModuleList(block() for _ in range(cfg["num_hidden_layers"])),
                                           ln_f=nn.ParameterDict(dict(weight=nn.Parameter(torch.ones(h)))))),
            lm_head=nn.Linear(h, vocab, bias=False)))
    params = list(model.parameters())
    return sum(p.numel() for p in params), len(params)


def test_qwen_is_supported():
    assert "qwen" in SUPPORTED_MODEL_TYPES


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_qwen_configs_map_to_the_published_parameter_count(name):
    cfg = _config(name)
    counts = count_parameters(spec_from_hf_config(cfg).spec)
    assert counts.total == PUBLISHED[name]
    assert (counts.total, counts.tensors) == _remote_code_counts(cfg)


def test_qwen_7b_block_is_the_engines_layer_with_fused_biased_qkv_and_half_width_swiglu():
    mapped = spec_from_hf_config(_config("qwen-7b"))
    m = mapped.spec
    assert (m.hidden_size, m.num_hidden_layers, m.kv_heads, m.head_size, m.intermediate_size) == (4096, 32, 32, 128,
                                                                                                 11008)
    assert (m.fused_qkv, m.qkv_bias, m.o_bias, m.mlp_bias, m.gated_mlp, m.tie_word_embeddings) == (True, True, False,
                                                                                                   False, True, False)
    assert (m.vocab_size, m.max_position_embeddings, m.variant.legacy_kv_cache) == (151936, 8192, True)
    assert any("remote code" in w for w in mapped.warnings)


def test_no_bias_false_biases_c_proj_and_the_mlp():
    cfg = dict(_config("qwen-7b"), no_bias=False, num_hidden_layers=2, vocab_size=1000)
    counts = count_parameters(spec_from_hf_config(cfg).spec)
    assert (counts.total, counts.tensors) == _remote_code_counts(cfg)


def test_qwen_fields_left_out_take_qwenconfig_defaults():
    cfg = {k: v for k, v in _config("qwen-7b").items() if k not in ("kv_channels", "no_bias", "tie_word_embeddings",
                                                                   "rotary_pct")}
    assert count_parameters(spec_from_hf_config(cfg).spec).total == PUBLISHED["qwen-7b"]


@pytest.mark.parametrize("overrides,field", [
    ({"kv_channels": 64}, "kv_channels"),  # c_attn's output is split at hidden_size
    ({"rotary_pct": 0.0}, "rotary_pct"),
    ({"bf16": True, "fp16": True}, "fp16"),  # QWenLMHeadModel asserts at most one
])
def test_configs_the_remote_code_cannot_run_are_refused_naming_the_field(overrides, field):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        spec_from_hf_config(dict(_config("qwen-7b"), **overrides))


def test_qwen_72b_warns_of_its_dropout():
    warnings = spec_from_hf_config(_config("qwen-72b")).warnings
    assert any("emb_dropout_prob" in w for w in warnings)
