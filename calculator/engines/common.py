"""What every serving engine shares: the device total the engine sees, the weights it loads, the KV bytes of one
token per layer on one GPU, and the result object (`Serving`) that `Estimate.serving` carries."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from calculator.core.errors import InputError
from calculator.memory import inference as inf
from calculator.core.dtypes import nbytes
from calculator.model.parameters import count_parameters, kind_counts
from calculator.model.spec import ModelSpec
from calculator.memory.parallel import StageShard, kv_heads_per_rank
from calculator.engines import support, towers

GiB = 2**30
# cudaMemGetInfo's total is below nvidia-smi's memory.total: 0.47 GiB on H100 (vLLM logs, 79.18 of 79.65 GiB),
# 0.60 GiB on H200 (measured). Where the catalogue has no measured figure, this gap is assumed.
ASSUMED_DRIVER_GAP = 480 * 2**20


def device_visible_bytes(gpu) -> tuple[int, str]:
    """(bytes, basis): the total CUDA reports to a process, what vLLM's gpu_memory_utilization multiplies."""
    if gpu is None:
        raise ValueError("no GPU")
    if getattr(gpu, "pytorch_capacity_bytes", None):
        return gpu.pytorch_capacity_bytes, gpu.pytorch_capacity_basis or "measured"
    return gpu.memory_bytes - ASSUMED_DRIVER_GAP, (f"{gpu.name}: nvidia-smi total − 480 MiB (assumed: the gap "
                                                   "measured on H100/H200; no figure of this GPU)")


def rope_cache_bytes(m: ModelSpec, engine: str = "vllm") -> int:
    """RoPE cos/sin caches both engines keep on the GPU, rows × rotary_dim in the model dtype, one per distinct
    rotary embedding (vllm/model_executor/layers/rotary_embedding/__init__.py get_rope keeps one per parameter set;
    base.py: cos_sin_cache [rows, rotary_dim]; sglang/srt/layers/rotary_embedding likewise): rope_cache_rows. Learned
    position embeddings have none, nor a model without RoPE (VariantSpec.rope False: vLLM's OlmoHybridAttention
    builds no rotary_emb when rope_theta is None)."""
    if m.learned_position_embeddings or not m.max_position_embeddings or (m.variant is not None and not m.variant.rope):
        return 0
    rotary = m.qk_rope_head_dim if m.is_mla else m.head_size
    rows = rope_cache_rows(m, engine)
    if m.gemma_next is not None and len(rows) == 2:  # Gemma 3n / 4: each layer type's cache spans its own head dim
        widths = [next((d for d, t in zip(m.gemma_next.head_dims, m.layer_types or ()) if t == kind), rotary)
                  for kind in ("sliding_attention", "full_attention")]
        return (rows[0] * widths[0] + rows[1] * widths[1]) * 2
    return sum(rows) * rotary * 2


def rope_cache_rows(m: ModelSpec, engine: str) -> tuple[int, ...]:
    """Rows of each cache: max_position_embeddings, × the factor for linear scaling, whose cache spans the scaled
    length (both engines' linear_scaling_rope.py / base.py: max_position_embeddings × scaling_factor), and for
    dynamic NTK in SGLang (rope_variant.py; vLLM 0.33's dynamic_ntk_scaling_rope.py keeps max_position rows); YaRN
    builds its cache over original_max_position_embeddings × factor (yarn_scaling_rope.py / yarn.py).
    Gemma 3 builds two: its sliding layers' (rope_local_base_freq, default) and its full layers' (the config's set)
    — vLLM gemma3.py takes each layer type's rope_parameters, SGLang gemma3_causal.py passes rope_type "default" to
    both; Gemma 3n and 4 likewise, each over its layer type's head dim (Gemma 4's global proportional RoPE rotates
    its whole 512-wide head: vLLM gemma4_rope.py, SGLang rope_variant.py Gemma4RotaryEmbedding)."""
    n = m.max_position_embeddings or 0
    scaled = n
    if m.rope_sets and not m.rope_nested:  # one flat set
        kind, factor, original = m.rope_sets[0]
        if factor and (kind == "linear" or (kind == "dynamic" and engine == "sglang")):
            scaled = int(n * factor)
        elif factor and original and kind in ("yarn", "deepseek_yarn"):  # original × factor (yarn.py, both)
            scaled = int(original * factor)
    if ("gemma3" in m.model_type or m.gemma_next is not None) and m.sliding_window:
        return (n, scaled if engine == "vllm" else n)
    return (scaled,)


