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


def test_mla_down_projections_run_whole_on_every_tensor_parallel_rank():
    """MLA's q_a_proj and kv_a_proj_with_mqa are whole on every TP rank (parameters.mla_tp_replicated_shapes): each
    rank reads the whole weights; without sequence parallelism (a vLLM decode step) it runs them over all T tokens,
    with it (Megatron) over its T / tp — the same FLOPs as a split, not the same bytes. DeepSeek-V3 at TP8, 64
    tokens, bf16: the down projections are 7168·1536 + 7168·576 weights."""
    m = load_model("deepseek-v3").spec
    down = 7168 * 1536 + 7168 * 576

    def qkv(tp, sp):
        d = dims(m, Workload(seq_len=64, parallel={"tp": tp, "sequence_parallel": sp}))
        return next(o for o in layer_forward(m, d, moe=True, window=None, eager=False, e_w=2)
                    if o.name == "QKV projection")
    one, plain, sp = qkv(1, False), qkv(8, False), qkv(8, True)
    up_flops = one.flops - 2 * 64 * down  # q_b_proj and kv_b_proj, split by heads
    assert plain.flops == pytest.approx(up_flops / 8 + 2 * 64 * down)
    assert sp.flops == pytest.approx(up_flops / 8 + 2 * 8 * down)
    assert plain.bytes - sp.bytes == pytest.approx(2 * (64 - 8) * (7168 * 2 + 1536 + 576))  # their activations only
    assert sp.bytes > 2 * down  # the whole weights read on every rank
