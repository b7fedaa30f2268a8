"""Remote-code model types (issue 21): checkpoints whose config.json names classes shipped beside the weights
(`auto_map`, `trust_remote_code=True`) rather than a transformers model, mapped from their own field names when their
block is the engine's layer. Each mapper cites the modeling file it mirrors; tests/model/mappers/test_remote.py
holds it to the real checkpoints' parameter counts (built from those files' shapes) and to published config.json
files.

    qwen   Qwen (v1): Qwen-1.8B / 7B / 14B / 72B and their -Chat models, `QWenLMHeadModel` (modeling_qwen.py of
           huggingface.co/Qwen/Qwen-7B, mirrored e.g. in github.com/zhangningboo/Qwen-7B and alibaba/MNN
           transformers/llm/export/llm_models/Qwen-1_8B/modeling_qwen.py)
    mimo   MiMo-7B (-Base / -SFT / -RL), `MiMoForCausalLM` (modeling_mimo.py of huggingface.co/XiaomiMiMo/MiMo-7B-Base):
           transformers' Qwen2 model plus MTP blocks it builds and never runs
    nemotron-nas  Llama-3.3-Nemotron-Super-49B, Llama-3.1-Nemotron-Ultra-253B (`DeciLMForCausalLM`, modeling_decilm.py
           of huggingface.co/nvidia/Llama-3_3-Nemotron-Super-49B-v1): Llama layers whose attention may be absent and
           whose MLP width changes layer by layer (architectures/ffn_widths.py)

A config whose block the engine cannot describe is refused, naming the field.
"""
from __future__ import annotations

from calculator.core import bounds as B
from calculator.model.architectures.shapes import numel
from calculator.model.config_read import (ConfigError, common_fields, get_bool, get_float, get_int, get_str,
                                          llama_like_fields, sliding_fields)
from calculator.model.variants import VariantSpec

# QWenConfig's defaults (configuration_qwen.py of Qwen/Qwen-7B): the fields a config.json may leave out
QWEN_DEFAULTS = {"kv_channels": 128, "rotary_pct": 1.0, "no_bias": True, "tie_word_embeddings": False}


def _qwen_dtype(cfg: dict) -> str:
    """The dtype QWenLMHeadModel casts itself to at load (`transformer.bfloat16()` / `.half()`): the config's bf16 /
    fp16 / fp32 flag, or, none set, bf16 where the GPU supports it (then fp16, then fp32)."""
    flags = [k for k in ("bf16", "fp16", "fp32") if get_bool(cfg, k, False)]
    if len(flags) > 1:
        raise ConfigError(f"{flags[1]}: only one of bf16, fp16 and fp32 may be true (QWenLMHeadModel asserts it)")
    return flags[0] if flags else "auto (bf16 where the GPU supports it)"


