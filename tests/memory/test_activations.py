"""Saved activations per layer match what transformers really keeps (shared/reference/measured-facts.md, traced with
torch 2.13 + transformers 5.23), in units of s·b·h at b = 1, s = 4096, bf16."""
import pytest

from calculator import Workload
from calculator.memory import activations as act
from calculator.model.presets import load_model

# model -> (flash, eager) per-layer saved bytes / (s·b·h), measured
MEASURED = {
    "llama-3.1-8b": (49.0, 244.0),
    "mistral-7b-v0.1": (49.0, 244.0),
    "qwen3-8b": (52.6, 247.5),
    "gemma-2-9b": (74.9, 223.4),
    # flash: the seed's 49.4 plus o_proj's copy of the kernel's output, 2 (Phi3's apply_rotary_pos_emb torch.cat's
    # even at factor 1.0, and flash-attn 2.8.3 allocates its output like q: tests/golden phi-3-mini-4k *flash*)
    "phi-3-mini-4k": (51.4, 305.3),
    # flash: the seed's 34.0 plus o_proj's copy of the kernel's output, 2 (GPT-NeoX's torch.cat RoPE lays q out as
    # (b, heads, s, d) and the flash kernel allocates its output like q: tests/memory/test_rope_concat.py)
    "pythia-1.4b": (36.0, 226.0),
    "qwen3-30b-a3b": (95.0, 486.0),
}


def per_layer_sbh(model_id: str, attention: str, recompute: str = "none") -> float:
    m = load_model(model_id).spec
    w = Workload(seq_len=4096, micro_batch=1, attention=attention, recompute=recompute)
    d = act.dims(m, w)
    layer = act.exact_layer(m, w, d, m.layer_kind(m.num_hidden_layers - 1))
    return layer.total / (4096 * m.hidden_size)


@pytest.mark.parametrize("model_id", sorted(MEASURED))
@pytest.mark.parametrize("attention", ["flash", "eager"])
def test_layer_activations_match_measured_trace(model_id, attention):
    measured = MEASURED[model_id][0 if attention == "flash" else 1]
    assert per_layer_sbh(model_id, attention) == pytest.approx(measured, rel=0.002, abs=0.06)


def test_llama_flash_layer_is_the_traced_closed_form():
    # T·(20h + 4·kvd + 8f + 4a + 8) bytes in bf16 (measured-facts, exact in every traced run)
    m = load_model("llama-3.1-8b").spec
    w = Workload(seq_len=4096, micro_batch=2)
    d = act.dims(m, w)
    T, h, kvd, f, a = 8192, 4096, 1024, 14336, 32
    assert act.exact_layer(m, w, d, m.layer_kind(0)).total == T * (20 * h + 4 * kvd + 8 * f + 4 * a + 8)


def test_full_recompute_keeps_two_sbh_per_layer_in_bf16():
    m = load_model("llama-3.1-8b").spec
    d = act.dims(m, Workload(seq_len=4096, recompute="full"))
    assert act.full_recompute_layer(d) == 2 * 4096 * 4096


def test_textbook_formula_is_korthikanti():
    m = load_model("llama-3.1-8b").spec
    s, b, h, a = 4096, 1, 4096, 32
    assert act.textbook_layer(m, Workload(seq_len=s, recompute="none")) == s * b * h * 34 + 5 * a * s * s * b
    assert act.textbook_layer(m, Workload(seq_len=s, recompute="selective")) == 34 * s * b * h
    assert act.textbook_layer(m, Workload(seq_len=s, recompute="full")) == 2 * s * b * h


