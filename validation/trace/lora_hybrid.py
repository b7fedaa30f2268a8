"""LoRA on hybrid and MoE decoder layers, measured with the real PEFT 0.21 on transformers 5.23 on the CPU: what each
decoder layer saves for backward (validation/trace/saved_by_module.py: the storages autograd holds when the forward
ends, each once, parameters and buffers never) and how many trainable parameters its adapters add, for full
fine-tuning and for LoRA on the `qv`, `attention` and `all-linear` target sets (calculator.memory.lora.TARGETS).

Protocol: a tiny bf16 model per model type (CONFIGS: hidden 64, a few layers, the layer kinds in an order that puts
a layer without adapters first where the type allows), training mode, no cache, eager attention, transformers'
PyTorch mixer paths (no flash-linear-attention, mamba_ssm or causal-conv1d here: Workload.mixer_kernels="torch");
from_pretrained's fp32 parameters kept (_keep_in_fp32_modules_strict). LoRA: ``get_peft_model(model,
LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules, bias="none"), autocast_adapter_dtype=False)``
(adapters in the base dtype; `fp32` cases keep PEFT's default fp32 adapters). No gradient checkpointing and no
enable_input_require_grads: the frozen embedding's output does not require grad, PEFT's default without
checkpointing. One forward of b × s tokens with labels; the numbers are per decoder layer.

PEFT refuses `out_proj` and `conv1d` targets on the Mamba model types (peft/tuners/tuners_utils.py
_check_lora_target_modules_mamba): such a case records PEFT's message instead of numbers.

Golden files: tests/golden_lora_hybrid/<name>.json, held by tests/memory/test_lora_hybrid.py:

    python -m validation.trace.lora_hybrid                  # every model of CONFIGS (~1 min)
    python -m validation.trace.lora_hybrid --only qwen3_5   # names containing "qwen3_5"
    python -m validation.trace.lora_hybrid --check          # re-measure, compare with the files
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch


TINY = dict(vocab_size=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
ATTN = dict(num_attention_heads=4, num_key_value_heads=2)
MAMBA2 = dict(mamba_n_heads=8, mamba_n_groups=2, mamba_d_state=16, mamba_chunk_size=16)
MLA = dict(kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16)
GEMMA = dict(TINY, vocab_size_per_layer_input=128, hidden_size=64, hidden_size_per_layer_input=16, intermediate_size=96,
             **ATTN, head_dim=16, sliding_window=8)
GEMMA_TYPES = ["sliding_attention", "full_attention"] * 3

# name -> (model_type, config fields). Each hybrid starts with a layer the qv / attention targets do not adapt when
# its type allows it (rule: layers before the first adapted one save nothing).
CONFIGS: dict[str, tuple[str, dict]] = {
    "qwen3_5": ("qwen3_5_text", dict(
        TINY, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"])),
    "qwen3_next": ("qwen3_next", dict(
        TINY, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4,
        num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[], linear_num_value_heads=4,
        linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "full_attention", "linear_attention"])),
    "nemotron_h": ("nemotron_h", dict(
        TINY, hidden_size=64, intermediate_size=96, num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16, n_groups=2, conv_kernel=4,
        chunk_size=16, hybrid_override_pattern="M*M-M")),
    "bamba": ("bamba", dict(TINY, **ATTN, **MAMBA2, hidden_size=64, num_hidden_layers=3, attn_layer_indices=[1],
                            intermediate_size=96)),
    "falcon_h1": ("falcon_h1", dict(TINY, **ATTN, **MAMBA2, hidden_size=64, num_hidden_layers=2, intermediate_size=96,
                                    mamba_d_ssm=None)),
    "jamba": ("jamba", dict(TINY, **ATTN, hidden_size=64, num_hidden_layers=4, attn_layer_period=2,
                            attn_layer_offset=1, num_experts=4, num_experts_per_tok=2, expert_layer_period=2,
                            expert_layer_offset=1, intermediate_size=96, mamba_d_state=8)),
    "lfm2": ("lfm2", dict(TINY, hidden_size=64, intermediate_size=96, num_hidden_layers=3, **ATTN,
                          layer_types=["conv", "full_attention", "conv"])),
    "kimi_linear": ("kimi_linear", dict(
        TINY, **MLA, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=2, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, linear_num_heads=2,
        linear_head_dim=16, linear_conv_kernel_dim=4, layer_types=["linear_attention", "full_attention",
                                                                    "linear_attention"])),
    "minimax": ("minimax", dict(TINY, hidden_size=64, intermediate_size=96, num_hidden_layers=3, **ATTN,
                                num_local_experts=4, block_size=16,
                                layer_types=["linear_attention", "full_attention", "linear_attention"])),
    "deepseek_v32": ("deepseek_v32", dict(
        TINY, **MLA, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, n_routed_experts=4, n_shared_experts=1,
        num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1, index_n_heads=2, index_head_dim=16,
        index_topk=16)),
    "qwen3_moe": ("qwen3_moe", dict(TINY, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                    num_hidden_layers=2, **ATTN, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                    decoder_sparse_step=1, mlp_only_layers=[0])),
    # Gemma 3n: AltUp (4 streams), LAuReL, PLE, sparse gates on layers 0-1, layers 4-5 reuse the K/V stored by 2
    # (sliding) and 3 (full); Gemma 4: PLE, KV sharing, double-wide MLPs on the reuse layers; Gemma 4 MoE: the MoE
    # block beside the MLP, K = V on the full layers (calculator/model/architectures/gemma_next.py)
    "gemma3n": ("gemma3n_text", dict(
        GEMMA, num_hidden_layers=6, altup_num_inputs=4, laurel_rank=8, num_kv_shared_layers=2,
        activation_sparsity_pattern=[0.95, 0.95, 0.0, 0.0, 0.0, 0.0], layer_types=GEMMA_TYPES)),
    "gemma4": ("gemma4_text", dict(GEMMA, num_hidden_layers=6, global_head_dim=32, num_kv_shared_layers=2,
                                   use_double_wide_mlp=True, layer_types=GEMMA_TYPES)),
    "gemma4_moe": ("gemma4_text", dict(
        GEMMA, num_hidden_layers=4, global_head_dim=32, hidden_size_per_layer_input=0, enable_moe_block=True,
        num_experts=4, top_k_experts=2, moe_intermediate_size=32, attention_k_eq_v=True, num_global_key_value_heads=1,
        layer_types=GEMMA_TYPES[:4])),
    "qwen2_moe": ("qwen2_moe", dict(TINY, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                    shared_expert_intermediate_size=48, num_hidden_layers=2, **ATTN, num_experts=4,
                                    num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[])),
    # OLMo-Hybrid: its Gated DeltaNet names q_proj, k_proj, v_proj and o_proj as the attention does (both adapted)
    "olmo_hybrid": ("olmo_hybrid", dict(
        TINY, hidden_size=64, intermediate_size=96, num_hidden_layers=3, **ATTN, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
        layer_types=["linear_attention", "full_attention", "linear_attention"])),
}

TARGET_MODULES = {"qv": ["q_proj", "v_proj"], "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
                  "all-linear": "all-linear"}
# MLA has no v_proj / k_proj: the engine's qv adapts its two up-projections and attention all five
# (calculator.memory.lora.attention_linears), so the MLA models name those too
MLA_TARGET_MODULES = {"qv": ["q_proj", "v_proj", "q_b_proj", "kv_b_proj"],
                      "attention": ["q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj",
                                    "kv_a_proj_with_mqa", "kv_b_proj"],
                      "all-linear": "all-linear"}
MLA_TYPES = ("kimi_linear", "deepseek_v32")
# LFM2 names its attention's output projection out_proj, as its short convolution's: the attention's four, by path
OVERRIDES = {("lfm2", "attention"): r".*self_attn\.(q_proj|k_proj|v_proj|out_proj)"}
RANK = 8


def peft_moe_types() -> frozenset[str]:
    """The model types whose routed experts and router PEFT 0.21 targets under all-linear, read from the installed
    PEFT and transformers (peft/utils/transformers_weight_conversion.py: _MODEL_TO_CONVERSION_PATTERN, with PEFT's
    own "mixtral" entry, mapped to a base in _MOE_TARGET_MODULE_MAPPING)."""
    from peft.utils.transformers_weight_conversion import _MODEL_TO_CONVERSION_PATTERN, _MOE_TARGET_MODULE_MAPPING
    return frozenset(k for k, v in _MODEL_TO_CONVERSION_PATTERN.items()
                     if v in _MOE_TARGET_MODULE_MAPPING and k == k.lower())


def build(model_type: str, cfg: dict, targets: str | None, fp32_adapters: bool = False):
    """A tiny bf16 model in training mode without a cache, with LoRA adapters on `targets` (None: full
    fine-tuning). Returns (model, hf config)."""
    import transformers
    from peft import LoraConfig, get_peft_model

    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model = model.to(torch.bfloat16).train()
    keep = set(getattr(model, "_keep_in_fp32_modules_strict", None) or ())
    for name, p in model.named_parameters():
        if keep & set(name.split(".")):
            p.data = p.data.float()
    model.config.use_cache = False
    if targets is not None:
        table = MLA_TARGET_MODULES if model_type in MLA_TYPES else TARGET_MODULES
        names = OVERRIDES.get((model_type, targets), table[targets])
        lcfg = LoraConfig(r=RANK, lora_alpha=2 * RANK, lora_dropout=0.0, target_modules=names,
                          bias="none", task_type="CAUSAL_LM")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = get_peft_model(model, lcfg, autocast_adapter_dtype=fp32_adapters)
    return model, config


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.(.*)$")
# Gemma 3n / 4 run AltUp, PLE and the residual scaling in the decoder layer's own forward: their storages are owned
# by the layer's module itself, counted with it (the other types keep the files' rule: modules inside a layer only)
_LAYER_OWN = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.(.*))?$")
OWN_OPS_TYPES = frozenset({"gemma3n_text", "gemma4_text"})


def per_layer(named: dict[str, int], n_layers: int) -> tuple[list[int], list[dict[str, int]]]:
    """(totals, {module within the layer: value}) per decoder layer, from {module or parameter name: value}."""
    totals, parts = [0] * n_layers, [dict() for _ in range(n_layers)]
    for name, value in named.items():
        hit = _LAYER.search(name)
        if hit:
            i = int(hit.group(1))
            totals[i] += value
            part = hit.group(2) or ""
            parts[i][part] = parts[i].get(part, 0) + value
    return totals, parts


@contextmanager
def module_stack(model):
    """The name of the innermost module running, kept by forward pre- and post-hooks (saved_by_module's method)."""
    stack = ["model"]
    hooks = []
    for name, module in model.named_modules():
        if name:
            hooks.append(module.register_forward_pre_hook(lambda mod, args, n=name: stack.append(n)))
            hooks.append(module.register_forward_hook(lambda mod, args, out: stack.pop() and None))
    try:
        yield stack
    finally:
        for h in hooks:
            h.remove()


def saved_by_layer(model, input_ids, n_layers: int, own_ops: bool = False) -> tuple[list[int], list[dict[str, int]]]:
    """(bytes per decoder layer, {module within the layer: bytes} per layer) autograd still holds when the forward
    ends (saved_by_module's rules: each storage once, parameters and buffers never), leaving out the storages saved
    in more than one layer (the RoPE cos/sin tables every attention layer reads: with LoRA the first layer that keeps
    them is not the first layer, so per layer they would move). `own_ops`: the decoder layer module's own storages
    count with the layer (OWN_OPS_TYPES)."""
    import weakref
    layer_re = _LAYER_OWN if own_ops else _LAYER
    params = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    records = []

    class Box:
        __slots__ = ("tensor", "__weakref__")

        def __init__(self, t):
            self.tensor = t

    with module_stack(model) as stack:
        def pack(t):
            if not isinstance(t, torch.Tensor):
                return t
            storage = t.untyped_storage()
            if storage.data_ptr() in params or storage.nbytes() == 0:
                return t
            box = Box(t.detach())
            records.append((weakref.ref(box), stack[-1]))
            return box

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x.tensor if isinstance(x, Box) else x):
            out = model(input_ids=input_ids, labels=input_ids, use_cache=False)
    owners: dict[int, list] = {}
    for ref, owner in records:
        box = ref()
        if box is None:
            continue
        storage = box.tensor.untyped_storage()
        hit = layer_re.search(owner)
        layer = int(hit.group(1)) if hit else None
        entry = owners.setdefault(storage.data_ptr(), [storage.nbytes(), set(), owner])
        entry[1].add(layer)
    del out
    totals, parts = [0] * n_layers, [dict() for _ in range(n_layers)]
    for nbytes, layers, owner in owners.values():
        if len(layers) != 1 or None in layers:
            continue
        hit = layer_re.search(owner)
        i = int(hit.group(1))
        totals[i] += nbytes
        part = hit.group(2) or ""
        parts[i][part] = parts[i].get(part, 0) + nbytes
    return totals, parts


