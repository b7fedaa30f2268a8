"""Hybrid models in a serving engine: which layers cache keys and values per token, which keep a fixed state per
sequence (Mamba, Gated DeltaNet, KDA, short convolutions, lightning attention), and the dtypes each engine keeps those
states in. A state's element counts come from its kind's serving_state(m, tp) (calculator/model/architectures/); how
vLLM and SGLang lay the states out beside the KV cache is calculator/engines/vllm_kv.py and sglang.py.

Sources: vLLM 0.33 model_executor/layers/mamba/
mamba_utils.py MambaStateDtypeCalculator and model_executor/models/config.py; SGLang 0.5.23 configs/mamba_utils.py
mamba2_state_dtype.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from calculator.core.dtypes import nbytes
from calculator.core.errors import InputError
from calculator.model import architectures

# vLLM mamba_utils.py short_conv_state_dtype / linear_attention_state_dtype: one state, in mamba_cache_dtype
SINGLE_STATE_KINDS = ("short_conv", "lightning")
# a kind's own recurrent-state dtype when mamba_ssm_cache_dtype is "auto" (vLLM kda_state_dtype: fp32), unless its
# module says (SERVING_RECURRENT_DTYPE)
KIND_SSM_DEFAULTS = {"kda": "fp32"}
# vLLM model_executor/models/config.py, when mamba_ssm_cache_dtype is "auto":
#   NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype: the config's mamba_ssm_cache_dtype, else float32;
#   Qwen3_5ForConditionalGenerationConfig.verify_and_update_config: the config's mamba_ssm_dtype when present
#   (every released Qwen3.5 / 3.6 config says float32). SGLang reads mamba_ssm_dtype likewise (mamba2_state_dtype).
NEMOTRON_H_TYPES = ("nemotron_h",)
QWEN3_5_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")


@dataclass(frozen=True)
class LayerSplit:
    """One GPU's decoder layers by what they cache."""

    total: int
    attention: tuple[int, ...]  # layers that cache K/V per token (softmax attention, MLA, DSA, attention beside Mamba)
    sliding: tuple[int, ...]  # of them, those that keep a sliding window
    state: tuple[int, ...]  # layers that keep a state per sequence
    kinds: tuple[str, ...]  # the kinds of the state layers
    indexed: int  # attention layers with a DSA indexer cache
    extra_token_bytes: int  # Σ over them: the indexer keys one token costs as the engines keep them
    indexer_unknown: int  # indexed layers whose engine layout was not read (not counted)

    @property
    def plain(self) -> bool:
        """Every layer caches plain K/V: the engines' original arithmetic applies unchanged."""
        return not self.state and not self.indexed and len(self.attention) == self.total


@lru_cache(maxsize=4096)
def split_layers(m, layers: range) -> LayerSplit:
    """Classify `layers` by their token mixer (ModelSpec.layer_kind; architectures.with_attention). What the model's
    layers give, whatever the workload, so kept: every budget of a planner's grid asks for its stage's."""
    if m.layer_types is None:
        sliding = tuple(i for i in layers if m.layer_is_sliding(i) and m.sliding_window)
        return LayerSplit(len(layers), tuple(layers), sliding, (), (), 0, 0, 0)
    attention, state, kinds, indexed, extra, unknown = [], [], set(), 0, 0, 0
    for i in layers:
        kind = m.layer_kind(i).mixer
        if architectures.with_attention(kind):
            attention.append(i)
            per_token = getattr(architectures.mixer(kind), "vllm_kv_bytes_per_token", None) \
                if kind in architectures.MIXERS else None
            if per_token is not None:
                b = per_token(m)
                indexed += 1
                extra += b or 0
                unknown += b is None
        if kind not in ("attention", "mla", "none") and hasattr(architectures.mixer(kind), "serving_state"):
            state.append(i)
            kinds.add(kind)
        elif kind not in ("attention", "mla", "none") and not architectures.with_attention(kind):
            why = getattr(architectures.mixer(kind), "SERVING_REFUSED", None) or (
                f"serving {architectures.label(kind)} layers is not modelled yet (the kind gives no serving_state)")
            raise InputError("engine", f"{why}: use --engine hf")
    sliding = tuple(i for i in attention if m.layer_is_sliding(i) and m.sliding_window)
    return LayerSplit(len(layers), tuple(attention), sliding, tuple(state), tuple(sorted(kinds)), indexed, extra,
                      unknown)


