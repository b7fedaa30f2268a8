"""Model implementations (calculator.impls) held to the real H200 runs (tests/golden_gpu/h200): what Liger kernels and
compiled decoder blocks keep for backward, and the working set around their loss head. The quantities compared do not
depend on how gradients are kept: the saved activations are the memory added by step 2's forward
(`step2.fwd.allocated − steady_before.allocated`: the gradients were freed by zero_grad(set_to_none=True)), the
forward peak its `max_allocated`, and the backward's first peak `step2.fwd_bwd.max_allocated` less the gradients
born by then."""
from __future__ import annotations

import json

import pytest

from calculator.cli.main import build_inputs, main
from calculator.cli.parser import build_parser
from calculator.stages.estimate import estimate
from calculator.impls import liger
from calculator.model.presets import load_model
from calculator.core.workload import Workload
from validation.gpu.goldens import load_cases

CASES = {r["id"]: r for r in load_cases()}
LIGER = [i for i in CASES if "impl-liger" in i and "gemma" not in i]  # Gemma-3's sliding layers: tests/memory/test_sdpa.py
COMPILE = [i for i in CASES if "impl-compile" in i]


def engine(record: dict, tmp_path, *extra: str):
    """The estimate of a measured run through the CLI's own parser, as a user would type it."""
    case = record["case"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps(record["config_full"]))
    argv = ["estimate", "--model", str(config), "--mode", "train", "--batch", str(case["batch"]), "--seq",
            str(case["seq"]), "--recipe", case.get("recipe", "pure-bf16"), "--impl", case.get("impl", "hf"),
            "--recompute", case.get("recompute", "none"), *extra]
    model, workload, _ = build_inputs(build_parser().parse_args(argv))
    return estimate(model, workload, with_fits=False).stages[0]


def measured(record: dict) -> dict:
    steady, s2 = record["steady_before"]["allocated"], record["step2"]
    return {"saved": s2["fwd"]["allocated"] - steady, "forward_peak": s2["fwd"]["max_allocated"] - steady,
            "backward_peak": s2["fwd_bwd"]["max_allocated"] - steady}


def saved(stage) -> int:
    return sum(t.bytes for t in stage.terms if t.component in ("activations", "logits"))


def term(stage, key: str) -> int:
    return next(t.bytes for t in stage.terms if t.key == key)


@pytest.mark.parametrize("case_id", LIGER + COMPILE)
def test_saved_activations_match_the_gpu(case_id, tmp_path):
    stage, meas = engine(CASES[case_id], tmp_path), measured(CASES[case_id])
    assert saved(stage) == pytest.approx(meas["saved"], rel=1e-4)


def test_liger_saves_a_third_less_than_transformers(tmp_path):
    """Llama-3.2-1B, b = 4, s = 4096: 20.56 GB with Liger against 37.16 GB for transformers' own modules."""
    record = CASES["train_llama-3.2-1b_b4_s4096_impl-liger"]
    with_liger = engine(record, tmp_path)
    plain = engine(CASES["train_llama-3.2-1b_b4_s4096"], tmp_path)
    assert saved(with_liger) == 20_560_543_744 and saved(plain) == pytest.approx(37_164_893_184, rel=1e-5)
    assert measured(record)["saved"] == 20_561_609_216


def test_liger_keeps_no_logits_but_the_lm_head_gradient(tmp_path):
    stage = engine(CASES["train_llama-3.1-8b_b1_s4096_impl-liger"], tmp_path)
    keys = {t.key for t in stage.terms}
    assert "logits.lm_head_grad" in keys
    assert term(stage, "logits.lm_head_grad") == 128_256 * 4096 * 2  # V × h in bf16
    assert term(stage, "logits.loss") == 2 * 4096 * 4096  # grad_input, e·T·h — no 4·T·V log-softmax


@pytest.mark.parametrize("case_id", LIGER)
def test_liger_working_set_at_the_head_matches_the_gpu(case_id, tmp_path):
    """The transient is the larger of FLCE's forward (final norm output + one chunk of logits) and the last layer's
    down-projection backward; the backward peak adds the gradients a set_to_none loop has born by then."""
    record = CASES[case_id]
    stage, meas = engine(record, tmp_path), measured(record)
    transient = term(stage, "transient.loss")
    if record["case"].get("recompute") == "full":
        return  # the backward peak is at the end, with every gradient: the stacks' part
    from calculator.memory.activations import dims
    from calculator.model.hf_config import spec_from_hf_config
    m = spec_from_hf_config(record["config_full"]).spec
    w = Workload(micro_batch=record["case"]["batch"], seq_len=record["case"]["seq"], impl="liger")
    head = liger.head(m, w, dims(m, w))
    assert head.transient == transient >= head.backward
    born = 2 * head.grads_at_backward  # bf16 gradients of the down projection and final norm
    assert head.backward + born == pytest.approx(meas["backward_peak"] - meas["saved"], rel=2e-4)


@pytest.mark.parametrize("case_id", LIGER)
def test_flce_forward_is_the_final_norm_output_and_one_chunk_of_logits(case_id, tmp_path):
    from calculator.memory.activations import dims
    from calculator.model.hf_config import spec_from_hf_config
    record = CASES[case_id]
    m = spec_from_hf_config(record["config_full"]).spec
    w = Workload(micro_batch=record["case"]["batch"], seq_len=record["case"]["seq"], impl="liger")
    d = dims(m, w)
    rows = liger.flce_chunk_rows(d.T, m.hidden_size, m.vocab_size)
    forward = d.e * d.T * m.hidden_size + d.e * rows * m.vocab_size + 21 * d.T
    meas = measured(record)
    assert forward == pytest.approx(meas["forward_peak"] - meas["saved"], rel=0.015)


