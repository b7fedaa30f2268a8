"""The operations of a decoder layer (calculator.timing.ops): host-operator counts against real transformers code,
local shapes under tensor parallelism, backward and recompute rules."""
import json
from pathlib import Path

import pytest

from calculator.memory.activations import dims
from calculator.model.presets import load_model
from calculator.timing.ops import backward_of, expected_experts_hit, layer_forward, recomputed
from calculator.core.workload import Workload

TRACED = json.loads((Path(__file__).resolve().parents[2] / "validation" / "op_counts.json").read_text())["layers"]


@pytest.mark.parametrize("case", sorted(TRACED))
def test_host_operator_counts_match_the_traced_layer(case):
    """validation/trace/op_counts.py traced these from transformers on the meta device; the formula is within 6%."""
    model_id, attention = case.split("/")
    m = load_model(model_id).spec
    eager = attention == "eager"
    d = dims(m, Workload(seq_len=256, attention="eager" if eager else "flash"))
    ops = layer_forward(m, d, moe=m.is_moe, window=None, eager=eager, e_w=2)
    forward = sum(o.host_ops for o in ops)
    backward = sum(backward_of(o).host_ops for o in ops)
    assert forward == pytest.approx(TRACED[case]["forward"], rel=0.06)
    assert backward == pytest.approx(TRACED[case]["backward"], rel=0.06)


def test_tensor_parallel_splits_every_linear_of_a_layer():
    m = load_model("llama-3.1-8b").spec
    one = layer_forward(m, dims(m, Workload(seq_len=1024)), moe=False, window=None, eager=False, e_w=2)
    four = layer_forward(m, dims(m, Workload(seq_len=1024, parallel={"tp": 4})), moe=False, window=None,
                         eager=False, e_w=2)
    flops = lambda ops: sum(o.flops for o in ops if o.kind in ("matmul", "attention"))  # noqa: E731
    assert flops(four) == pytest.approx(flops(one) / 4)
    qkv = next(o for o in one if o.name == "QKV projection")
    assert qkv.flops == 2 * 1024 * 4096 * (4096 + 2 * 1024)


def test_recompute_skips_what_nothing_saves():
    m = load_model("llama-3.1-8b").spec
    ops = layer_forward(m, dims(m, Workload(seq_len=1024)), moe=False, window=None, eager=False, e_w=2)
    again = recomputed(ops)
    assert "MLP down projection" not in {o.name for o in again}
    assert all(o.phase == "recompute" for o in again)
    residual = next(o for o in again if o.name == "Residual adds")
    assert residual.bytes == next(o for o in ops if o.name == "Residual adds").bytes / 2


def test_frozen_linear_backward_is_its_input_gradient_only():
    m = load_model("llama-3.1-8b").spec
    qkv = next(o for o in layer_forward(m, dims(m, Workload(seq_len=1024)), moe=False, window=None, eager=False,
                                        e_w=2) if o.name == "QKV projection")
    full, frozen = backward_of(qkv), backward_of(qkv, frozen=True)
    assert full.flops == 2 * qkv.flops and frozen.flops == qkv.flops
    assert full.host_ops == 3 * 2 + 2 and frozen.host_ops == 3 + 2  # + 2 adds summing the input gradients


def test_expected_experts_hit():
    assert expected_experts_hit(128, 1) == pytest.approx(1)
    assert expected_experts_hit(128, 8) == pytest.approx(128 * (1 - (127 / 128) ** 8))
    assert expected_experts_hit(64, 100_000) == pytest.approx(64)
