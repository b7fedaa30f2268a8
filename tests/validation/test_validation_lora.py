"""Tests of the LoRA measurement (validation/trace/lora.py, real peft): the meta-device trace agrees with real CPU tensors
to the byte, the trainable parameters are Σ r·(in + out), model-state bytes follow numel × dtype, PEFT's adapter
dtype and the first layer's input grad are what the run fields say, and the per-layer activation formulas of
validation/README.md ("LoRA") hold to the byte on every committed LoRA golden file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from validation.trace import lora  # noqa: E402
from validation.trace.configs import TINY_LLAMA  # noqa: E402
from validation.trace.make_golden import dumps  # noqa: E402
from validation.trace.make_lora_golden import MATRIX, MEASURED_KEYS, run_case  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
LORA_FILES = sorted(GOLDEN.glob("*__train__lora-*.json"))

SMALL_LLAMA = dict(TINY_LLAMA, hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                   num_hidden_layers=2, vocab_size=256)


def both(cfg, **kw):
    return (lora.measure_lora_train(cfg, device="cpu", **kw), lora.measure_lora_train(cfg, device="meta", **kw))


# ---------------------------------------------------------------------------------------------------------------
# meta == real CPU tensors, to the byte
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("targets,attention,recompute,recipe", [
    ("qv", "flash", "none", "mixed"),
    ("all-linear", "eager", "none", "mixed"),
    ("attention", "flash", "full", "pure-bf16"),
    ("all-linear", "flash", "none", "fp32-adapters"),
])
def test_meta_matches_cpu_tiny_llama_lora(targets, attention, recompute, recipe):
    cpu, meta = both(SMALL_LLAMA, targets=targets, rank=8, micro_batch=2, seq_len=32, attention=attention,
                     recompute=recompute, recipe=recipe)
    assert cpu.measured == meta.measured
    assert cpu.run == meta.run
    assert cpu.details["activations_per_layer"] == meta.details["activations_per_layer"]
    assert cpu.details["live_after_step"] == meta.details["live_after_step"] == 0


def test_meta_matches_cpu_with_input_grads():
    cpu, meta = both(SMALL_LLAMA, targets="qv", rank=4, micro_batch=2, seq_len=32, input_requires_grad=True)
    assert cpu.measured == meta.measured and cpu.run["input_requires_grad"] is True


# ---------------------------------------------------------------------------------------------------------------
# Parameters and model states
# ---------------------------------------------------------------------------------------------------------------


def llama_linears(cfg) -> dict[str, tuple[int, int]]:
    h, f = cfg["hidden_size"], cfg["intermediate_size"]
    d = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    qd, kvd = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    return {"q_proj": (h, qd), "k_proj": (h, kvd), "v_proj": (h, kvd), "o_proj": (qd, h),
            "gate_proj": (h, f), "up_proj": (h, f), "down_proj": (f, h)}


LLAMA_TARGETS = {"qv": ["q_proj", "v_proj"], "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
                 "all-linear": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}


@pytest.mark.parametrize("targets", ["qv", "attention", "all-linear"])
@pytest.mark.parametrize("rank", [4, 8])
def test_trainable_parameters_are_sum_of_r_in_plus_out(targets, rank):
    r = lora.measure_lora_train(SMALL_LLAMA, targets=targets, rank=rank, micro_batch=1, seq_len=8)
    lin = llama_linears(SMALL_LLAMA)
    expected = SMALL_LLAMA["num_hidden_layers"] * sum(rank * sum(lin[n]) for n in LLAMA_TARGETS[targets])
    assert r.measured["trainable_parameters"] == expected
    base = r.measured["parameters"] - expected
    # bf16 adapters (mixed): 2 B each like the base; persistent grads bf16; fp32 masters; AdamW exp_avg + exp_avg_sq
    # in fp32 plus one 4-byte step per tensor (A and B per adapted linear)
    n_tensors = 2 * SMALL_LLAMA["num_hidden_layers"] * len(LLAMA_TARGETS[targets])
    assert r.details["num_param_tensors"] == n_tensors
    assert r.measured["weights"] == 2 * base + 2 * expected
    assert r.measured["gradients"] == 2 * expected
    assert r.measured["master_weights"] == 4 * expected
    assert r.measured["optimizer_states"] == 8 * expected + 4 * n_tensors


def test_peft_default_upcasts_adapters_to_fp32():
    default = lora.measure_lora_train(SMALL_LLAMA, targets="qv", rank=4, micro_batch=1, seq_len=8,
                                      recipe="fp32-adapters")
    asked = lora.measure_lora_train(SMALL_LLAMA, targets="qv", rank=4, micro_batch=1, seq_len=8, recipe="mixed")
    assert default.run["adapter_dtype"] == "fp32" and default.run["peft_autocast_adapter_dtype"] is True
    assert asked.run["adapter_dtype"] == "bf16" and asked.run["peft_autocast_adapter_dtype"] is False
    n = default.measured["trainable_parameters"]
    assert default.details["adapter_weights"] == 4 * n and asked.details["adapter_weights"] == 2 * n
    assert default.measured["gradients"] == 4 * n and default.measured["master_weights"] == 0


def test_input_requires_grad_defaults():
    kw = dict(targets="qv", rank=4, micro_batch=1, seq_len=8)
    assert lora.measure_lora_train(SMALL_LLAMA, **kw).run["input_requires_grad"] is False
    # HF's activation_checkpointing_enable turns enable_input_require_grads on for causal LMs
    assert lora.measure_lora_train(SMALL_LLAMA, recompute="full", **kw).run["input_requires_grad"] is True
    assert lora.measure_lora_train(SMALL_LLAMA, recompute="full", input_requires_grad=False,
                                   **kw).run["input_requires_grad"] is False
    on = lora.measure_lora_train(SMALL_LLAMA, input_requires_grad=True, **kw)
    off = lora.measure_lora_train(SMALL_LLAMA, **kw)
    h, T = SMALL_LLAMA["hidden_size"], 8
    # the embedding output becomes a leaf held by its AccumulateGrad node (2·T·h), and layer 0's input norm keeps
    # its fp32 copy and rsqrt (4·T·h + 4·T)
    assert on.measured["activations"] - off.measured["activations"] == 2 * T * h + 4 * T * h + 4 * T


# ---------------------------------------------------------------------------------------------------------------
# The per-layer formulas (validation/README.md, LoRA) against every committed LoRA golden file
# ---------------------------------------------------------------------------------------------------------------

# logical linears adapted per target set: q k v o / qkv (fused) / gate up down / gate_up (fused) / fc proj (GPT-2)
ADAPTED = {
    "fused-qkv": {"qv": {"qkv"}, "attention": {"qkv", "o"}, "all-linear": {"qkv", "o", "gate_up", "down"}},
    "gpt2": {"qv": {"qkv"}, "attention": {"qkv", "o"}, "all-linear": {"qkv", "o", "fc", "down"}},
    "separate": {"qv": {"q", "v"}, "attention": {"q", "k", "v", "o"},
                 "all-linear": {"q", "k", "v", "o", "gate", "up", "down"}},
}


def dims(doc):
    c, run = doc["model"], doc["run"]
    mt = c["model_type"]
    if mt == "gpt2":
        h, a, f, L, V = c["n_embd"], c["n_head"], 4 * c["n_embd"], c["n_layer"], c["vocab_size"]
        d, kv = h // a, a
    else:
        h, a, f, L, V = (c["hidden_size"], c["num_attention_heads"], c["intermediate_size"],
                         c["num_hidden_layers"], c["vocab_size"])
        d, kv = c.get("head_dim") or h // a, c.get("num_key_value_heads", a)
    b, s = run["micro_batch"], run["seq_len"]
    return dict(mt=mt, h=h, a=a, f=f, L=L, V=V, d=d, qd=a * d, kvd=kv * d, b=b, s=s, T=b * s,
                r=run["lora_rank"], e=2, eager=run["attention"] == "eager",
                A=ADAPTED["gpt2" if mt == "gpt2" else "fused-qkv" if mt == "phi3" else "separate"][run["lora_targets"]])


def layer_bytes(x: dict, first: bool) -> int:
    """Bytes one decoder layer holds for backward (bf16 adapters, no recompute); `first`: the layer's input does
    not require grad (layer 0 without enable_input_require_grads)."""
    T, h, qd, kvd, f, a, r, e, A = x["T"], x["h"], x["qd"], x["kvd"], x["f"], x["a"], x["r"], x["e"], x["A"]
    scores = a * x["b"] * x["s"] * x["s"]
    attn_reader = bool(A & {"q", "k", "v", "qkv"})
    mlp_reader = bool(A & {"gate", "up", "gate_up", "fc"})
    o_in = e * T * qd if (not x["eager"] or "o" in A) else 0  # flash saves its output (= o_proj input) anyway
    core = 4 * a * T + 16 if not x["eager"] else 0  # FA2 lse + rng_state
    if x["mt"] == "gpt2":
        # ln_1 stats, its output if c_attn is adapted, q/k/v (flash: the fused c_attn output; eager: 3 copies),
        # eager scores (bf16 softmax, dropout output, bool mask), o_proj input, resid dropout masks, the residual,
        # ln_2 stats and output, c_fc output and gelu_new's mul/tanh/add, its output if c_proj (mlp) is adapted,
        # the layer output
        ln1 = (0 if first else 8 * T) + e * T * h * attn_reader
        attn = e * T * 3 * h + o_in + core + (5 * scores if x["eager"] else 0)
        ln2 = 8 * T + e * T * h * mlp_reader
        mlp = 4 * e * T * f + e * T * f * ("down" in A)
        return ln1 + attn + ln2 + mlp + 2 * T * h + 2 * e * T * h + e * T * r * len(A)
    if x["mt"] == "gemma2":
        norm, n_norms = 4 * T * h + 4 * T + 4 * h, 4  # fp32 copy, rsqrt, the fp32 (1 + weight)
    else:
        norm, n_norms = 4 * T * h + 4 * T, 2  # fp32 copy, rsqrt
    norms = n_norms * norm - (norm if first else 0) + e * T * h * (attn_reader + mlp_reader)
    if x["mt"] == "phi3":  # fused qkv output (v is a view) + rotary q and k
        qkv = e * T * (qd + 2 * kvd) + e * T * (qd + kvd)
        # flash: Phi3's torch.cat RoPE leaves q contiguous in (b, a, s, d), flash-attn allocates its output like q,
        # and o_proj's adapter keeps the reshape's copy beside it (a frozen o_proj keeps nothing)
        o_in += e * T * qd if (not x["eager"] and "o" in A) else 0
        mlp = e * T * 2 * f + e * T * f + e * T * f * ("down" in A)  # gate_up output, silu, product
    else:
        if x["eager"]:  # q, repeat_kv-expanded k and v; q is not saved when k does not require grad
            q_saved = not (first and not A & {"k"})
            qkv = e * T * qd * q_saved + 2 * e * T * qd
        else:
            qkv = e * T * (qd + 2 * kvd)
        mlp = 3 * e * T * f + e * T * f * ("down" in A)  # gate out, act out, up out (+ product if down adapted)
    eager_scores = ((8 if x["mt"] == "gemma2" else 6) * scores) if x["eager"] else 0
    return norms + qkv + o_in + core + eager_scores + mlp + e * T * r * len(A)


def fp32_adapter_layer_bytes(x: dict, first: bool) -> int:
    """PEFT's default fp32 adapters on a bf16 Llama-family base, flash: each adapted linear saves its own fp32
    copy of its input (4·T·in) and an fp32 A output (4·T·r); the bf16 inputs are then saved by nobody."""
    T, h, qd, kvd, f, a, r, A = x["T"], x["h"], x["qd"], x["kvd"], x["f"], x["a"], x["r"], x["A"]
    assert not x["eager"] and x["mt"] in ("llama", "qwen2", "mistral")
    width_in = {"q": h, "k": h, "v": h, "o": qd, "gate": h, "up": h, "down": f}
    norms = 2 * (4 * T * h + 4 * T) - ((4 * T * h + 4 * T) if first else 0)
    attn = 2 * T * (qd + 2 * kvd) + 2 * T * qd + 4 * a * T + 16
    mlp = 3 * 2 * T * f
    return norms + attn + mlp + sum(4 * T * width_in[n] + 4 * T * r for n in A)


def non_layer_bytes(x: dict, doc: dict) -> dict:
    T, h, e, s, b, V = x["T"], x["h"], x["e"], x["s"], x["b"], x["V"]
    run = doc["run"]
    gpt2 = x["mt"] == "gpt2"
    pre = 0 if gpt2 else 2 * 2 * s * x["d"]  # rotary cos/sin (1, s, d) in bf16; GPT-2's embedding dropout: nothing
    if run["input_requires_grad"] or run["recompute"] == "full":
        pre += e * T * h  # the embedding output: a leaf held by AccumulateGrad, or the checkpointed layer 0's input
    if run["recompute"] == "full":
        pre += 8 * T + (e * b * s * s if x["eager"] else 0)  # position ids, eager 4-D mask (checkpoint closures)
    if gpt2:
        final = 8 * T  # LayerNorm mean and rstd (its input is the last layer's output)
    elif x["mt"] == "gemma2":
        final = 4 * T * h + 4 * T + 4 * h
    else:
        final = 4 * T * h + 4 * T  # fp32 copy and rsqrt: no normalised copy, no lm_head input (frozen)
    head = 4 * T * V + (8 * (s + 1) if b == 1 else 8 * T) + 4 + (2 * T * V if x["mt"] == "gemma2" else 0)
    return {"pre": pre, "final_norm": final, "head": head}


def expected_layers(doc) -> list[int]:
    x = dims(doc)
    run = doc["run"]
    if run["recompute"] == "full":  # each layer keeps its output (the next layer's input); the last one nothing
        return [x["e"] * x["T"] * x["h"]] * (x["L"] - 1) + [0]
    per = fp32_adapter_layer_bytes if run["adapter_dtype"] == "fp32" else layer_bytes
    first = not run["input_requires_grad"]
    return [per(x, first)] + [per(x, False)] * (x["L"] - 1)


@pytest.mark.parametrize("path", LORA_FILES, ids=[p.stem for p in LORA_FILES])
def test_lora_formulas_hold_on_every_golden(path):
    doc = json.loads(path.read_text())
    x = dims(doc)
    assert doc["details"]["activations_per_layer"] == expected_layers(doc)
    non_layer = {k: v for k, v in non_layer_bytes(x, doc).items() if v}
    assert doc["details"]["activations_non_layer_by_phase"] == non_layer
    assert doc["measured"]["activations"] == sum(expected_layers(doc)) + sum(non_layer.values())


# ---------------------------------------------------------------------------------------------------------------
# The golden files
# ---------------------------------------------------------------------------------------------------------------


def test_committed_tiny_lora_golden_is_up_to_date():
    case = next(c for c in MATRIX if c.model == "tiny-llama")
    assert (GOLDEN / f"{case.id}.json").read_text() == dumps(run_case(case))


def test_lora_golden_files_well_formed():
    assert {p.stem for p in LORA_FILES} == {c.id for c in MATRIX}
    assert len(LORA_FILES) >= 16
    for p in LORA_FILES:
        doc = json.loads(p.read_text())
        run, m = doc["run"], doc["measured"]
        assert doc["id"] == p.stem and set(MEASURED_KEYS) <= set(m)
        assert run["finetune"] == "lora" and run["lora_targets"] in ("qv", "attention", "all-linear")
        assert isinstance(run["input_requires_grad"], bool) and run["adapter_dtype"] in ("bf16", "fp32")
        assert f"lora-{run['lora_targets']}-r{run['lora_rank']}__{run['recipe']}__" in p.stem
        assert m["trainable_parameters"] == doc["details"]["trainable_parameters_expected"]
        assert 0 < m["trainable_parameters"] < m["parameters"]
        assert m["gradients"] == m["trainable_parameters"] * (4 if run["adapter_dtype"] == "fp32" else 2)
        assert doc["environment"]["peft"] == "0.21.2"
