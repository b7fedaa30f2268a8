"""DeepSeek MLA under SDPA (calculator.memory.sdpa.mla_output_copy): with q·k and v head dims equal SDPA runs its
flash kernel, whose output is laid out like MLA's concatenated q, (b, a, s, d), so transformers'
transpose(1, 2).contiguous() gives o_proj a copy of it; the tiny DeepSeek-V3 and Kimi-K2 layers the architecture
table traces (validation/architectures) are held to it, eager and SDPA."""
from __future__ import annotations

import pytest

from calculator import Workload
from calculator.memory import activations as act
from calculator.memory.sdpa import mla_output_copy
from calculator.model.hf_config import spec_from_hf_config

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from validation.architectures import measure as M  # noqa: E402
from validation.architectures.sources import source  # noqa: E402


def _spec(**overrides):
    return spec_from_hf_config({**source("deepseek_v3").written, **overrides}).spec


def test_the_copy_is_one_output_only_under_sdpas_flash_kernel():
    m = _spec()  # 4 heads, q·k 8 + 8 = v 16
    w = Workload(seq_len=16, micro_batch=2, attention="sdpa")
    assert mla_output_copy(act.dims(m, w), m, w) == 2 * (2 * 16) * 4 * 16
    for other in (dict(attention="eager"), dict(attention="flash"), dict(recompute="selective"),
                  dict(padded_batch=True)):
        w2 = w.model_copy(update=other)
        assert mla_output_copy(act.dims(m, w2), m, w2) == 0, other
    unequal = _spec(v_head_dim=8)  # the memory-efficient kernel: its (b, s, a, d) output needs no copy
    assert mla_output_copy(act.dims(unequal, w), unequal, w) == 0


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("model_type", ["deepseek_v3", "kimi_k2"])
def test_the_traced_layers(model_type, attention):
    """Layer 1 (dense MLP) and layer 2 (MoE, grouped_mm's int32 offsets 4·E: tests/memory/test_moe_offsets.py) to the
    byte."""
    M.quiet()
    src = source(model_type)
    spec, _ = M.spec_of(src)
    measured = M.activations(src, spec, attention)
    dense, moe = measured["mla+dense"], measured["mla+moe"]
    assert (dense["layer"], moe["layer"]) == (1, 2)
    assert dense["engine"] == dense["reference"]
    assert moe["engine"] == moe["reference"]
