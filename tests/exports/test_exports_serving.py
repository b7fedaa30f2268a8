"""The vLLM and SGLang exports are parsed with the flag definitions read from the vllm 0.33.0 and sglang 0.5.23
wheels (tests/data/exports/{vllm,sglang}_flags.json; both packages import CUDA-only code, so they are not installed
here): every flag exists, takes a value of its type and one of its choices."""
import pytest

from calculator.core.errors import InputError
from calculator.exports import export
from tests.export_cases import SERVING, TRAINING, command_args, flag_record, model, parsed, recorded_parser


def vllm_args(text: str):
    return recorded_parser("vllm", positional="model_tag").parse_args(command_args(text, "serve"))


def sglang_args(text: str):
    return recorded_parser("sglang").parse_args(command_args(text, "sglang.launch_server"))


def test_records_name_their_release():
    assert flag_record("vllm")["version"] == "0.33.0" and flag_record("sglang")["version"] == "0.5.23"


@pytest.mark.parametrize("case", list(SERVING))
def test_every_serving_case_parses_for_both_engines(case):
    preset, w = SERVING[case]
    v = vllm_args(export(model(preset), w, "vllm").text)
    s = sglang_args(export(model(preset), w, "sglang").text)
    tp = w.rl.rollout_tp if w.mode == "rl" else w.parallel.tp
    assert v.model_tag == model(preset).name == parsed(s, "model_path")
    assert parsed(v, "tensor_parallel_size") == tp == parsed(s, "tp_size")


def test_vllm_engine_fields():
    preset, w = SERVING["vllm-tp4"]
    ns = vllm_args(export(model(preset), w, "vllm").text)
    assert parsed(ns, "gpu_memory_utilization") == 0.85 and parsed(ns, "max_model_len") == 16384
    assert parsed(ns, "max_num_seqs") == 64 and parsed(ns, "max_num_batched_tokens") == 8192
    assert parsed(ns, "block_size") == 32 and parsed(ns, "cache_dtype") == "fp8"
    assert parsed(ns, "enforce_eager") is True
    assert [v for k, v in vars(ns).items() if k.startswith("enable_prefix_caching")] == [False]


def test_sglang_engine_fields():
    preset, w = SERVING["vllm-tp4"]
    ns = sglang_args(export(model(preset), w, "sglang").text)
    assert parsed(ns, "mem_fraction_static") == 0.85 and parsed(ns, "context_length") == 16384
    assert parsed(ns, "max_running_requests") == 64 and parsed(ns, "chunked_prefill_size") == 8192
    assert parsed(ns, "page_size") == 32 and parsed(ns, "kv_cache_dtype") == "fp8_e4m3"
    assert parsed(ns, "disable_radix_cache") is True and parsed(ns, "cuda_graph_backend_decode") == "disabled"
    preset, w = SERVING["sglang-dp-attention"]
    ns = sglang_args(export(model(preset), w, "sglang").text)
    assert parsed(ns, "attn_dp_size") == 8 and parsed(ns, "ep_size") == 8 and parsed(ns, "quantization") == "fp8"


def test_sglang_ep_across_data_parallel_ranks_is_one_server_with_dp_attention():
    """SGLang keeps experts inside a server's TP group (arg_groups/parallel_hook.py: ep_size × moe_dp_size ≤
    tp_size): TP1 × DP8 with EP8 is written as --tp-size 8 --attn-dp-size 8 --ep-size 8, one server; with DP16 two."""
    from calculator import Workload
    for dp, servers in ((8, None), (16, 2)):
        w = Workload(mode="infer", engine="sglang", weight_dtype="fp8", parallel={"dp": dp, "ep": 8, "etp": 1})
        out = export(model("deepseek-v3"), w, "sglang")
        ns = sglang_args(out.text)
        assert parsed(ns, "tp_size") == 8 and parsed(ns, "attn_dp_size") == 8 and parsed(ns, "ep_size") == 8
        assert parsed(ns, "dp_size") == servers
        assert any("one server of --tp-size 8" in line for line in out.warnings)


def test_quantized_replicas_and_rl_rollout():
    preset, w = SERVING["awq"]
    out = export(model(preset), w, "vllm")
    ns = vllm_args(out.text)
    assert parsed(ns, "quantization") == "awq" and parsed(ns, "data_parallel_size") == 2
    assert any("8 concurrent sequences" in line for line in out.warnings)
    assert any("transformers generate()" in line for line in out.warnings)
    preset, w = SERVING["rl-rollout"]
    out = export(model(preset), w, "sglang")
    ns = sglang_args(out.text)
    assert parsed(ns, "mem_fraction_static") == 0.6 and parsed(ns, "context_length") == 1024 + 4096
    assert any("rollout engine is vllm" in line for line in out.warnings)


def test_a_serving_format_refuses_a_training_run():
    preset, w = TRAINING["zero3-dp8"]
    with pytest.raises(InputError, match="format: vllm is a serving engine's command"):
        export(model(preset), w, "vllm")
    with pytest.raises(InputError, match="deepspeed is a training config"):
        export(model(preset), SERVING["awq"][1], "deepspeed")


def test_llm_int8_is_the_bitsandbytes_method():
    from calculator.core.workload import Workload
    w = Workload(mode="infer", weight_dtype="int8", quant_method="llm-int8")
    assert parsed(vllm_args(export(model("qwen2.5-7b"), w, "vllm").text), "quantization") == "bitsandbytes"
    assert parsed(sglang_args(export(model("qwen2.5-7b"), w, "sglang").text), "quantization") == "bitsandbytes"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_language_model_only_is_written_for_both_engines(engine):
    """serving.language_model_only (a vision-language model's tower not loaded) is each engine's
    --language-model-only, parsed with the flag definitions of its release."""
    from calculator import Workload
    w = Workload(mode="infer", engine=engine, serving={"language_model_only": True})
    text = export(model("qwen3-vl-8b"), w, engine).text
    ns = (vllm_args if engine == "vllm" else sglang_args)(text)
    assert parsed(ns, "language_model_only") is True
    default = (vllm_args if engine == "vllm" else sglang_args)(
        export(model("qwen3-vl-8b"), Workload(mode="infer", engine=engine), engine).text)
    assert parsed(default, "language_model_only") is None