def map_qwen(cfg: dict) -> dict:
    """Qwen v1 (`QWenLMHeadModel`, model_type "qwen"). Per block (QWenBlock): ln_1 and ln_2 RMSNorms (weight only);
    attention (QWenAttention) with one fused c_attn = Linear(h, 3·kv_channels·a) WITH bias and c_proj =
    Linear(kv_channels·a, h, bias=not no_bias); MLP (QWenMLP) w1, w2 = Linear(h, intermediate_size // 2,
    bias=not no_bias) each and c_proj = Linear(intermediate_size // 2, h, bias=not no_bias), output
    c_proj(w1(x) · silu(w2(x))) — SwiGLU whose per-branch width is HALF the config's intermediate_size. Outside:
    wte Embedding(V, h), ln_f RMSNorm, an untied lm_head Linear(h, V, bias=False) (tie_word_embeddings false).
    Multi-head attention (no GQA): the forward splits c_attn's output at hidden_size and views heads of
    hidden_size / num_attention_heads, so kv_channels · num_attention_heads must equal hidden_size.

    Rotary on the first rotary_pct of each head (rotary_emb_base); use_dynamic_ntk and use_logn_attn only rescale at
    inference past seq_length (no tensor of the model's size); bf16 / fp16 / fp32 pick the dtype the model casts
    itself to at load. generate() passes the legacy tuple cache: every layer returns torch.cat((past_key, key))
    as a new tensor while the step's past_key_values stays referenced, so the previous step's cache is alive beside
    the new one until the forward ends (VariantSpec(legacy_kv_cache=True)). Saved activations follow the engine's
    fused-qkv layer (c_attn's output stays whole: v is a view of it; rotated q and k are new tensors), as Phi-3. The
    loss is CrossEntropyLoss on the shifted model-dtype lm_logits: under HF Trainer's bf16 / fp16 autocast (the usual
    fine-tune) log_softmax runs in fp32, as the engine's loss term has it; a plain bf16 loop would keep half."""
    cfg = {**QWEN_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None}}
    h = get_int(cfg, "hidden_size", hi=B.MAX_HIDDEN)
    heads = get_int(cfg, "num_attention_heads", hi=B.MAX_HEADS)
    kv_channels = get_int(cfg, "kv_channels", hi=B.MAX_HEAD_DIM)
    if kv_channels * heads != h or h % heads:
        raise ConfigError(f"kv_channels: QWenAttention splits c_attn's output (3·kv_channels·num_attention_heads = "
                          f"{3 * kv_channels * heads:,}) at hidden_size ({h:,}) into heads of hidden_size / "
                          f"num_attention_heads, which only runs when kv_channels · num_attention_heads equals "
                          f"hidden_size (got {kv_channels} × {heads})")
    ffn = get_int(cfg, "intermediate_size", lo=2, hi=B.MAX_FFN)
    rotary_pct = get_float(cfg, "rotary_pct", 1.0, 0.0, 1.0)
    if rotary_pct <= 0 or (rotary_pct < 1 and int(kv_channels * rotary_pct) < 2):
        raise ConfigError(f"rotary_pct: {rotary_pct:g} rotates fewer than 2 of the {kv_channels} channels of a head; "
                          f"QWenModel needs at least 2 (a rotary dimension of {int(kv_channels * rotary_pct)})")
    bias = not get_bool(cfg, "no_bias", True)
    seq_length = get_int(cfg, "seq_length", default=None, hi=B.MAX_POSITIONS)
    f = dict(family="llama", hidden_size=h, num_hidden_layers=get_int(cfg, "num_hidden_layers", hi=B.MAX_LAYERS),
             num_attention_heads=heads, num_key_value_heads=heads, head_dim=kv_channels, intermediate_size=ffn // 2,
             vocab_size=get_int(cfg, "vocab_size", hi=B.MAX_VOCAB),
             tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", False), gated_mlp=True, hidden_act="silu",
             norm_type="rmsnorm", qkv_bias=True, o_bias=bias, mlp_bias=bias, fused_qkv=True,
             max_position_embeddings=get_int(cfg, "max_position_embeddings", "seq_length", default=seq_length,
                                             hi=B.MAX_POSITIONS),
             variant=VariantSpec(legacy_kv_cache=True))
    warnings = [f"qwen (remote code QWenLMHeadModel): parameters follow its modeling_qwen.py exactly (c_attn with "
                f"bias, MLP width intermediate_size / 2 = {ffn // 2:,}); saved activations are estimated with the "
                f"fused-qkv layer (the remote code was not traced); loaded as "
                f"{_qwen_dtype(cfg)}"]
    dropout = [k for k in ("attn_dropout_prob", "emb_dropout_prob") if get_float(cfg, k, 0.0, 0.0, 0.999)]
    if dropout:
        warnings.append(f"qwen: {' and '.join(dropout)} > 0 (training-mode dropout on the attention probabilities / "
                        f"the embeddings' output) is not in the estimate")
    f["_warnings"] = warnings
    return f


