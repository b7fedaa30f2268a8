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
    assert sdpa.masked_layer_extra(act.dims(m, w), m, w) == 2 * 2 * 4096 * 4096
    kw = {"micro_batch": 2, "seq_len": 4096}
    assert _saved("gemma-3-1b", **kw, attention="sdpa") - _saved("gemma-3-1b", **kw, attention="flash") == \
        22 * 2 * 2 * 4096 * 4096
    # a window longer than the sequence needs no mask; one as long as it still gets one (test below)
    assert sdpa.masked_layers(m, w.model_copy(update={"seq_len": 511}), range(26)) == 0
    assert sdpa.masked_layers(m, w.model_copy(update={"seq_len": 512}), range(26)) == 22


def test_a_window_as_long_as_the_sequence_still_gets_its_mask_as_transformers_builds_it():
    """masking_utils._ignore_causal_mask_sdpa drops the sliding mask only while kv_length < the window: the real
    Gemma-3 text model on the CPU hands its sliding layers a 4-D mask at s = W and none at s = W - 1, as the
    engine says."""
    torch = __import__("pytest").importorskip("torch")
    T = __import__("pytest").importorskip("transformers")
    from calculator.model.hf_config import spec_from_hf_config
    cfg = T.Gemma3TextConfig(hidden_size=32, vocab_size=300, intermediate_size=16, num_attention_heads=4, head_dim=8,
                             num_hidden_layers=2, num_key_value_heads=2, sliding_window=16,
                             layer_types=["sliding_attention", "full_attention"])
    cfg._attn_implementation = "sdpa"
    model = T.Gemma3ForCausalLM(cfg).eval()
    m = spec_from_hf_config(cfg.to_dict()).spec
    for s, expected in ((16, [True, False]), (15, [False, False])):
        with torch.no_grad():
            assert _layers_given_a_mask(model, dict(input_ids=torch.arange(5, 5 + s)[None])) == expected
        w = Workload(attention="sdpa", seq_len=s)
        assert [m.sdpa_mask_on(i, w) for i in range(2)] == expected


def test_full_recompute_keeps_each_mask_once_and_recomputes_the_bias():
    m = load_model("gemma-3-1b").spec
    w = Workload(micro_batch=2, seq_len=4096, attention="sdpa", recompute="full")
    assert sdpa.mask_tensors(m, w, range(26)) == 1  # the sliding mask; the full layers need none
    assert sdpa.mask_tensors(m, w.model_copy(update={"padded_batch": True}), range(26)) == 2
    e = estimate(m, w, with_fits=False)
    assert next(t for t in e.terms if t.key == "activations.mask").bytes == 2 * 4096 * 4096


def _layers_given_a_mask(model, inputs) -> list[bool]:
    """Which decoder layers of a real transformers model receive a 4-D mask (not None) in one forward."""
    seen: dict[int, bool] = {}
    inner = model.model
    layers = inner.language_model.layers if hasattr(inner, "language_model") else inner.layers
    for i, layer in enumerate(layers):
        layer.self_attn.register_forward_pre_hook(
            lambda mod, args, kwargs, i=i: seen.__setitem__(i, kwargs.get("attention_mask") is not None),
            with_kwargs=True)
    model(**inputs)
    return [seen[i] for i in range(len(layers))]


def _engine_masks(raw: dict, text_tokens: int, px: int) -> list[bool]:
    from calculator.model.hf_config import spec_from_hf_config
    from calculator.stages.vision import lm_workload
    m = spec_from_hf_config(raw).spec
    w = lm_workload(m, Workload(attention="sdpa", seq_len=text_tokens, images_per_sample=1, image_size=px))
    return [m.sdpa_mask_on(i, w) for i in range(m.num_hidden_layers)]


def test_images_give_gemma3_and_paligemma_a_mask_on_every_layer_as_transformers_builds_it():
    """Gemma 3 and PaliGemma OR the images' bidirectional blocks (token_type_ids) into the causal mask, so SDPA gets
    a 4-D mask on every layer (the masked kernel, its bias and repeated k/v, as a padded batch), where the same
    sequence of text alone gets none: the real models on the CPU, layer by layer, against the engine's rule."""
    torch = __import__("pytest").importorskip("torch")
    T = __import__("pytest").importorskip("transformers")
    text = dict(hidden_size=32, vocab_size=300, intermediate_size=16, num_attention_heads=4, head_dim=8)
    cfg = T.Gemma3Config(vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                            num_attention_heads=2, image_size=32, patch_size=8, vision_use_head=False),
                         text_config=dict(text, num_hidden_layers=4, num_key_value_heads=2, sliding_window=64,
                                          layer_types=["sliding_attention", "full_attention"] * 2),
                         mm_tokens_per_image=4, image_token_index=299, boi_token_index=297, eoi_token_index=298)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = T.Gemma3ForConditionalGeneration(cfg).eval()
    ids = torch.tensor([[1, 297] + [299] * 4 + [298] + list(range(5, 22))])  # 4 soft tokens + 4 markers + 20 text
    with torch.no_grad():
        assert _layers_given_a_mask(model, dict(input_ids=ids, pixel_values=torch.randn(1, 3, 32, 32),
                                                token_type_ids=(ids == 299).long())) == [True] * 4
        assert _layers_given_a_mask(model, dict(input_ids=ids[:, 7:])) == [False] * 4
    assert _engine_masks(cfg.to_dict(), 20, 32) == [True] * 4 and _engine_masks(cfg.to_dict(), 20, 32) != \
        [load_model("gemma-3-4b").spec.sdpa_mask_on(i, Workload(attention="sdpa", seq_len=28)) for i in range(4)]

    pg = T.PaliGemmaConfig(vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                              num_attention_heads=2, image_size=16, patch_size=8),
                           text_config=dict(text, model_type="gemma", num_hidden_layers=2, num_key_value_heads=1),
                           projection_dim=32, hidden_size=32, image_token_index=299)
    pg._attn_implementation = "sdpa"
    model = T.PaliGemmaForConditionalGeneration(pg).eval()
    ids = torch.tensor([[299] * 4 + [2] + list(range(5, 12))])  # image, bos, prefix; then the suffix
    with torch.no_grad():
        assert _layers_given_a_mask(model, dict(input_ids=ids, pixel_values=torch.randn(1, 3, 16, 16),
                                                token_type_ids=torch.tensor([[0] * 8 + [1] * 4]))) == [True] * 2
    assert _engine_masks(pg.to_dict(), 8, 16) == [True] * 2


