"""A vision-language model served by vLLM or SGLang (calculator/engines/towers.py): both engines load its vision tower
and projector on the first pipeline stage, their linears split over TP, in the model dtype; --language-model-only
leaves them out; SGLang lowers its default memory fraction for a multimodal model by its own rule."""
from __future__ import annotations

import pytest

from calculator import Workload, estimate
from calculator.engines.towers import sglang_vlm_factor
from calculator.model.presets import load_model
from calculator.model.vision import vision_from_config, vision_tensors

QWEN3_VL_8B = load_model("qwen3-vl-8b").spec


def _serve(engine: str, tp: int = 1, pp: int = 1, **serving):
    w = Workload(mode="infer", engine=engine, gpu="h100-sxm", seq_len=8192, parallel={"tp": tp, "pp": pp},
                 serving=serving)
    return estimate(QWEN3_VL_8B, w)


def _tower_elements(tp: int) -> int:
    """The tower's tensors on one TP rank, counted here from the tensor list: nn.Linear weights split, rest whole."""
    total = 0
    for t in vision_tensors(QWEN3_VL_8B.vision):
        total += (t.numel + tp - 1) // tp if t.role else t.numel
    return total


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("tp", [1, 2])
def test_the_tower_is_loaded_in_bf16_with_its_linears_split_over_tp(engine, tp):
    loaded = _serve(engine, tp=tp, memory_fraction=0.85).serving
    text_only = _serve(engine, tp=tp, memory_fraction=0.85, language_model_only=True).serving
    assert loaded.weights_bytes - text_only.weights_bytes == 2 * _tower_elements(tp)
    # the KV pool gives up the tower's bytes (same fraction, same reserve), to the block (vLLM) or token (SGLang)
    cell = loaded.kv_pool_bytes // loaded.kv_pool_blocks
    assert abs(text_only.kv_pool_bytes - loaded.kv_pool_bytes - 2 * _tower_elements(tp)) < cell
    assert any("vision tower and projector loaded" in n for n in loaded.notes)
    assert not any("vision tower" in n for n in text_only.notes)


def test_the_whole_tower_at_tp1_is_the_models_tower_and_projector():
    assert _tower_elements(1) == 415_891_440 + 160_496_896  # the mapping's warning: tower + projector parameters


def test_vllm_loads_the_tower_on_the_first_pipeline_stage_only():
    est = _serve("vllm", pp=2)
    text_only = estimate(QWEN3_VL_8B, Workload(mode="infer", engine="vllm", gpu="h100-sxm", seq_len=8192,
                                               parallel={"pp": 2}, serving={"language_model_only": True}))
    first, last = (s.terms[0].bytes for s in est.stages)
    first_lm, last_lm = (s.terms[0].bytes for s in text_only.stages)
    assert (first - first_lm, last - last_lm) == (2 * _tower_elements(1), 0)


def _factor(layers: int, hidden: int) -> float:
    return 0.95 * min(1.05, max(0.8, 1 - 0.1 * (layers * hidden * hidden / (24 * 1024 * 1024) - 1)))


def test_sglang_lowers_its_default_fraction_by_its_vlm_rule():
    v = QWEN3_VL_8B.vision
    assert (v.num_layers, v.hidden_size) == (27, 1152)
    assert sglang_vlm_factor(QWEN3_VL_8B)[0] == pytest.approx(_factor(27, 1152)) == pytest.approx(0.9097363, abs=1e-7)
    loaded, text_only = _serve("sglang"), _serve("sglang", language_model_only=True)
    assert loaded.serving.memory_fraction == pytest.approx(text_only.serving.memory_fraction * _factor(27, 1152))
    assert "for the vision tower" in loaded.serving.memory_fraction_rule
    # a fraction the user sets is taken as given
    assert _serve("sglang", memory_fraction=0.8).serving.memory_fraction == 0.8


def test_sglang_reads_qwen2_vl_hidden_size_as_its_config_names_it():
    """Qwen2VLVisionConfig's hidden_size is the merger's output (3,584): SGLang's rule reads that, clamped at 0.8."""
    import transformers
    v, _ = vision_from_config(transformers.Qwen2VLConfig().to_dict(), 3584)
    m = QWEN3_VL_8B.model_copy(update={"vision": v})
    assert (v.hidden_size, v.out_hidden_size, v.num_layers) == (1280, 3584, 32)
    assert sglang_vlm_factor(m)[0] == pytest.approx(0.95 * 0.8)