# RoPE types whose max_position_embeddings already counts the scaling, so vLLM does not multiply it by `factor`
# (vllm 0.33 config/model.py _get_and_verify_max_len); and model types whose length is scaled already (Gemma 3)
VLLM_UNSCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def vllm_derived_max_len(m: ModelSpec) -> int | None:
    """The longest max_model_len vLLM accepts without VLLM_ALLOW_LONG_MAX_MODEL_LEN (config/model.py
    _get_and_verify_max_len; transformers_utils/model_arch_config_convertor.py derive_max_model_len_and_key): the
    config's length keys, model_max_length taking over when given, × the factor of a RoPE type that scales it
    (none for Gemma 3); None when the config gives no length (vLLM then takes any max_model_len given)."""
    derived = m.model_max_length or m.max_position_embeddings
    if derived is None:
        return None
    factor = 1.0
    if m.rope_sets and "gemma3" not in m.model_type:
        for kind, f, _ in m.rope_sets:
            if kind not in VLLM_UNSCALED_ROPE and f is not None:
                factor = f
    return int(derived * factor)


def sglang_derived_context(m: ModelSpec) -> int | None:
    """The longest --context-length SGLang accepts without SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN (configs/
    model_config.py _derive_context_length; utils/hf_transformers/common.py get_context_length): model_max_length
    before max_position_embeddings, × a flat rope_scaling's factor unless it names original_max_position_embeddings
    or is llama3; None when the config gives no length (SGLang: 2048). A nested one has no top-level factor, and
    transformers 5 (SGLang 0.5.23 pins 5.19) nests it per layer type for the models that alternate sliding and
    full attention (Gemma 3, OLMo 3, MiMo-V2, ...: their configuration classes' rope standardisation)."""
    derived = m.model_max_length or m.max_position_embeddings
    if derived is None:
        return None
    factor = 1.0
    per_type = m.rope_nested or len(set(m.layer_types or ())) > 1
    if len(m.rope_sets) == 1 and not per_type:
        kind, f, original = m.rope_sets[0]
        if f is not None and not original and kind != "llama3":
            factor = f
    return int(factor * derived)


def derived_context(m: ModelSpec, engine: str) -> int | None:
    """The longest max_model_len `engine` (vllm / sglang) accepts from the model's config."""
    return vllm_derived_max_len(m) if engine == "vllm" else sglang_derived_context(m)


