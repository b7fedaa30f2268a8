"""A vision-language model's tower in the estimate (calculator/stages/vision.py, issue 21): no images, no change; with
images their tokens lengthen the language model's sequence and the tower's weights, states, saved activations and
forward working set are their own terms."""
from __future__ import annotations

import pytest

from calculator import Workload, estimate
from calculator.core.errors import InputError
from calculator.model.parameters import count_parameters
from calculator.model.presets import load_model
from calculator.model.vision import image_tokens, vision_parameters
from calculator.model.vision.saved import tower_saved_bytes


@pytest.fixture(scope="module")
def qwen35():
    return load_model("qwen3.5-27b").spec


@pytest.fixture(scope="module")
def gemma27():
    return load_model("gemma-3-27b").spec


def _terms(e) -> dict:
    return {t.key: t for t in e.terms}


@pytest.mark.parametrize("kw", [dict(), dict(finetune="lora"), dict(finetune="qlora", recompute="full"),
                                dict(mode="infer", gen_tokens=64), dict(parallel={"dp": 4, "zero": 3}),
                                dict(vision_tower="trained", image_size=448)])
@pytest.mark.parametrize("name", ["qwen3.5-27b", "gemma-3-27b", "llama-4-scout", "gemma-4-26b-a4b"])
def test_no_images_is_the_text_models_estimate_to_the_byte(name, kw):
    spec = load_model(name).spec
    w = Workload(seq_len=1024, **kw)
    with_tower = estimate(spec, w, with_fits=False)
    assert with_tower.to_dict() == estimate(spec.model_copy(update={"vision": None}), w, with_fits=False).to_dict()
    assert not any("vision" in t.key for t in with_tower.terms)


def test_qwen35_lora_with_images_lengthens_the_sequence_and_prices_the_frozen_tower(qwen35):
    w = Workload(finetune="lora", seq_len=2048, images_per_sample=4, image_size=1024)
    e = estimate(qwen35, w, with_fits=False)
    t = _terms(e)
    per_image = image_tokens(qwen35.vision, 1024, 1024)
    assert (per_image.patches, per_image.lm_tokens) == (4096, 1026)  # 64 × 64 patches of 16 px, 2 × 2 merged, + 2
    text = _terms(estimate(qwen35, w.model_copy(update={"images_per_sample": 0, "seq_len": 2048 + 4 * 1026}),
                           with_fits=False))
    for key in ("activations.norms", "activations.attention", "activations.mlp", "logits.loss"):
        assert t[key].bytes == text[key].bytes  # the LM runs text + image tokens
    n = vision_parameters(qwen35.vision)
    assert t["weights.vision"].bytes == 2 * (n.tower + n.projector) == 2 * (415_891_440 + 44_838_656)
    assert "6,152 tokens" in t["weights.vision"].note
    assert "transient.vision_forward" in t and "activations.vision" not in t and "gradients.vision" not in t
    assert e.parameters == count_parameters(qwen35).total  # the language model's: the tower is its own term


def test_gemma3_full_fine_tune_with_a_trained_tower_has_its_states_and_activations(gemma27):
    w = Workload(seq_len=2048, images_per_sample=1, vision_tower="trained")
    t = _terms(estimate(gemma27, w, with_fits=False))
    n = vision_parameters(gemma27.vision).total
    assert n == 416_866_032 + 6_194_304
    assert (t["weights.vision"].bytes, t["master_weights.vision"].bytes, t["gradients.vision"].bytes) == (
        2 * n, 4 * n, 2 * n)
    assert t["optimizer_states.vision"].bytes == 8 * n + 4 * vision_parameters(gemma27.vision).tensors
    blocks, outside = tower_saved_bytes(gemma27.vision, 1, 896, 2, "flash")
    assert t["activations.vision"].bytes == blocks + outside
    assert blocks == 27 * (2 * (2 * 4096 * 1152 + 8 * 4096) + 12 * 4096 * 1152 + 4 * 4096 * 4304 + 4 * 16 * 4096)
    assert t["activations.norms"].bytes == _terms(estimate(gemma27, Workload(seq_len=2048 + 260),
                                                           with_fits=False))["activations.norms"].bytes


