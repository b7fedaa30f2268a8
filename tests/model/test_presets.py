"""The preset models and the GPU catalogue: every file loads and maps, ids are clean, errors are clear."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from calculator.core.errors import InputError
from calculator.core.fit import FIT_CARD_GPUS
from calculator.model.hf_config import Quantization
from calculator.model.parameters import count_parameters
from calculator.model.presets import GPU, MODELS_DIR, get_gpu, list_gpus, list_models, load_model

SLUG = re.compile(r"^[a-z0-9]+(?:[.-][a-z0-9]+)*$")
MiB = 2**20

# Parameter counts checked against transformers (tests/model/test_parameters.py builds each model on the meta device).
# Pinned here too so a change to the counting shows up without torch installed.
VERIFIED_TOTALS = {
    "deepseek-r1": 671_026_404_352,
    "deepseek-v2-lite": 15_706_484_224,
    "deepseek-v3": 671_026_404_352,
    "deepseek-v3.2": 671_877_929_216,
    "deepseek-v4-flash": 284_332_230_231,
    "deepseek-v4-pro": 1_572_997_179_491,
    "gemma-2-27b": 27_227_128_320,
    "gemma-2-2b": 2_614_341_888,
    "gemma-2-9b": 9_241_705_984,
    "gemma-3-12b": 11_766_034_176,
    "gemma-3-1b": 999_885_952,
    "gemma-3-27b": 27_009_346_304,
    "gemma-3-4b": 3_880_263_168,
    "gemma-4-26b-a4b": 25_233_141_760,
    "gemma-4-31b-it-nvfp4": 30_697_345_280,
    "glm-4.5-air": 106_852_245_504,
    "glm-5": 743_911_199_232,
    "glm-5.1": 743_911_199_232,
    "glm-5.2": 743_377_000_704,
    "gpt-oss-120b": 116_829_156_672,
    "gpt-oss-20b": 20_914_757_184,
    "gpt2": 124_439_808,
    "kimi-k2": 1_026_408_209_408,
    "kimi-k2.5": 1_026_408_209_408,  # K2's language model; MoonViT 416,866,032 + mm_projector 54,277,888 apart
    "kimi-linear-48b-a3b": 49_122_675_072,
    "llama-3.1-405b": 405_853_388_800,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "llama-3.3-70b": 70_553_706_496,
    "llama-4-scout": 107_769_861_120,
    "mimo-v2-flash": 308_778_768_832,
    "minimax-m2.5": 228_689_748_992,
    "minimax-m2.7": 228_689_748_992,
    "mimo-7b-base": 7_833_409_536,  # remote code: Qwen2's 7,622,619,136 + the idle MTP block's 210,790,400
    "llama-3.3-nemotron-super-49b": 49_867_145_216,  # remote code DeciLM: test_remote_nas's meta-device replica
    "mistral-7b-v0.1": 7_241_732_096,
    "mistral-nemo-12b": 12_247_782_400,
    "mistral-small-24b": 23_572_403_200,
    "mixtral-8x22b": 140_620_634_112,
    "mixtral-8x7b": 46_702_792_704,
    "nemotron-3-nano-30b-a3b": 31_577_937_344,
    "nemotron-3-ultra-550b-a55b": 549_308_968_960,  # a latent MoE (moe_latent_size 2048): the card's 550B
    "nemotron-h-56b": 56_324_350_464,
    "olmo-2-7b": 7_298_617_344,
    "olmo-hybrid-7b": 7_430_870_688,
    "phi-3-medium-4k": 13_960_238_080,
    "phi-3-mini-4k": 3_821_079_552,
    "phi-4": 14_659_507_200,
    "pythia-1.4b": 1_414_647_808,
    "qwen1.5-moe-a2.7b": 14_315_784_192,
    "qwen2-57b-a14b": 57_408_658_944,
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-14b": 14_770_033_664,
    "qwen2.5-32b": 32_763_876_352,
    "qwen2.5-3b": 3_085_938_688,
    "qwen2.5-72b": 72_706_203_648,
    "qwen2.5-7b": 7_615_616_512,
    "qwen3-0.6b": 596_049_920,
    "qwen3-1.7b": 1_720_574_976,
    "qwen3-14b": 14_768_307_200,
    "qwen3-235b-a22b": 235_093_634_560,
    "qwen3-30b-a3b": 30_532_122_624,
    "qwen3-32b": 32_762_123_264,
    "qwen3-4b": 4_022_468_096,
    "qwen3-8b": 8_190_735_360,
    "qwen3-coder-480b-a35b": 480_154_875_392,
    "qwen3-next-80b-a3b": 79_674_391_296,
    "qwen3-vl-235b-a22b": 235_093_634_560,
    "qwen3-vl-2b": 1_720_574_976,
    "qwen3-vl-30b-a3b": 30_532_122_624,
    "qwen3-vl-32b": 32_762_123_264,
    "qwen3-vl-4b": 4_022_468_096,
    "qwen3-vl-8b": 8_190_735_360,
    "qwen3.5-122b-a10b": 122_111_526_912,
    "qwen3.5-27b": 26_895_998_464,
    "qwen3.5-35b-a3b": 34_660_610_688,
    "qwen3.5-397b-a17b": 396_346_350_336,
    "qwen3.5-397b-a17b-nvfp4": 396_346_350_336,
    "qwen3.6-35b-a3b": 34_660_610_688,
    "smollm2-1.7b": 1_711_376_384,
}

# The required presets (plus the newest families asked for).
REQUIRED = (
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b", "qwen2.5-7b", "qwen2.5-72b",
    "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "mistral-7b-v0.1", "mixtral-8x7b", "gemma-2-9b",
    "phi-3-mini-4k", "deepseek-v3", "gpt2", "llama-3.3-70b", "gemma-3-27b", "gpt-oss-20b", "gpt-oss-120b",
)
MULTIMODAL = {"gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "llama-4-scout", "qwen3.5-27b", "qwen3.5-35b-a3b",
              "qwen3.5-122b-a10b", "qwen3.5-397b-a17b", "qwen3.6-35b-a3b",
              "gemma-4-26b-a4b", "gemma-4-31b-it-nvfp4", "qwen3.5-397b-a17b-nvfp4", "qwen3-vl-2b", "qwen3-vl-4b", "qwen3-vl-8b", "qwen3-vl-32b", "qwen3-vl-30b-a3b",
              "qwen3-vl-235b-a22b", "kimi-k2.5"}  # each warns that its vision tower is priced apart (tests/model/test_vision.py)
REMOTE_CODE = {"mimo-7b-base"}  # each warns what its remote code builds beyond transformers' model
IDS = [m.id for m in list_models()]


# ---- model presets ----------------------------------------------------------------------------------------------
def test_there_are_at_least_30_presets_including_the_required_ones():
    assert len(IDS) >= 30
    assert set(REQUIRED) <= set(IDS)


def test_ids_are_lower_case_slugs_and_unique():
    assert all(SLUG.match(i) for i in IDS), [i for i in IDS if not SLUG.match(i)]
    assert len(IDS) == len(set(IDS)) == len({i.lower() for i in IDS})
    assert sorted(IDS) == IDS


@pytest.mark.parametrize("preset_id", IDS)
def test_every_preset_is_a_config_json_and_maps(preset_id):
    raw = json.loads((MODELS_DIR / f"{preset_id}.json").read_text())
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", raw["_name_or_path"])
    assert [k for k in raw if k.startswith("_")] == ["_name_or_path"]
    assert raw["architectures"] and raw["model_type"]
    mapped = load_model(preset_id)
    assert mapped.spec.name == raw["_name_or_path"]
    assert not any("not specifically supported" in w for w in mapped.warnings)
    assert bool(mapped.warnings) == (preset_id in MULTIMODAL | REMOTE_CODE)
    assert all("remote code" in w for w in mapped.warnings) or preset_id not in REMOTE_CODE
    assert not any("vision tower ignored" in w for w in mapped.warnings)  # every preset's tower is mapped
    assert count_parameters(mapped.spec).total == VERIFIED_TOTALS[preset_id]


def test_every_preset_has_a_pinned_total():
    assert set(VERIFIED_TOTALS) == set(IDS)


def test_list_models_describes_each_preset():
    presets = {m.id: m for m in list_models()}
    llama = presets["llama-3.1-8b"]
    assert (llama.hub_id, llama.model_type, llama.family) == ("meta-llama/Llama-3.1-8B", "llama", "Llama")
    assert presets["gemma-3-27b"].model_type == "gemma3_text"
    assert "not counted" in presets["deepseek-v3"].notes
    assert all(m.name and m.hub_id and m.family for m in presets.values())


def test_seed_000_model_is_llama_3_1_8b():
    """Seed 000's "8B · 32L": 8.03B parameters, 32 layers."""
    spec = load_model("llama-3.1-8b").spec
    assert spec.num_hidden_layers == 32
    assert round(count_parameters(spec).total / 1e9, 1) == 8.0


