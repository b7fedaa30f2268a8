"""The answer to the mode's question at the top of the calculator page (issue 24, dashboard/views/answer.py): training
→ the peak and its moment, the verdict, the largest micro-batch and sequence that fit, the top three remedies;
serving → concurrent sequences, KV pool, largest context; RL → the peak phase. Every figure is the engine's."""
from __future__ import annotations

from calculator import estimate
from calculator.core.units import format_bytes
from calculator.core.workload import Workload
from calculator.model.presets import get_gpu, load_model
from calculator.planning.solvers import max_micro_batch, max_seq_len
from tests.app_page import BASE, GPU, LLAMA, run

H100 = get_gpu(GPU)


def _answer(at) -> str:
    """The answer box's text: its Markdown elements (the box has the key "answer")."""
    texts = [m.value for m in at.markdown]
    first = next(i for i, t in enumerate(texts) if t.startswith(("**Fits", "**Tight", "**Does not", "**vLLM",
                                                                   "**SGLang", "**Peak phase")))
    return "\n".join(texts[first:first + 2])


def test_training_answer_names_the_peak_its_moment_the_verdict_and_three_remedies():
    text = _answer(run())
    assert text.startswith(f"**Does not fit on {H100.name}**: **{format_bytes(BASE.total_bytes, 'GB')}** per GPU at "
                           "the optimizer step")
    assert f"of {format_bytes(H100.usable_bytes, 'GB')} PyTorch can allocate" in text  # one capacity: PyTorch's
    assert "the model states alone exceed this GPU" in text
    remedies = text.split("Top remedies: ")[1]
    assert remedies.count(" **−") == 3


def test_training_answer_gives_the_largest_micro_batch_and_sequence_that_fit():
    at = run()
    at.radio(key="ft").set_value("lora").run()
    assert at.radio(key="rc").value == "full"  # LoRA picked: recompute full (issue 24), as PEFT's examples
    text = _answer(at)
    w = Workload(gpu=GPU, finetune="lora", recompute="full")  # LoRA picked on the page: recompute full, as PEFT's
    cap = H100.usable_bytes
    b80, b100 = max_micro_batch(LLAMA, w, cap, safe=True).value, max_micro_batch(LLAMA, w, cap, safe=False).value
    s80, s100 = max_seq_len(LLAMA, w, cap, safe=True).value, max_seq_len(LLAMA, w, cap, safe=False).value
    assert (f"micro-batch **{b80:,} / {b100:,}** at 4,096 tokens · sequence **{s80:,} / {s100:,}** tokens at "
            "micro-batch 1") in text
    assert b100 >= b80 >= 1


def test_generate_answer_gives_the_largest_batch_and_sequence_that_fit():
    """transformers generate() runs one batch of sequences: the answer says "batch", with the engine's searches."""
    at = run({"mode": "infer", "seq": "8192"})
    text = _answer(at)
    w = Workload(gpu=GPU, mode="infer", seq_len=8192)
    cap = H100.usable_bytes
    b80, b100 = max_micro_batch(LLAMA, w, cap, safe=True).value, max_micro_batch(LLAMA, w, cap, safe=False).value
    s80, s100 = max_seq_len(LLAMA, w, cap, safe=True).value, max_seq_len(LLAMA, w, cap, safe=False).value
    assert s100 > LLAMA.max_position_embeddings == 131_072  # memory allows more than the model was built for
    assert (f"batch **{b80:,} / {b100:,}** at 8,192 tokens · sequence **{s80:,} / {s100:,}** tokens (beyond the "
            f"model's context of 131,072) at batch 1" in text) and "micro-batch" not in text
    assert b100 >= b80 >= 1


def test_serving_answer_is_concurrency_pool_and_context():
    at = run({"model": "qwen3-32b", "mode": "infer", "eng": "vllm", "gpu": "h200", "seq": "32768"})
    est = estimate(load_model("qwen3-32b").spec, Workload(mode="infer", engine="vllm", gpu="h200", seq_len=32768))
    sv = est.serving
    text = _answer(at)
    assert text.startswith("**vLLM starts**")
    assert f"**{sv.max_concurrent_seqs:.2f}** concurrent sequences" in text
    assert f"KV pool **{format_bytes(sv.kv_pool_bytes, 'GB')}**" in text and f"**{sv.max_model_len:,}** tokens" in text


def test_rl_answer_is_the_peak_phase():
    at = run({"mode": "rl", "dp": "8", "zero": "3"})
    text = _answer(at)
    assert text.startswith("**Peak phase: training**")
    assert "Phases: rollout" in text and "scoring" in text
