"""Whether vLLM 0.33 / SGLang 0.5.23 load the model (calculator/engines/support.py): natively, through their
Transformers backend (a note), or not at all (refused, naming the class)."""
import pytest
from transformers import CONFIG_MAPPING

from calculator import Workload, estimate
from calculator.core.errors import InputError
from calculator.engines import native_types as T
from calculator.engines import support
from calculator.model.hf_config import spec_from_hf_config
from calculator.model.presets import load_model
from calculator.model.spec import ModelSpec

ROOT_QWEN_V1 = "validation/published/qwen_v1/qwen-7b.json"


def _serve(engine: str, **kw) -> Workload:
    return Workload(mode="infer", engine=engine, gpu="h200", seq_len=1024, **kw)


def _written(model_type: str, **fields) -> ModelSpec:
    cfg = CONFIG_MAPPING[model_type]().to_dict() | fields
    return spec_from_hf_config(cfg).spec


def test_the_class_an_engine_loads_is_the_configs_architectures():
    assert load_model("llama-3.1-8b").spec.architecture == "LlamaForCausalLM"
    assert load_model("qwen3-vl-8b").spec.architecture == "Qwen3VLForConditionalGeneration"
    assert load_model("kimi-k2").spec.architecture == "DeepseekV3ForCausalLM"  # model_type kimi_k2
    # a name that is no Python identifier, or none at all, is not read
    assert _written("llama", architectures=["<script>"]).architecture is None
    assert _written("llama", architectures=[]).architecture is None


@pytest.mark.parametrize("preset", ["llama-3.1-8b", "qwen3-next-80b-a3b", "deepseek-v3.2", "gemma-3-4b",
                                    "qwen3-vl-8b", "nemotron-h-56b", "gpt-oss-20b"])
def test_this_years_models_run_natively_on_both_engines(preset):
    m = load_model(preset).spec
    for engine in ("vllm", "sglang"):
        assert support.served_class(m, engine) == (m.architecture, "native")
        assert support.check(m, _serve(engine)) == ""


def test_a_class_only_the_transformers_backend_takes_is_priced_with_a_note():
    # vLLM 0.33 moved GPT-NeoX to its Transformers backend (registry.py _TRANSFORMERS_SUPPORTED_MODELS)
    m = load_model("pythia-1.4b").spec
    assert support.served_class(m, "vllm") == ("GPTNeoXForCausalLM", "transformers")
    est = estimate(m, _serve("vllm"), with_fits=False)
    assert est.serving.notes[0].startswith("vLLM 0.33.0 has no implementation of GPTNeoXForCausalLM: it runs "
                                           "through its Transformers backend")
    # the pool is the engine's either way: the note adds no bytes
    assert est.peak_allocated_bytes == estimate(m.model_copy(update={"architecture": "LlamaForCausalLM"}),
                                                _serve("vllm"), with_fits=False).peak_allocated_bytes
    # PaliGemma has no SGLang model; its transformers class supports custom attention backends
    pali = spec_from_hf_config(CONFIG_MAPPING["paligemma"]().to_dict() | {
        "architectures": ["PaliGemmaForConditionalGeneration"]}).spec
    assert support.served_class(pali, "sglang") == ("PaliGemmaForConditionalGeneration", "transformers")
    assert support.served_class(pali, "vllm") == ("PaliGemmaForConditionalGeneration", "native")


