"""Inference memory: (quantized) weights, the KV cache (MHA/GQA/MQA, MLA latent, sliding windows) and the
prefill working set."""
from __future__ import annotations

from functools import lru_cache
from itertools import accumulate

from calculator.core.dtypes import nbytes
from calculator.model import architectures, latent_moe
from calculator.model.spec import ModelSpec

# Per-group scale overhead of quantized weights, bytes per group (QLoRA / GPTQ / OCP MX).
GROUP_SCALE_BYTES: dict[str, float] = {
    "int8": 2.0,  # fp16 scale per group (absmax / zero-point-free int8)
    "int4": 2.5,  # GPTQ/AWQ: fp16 scale + packed 4-bit zero point per group
    "nf4": 4.0,  # bitsandbytes NF4: fp32 absmax per 64-element block (no double quantization)
    "fp4": 1.0,  # MXFP4: one E8M0 scale per 32 elements
    # NVFP4 (ModelOpt; vLLM model_executor/layers/quantization/modelopt.py): packed E2M1 pairs in uint8 and one E4M3
    # scale per 16 (its group_size); the per-tensor fp32 weight_scale_2 and input_scale are not counted (4 B each)
    "nvfp4": 1.0,
}
GROUP_SIZE_DEFAULTS: dict[str, int] = {"nf4": 64, "fp4": 32, "nvfp4": 16}


SERVING_ENGINES = ("vllm", "sglang")


def serving_weight_dtypes(m: ModelSpec, w) -> tuple[str, str]:
    """(decoder linears, routed experts) dtypes of an inference job: the workload's when given; else, under a
    serving engine, the checkpoint's quantization (ModelSpec.checkpoint_weight_dtype: vLLM and SGLang load an FP8 or
    MXFP4 checkpoint as it is stored — vllm/model_executor/layers/quantization/fp8.py Fp8LinearMethod,
    mxfp4.py; sglang/srt/layers/quantization/fp8.py); else the params dtype. transformers' generate() keeps the
    params dtype unless told (whether it keeps a quantized checkpoint quantized depends on the GPU's kernels). A
    weight dtype the workload gives is the routed experts' too unless expert_weight_dtype says otherwise."""
    if not _checkpoint_dtypes_load(w):  # the experts follow a given dtype
        wdt = w.weight_dtype or w.precision.params
        return wdt, w.expert_weight_dtype or wdt
    wdt = getattr(m, "checkpoint_weight_dtype", None) or w.precision.params
    return wdt, w.expert_weight_dtype or getattr(m, "checkpoint_expert_weight_dtype", None) or wdt


def serving_mlp_weight_dtype(m: ModelSpec, w) -> str:
    """The dense MLPs' and shared experts' dtype of an inference job: the decoder linears' (serving_weight_dtypes),
    unless a serving engine loads a checkpoint that stores them otherwise (ModelSpec.checkpoint_mlp_weight_dtype) and
    the workload gives no weight dtype."""
    wdt = serving_weight_dtypes(m, w)[0]
    return (getattr(m, "checkpoint_mlp_weight_dtype", None) or wdt) if _checkpoint_dtypes_load(w) else wdt


def kv_cache_dtype(m, w) -> str:
    """The KV cache dtype a job runs: the workload's, or for "auto" what the runtime picks. vLLM 0.33 and SGLang
    0.5.23 store the cache in FP8 when the checkpoint's ModelOpt quantization config names an FP8 KV cache
    (ModelSpec.checkpoint_kv_dtype: vllm/utils/torch_utils.py resolve_kv_cache_dtype_string ←
    get_kv_cache_quant_algo_string; sglang/srt/mem_cache/kv_cache_dtype.py configure_kv_cache_dtype reading the
    quant config's kv_cache_quant_algo); otherwise, and in transformers' generate() (its DynamicCache holds what
    the attention computes), bf16."""
    if w.kv_dtype != "auto":
        return w.kv_dtype
    if w.mode == "infer" and w.engine in SERVING_ENGINES and getattr(m, "checkpoint_kv_dtype", None):
        return m.checkpoint_kv_dtype
    return "bf16"


def with_kv_dtype(m, w):
    """`w` with kv_dtype as the job runs it (kv_cache_dtype): what the estimate's entries hand on."""
    return w if w.kv_dtype != "auto" else w.model_copy(update={"kv_dtype": kv_cache_dtype(m, w)})


def _checkpoint_dtypes_load(w) -> bool:
    """Whether the checkpoint's stored dtypes price the weights: a serving engine, and no weight dtype given."""
    return not w.weight_dtype and w.mode == "infer" and w.engine in SERVING_ENGINES