def measure(name: str, targets: str | None, b: int = 2, s: int = 32, fp32_adapters: bool = False) -> dict:
    """One case: {"saved": [bytes per layer], "trainable": [adapter parameters per layer], "modules": [{module:
    bytes} per layer], "trainable_total": the model's} or {"refused": PEFT's message}."""
    model_type, cfg = CONFIGS[name]
    try:
        model, config = build(model_type, cfg, targets, fp32_adapters)
    except ValueError as err:
        return {"refused": str(err)}
    n = config.num_hidden_layers
    ids = torch.randint(3, TINY["vocab_size"], (b, s), generator=torch.Generator().manual_seed(0))
    saved, modules = saved_by_layer(model, ids, n, own_ops=model_type in OWN_OPS_TYPES)
    trainable = per_layer({k: p.numel() for k, p in model.named_parameters() if p.requires_grad}, n)[0] \
        if targets is not None else [0] * n
    total = sum(p.numel() for p in model.parameters() if p.requires_grad) if targets is not None else 0
    return {"saved": saved, "trainable": trainable, "modules": modules, "trainable_total": total}


def saved_outside(name: str, targets: str | None, per_layer_saved: list[int], b: int = 2, s: int = 32) -> int:
    """Bytes saved outside the decoder layers' own storages (the embeddings and what the model does around the
    layers, the storages several layers read, the head, the loss, the batch's ids and targets): every storage once
    (validation/trace/saved_by_module.py) less the per-layer numbers."""
    from validation.trace.saved_by_module import saved_bytes_by_module
    model_type, cfg = CONFIGS[name]
    model, _ = build(model_type, cfg, targets)
    ids = torch.randint(3, TINY["vocab_size"], (b, s), generator=torch.Generator().manual_seed(0))
    return sum(saved_bytes_by_module(model, ids).values()) - sum(per_layer_saved)