def mimo_mtp_shapes(h: int, heads: int, kv_heads: int, head_dim: int, ffn: int) -> tuple[tuple[int, ...], ...]:
    """One MiMoMTPLayers block (modeling_mimo.py): token_layernorm, hidden_layernorm, input_layernorm,
    post_attention_layernorm and final_layernorm Qwen2RMSNorms (h each), input_proj = Linear(2h, h, bias=False),
    self_attn = Qwen2Attention (q / k / v with biases, o_proj without) and mlp = Qwen2MLP (gate, up, down)."""
    q, kv = heads * head_dim, kv_heads * head_dim
    return ((h,),) * 5 + ((h, 2 * h), (q, h), (q,), (kv, h), (kv,), (kv, h), (kv,), (h, q), (ffn, h), (ffn, h),
                          (h, ffn))


def map_mimo(cfg: dict) -> dict:
    """MiMo-7B (`MiMoForCausalLM`, model_type "mimo"; MiMoConfig is Qwen2Config plus num_nextn_predict_layers):
    MiMoForCausalLM builds transformers' Qwen2 model (MiMoModel subclasses Qwen2Model: q/k/v biased, o_proj not,
    SwiGLU, sliding window per use_sliding_window / max_window_layers) and adds num_nextn_predict_layers MiMoMTPLayers
    blocks as MiMoModel.mtp_layers. MiMoModel keeps Qwen2Model's forward, which never calls them: their weights
    load with the checkpoint and count, and backward never reaches them (VariantSpec.idle_tensors: no gradient,
    and what each stack holds for such parameters is its NoGradRule); vLLM and SGLang skip them at load."""
    f = common_fields(cfg)
    f.update(qkv_bias=True, hidden_act=get_str(cfg, "hidden_act", default="silu"))
    sliding_fields(cfg, f, default_on=get_bool(cfg, "use_sliding_window", False))
    blocks = get_int(cfg, "num_nextn_predict_layers", default=0, lo=0, hi=64)
    h, heads = f["hidden_size"], f["num_attention_heads"]
    head_dim = f.get("head_dim") or h // heads
    kv_heads = f["num_key_value_heads"] or heads  # Qwen2Config: num_key_value_heads None is num_attention_heads
    idle = mimo_mtp_shapes(h, heads, kv_heads, head_dim, f["intermediate_size"]) * blocks
    if idle:
        f["variant"] = VariantSpec(idle_tensors=idle)
        f["_warnings"] = [f"mimo (remote code MiMoForCausalLM): its {blocks} MTP block(s) (MiMoModel.mtp_layers, "
                          f"{numel(idle):,} parameters) load and count but never run: no "
                          f"activations and no gradient; vLLM and SGLang do not load them; under LoRA, PEFT also "
                          f"wraps their linears that match the targets (adapters without gradient, not counted)"]
    return f