def test_gemma4_trained_tower_runs_the_whole_patch_budget_of_every_image():
    g4 = load_model("gemma-4-26b-a4b").spec
    w = Workload(seq_len=2048, images_per_sample=2, vision_tower="trained")  # 1024² by default
    t = _terms(estimate(g4, w, with_fits=False))
    it = image_tokens(g4.vision, 1024, 1024)
    assert (it.patches, it.merged, it.lm_tokens) == (2520, 256, 258)  # 2304 real patches padded to 2520
    n = vision_parameters(g4.vision).total
    assert n == 569_548_080 + 3_244_032 and t["gradients.vision"].bytes == 2 * n
    assert t["activations.norms"].bytes == _terms(estimate(g4, Workload(seq_len=2048 + 2 * 258),
                                                           with_fits=False))["activations.norms"].bytes
    blocks, outside = tower_saved_bytes(g4.vision, 2, 1024, 2, "flash")
    assert t["activations.vision"].bytes == blocks + outside
    N, hv, a = 2 * 2520, 1152, 16
    block = (4 * (8 * N * hv + 8 * N + 4 * hv) + 2 * (8 * N * hv + 8 * N * a + 4 * 72) + 4 * N * hv + 8 * N * a
             + 12 * N * hv + 8 * N * 4304 + 4 * a * N)
    assert blocks == 27 * block
    lora = _terms(estimate(g4, w.model_copy(update={"finetune": "lora", "lora_targets": "all-linear"}),
                           with_fits=False))["weights.vision_adapters"]
    assert "191 linears" in lora.note  # 27 × 7 blocks' + the patch embedder's + embed_vision's


def test_a_trained_tower_under_zero3_and_full_recompute(gemma27):
    w = Workload(seq_len=1024, images_per_sample=2, vision_tower="trained", recompute="full",
                 parallel={"dp": 8, "zero": 3})
    t = _terms(estimate(gemma27, w, with_fits=False))
    n = vision_parameters(gemma27.vision).total
    assert t["weights.vision"].bytes == 2 * -(-n // 8) and t["gradients.vision"].bytes == 2 * -(-n // 8)
    _, outside = tower_saved_bytes(gemma27.vision, 2, 896, 2, "flash")
    assert t["activations.vision"].bytes == 27 * 2 * 8192 * 1152 + outside  # each block keeps its input


def test_eager_attention_scores_dominate_a_trained_towers_activations(gemma27):
    w = Workload(seq_len=1024, images_per_sample=1, vision_tower="trained")
    flash = _terms(estimate(gemma27, w, with_fits=False))["activations.vision"].bytes
    eager = _terms(estimate(gemma27, w.model_copy(update={"attention": "eager"}), with_fits=False))
    assert eager["activations.vision"].bytes - flash == 27 * (6 * 16 * 4096 ** 2 - 4 * 16 * 4096)


def test_lora_through_the_tower_adds_adapters_and_keeps_its_activations(qwen35):
    w = Workload(finetune="lora", seq_len=1024, images_per_sample=1, image_size=512, vision_tower="trained")
    t = _terms(estimate(qwen35, w, with_fits=False))
    assert t["weights.vision_adapters"].bytes > 0 and t["gradients.vision"].bytes == t["weights.vision_adapters"].bytes
    blocks, outside = tower_saved_bytes(qwen35.vision, 1, 512, 2, "flash")
    assert t["activations.vision"].bytes > blocks + outside  # + the adapters' r-wide intermediates


def test_qlora_quantizes_the_towers_linears(qwen35):
    t = _terms(estimate(qwen35, Workload(finetune="qlora", seq_len=1024, images_per_sample=1), with_fits=False))
    n = vision_parameters(qwen35.vision)
    assert t["weights.vision"].bytes < 2 * n.total and "NF4" in t["weights.vision"].label


def test_inference_loads_the_tower_and_caches_the_image_tokens(qwen35):
    w = Workload(mode="infer", seq_len=512, gen_tokens=128, images_per_sample=2, image_size=1024)
    t = _terms(estimate(qwen35, w, with_fits=False))
    text = _terms(estimate(qwen35, Workload(mode="infer", seq_len=512 + 2 * 1026, gen_tokens=128), with_fits=False))
    assert t["kv_cache"].bytes == text["kv_cache"].bytes
    assert t["weights.vision"].bytes == 2 * vision_parameters(qwen35.vision).total
    assert "transient.vision_prefill" in t


def test_images_need_a_vision_tower():
    with pytest.raises(InputError) as err:
        estimate(load_model("llama-3.1-8b").spec, Workload(images_per_sample=1), with_fits=False)
    assert err.value.field == "images_per_sample"
