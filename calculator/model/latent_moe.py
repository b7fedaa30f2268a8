"""Latent MoE (Nemotron-3 Super / Ultra: config.json moe_latent_size): the routed experts read and write a narrower
width L than the model's h, between two projections of the MoE block.

transformers 5.23 models/nemotron_h/modeling_nemotron_h.py NemotronHMoE.forward:

    topk = gate(x)                          # the router reads the h-wide input (an fp32 copy of it)
    x_l = fc1_latent_proj(x)                # nn.Linear(h, L, bias=mlp_bias)
    y_l = experts(x_l, topk)                # NemotronHExperts: up (E, f, L), down (E, L, f), relu², no gate
    y = fc2_latent_proj(y_l)                # nn.Linear(L, h, bias=mlp_bias)
    out = y + shared_experts(x)             # the shared expert at h

- Parameters (calculator.model.parameters): the experts' tensors at L (ModelSpec.expert_hidden_size) and the two
  projections, which vLLM 0.33 and SGLang 0.5.23 build as ReplicatedLinear (model_executor/models/nemotron_h.py,
  srt/models/nemotron_h.py): whole on every tensor- and expert-parallel rank, as the router is.
- Saved for backward (saved_change): what the experts keep per routed pair at h — the gathered input and the expert
  output, e·S·2h — is kept at L, and fc2_latent_proj keeps its input, the experts' combined output cast back to the
  model dtype, e·T·L. fc1_latent_proj's input is the block's input, which the shared expert keeps anyway, and its
  output is only gathered. Traced on the CPU (validation/architectures, a tiny nemotron_h at L = 24 and L = 96 on
  either side of h = 64): exact, eager and SDPA.
- Inference (prefill_change): the same per-pair tensors at L, and the latent input and output alive beside them.
- Time (calculator.timing.ops): the expert GEMMs at L, and the two projections as two more linears.

Megatron-Core has its own (--moe-latent-size; megatron/core/transformer/moe/experts.py and moe_layer.py): not
modelled yet, refused with LoRA (PEFT's all-linear adapters would wrap the two projections) by check_training.
"""
from __future__ import annotations

from calculator.core.errors import InputError


def saved_change(m, S: int, d) -> int:
    """What a latent MoE layer of `m` saves beyond the same block at width h, for S = T·k routed pairs of the
    layer's dims `d` (T, h, e): e·S·2·(L − h) + e·T·L (negative when L < h); 0 without a latent MoE."""
    L = m.moe_latent_size
    return 2 * d.e * S * (L - d.h) + d.e * d.T * L if L else 0


def prefill_change(m, T: int, S: int, h: int, e: int) -> int:
    """What a latent MoE layer's prefill keeps alive beyond the same block at width h: the routed pairs' input and
    output at L (e·S·2·(L − h)), and the latent input and output (2·e·T·L); 0 without a latent MoE."""
    L = m.moe_latent_size
    return 2 * e * S * (L - h) + 2 * e * T * L if L else 0


def check_training(w) -> None:
    """Refuse, naming the field, what the latent MoE is not modelled for in training."""
    if w.finetune != "full":
        raise InputError("finetune", f"{w.finetune} on a latent MoE (moe_latent_size) is not modelled: PEFT's "
                                     "all-linear adapters would wrap fc1_latent_proj and fc2_latent_proj, whose "
                                     "saved tensors are not traced; use full fine-tuning")
    if w.stack == "megatron" or w.impl != "hf":
        raise InputError("impl", "a latent MoE (moe_latent_size) is modelled as transformers runs it "
                                 "(NemotronHMoE): Megatron-Core's --moe-latent-size and the fused kernels are not "
                                 "yet; use impl hf with the HF Trainer, DDP, FSDP2 or DeepSpeed")
