"""Gemma 3n and Gemma 4 text decoders (calculator/model/mappers/gemma_next.py, calculator/model/architectures/
gemma_next.py and gemma_next_saved.py) held to transformers 5.23 on the CPU: parameters equal the real model's on the
meta device (class defaults, small varied configs, a config written by to_dict with its per_layer_config); generate()'s
cache equals the real DynamicCache layer by layer; what each layer and the model around the layers save for backward
equals the trace of a tiny bf16 model (validation/trace/saved_by_module.py, eager attention); vLLM allocates no K/V for
KV-shared layers and unifies Gemma 4's pages of two head sizes."""
from __future__ import annotations

import json
import logging
from functools import lru_cache

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, Gemma3nTextConfig, Gemma4Config, Gemma4TextConfig  # noqa: E402
from transformers.models.gemma4_unified.configuration_gemma4_unified import Gemma4UnifiedTextConfig  # noqa: E402

import calculator  # noqa: E402
from calculator import Workload  # noqa: E402
from calculator.core.errors import InputError  # noqa: E402
from calculator.engines.vllm_kv import gemma_next_groups  # noqa: E402
from calculator.memory import activations as act  # noqa: E402
from calculator.memory import inference as inf  # noqa: E402
from calculator.model.architectures import gemma_next as gn  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from validation.trace.saved_by_module import saved_bytes_by_module  # noqa: E402

torch.set_num_threads(1)
logging.getLogger("transformers").setLevel(logging.ERROR)

TINY = dict(vocab_size=300, vocab_size_per_layer_input=300, hidden_size=40, hidden_size_per_layer_input=6,
            intermediate_size=88, num_attention_heads=4, num_key_value_heads=2, head_dim=12, sliding_window=8)
G4 = dict(TINY, num_hidden_layers=6, global_head_dim=16)
UNIFIED = {k: v for k, v in G4.items() if k not in ("vocab_size_per_layer_input", "hidden_size_per_layer_input")}
MOE = dict(enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=24)
CONFIGS = {
    # 10 layers: 0-2 sparse, 3 (sliding) and 4 (full) store, 5-9 reuse
    "3n shared + sparse": lambda: Gemma3nTextConfig(**TINY, num_hidden_layers=10, altup_num_inputs=4, laurel_rank=5,
                                                    num_kv_shared_layers=5,
                                                    activation_sparsity_pattern=[0.95] * 3 + [0.0] * 7),
    "3n MHA, n=3, f per layer, bias, untied": lambda: Gemma3nTextConfig(
        **{**TINY, "vocab_size_per_layer_input": 200, "hidden_size": 48, "hidden_size_per_layer_input": 4,
           "intermediate_size": [64, 80, 96, 112, 128], "num_key_value_heads": 4, "head_dim": 8},
        num_hidden_layers=5, altup_num_inputs=3, laurel_rank=3, num_kv_shared_layers=0, attention_bias=True,
        tie_word_embeddings=False, activation_sparsity_pattern=[0.9, 0.0, 0.5, 0.0, 0.0]),
    "4 PLE + 6 shared + double-wide": lambda: Gemma4TextConfig(**{**G4, "num_hidden_layers": 12},
                                                               num_kv_shared_layers=6, use_double_wide_mlp=True),
    "4 MoE + k_eq_v, no PLE": lambda: Gemma4TextConfig(**{**G4, "hidden_size_per_layer_input": 0}, **MOE,
                                                       attention_k_eq_v=True, num_global_key_value_heads=1),
    "4 unified + 6 shared": lambda: Gemma4UnifiedTextConfig(**{**UNIFIED, "num_hidden_layers": 12},
                                                            num_kv_shared_layers=6),
}


def spec_of(config):
    """The engine's ModelSpec of a config as transformers writes it to config.json."""
    return spec_from_hf_config(json.loads(json.dumps(config.to_dict()))).spec


def meta_parameters(config) -> int:
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


# ---- parameters ----------------------------------------------------------------------------------------------------
PARAM_CONFIGS = {
    "3n defaults (E4B-like)": Gemma3nTextConfig, "4 defaults": Gemma4TextConfig,
    "4 unified defaults": Gemma4UnifiedTextConfig,
    "4 MoE + k_eq_v + PLE + shared + double-wide, untied": lambda: Gemma4TextConfig(
        **{**G4, "num_hidden_layers": 12}, **MOE, attention_k_eq_v=True, num_global_key_value_heads=1,
        num_kv_shared_layers=6, use_double_wide_mlp=True, tie_word_embeddings=False, attention_bias=True),
    "4 unified k_eq_v + shared + double-wide": lambda: Gemma4UnifiedTextConfig(
        **{**UNIFIED, "num_hidden_layers": 12}, attention_k_eq_v=True, num_global_key_value_heads=1,
        num_kv_shared_layers=6, use_double_wide_mlp=True),
    **{k: v for k, v in CONFIGS.items() if k.startswith("3n")},
}


