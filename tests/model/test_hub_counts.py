"""calculator.model.hub.client against a real HTTP server on 127.0.0.1 (tests/hub_server.py), no mocks: the two count paths
(the exact count from the Hub's API page, or summed over the safetensors headers read with Range requests), quantised
checkpoints counted per dtype, and a checkpoint that cannot be counted is a warning, not an error."""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))  # hub_server.py, whatever pytest's import mode

from calculator.model.hub import client as hub  # noqa: E402
from calculator.model.hub.client import CheckpointInfo, HubModel, fetch_model  # noqa: E402
from hub_repos import (  # noqa: E402
    LLAMA_31_8B, LLAMA_31_8B_CONFIG, LLAMA_31_8B_PARAMETERS, NO_RANGE_REPO, QWEN3_8B, QWEN3_8B_CONFIG,
    QWEN3_8B_PARAMETERS, TINY_TENSORS, decoder_tensors, fp8_tensors, llama_shards, many_tensors, numel_by_dtype,
)
from hub_server import (  # noqa: E402,F401  (fixtures are used by name; clean_env is autouse)
    HubServer, clean_env, hub_root, hub_server, hub_url,
)


def test_qwen3_8b_config_and_exact_count_from_api(hub_url: str, hub_server: HubServer, clean_env: Path):
    model = fetch_model(QWEN3_8B, endpoint=hub_url)
    assert isinstance(model, HubModel)
    assert (model.model_id, model.revision, model.from_cache, model.warnings) == (QWEN3_8B, "main", False, ())
    assert model.config == QWEN3_8B_CONFIG
    assert model.checkpoint == CheckpointInfo(QWEN3_8B_PARAMETERS, {"BF16": QWEN3_8B_PARAMETERS}, "api")
    paths = [r.path for r in hub_server.requests]
    assert paths == ["/Qwen/Qwen3-8B/resolve/main/config.json", "/api/models/Qwen/Qwen3-8B/revision/main"]
    assert len(list(clean_env.glob("*.json"))) == 1  # written to $LLM_MEM_CACHE_DIR


def test_the_qwen3_api_count_is_the_architecture_count():
    """The fixture's API number is Qwen3-8B's real count: 36 layers with q/k norms, untied lm_head."""
    assert sum(numel_by_dtype(decoder_tensors(QWEN3_8B_CONFIG, qk_norm=True)).values()) == QWEN3_8B_PARAMETERS


def test_llama_31_8b_exact_count_from_sharded_safetensors_headers(hub_url: str, hub_server: HubServer):
    model = fetch_model(LLAMA_31_8B, endpoint=hub_url, timeout=60)  # generous: 4 parallel reads on a busy machine
    assert model.config == LLAMA_31_8B_CONFIG and model.warnings == ()
    assert model.checkpoint == CheckpointInfo(LLAMA_31_8B_PARAMETERS, {"BF16": LLAMA_31_8B_PARAMETERS},
                                              "safetensors-headers")
    # only headers were read, with Range requests answered 206: one per shard
    shard_reads = [r for r in hub_server.requests if r.path.endswith("-of-00004.safetensors")]
    assert sorted(r.path.rsplit("/", 1)[1] for r in shard_reads) == [
        f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)]
    assert all(r.headers["Range"] == f"bytes=0-{hub.HEADER_PROBE_BYTES - 1}" and r.status == 206 for r in shard_reads)


def test_llama_shards_are_real_safetensors_files_with_the_counted_shapes(hub_root: Path):
    """Cross-check against the safetensors package reading the very files the server sends."""
    safetensors = pytest.importorskip("safetensors")
    counts: dict[str, int] = {}
    for i, expected in enumerate(llama_shards(), 1):
        path = hub_root / LLAMA_31_8B / "resolve/main" / f"model-{i:05d}-of-00004.safetensors"
        with safetensors.safe_open(str(path), framework="numpy") as f:
            assert set(f.keys()) == set(expected)
            for name in f.keys():
                shape = f.get_slice(name).get_shape()
                assert list(shape) == expected[name][1]
                counts[f.get_slice(name).get_dtype()] = counts.get(f.get_slice(name).get_dtype(), 0) + math.prod(shape)
    assert counts == {"BF16": LLAMA_31_8B_PARAMETERS}


def test_single_file_checkpoint_written_by_safetensors_counts_every_dtype(hub_url: str, hub_root: Path):
    model = fetch_model("acme/tiny-model", endpoint=hub_url)
    expected = numel_by_dtype(TINY_TENSORS)  # includes a scalar (shape []) counted as 1
    assert model.checkpoint.parameters_by_dtype == expected
    assert model.checkpoint.total_parameters == sum(expected.values()) == 617
    assert model.checkpoint.source == "safetensors-headers"
    safetensors = pytest.importorskip("safetensors")
    with safetensors.safe_open(str(hub_root / "acme/tiny-model/resolve/main/model.safetensors"), "numpy") as f:
        real = {}
        for name in f.keys():
            s = f.get_slice(name)
            real[s.get_dtype()] = real.get(s.get_dtype(), 0) + math.prod(s.get_shape())
    assert real == expected


