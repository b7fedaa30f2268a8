"""Seed-OSS's decoder layer (models/seed_oss/modeling_seed_oss.py, transformers 5.23): what one layer saves for
backward equals what a tiny bf16 Seed-OSS saves on the CPU (validation/architectures/measure.py's trace, less the
CPU-only dropout noise and, under SDPA with attention dropout, the CPU's fp32 math path), with its default dropouts
and without them."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator import Workload  # noqa: E402
from calculator.memory import activations as act  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from validation.architectures import measure as M  # noqa: E402
from validation.architectures.sources import Source  # noqa: E402

BASE = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
            vocab_size=101, max_position_embeddings=128, attention_bias=True, attention_out_bias=True)
CASES = {"defaults (dropout 0.1)": {}, "no dropout": dict(attention_dropout=0.0, residual_dropout=0.0),
         "residual dropout only": dict(attention_dropout=0.0)}


def _source(case: str) -> Source:
    M.quiet()
    config = transformers.AutoConfig.for_model("seed_oss", **BASE, **CASES[case])
    return Source("seed_oss", config.to_dict(), config, case)


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_seed_oss_layer_saves_what_the_real_layer_saves(case, attention):
    src = _source(case)
    spec, warnings = M.spec_of(src)
    assert not warnings
    (result,) = M.activations(src, spec, attention).values()
    assert result["engine"] == result["reference"], result


def test_dropout_bytes_by_hand():
    """T = 32 tokens, h = 64, head_dim 128 (qd = 512), 4 heads, b = 2, s = 16, bf16: the two residual dropouts keep a
    1-byte mask each (2·32·64); the attention dropout keeps its mask and output per score instead of the softmax's
    bf16 cast (4 + 1 + 2 B beside 4 + 2), and no embedding dropout."""
    on = spec_from_hf_config(_source("defaults (dropout 0.1)").written).spec
    off = spec_from_hf_config(_source("no dropout").written).spec
    w = Workload(seq_len=16, micro_batch=2, attention="eager", mixer_kernels="torch")
    d = act.dims(on, w)
    kind = on.layer_kind(1)
    lay_on, lay_off = act.exact_layer(on, w, d, kind), act.exact_layer(off, w, d, kind)
    assert lay_on.norms - lay_off.norms == 2 * 32 * 64
    assert lay_on.attention - lay_off.attention == (7 - 6) * 4 * 2 * 16 * 16
    assert act.embedding_saved(on, d, True) == 0