def state_elements(m, kind: str, tp: int) -> tuple[int, int]:
    """(conv, recurrent) elements one sequence keeps in one layer of `kind` on one TP rank."""
    return architectures.mixer(kind).serving_state(m, tp)


def config_ssm_dtype(m) -> tuple[str | None, str]:
    """(dtype, basis): the checkpoint's own SSM-state dtype where vLLM or SGLang read one (None: none)."""
    given = getattr(m, "mamba_ssm_dtype", None)  # when ModelSpec carries the config's field
    if given:
        return given, "the config's mamba_ssm_dtype"
    if m.model_type in QWEN3_5_TYPES:
        return "fp32", "Qwen3.5's config mamba_ssm_dtype (float32 in every released checkpoint)"
    if m.model_type in NEMOTRON_H_TYPES:
        return "fp32", "Nemotron-H's mamba_ssm_cache_dtype (float32)"
    return None, ""


def _kind_ssm_default(kind: str) -> str | None:
    return getattr(architectures.mixer(kind), "SERVING_RECURRENT_DTYPE", None) or KIND_SSM_DEFAULTS.get(kind)


def vllm_dtypes(m, w, kind: str) -> tuple[str, str, str]:
    """(conv dtype, recurrent dtype, basis) in vLLM: conv = mamba_cache_dtype ("auto": the model dtype); recurrent
    = mamba_ssm_cache_dtype, whose "auto" is the model's override (Nemotron-H, Qwen3.5), else the kind's (KDA fp32),
    else the conv dtype; short conv and lightning keep one state in mamba_cache_dtype (MambaStateDtypeCalculator)."""
    s = w.serving
    conv = w.precision.activations if s.mamba_cache_dtype == "auto" else s.mamba_cache_dtype
    if kind in SINGLE_STATE_KINDS:
        return conv, conv, "one state in mamba_cache_dtype"
    if s.mamba_ssm_cache_dtype != "auto":
        return conv, s.mamba_ssm_cache_dtype, "mamba_ssm_cache_dtype set by you"
    model, basis = config_ssm_dtype(m)
    if model:
        return conv, model, basis
    kind_default = _kind_ssm_default(kind)
    if kind_default:
        return conv, kind_default, f"{architectures.label(kind)}'s own default"
    return conv, conv, "mamba_ssm_cache_dtype auto: the conv state's dtype"


def sglang_dtypes(m, w, kind: str) -> tuple[str, str, str]:
    """(conv dtype, recurrent dtype, basis) in SGLang (configs/mamba_utils.py mamba2_state_dtype): conv =
    SGLANG_MAMBA_CONV_DTYPE (bf16 whatever the model dtype); recurrent fp32, or the config's mamba_ssm_dtype, or
    --mamba-ssm-dtype."""
    s = w.serving
    conv = "bf16" if s.mamba_cache_dtype == "auto" else s.mamba_cache_dtype
    if s.mamba_ssm_cache_dtype != "auto":
        return conv, s.mamba_ssm_cache_dtype, "--mamba-ssm-dtype set by you"
    given = getattr(m, "mamba_ssm_dtype", None) or ("fp32" if m.model_type in QWEN3_5_TYPES else None)
    return conv, given or "fp32", "the config's mamba_ssm_dtype" if given else "SGLang's default fp32"


def layer_state_bytes(m, kind: str, tp: int, conv_dtype: str, ssm_dtype: str) -> int:
    """One sequence's state in one layer of `kind` on one TP rank: conv + recurrent in their dtypes."""
    conv, rec = state_elements(m, kind, tp)
    return nbytes(conv, conv_dtype) + nbytes(rec, ssm_dtype)


def ds_mla_token_bytes(m, kv_dtype: str, plain: int) -> int:
    """MLA bytes of one token in one layer of a DSA model: with an fp8 cache, 512 fp8 NoPE values, one fp32 scale
    per 128 of them and the RoPE part in bf16 (vLLM fp8_ds_mla, flashmla_sparse.py; SGLang's fp8_e4m3 DSA pool,
    kv_cache_configurator.py calculate_mla_kv_cache_dim): 656 B for DeepSeek-V3.2; otherwise `plain`."""
    if kv_dtype != "fp8" or not m.is_mla:
        return plain
    return m.kv_lora_rank + m.kv_lora_rank // 128 * 4 + 2 * m.qk_rope_head_dim


def describe(split: LayerSplit) -> str:
    kinds = " / ".join(architectures.label(k) for k in split.kinds)
    return f"{len(split.attention)} attention + {len(split.state)} {kinds} layers"
