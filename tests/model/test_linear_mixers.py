"""The short-convolution, KDA and lightning-attention mixers (calculator/model/architectures/short_conv.py, kda.py,
lightning.py) held to transformers 5.23 on the CPU: what one mixer saves for backward on the PyTorch path against
validation/trace/saved_by_module.py on a tiny bf16 model (training forward, no cache; Ling's fp32 conv weight, A_log
and dt_bias as from_pretrained keeps them), the state generate() keeps against the real cache after a prefill; the
fused-kernel path, vLLM's per-rank state and the FLOPs against their formulas.
"""
from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator.model import architectures  # noqa: E402
from calculator.model.architectures import kda, lightning, short_conv  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from validation.trace.saved_by_module import layer_parts, saved_bytes_by_module  # noqa: E402

torch.set_num_threads(1)

TINY = dict(vocab_size=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
LFM2 = dict(TINY, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, layer_types=["conv", "full_attention"])
KIMI = dict(TINY, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=2, kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
            num_experts=4, num_experts_per_tok=2, linear_num_heads=2, linear_head_dim=16, linear_conv_kernel_dim=4,
            layer_types=["linear_attention", "full_attention"])
LING = dict(TINY, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=2, kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
            num_experts=4, n_group=2, topk_group=1, num_experts_per_tok=2, head_dim=16, short_conv_kernel_size=4,
            layer_group_size=2, first_k_dense_replace=1)
MINIMAX = dict(TINY, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, num_local_experts=4, block_size=16)
# (model type, config, layer measured, its mixer module, b, s): KDA at 64-token chunks (two chunks, one partial,
# and one), lightning at 1-3 blocks with a partial last one
SAVED_CASES = [
    ("lfm2", LFM2, 0, "conv", 1, 40), ("lfm2", dict(LFM2, conv_L_cache=4, conv_bias=True), 0, "conv", 2, 24),
    ("lfm3", dict(LFM2, num_hidden_layers=3, layer_types=None, head_dim=16), 0, "conv", 2, 24),
    ("kimi_linear", KIMI, 0, "self_attn", 1, 80), ("kimi_linear", KIMI, 0, "self_attn", 2, 40),
    ("kimi_linear", dict(KIMI, linear_num_heads=3, linear_head_dim=8, linear_conv_kernel_dim=3), 0, "self_attn", 1,
     50),
    ("bailing_hybrid", LING, 0, "self_attn", 1, 80), ("bailing_hybrid", dict(LING, kda_safe_gate=False), 0,
                                                      "self_attn", 2, 40),
    ("minimax", MINIMAX, 1, "self_attn", 1, 40), ("minimax", MINIMAX, 1, "self_attn", 2, 24),
    ("minimax", dict(MINIMAX, block_size=12, head_dim=20), 1, "self_attn", 2, 40),
]


def tiny_bf16(model_type: str, cfg: dict):
    """(the mapped ModelSpec, a tiny bf16 training-mode model) with the fp32 parameters from_pretrained keeps
    (_keep_in_fp32_modules_strict: Ling's conv1d, A_log, dt_bias), without a cache."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    model = transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16).train()
    keep = set(getattr(model, "_keep_in_fp32_modules_strict", None) or ())
    for name, p in model.named_parameters():
        if keep & set(name.split(".")):
            p.data = p.data.float()
    model.config.use_cache = False  # a training forward: no recurrent state or conv state is kept
    return spec_from_hf_config(config.to_dict()).spec, model


def dims(b: int, s: int, tp: int = 1):
    return SimpleNamespace(b=b, s=s, T=b * s, e=2, tp=tp)


TORCH, FUSED = SimpleNamespace(mixer_kernels="torch"), SimpleNamespace(mixer_kernels="fused")


@pytest.mark.parametrize("model_type,cfg,layer,module,b,s", SAVED_CASES,
                         ids=lambda v: v if isinstance(v, (str, int)) else "")
def test_saved_for_backward_torch_path(model_type, cfg, layer, module, b, s):
    spec, model = tiny_bf16(model_type, cfg)
    ids = torch.randint(3, TINY["vocab_size"], (b, s), generator=torch.Generator().manual_seed(0))
    # the tool counts what the graph holds when the forward ends, each storage once, never parameters or
    # buffers (MiniMax's decay tables are model state): the last KDA chunk's and lightning block's unused state
    # update is freed before backward and not counted
    measured = layer_parts(saved_bytes_by_module(model, ids, use_cache=False), layer, {"mixer": (module,)})["mixer"]
    mixer_input = 2 * b * s * spec.hidden_size  # the norm output, saved by the first projection, counted with the norms
    kind = spec.layer_kind(layer).mixer
    formula = architectures.mixer(kind).saved(spec, dims(b, s), TORCH)
    assert measured - mixer_input == formula


@pytest.mark.parametrize("model_type,cfg", [("lfm2", LFM2), ("kimi_linear", KIMI), ("bailing_hybrid", LING),
                                            ("minimax", MINIMAX)])
def test_state_bytes_is_the_cache_after_a_prefill(model_type, cfg):
    spec, model = tiny_bf16(model_type, cfg)
    model.eval()
    b, s = 2, 24
    with torch.no_grad():
        cache = model(input_ids=torch.randint(3, TINY["vocab_size"], (b, s)), use_cache=True).past_key_values
    for i in range(spec.num_hidden_layers):
        kind = spec.layer_kind(i).mixer
        if kind in ("attention", "mla"):
            continue
        if model_type == "minimax":
            tensors = [cache.linear_cache[i]]
        else:
            layer = cache.layers[i]
            tensors = [*layer.conv_states.values(), *layer.recurrent_states.values()]
        real = sum(t.numel() * t.element_size() for t in tensors if t is not None)
        assert real == architectures.mixer(kind).state_bytes(spec, b, 2), (model_type, i)


def written_spec(model_type: str, **kwargs):
    logging.getLogger("transformers").setLevel(logging.ERROR)
    return spec_from_hf_config(transformers.AutoConfig.for_model(model_type, **kwargs).to_dict()).spec


def test_serving_state_per_tp_rank():
    """vLLM's per-sequence states (mamba_utils.py MambaStateShapeCalculator): K − 1 conv columns, heads split by TP."""
    kimi = written_spec("kimi_linear")  # Kimi-Linear-48B-A3B's sizes: 32 KDA heads of 128, kernel 4
    assert kda.serving_state(kimi, 1) == (3 * 3 * 4096, 32 * 128 * 128)
    assert kda.serving_state(kimi, 4) == (3 * 3 * 4096 // 4, 8 * 128 * 128)
    lfm2 = written_spec("lfm2", layer_types=["conv", "full_attention"] * 16)
    assert short_conv.serving_state(lfm2, 2) == (2 * 2560 // 2, 0)
    minimax = written_spec("minimax")
    assert lightning.serving_state(minimax, 2) == (0, 16 * 128 * 128)


def test_fused_paths():
    """causal-conv1d keeps only its input (K ≤ 4; LFM3's kernel of 7 runs the PyTorch path), flash-linear-attention
    saves a fraction of the PyTorch chunked rule, and lightning attention has no kernel: the same bytes."""
    d = dims(1, 4096)
    lfm2 = written_spec("lfm2", layer_types=["conv", "full_attention"] * 16)
    assert short_conv.saved(lfm2, d, FUSED) == 6 * 2 * 4096 * 2560
    assert short_conv.saved(lfm2, d, TORCH) == short_conv.saved(lfm2, d, FUSED) - 2 * 4096 * 2560 + 2 * 2560 * 4098
    lfm3 = written_spec("lfm3")
    assert short_conv.saved(lfm3, d, FUSED) == short_conv.saved(lfm3, d, TORCH)
    kimi = written_spec("kimi_linear")
    torch_bytes, fused_bytes = kda.saved(kimi, d, TORCH), kda.saved(kimi, d, FUSED)
    assert 14 * 2 ** 30 < torch_bytes < 15 * 2 ** 30  # the PyTorch fallback: ~768 B per token and channel
    assert 0.75 * 2 ** 30 < fused_bytes < 0.9 * 2 ** 30
    assert kda.saved(kimi, dims(1, 4096, tp=2), FUSED) < fused_bytes
    minimax = written_spec("minimax")
    assert lightning.saved(minimax, d, FUSED) == lightning.saved(minimax, d, TORCH)


def test_linear_flops_per_token():
    kimi = written_spec("kimi_linear")
    core = 32 * (6 * 128 ** 2 + 2 * 64 * 5 * 128 + 2 * 64 ** 2 / 3)
    assert kda.linear_flops_per_token(kimi) == pytest.approx(core + 6 * 4096 * 4)
    assert 5.8e6 < core < 5.9e6  # ≈ 5.9 MFLOP per token against ≈ 85 MFLOP for the mixer with its projections
    assert lightning.linear_flops_per_token(written_spec("minimax")) == 32 * (4 * 128 ** 2 + 4 * 256 * 128)
    lfm2 = written_spec("lfm2", layer_types=["conv", "full_attention"] * 16)
    assert short_conv.linear_flops_per_token(lfm2) == 2 * 2560 * 3 + 2 * 2560


def test_linears_are_the_mixers_nn_linear_modules():
    """linears() names and sizes every nn.Linear of one mixer, as the real module has them."""
    for model_type, cfg, layer in (("lfm2", LFM2, 0), ("kimi_linear", KIMI, 0), ("bailing_hybrid", LING, 0),
                                   ("minimax", MINIMAX, 1)):
        logging.getLogger("transformers").setLevel(logging.ERROR)
        config = transformers.AutoConfig.for_model(model_type, **cfg)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
        block = model.model.layers[layer]
        mixer = block.conv if hasattr(block, "conv") else block.self_attn
        real = sorted((n, m.in_features, m.out_features) for n, m in mixer.named_modules()
                      if isinstance(m, torch.nn.Linear))
        spec = spec_from_hf_config(config.to_dict()).spec
        assert sorted(architectures.mixer(spec.layer_kind(layer).mixer).linears(spec)) == real
