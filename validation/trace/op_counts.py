"""Count the PyTorch operators one decoder layer of a real `transformers` model dispatches, forward and backward:
what eager mode pays host time for (calculator/timing/roofline.py HOST_OPS, checked by tests/timing/test_ops.py).

The model is built from a preset's config on the meta device with 1 and with 3 decoder layers; the difference over
two layers is one layer's count (embedding, final norm and loss cancel out). View operators (view, transpose,
expand, slice, ...) launch no kernel and are not counted. SDPA is replaced by a stand-in of one operator forward and
one backward (on CUDA it is a single FlashAttention call; on meta it would decompose into the math path).

    .venv/bin/python -m validation.trace.op_counts          # writes validation/op_counts.json (needs torch + transformers)
"""
from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "op_counts.json"
CASES = (("llama-3.2-1b", "sdpa"), ("llama-3.2-1b", "eager"), ("qwen3-0.6b", "sdpa"), ("gemma-3-1b", "sdpa"),
         ("gpt2", "sdpa"), ("qwen3-30b-a3b", "sdpa"))
VIEWS = {"aten.detach.default", "aten.view.default", "aten._unsafe_view.default", "aten.t.default",
         "aten.transpose.int", "aten.expand.default", "aten.slice.Tensor", "aten.unsqueeze.default",
         "aten.permute.default", "aten.select.int", "aten._reshape_alias.default", "aten.alias.default",
         "aten.as_strided.default", "aten.squeeze.dim", "aten.split.Tensor", "aten.unbind.int",
         "aten.split_with_sizes.default", "aten.chunk.default", "aten.reshape.default"}


def _count(config: dict, layers: int, attention: str) -> tuple[int, int]:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers import AutoConfig, AutoModelForCausalLM

    class Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if str(func) not in VIEWS:
                self.n += 1
            return func(*args, **(kwargs or {}))

    cfg = {k: v for k, v in config.items() if not k.startswith("_") and k not in ("architectures",
                                                                                  "transformers_version")}
    cfg["num_hidden_layers"] = layers
    if cfg.get("layer_types"):
        cfg["layer_types"] = cfg["layer_types"][:layers]
    model_type = cfg.pop("model_type")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **cfg), dtype=torch.bfloat16,
                                                 attn_implementation=attention)
    model.train()
    ids = torch.zeros(1, 256, dtype=torch.long, device="meta")
    fwd, bwd = Counter(), Counter()
    with fwd:
        loss = model(input_ids=ids, labels=ids).loss
    with bwd:
        loss.backward()
    return fwd.n, bwd.n


class _OneOpAttention:
    """SDPA as one operator each way (the CUDA flash kernel), installed for the count."""

    def __enter__(self):
        import torch
        import transformers.integrations.sdpa_attention as sdpa

        class Flash(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v):
                ctx.save_for_backward(q, k, v)
                return torch.empty_like(q)

            @staticmethod
            def backward(ctx, grad):
                q, k, v = ctx.saved_tensors
                return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

        self.module, self.saved = sdpa.torch.nn.functional, sdpa.torch.nn.functional.scaled_dot_product_attention
        self.module.scaled_dot_product_attention = lambda q, k, v, *a, **kw: Flash.apply(q, k, v)
        return self

    def __exit__(self, *exc):
        self.module.scaled_dot_product_attention = self.saved


def count_layer(model_id: str, attention: str) -> dict:
    from calculator.model.presets import MODELS_DIR
    config = json.loads((MODELS_DIR / f"{model_id}.json").read_text())
    with _OneOpAttention():
        f1, b1 = _count(config, 1, attention)
        f3, b3 = _count(config, 3, attention)
    return {"forward": (f3 - f1) / 2, "backward": (b3 - b1) / 2}


def main() -> None:
    import torch
    import transformers
    out = {"torch": torch.__version__, "transformers": transformers.__version__, "layers": {}}
    for model_id, attention in CASES:
        out["layers"][f"{model_id}/{attention}"] = count_layer(model_id, attention)
        print(model_id, attention, out["layers"][f"{model_id}/{attention}"])
    OUT.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
