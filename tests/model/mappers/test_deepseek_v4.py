"""DeepSeek-V4 (calculator/model/mappers/dsa.py map_deepseek_v4, calculator/model/architectures/compressed.py) held to
transformers 5.23 models/deepseek_v4/modeling_deepseek_v4.py: the parameter and tensor counts of the released
DeepSeek-V4-Flash config and of legacy config.json fields against the real model on the meta device (the written
configs of test_dsa.CASES too); the cache each kind of layer keeps after a CPU prefill and decode steps; training and
SGLang refused with what is missing (training: test_deepseek_v4_training.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.core_model_loading import build_glob_alternation  # noqa: E402

from calculator import InputError, Workload, estimate  # noqa: E402
from calculator.memory import inference as inf  # noqa: E402
from calculator.model import architectures  # noqa: E402
from calculator.model.architectures import compressed_saved  # noqa: E402
from calculator.model.config_read import ConfigError  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from tests.model.mappers.counts import engine_counts, real_counts  # noqa: E402
from tests.model.mappers.test_dsa import V4_A, V4_B, written  # noqa: E402
from validation.architectures.causal_lm import causal_lm  # noqa: E402
from validation.architectures.measure import cache_bytes, fp32_kept, tiny_bf16  # noqa: E402
from validation.trace.saved_by_module import saved_bytes_by_module  # noqa: E402

torch.set_num_threads(1)
PRESETS = Path(__file__).resolve().parents[3] / "presets" / "models"
PRESET = PRESETS / "deepseek-v4-flash.json"


def _config(cfg: dict):
    return transformers.AutoConfig.for_model("deepseek_v4", **{k: v for k, v in cfg.items()
                                                                 if k not in ("model_type", "quantization_config")})


def test_released_flash_config_counts_exactly():
    """284,332,230,231 parameters in 1,242 tensors: 2 sliding, 21 CSA and 20 HCA layers (compress_ratios, cut from
    44 entries to 43), 4 hyper-connection streams, one MTP layer left unbuilt."""
    cfg = json.loads(PRESET.read_text())
    assert engine_counts(cfg) == real_counts(_config(cfg)) == (284_332_230_231, 1242)
    spec = spec_from_hf_config(cfg).spec
    kinds = [spec.layer_kind(i).mixer for i in range(spec.num_hidden_layers)]
    assert kinds[:4] == ["compressed_window", "compressed_window", "compressed_sparse", "compressed_heavy"]
    assert (kinds.count("compressed_sparse"), kinds.count("compressed_heavy"), spec.mtp_layers) == (21, 20, 1)
    assert {l.ffn for l in map(spec.layer_kind, range(43))} == {"moe"} and spec.hc_mult == 4


def test_released_pro_config_counts_exactly():
    """1,572,997,179,491 parameters in 1,772 tensors: two HCA layers, then CSA / HCA alternating, no sliding layer
    (62 compress_ratios cut to its 61 layers: the last, 0, is the MTP layer's)."""
    cfg = json.loads((PRESETS / "deepseek-v4-pro.json").read_text())
    assert engine_counts(cfg) == real_counts(_config(cfg)) == (1_572_997_179_491, 1772)
    spec = spec_from_hf_config(cfg).spec
    assert {spec.layer_kind(i).mixer for i in range(61)} == {"compressed_sparse", "compressed_heavy"}


def test_legacy_fields_map_as_the_configuration_class_folds_them():
    """compress_ratios (longer than num_hidden_layers), compress_rate_csa / _hca and num_hash_layers as top-level
    keys, no layer_types: DeepseekV4Config.__post_init__ folds them in."""
    raw = {k: v for k, v in written("deepseek_v4", **V4_B)[0].items()
           if k not in ("layer_types", "mlp_layer_types", "compress_rates")}
    raw.update(compress_ratios=[4, 0, 128, 4, 128, 0], compress_rate_csa=2, compress_rate_hca=16, num_hash_layers=2)
    assert engine_counts(raw) == real_counts(_config(raw))
    spec = spec_from_hf_config(raw).spec
    assert spec.layer_types[:3] == ("compressed_sparse_attention", "compressed_window_attention",
                                    "heavily_compressed_attention")
    assert (spec.compressed.csa_rate, spec.compressed.hca_rate) == (2, 16)
    with pytest.raises(ConfigError, match="compress_ratios"):
        spec_from_hf_config({**raw, "compress_ratios": [4, 0, 64, 4, 128]})



def test_a_null_head_dim_is_refused_as_the_strict_configuration_class_refuses_it():
    """benchmarks/fuzz.py seed 61: "head_dim": null reached heads × head_dim as a TypeError. DeepseekV4Config is a
    strict dataclass (head_dim: int = 512), so the real class refuses it too."""
    from huggingface_hub.errors import StrictDataclassFieldValidationError
    raw = json.loads(PRESET.read_text())
    with pytest.raises(StrictDataclassFieldValidationError):
        _config({**raw, "head_dim": None})
    with pytest.raises(ConfigError, match="head_dim"):
        spec_from_hf_config({**raw, "head_dim": None})


def test_hyper_connections_sit_in_every_layer_and_before_the_final_norm():
    """attn_hc and ffn_hc in every layer, hc_head beside the final norm: 2·((2 + n)·n·(n·h + 1) + 3) per layer."""
    cfg, _ = written("deepseek_v4", **V4_A)
    spec = spec_from_hf_config(cfg).spec
    h, n = spec.hidden_size, spec.hc_mult
    counts = count_parameters(spec)
    plain = count_parameters(spec.model_copy(update={"hc_mult": 0}))
    assert counts.layers[0].norms - plain.layers[0].norms == 2 * ((2 + n) * n * (n * h + 1) + 3)
    assert counts.final_norm - plain.final_norm == n * n * h + n + 1 and counts.embedding == plain.embedding


@pytest.mark.parametrize("kwargs", [V4_A, V4_B], ids=["A", "B"])
def test_fp32_parameters_are_those_from_pretrained_keeps_in_fp32(kwargs):
    """_keep_in_fp32_modules_strict, matched as from_pretrained matches it (validation/architectures/measure.py
    fp32_kept): the weights term prices them at 4 B (stages/inference.py)."""
    cfg, config = written("deepseek_v4", **kwargs)
    spec = spec_from_hf_config(cfg).spec
    with torch.device("meta"):
        model = fp32_kept(causal_lm(config, dtype=torch.bfloat16))
    fp32 = sum(p.numel() for p in model.parameters() if p.dtype == torch.float32)
    assert architectures.compressed.fp32_parameters(spec, range(spec.num_hidden_layers), True) == fp32 > 0


# ---- the cache -----------------------------------------------------------------------------------------------------
def _loaded_bf16(config):
    """A bf16 model with the parameters from_pretrained keeps in fp32 (_keep_in_fp32_modules_strict: the
    compressors' position_bias among them, which makes the CSA overlap gates fp32)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="eager")
    pattern = build_glob_alternation(sorted(model._keep_in_fp32_modules_strict))[0]
    for name, p in model.named_parameters():
        if pattern.search(name):
            p.data = p.data.float()
    return model.eval()


def _engine_cache(spec, b: int, tokens: int) -> list[int]:
    return [architectures.mixer(spec.layer_kind(i).mixer).cache_bytes(spec, b, tokens, "bf16")
            for i in range(spec.num_hidden_layers)]


@pytest.mark.parametrize("b,s", [(2, 11), (1, 3), (2, 20), (3, 16)])
def test_cache_after_a_prefill_equals_each_layer_kind(b, s):
    """Before a window closes, at a window boundary, past the sliding window: per layer, the window (two copies on
    the sliding layer, one K = V on CSA / HCA), compressed entries, buffered tokens and CSA's overlap states."""
    cfg, config = written("deepseek_v4", **V4_A)
    spec = spec_from_hf_config(cfg).spec
    model = _loaded_bf16(config)
    with torch.no_grad():
        cache = model(input_ids=torch.randint(3, 100, (b, s)), use_cache=True).past_key_values
    assert [cache_bytes(layer) for layer in cache.layers] == _engine_cache(spec, b, s)
    everything = range(spec.num_hidden_layers)
    assert cache_bytes(cache) == (inf.kv_cache_bytes(spec, everything, b, s, 1, "bf16")
                                  + inf.extra_kv_bytes(spec, everything, b, s, "bf16"))


def test_cache_after_decode_steps_is_the_cache_of_all_tokens():
    cfg, config = written("deepseek_v4", **V4_A)
    spec, model, b = spec_from_hf_config(cfg).spec, _loaded_bf16(config), 2
    with torch.no_grad():
        cache = model(input_ids=torch.randint(3, 100, (b, 11)), use_cache=True).past_key_values
        for _ in range(6):
            model(input_ids=torch.randint(3, 100, (b, 1)), past_key_values=cache, use_cache=True)
    assert [cache_bytes(layer) for layer in cache.layers] == _engine_cache(spec, b, 17)


# ---- what is refused -----------------------------------------------------------------------------------------------
def test_inference_is_estimated_and_training_and_serving_engines_are_refused():
    spec = spec_from_hf_config(json.loads(PRESET.read_text())).spec
    est = estimate(spec, Workload(mode="infer", seq_len=8192, gen_tokens=256), with_fits=False)
    terms = {t.key: t.bytes for t in est.stages[0].terms}
    assert terms["kv_cache"] == inf.extra_kv_bytes(spec, range(43), 1, 8192 + 256, "bf16") > 0
    assert terms["weights.fp32"] == 2 * architectures.compressed.fp32_parameters(spec, range(43), True) > 0
    # transformers runs V4 with eager attention only (_supports_sdpa = _supports_flash_attn = False): the prefill
    # materialises its 64 heads' scores over the 8,192-token prompt whatever the workload's attention says
    assert terms["activations.prefill"] > 64 * 8192 * 8192 * 2
    assert any("DeepSeek-V4" in w for w in est.warnings)
    # training: full fine-tuning on one GPU (tests/model/mappers/test_deepseek_v4_training.py); LoRA is refused
    assert estimate(spec, Workload(mode="train", seq_len=1024, attention="eager"), with_fits=False).peak_allocated_bytes
    with pytest.raises(InputError, match="not yet lora"):
        estimate(spec, Workload(mode="train", seq_len=1024, finetune="lora"), with_fits=False)
    # SGLang 0.5.23's own pools (calculator/engines/sglang_compressed.py, tests/engines/test_sglang_compressed.py)
    sg = estimate(spec, Workload(mode="infer", engine="sglang", seq_len=1024, gpu="h200",
                                 parallel={"ep": 8, "dp": 8}), with_fits=False).serving
    assert sg.block_size == 256 and sg.kv_pool_tokens > 0 and sg.starts
    # vLLM 0.33's layout is modelled (calculator/engines/vllm_compressed.py, tests/engines/test_engines_vllm_dsv4.py)
    served = estimate(spec, Workload(mode="infer", engine="vllm", seq_len=1024, gpu="h200",
                                     parallel={"ep": 8, "dp": 8}), with_fits=False).serving
    assert served.block_size == 256 and served.kv_pool_blocks > 0
    # DeepseekV4Config.base_model_tp_plan shards only the routed experts: the engine's TP split would not be it
    with pytest.raises(InputError, match="base_model_tp_plan shards only the routed experts"):
        estimate(spec, Workload(mode="infer", seq_len=1024, parallel={"tp": 8}), with_fits=False)


# ---- saved activations (wired into training: architectures.layer_saved) -----------------------------------------------
@pytest.mark.parametrize("kwargs,b,s", [(V4_A, 2, 16), (dict(V4_A, hc_mult=4), 2, 16),
                                        (dict(V4_A, hc_mult=2, hc_sinkhorn_iters=3, partial_rotary_factor=0.25,
                                              num_attention_heads=2, o_groups=1), 1, 19)])
def test_each_layer_kind_saves_what_compressed_saved_counts(kwargs, b, s):
    """Every byte one layer's modules keep for backward (the CPU trace of a tiny bf16 model with from_pretrained's
    fp32 modules), per kind: the sliding, CSA and HCA layers, windows closed and a remainder left open."""
    cfg, config = written("deepseek_v4", **kwargs)
    spec = spec_from_hf_config(cfg).spec
    model = tiny_bf16(config, "eager")
    by_module = saved_bytes_by_module(model, torch.randint(3, 100, (b, s)))
    for i in range(spec.num_hidden_layers):
        prefix = f"model.layers.{i}"
        traced = sum(v for k, v in by_module.items() if k == prefix or k.startswith(prefix + "."))
        assert traced == sum(compressed_saved.layer(spec, spec.layer_kind(i).mixer, b, s, 2)), i
