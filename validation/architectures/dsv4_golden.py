"""Golden files for DeepSeek-V4 training (transformers 5.23 models/deepseek_v4/modeling_deepseek_v4.py), written to
tests/golden/ beside the main matrix (this module owns the files of its model, "deepseek-v4-tiny").

    python -m validation.architectures.dsv4_golden            # regenerate its cases in tests/golden/
    python -m validation.architectures.dsv4_golden --check    # re-measure and compare with the files there

Same protocol, JSON schema and code as validation/trace/make_golden.py (its Case, T, run_case and run_matrix), with
the two differences from_pretrained makes for this model: the modules of
DeepseekV4PreTrainedModel._keep_in_fp32_modules_strict (attn_hc, ffn_hc, hc_head, sinks, position_bias, every norm)
are fp32 in the bf16 model (validation.architectures.measure.fp32_kept), and their gradients are fp32 (autograd
gives a parameter a gradient of its own dtype; the protocol's other parameters keep bf16 gradients). Every
parameter has its fp32 master copy, as in the protocol's "mixed" recipe; gradients and fp32 AdamW states only the
parameters a backward reaches (optimizer.build_reached_train_states): not the CSA indexers', whose top-k indices
carry no gradient, as in a real step.

The model is tiny (4 layers: sliding, CSA, HCA, CSA; hc_mult 4; compress rates 4 and 16; window 16); the sequences
close CSA and HCA windows (128 tokens: 32 and 8; 200: 50 and 12, 8 tokens left open; 72 at b = 3). Eager attention
only: DeepSeek-V4 declares no SDPA or flash support. Under full recompute the optimizer step is the traced peak.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

import torch

from validation.trace import make_golden, models, optimizer
from validation.trace.make_golden import T

GOLDEN_DIR = make_golden.GOLDEN_DIR
NAME = "deepseek-v4-tiny"
DEEPSEEK_V4_TINY = {
    "model_type": "deepseek_v4", "architectures": ["DeepseekV4ForCausalLM"], "vocab_size": 1024, "hidden_size": 256,
    "moe_intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 8, "head_dim": 64,
    "q_lora_rank": 96, "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "hc_mult": 4,
    "sliding_window": 16, "o_groups": 4, "o_lora_rank": 48, "index_n_heads": 4, "index_head_dim": 32,
    "index_topk": 8, "num_hash_layers": 1, "partial_rotary_factor": 0.5, "tie_word_embeddings": False,
    "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                    "compressed_sparse_attention"],
    "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
    "torch_dtype": "bfloat16",
}
MATRIX = [T(NAME, 1, 128, "eager"), T(NAME, 2, 128, "eager"), T(NAME, 1, 128, "eager", "full"),
          T(NAME, 1, 200, "eager"), T(NAME, 3, 72, "eager", "full")]


def _build_model(*args, **kwargs):
    """build_model, then the parameters from_pretrained keeps in fp32 (_keep_in_fp32_modules_strict), matched as
    its dtype plan matches them (transformers.core_model_loading: one regex searched in each name)."""
    from transformers.core_model_loading import build_glob_alternation
    model = _BUILD(*args, **kwargs)
    pattern = build_glob_alternation(sorted(model._keep_in_fp32_modules_strict))[0]
    for name, p in model.named_parameters():
        if pattern.search(name):
            p.data = p.data.float()
    return model


_BUILD = models.build_model


def _run_case(case) -> dict:
    """make_golden.run_case, its notes saying which parameters are fp32."""
    doc = make_golden.run_case(case)
    doc["notes"] += (" from_pretrained's _keep_in_fp32_modules_strict: attn_hc, ffn_hc, hc_head, sinks, "
                     "position_bias and every norm are fp32, with fp32 gradients (the bf16 ones' rule is the "
                     "recipe's); every parameter has its fp32 master copy; the CSA indexers' parameters, which backward "
                     "never reaches, have no gradient and no AdamW state. The CSA indexer's "
                     "scoring graph stays allocated through the step (the backward never reaches it).")
    return doc


def owns(stem: str) -> bool:
    return stem.startswith(NAME + "__")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out", type=Path, default=GOLDEN_DIR)
    args = ap.parse_args(argv)
    from validation.trace import accounting
    with mock.patch.dict(make_golden.MODELS, {NAME: DEEPSEEK_V4_TINY}), \
            mock.patch.object(accounting, "build_model", _build_model), \
            mock.patch.object(accounting, "build_train_states", optimizer.build_reached_train_states):
        return make_golden.run_matrix(MATRIX, _run_case, owns, out=args.out, only=args.only,
                                      check=args.check)


if __name__ == "__main__":
    sys.exit(main())