def quantized_weight_bytes(n_params: int, dtype: str, group_size: int, method: str = "awq") -> int:
    """Quantized weights: N × bits/8 plus one scale (and zero point) per group of `group_size` elements
    (AWQ/GPTQ int4: fp16 scale + 4-bit zero = 2.5 B per group; GPTQ int8: fp16 scale + 8-bit zero = 3 B;
    absmax int8: 2 B; NF4: 4 B per 64; MXFP4: 1 B per 32). fp8/bf16/fp32: N × bytes."""
    data = nbytes(n_params, dtype)
    if dtype not in GROUP_SCALE_BYTES:
        return data
    group = GROUP_SIZE_DEFAULTS.get(dtype, group_size)
    groups = -(-n_params // group)
    per_group = 3.0 if (dtype == "int8" and method == "gptq") else GROUP_SCALE_BYTES[dtype]
    return data + int(groups * per_group + 0.5)


def gptq_extras(in_rows: int, largest_linear: int, dtype: str) -> tuple[int, int]:
    """GPTQ checkpoints also keep g_idx, an int32 per input row of every quantized linear (4 B × Σ in), and the
    exllama 4-bit kernel one fp16 dequantization buffer of the largest linear per GPU (2 B × in × out; Qwen2.5
    GPTQ-Int4 − AWQ rows match it to ±0.002 GiB, validation/CALIBRATION.md item 2)."""
    return 4 * in_rows, (2 * largest_linear if dtype == "int4" else 0)


def llm_int8_weight_bytes(n_params: int, out_rows: int) -> int:
    """bitsandbytes LLM.int8 weights (Dettmers et al. 2022; bitsandbytes nn/modules.py Int8Params): one int8 per
    weight (CB) and one fp32 absmax per output row (SCB, `int8_vectorwise_quant` row-wise): N + 4 × Σ out. H200,
    Llama-3.1-8B: the loaded model to 1 KiB."""
    return n_params + 4 * out_rows


def llm_int8_mlp_extra(T: int, e: int, h: int, f: int, fp16_model: bool) -> int:
    """What LLM.int8's matmul adds to the prefill MLP peak of a gated MLP (no grad; bitsandbytes 0.50
    autograd/_functions.py MatMul8bitLt, backends/cuda/ops.py). A plain model peaks at the product (activated
    gate, up, product: 3·e·T·f, `prefill_mlp_phase`); LLM.int8 peaks inside the up projection: the activated gate
    (e·T·f), the input quantized to int8 with an fp32 scale per row (T·h + 4·T), the int32 product (4·T·f), its
    fp16 dequantization (`int8_mm_dequant` writes fp16 only: 2·T·f) and, unless the model is fp16, its cast to the
    model dtype (e·T·f). Measured H200, Llama-3.1-8B b = 4, s = 4096 (bf16): 4·T·f + T·h + 4·T, to 0.03%."""
    int8_peak = e * T * f + T * h + 4 * T + 4 * T * f + 2 * T * f + (0 if fp16_model else e * T * f)
    return max(0, int8_peak - 3 * e * T * f)


def kv_bytes_per_token_per_layer(m: ModelSpec, kv_heads: int, dtype: str) -> int:
    """K and V of one token in one layer: 2·kv_heads·head_dim elements (GQA/MQA; Pope et al. 2022);
    MLA caches the latent instead: kv_lora_rank + qk_rope_head_dim elements (DeepSeek-V2 §2.1.2)."""
    if m.is_mla:
        return nbytes(m.kv_lora_rank + m.qk_rope_head_dim, dtype)
    return nbytes(2 * kv_heads * m.head_size, dtype)


def cached_tokens(m: ModelSpec, layer: int, total_tokens: int) -> int:
    """Tokens a layer keeps in its cache: all of them, or at most the window on a sliding-window layer
    (Mistral 7B §2 rolling buffer); none on a layer without softmax attention (its state is per sequence:
    recurrent_state_bytes)."""
    if m.layer_types is not None and not architectures.with_attention(m.layer_kind(layer).mixer):
        return 0
    if m.layer_is_sliding(layer) and m.sliding_window:
        return min(total_tokens, m.sliding_window)
    return total_tokens


@lru_cache(maxsize=256)
def _windowed_layers_before(m: ModelSpec) -> tuple[int, ...]:
    """Prefix counts of the layers whose cache the sliding window caps (cached_tokens)."""
    return (0, *accumulate(bool(m.layer_is_sliding(i) and m.sliding_window) for i in range(m.num_hidden_layers)))


@lru_cache(maxsize=256)
def _attention_layers_before(m: ModelSpec) -> tuple[int, ...]:
    """Prefix counts of the layers with a KV cache: softmax attention (every layer but a hybrid's other mixers)."""
    if m.layer_types is None:
        return tuple(range(m.num_hidden_layers + 1))
    if m.gemma_next is not None:  # hook: Gemma 3n / 4's KV-shared layers keep no cache of their own
        return (0, *accumulate(mode != "reuse" for mode in m.gemma_next.kv_modes))
    return (0, *accumulate(architectures.with_attention(m.layer_kind(i).mixer) for i in range(m.num_hidden_layers)))


def attention_layers(m: ModelSpec, layers: range) -> int:
    """The layers of `layers` that keep a KV cache."""
    before = _attention_layers_before(m)
    return before[max(layers.stop, layers.start)] - before[layers.start]


def kv_cache_bytes(m: ModelSpec, layers: range, batch: int, total_tokens: int, kv_heads: int, dtype: str) -> int:
    """KV cache of the given layers: Σ_layers batch × cached tokens × per-token bytes."""
    if m.gemma_next is not None:  # hook: Gemma 3n / 4: per-layer dims, KV-shared layers cache nothing, W − 1 kept
        return architectures.gemma_next.generate_kv_bytes(m, layers, batch, total_tokens, kv_heads, nbytes(1, dtype))
    if m.swa_num_key_value_heads is not None:  # hook: sliding layers with their own head layout (MiMo-V2-Flash)
        return layout_kv_bytes(m, layers, batch, total_tokens, kv_heads, dtype)
    per_token = kv_bytes_per_token_per_layer(m, kv_heads, dtype)
    if type(per_token) is int and isinstance(layers, range) and layers.step == 1:  # the same sum, in integers
        before = _windowed_layers_before(m)
        windowed = before[max(layers.stop, layers.start)] - before[layers.start]
        full = attention_layers(m, layers) - windowed
        window = min(total_tokens, m.sliding_window) if windowed else 0
        return batch * per_token * (full * total_tokens + windowed * window)
    return sum(batch * cached_tokens(m, i, total_tokens) * per_token for i in layers)


def layout_kv_bytes(m: ModelSpec, layers: range, batch: int, total_tokens: int, kv_heads: int, dtype: str) -> int:
    """generate()'s K/V cache when sliding layers have their own key/value heads (ModelSpec.swa_num_key_value_heads):
    Σ_layers b · cached · kv_i · (head_dim + v_head_dim) · bytes, kv_i on this rank scaled from the full layers'
    `kv_heads` (at least 1); a full layer keeps every token (DynamicLayer), a sliding one at most W − 1
    (DynamicSlidingWindowLayer keeps sliding_window − 1: transformers cache_utils.py)."""
    total = 0
    for i in layers:
        sliding = m.layer_is_sliding(i)
        kv = max(m.swa_num_key_value_heads * kv_heads // m.kv_heads, 1) if sliding else kv_heads
        tokens = min(total_tokens, m.sliding_window - 1) if sliding else total_tokens
        total += batch * tokens * nbytes(kv * (m.head_size + m.v_head_size), dtype)
    return total


def recurrent_state_bytes(m: ModelSpec, layers: range, batch: int, e: float) -> int:
    """What generate() keeps per sequence in the layers whose token mixer is not softmax attention (conv and
    recurrent states: calculator/model/architectures/), whatever the sequence length: Σ_kinds L_kind × state."""
    if m.layer_types is None:
        return 0
    kinds = architectures.stage_kinds(m, layers)
    if kinds is not None:
        total = 0
        for kind, n, _ in kinds:
            one = architectures.mixer(kind).state_bytes(m, batch, e)
            if type(one) is not int:  # fractional bytes: the layer-by-layer float sum below
                break
            total += n * one
        else:
            return total
    total = 0
    for i in layers:
        mixer = m.layer_kind(i).mixer
        if mixer not in ("attention", "mla", "none"):
            total += architectures.mixer(mixer).state_bytes(m, batch, e)
    return total


def mixers_prefill_transient(m: ModelSpec, layers: range, b: int, s: int, e: int) -> int:
    """The largest prefill transient one layer of `layers` adds to generate()'s attention phase (a kind's
    prefill_transient, e.g. DSA's indexer scores in transformers; 0 for kinds without one)."""
    return max((getattr(architectures.mixer(k), "prefill_transient", lambda *a: 0)(m, b, s, e)
                for k in architectures.stage_mixers(m, layers)), default=0)


def extra_kv_bytes(m: ModelSpec, layers: range, batch: int, total_tokens: int, dtype: str) -> int:
    """What the kinds that run on top of attention cache per token beyond its K/V (DSA's indexer keys), and the whole
    cache of a kind whose cache is not K/V per token (DeepSeek-V4's window + compressed entries), over `layers`
    (calculator/model/architectures/: kv_bytes_per_token, cache_bytes): per kind, b × Σ_layers cached tokens ×
    bytes per token (cached_tokens: every token, the window on a capped layer, none without attention) + L_kind ×
    its whole cache."""
    if m.layer_types is None:
        return 0
    kinds = architectures.stage_kinds(m, layers)
    if kinds is not None:
        total = 0
        for name, n, windowed in kinds:
            kind = architectures.mixer(name)
            per_token = getattr(kind, "kv_bytes_per_token", None)
            if per_token is not None:
                one = per_token(m, dtype)
                if type(one) is not int:  # fractional bytes: the layer-by-layer float sum below
                    break
                if architectures.with_attention(name):
                    window = min(total_tokens, m.sliding_window) if windowed else 0
                    total += batch * one * ((n - windowed) * total_tokens + windowed * window)
            if hasattr(kind, "cache_bytes"):
                one = kind.cache_bytes(m, batch, total_tokens, dtype)
                if type(one) is not int:
                    break
                total += n * one
        else:
            return total
    total = 0
    for i in layers:
        mixer = m.layer_kind(i).mixer
        if mixer not in ("attention", "mla", "none"):
            kind = architectures.mixer(mixer)
            per_token = getattr(kind, "kv_bytes_per_token", None)
            if per_token is not None:
                total += batch * cached_tokens(m, i, total_tokens) * per_token(m, dtype)
            if hasattr(kind, "cache_bytes"):
                total += kind.cache_bytes(m, batch, total_tokens, dtype)
    return total


def prefill_mlp_phase(m: ModelSpec, T: int, e: int, h: int, f: int, rope: int, etp: int = 1) -> int:
    """Live at a layer's MLP during prefill (no autograd): the embeddings, the layer input, the residual and the
    norm output (4·e·T·h), RoPE tables (2·T·d·e), and the MLP's live intermediates: gated act, up and product
    (3·e·T·f) or plain fc1 and act (2·e·T·f); MoE: per routed copy (S = T·k) the gathered input, gate_up, act,
    product and output, e·S·(4·f + 2·h) (traced: tests/golden)."""
    base = 4 * e * T * h + 2 * T * rope * e
    if m.is_moe:
        S = T * m.num_experts_per_tok
        fe = m.expert_intermediate_size // etp
        if m.family == "deepseek":
            # peaks where routed outputs return to token order: gathered input and expert output (e·S·h each),
            # the output times the fp32 routing weights and its reordered copy (4·S·h each)
            return base + (2 * e + 8) * S * h
        # a latent MoE's pairs at its width, its latent input and output beside them (calculator/model/latent_moe.py)
        return base + e * S * (4 * fe + 2 * h) + 4 * T * m.num_experts + latent_moe.prefill_change(m, T, S, h, e)
    if m.hidden_act == "gelu_new":  # GPT-2's Python tanh-GELU keeps ~4.5 f-wide temporaries (traced)
        return base + 9 * e * T * f // 2
    return base + (3 if m.gated_mlp else 2) * e * T * f


def prefill_attention_phase(m: ModelSpec, T: int, e: int, h: int, qd: int, kvd: int, a: int, b: int, s: int,
                            s_kv: int, rope: int, eager: bool) -> int:
    """Live at a layer's attention during prefill: three h-wide residual tensors, q/k/v (flash: unexpanded, plus
    the output and fp32 logsumexp); eager: q and the expanded k/v, the scores in model dtype, their fp32 softmax
    input and output (e + 8 bytes per score) and the e·b·s·s causal mask (traced: tests/golden)."""
    base = 3 * e * T * h + 2 * T * rope * e
    if eager:
        # GPT-2 keeps its scores and an fp32 softmax output only (2·e + 2 B per score); GPT-OSS's softmax over
        # [scores | sink] stays in the model dtype: scores + mask, the concatenation and its shifted copy (3·e)
        per_score = 2 * e + 2 if m.family == "gpt2" else (3 * e if m.attention_sinks else e + 8)
        return base + 3 * e * T * qd + per_score * a * b * s * s_kv + e * b * s * s_kv
    return base + e * T * (2 * qd + 2 * kvd) + 4 * a * T


def decode_working_set(m: ModelSpec, b: int, e: int, h: int, f: int, vocab: int) -> int:
    """Live during one decode step beyond the cache: a token's layer tensors and its fp32 logits, b·(4·e·h +
    3·e·f + V·(e + 4))."""
    width = m.expert_intermediate_size * m.num_experts_per_tok if m.is_moe else f
    return b * (4 * e * h + 3 * e * width + vocab * (e + 4))