def test_a_model_the_engine_cannot_load_is_refused_naming_the_class():
    olmo_hybrid = load_model("olmo-hybrid-7b").spec  # no SGLang model, and a transformers class without the gate
    with pytest.raises(InputError, match="SGLang 0.5.23 has no implementation of OlmoHybridForCausalLM") as e:
        estimate(olmo_hybrid, _serve("sglang"), with_fits=False)
    assert e.value.field == "engine"
    assert support.check(olmo_hybrid, _serve("vllm")) == ""  # vLLM has its own
    # Qwen (v1)'s remote-code class: vLLM dropped it after 0.23; SGLang still has it
    qwen = load_model(ROOT_QWEN_V1).spec
    assert qwen.architecture == "QWenLMHeadModel"
    with pytest.raises(InputError, match=r"vLLM 0.33.0 cannot load QWenLMHeadModel: vLLM dropped it after v0.23.0"):
        estimate(qwen, _serve("vllm"), with_fits=False)
    assert support.check(qwen, _serve("sglang")) == ""
    # generate() runs whatever transformers runs
    assert estimate(qwen, Workload(mode="infer", gpu="h200", seq_len=1024), with_fits=False).total_bytes > 0


def test_the_transformers_backend_refuses_a_hybrid():
    # Bamba: vLLM dropped its model after 0.23 and the Transformers backend would take the class, but it gives every
    # layer an attention KV cache (models/transformers/base.py _create_attention_instances): Mamba-2 layers have none
    bamba = _written("bamba", architectures=["BambaForCausalLM"])
    assert support.served_class(bamba, "vllm") == ("BambaForCausalLM", "transformers")
    with pytest.raises(InputError, match="Transformers backend gives every layer an attention KV cache, which the "
                                         "model's Mamba layers do not have"):
        support.check(bamba, _serve("vllm"))


def test_a_class_the_tables_do_not_know_is_looked_up_by_model_type():
    m = _written("llama", architectures=["MyOwnLlamaForCausalLM"])
    assert support.served_class(m, "vllm") == ("LlamaForCausalLM", "native")
    hand_made = ModelSpec(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                          vocab_size=1000, model_type="gpt_neox")
    assert support.served_class(hand_made, "vllm") == ("GPTNeoXForCausalLM", "transformers")
    assert support.served_class(hand_made.model_copy(update={"model_type": "no_such_type"}), "vllm") is None


def test_the_tables_transformers_gates_are_the_installed_transformers():
    """The backend sets were generated with transformers 5.23's classes: each checked class outside an engine's own
    models is in its backend set exactly when the class passes that engine's gate (validation/engines)."""
    import transformers
    checked = {c for cs in T.CLASSES_OF_TYPE.values() for c in cs if hasattr(transformers, c)}
    assert len(checked) > 140
    for c in checked:
        cls = getattr(transformers, c)
        if c not in T.SGLANG_NATIVE:
            assert (c in T.SGLANG_TRANSFORMERS) == bool(cls.is_backend_compatible()), c
        if c not in T.VLLM_NATIVE:
            gate = cls.is_backend_compatible() or cls._can_set_attn_implementation()
            assert (c in T.VLLM_TRANSFORMERS) == bool(gate), c


def test_the_planner_refuses_once_what_the_engine_cannot_load():
    """Not "no layout fits": the planner asks the engine's checks once before its layouts."""
    from calculator.model.presets import get_gpu
    from calculator.planning.planner import plans_for
    m = load_model("olmo-hybrid-7b").spec
    with pytest.raises(InputError, match="SGLang 0.5.23 has no implementation of OlmoHybridForCausalLM"):
        plans_for(m, _serve("sglang"), 8, get_gpu("h200").usable_bytes)
    assert plans_for(m, _serve("vllm"), 8, get_gpu("h200").usable_bytes)


def test_attention_laid_out_otherwise_is_attention_to_the_transformers_backend():
    """Gemma 4 unified's layers (the gemma_next kind: softmax attention with shared KV) have no vLLM / SGLang model
    of their own and go through the Transformers backend with a note; MiniMax-01's lightning layers keep a state
    per sequence and are refused there."""
    gemma = _written("gemma4_unified_text")
    assert support.served_class(gemma, "vllm")[1] == "transformers"
    assert "Transformers backend" in support.check(gemma, _serve("vllm"))
    minimax = _written("minimax")
    with pytest.raises(InputError, match="MiniMax lightning attention layers do not have"):
        support.check(minimax, _serve("sglang"))