def test_checkpoint_dtype_and_quantization_come_from_the_config():
    assert load_model("llama-3.1-8b").checkpoint_dtype == "bf16"
    assert load_model("gemma-2-9b").checkpoint_dtype == "fp32"
    assert load_model("gemma-3-27b").checkpoint_dtype == "bf16"  # from the outer multimodal config
    assert load_model("gpt-oss-20b").quantization == Quantization("mxfp4", 4, 32)
    assert load_model("deepseek-v3").quantization == Quantization("fp8", 8, None)
    assert load_model("qwen3-8b").quantization is None


def test_ids_are_case_insensitive_and_loads_are_cached():
    assert load_model("Llama-3.1-8B") is load_model("llama-3.1-8b")
    assert list_models() == list_models() and list_models() is not list_models()


def test_unknown_id_names_close_matches():
    with pytest.raises(InputError) as err:
        load_model("llama3-8b")
    assert err.value.field == "model"
    assert "llama-3.1-8b" in str(err.value) and "config.json" in str(err.value)
    with pytest.raises(InputError, match="qwen3-8b"):
        load_model("qwen3")


def test_nonsense_id_still_says_what_to_give():
    with pytest.raises(InputError, match="preset"):
        load_model("zzzzzz")
    with pytest.raises(InputError):
        load_model("")