def test_image_masks_are_priced_like_a_padded_batch_under_sdpa_only():
    """With images, Gemma 3's every layer keeps the masked kernel's bias and repeated k/v under SDPA (34 layers of
    Gemma-3-4B: 260 image tokens join 1,024 of text); Gemma 4 with use_bidirectional_attention "vision" only its
    sliding layers (create_masks_for_vision_model leaves the full ones causal); FlashAttention-2 and eager unchanged."""
    m = load_model("gemma-3-4b").spec
    kw = {"micro_batch": 1, "seq_len": 1024, "images_per_sample": 1}
    s = 1024 + 260
    w = Workload(attention="sdpa", **kw)
    from calculator.stages.vision import lm_workload
    d = act.dims(m, lm_workload(m, w))
    assert (d.s, sdpa.masked_layers(m, lm_workload(m, w), range(34))) == (s, 34)
    extra = sdpa.masked_layer_extra(d, m, lm_workload(m, w))
    assert extra == 2 * s * s + 2 * s * 2 * (8 - 4) * 256  # bias e·b·s² + k, v repeated from 4 heads to 8 (d 256)
    sdpa_on = estimate(m, Workload(gpu="h200", attention="sdpa", **kw), with_fits=False)
    flash = estimate(m, Workload(gpu="h200", attention="flash", **kw), with_fits=False)
    assert sdpa_on.components["activations"] - flash.components["activations"] == 34 * extra
    assert "images' bidirectional blocks (all layers)" in next(t for t in sdpa_on.terms
                                                               if t.key == "activations.sdpa_mask").note
    g4 = load_model("gemma-4-26b-a4b").spec
    w4 = lm_workload(g4, Workload(attention="sdpa", seq_len=256, images_per_sample=1))
    assert [g4.sdpa_mask_on(i, w4) for i in range(g4.num_hidden_layers)] == \
        [g4.layer_is_sliding(i) for i in range(g4.num_hidden_layers)]
    assert sdpa.mask_tensors(g4, w4, range(g4.num_hidden_layers)) == 1
    assert not any(g4.sdpa_mask_on(i, w4.model_copy(update={"images_per_sample": 0})) for i in range(30))


def test_a_masked_layer_keeps_no_copy_of_the_attention_output():
    """Phi-3's q is contiguous in (b, a, s, d) (rope_concat), so FlashAttention's output, allocated like q, is copied
    for o_proj (output_copy); with its 2,047-token window at s = 2,047 every layer gets a mask, and the efficient
    kernel writes (b, s, a, d), which the transpose leaves uncopied: each layer keeps the bias and no copy (traced on
    the CPU with a window of 8 at s = 16: 1,024 B = e·T·qd over before)."""
    m = load_model("phi-3-mini-4k").spec
    w = Workload(micro_batch=1, seq_len=2047, attention="sdpa")
    d = act.dims(m, w)
    assert sdpa.masked_layers(m, w, range(32)) == 32
    assert sdpa.output_copy(d, m, w) == 2 * 2047 * 3072
    assert sdpa.masked_layer_extra(d, m, w) == 2 * 2047 * 2047 - 2 * 2047 * 3072
    kw = {"micro_batch": 1, "seq_len": 2047}
    assert _saved("phi-3-mini-4k", **kw, attention="sdpa") - _saved("phi-3-mini-4k", **kw, attention="flash") == \
        32 * (2 * 2047 * 2047 - 2 * 2047 * 3072)
    # one token shorter the window needs no mask: SDPA's flash kernel keeps the copy as FlashAttention-2 does
    short = {"micro_batch": 1, "seq_len": 2046}
    assert _saved("phi-3-mini-4k", **short, attention="sdpa") == _saved("phi-3-mini-4k", **short, attention="flash")
