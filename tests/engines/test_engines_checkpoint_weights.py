"""A serving engine loads a quantized checkpoint as it is stored: with no weight dtype given, vLLM and SGLang price
the decoder linears and routed experts in the dtypes the checkpoint's quantization_config declares
(calculator.model.checkpoint_quant.checkpoint_weight_fields, calculator.memory.inference.serving_weight_dtypes);
transformers' generate() keeps the params dtype; a dtype the user gives always wins."""
import pytest

from calculator import Workload, estimate
from calculator.memory.inference import serving_weight_dtypes
from calculator.model.checkpoint_quant import checkpoint_weight_fields
from calculator.model.presets import load_model


def test_the_quantization_config_names_the_stored_dtypes():
    fp8 = {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}
    assert checkpoint_weight_fields(fp8) == {"checkpoint_weight_dtype": "fp8", "checkpoint_expert_weight_dtype": "fp8"}
    mxfp4 = {"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}}
    assert checkpoint_weight_fields(mxfp4) == {"checkpoint_expert_weight_dtype": "fp4"}  # gpt-oss: experts only
    v4 = dict(fp8, expert_dtype="fp4")  # DeepSeek-V4: fp8 linears, FP4 routed experts
    assert checkpoint_weight_fields(v4) == {"checkpoint_weight_dtype": "fp8", "checkpoint_expert_weight_dtype": "fp4"}
    assert checkpoint_weight_fields({"quantization_config": {"quant_method": "awq", "bits": 4}}) == {}
    assert checkpoint_weight_fields({}) == {}


@pytest.mark.parametrize("model_id, linears, experts", [("deepseek-v3", "fp8", "fp8"), ("gpt-oss-120b", None, "fp4"),
                                                         ("deepseek-v4-flash", "fp8", "fp4"), ("qwen3-8b", None, None)])
def test_presets_carry_their_checkpoint_dtypes(model_id, linears, experts):
    m = load_model(model_id).spec
    assert (m.checkpoint_weight_dtype, m.checkpoint_expert_weight_dtype) == (linears, experts)


def serve(model_id, engine, **kw):
    w = Workload(mode="infer", engine=engine, gpu="h200", parallel={"tp": 8}, seq_len=4096, **kw)
    return estimate(load_model(model_id).spec, w, with_fits=False)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_engines_load_deepseek_v3_in_fp8_unless_told(engine):
    auto, fp8, bf16 = (serve("deepseek-v3", engine, **kw) for kw in ({}, {"weight_dtype": "fp8"},
                                                                       {"weight_dtype": "bf16"}))
    assert auto.serving.weights_bytes == fp8.serving.weights_bytes
    assert bf16.serving.weights_bytes > 1.9 * fp8.serving.weights_bytes  # the linears are ~all of it
    assert any("as the checkpoint stores them" in n and "fp8" in n for n in auto.assumptions)
    assert not any("as the checkpoint stores them" in n for n in bf16.assumptions)


def test_gpt_oss_experts_stay_mxfp4_and_the_rest_bf16():
    m = load_model("gpt-oss-120b").spec
    w = Workload(mode="infer", engine="vllm", gpu="h100-sxm")
    assert serving_weight_dtypes(m, w) == ("bf16", "fp4")
    auto = estimate(m, w, with_fits=False)
    told = estimate(m, w.model_copy(update={"expert_weight_dtype": "fp4"}), with_fits=False)
    assert auto.serving.weights_bytes == told.serving.weights_bytes


def test_transformers_generate_keeps_the_params_dtype():
    m = load_model("deepseek-v3").spec
    assert serving_weight_dtypes(m, Workload(mode="infer", engine="hf")) == ("bf16", "bf16")
    assert serving_weight_dtypes(m, Workload(mode="train")) == ("bf16", "bf16")


def _modelopt(**q):
    return {"quantization_config": {"quant_method": "modelopt", **q}}


def test_a_modelopt_nvfp4_checkpoint_stores_its_routed_experts_in_nvfp4():
    """nvidia/*-NVFP4 (ModelOpt; vLLM quantization/modelopt.py): NVFP4 where `ignore` does not keep the module.
    The released files keep the attention (and the shared experts, routers, first dense layers) in bf16: the routed
    experts take NVFP4 and the rest the model dtype, said in a warning; with nothing of the attention kept, both."""
    released = _modelopt(quant_algo="NVFP4", ignore=["lm_head", "model.layers.0*", "model.layers.1.self_attn*",
                                                      "model.layers.1.mlp.shared_experts*"])
    fields = checkpoint_weight_fields(released)
    assert fields["checkpoint_expert_weight_dtype"] == "nvfp4" and "checkpoint_weight_dtype" not in fields
    assert "keeps the attention and some MLPs or shared experts in the model dtype" in fields["_warnings"][0]
    assert checkpoint_weight_fields(_modelopt(quant_algo="NVFP4", ignore=["lm_head"])) == {
        "checkpoint_weight_dtype": "nvfp4", "checkpoint_expert_weight_dtype": "nvfp4"}
    assert checkpoint_weight_fields(_modelopt(quant_algo="FP8", exclude_modules=["lm_head"])) == {
        "checkpoint_weight_dtype": "fp8", "checkpoint_expert_weight_dtype": "fp8"}  # the older key
    assert "not read" in checkpoint_weight_fields(_modelopt(quant_algo="W4A8_AWQ"))["_warnings"][0]
    # MIXED_PRECISION (nvidia/Qwen3.6-35B-A3B-NVFP4): per layer; FP8 attention, NVFP4 experts and shared expert
    mixed = _modelopt(quant_algo="MIXED_PRECISION", quantized_layers={
        "model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"}, "model.layers.0.mlp.experts": {"quant_algo":
                                                                                                   "W4A16_NVFP4"},
        "model.layers.0.mlp.shared_expert.up_proj": {"quant_algo": "W4A16_NVFP4"}})
    assert checkpoint_weight_fields(mixed) == {"checkpoint_weight_dtype": "fp8", "checkpoint_expert_weight_dtype":
                                               "nvfp4", "checkpoint_mlp_weight_dtype": "nvfp4"}


