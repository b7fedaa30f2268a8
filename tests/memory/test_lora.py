"""LoRA / QLoRA: adapter parameter counts, frozen-base model states, activation changes."""
import pytest

from calculator import Workload, estimate
from calculator.memory import lora
from calculator.model.presets import load_model


def test_adapter_count_llama_8b_all_linear_r16():
    # r·(in + out) over q, k, v, o, gate, up, down per layer: the 41,943,040 PEFT reports for Llama-3.1-8B, r = 16
    m = load_model("llama-3.1-8b").spec
    per_layer = lora.adapter_params(m, 16, "all-linear", False)
    assert per_layer == 16 * ((4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 3 * (4096 + 14336))
    assert 32 * per_layer == 41_943_040


def test_qv_targets_the_papers_default():
    m = load_model("llama-3.1-8b").spec
    assert lora.adapter_params(m, 8, "qv", False) == 8 * ((4096 + 4096) + (4096 + 1024))


def test_fused_qkv_is_one_adapter():
    m = load_model("phi-3-mini-4k").spec
    names = [n for n, _, _ in lora.adapted_linears(m, "all-linear", False)]
    assert names == ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]


def test_lora_trains_only_the_adapters():
    m = load_model("llama-3.1-8b").spec
    c = estimate(m, Workload(finetune="lora", lora_rank=16, lora_adapter_dtype="params", zero_grad_set_to_none=False),
                 with_fits=False).components
    n_t = 41_943_040
    assert c["weights"] == 2 * 8_030_261_248 + 2 * n_t
    assert c["gradients"] == 2 * n_t and c["master_weights"] == 4 * n_t
    assert c["optimizer_states"] == 8 * n_t + 4 * 2 * 7 * 32  # m, v + a step per adapter tensor


def test_peft_default_keeps_adapters_in_fp32_without_a_master_copy():
    m = load_model("llama-3.1-8b").spec
    c = estimate(m, Workload(finetune="lora", lora_rank=16, zero_grad_set_to_none=False), with_fits=False).components
    n_t = 41_943_040
    assert c["weights"] == 2 * 8_030_261_248 + 4 * n_t
    assert c["gradients"] == 4 * n_t and c["master_weights"] == 0


def test_qlora_base_is_nf4_with_absmax():
    m = load_model("llama-3.1-8b").spec
    c = estimate(m, Workload(finetune="qlora", lora_rank=16, lora_adapter_dtype="params"), with_fits=False).components
    linear = 8_030_261_248 - 2 * 128256 * 4096 - 4096 * 65
    base = linear // 2 + -(-linear // 64) * 4 + 2 * (8_030_261_248 - linear)
    assert c["weights"] == base + 2 * 41_943_040


def test_qlora_keeps_the_lora_activations_its_4bit_linears_save_no_input():
    # bitsandbytes >= 0.45 MatMul4Bit saves only the packed weight: a 4-bit base keeps what a frozen bf16 linear
    # keeps; QLoRA differs from LoRA by the weights and the bf16 dequantization of one linear (H200: within 0.3%)
    m = load_model("llama-3.1-8b").spec
    lora_ = estimate(m, Workload(seq_len=2048, finetune="lora"), with_fits=False)
    qlora = estimate(m, Workload(seq_len=2048, finetune="qlora"), with_fits=False)
    assert qlora.components["activations"] == lora_.components["activations"] > 0
    dequant = next(t for t in qlora.terms if t.key == "transient.dequant")
    assert dequant.bytes == 2 * 4096 * 14336


def test_lora_saves_less_than_full_finetuning_and_adds_rank_wide_tensors():
    m = load_model("llama-3.1-8b").spec
    full = estimate(m, Workload(seq_len=2048), with_fits=False).components["activations"]
    bf16 = {"finetune": "lora", "lora_adapter_dtype": "params"}
    qv = estimate(m, Workload(seq_len=2048, lora_targets="qv", **bf16), with_fits=False).components
    every = estimate(m, Workload(seq_len=2048, **bf16), with_fits=False).components
    assert qv["activations"] < every["activations"] < full
    T, h, f = 2048, 4096, 14336
    # all-linear: frozen norm weights drop 2·e·T·h per layer, seven adapters add 7·e·T·r; the first layer's input
    # needs no grad (PEFT without checkpointing), so its first norm keeps nothing (4·T·h + 4·T)
    assert full - every["activations"] == 32 * (2 * 2 * T * h - 7 * 2 * T * 16) + 4 * T * h + 4 * T
    # q,v only: also no norm output for the MLP, no down-projection input, and five fewer adapters
    assert every["activations"] - qv["activations"] == 32 * (2 * T * h + 2 * T * f + 5 * 2 * T * 16)


