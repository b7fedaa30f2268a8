"""kv_dtype "auto" (the default) is the KV cache dtype the runtime picks: vLLM 0.33 and SGLang 0.5.23 store the cache
in FP8 when a ModelOpt checkpoint's quantization config names an FP8 KV cache (calculator.model.checkpoint_quant
modelopt_kv_dtype → ModelSpec.checkpoint_kv_dtype; calculator.memory.inference.kv_cache_dtype), transformers'
generate() in bf16; a dtype the user gives always wins, and the exported command says so where the engine's
default would differ."""
import pytest

from calculator import Workload, estimate
from calculator.core.workload import Parallelism
from calculator.exports import export
from calculator.memory.inference import kv_cache_dtype
from calculator.model.checkpoint_quant import checkpoint_weight_fields, modelopt_quantization_config
from calculator.model.presets import load_model
from tests.export_cases import command_args, parsed, recorded_parser

NVFP4 = "gemma-4-31b-it-nvfp4"  # its config.json: quant_method modelopt, kv_cache_scheme {float, 8 bits}


def test_the_released_nvfp4_configs_name_an_fp8_kv_cache():
    for preset in (NVFP4, "qwen3.5-397b-a17b-nvfp4"):
        assert load_model(preset).spec.checkpoint_kv_dtype == "fp8"
    assert load_model("qwen3-8b").spec.checkpoint_kv_dtype is None
    assert load_model("deepseek-v3").spec.checkpoint_kv_dtype is None  # block fp8 weights, no KV scheme


def test_hf_quant_config_json_reads_as_config_json_keeps_it():
    """ModelOpt ≤ 0.29 wrote the scheme to hf_quant_config.json (nvidia/Llama-3.1-70B-Instruct-FP8's, as vendored
    by ai-dynamo/aiconfigurator): flattened, it prices fp8 weights and an fp8 KV cache."""
    legacy = {"producer": {"name": "modelopt", "version": "0.23.0"},
              "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
    flat = modelopt_quantization_config(legacy)
    assert flat == {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                    "exclude_modules": ["lm_head"]}
    assert checkpoint_weight_fields({"quantization_config": legacy}) == {
        "checkpoint_weight_dtype": "fp8", "checkpoint_expert_weight_dtype": "fp8", "checkpoint_kv_dtype": "fp8"}
    no_kv = {"quantization": {"quant_algo": "NVFP4", "group_size": 16}}
    assert "checkpoint_kv_dtype" not in checkpoint_weight_fields({"quantization_config": no_kv})
    nvfp4_kv = {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_scheme": {"type": "float", "num_bits": 4}}
    assert "checkpoint_kv_dtype" not in checkpoint_weight_fields({"quantization_config": nvfp4_kv})


def _serve(engine: str, **kw):
    w = Workload(mode="infer", engine=engine, seq_len=8192, gen_tokens=1024, gpu="h100-sxm", **kw)
    return load_model(NVFP4).spec, w


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_serving_engines_hold_the_checkpoint_s_fp8_kv_cache_by_default(engine):
    m, w = _serve(engine)
    auto, bf16 = (estimate(m, w.model_copy(update={"kv_dtype": kv}), with_fits=False).serving
                  for kv in ("auto", "bf16"))
    assert kv_cache_dtype(m, w) == "fp8"
    assert 2 * auto.kv_bytes_per_token == bf16.kv_bytes_per_token
    assert auto.kv_pool_bytes == pytest.approx(bf16.kv_pool_bytes, rel=1e-4)  # ~the same pool (SGLang: page
    # rounding), twice the tokens
    assert auto.max_concurrent_seqs > 1.9 * bf16.max_concurrent_seqs
    assert any(n.startswith("KV cache fp8: the checkpoint's quantization config") for n in auto.notes)
    assert not any(n.startswith("KV cache") for n in bf16.notes)


def test_generate_keeps_bf16_and_a_given_dtype_wins():
    m = load_model(NVFP4).spec
    hf = Workload(mode="infer", seq_len=4096, gpu="h100-sxm")
    assert kv_cache_dtype(m, hf) == "bf16"
    assert kv_cache_dtype(m, hf.model_copy(update={"engine": "vllm", "kv_dtype": "fp16"})) == "fp16"
    assert kv_cache_dtype(load_model("qwen3-8b").spec, hf.model_copy(update={"engine": "vllm"})) == "bf16"
    terms = {t.key: t for t in estimate(m, hf, with_fits=False).terms}
    assert terms["kv_cache"].label == "KV cache (bf16)"


def test_the_exported_commands_pass_a_given_dtype_the_default_would_change():
    m, w = _serve("vllm", parallel=Parallelism(tp=2))
    vllm = recorded_parser("vllm", positional="model_tag")
    sglang = recorded_parser("sglang")
    for kv, want_vllm, want_sglang in (("auto", None, None), ("bf16", "bfloat16", "bf16"), ("fp8", "fp8", "fp8_e4m3")):
        job = w.model_copy(update={"kv_dtype": kv})
        v = vllm.parse_args(command_args(export(m, job, "vllm").text, "serve"))
        s = sglang.parse_args(command_args(export(m, job.model_copy(update={"engine": "sglang"}), "sglang").text,
                                           "sglang.launch_server"))
        assert (parsed(v, "cache_dtype"), parsed(s, "kv_cache_dtype")) == (want_vllm, want_sglang)
