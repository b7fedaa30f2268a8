"""PyTorch SDPA with a mask (calculator/memory/sdpa.py), held to the H200's padded and sliding-window runs."""
from calculator import Workload, estimate
from calculator.memory import activations as act
from calculator.memory import sdpa
from calculator.model.presets import load_model


def _saved(model: str, **kw) -> int:
    c = estimate(load_model(model).spec, Workload(gpu="h200", **kw), with_fits=False).components
    return c["activations"]


def test_a_padded_batch_saves_the_mask_bias_and_repeated_kv_per_layer():
    # H200, Llama-3.2-1B b=4 s=4096: the padded run saved 3,758,227,456 B more than its twin: 16 × (bf16 bias b·s·s
    # + repeated k/v 2·e·T·(qd − kvd)) + the 2-D int64 attention_mask the harness holds (4 × 4096 × 8)
    kw = {"micro_batch": 4, "seq_len": 4096, "attention": "sdpa"}
    per_layer = 2 * 4 * 4096 * 4096 + 2 * 2 * 4 * 4096 * (2048 - 512)
    assert _saved("llama-3.2-1b", **kw, padded_batch=True) - _saved("llama-3.2-1b", **kw) == 16 * per_layer
    assert 16 * per_layer + 4 * 4096 * 8 == 3_758_227_456
    # FlashAttention-2 unpads and eager builds its 4-D mask anyway: padding changes neither
    for attention in ("flash", "eager"):
        other = {**kw, "attention": attention}
        assert _saved("llama-3.2-1b", **other, padded_batch=True) == _saved("llama-3.2-1b", **other)


def test_sliding_window_layers_shorter_than_the_sequence_take_the_masked_kernel():
    # Gemma-3-1B: 22 of 26 layers slide over 512 tokens; at s = 4096 each keeps a bf16 bias; one KV head, so
    # repeat_kv is a view (no copy). H200: −2.68% → −0.11% (transformers), −7.42% → −0.66% (Liger)
    m = load_model("gemma-3-1b").spec
    w = Workload(micro_batch=2, seq_len=4096, attention="sdpa")
    assert sdpa.masked_layers(m, w, range(26)) == 22
    assert sdpa.masked_layer_extra(act.dims(m, w), m, False) == 2 * 2 * 4096 * 4096
    kw = {"micro_batch": 2, "seq_len": 4096}
    assert _saved("gemma-3-1b", **kw, attention="sdpa") - _saved("gemma-3-1b", **kw, attention="flash") == \
        22 * 2 * 2 * 4096 * 4096
    # a window as long as the sequence needs no mask
    assert sdpa.masked_layers(m, w.model_copy(update={"seq_len": 512}), range(26)) == 0


def test_full_recompute_keeps_each_mask_once_and_recomputes_the_bias():
    m = load_model("gemma-3-1b").spec
    w = Workload(micro_batch=2, seq_len=4096, attention="sdpa", recompute="full")
    assert sdpa.mask_tensors(m, w, range(26)) == 1  # the sliding mask; the full layers need none
    assert sdpa.mask_tensors(m, w.model_copy(update={"padded_batch": True}), range(26)) == 2
    e = estimate(m, w, with_fits=False)
    assert next(t for t in e.terms if t.key == "activations.mask").bytes == 2 * 4096 * 4096
