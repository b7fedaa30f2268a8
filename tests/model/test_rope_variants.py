"""GPT-J / CodeGen and Persimmon attention (calculator/model/rope_variants.py): the engine's layer equals the formula
of what their transformers 5.23 code keeps, and that formula equals a CPU trace of the real model (a tiny bf16
training forward, validation/trace/saved_by_module.py) less what only a CPU run keeps (LayerNorm's bf16 statistics,
validation/architectures/cpu_only.py), at several batch and sequence sizes."""
from __future__ import annotations

import pytest

from calculator import Workload
from calculator.memory import activations as act
from calculator.model import rope_variants
from calculator.model.hf_config import spec_from_hf_config

E = 2  # bf16
GPTJ = dict(model_type="gptj", n_embd=64, n_head=4, n_layer=2, vocab_size=101, rotary_dim=8, n_positions=128)
CODEGEN = dict(GPTJ, model_type="codegen", n_ctx=128)
PERSIMMON = dict(model_type="persimmon", hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                 intermediate_size=96, vocab_size=101, max_position_embeddings=128,
                 rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5})


def layer(cfg: dict, b: int, s: int, attention: str = "eager") -> tuple:
    m = spec_from_hf_config(cfg).spec
    w = Workload(seq_len=s, micro_batch=b, attention=attention, mixer_kernels="torch")
    d = act.dims(m, w)
    return m, d, act.exact_layer(m, w, d, m.layer_kind(1))


def test_the_mappers_read_the_rotated_width():
    for cfg, width in ((GPTJ, 8), (dict(GPTJ, rotary_dim=None), 16), (dict(GPTJ, rotary_dim=40), 16),
                       (PERSIMMON, 8), (dict(PERSIMMON, rope_parameters=None, partial_rotary_factor=0.25), 4)):
        assert spec_from_hf_config(cfg).spec.variant.rotary_dim == width
    assert not spec_from_hf_config(GPTJ).warnings and not spec_from_hf_config(PERSIMMON).warnings


@pytest.mark.parametrize("cfg,attention", [(GPTJ, "eager"), (GPTJ, "flash"), (CODEGEN, "eager")],
                         ids=["gptj-eager", "gptj-flash", "codegen-eager"])  # CodeGenAttention: eager only
@pytest.mark.parametrize("b,s", [(1, 12), (2, 16), (3, 8)])
def test_gptj_attention_is_its_formula(cfg, b, s, attention):
    """Eager: q and k as the fp32 copies `_attn` makes (4·T·qd each), v (e·T·qd), the fp32 softmax and its cast
    (4 + e per score), out_proj's input (e·T·qd); flash: q, k, v in the model dtype, the output, the logsumexp; both:
    four per-call sin / cos tables of s × rotary_dim (CodeGen's fp32). No shared tables."""
    m, d, saved = layer(cfg, b, s, attention)
    T, qd, a = b * s, 64, 4
    # CodeGen's v: a view of qkv_proj's output with one head per mp_num group (n_head = 4), kept whole by the matmul
    # that folds (1, a, s, d) at micro-batch 1
    v_view = E * T * 2 * qd if cfg is CODEGEN and b == 1 else 0
    tables = 4 * s * 8 * (4 if cfg is CODEGEN else E)
    assert tables == rope_variants.per_call_rope_saved(m.variant.per_call_rope, s, 8, E)
    core = 4 * 2 * T * qd + E * T * qd + (4 + E) * a * b * s * s if attention == "eager" else \
        E * T * 3 * qd + 4 * a * T
    assert saved.attention == core + E * T * qd + tables + v_view
    assert act.rotary_saved(m, d) == 0


@pytest.mark.parametrize("qk_layernorm", [True, False])
@pytest.mark.parametrize("b,s", [(1, 12), (2, 16), (3, 8)])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_persimmon_attention_is_its_formula(qk_layernorm, b, s, attention):
    """The fused output (e·T·3qd) is kept by the q/k LayerNorms' inputs (views of it) and whenever v reaches the core
    as a view (SDPA, or eager at micro-batch 1; eager at b > 1 copies v, e·T·qd); the norms' fp32 mean and rstd (8 B
    per head row of q and of k); the rotated q and k (torch.cat, e·T·qd each); out dense's input; eager: the fp32
    softmax and its cast; SDPA: the output laid out like q (BHSD) beside dense's copy, and the logsumexp."""
    m, d, saved = layer(dict(PERSIMMON, qk_layernorm=qk_layernorm), b, s, attention)
    T, qd, a = b * s, 64, 4
    eager = attention == "eager"
    v_copy = eager and b > 1
    fused = E * T * 3 * qd if qk_layernorm or not v_copy else 0
    norms = 8 * T * 2 * a if qk_layernorm else 0
    core = (E * T * qd if v_copy else 0) + (4 + E) * a * b * s * s if eager else E * T * qd + 4 * a * T
    assert saved.attention == fused + norms + E * T * 2 * qd + core + E * T * qd
    assert act.rotary_saved(m, d) == 2 * s * 8 * E  # the shared tables: head_dim · 0.5 wide


# ---- the same layers, traced ------------------------------------------------------------------------------------
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


from validation.architectures.cpu_only import cpu_only_terms  # noqa: E402
from validation.architectures.measure import decoder_layers, tiny_bf16  # noqa: E402
from validation.trace.saved_by_module import KeepStorages, saved_bytes_by_module  # noqa: E402


def traced_layer(cfg: dict, b: int, s: int, attention: str) -> int:
    """Layer 1's saved bytes in a CPU trace, less LayerNorm's CPU-only bf16 statistics."""
    config = transformers.AutoConfig.for_model(**cfg)
    model = tiny_bf16(config, attention)
    ids = torch.randint(3, 100, (b, s), generator=torch.Generator().manual_seed(0))
    prefix = decoder_layers(model, config.num_hidden_layers)
    with KeepStorages(), cpu_only_terms(model.get_submodule(prefix)) as cpu_only:
        by_module = saved_bytes_by_module(model, ids)
    measured = sum(v for k, v in by_module.items() if k == f"{prefix}.1" or k.startswith(f"{prefix}.1."))
    return measured - sum(cpu_only[1].values())


TRACED = [(GPTJ, 1, 12, "eager"), (GPTJ, 3, 8, "eager"), (dict(GPTJ, rotary_dim=4, n_inner=96), 2, 16, "eager"),
          (CODEGEN, 1, 12, "eager"), (CODEGEN, 3, 8, "eager"), (dict(CODEGEN, n_head=8), 1, 12, "eager"),
          (dict(CODEGEN, n_head=8), 2, 8, "eager"),
          (PERSIMMON, 1, 12, "eager"), (PERSIMMON, 3, 8, "eager"), (PERSIMMON, 3, 8, "sdpa"),
          (dict(PERSIMMON, qk_layernorm=False), 3, 8, "eager"), (dict(PERSIMMON, qk_layernorm=False), 2, 8, "sdpa")]


@pytest.mark.parametrize("cfg,b,s,attention", TRACED, ids=[f"{c['model_type']}-{i}" for i, (c, *_) in
                                                             enumerate(TRACED)])
def test_the_formula_is_what_the_real_layer_keeps(cfg, b, s, attention):
    config = {k: v for k, v in cfg.items() if k != "model_type"}
    written = transformers.AutoConfig.for_model(cfg["model_type"], **config).to_dict()
    engine = layer(written, b, s, attention)[2].total
    assert engine == traced_layer(dict(config, model_type=cfg["model_type"]), b, s, attention)