@pytest.mark.parametrize("name", PARAM_CONFIGS)
def test_parameters_equal_the_real_models(name):
    config = PARAM_CONFIGS[name]()
    assert count_parameters(spec_of(config)).total == meta_parameters(config)


def test_per_layer_config_written_by_transformers_is_honoured():
    """to_dict writes the full layers' dims as per_layer_config (and drops global_head_dim): read back exactly."""
    config = Gemma4TextConfig(**{**G4, "num_hidden_layers": 12}, **MOE, attention_k_eq_v=True,
                              num_global_key_value_heads=1, num_kv_shared_layers=6)
    written = json.loads(json.dumps(config.to_dict()))
    assert "per_layer_config" in written and "global_head_dim" not in written
    written["per_layer_config"] = {f"{int(k):02d}": v for k, v in written["per_layer_config"].items()}
    m = spec_from_hf_config(written).spec
    assert m.gemma_next.head_dims == tuple(16 if t == "full_attention" else 12 for t in config.layer_types)
    assert count_parameters(m).total == meta_parameters(config)


def test_a_wrapper_maps_its_text_decoder():
    wrapped = json.loads(json.dumps(Gemma4Config(text_config=Gemma4TextConfig(**G4).to_dict()).to_dict()))
    mapped = spec_from_hf_config(wrapped)
    assert mapped.spec.model_type == "gemma4_text"
    assert count_parameters(mapped.spec).total == meta_parameters(Gemma4TextConfig(**G4))


def test_kv_sharing_modes_are_transformers():
    for config in (CONFIGS["3n shared + sparse"](), CONFIGS["4 PLE + 6 shared + double-wide"]()):
        expected = [mode or "own" for mode in config.kv_sharing_modes]
        assert list(spec_of(config).gemma_next.kv_modes) == expected


# ---- generate()'s cache --------------------------------------------------------------------------------------------
CACHE_CONFIGS = {
    "3n shared": lambda: Gemma3nTextConfig(**{**TINY, "hidden_size": 64, "head_dim": 16}, num_hidden_layers=10,
                                           altup_num_inputs=4, laurel_rank=4, num_kv_shared_layers=5),
    "4 k_eq_v, global dims, 6 shared": lambda: Gemma4TextConfig(
        **{**G4, "hidden_size": 64, "head_dim": 16, "global_head_dim": 32, "num_hidden_layers": 12},
        num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=6),
    "4 unified, 6 shared": lambda: Gemma4UnifiedTextConfig(**{**UNIFIED, "num_hidden_layers": 12},
                                                           num_kv_shared_layers=6),
}


@pytest.mark.parametrize("name", CACHE_CONFIGS)
@pytest.mark.parametrize("prompt, new", [(11, 5), (3, 3)])  # beyond the window of 8, and within it
def test_generate_cache_per_layer_is_the_dynamic_cache(name, prompt, new):
    config = CACHE_CONFIGS[name]()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16).eval()
    b = 2
    ids = torch.randint(3, config.vocab_size, (b, prompt))
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                         do_sample=False, return_dict_in_generate=True, pad_token_id=0)
    m = spec_of(config)
    tokens = prompt + new - 1  # the last generated token is never fed back
    for i, layer in enumerate(out.past_key_values.layers):
        real = 0 if layer.keys is None else 2 * layer.keys.numel() * layer.keys.element_size()
        assert gn.generate_kv_bytes(m, range(i, i + 1), b, tokens, m.kv_heads, 2) == real, i
    total = sum(0 if x.keys is None else 2 * x.keys.numel() * 2 for x in out.past_key_values.layers)
    assert inf.kv_cache_bytes(m, range(m.num_hidden_layers), b, tokens, m.kv_heads, "bf16") == total


# ---- saved activations ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def traced(name: str, b: int, s: int) -> dict[str, int]:
    config = CONFIGS[name]()
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16).train()
    return saved_bytes_by_module(model, torch.randint(3, config.vocab_size, (b, s)))


def layer_bytes(by_module: dict[str, int], i: int) -> int:
    return sum(v for k, v in by_module.items() if k == f"model.layers.{i}" or k.startswith(f"model.layers.{i}."))


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("b, s", [(1, 20), (2, 24)])
def test_saved_activations_are_the_real_layers(name, b, s):
    """Each layer's bytes, and everything outside the layers; the trace finds the model-level tensors where they
    are first saved (RoPE tables in the first layer of each type, PLE's per-layer inputs in layer 0), and counts
    the batch's ids and the loss's int64 targets, which the engine leaves out for every model."""
    config = CONFIGS[name]()
    by_module = traced(name, b, s)
    m = spec_of(config)
    w = Workload(seq_len=s, micro_batch=b, attention="eager")
    d = act.dims(m, w)
    e, T, L, g = 2, b * s, m.num_hidden_layers, m.gemma_next
    first_saved = [0] * L
    first_saved[0] += e * T * L * g.ple_size
    for sliding in (True, False):
        first = next(i for i in range(L) if m.layer_is_sliding(i) == sliding)
        first_saved[first] += 2 * e * s * g.head_dims[first]
    real = [layer_bytes(by_module, i) - first_saved[i] for i in range(L)]
    assert [act.exact_layer(m, w, d, m.layer_kind(i)).total for i in range(L)] == real
    outside = sum(by_module.values()) - sum(real)
    ids_and_targets = 8 * T + (8 * (s + 1) if b == 1 else 8 * T) + 4
    engine = act.embedding_saved(m, d, True) + act.rotary_saved(m, d) + act.final_norm_saved(m, d) + \
        act.loss_saved(m, d, m.vocab_size)
    assert engine + ids_and_targets == outside


