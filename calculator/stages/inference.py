"""One pipeline stage of transformers' generate(): weights as loaded + the KV cache of prompt and generated tokens
+ max(prefill working set, decode working set) (calculator.stages.estimate assembles the stages)."""


from calculator.memory import activations as act
from calculator.model import architectures
from calculator.memory import inference as inf
from calculator.core.dtypes import nbytes
from calculator.model.spec import ModelSpec
from calculator.memory.parallel import (StageShard, kv_heads_per_rank)
from calculator.model import parameters as params
from calculator.core.result import StageEstimate


from calculator.stages import vision
from calculator.stages.terms import TermList, dtype_bytes_text, add_cublas_workspaces, finish_stage


def inference_stage(m: ModelSpec, w, shard: StageShard, gpu) -> StageEstimate:
    w = inf.with_kv_dtype(m, w)  # kv_dtype "auto" as the runtime picks it (memory.inference.kv_cache_dtype)
    w = vision.lm_workload(m, w)  # a vision-language model's image tokens lengthen the prompt
    p, t = w.parallel, TermList()
    wdt = w.weight_dtype or w.precision.params
    layers = range(shard.first_layer, shard.last_layer)
    quantizable = shard.layer_linear  # attention, MLP and expert weights; embeddings, head, norms stay
    rest = shard.total - quantizable
    qbytes = inf.quantized_weight_bytes(quantizable, wdt, w.quant_group_size, w.quant_method)
    llm_int8 = w.quant_method == "llm-int8" and wdt == "int8"
    if llm_int8:  # bitsandbytes: an fp32 scale per output row instead of per group
        out_rows = params.layer_linear_out_rows(m) * len(layers) // (m.num_hidden_layers * p.tp)
        qbytes = inf.llm_int8_weight_bytes(quantizable, out_rows)
    rbytes = nbytes(rest, w.precision.params)
    gptq = w.quant_method == "gptq" and wdt in ("int4", "int8")
    if gptq:
        in_rows = params.layer_linear_in_rows(m) * len(layers) // (m.num_hidden_layers * p.tp)
        g_idx, kernel_buffer = inf.gptq_extras(in_rows, params.largest_layer_linear(m) // p.tp, wdt)
        qbytes += g_idx
    t.add("weights", "weights", f"Weights ({wdt} layers, {w.precision.params} embeddings/norms)", qbytes + rbytes,
          "N_linear × b_w (+ scales per group) + N_other × b_param",
          ("{:,} × {} (+ scales) + {:,} × {}", quantizable, dtype_bytes_text(wdt), rest, dtype_bytes_text(w.precision.params)),
          "llm-int8" if llm_int8 else ("quantization" if wdt in inf.GROUP_SCALE_BYTES else "transformer-math"))
    extra = 4 - nbytes(1, w.precision.params)
    if m.compressed is not None and extra > 0:  # DeepSeek-V4: from_pretrained keeps some modules in fp32
        fp32 = architectures.compressed.fp32_parameters(m, layers, shard.has_head)
        t.add("weights.fp32", "weights", "fp32-kept weights (hyper-connections, sinks, position biases, norms)",
              fp32 * extra, "N_fp32 × (4 − b_param)", ("{:,} × {} B", fp32, extra), "compressed-attention",
              "DeepseekV4PreTrainedModel._keep_in_fp32_modules_strict: counted above at b_param, 4 B each")
    vision.inference_weights(t, m, w, shard)  # the tower's weights, unquantized
    kvh = kv_heads_per_rank(m, p.tp)
    total_tokens = w.seq_len + w.gen_tokens
    kv = inf.kv_cache_bytes(m, layers, w.micro_batch, total_tokens, kvh, w.kv_dtype)
    per_tok = inf.kv_bytes_per_token_per_layer(m, kvh, w.kv_dtype)
    if m.is_mla:
        formula = "b × tokens × L_stage × (kv_lora_rank + rope_dim) × b_kv"
        subst = ("{} × {:,} × {} × ({} + {}) × {}", w.micro_batch, total_tokens, len(layers), m.kv_lora_rank,
                 m.qk_rope_head_dim, dtype_bytes_text(w.kv_dtype))
        src = "mla"
    else:
        formula = "b × Σ_layers min(tokens, window) × 2 × kv_heads × head_dim × b_kv"
        subst = ("{} × {:,} tokens × {} layers × {:,} B/token/layer{}", w.micro_batch, total_tokens, len(layers),
                 per_tok, "")
        if any(m.layer_is_sliding(i) for i in layers):
            subst = subst[:-1] + (f" (sliding layers capped at {m.sliding_window:,})",)
            src = "sliding-window"
        else:
            src = "kv-cache"
    n_attn = inf.attention_layers(m, layers)
    extra_kv = inf.extra_kv_bytes(m, layers, w.micro_batch, total_tokens, w.kv_dtype)
    if extra_kv:  # DSA's indexer keys beside the latent
        formula += " + indexer keys (b × tokens × L_indexed × index_head_dim × b_kv)"
        subst = (subst[0] + " + {:,} B", *subst[1:], extra_kv)
    if n_attn != len(layers):  # a hybrid: only its attention layers cache tokens
        formula = formula.replace("L_stage", "L_attention").replace("Σ_layers", "Σ_attention layers")
        subst = (subst[0].replace("{} layers", "{} attention layers"), *subst[1:3], n_attn, *subst[4:]) \
            if not m.is_mla else (subst[0], subst[1], subst[2], n_attn, *subst[4:])
    if m.swa_num_key_value_heads is not None:  # MiMo-V2-Flash: per layer type its KV heads (inf.layout_kv_bytes)
        formula = "b × Σ_layers min(tokens, W − 1 on sliding layers) × kv_heads(layer) × (head_dim + v_head_dim) × b_kv"
        subst = ("{} × {:,} tokens, full layers {} KV heads, sliding {} (window {:,}), {} + {} wide", w.micro_batch,
                 total_tokens, kvh, max(m.swa_num_key_value_heads * kvh // m.kv_heads, 1), m.sliding_window,
                 m.head_size, m.v_head_size)
    if m.compressed is not None:  # DeepSeek-V4: the whole cache is its compressed attention's (compressed.py)
        formula = ("b × Σ_layers (min(tokens, W − 1) window keys + ⌊tokens / r⌋ compressed entries + tokens mod r "
                   "buffered) × head_dim (+ CSA indexer) × b_kv")
        subst, src = ("{} × {:,} tokens × {} layers (window {:,}): {:,} B", w.micro_batch, total_tokens, len(layers),
                      m.compressed.window, extra_kv), "compressed-attention"
    kv += extra_kv
    t.add("kv_cache", "kv_cache", f"KV cache ({w.kv_dtype})", kv, formula, subst, src)
    e_model = nbytes(1, w.precision.activations)
    state = inf.recurrent_state_bytes(m, layers, w.micro_batch, e_model)
    if state:
        kinds = {k: n for k, n in architectures.stage_mixers(m, layers).items()
                 if architectures.mixer(k).state_bytes(m, 1, e_model)}
        names = " + ".join(architectures.label(k) for k in kinds)
        t.add("kv_cache.state", "kv_cache", f"{names} state (per sequence)", state,
              "b × Σ_kinds L_kind × state bytes per sequence (conv + recurrent)",
              ("{} × ({}) B", w.micro_batch, " + ".join(
                  f"{n} × {architectures.mixer(k).state_bytes(m, 1, e_model):,}" for k, n in kinds.items())),
              architectures.mixer(next(iter(kinds))).SOURCE,
              "fixed size: grows with the batch, not with the tokens (transformers LinearAttentionLayer)")
    if gptq and kernel_buffer:
        t.add("transient.gptq_buffer", "transient", "GPTQ 4-bit kernel dequantization buffer", kernel_buffer,
              "2 B × max(in × out)", ("2 × {:,}", kernel_buffer // 2), "quantization",
              "exllama keeps one fp16 buffer of the largest quantized linear per GPU")
    d = act.dims(m, w)
    rope = 0 if m.learned_position_embeddings else (m.qk_rope_head_dim if m.is_mla else m.head_size)
    mlp = inf.prefill_mlp_phase(m, d.T, d.e, m.hidden_size, d.f, rope, p.expert_tp)
    if llm_int8 and m.gated_mlp and not m.is_moe:
        mlp += inf.llm_int8_mlp_extra(d.T, d.e, m.hidden_size, d.f, w.precision.activations == "fp16")
    attn = inf.prefill_attention_phase(m, d.T, d.e, m.hidden_size, d.qd, d.kvd, d.a, d.b, d.s, d.s_kv, rope,
                                       w.attention == "eager" or m.compressed is not None)  # DeepSeek-V4: eager only
    attn += inf.mixers_prefill_transient(m, layers, d.b, d.s, d.e)  # e.g. DSA's indexer scores in transformers
    # The prefill peak is at the last layer of the stage, with the whole prompt cached in every layer (sliding
    # layers too: the window is applied at the first decode step); the decode peak is the final cache.
    prompt_kv = n_attn * w.micro_batch * w.seq_len * per_tok + state
    prefill_peak = prompt_kv + max(mlp, attn)
    kv += state
    # the legacy tuple cache (VariantSpec.legacy_kv_cache): the previous step's cache, alive until the step ends
    prev = inf.kv_cache_bytes(m, layers, w.micro_batch, total_tokens - 1, kvh, w.kv_dtype) if (
        m.variant is not None and m.variant.legacy_kv_cache and w.gen_tokens) else 0
    decode_ws = inf.decode_working_set(m, d.b, d.e, m.hidden_size, d.f, m.vocab_size // p.tp)
    decode_peak = kv + prev + decode_ws
    prev = prev if decode_peak > prefill_peak else 0
    if prev:
        t.add("kv_cache.previous", "kv_cache", f"Previous step's KV cache ({w.kv_dtype}, legacy tuple cache)", prev,
              "b × (tokens − 1) × L × 2 × kv_heads × head_dim × b_kv",
              ("{} × {:,} tokens × {} layers × {:,} B/token/layer", w.micro_batch, total_tokens - 1, len(layers),
               per_tok), "kv-cache", "each layer returns torch.cat((past, new)) while the step's input cache stays "
              "referenced until its forward ends (remote-code Qwen v1)")
    extra = max(prefill_peak, decode_peak) - kv - prev
    phase = "attention" if attn > mlp else "MLP"
    weights = t.by_component["weights"]
    t.phases = [(weights + prompt_kv, weights + prefill_peak), (weights + kv, weights + decode_peak)]
    if prefill_peak >= decode_peak:
        t.add("activations.prefill", "activations", f"Prefill working set (at the last layer's {phase})", extra,
              "prompt KV + max(MLP phase, attention phase) − final KV",
              ("{:,} + max({:,}, {:,}) − {:,} B", prompt_kv, mlp, attn, kv), "kv-cache",
              "MLP phase: 4·e·T·h + 3·e·T·f + RoPE; eager attention adds (e + 8) B per score and the causal mask")
    else:
        t.add("activations.decode", "activations", "Decode working set (one token, fp32 logits)", extra,
              "b·(4·e·h + 3·e·f + V·(e + 4))", ("{:,} B", decode_peak - kv - prev), "kv-cache")
    vision.inference_transient(t, m, w, shard, max(prefill_peak, decode_peak))  # the tower's run at prefill
    add_cublas_workspaces(t, w, gpu, threads=1)
    loaded = weights + t.by_component.get("transient", 0)  # weights + cuBLAS workspace (+ GPTQ's buffer)
    t.timeline = [("weights loaded", loaded, loaded), ("prefill: peak", loaded + prompt_kv, loaded + prefill_peak)]
    for i in sorted({1, max(1, w.gen_tokens // 2), w.gen_tokens} if w.gen_tokens else {0}):
        kv_i = inf.kv_cache_bytes(m, layers, w.micro_batch, w.seq_len + i, kvh, w.kv_dtype) + state + \
            inf.extra_kv_bytes(m, layers, w.micro_batch, w.seq_len + i, w.kv_dtype)
        prev_i = inf.kv_cache_bytes(m, layers, w.micro_batch, w.seq_len + i - 1, kvh, w.kv_dtype) if prev else 0
        t.timeline.append((f"decode: token {i:,}" if i else "decode: last logits", loaded + kv_i,
                           loaded + kv_i + prev_i + decode_ws))
    return finish_stage(t, w, shard, gpu)
