"""The Mamba kinds (calculator/model/architectures/mamba.py, mamba_attention.py) against real transformers 5.23 code:
what a layer saves for backward on the PyTorch path, traced on tiny bf16 CPU models (validation/trace/
saved_by_module.py; the engine counts the norm's output, the mixer's input, with the norms), and what generate()'s
DynamicCache keeps after a prefill; the kernel path, serving state and FLOPs by their formulas."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator import Workload  # noqa: E402
from calculator.memory import activations as act  # noqa: E402
from calculator.memory import inference as inf  # noqa: E402
from calculator.model.architectures import mamba, mamba_attention  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from validation.trace.saved_by_module import saved_bytes_by_module  # noqa: E402

ATTN = dict(num_attention_heads=4, num_key_value_heads=2, vocab_size=128)
MAMBA2 = dict(mamba_n_heads=8, mamba_n_groups=2, mamba_d_state=16, mamba_chunk_size=16)
TINY = {  # each model's first layer is a Mamba layer
    "mamba2": dict(hidden_size=64, num_heads=8, head_dim=16, state_size=16, n_groups=2, num_hidden_layers=1,
                   vocab_size=128, chunk_size=16),
    "mamba2-1group": dict(hidden_size=32, num_heads=4, head_dim=16, state_size=8, n_groups=1, num_hidden_layers=1,
                          vocab_size=128, chunk_size=8, conv_kernel=3),
    "mamba": dict(hidden_size=64, state_size=8, num_hidden_layers=1, vocab_size=128),
    "falcon_mamba": dict(hidden_size=64, state_size=8, num_hidden_layers=1, vocab_size=128),
    "nemotron_h": dict(**ATTN, hidden_size=64, head_dim=16, intermediate_size=96, mamba_num_heads=8,
                       mamba_head_dim=16, layers_block_type=["linear_attention", "full_attention"], ssm_state_size=16,
                       n_groups=2, chunk_size=16),
    "granitemoehybrid": dict(**ATTN, **MAMBA2, hidden_size=64, num_hidden_layers=2, layer_types=["mamba", "attention"],
                             intermediate_size=48, shared_intermediate_size=32, num_local_experts=0),
    "bamba": dict(**ATTN, **MAMBA2, hidden_size=64, num_hidden_layers=2, attn_layer_indices=[1],
                  intermediate_size=96),
    "falcon_h1": dict(**ATTN, **MAMBA2, hidden_size=64, num_hidden_layers=2, intermediate_size=96, mamba_d_ssm=None),
    "falcon_h1-norm": dict(**ATTN, **MAMBA2, hidden_size=64, num_hidden_layers=2, intermediate_size=96,
                           mamba_d_ssm=None, mamba_rms_norm=True),
    "jamba": dict(**ATTN, hidden_size=64, num_hidden_layers=2, attn_layer_period=2, attn_layer_offset=1,
                  num_experts=1, intermediate_size=96, mamba_d_state=8),
}
MIXER_MODULES = ("mixer", "mamba")
SHAPES = [(2, 20), (1, 37), (1, 32)]  # b > 1, b = 1 with a padded last chunk, b = 1 on chunk boundaries


def _build(name: str):
    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    config = transformers.AutoConfig.for_model(name.split("-")[0], **TINY[name])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    return model.to(torch.bfloat16), spec_from_hf_config(config.to_dict()).spec


@pytest.fixture(scope="module")
def built():
    return {name: _build(name) for name in TINY}


def _layer_saved(model, ids, layer: int) -> dict[str, int]:
    """Bytes saved by decoder layer `layer`'s modules, by module name relative to the layer."""
    by = saved_bytes_by_module(model.train(), ids)
    prefix = f"layers.{layer}."
    return {k.split(prefix, 1)[1]: v for k, v in by.items() if prefix in k}


@pytest.mark.parametrize("b,s", SHAPES)
@pytest.mark.parametrize("name", sorted(TINY))
def test_a_mamba_layer_saves_what_the_pytorch_path_saves(built, name, b, s):
    """The layer whole (norms, mixer, feed-forward: the engine's exact_layer) and the mixer alone (mamba.saved,
    beyond its input) equal the trace. Falcon-H1 layer 1 (layer 0 also keeps RoPE's cos and sin, counted outside
    the layers); the trace never counts buffers (Falcon-H1's mup_vector is model state)."""
    model, spec = built[name]
    layer = 1 if name.startswith("falcon_h1") else 0
    parts = _layer_saved(model, torch.randint(2, 128, (b, s)), layer)
    w = Workload(seq_len=s, micro_batch=b, mixer_kernels="torch", attention="eager")
    d = act.dims(spec, w)
    kind = spec.layer_kind(layer)
    assert sum(parts.values()) == act.exact_layer(spec, w, d, kind).total
    mixer = sum(v for k, v in parts.items() if k.startswith(MIXER_MODULES))
    assert mixer == mamba.saved(spec, d, w) + d.e * d.T * spec.hidden_size


def _cache_bytes(cache) -> int:
    total = 0
    for layer in cache.layers:
        for name in ("conv_states", "recurrent_states"):
            total += sum(t.nbytes for t in (getattr(layer, name, None) or {}).values() if t is not None)
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            total += t.nbytes if isinstance(t, torch.Tensor) else 0
    return total


