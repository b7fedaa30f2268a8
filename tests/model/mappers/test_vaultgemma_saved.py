"""VaultGemma's decoder layer (models/vaultgemma/modeling_vaultgemma.py, transformers 5.23): what one layer saves for
backward equals what a tiny bf16 VaultGemma saves on the CPU (validation/architectures/measure.py's trace), with and
without soft-capping; the soft-capping fields read as VaultGemmaConfig declares them."""
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

BASE = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
            vocab_size=101, head_dim=16, max_position_embeddings=128)
CASES = {"defaults": {}, "no soft-capping": dict(attn_logit_softcapping=None, final_logit_softcapping=None),
         "sliding": dict(sliding_window=8, layer_types=["sliding_attention", "sliding_attention"])}


def _source(case: str) -> Source:
    M.quiet()
    config = transformers.AutoConfig.for_model("vaultgemma", **BASE, **CASES[case])
    return Source("vaultgemma", config.to_dict(), config, case)


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_vaultgemma_layer_saves_what_the_real_layer_saves(case):
    src = _source(case)
    spec, warnings = M.spec_of(src)
    assert not warnings
    (result,) = M.activations(src, spec, "eager").values()
    assert result["engine"] == result["reference"], result


@pytest.mark.parametrize("case", ["defaults", "no soft-capping"])
def test_the_cache_of_a_prompt_within_the_window(case):
    """11 tokens, window 4096: every layer keeps them all (a prompt past the window: DynamicSlidingWindowLayer keeps
    its last sliding_window − 1 tokens, which calculator.memory.inference.cached_tokens does not model)."""
    src = _source(case)
    spec, _ = M.spec_of(src)
    assert M.cache(src, spec)["exact"]


def test_softcapping_fields():
    """Absent: VaultGemmaConfig's 50 and 30; written as null: none (the model then caps nothing)."""
    assert (spec_from_hf_config(dict(model_type="vaultgemma", **BASE)).spec.attn_logit_softcapping,
            spec_from_hf_config(dict(model_type="vaultgemma", **BASE)).spec.final_logit_softcapping) == (50.0, 30.0)
    spec = spec_from_hf_config(_source("no soft-capping").written).spec
    assert spec.attn_logit_softcapping is None and spec.final_logit_softcapping is None


def test_norm_and_softcap_bytes_by_hand():
    """T = 32 tokens, h = 64, bf16: each VaultGemmaRMSNorm keeps the fp32 input, the fp32 normalised x, an fp32 rsqrt
    per row and the fp32 1 + weight (8·32·64 + 4·32 + 4·64); the eager scores (4 heads, b = 2, s = 16) keep tanh's
    bf16 output beside the fp32 softmax and its bf16 cast, (4 + 2 + 2) B each."""
    v = spec_from_hf_config(_source("defaults").written).spec.variant
    assert variants.norm_saved(v, 32, 64) == 8 * 32 * 64 + 4 * 32 + 4 * 64
    spec = spec_from_hf_config(_source("defaults").written).spec
    w = Workload(seq_len=16, micro_batch=2, attention="eager", mixer_kernels="torch")
    d = act.dims(spec, w)
    assert act.attention_scores_saved(d, spec, True) == (4 + 2 + 2) * 4 * 2 * 16 * 16