def test_flce_chunks_bound_the_logits_to_about_t_by_h():
    assert liger.flce_chunk_rows(16_384, 2048, 128_256) == 512  # ⌈V/h⌉ = 63, ⌈16384/63⌉ = 261 -> 512
    assert liger.flce_chunk_rows(4096, 4096, 128_256) == 128
    assert liger.flce_chunk_rows(8, 4096, 32_000) == 1
    assert liger.flce_chunk_rows(100, 8192, 4096) == 100  # one chunk: never more rows than tokens


@pytest.mark.parametrize("case_id", COMPILE)
def test_compiled_blocks_keep_the_loss_head_of_transformers(case_id, tmp_path):
    """A compiled block saves what Liger's layer saves; the head is eager: its backward holds the bf16 logits, the
    fp32 gradient and its cast (8·T·V in bf16), as the GPU shows."""
    record = CASES[case_id]
    stage, meas = engine(record, tmp_path), measured(record)
    assert term(stage, "transient.loss") == pytest.approx(meas["backward_peak"] - meas["saved"], rel=1e-4)
    hf = engine(record, tmp_path, "--impl", "hf")
    assert term(hf, "logits.loss") == term(stage, "logits.loss")
    assert saved(stage) < 0.8 * saved(hf)


def test_an_unpatched_model_type_runs_as_transformers_wrote_it():
    gpt2 = load_model("gpt2").spec
    w = Workload(micro_batch=1, seq_len=1024, impl="liger")
    est, plain = estimate(gpt2, w), estimate(gpt2, w.model_copy(update={"impl": "hf"}))
    assert est.peak_allocated_bytes == plain.peak_allocated_bytes
    assert any("no patch for model_type 'gpt2'" in x for x in est.warnings)


def test_megatron_te_keeps_the_fp32_softmax_and_fused_layers():
    m = load_model("llama-3.1-8b").spec
    w = Workload(micro_batch=1, seq_len=4096, impl="megatron-te")
    stage = estimate(m, w).stages[0]
    T, h, V = 4096, 4096, 128_256
    assert term(stage, "logits.loss") == 4 * T * V
    assert term(stage, "transient.loss") == 2 * T * V
    assert term(stage, "logits.final_norm") == 2 * T * h + 4 * T + 2 * T * h
    liger_layers = estimate(m, w.model_copy(update={"impl": "liger"})).stages[0]
    assert term(stage, "activations.mlp") == term(liger_layers, "activations.mlp") == 32 * 3 * 2 * T * 14_336


def test_cli_takes_impl(capsys):
    code = main(["estimate", "--model", "llama-3.2-1b", "--mode", "train", "--batch", "4", "--seq", "4096",
                 "--impl", "liger", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    keys = {t["key"] for t in out["terms"]}
    assert {"logits.lm_head_grad", "logits.loss", "logits.final_norm"} <= keys


def test_cli_refuses_an_unknown_impl_in_one_line(capsys):
    code = main(["estimate", "--model", "llama-3.2-1b", "--impl", "unsloth"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--impl" in err and "liger" in err


def test_a_vocabulary_smaller_than_tp_prices_the_loss_head_without_dividing_by_zero():
    """benchmarks/fuzz.py: vocab_size 1 at TP 2 left no column on the rank (V/t = 0): hf's formula text and Liger's
    FLCE chunk size divided by it."""
    from calculator.model.spec import ModelSpec
    m = ModelSpec(name="tiny-vocab", hidden_size=1024, num_hidden_layers=2, num_attention_heads=16,
                  num_key_value_heads=8, intermediate_size=4096, vocab_size=1, family="llama")
    for impl in ("hf", "liger"):
        e = estimate(m, Workload(impl=impl, parallel={"tp": 2}), with_fits=False)
        assert e.total_bytes > 0


def test_a_hybrid_block_with_one_half_has_one_fused_norm():
    """Nemotron-H's blocks are a Mamba, MoE or attention block alone (mixer or feed-forward "none"), one norm each:
    the fused layer (Liger, compiled) replaces that one norm's transformers copies, not norms_per_layer of them
    (hypothesis found impl compile at 128 tokens pricing −698,368 B of norms per block)."""
    from calculator import Workload
    from calculator.impls.fused import fused_layer, fused_rmsnorm_saved
    from calculator.memory import activations as act
    from calculator.model.presets import load_model
    m = load_model("nemotron-3-nano-30b-a3b").spec
    w = Workload(seq_len=128, impl="compile")
    d = act.dims(m, w)
    for i in range(m.num_hidden_layers):
        kind = m.layer_kind(i)
        if "none" in (kind.mixer, kind.ffn):
            hf = act.exact_layer(m, w, d, kind)
            fused = fused_layer(m, w, d, kind)
            assert fused.norms == hf.norms - act.norm_saved(m, d.T, d.h_sp, d.e) + fused_rmsnorm_saved(d.T, d.h_sp, d.e)
            assert fused.norms > 0
