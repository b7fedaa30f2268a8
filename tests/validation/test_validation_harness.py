"""Tests of the measurement harness itself (validation/): the meta-device trace agrees with real CPU tensors to
the byte, model-state bytes follow numel x dtype size, the emulated FlashAttention-2 is numerically right, the
output is deterministic, and the committed golden files are well formed and up to date."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from validation.trace import accounting as trace  # noqa: E402
from validation.trace.configs import EXPECTED_PARAMETERS, MODELS, TINY_LLAMA  # noqa: E402
from validation.trace.make_golden import MATRIX, MEASURED_KEYS, Case, dumps, owns, run_case  # noqa: E402
from validation.trace.emulation import FlashAttention2Emu  # noqa: E402
from validation.trace.models import build_model, count_parameters  # noqa: E402
from validation.trace.optimizer import RECIPES  # noqa: E402
from validation.trace.tracker import ACTIVE, MemoryTracker, storage_bytes  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

SMALL_LLAMA = dict(TINY_LLAMA, hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                   num_hidden_layers=2, vocab_size=256)
SMALL_GPT2 = dict(MODELS["gpt2"], n_embd=64, n_head=4, n_layer=2, n_positions=128, vocab_size=256)
SMALL_MIXTRAL = dict(MODELS["mixtral-8x7b"], hidden_size=64, intermediate_size=96, num_attention_heads=4,
                     num_key_value_heads=2, num_hidden_layers=2, vocab_size=256, num_local_experts=4)
SMALL_GEMMA2 = dict(MODELS["gemma-2-9b"], hidden_size=64, intermediate_size=128, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=32, num_hidden_layers=2, vocab_size=256, sliding_window=16,
                    query_pre_attn_scalar=32)


def both(fn, cfg, **kw):
    return fn(cfg, device="cpu", **kw), fn(cfg, device="meta", **kw)


# ---------------------------------------------------------------------------------------------------------------
# meta == real CPU tensors, to the byte
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attention,recompute", [
    ("flash", "none"), ("eager", "none"), ("sdpa", "none"), ("flash", "selective"), ("eager", "full"),
])
def test_meta_matches_cpu_llama_train(attention, recompute):
    cpu, meta = both(trace.measure_train, SMALL_LLAMA, micro_batch=2, seq_len=32, recipe="mixed",
                     attention=attention, recompute=recompute)
    assert cpu.measured == meta.measured
    assert cpu.details["activations_per_layer"] == meta.details["activations_per_layer"]
    assert cpu.details["live_after_step"] == meta.details["live_after_step"] == 0


@pytest.mark.parametrize("cfg", [SMALL_MIXTRAL, SMALL_GEMMA2], ids=["mixtral-moe", "gemma2"])
def test_meta_matches_cpu_other_architectures(cfg):
    cpu, meta = both(trace.measure_train, cfg, micro_batch=2, seq_len=32, attention="eager")
    assert cpu.measured == meta.measured


def test_meta_matches_cpu_gpt2_fp32_with_dropout():
    cpu, meta = both(trace.measure_train, SMALL_GPT2, micro_batch=2, seq_len=32, recipe="fp32", attention="eager")
    assert cpu.measured == meta.measured


def test_gpt2_bf16_layernorm_stats_are_the_only_cpu_difference():
    # CPU's LayerNorm keeps mean/rstd in the input dtype for bf16; CUDA (and the meta kernels) keep them in fp32.
    b, s = 2, 32
    cpu, meta = both(trace.measure_train, SMALL_GPT2, micro_batch=b, seq_len=s, recipe="mixed", attention="eager")
    n_layernorms = 2 * SMALL_GPT2["n_layer"] + 1
    assert meta.measured["activations"] - cpu.measured["activations"] == n_layernorms * 2 * b * s * (4 - 2)


@pytest.mark.parametrize("attention", ["flash", "eager", "sdpa"])
def test_meta_matches_cpu_llama_infer(attention):
    cpu, meta = both(trace.measure_infer, SMALL_LLAMA, micro_batch=2, prompt_len=32, gen_tokens=3,
                     attention=attention)
    assert cpu.measured == meta.measured


def test_sliding_window_cache_differs_only_by_the_window_scalar_copy():
    # DynamicSlidingWindowLayer keeps an int64 window tensor created on CPU and moved to the model's device:
    # a no-op on CPU, an 8-byte copy per sliding layer on meta (and on CUDA).
    cfg = dict(SMALL_LLAMA, model_type="mistral", sliding_window=16)
    cpu, meta = both(trace.measure_infer, cfg, micro_batch=2, prompt_len=32, gen_tokens=2, attention="flash")
    assert cpu.measured["kv_cache"] == meta.measured["kv_cache"]
    assert meta.details["live_end"] - cpu.details["live_end"] == 8 * cfg["num_hidden_layers"]


# ---------------------------------------------------------------------------------------------------------------
# Model states: numel x dtype size
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("recipe,optimizer", [("mixed", "adamw"), ("fp32", "adamw"), ("pure-bf16", "adamw"),
                                              ("mixed", "sgd-momentum"), ("fp32", "sgd-momentum")])
def test_model_state_bytes(recipe, optimizer):
    r = trace.measure_train(SMALL_LLAMA, micro_batch=1, seq_len=8, recipe=recipe, optimizer=optimizer,
                            attention="eager", device="meta")
    m = r.measured
    model = build_model(SMALL_LLAMA, RECIPES[recipe][0], "eager", device="meta")
    P = sum(p.numel() for p in model.parameters())
    n_tensors = len(list(model.parameters()))
    e = {"fp32": 4, "bf16": 2}[RECIPES[recipe][0]]
    assert m["parameters"] == P
    assert m["weights"] == m["gradients"] == e * P
    assert m["master_weights"] == (4 * P if recipe == "mixed" else 0)
    state_e = 4 if recipe in ("mixed", "fp32") else 2
    if optimizer == "adamw":
        assert m["optimizer_states"] == 2 * state_e * P + 4 * n_tensors  # exp_avg, exp_avg_sq, fp32 step scalars
    else:
        assert m["optimizer_states"] == state_e * P  # momentum buffer
    persistent = m["weights"] + m["master_weights"] + m["gradients"] + m["optimizer_states"] + r.details["buffers"]
    assert m["peak_allocated"] == persistent + max(m["peak_fwd_bwd"], m["peak_step"])


def test_tied_embeddings_counted_once():
    model = build_model(SMALL_GPT2, "bf16", "eager", device="meta")
    assert model.lm_head.weight is model.transformer.wte.weight
    assert count_parameters(model) == sum(p.numel() for p in model.parameters())
    assert storage_bytes(model.parameters()) == 2 * count_parameters(model)


def test_published_parameter_counts_of_two_full_size_configs():
    for name in ("llama-3.1-8b", "gemma-2-9b"):
        model = build_model(MODELS[name], "bf16", "flash", device="meta")
        assert count_parameters(model) == EXPECTED_PARAMETERS[name]


def test_step_transients():
    # mixed + SGD: the only step transient is the fp32 copy of every gradient (4 B/param, all at once);
    # foreach AdamW additionally holds the sqrt of every exp_avg_sq at once.
    kw = dict(micro_batch=1, seq_len=8, attention="eager", device="meta")
    sgd = trace.measure_train(SMALL_LLAMA, recipe="mixed", optimizer="sgd-momentum", **kw).measured
    P = sgd["parameters"]
    assert sgd["peak_step"] == 4 * P
    foreach = trace.measure_train(SMALL_LLAMA, recipe="mixed", foreach=True, **kw).measured
    assert foreach["peak_step"] == 8 * P
    fp32_sgd = trace.measure_train(SMALL_LLAMA, recipe="fp32", optimizer="sgd-momentum", **kw).measured
    assert fp32_sgd["peak_step"] == 0


# ---------------------------------------------------------------------------------------------------------------
# Activation formulas the engine relies on (tiny Llama, exact)
# ---------------------------------------------------------------------------------------------------------------


def test_llama_flash_and_eager_per_layer_formula():
    b, s = 2, 32
    T = b * s
    h, f, a, kvh = 64, 160, 4, 2
    d = h // a
    kvd = kvh * d
    flash = trace.measure_train(SMALL_LLAMA, micro_batch=b, seq_len=s, attention="flash", device="meta")
    eager = trace.measure_train(SMALL_LLAMA, micro_batch=b, seq_len=s, attention="eager", device="meta")
    fa_layer = T * (20 * h + 4 * kvd + 8 * f + 4 * a + 8) + 16  # +16: FA2's int64[2] rng_state
    assert set(flash.details["activations_per_layer"]) == {fa_layer}
    eager_layer = fa_layer - (4 * T * h + 4 * T * kvd + 4 * a * T + 16) + 8 * T * h + 6 * a * b * s * s
    assert set(eager.details["activations_per_layer"]) == {eager_layer}
    V = SMALL_LLAMA["vocab_size"]
    assert flash.measured["loss_head"] == 4 * T * V + 8 * T + 4  # fp32 log_softmax, int64 targets, total_weight
    full = trace.measure_train(SMALL_LLAMA, micro_batch=b, seq_len=s, recompute="full", device="meta")
    assert full.details["activations_per_layer"][:-1] == [2 * T * h] * (SMALL_LLAMA["num_hidden_layers"] - 1)


def test_kv_cache_bytes():
    b, p, g = 2, 32, 3
    r = trace.measure_infer(SMALL_LLAMA, micro_batch=b, prompt_len=p, gen_tokens=g, device="meta")
    kvd = SMALL_LLAMA["num_key_value_heads"] * SMALL_LLAMA["hidden_size"] // SMALL_LLAMA["num_attention_heads"]
    assert r.measured["kv_cache"] == SMALL_LLAMA["num_hidden_layers"] * 2 * b * (p + g) * kvd * 2
    assert r.details["cache_seq_length"] == p + g


# ---------------------------------------------------------------------------------------------------------------
# The emulated FlashAttention-2 kernel and the tracker
# ---------------------------------------------------------------------------------------------------------------


def test_flash_emulation_matches_reference_attention():
    torch.manual_seed(0)
    b, s, h, hk, d = 2, 16, 4, 2, 16
    q = torch.randn(b, s, h, d, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, s, hk, d, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, s, hk, d, dtype=torch.bfloat16, requires_grad=True)
    out = FlashAttention2Emu.apply(q, k, v, d ** -0.5, True, None, 0.0, 0.0)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float().transpose(1, 2), k.float().transpose(1, 2), v.float().transpose(1, 2), is_causal=True,
        enable_gqa=True).transpose(1, 2)
    assert out.shape == (b, s, h, d) and out.is_contiguous()
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    g = torch.randn_like(ref)
    gq, gk, gv = torch.autograd.grad(out.float(), (q, k, v), g)
    rq, rk, rv = torch.autograd.grad(ref, (q, k, v), g)
    for x, y in ((gq, rq), (gk, rk), (gv, rv)):
        torch.testing.assert_close(x.float(), y.float(), atol=5e-2, rtol=5e-2)


def test_flash_emulation_saves_what_fa2_saves():
    b, s, h, hk, d = 2, 128, 8, 2, 64
    tracker = MemoryTracker("meta")
    q = torch.empty(b, s, h, d, dtype=torch.bfloat16, device="meta", requires_grad=True)
    k = torch.empty(b, s, hk, d, dtype=torch.bfloat16, device="meta", requires_grad=True)
    v = torch.empty(b, s, hk, d, dtype=torch.bfloat16, device="meta", requires_grad=True)
    ACTIVE.append(tracker)
    try:
        with tracker, torch.autograd.graph.saved_tensors_hooks(tracker.pack_hook, tracker.unpack_hook):
            out = FlashAttention2Emu.apply(q, k, v, 0.125, True, None, 0.0, 0.0)
            # out (b,s,h,d) bf16 + lse (b,h,s) fp32 + rng_state int64[2]; the math path is not recorded
            assert tracker.current == 2 * b * s * h * d + 4 * b * h * s + 16
            saved = sum(nb for nb, _, _ in tracker.saved.values())
            assert saved == 2 * b * s * (h + 2 * hk) * d + 2 * b * s * h * d + 4 * b * h * s + 16
            out.backward(torch.empty_like(out))
    finally:
        ACTIVE.pop()
        tracker.detach_all()


def test_tracker_counts_new_storages_only():
    tracker = MemoryTracker("meta")
    base = torch.empty(1000, device="meta")  # pre-existing: never counted
    with tracker:
        a = base * 2  # new: 4000 B
        view = a.view(10, 100)  # view: nothing new
        base.add_(1)  # in-place on a pre-existing tensor: nothing new
        b = torch.empty(500, dtype=torch.float16, device="meta")  # 1000 B
        assert tracker.current == 5000
        del a
        assert tracker.current == 5000  # the view keeps the storage alive
        del view
        assert tracker.current == 1000
        del b
        assert tracker.current == 0 and tracker.peak == 5000
    tracker.detach_all()


# ---------------------------------------------------------------------------------------------------------------
# Determinism and the golden files
# ---------------------------------------------------------------------------------------------------------------


def test_deterministic_output():
    case = Case("tiny-llama", "train", 1, 64, "flash", "full")
    assert dumps(run_case(case)) == dumps(run_case(case))


@pytest.mark.parametrize("case_id", [
    "tiny-llama__train__mixed__b2_s256__none__flash",
    "tiny-llama__infer__bf16__b2_p128_g16__none__eager",
    "gpt2__train__mixed__b4_s1024__none__flash",
])
def test_committed_golden_file_is_up_to_date(case_id):
    case = next(c for c in MATRIX if c.id == case_id)
    assert (GOLDEN / f"{case_id}.json").read_text() == dumps(run_case(case))


def test_golden_files_well_formed():
    files = sorted(f for f in GOLDEN.glob("*.json") if owns(f.stem))  # not the LoRA / MLA matrices
    ids = {c.id for c in MATRIX}
    assert len(files) >= 60
    assert {f.stem for f in files} == ids
    archs = set()
    for f in files:
        doc = json.loads(f.read_text())
        assert doc["id"] == f.stem
        assert set(MEASURED_KEYS) <= set(doc["measured"])
        assert all(isinstance(v, int) and v >= 0 for v in doc["measured"].values())
        assert {"mode", "micro_batch", "seq_len", "gen_tokens", "recipe", "params_dtype", "grads_dtype",
                "master_weights_dtype", "optimizer", "optimizer_dtype", "optimizer_foreach", "recompute",
                "attention"} <= set(doc["run"])
        assert doc["environment"] == {"torch": "2.13.0", "transformers": "5.23.0", "device": "meta"}
        assert "model_type" in doc["model"]
        archs.add(doc["model"]["model_type"])
        m = doc["measured"]
        if doc["run"]["mode"] == "train":
            assert m["activations"] > 0 and m["peak_fwd_bwd"] >= m["activations"] and m["kv_cache"] == 0
        else:
            assert m["kv_cache"] > 0 and m["peak_prefill"] >= doc["details"]["kv_cache_after_prefill"]
    assert len(archs) >= 6