def nas_ffn_width(ffn_mult: float, h: int) -> int:
    """A DeciLM layer's MLP width from its ffn_mult (modeling_decilm.py _ffn_mult_to_intermediate_size, as vLLM's
    nemotron_nas.py copies it): int(2·ffn_mult·h / 3) rounded up to a multiple of 256."""
    width = int(2 * ffn_mult * h / 3)
    return -(-width // 256) * 256


# per-layer options of DeciLM's block_configs the engine's layer does not have: refused when set
_NAS_UNSUPPORTED = {"attention": ("replace_with_linear", "window_length", "num_sink_tokens", "sparsify",
                                  "unshifted_sink", "use_prefill_window_in_sink_attention", "llama4", "mamba"),
                    "ffn": ("replace_with_linear", "sparsify", "moe")}


def _nas_block(block, i: int, h: int, heads: int) -> tuple[int | None, int | None]:
    """(key/value heads or None for a no-op attention, MLP width or None for a no-op MLP) of block_configs[i]."""
    where = f"block_configs[{i}]"
    if not isinstance(block, dict) or not all(isinstance(block.get(k), dict) for k in ("attention", "ffn")):
        raise ConfigError(f"{where}: must be an object with an 'attention' and an 'ffn' object")
    att, ffn = block["attention"], block["ffn"]
    try:
        for part, names in _NAS_UNSUPPORTED.items():
            for name in names:
                if block[part].get(name) not in (None, False):
                    raise ConfigError(f"{part}.{name} is set: DeciLM's {name} blocks are not modelled "
                                      f"(only attention / MLP blocks or no-ops)")
        kv = None
        if not get_bool(att, "no_op", False):
            group = get_int(att, "n_heads_in_group", hi=heads)
            if heads % group:
                raise ConfigError(f"attention.n_heads_in_group ({group}) must divide num_attention_heads ({heads})")
            kv = heads // group
        width = None
        if not get_bool(ffn, "no_op", False):
            width = (nas_ffn_width(get_float(ffn, "ffn_mult", None, 1e-3, 64.0), h) if ffn.get("ffn_mult") is not None
                     else get_int(ffn, "intermediate_size", hi=B.MAX_FFN))
    except ConfigError as exc:
        raise ConfigError(f"{where}.{exc}") from None
    if kv is None and width is None:
        raise ConfigError(f"{where}: both attention and ffn are no_op (an empty layer); not modelled")
    return kv, width


def map_nemotron_nas(cfg: dict) -> dict:
    """Nemotron-NAS (`DeciLMForCausalLM`, model_type "nemotron-nas"; modeling_decilm.py of
    huggingface.co/nvidia/Llama-3_3-Nemotron-Super-49B-v1, vLLM model_executor/models/nemotron_nas.py): Llama's
    embedding, head and RoPE, and per layer block_configs[i]: an attention block (input_layernorm + LlamaAttention
    with num_attention_heads / n_heads_in_group key/value heads) unless attention.no_op, and an MLP block
    (post_attention_layernorm + LlamaMLP of the width ffn_mult gives) unless ffn.no_op. A layer without attention
    has no KV cache. Every attention layer must share one n_heads_in_group (per-layer key/value heads are refused)."""
    h, heads = get_int(cfg, "hidden_size", hi=B.MAX_HIDDEN), get_int(cfg, "num_attention_heads", hi=B.MAX_HEADS)
    n = get_int(cfg, "num_hidden_layers", hi=B.MAX_LAYERS)
    blocks = cfg.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != n:
        raise ConfigError(f"block_configs: must be a list of {n} objects (one per layer, num_hidden_layers), "
                          f"got {'a list of ' + str(len(blocks)) if isinstance(blocks, list) else type(blocks).__name__}")
    per_layer = [_nas_block(b, i, h, heads) for i, b in enumerate(blocks)]
    kv_heads = sorted({kv for kv, _ in per_layer if kv is not None})
    if len(kv_heads) != 1:
        raise ConfigError("block_configs: " + ("no layer has attention" if not kv_heads else
                          f"attention.n_heads_in_group differs between layers ({heads // kv_heads[0]} and "
                          f"{heads // kv_heads[-1]}): per-layer key/value heads are not modelled"))
    widths = [f for _, f in per_layer]
    f = llama_like_fields({**cfg, "num_key_value_heads": kv_heads[0], "intermediate_size": max(w or 1 for w in widths)})
    f.update(layer_types=tuple("none" if kv is None else "full_attention" for kv, _ in per_layer),
             ffn_types=tuple("none" if w is None else "dense" for w in widths),
             ffn_widths=tuple(w or f["intermediate_size"] for w in widths))
    return f


REMOTE_MAPPERS = {"qwen": map_qwen, "mimo": map_mimo, "nemotron-nas": map_nemotron_nas}

__all__ = ["QWEN_DEFAULTS", "REMOTE_MAPPERS", "map_mimo", "map_nemotron_nas", "map_qwen", "mimo_mtp_shapes",
           "nas_ffn_width"]