def test_fujii_formula():
    m = load_model("llama-3.1-8b").spec
    s, b, h, k, a, f = 4096, 1, 4096, 8, 32, 14336
    expected = s * b * (12 * h + 4 * h * k // a) + 8 * s * b * f
    assert act.fujii_layer(m, Workload(seq_len=s), moe=False) == expected


def test_tensor_parallel_splits_attention_and_mlp_but_not_norms_without_sp():
    m = load_model("llama-3.1-8b").spec
    one = act.exact_layer(m, Workload(), act.dims(m, Workload()), m.layer_kind(0))
    w_tp = Workload(parallel={"tp": 4})
    tp = act.exact_layer(m, w_tp, act.dims(m, w_tp), m.layer_kind(0))
    assert tp.mlp == one.mlp // 4
    assert tp.norms == one.norms
    w_sp = Workload(parallel={"tp": 4, "sequence_parallel": True})
    sp = act.exact_layer(m, w_sp, act.dims(m, w_sp), m.layer_kind(0))
    assert sp.norms < one.norms / 3.9


def test_eager_scores_grow_with_the_square_of_sequence():
    m = load_model("llama-3.1-8b").spec
    short = per_layer_sbh("llama-3.1-8b", "eager") - per_layer_sbh("llama-3.1-8b", "flash")
    w = Workload(seq_len=8192, attention="eager")
    long = act.exact_layer(m, w, act.dims(m, w), m.layer_kind(0)).total / (8192 * 4096) - 49.03
    assert long == pytest.approx(2 * short, rel=0.01)


def test_loss_head_keeps_fp32_log_softmax():
    m = load_model("llama-3.1-8b").spec
    d = act.dims(m, Workload(seq_len=4096))
    assert act.loss_saved(m, d, m.vocab_size) == 4 * 4096 * 128256  # 1.96 GiB, measured-facts


def test_op_level_selective_ac_keeps_every_other_matmul_and_the_sdpa_output():
    """torchtitan's policy on Llama-3.1-8B: mm outputs q, k, v, o, gate, up, down; kept q, v, gate, down (the
    1st, 3rd, 5th, 7th), the SDPA output and fp32 logsumexp, and the block input."""
    from calculator.memory.activations import dims, matmul_output_widths, op_selective_layer
    from calculator.model.presets import load_model
    from calculator.core.workload import Workload
    m = load_model("llama-3.1-8b").spec
    d = dims(m, Workload(micro_batch=2, seq_len=8192, recompute="op"))
    assert matmul_output_widths(m, d, moe=False) == [4096, 1024, 1024, 4096, 14336, 14336, 4096]
    T = 16384
    assert op_selective_layer(m, d) == 2 * T * (4096 + (4096 + 1024 + 14336 + 4096) + 4096) + 4 * 32 * T


def test_local_widths_follow_the_layout_and_the_activation_dtype():
    """act.dims caches the widths per (model, layout, activation dtype): each of those changes them."""
    m = load_model("llama-3.1-70b").spec
    base = act.dims(m, Workload(seq_len=4096, micro_batch=2))
    assert (base.b, base.s, base.s_kv, base.T, base.e, base.h_sp, base.qd, base.f) == (2, 4096, 4096, 8192, 2, 8192,
                                                                                       8192, 28672)
    tp8 = act.dims(m, Workload(seq_len=4096, micro_batch=2, parallel={"tp": 8}))
    assert (tp8.h_sp, tp8.qd, tp8.kvd, tp8.a, tp8.kv, tp8.f, tp8.tp) == (8192, 1024, 128, 8, 1, 3584, 8)
    sp = act.dims(m, Workload(seq_len=4096, micro_batch=2, parallel={"tp": 8, "sequence_parallel": True}))
    assert sp.h_sp == 1024 and sp[:4] == tp8[:4]
    cp = act.dims(m, Workload(seq_len=4096, parallel={"tp": 8, "cp": 2}))
    assert (cp.b, cp.s, cp.s_kv, cp.T) == (1, 2048, 4096, 2048)
    fp32 = act.dims(m, Workload(seq_len=4096, micro_batch=2, precision={"activations": "fp32"}))
    assert fp32.e == 4 and fp32._replace(e=2) == base
    assert type(base) is act.Dims and base._fields[4] == "e"
