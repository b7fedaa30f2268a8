"""GPT-Neo's decoder layer (models/gpt_neo/modeling_gpt_neo.py, transformers 5.23): what one layer saves for backward
equals what a tiny bf16 GPT-Neo saves on the CPU (validation/architectures/measure.py's trace, less the CPU-only
LayerNorm statistics and dropout noise), global and local layers, with and without dropout; its cache after a
prefill keeps the whole prompt on every layer, local ones included."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator import Workload  # noqa: E402
from calculator.memory import activations as act  # noqa: E402
from calculator.model import variants  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from validation.architectures import measure as M  # noqa: E402
from validation.architectures.sources import Source  # noqa: E402

BASE = dict(hidden_size=64, num_heads=4, num_layers=2, vocab_size=101, max_position_embeddings=128, window_size=8)
CASES = {
    "global, local": dict(attention_types=[[["global", "local"], 1]]),
    "local, global, dropout": dict(attention_types=[[["local", "global"], 1]], resid_dropout=0.1,
                                   attention_dropout=0.1, embed_dropout=0.1),
    "global only, attention dropout": dict(attention_types=[[["global"], 2]], attention_dropout=0.1),
}


def _source(case: str) -> Source:
    M.quiet()
    config = transformers.AutoConfig.for_model("gpt_neo", **BASE, **CASES[case])
    return Source("gpt_neo", config.to_dict(), config, case)


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_gpt_neo_layer_saves_what_the_real_layer_saves(case):
    src = _source(case)
    spec, warnings = M.spec_of(src)
    assert not warnings
    (result,) = M.activations(src, spec, "eager").values()
    assert result["engine"] == result["reference"], result


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_layer_caches_the_whole_prompt(case):
    """transformers' DynamicCache(config) finds no sliding_window or layer_types in GPTNeoConfig: the local layers'
    DynamicLayer keeps all 11 tokens (past window_size = 8), in bf16."""
    src = _source(case)
    spec, _ = M.spec_of(src)
    result = M.cache(src, spec)
    assert result["real"] == 2 * 2 * 2 * 11 * 64 * 2 == result["engine"], result
    assert spec.layer_types is None and spec.sliding_window is None


def test_fp32_q_and_k_by_hand():
    """T = 32 tokens, qd = 64: the fp32 q and k (4 B each) kept instead of bf16 ones (2 B): 2·2·32·64 more, only
    under eager attention without recompute (flash keeps the model-dtype q and k)."""
    assert variants.eager_qk_fp32_extra(32, 64, 2) == 2 * 2 * 32 * 64
    assert variants.eager_qk_fp32_extra(32, 64, 4) == 0  # an fp32 model: .to(float32) is the tensor itself
    spec = spec_from_hf_config(_source("global, local").written).spec
    plain = spec.model_copy(update=dict(variant=spec.variant.model_copy(update=dict(eager_qk_fp32=False))))
    for attention, extra in (("eager", 2 * 2 * 32 * 64), ("flash", 0)):
        w = Workload(seq_len=16, micro_batch=2, attention=attention, mixer_kernels="torch")
        d = act.dims(spec, w)
        kind = spec.layer_kind(1)
        assert act.exact_layer(spec, w, d, kind).attention - act.exact_layer(plain, w, d, kind).attention == extra