def check_context(given: int | None, derived: int | None, engine: str) -> None:
    """Refuse a max_model_len above the engine's derived length, as the engine does at start-up."""
    if given is None or derived is None or given <= derived:
        return
    flag, env = (("--max-model-len", "VLLM_ALLOW_LONG_MAX_MODEL_LEN") if engine == "vllm" else
                 ("--context-length", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"))
    raise InputError("serving.max_model_len",
                     f"{given:,} tokens is more than the {derived:,} this model's config allows "
                     f"(max_position_embeddings / model_max_length and its RoPE scaling): {ENGINE_NAMES[engine]} "
                     f"refuses to start with {flag} {given} unless {env}=1, as positions past it are untrained. "
                     f"Set the maximum length to {derived:,} or less")


ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def check_request_length(w, configured: int, engine: str) -> None:
    """Refuse a request the engine rejects at its length: vLLM a prompt longer than max_model_len
    (v1/engine/input_processor.py _validate_prompt_len; a longer prompt + output has its output clamped to
    max_model_len − prompt instead, entrypoints/serve/utils/api_utils.py get_max_tokens); SGLang a prompt of
    context_len tokens or more, or prompt + max_new_tokens above it (managers/tokenizer_manager.py
    _validate_one_request, validate_total_tokens on, no auto-truncation by default)."""
    if engine == "vllm":
        bad, what = w.seq_len > configured, f"a prompt of {w.seq_len:,} tokens"
    else:
        bad = w.seq_len >= configured or w.seq_len + w.gen_tokens > configured
        what = f"a request of {w.seq_len:,} prompt + {w.gen_tokens:,} generated tokens"
    if not bad:
        return
    given = w.serving.max_model_len is not None
    raise InputError("seq_len", f"{ENGINE_NAMES[engine]} rejects {what} with max_model_len {configured:,}"
                                f"{' (set by you)' if given else ' (the most the model config allows)'}: shorten "
                                "the prompt" + (" or the generated tokens" if engine == "sglang" else "")
                                + (", or raise the maximum length" if given else ""))


def check_engine_context(m: ModelSpec, w) -> None:
    """support.check, check_context and check_request_length for the workload's serving engine, if any (the
    planner asks them once before its layouts); and, for a model only the serving engines run as described
    (ModelSpec.served_only), that the job is served by one."""
    from calculator.memory.parallel import check_served_only
    check_served_only(m, w)
    if w.mode == "infer" and w.engine in ENGINE_NAMES:
        support.check(m, w)  # a model the engine cannot load
        derived = derived_context(m, w.engine)
        check_context(w.serving.max_model_len, derived, w.engine)
        if w.serving.max_model_len or derived:
            check_request_length(w, w.serving.max_model_len or derived, w.engine)


def engine_weight_bytes(m: ModelSpec, w, shard: StageShard, attention_dp: int = 1) -> int:
    """Weights one GPU loads: quantized decoder linears (routed experts in expert_weight_dtype when given) and the
    rest in the params dtype, as calculator.memory.inference prices them, plus the RoPE cache. SGLang's DP attention
    shards attention over tp / attention_dp ranks only, so each GPU holds attention_dp times its share of what TP
    splits (what every TP rank keeps whole, LayerParams.tp_replicated, it holds once either way). Modules the
    checkpoint builds but never runs are not loaded: vllm/model_executor/models/mimo.py maps "model.mtp_layers." to
    nothing, sglang/srt/models/mimo.py skips "mtp_layers" weights (ParameterCounts.idle), unless the engine builds
    them too (VariantSpec.idle_served: Chameleon's VQ tokenizer, run by both engines' Transformers backend)."""
    wdt, edt = inf.serving_weight_dtypes(m, w)
    mdt = inf.serving_mlp_weight_dtype(m, w)
    experts = shard.experts
    mlp = mlp_linear(m, shard.first_layer, shard.last_layer, w.parallel.tp) if mdt != wdt else 0
    other_linear = shard.layer_linear - experts - mlp
    served = m.variant is not None and m.variant.idle_served
    rest = shard.total - shard.layer_linear - (count_parameters(m).idle if shard.has_embedding and not served else 0)
    total = (inf.quantized_weight_bytes(other_linear, wdt, w.quant_group_size, w.quant_method)
             + inf.quantized_weight_bytes(mlp, mdt, w.quant_group_size, w.quant_method)
             + inf.quantized_weight_bytes(experts, edt, w.quant_group_size, w.quant_method)
             + nbytes(rest, w.precision.params))
    if attention_dp > 1:
        layers = count_parameters(m).layers[shard.first_layer:shard.last_layer]
        attn = sum(-(-(layer.attention - layer.tp_replicated) // w.parallel.tp) for layer in layers)  # replicated: whole
        total += inf.quantized_weight_bytes(attn * (attention_dp - 1), wdt, w.quant_group_size, w.quant_method)
    # cos/sin caches per process, shared by the layers; a vision-language model's tower on the first stage
    return total + rope_cache_bytes(m, w.engine) + towers.tower_weight_bytes(m, w, shard, attention_tp(w))


def mlp_linear(m: ModelSpec, first: int, last: int, tp: int) -> int:
    """The dense MLPs' and shared experts' parameters of layers [first, last) on one of `tp` ranks (what a
    checkpoint may store in their own dtype: ModelSpec.checkpoint_mlp_weight_dtype)."""
    return sum(n * -(-(layer.mlp + layer.shared_experts) // tp)
               for layer, n in kind_counts(count_parameters(m).layers[first:last]))


def kv_token_bytes(m: ModelSpec, kv_heads: int, kv_dtype: str) -> int:
    """K and V of one token in one layer on one GPU (GQA heads per rank; MLA: the latent, replicated)."""
    return inf.kv_bytes_per_token_per_layer(m, kv_heads, kv_dtype)


def layer_kinds(m: ModelSpec, layers: range) -> tuple[int, int]:
    """(full-attention layers, sliding-window layers) among `layers`."""
    sliding = sum(1 for i in layers if m.layer_is_sliding(i) and m.sliding_window)
    return len(layers) - sliding, sliding


def attention_tp(w) -> int:
    return max(1, w.parallel.tp // w.serving.attention_dp)


def sglang_server(w) -> tuple[int, int]:
    """(--tp-size, --attn-dp-size) of the SGLang server that runs this layout. SGLang keeps a server's experts inside
    its TP group (sglang 0.5.23 arg_groups/parallel_hook.py: `ep_size * moe_dp_size <= tp_size`), so a layout whose
    EP group (ep × expert TP GPUs) is wider than its TP runs as one server of --tp-size ep·etp with DP attention over
    ep·etp / tp ranks, each keeping the layout's attention TP and 1/ep of the experts: the layout's weights and KV
    per GPU. Otherwise the layout's TP and the --attn-dp-size given."""
    p, given = w.parallel, w.serving.attention_dp
    group = p.ep * p.expert_tp
    if group <= p.tp:
        return p.tp, given
    return group, max(given, group // p.tp)


def kv_heads_on_gpu(m: ModelSpec, w) -> int:
    return kv_heads_per_rank(m, attention_tp(w))


@dataclass(frozen=True)
class StatePool:
    """A hybrid model's per-sequence states (Mamba, Gated DeltaNet, ... layers) on one GPU, as the engine keeps them.
    A slot is one sequence's state over this GPU's state layers. vLLM has no pool of its own: a slot is one block in
    each state group, drawn from the KV blocks; SGLang sizes a pool of slots beside the token pool."""

    engine_rule: str  # the rule that sized it, with its source
    layers: int  # layers with a state on this GPU
    attention_layers: int  # layers with a KV cache on this GPU
    kinds: tuple[str, ...]
    conv_dtype: str
    ssm_dtype: str
    layer_bytes: int  # one sequence's conv + recurrent state in one layer (unpadded)
    slot_bytes: int  # one slot as allocated (vLLM: a block in each state group, padded to the attention page)
    slots_per_seq: int  # slots one running request holds (vLLM: blocks per state group; SGLang: the mamba ratio)
    slots: int  # SGLang: max_mamba_cache_size; vLLM: the slots max_running_seqs requests hold
    pool_bytes: int  # the memory those slots take (SGLang: its pool with the padding slot)
    max_running_seqs: int  # requests of tokens_per_seq the engine runs at once, states included


@dataclass(frozen=True)
class Serving:
    """A serving engine's memory budget on one GPU and the KV pool it leaves, with the engine's own capacity
    figures (the lines it logs at start-up). Bytes are integers; `*_gib` helpers are for display."""

    engine: str
    version: str
    memory_fraction: float
    memory_fraction_rule: str  # how the fraction was chosen (a default's rule, or "set by you")
    device_visible_bytes: int
    budget_bytes: int  # what the engine may use: fraction × device total (SGLang: × free memory before load)
    weights_bytes: int
    activation_peak_bytes: int  # vLLM: its profile run's peak; SGLang: the reserve its rule sets aside
    non_torch_bytes: int
    cuda_graph_bytes: int
    kv_pool_bytes: int
    kv_available_bytes: int  # what the budget leaves for the pool, negative when the engine refuses to start
    kv_bytes_per_token: int  # one token, every layer this GPU holds
    block_size: int
    kv_pool_blocks: int
    kv_pool_tokens: int
    tokens_per_seq: int  # --seq + --gen (vLLM: at most max_model_len, its output clamped)
    max_concurrent_seqs: float  # sequences of tokens_per_seq the pool holds at once (per engine replica)
    configured_max_model_len: int
    max_model_len: int  # the largest max_model_len the engine starts with
    starts: bool  # whether the engine starts with configured_max_model_len
    start_error: str
    max_num_batched_tokens: int
    max_num_seqs: int
    prefix_caching: bool
    cuda_graph_sizes: int
    cuda_graphs_in_budget: bool  # whether the CUDA-graph estimate was taken from the pool (vLLM >= 0.21)
    layout: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    states: StatePool | None = None  # a hybrid model's per-sequence states (None: every layer caches K/V)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["notes"] = list(self.notes)
        if self.states is None:
            del out["states"]  # the keys of a model without state layers stay as they were
        else:
            out["states"]["kinds"] = list(self.states.kinds)
        return out
