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
    assert moe.router_saved(100, 8, 2, 64, False) == 4 * 100 * 8 + 100 * 8 + 4 * 100 * 2
    assert moe.router_saved(100, 8, 2, 64, True) - moe.router_saved(100, 8, 2, 64, False) == 4 * 100 * 64
    R, h, f, e = 300, 64, 128, 2
    assert moe.experts_saved(R, h, f, True, e) == e * R * h + e * R * 2 * f + 4 * R + e * R * f
    assert moe.experts_saved(R, h, f, False, e, input_bytes=R * h) == R * h + e * R * f + 4 * R + e * R * f


def test_dispatchers():
    assert moe.dispatcher_saved("allgather", 100, 8, 4) == 5 * 100 * 4 * 8
    assert moe.dispatcher_saved("alltoall", 100, 8, 4) == 0
    assert moe.dispatch_working_set("alltoall", 100, 2, 64, 2, 220, 4) == 2 * (200 + 220) * 64
    assert moe.dispatch_working_set("allgather", 100, 2, 64, 2, 220, 4) == 2 * 100 * 4 * 64
    assert moe.dispatch_working_set("flex", 100, 2, 64, 2, 220, 4) == 2 * 220 * 64


@pytest.mark.parametrize("kw, field", [(dict(moe_capacity_factor=0.0), "moe_capacity_factor"),
                                       (dict(moe_imbalance=0.5), "moe_imbalance")])
def test_bad_values_are_input_errors(kw, field):
    with pytest.raises(InputError) as err:
        moe.check(Workload(**kw))
    assert err.value.field == field