def test_a_path_to_a_config_json_works(tmp_path):
    target = tmp_path / "config.json"
    shutil.copy(MODELS_DIR / "qwen3-8b.json", target)
    by_file = load_model(str(target))
    assert by_file.spec == load_model("qwen3-8b").spec
    assert load_model(tmp_path).spec == by_file.spec  # a folder holding config.json, as a Path
    other = tmp_path / "my-model.json"
    other.write_text(json.dumps({**json.loads(target.read_text()), "num_hidden_layers": 2}))
    assert load_model(other).spec.num_hidden_layers == 2


def test_an_edited_file_is_read_again(tmp_path):
    path = tmp_path / "config.json"
    cfg = json.loads((MODELS_DIR / "gpt2.json").read_text())
    path.write_text(json.dumps(cfg))
    assert load_model(path).spec.num_hidden_layers == 12
    path.write_text(json.dumps({**cfg, "n_layer": 24}) + "\n")
    assert load_model(path).spec.num_hidden_layers == 24


def test_malformed_json_names_the_file_and_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "llama",\n  "hidden_size": 4096,,\n}\n')
    with pytest.raises(InputError) as err:
        load_model(path)
    assert err.value.field == "model"
    assert str(path) in str(err.value) and "line 3" in str(err.value)


def test_missing_file_and_unmappable_config_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_model(tmp_path / "absent.json")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    with pytest.raises(InputError) as err:
        load_model(path)
    assert str(path) in str(err.value) and "hidden_size" in str(err.value)
    path.write_text("[1, 2]")
    with pytest.raises(InputError, match="JSON object"):
        load_model(path)


# ---- GPU catalogue ----------------------------------------------------------------------------------------------
REQUIRED_GPUS = ("a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h100-nvl", "h200", "b200", "b300", "mi300x",
                 "mi325x", "mi355x", "l40s", "l4", "a10g", "rtx-4090", "rtx-5090", "v100-16gb", "v100-32gb",
                 "rtx-a6000")


def test_gpu_catalogue_has_the_required_gpus_with_unique_slug_ids():
    ids = [g.id for g in list_gpus()]
    assert len(ids) == len(set(ids))
    assert all(SLUG.match(i) for i in ids)
    assert set(REQUIRED_GPUS) <= set(ids)
    assert set(FIT_CARD_GPUS) <= set(ids)


