"""Step-3.5 / Step-3.7 (calculator/model/mappers/vlm_more.py map_step3p5): the Hub's own field names read as
transformers 5.23's Step3p7TextConfig reads them, the sliding layers' own query heads counted layer by layer against
the real model, and the model served by vLLM and SGLang only (ModelSpec.served_only: transformers' per-expert loop
and SwiGLU clamps are not described), its other jobs refused once, naming the engine to use."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator import Workload, estimate  # noqa: E402
from calculator.core.errors import InputError  # noqa: E402
from calculator.engines import vllm  # noqa: E402
from calculator.model.config_read import ConfigError  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402

N = 6
# Step-3.5-Flash's config.json field names (its remote code's; transformers maps them through Step3p7TextConfig's
# attribute_map and __post_init__): key/value heads as num_attention_groups, experts as moe_num_experts / moe_top_k,
# the MoE layers as moe_layers_enum, the sliding layers' heads in attention_other_setting, the per-layer lists padded
# with the MTP layer's entry
HUB = {"model_type": "step3p5", "architectures": ["Step3p5ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
       "num_hidden_layers": N, "num_attention_heads": 4, "num_attention_groups": 2, "head_dim": 16, "vocab_size": 100,
       "moe_num_experts": 4, "moe_top_k": 2, "moe_intermediate_size": 32, "share_expert_dim": 32,
       "moe_layers_enum": "2,3,4,5", "sliding_window": 8, "num_nextn_predict_layers": 1,
       "layer_types": ["full_attention", "sliding_attention", "sliding_attention"] * 2 + ["full_attention"],
       "attention_other_setting": {"attention_type": "sliding_attention", "num_attention_heads": 6,
                                   "num_attention_groups": 2, "head_dim": 16, "true_head_dim": 16},
       "use_head_wise_attn_gate": True, "max_position_embeddings": 256}
TOWER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
             patch_size=14)


def _real_language_model(cfg: dict):
    """The language model transformers builds from `cfg` as a Step3p7ForConditionalGeneration's text_config."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    config = transformers.AutoConfig.for_model("step3p7", text_config=dict(cfg), vision_config=TOWER)
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(config)
    return model


def test_the_hub_s_field_names_count_as_transformers_builds_them_layer_by_layer():
    spec = spec_from_hf_config(HUB).spec
    model = _real_language_model(HUB)
    lm = model.model.language_model
    counts = count_parameters(spec)
    assert [layer.total for layer in counts.layers] == [sum(p.numel() for p in layer.parameters())
                                                         for layer in lm.layers]
    assert counts.total == sum(p.numel() for name, p in model.named_parameters()
                               if "language_model" in name or name.startswith("lm_head"))  # the tower apart
    assert spec.swa_num_attention_heads == 6 and spec.layer_types == tuple(HUB["layer_types"][:N])
    assert spec.ffn_types == ("dense", "dense", "moe", "moe", "moe", "moe") and spec.mtp_layers == 1


def test_a_sliding_layer_s_attention_and_gate_have_its_own_heads():
    spec = spec_from_hf_config(HUB).spec
    full, sliding = (count_parameters(spec).layers[i] for i in (0, 1))
    h, d = 64, 16
    # q, o and the per-head gate g_proj scale with the heads; k, v and the q / k norms do not
    assert sliding.attention - full.attention == (6 - 4) * (2 * d * h + h)


def test_transformers_written_names_read_the_same():
    written = {k: v for k, v in HUB.items() if k not in ("num_attention_groups", "moe_num_experts", "moe_top_k",
                                                         "moe_layers_enum", "attention_other_setting")}
    written.update(num_key_value_heads=2, n_routed_experts=4, num_experts_per_tok=2, num_sliding_attention_heads=6,
                   mlp_layer_types=["dense", "dense", "sparse", "sparse", "sparse", "sparse", "sparse"])
    assert spec_from_hf_config(written).spec == spec_from_hf_config(HUB).spec


def test_sliding_layers_with_their_own_key_value_heads_are_refused_naming_the_field():
    other = dict(HUB["attention_other_setting"], num_attention_groups=1)
    with pytest.raises(ConfigError, match="^attention_other_setting: "):
        spec_from_hf_config(dict(HUB, attention_other_setting=other))


@pytest.mark.parametrize("w", [Workload(seq_len=64, gpu="h100-sxm"),
                               Workload(mode="infer", seq_len=64, gpu="h100-sxm")], ids=["train", "generate"])
def test_jobs_other_than_serving_are_refused_naming_the_engines(w):
    spec = spec_from_hf_config(HUB).spec
    with pytest.raises(InputError, match="Step3p7Experts.*serve it with --engine vllm or sglang") as info:
        estimate(spec, w)
    assert info.value.field == "engine"


def test_the_planner_refuses_once():
    from calculator.model.presets import get_gpu
    from calculator.planning.planner import plans_for
    spec = spec_from_hf_config(HUB).spec
    with pytest.raises(InputError, match="serve it with --engine vllm or sglang"):
        plans_for(spec, Workload(seq_len=64, gpu="h100-sxm"), 8, get_gpu("h100-sxm").usable_bytes)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_engines_serve_it(engine):
    spec = spec_from_hf_config(HUB).spec
    w = Workload(mode="infer", engine=engine, seq_len=64, gen_tokens=64, gpu="h100-sxm", parallel={"tp": 2})
    sv = estimate(spec, w, with_fits=False).serving
    assert sv.starts and sv.weights_bytes > 0 and sv.max_concurrent_seqs > 0


def test_tensor_parallelism_must_divide_the_sliding_layers_heads_too():
    spec = spec_from_hf_config(dict(HUB, num_attention_heads=8, attention_other_setting=dict(
        HUB["attention_other_setting"], num_attention_heads=6))).spec
    with pytest.raises(InputError, match="^tp: .*sliding layers' attention heads \\(6\\)"):
        estimate(spec, Workload(mode="infer", engine="vllm", seq_len=64, gpu="h100-sxm", parallel={"tp": 4}))


def test_vllm_s_profile_run_peak_takes_the_wider_sliding_attention():
    spec = spec_from_hf_config(dict(HUB, attention_other_setting=dict(HUB["attention_other_setting"],
                                                                       num_attention_heads=64))).spec
    same = spec.model_copy(update={"swa_num_attention_heads": None})
    w = Workload(mode="infer", engine="vllm", seq_len=64, gpu="h100-sxm")
    assert vllm._forward_peak(spec, w, 8192) > vllm._forward_peak(same, w, 8192)


@pytest.mark.parametrize("overrides, field", [
    ({"attention_other_setting": [1, 2]}, "attention_other_setting"),
    ({"attention_other_setting": {"num_attention_heads": 5}}, "num_sliding_attention_heads"),
    ({"num_sliding_attention_heads": 3}, "num_sliding_attention_heads"),
    ({"moe_layers_enum": "a,b"}, "moe_layers_enum"),
    ({"gating": 7}, "gating"),
    ({"layer_types": ["full_attention"]}, "layer_types"),
])
def test_configs_transformers_could_not_build_are_refused_naming_the_field(overrides, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        spec_from_hf_config({k: v for k, v in dict(HUB, **overrides).items()
                             if not (k == "attention_other_setting" and "num_sliding_attention_heads" in overrides)})