def test_nvfp4_weights_take_half_a_byte_and_an_fp8_scale_per_16():
    from calculator.memory.inference import quantized_weight_bytes
    assert quantized_weight_bytes(4096 * 1024, "nvfp4", 128) == 4096 * 1024 // 2 + 4096 * 1024 // 16
    assert quantized_weight_bytes(4096 * 1024, "fp4", 128) == 4096 * 1024 // 2 + 4096 * 1024 // 32  # MXFP4


def test_an_nvfp4_checkpoint_served_prices_its_experts_so():
    from calculator.model.hf_config import spec_from_hf_config
    raw = dict(load_model("qwen3-30b-a3b").raw)
    raw["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                  "ignore": ["lm_head", "model.layers.*.self_attn*", "model.layers.*.mlp.gate"]}
    mapped = spec_from_hf_config(raw)
    assert any("ModelOpt NVFP4" in x for x in mapped.warnings)
    w = Workload(mode="infer", engine="vllm", gpu="b200", seq_len=4096)
    auto = estimate(mapped.spec, w, with_fits=False)
    told = estimate(load_model("qwen3-30b-a3b").spec, w.model_copy(update={"expert_weight_dtype": "nvfp4"}),
                    with_fits=False)
    assert auto.serving.weights_bytes == told.serving.weights_bytes
    bf16 = estimate(load_model("qwen3-30b-a3b").spec, w, with_fits=False)
    assert bf16.serving.weights_bytes > 2.8 * auto.serving.weights_bytes  # the experts are ~95% of Qwen3-30B-A3B


def _compressed(weights: dict, ignore: list, fmt: str) -> dict:
    return {"quantization_config": {"quant_method": "compressed-tensors", "format": fmt, "ignore": ignore,
                                    "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}}}}


def test_an_llm_compressor_checkpoint_names_its_float_formats():
    """RedHatAI/*-FP8-dynamic (8-bit float weights per channel) and *-NVFP4 (4-bit float in groups of 16):
    compressed-tensors' config group for "Linear"; integer W4A16 stays with the workload's inputs."""
    fp8 = _compressed({"num_bits": 8, "type": "float", "strategy": "channel"}, ["lm_head"], "float-quantized")
    assert checkpoint_weight_fields(fp8) == {"checkpoint_weight_dtype": "fp8", "checkpoint_expert_weight_dtype": "fp8"}
    nvfp4 = _compressed({"num_bits": 4, "type": "float", "group_size": 16, "strategy": "tensor_group"},
                        ["lm_head", "re:.*mlp.gate$"], "nvfp4-pack-quantized")
    assert checkpoint_weight_fields(nvfp4) == {"checkpoint_weight_dtype": "nvfp4",
                                               "checkpoint_expert_weight_dtype": "nvfp4"}
    kept = _compressed({"num_bits": 4, "type": "float", "group_size": 16}, ["lm_head", "re:.*self_attn.*"],
                       "nvfp4-pack-quantized")
    assert checkpoint_weight_fields(kept) == {"checkpoint_expert_weight_dtype": "nvfp4",
                                              "checkpoint_mlp_weight_dtype": "nvfp4"}
    w4a16 = _compressed({"num_bits": 4, "type": "int", "group_size": 128, "strategy": "group"}, ["lm_head"],
                        "pack-quantized")
    assert checkpoint_weight_fields(w4a16) == {}


def test_a_dense_nvfp4_checkpoint_with_its_attention_kept_prices_its_mlps_in_nvfp4():
    """nvidia/Gemma-4-31B-IT-NVFP4's ignore list names each layer's self_attn and no MLP: the attention stays bf16,
    the MLPs are NVFP4 (ModelSpec.checkpoint_mlp_weight_dtype), each priced so, per GPU under TP."""
    from calculator.engines.common import mlp_linear
    from calculator.memory.inference import quantized_weight_bytes
    from calculator.memory.parallel import stage_shards
    from calculator.model.hf_config import spec_from_hf_config
    raw = dict(load_model("qwen3-8b").raw)
    raw["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                  "ignore": ["lm_head"] + [f"model.layers.{i}.self_attn*" for i in range(36)]}
    mapped = spec_from_hf_config(raw)
    m = mapped.spec
    assert (m.checkpoint_weight_dtype, m.checkpoint_mlp_weight_dtype) == (None, "nvfp4") and not mapped.warnings
    w = Workload(mode="infer", engine="vllm", gpu="b200", seq_len=4096, parallel={"tp": 2})
    got = estimate(m, w, with_fits=False)
    shard = stage_shards(m, w.parallel)[0]
    mlp = mlp_linear(m, 0, 36, 2)
    assert mlp == 36 * 3 * 4096 * 12288 // 2
    bf16 = estimate(load_model("qwen3-8b").spec, w, with_fits=False)
    assert bf16.serving.weights_bytes - got.serving.weights_bytes == 2 * mlp - quantized_weight_bytes(mlp, "nvfp4", 16)
    assert shard.layer_linear > mlp
    assert "dense MLPs and shared experts nvfp4" in next(n for n in got.assumptions if "checkpoint stores" in n)


@pytest.mark.parametrize("q", [
    {"quant_method": "modelopt", "quant_algo": ["NVFP4"] * 1000, "ignore": "lm_head"},
    {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": [1, 2]},
    {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": {"a.experts": 3}},
    {"quant_method": "compressed-tensors", "config_groups": [1]},
    {"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": 5, "weights": {"type": "float"}}}},
    {"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"], "weights": "fp8"}}},
])
def test_a_malformed_quantization_config_is_read_as_nothing_not_a_traceback(q):
    fields = checkpoint_weight_fields({"quantization_config": q})
    assert not {k for k in fields if k.startswith("checkpoint_")}
    assert all(len(w) < 300 for w in fields.get("_warnings", ()))


def test_the_nvfp4_presets_serve_as_their_checkpoints_store_them():
    """nvidia/Gemma-4-31B-IT-NVFP4 (dense: its 20.8B MLP weights NVFP4, its 8.5B attention bf16) and
    nvidia/Qwen3.5-397B-A17B-NVFP4 (routed experts NVFP4): vLLM loads them so unless a weight dtype is given."""
    from calculator.engines.common import mlp_linear
    from calculator.memory.inference import quantized_weight_bytes
    gemma = load_model("gemma-4-31b-it-nvfp4").spec
    assert (gemma.checkpoint_weight_dtype, gemma.checkpoint_mlp_weight_dtype) == (None, "nvfp4")
    w = Workload(mode="infer", engine="vllm", gpu="b200", seq_len=4096)
    auto, bf16 = (estimate(gemma, w.model_copy(update=kw), with_fits=False) for kw in ({}, {"weight_dtype": "bf16"}))
    mlp = mlp_linear(gemma, 0, gemma.num_hidden_layers, 1)
    assert round(mlp / 1e9, 1) == 20.8
    assert bf16.serving.weights_bytes - auto.serving.weights_bytes == 2 * mlp - quantized_weight_bytes(mlp, "nvfp4", 16)
    assert any("dense MLPs and shared experts nvfp4" in n for n in auto.assumptions)
    qwen = load_model("qwen3.5-397b-a17b-nvfp4").spec
    assert (qwen.checkpoint_weight_dtype, qwen.checkpoint_expert_weight_dtype) == (None, "nvfp4")
    w = Workload(mode="infer", engine="vllm", gpu="b200", seq_len=4096, parallel={"tp": 4})
    auto, bf16 = (estimate(qwen, w.model_copy(update=kw), with_fits=False) for kw in ({}, {"weight_dtype": "bf16"}))
    assert auto.serving.starts and not bf16.serving.starts  # 55.7 GiB of weights per B200, not 185
    assert 3.0 < bf16.serving.weights_bytes / auto.serving.weights_bytes < 3.5
