"""TE's FP8 / FP4 recipes (calculator/memory/fp8.py) against their storage layouts and support checks."""
from fractions import Fraction

import pytest

from calculator import Workload
from calculator.core.errors import InputError
from calculator.memory import fp8
from calculator.model.presets import load_model
from calculator.stages.estimate import estimate


@pytest.mark.parametrize("recipe, weight, per", [
    ("delayed", True, Fraction(1)), ("current", False, Fraction(1)),
    ("blockwise", True, 1 + Fraction(4, 128 * 128)), ("blockwise", False, 1 + Fraction(4, 128)),
    ("mxfp8", True, 1 + Fraction(1, 32)), ("nvfp4", False, Fraction(1, 2) + Fraction(1, 16))])
def test_bytes_per_quantized_element(recipe, weight, per):
    assert fp8.bytes_per_element(recipe, weight) == per


def test_weight_cache_row_and_column_wise_on_hopper_row_only_per_tensor_on_blackwell():
    n = 1_000_000
    assert fp8.weight_cache_bytes("current", n, "h100-sxm", False) == 2 * n
    assert fp8.weight_cache_bytes("current", n, "b200", False) == n  # any GEMM layout on Blackwell
    assert fp8.weight_cache_bytes("mxfp8", n, "b200", False) == int(2 * n * (1 + Fraction(1, 32)))
    assert fp8.weight_cache_bytes("current", n, "h100-sxm", True) == n  # the FP8 parameter is the row-wise copy
    assert fp8.weight_cache_bytes("none", n, "h100-sxm", False) == 0


def test_scaling_state():
    # delayed: [history 1 + scale + scale_inv] × 5 fp32 tensors per module; current: scale + scale_inv
    assert fp8.scaling_state_bytes("delayed", 10) == 10 * 4 * 5 * 3
    assert fp8.scaling_state_bytes("current", 10) == 10 * 4 * 5 * 2
    assert fp8.scaling_state_bytes("mxfp8", 10) == 0


@pytest.mark.parametrize("recipe, gpu, ok", [
    ("mxfp8", "h100-sxm", False), ("nvfp4", "h200", False), ("mxfp8", "b200", True), ("nvfp4", "b300", True),
    ("mxfp8", "gb200", True), ("nvfp4", "gb200", True),
    ("mxfp8", "rtx-5090", False), ("nvfp4", "rtx-5090", True), ("current", "a100-80gb", False),
    ("current", "l40s", True), ("blockwise", "l40s", False), ("blockwise", "h100-sxm", True),
    ("delayed", "mi300x", False)])
def test_recipe_support_by_gpu(recipe, gpu, ok):
    w = Workload(stack="megatron", impl="megatron-te", fp8=recipe, gpu=gpu)
    if ok:
        fp8.check(w)
    else:
        with pytest.raises(InputError) as err:
            fp8.check(w)
        assert err.value.field == "fp8" and gpu in err.value.message


def test_param_gather_needs_a_recipe():
    with pytest.raises(InputError, match="fp8_param_gather"):
        fp8.check(Workload(stack="megatron", impl="megatron-te", fp8_param_gather=True))


def test_fp8_in_an_estimate_caches_weights_and_saves_quantized_inputs():
    m = load_model("llama-3.2-1b").spec
    base = dict(stack="megatron", impl="megatron-te", gpu="h100-sxm", seq_len=2048)
    bf16 = estimate(m, Workload(**base), with_fits=False).stages[0]
    cur = estimate(m, Workload(**base, fp8="current"), with_fits=False).stages[0]
    terms = {t.key: t.bytes for t in cur.terms}
    # q and o 2048 × 2048, k and v 512 × 2048, gate / up / down 2048 × 8192, in each of 16 layers
    shard_linear = m.num_hidden_layers * (2 * 2048 * 2048 + 2 * 512 * 2048 + 3 * 2048 * 8192)
    assert terms["weights.fp8_cache"] == 2 * shard_linear
    acts = lambda s: sum(t.bytes for t in s.terms if t.component == "activations")  # noqa: E731
    assert acts(cur) < acts(bf16)  # GEMM inputs saved in 1 B instead of 2 (the projection keeps one more copy)