def test_header_longer_than_the_first_range_read_takes_a_second_range(hub_url: str, hub_server: HubServer):
    model = fetch_model("acme/many-tensors-model", endpoint=hub_url)
    expected = sum(numel_by_dtype(many_tensors()).values()) + 32 * 8
    assert model.checkpoint.parameters_by_dtype == {"BF16": expected}
    ranges = [r.headers["Range"] for r in hub_server.requests if r.path.endswith("-of-00002.safetensors")]
    first = f"bytes=0-{hub.HEADER_PROBE_BYTES - 1}"
    assert ranges.count(first) == 2 and len(ranges) == 3
    assert [r for r in ranges if r != first][0].startswith(f"bytes={hub.HEADER_PROBE_BYTES}-")


def test_server_that_ignores_range_still_counts(hub_url: str, hub_server: HubServer):
    model = fetch_model(NO_RANGE_REPO, endpoint=hub_url)
    assert model.checkpoint.total_parameters == sum(numel_by_dtype(many_tensors()).values())
    assert {r.status for r in hub_server.requests if r.path.endswith(".safetensors")} <= {200, -1}


def test_quantized_fp8_checkpoint_keeps_quantization_config_and_counts_per_dtype(hub_url: str):
    model = fetch_model("acme/fp8-model", endpoint=hub_url)
    assert model.config["quantization_config"]["quant_method"] == "fp8"
    assert model.checkpoint.parameters_by_dtype == numel_by_dtype(fp8_tensors())
    assert list(model.checkpoint.parameters_by_dtype)[0] == "F8_E4M3"  # largest first
    assert model.warnings == ()


def test_packed_int_checkpoint_warns_that_int_counts_are_storage(hub_url: str):
    model = fetch_model("acme/gptq-model", endpoint=hub_url)
    assert "I32" in model.checkpoint.parameters_by_dtype
    assert model.warnings == ("gptq checkpoint: its integer tensors count packed storage elements, not parameters",)


def test_no_safetensors_is_a_warning_not_an_error(hub_url: str):
    model = fetch_model("acme/bin-only-model", endpoint=hub_url)
    assert model.checkpoint is None and model.config["model_type"] == "llama"
    assert model.warnings == ("no safetensors checkpoint (model.safetensors or model.safetensors.index.json); "
                              "estimating parameters from config.json",)


@pytest.mark.parametrize("model_id, problem", [
    ("acme/missing-shard-model",
     "shard model-00002-of-00002.safetensors listed in model.safetensors.index.json is missing"),
    ("acme/huge-header-model",
     "model.safetensors declares a 1000000000000-byte header, over the 16777216 bytes read per shard"),
    ("acme/bad-header-model", "the safetensors header of model.safetensors is not a JSON object"),
])
def test_broken_checkpoint_is_a_warning_not_an_error(hub_url: str, model_id: str, problem: str):
    model = fetch_model(model_id, endpoint=hub_url)
    assert model.checkpoint is None and model.config["model_type"] == "llama"
    assert model.warnings == (f"could not count parameters from the checkpoint ({problem}); "
                              "estimating them from config.json",)


def test_checkpoint_timeout_is_a_warning(hub_root: Path):
    """Every request takes 0.6 s and the whole call 1 s: config.json arrives, the count does not."""
    server = HubServer(hub_root)
    server.delay = 0.6
    try:
        start = time.monotonic()
        model = fetch_model(QWEN3_8B, endpoint=server.url, timeout=1.0, use_cache=False)
        assert time.monotonic() - start < 1.5
    finally:
        server.stop()
    assert model.config == QWEN3_8B_CONFIG and model.checkpoint is None
    assert len(model.warnings) == 1 and model.warnings[0].startswith("could not count parameters from the checkpoint")
    assert "did not answer within 1 s" in model.warnings[0]


def test_multimodal_config_is_returned_raw_with_a_warning(hub_url: str):
    model = fetch_model("acme/vision-language-model", endpoint=hub_url)
    assert model.config["text_config"]["hidden_size"] == 2560 and "hidden_size" not in model.config
    assert model.warnings[0] == "using text_config of a multimodal model"


def test_a_modelopt_checkpoint_s_hf_quant_config_json_is_read_beside_config_json(hub_url: str,
                                                                                   hub_server: HubServer):
    """ModelOpt 0.29 and earlier kept the quantization config in hf_quant_config.json, which vLLM reads beside
    config.json: fetched when the API page lists it, it prices fp8 weights and an fp8 KV cache."""
    from calculator.model.hf_config import spec_from_hf_config
    from hub_repos import MODELOPT_LEGACY_QUANT, MODELOPT_LEGACY_REPO
    model = fetch_model(MODELOPT_LEGACY_REPO, endpoint=hub_url)
    assert model.config["quantization_config"] == MODELOPT_LEGACY_QUANT
    assert f"/{MODELOPT_LEGACY_REPO}/resolve/main/hf_quant_config.json" in [r.path for r in hub_server.requests]
    spec = spec_from_hf_config(model.config).spec
    assert (spec.checkpoint_weight_dtype, spec.checkpoint_kv_dtype) == ("fp8", "fp8")


def test_no_hf_quant_config_json_is_asked_for_unless_the_api_lists_it(hub_url: str, hub_server: HubServer):
    fetch_model(QWEN3_8B, endpoint=hub_url)
    assert not [r for r in hub_server.requests if r.path.endswith("hf_quant_config.json")]