@pytest.mark.parametrize("gpu", list_gpus(), ids=lambda g: g.id)
def test_gpu_entry_is_sane(gpu: GPU):
    nominal_gb = float(re.match(r"(\d+(?:\.\d+)?) GB", gpu.nominal_label).group(1))
    assert type(gpu.memory_bytes) is int and type(gpu.cuda_context_bytes) is int
    assert gpu.memory_bytes >= 0.9 * nominal_gb * 1e9
    assert gpu.memory_bytes <= 1.1 * nominal_gb * 2**30
    assert 100 * MiB <= gpu.cuda_context_bytes <= 2 * 2**30
    assert gpu.vendor in ("NVIDIA", "AMD")
    assert gpu.source and gpu.memory_basis and gpu.cuda_context_basis and gpu.name
    if gpu.vendor == "NVIDIA":  # nvidia-smi reports whole MiB
        assert gpu.memory_bytes % MiB == 0
        assert f"{gpu.memory_bytes // MiB} MiB" in gpu.memory_basis


def test_known_reported_totals():
    assert get_gpu("h100-sxm").memory_bytes == 81559 * MiB == 85_520_809_984
    assert get_gpu("a100-80gb").memory_bytes == 81920 * MiB
    assert get_gpu("b200").memory_bytes == 183359 * MiB  # 179.1 GiB = 192.3 GB: DGX's "180 GB" and the "192 GB"
    assert "192" in get_gpu("b200").notes and "180" in get_gpu("b200").notes
    assert get_gpu("mi300x").memory_bytes == 192 * 2**30
    # GB200 NVL72: nvidia-smi's 189471 MiB (185.03 GiB), more than the air-cooled B200's; NVIDIA's rack figures / 72
    gb200 = get_gpu("gb200")
    assert gb200.memory_bytes == 189471 * MiB == 198_674_743_296 > get_gpu("b200").memory_bytes
    assert (gb200.dense_bf16_flops, gb200.dense_fp8_flops, gb200.dense_fp4_flops) == (2.5e15, 5e15, 1e16)
    assert gb200.memory_bandwidth_bytes_per_s == 8e12 and "NVL72" in gb200.interconnect
    assert "inferred" in get_gpu("mi325x").memory_basis


def test_get_gpu_is_case_insensitive_and_unknown_ids_list_the_valid_ones():
    assert get_gpu(" H200 ").id == "h200"
    with pytest.raises(InputError) as err:
        get_gpu("h100")
    assert err.value.field == "gpu"
    assert "h100-sxm" in str(err.value) and "rtx-4090" in str(err.value)


def test_list_gpus_returns_a_fresh_list():
    gpus = list_gpus()
    gpus.clear()
    assert list_gpus()
    with pytest.raises(AttributeError):
        get_gpu("h200").memory_bytes = 1  # type: ignore[misc]


def test_a_config_json_path_reads_the_hf_quant_config_json_beside_it(tmp_path):
    """As vLLM's get_config does for a model folder: ModelOpt 0.29 and earlier wrote the quantization config there;
    a file of another name is read alone, and an edit of the side file is read again."""
    raw = json.loads((MODELS_DIR / "qwen3-8b.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(raw))
    (tmp_path / "other.json").write_text(json.dumps(raw))
    side = tmp_path / "hf_quant_config.json"
    side.write_text(json.dumps({"producer": {"name": "modelopt"}, "quantization": {
        "quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}))
    spec = load_model(str(tmp_path / "config.json")).spec
    assert (spec.checkpoint_weight_dtype, spec.checkpoint_kv_dtype) == ("fp8", "fp8")
    assert load_model(str(tmp_path)).spec == spec  # the folder
    assert load_model(str(tmp_path / "other.json")).spec.checkpoint_kv_dtype is None
    side.write_text(json.dumps({"quantization": {"quant_algo": "NVFP4", "group_size": 16}}))
    spec = load_model(str(tmp_path / "config.json")).spec
    assert (spec.checkpoint_weight_dtype, spec.checkpoint_kv_dtype) == ("nvfp4", None)