@pytest.mark.parametrize("b,s", [(2, 3), (1, 9)])
@pytest.mark.parametrize("name", ["mamba2", "mamba", "nemotron_h", "falcon_h1", "jamba"])
def test_state_bytes_are_the_dynamic_cache_after_a_prefill(built, name, b, s):
    """Conv state (b, conv_dim, K) in bf16 (left-padded when the prompt is shorter than K), fp32 SSM state; K/V of
    the attention layers (Falcon-H1: every layer holds both)."""
    model, spec = built[name]
    with torch.no_grad():
        out = model.eval()(torch.randint(2, 128, (b, s)), use_cache=True)
    cache = getattr(out, "past_key_values", None) or out.cache_params
    layers = range(spec.num_hidden_layers)
    expected = inf.recurrent_state_bytes(spec, layers, b, 2) + inf.kv_cache_bytes(spec, layers, b, s, spec.kv_heads,
                                                                                  "bf16")
    assert _cache_bytes(cache) == expected


def test_state_bytes_formula():
    spec = _build("mamba2")[1]
    mb = spec.mamba  # d = 128, N = 16, G = 2, K = 4: conv_dim = 128 + 64
    assert mamba.state_bytes(spec, 3, 2) == 3 * (192 * 4 * 2 + 4 * 128 * 16)
    assert mamba_attention.state_bytes(spec, 3, 2) == mamba.state_bytes(spec, 3, 2)
    assert mb.conv_dim == 192 and mb.in_proj_dim == 2 * 128 + 64 + 8


def test_serving_state_is_vllms_k_minus_1_columns_split_by_tp():
    spec = _build("mamba2")[1]  # h = 8, p = 16, N = 16, G = 2, K = 4
    assert mamba.serving_state(spec, 1) == (3 * (128 + 2 * 2 * 16), 128 * 16)
    assert mamba.serving_state(spec, 2) == (3 * (64 + 2 * 1 * 16), 64 * 16)
    assert mamba.serving_state(spec, 4) == (3 * (32 + 2 * 1 * 16), 32 * 16)  # G = 2 < tp: one group per rank
    m1 = _build("mamba")[1]  # d = 128, N = 8, K = 4
    assert mamba.serving_state(m1, 2) == (3 * 64, 64 * 8)


def test_the_kernel_path_saves_far_less_than_the_pytorch_path():
    """mamba_split_conv1d_scan_combined keeps zxbcdt, out_x and rstd (SPEC §1.6: ≈ 62 KB per token per layer for
    the Mamba-2 default at s = 4096, against ≈ 1.17 MB on the PyTorch path)."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    spec = spec_from_hf_config(transformers.AutoConfig.for_model("mamba2").to_dict()).spec
    d_fused = act.dims(spec, Workload(seq_len=4096, micro_batch=1))
    h = spec.hidden_size
    fused = mamba.saved(spec, d_fused, Workload(seq_len=4096)) + 2 * 4096 * h
    torch_path = mamba.saved(spec, d_fused, Workload(seq_len=4096, mixer_kernels="torch")) + 2 * 4096 * h
    assert fused / 4096 == pytest.approx(62e3, rel=0.03)
    assert torch_path / 4096 == pytest.approx(1.17e6, rel=0.01)


@pytest.mark.parametrize("name", ["mamba", "falcon_mamba", "jamba"])
def test_mamba1_kernel_path_keeps_fp32_scan_states_per_2048_tokens(built, name):
    spec = built[name][1]
    mb = spec.mamba
    one, two = (mamba.mamba1_saved_fused(mb, 2, s, 2) for s in (2048, 2049))
    per_token = (mamba.mamba1_saved_fused(mb, 2, 2050, 2) - two)
    assert two - one - per_token == 4 * 2 * mb.d_inner * 2 * mb.d_state  # one more chunk state
    assert mamba.mamba1_saved_fused(mb, 2, 64, 2) < mamba.mamba1_saved_torch(mb, 2, 64, 2) / 5


def test_tensor_parallelism_splits_heads_and_width():
    spec = _build("mamba2")[1].mamba
    full, half = mamba.mamba2_saved_fused(spec, 1, 64, 2), mamba.mamba2_saved_fused(spec, 1, 64, 2, tp=2)
    assert half == pytest.approx(full / 2, rel=0.01)
    m1 = _build("mamba")[1].mamba
    assert mamba.mamba1_saved_torch(m1, 2, 64, 2, tp=2) < 0.6 * mamba.mamba1_saved_torch(m1, 2, 64, 2)


def test_core_flops_per_token():
    spec = _build("mamba2")[1]  # d = 128, N = 16, G = 2, Q = 16, K = 4, conv_dim = 192
    assert mamba.linear_flops_per_token(spec) == 2 * 4 * 192 + 2 * 2 * 16 * 16 + 2 * 16 * 128 + 4 * 16 * 128
    m1 = _build("mamba")[1]  # d = 128, N = 8
    assert mamba.linear_flops_per_token(m1) == 2 * 4 * 128 + 9 * 128 * 8
    assert [n for n, _, _ in mamba.linears(m1)] == ["in_proj", "x_proj", "dt_proj", "out_proj"]