def test_the_traced_configs_cover_own_store_and_reuse_layers_sparse_and_dense():
    g = spec_of(CONFIGS["3n shared + sparse"]()).gemma_next
    assert set(g.kv_modes) == {"own", "store", "reuse"} and set(g.sparse) == {True, False}
    assert spec_of(CONFIGS["4 MoE + k_eq_v, no PLE"]()).gemma_next.k_eq_v.count(True) == 1


@pytest.mark.parametrize("finetune", ["lora", "qlora"])
@pytest.mark.parametrize("targets", ["qv", "all-linear"])
def test_lora_and_qlora_are_estimated(finetune, targets):
    """LoRA / QLoRA on these layers: held to PEFT's traces in tests/memory/test_lora_hybrid.py (golden_lora_hybrid/
    gemma*.json); here the whole estimate runs and counts the adapters outside the layers (all-linear)."""
    from calculator.memory import lora
    m = spec_of(CONFIGS["3n shared + sparse"]())
    est = calculator.estimate(m, Workload(seq_len=64, finetune=finetune, lora_targets=targets, gpu="h100-sxm"))
    adapters = next(t.bytes for t in est.terms if t.key == "weights.adapters")
    n = lora.layers_adapter_params(m, 16, targets, range(m.num_hidden_layers))[0] + lora.outer_adapter_params(
        m, 16, targets)[0]
    assert est.peak_allocated_bytes > 0 and adapters == 4 * n  # PEFT's default fp32 adapters


def test_other_kernels_are_refused():
    m = spec_of(CONFIGS["3n shared + sparse"]())
    with pytest.raises(InputError, match="impl"):
        calculator.estimate(m, Workload(seq_len=64, impl="liger", gpu="h100-sxm"))


# ---- vLLM ----------------------------------------------------------------------------------------------------------
E2B_LIKE = dict(hidden_size=1536, intermediate_size=6144, num_hidden_layers=35, num_key_value_heads=1,
                num_kv_shared_layers=20, use_double_wide_mlp=True)


def test_vllm_allocates_no_kv_for_shared_layers():
    """Gemma-3n defaults: 20 of 35 layers own K/V (2 heads × 256 × bf16 × K and V = 2,048 B a token each)."""
    m = spec_of(Gemma3nTextConfig())
    est = calculator.estimate(m, Workload(mode="infer", engine="vllm", seq_len=4096, gen_tokens=128, gpu="h100-sxm"))
    assert est.serving.kv_bytes_per_token == 20 * 2048
    groups, per_token = gemma_next_groups(m, range(35), 1, 2, 16)
    assert per_token == 20 * 2048 and (groups.full_groups, groups.sliding_groups, groups.group_size) == (1, 4, 4)


def test_vllm_unifies_pages_of_two_head_sizes():
    """Gemma 4 (E2B-like): the 15 layers before the shared ones own K/V, 13 sliding of 1 × 256 (1,024 B a token)
    and 2 full of 1 × 512 (2,048 B): the sliding pages take 32-token blocks to match the full layers' 16."""
    m = spec_of(Gemma4TextConfig(**E2B_LIKE))
    groups, per_token = gemma_next_groups(m, range(35), 1, 2, 16)
    assert per_token == 13 * 1024 + 2 * 2048
    assert (groups.page_bytes, groups.full_block, groups.sliding_block) == (16 * 2048, 16, 32)
    est = calculator.estimate(m, Workload(mode="infer", engine="vllm", seq_len=4096, gen_tokens=128, gpu="h100-sxm"))
    assert est.serving.kv_bytes_per_token == per_token


def test_sglang_pools_every_layer_of_gemma_3n():
    """SGLang (engines/sglang_gemma.py): Gemma 3n is no hybrid-SWA architecture, so one pool holds all 35 layers,
    the 15 KV-shared ones included (DefaultPoolConfigurator over num_effective_layers)."""
    m = spec_of(Gemma3nTextConfig())
    est = calculator.estimate(m, Workload(mode="infer", engine="sglang", seq_len=4096, gpu="h100-sxm"))
    assert est.serving.kv_bytes_per_token == 35 * 2048
