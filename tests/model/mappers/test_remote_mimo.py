"""MiMo-7B (remote code `MiMoForCausalLM`, calculator/model/mappers/remote.py map_mimo) against the modules its
modeling_mimo.py builds: transformers' Qwen2 model plus num_nextn_predict_layers MiMoMTPLayers blocks that the
forward never calls. Their weights count and load; no gradient reaches them, so what a stack holds for them is its
NoGradRule (HF Trainer: weights only; DeepSpeed: its flat buffers cover them); vLLM and SGLang skip them at load."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calculator import Workload, estimate
from calculator.core.workload import Parallelism
from calculator.model.hf_config import SUPPORTED_MODEL_TYPES, spec_from_hf_config
from calculator.model.parameters import count_parameters
from validation.architectures.causal_lm import mimo_causal_lm, mimo_qwen2_fields

CONFIG = Path(__file__).resolve().parents[3] / "presets" / "models" / "mimo-7b-base.json"
MTP_BLOCK = 210_790_400  # one MiMoMTPLayers of MiMo-7B (h 4096, 32 / 8 heads of 128, ffn 11008)


def _config() -> dict:
    return json.loads(CONFIG.read_text())


def tiny_config() -> tuple[dict, object]:
    """(config.json, the transformers Qwen2Config MiMoModel runs) of a tiny MiMo with one MTP block, for the
    architecture table (validation/architectures/sources.py): its forward is Qwen2Model's."""
    from transformers import Qwen2Config
    written = dict(_config(), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, vocab_size=1000, max_position_embeddings=256)
    return written, Qwen2Config(**mimo_qwen2_fields(written))


def _remote_code_counts(cfg: dict) -> tuple[int, int]:
    """(parameters, tensors) of MiMoForCausalLM as modeling_mimo.py builds it (validation/architectures/
    causal_lm.py mimo_causal_lm: transformers' own Qwen2 classes, as the remote file imports them), on the meta
    device."""
    torch = pytest.importorskip("torch")
    with torch.device("meta"):
        params = list(mimo_causal_lm(cfg).parameters())
    return sum(p.numel() for p in params), len(params)


def test_mimo_is_a_supported_remote_code_type():
    assert "mimo" in SUPPORTED_MODEL_TYPES


def test_mimo_7b_counts_as_the_remote_code_builds_it():
    cfg = _config()
    counts = count_parameters(spec_from_hf_config(cfg).spec)
    assert (counts.total, counts.tensors) == _remote_code_counts(cfg)
    assert counts.total == 7_833_409_536


def test_without_mtp_blocks_it_is_qwen2():
    cfg = dict(_config(), num_nextn_predict_layers=0)
    spec = spec_from_hf_config(cfg).spec
    as_qwen2 = spec_from_hf_config(dict(cfg, model_type="qwen2")).spec
    assert spec.variant is None
    assert count_parameters(spec).total == count_parameters(as_qwen2).total == 7_833_409_536 - MTP_BLOCK


def test_two_mtp_blocks_count_twice():
    cfg = dict(_config(), num_nextn_predict_layers=2, num_hidden_layers=2, vocab_size=1000)
    assert (count_parameters(spec_from_hf_config(cfg).spec).total,) == _remote_code_counts(cfg)[:1]


def _terms(result) -> dict[str, int]:
    return {t.key: t.bytes for t in result.terms}


def test_hf_trainer_holds_the_idle_block_s_weights_and_no_gradient_or_adam_state():
    """One GPU, bf16 AdamW with fp32 master weights: torch.optim steps only the parameters with a .grad."""
    spec = spec_from_hf_config(_config()).spec
    w = Workload(seq_len=1024, gpu="h200", stack="hf-trainer")
    terms = {t.key: t for t in estimate(spec, w).terms}
    total = 7_833_409_536
    assert terms["weights"].bytes == 2 * total
    assert f"{2 * (total - MTP_BLOCK):,} B in all, born in backward" in terms["gradients"].substituted
    tensors = _remote_code_counts(_config())[1] - 16  # the block's 16 tensors get no `step` either
    assert terms["optimizer_states"].bytes == 2 * (total - MTP_BLOCK) * 4 + 4 * tensors


def test_deepspeed_s_flat_buffers_hold_the_idle_block_too():
    spec = spec_from_hf_config(_config()).spec
    w = Workload(seq_len=1024, gpu="h200", stack="deepspeed", parallel=Parallelism(dp=8, zero=2))
    qwen2 = spec_from_hf_config(dict(_config(), num_nextn_predict_layers=0)).spec
    mimo_t, qwen2_t = _terms(estimate(spec, w)), _terms(estimate(qwen2, w))
    assert mimo_t["gradients"] > qwen2_t["gradients"]
    assert mimo_t["optimizer_states"] - qwen2_t["optimizer_states"] == pytest.approx(8 * MTP_BLOCK / 8, abs=64)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_serving_engines_do_not_load_the_mtp_block(engine):
    spec = spec_from_hf_config(_config()).spec
    qwen2 = spec_from_hf_config(dict(_config(), num_nextn_predict_layers=0)).spec
    w = Workload(mode="infer", engine=engine, seq_len=4096, gpu="h100-sxm")
    assert estimate(spec, w).serving.weights_bytes == estimate(qwen2, w).serving.weights_bytes


def test_hf_generate_loads_the_mtp_block():
    spec = spec_from_hf_config(_config()).spec
    qwen2 = spec_from_hf_config(dict(_config(), num_nextn_predict_layers=0)).spec
    w = Workload(mode="infer", seq_len=4096, gpu="h100-sxm")
    assert _terms(estimate(spec, w))["weights"] - _terms(estimate(qwen2, w))["weights"] == 2 * MTP_BLOCK


def test_ddp_with_gradient_checkpointing_warns_that_the_idle_block_gets_no_gradient():
    spec = spec_from_hf_config(_config()).spec
    w = Workload(seq_len=1024, gpu="h200", stack="ddp", recompute="full", parallel=Parallelism(dp=2))
    assert any("find_unused_parameters" in n for n in estimate(spec, w).warnings)


def test_many_mtp_blocks_still_count():
    """Five blocks (80 idle tensors) and the field's bound of 64 (1,024) map, where the idle tensors' list was first
    capped at 64 entries and such a config raised pydantic's error instead of mapping."""
    for blocks in (5, 64):
        cfg = dict(_config(), num_nextn_predict_layers=blocks, num_hidden_layers=1, vocab_size=1000)
        assert count_parameters(spec_from_hf_config(cfg).spec).idle == blocks * MTP_BLOCK
