"""torch.autocast over fp32 weights (calculator/memory/autocast.py), held to the H200's amp-fp32 runs."""
from calculator import Workload, estimate
from calculator.memory import autocast
from calculator.model.presets import load_model
from calculator.core.workload import RECIPES


def _activations(recipe: str, **kw) -> int:
    m = load_model("llama-3.2-1b").spec
    w = Workload(micro_batch=2, seq_len=4096, precision=RECIPES[recipe][1], gpu="h200", **kw)
    c = estimate(m, w, with_fits=False).components
    return c["activations"] + c["logits"]  # the layers and the final norm


def test_autocast_keeps_bf16_weight_copies_an_fp32_residual_stream_and_one_input_copy_per_linear():
    T, h = 8192, 2048
    layer_linear = 1_235_814_400 - 128_256 * 2048 - 2048 * 33
    expected = 2 * (layer_linear + 128_256 * 2048) + 16 * 10 * T * h + 2 * T * h
    assert _activations("amp-fp32") - _activations("pure-bf16") == expected == 5_189_402_624
    # the H200 forward kept 5,190,609,336 B more than the engine's bf16 layers did before these terms
    assert abs(expected - 5_190_609_336) < 2_000_000


def test_llama_layer_extra_is_ten_t_h_and_gemma_norms_add_nothing():
    llama, gemma = load_model("llama-3.2-1b").spec, load_model("gemma-2-9b").spec
    assert autocast.layer_extra(llama, 100, 10, 2) == 10 * 100 * 10  # 2 norms × 2·T·h + (2 + 1) extra readers
    assert autocast.layer_extra(gemma, 100, 10, 2) == 3 * 2 * 100 * 10  # readers only: Gemma's norms are fp32 anyway


def test_norms_that_compute_in_fp32_keep_no_extra_copy_under_autocast():
    """Qwen3.5's zero-centred RMSNorm and an fp32-weight variant norm keep fp32 copies in the bf16 model already."""
    qwen35 = load_model("qwen3.5-27b").spec
    assert qwen35.zero_centered_norm and autocast.norm_extra_per_elem(qwen35, 2) == 0
    llama = load_model("llama-3.2-1b").spec
    assert autocast.norm_extra_per_elem(llama, 2) == 2
    from calculator.model.variants import VariantSpec
    olmo_like = llama.model_copy(update={"variant": VariantSpec(norm="fp32_weight")})
    assert autocast.norm_extra_per_elem(olmo_like, 2) == 0


def test_not_applied_with_full_recompute_or_without_autocast():
    assert not autocast.applies(Workload(precision=RECIPES["amp-fp32"][1], recompute="full"))
    assert not autocast.applies(Workload(precision=RECIPES["mixed-bf16"][1]))
    assert not autocast.applies(Workload(precision=RECIPES["fp32"][1]))
    assert _activations("amp-fp32", recompute="full") == _activations("pure-bf16", recompute="full")