@pytest.mark.parametrize("model_id", ["qwen3-30b-a3b", "deepseek-v3", "gemma-2-9b", "gpt2"])
def test_lora_on_every_family_gives_positive_terms(model_id):
    m = load_model(model_id).spec
    e = estimate(m, Workload(finetune="qlora", seq_len=1024), with_fits=False)
    assert all(t.bytes >= 0 for t in e.terms)
    # PEFT's all-linear also adapts Qwen3-MoE's 128 routed experts (calculator/memory/lora_moe.py): ~1B trainable
    bound = 2 if model_id == "qwen3-30b-a3b" else 5
    assert 0 < e.components["optimizer_states"] < e.components["weights"] / bound


def test_kbit_prep_casts_every_non_4bit_weight_and_the_activations_to_fp32():
    # peft.prepare_model_for_kbit_training: embeddings, norms, LM head in fp32 (H200, Llama-3.1-8B: −0.33%)
    m = load_model("llama-3.1-8b").spec
    kw = {"finetune": "qlora", "seq_len": 2048, "micro_batch": 4, "recompute": "full"}
    plain = estimate(m, Workload(**kw), with_fits=False)
    prep = estimate(m, Workload(**kw, kbit_prep=True), with_fits=False)
    rest = 2 * 128256 * 4096 + 4096 * 65
    assert prep.components["weights"] - plain.components["weights"] == 2 * rest
    layer_inputs = next(t for t in prep.terms if t.key == "activations.layers")
    assert layer_inputs.bytes == 32 * 4 * 4 * 2048 * 4096  # fp32 residual stream
    assert next(t for t in prep.terms if t.key == "transient.loss").bytes == 8 * 4 * 2048 * 128256
    # only QLoRA is prepared
    full = Workload(seq_len=2048)
    assert estimate(m, full.model_copy(update={"kbit_prep": True}), with_fits=False).peak_allocated_bytes == \
        estimate(m, full, with_fits=False).peak_allocated_bytes


def test_bitsandbytes_before_0_43_kept_every_4bit_linear_input():
    m = load_model("llama-3.1-8b").spec
    kw = {"finetune": "qlora", "seq_len": 2048, "lora_targets": "qv"}
    new = estimate(m, Workload(**kw), with_fits=False).components["activations"]
    old = estimate(m, Workload(**kw, qlora_keeps_inputs=True), with_fits=False).components["activations"]
    T, h, f = 2048, 4096, 14336
    # fp32 adapters read their own fp32 copies: the old 4-bit base kept both norm outputs and the down-projection
    # input (the o_proj input is the flash output, kept anyway)
    assert old - new == 32 * (2 * 2 * T * h + 2 * T * f)


def test_frozen_per_head_q_and_k_norms_keep_no_normalised_copy():
    # Qwen3's q_norm / k_norm are frozen under LoRA like the layer norms (H200 Qwen3-8B LoRA q,v: +3.57% -> 0.00%)
    from calculator.memory.lora_layer import lora_layer_delta
    q3, ll = load_model("qwen3-8b").spec, load_model("llama-3.1-8b").spec
    T, e = 8192, 2
    q3_norms, _, q3_attention = lora_layer_delta(q3, "qv", False, T, e, 16, 4096, 12288, 1, fp32_adapters=True)
    ll_norms, _, ll_attention = lora_layer_delta(ll, "qv", False, T, e, 16, 4096, 14336, 1, fp32_adapters=True)
    assert q3_norms == ll_norms  # the layer norms are alike
    assert q3_attention - ll_attention == -e * T * (4096 + 1024)  # q/k norms are saved with the attention


@pytest.mark.parametrize("model", ["qwen3-0.6b", "olmo-2-7b", "qwen3-30b-a3b", "gemma-3-1b"])
def test_frozen_q_k_norms_come_off_the_attention_term_and_no_term_goes_negative(model):
    """benchmarks/fuzz.py: LoRA on Qwen3-0.6B with fp32 activations showed norms of −3.9 GB: the per-head q/k norms'
    frozen copy was taken off the layer norms, which do not hold it (activations.qk_norm_saved is in attention)."""
    m = load_model(model).spec
    for act in ("fp32", "bf16"):
        for finetune in ("lora", "qlora"):
            w = Workload(micro_batch=8, finetune=finetune, precision={"params": "fp32", "grads": "fp32",
                         "master_weights": None, "optimizer_states": "fp32", "activations": act})
            for stage in estimate(m, w, with_fits=False).stages:
                assert all(t.bytes >= 0 for t in stage.terms), [(t.key, t.bytes) for t in stage.terms]