# ---- the golden files (tests/golden_lora_hybrid/) ---------------------------------------------------------------------

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "tests" / "golden_lora_hybrid"
B, S = 2, 32
TARGETS = ("full", "qv", "attention", "all-linear")


def golden(name: str) -> dict:
    """One model's file: its config (as transformers writes it), the versions, the runtime PEFT MoE table, and per
    target set the per-layer numbers (or PEFT's refusal)."""
    import peft
    import transformers

    model_type, cfg = CONFIGS[name]
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    cases, totals, outside = {}, {}, {}
    for targets in TARGETS:
        got = measure(name, None if targets == "full" else targets, B, S)
        got.pop("modules", None)
        totals[targets] = got.pop("trainable_total", 0)
        cases[targets] = got
        if model_type in OWN_OPS_TYPES:
            outside[targets] = saved_outside(name, None if targets == "full" else targets, got["saved"])
    return {"name": name, "model_type": model_type, "config": config.to_dict(), "micro_batch": B, "seq_len": S,
            "rank": RANK, "attention": "eager", "mixer_kernels": "torch", "adapter_dtype": "bf16",
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "peft": peft.__version__},
            "peft_moe_types": sorted(peft_moe_types()), "cases": cases,
            "trainable_total": totals,  # every adapter of the model, in the layers or not
            **({"outside": outside} if outside else {})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    bad = 0
    for name in CONFIGS:
        if args.only not in name:
            continue
        doc = golden(name)
        path = GOLDEN_DIR / f"{name}.json"
        if args.check and not path.exists():
            bad += 1
            print(f"ABSENT  {name}")
        elif args.check:
            old = json.loads(path.read_text())
            same = old["cases"] == doc["cases"]
            bad += not same
            print(f"{'same' if same else 'DIFFERENT'}  {name}")
        else:
            path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            print(f"wrote {path.relative_to(GOLDEN_DIR.parents[1])}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
