"""A Megatron-Core MoE layer's tokens and saved tensors (calculator/memory/moe_dispatch.py)."""
import math

import pytest

from calculator import Workload
from calculator.core.errors import InputError
from calculator.memory import moe_dispatch as moe


def test_dropless_rows_are_t_times_k_times_imbalance():
    assert moe.expert_rows(4096, 2, 8, 1, 1.0, None, False) == 8192
    assert moe.expert_rows(4096, 2, 8, 2, 1.5, None, False) == 4096 * 2 * 2 * 1.5  # gathered over expert TP


def test_capacity_drops_and_pads():
    # get_capacity: C = ceil(T·k/E × factor); each source rank keeps at most C rows per expert
    T, k, E = 1000, 2, 8
    cap = math.ceil(T * k / E * 1.25)
    assert moe.expert_rows(T, k, E, 1, 1.0, 1.25, False) == E * math.ceil(T * k / E)  # balanced: under capacity
    assert moe.expert_rows(T, k, E, 1, 3.0, 1.25, False) == E * cap  # hot experts capped
    assert moe.expert_rows(T, k, E, 1, 1.0, 1.25, True) == E * cap  # padded to capacity


def test_router_and_experts_saved():
    # RouterGatingLinearFunction saves the model-dtype input (already the norm's output): no fp32 copy of it
    assert moe.router_saved(100, 8, 2) == 4 * 100 * 8 + 100 * 8 + 4 * 100 * 2
    R, h, f, e = 300, 64, 128, 2
    assert moe.experts_saved(R, h, f, True, e) == e * R * h + e * R * 2 * f + 4 * R + e * R * f
    assert moe.experts_saved(R, h, f, False, e, input_bytes=R * h) == R * h + e * R * f + 4 * R + e * R * f


def test_weighted_activation_keeps_the_activation_output():
    # mlp.py / experts.py: `act(fc1) * probs` after an unfused activation keeps act(fc1) (R × f) for the probs' grad;
    # the gated SwiGLU's fused weighted_bias_swiglu keeps only its input and the probs
    assert moe.weighted_activation_saved(300, 128, False, 2) == 2 * 300 * 128
    assert moe.weighted_activation_saved(300, 128, True, 2) == 0


def test_deterministic_unpermute_keeps_its_source():
    # moe_utils.unpermute: index_add_ (deterministic) keeps the rows it sums; scatter_add_ only the indices
    R, back, h, e = 300, 200, 64, 2
    assert moe.unpermute_saved("allgather", True, back, R, h, e) == e * R * h
    assert moe.unpermute_saved("alltoall", True, back, R, h, e) == e * back * h
    assert moe.unpermute_saved("alltoall", False, back, R, h, e) == 0
    assert moe.unpermute_saved("flex", True, back, R, h, e) == 0
    # num_out_tokens: T·k dropless; at most E·C with a capacity factor; E·C padded
    assert moe.rows_returned(100, 2, 8, None, False) == 200
    assert moe.rows_returned(100, 2, 8, 0.5, False) == 8 * math.ceil(200 / 8 * 0.5)
    assert moe.rows_returned(100, 2, 8, 2.0, False) == 200
    assert moe.rows_returned(100, 2, 8, 2.0, True) == 8 * math.ceil(200 / 8 * 2.0)


def test_dispatchers():
    # allgather keeps the gathered map's local columns and masked_select's transposed mask: 2 · T·g · E/ep bytes
    assert moe.dispatcher_saved("allgather", 100, 8, 4, 2) == 2 * 100 * 4 * 4
    assert moe.dispatcher_saved("alltoall", 100, 8, 4, 2) == 0
    # the allgather dispatcher's token gather lives in Megatron's global "mpu" buffer: e·T·g·h, only when g > 1
    assert moe.allgather_buffer("allgather", 100, 4, 64, 2) == 2 * 100 * 4 * 64
    assert moe.allgather_buffer("allgather", 100, 1, 64, 2) == 0
    assert moe.allgather_buffer("alltoall", 100, 4, 64, 2) == 0
    assert moe.dispatch_working_set("alltoall", 100, 2, 64, 2, 220, 4) == 2 * (200 + 220) * 64
    assert moe.dispatch_working_set("allgather", 100, 2, 64, 2, 220, 4) == 2 * 100 * 4 * 64
    assert moe.dispatch_working_set("flex", 100, 2, 64, 2, 220, 4) == 2 * 220 * 64


@pytest.mark.parametrize("kw, field", [(dict(moe_capacity_factor=0.0), "moe_capacity_factor"),
                                       (dict(moe_imbalance=0.5), "moe_imbalance")])
def test_bad_values_are_input_errors(kw, field):
    with pytest.raises(InputError) as err:
        moe.check(Workload(**kw))
    assert err.value.field == field
