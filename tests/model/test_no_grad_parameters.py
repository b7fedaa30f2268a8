"""Parameters backward never reaches (calculator.model.architectures.no_grad_parameters: each kind's no_grad_shapes)
and what each training stack holds for them (calculator.stacks.common.NoGradRule, the stack's NO_GRAD).

A top-k indexer hands the attention integer key indices, so no gradient flows back into it: DSA's (DeepSeek-V3.2,
GLM-5, Mistral-Large-4, MiniMax-M3) and DeepSeek-V4's CSA indexers. Held to the real models: a tiny model of each type
built by transformers 5.23 on the CPU, one forward and backward, and the parameters left with .grad None."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator import Workload, estimate  # noqa: E402
from calculator.core.workload import RECIPES  # noqa: E402
from calculator.model import architectures  # noqa: E402
from calculator.memory.parallel import stage_shards  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.parameters import count_parameters  # noqa: E402
from calculator.model.presets import load_model  # noqa: E402
from calculator.stacks import MODULES, common  # noqa: E402
from calculator.stages.held import states_for_stack  # noqa: E402
from validation.architectures.causal_lm import causal_lm, text_parameters  # noqa: E402
from tests.model.mappers import test_dsa, test_mistral4  # noqa: E402

torch.set_num_threads(1)

_DSA = {"deepseek_v32": 2, "glm_moe_dsa": 2, "minimax_m3_vl_text": 2, "deepseek_v4": 2}
CASES = [(t, cfg) for t, cfg in test_dsa.CASES if t in _DSA and cfg]
CASES += [("mistral_large4_text", test_mistral4.SIZES["mistral_large4_text"])]


def _without_grad(model_type: str, cfg: dict) -> tuple[tuple[int, int], object]:
    """((parameters, tensors) left with .grad None after one backward of the real model, its config)."""
    if model_type == "mistral_large4_text":
        _, config = test_mistral4.written_config(model_type)
    else:
        config = transformers.CONFIG_MAPPING[model_type](**cfg)
    torch.manual_seed(0)
    model = causal_lm(config).float()
    model.train()
    ids = torch.randint(0, 100, (1, 23), generator=torch.Generator().manual_seed(0))
    logging.disable(logging.WARNING)
    try:
        model(input_ids=ids, labels=ids).loss.backward()
    finally:
        logging.disable(logging.NOTSET)
    none = [p for p in text_parameters(model) if p.grad is None]
    return (sum(p.numel() for p in none), len(none)), config


@pytest.mark.parametrize("model_type,cfg", CASES, ids=[f"{t}-{i}" for i, (t, _) in enumerate(CASES)])
def test_the_parameters_without_gradient_are_the_indexers(model_type, cfg):
    """Exactly the indexers' tensors keep .grad None (the real model), and the engine counts the same parameters
    and tensors; every other parameter, routed experts included, gets a gradient."""
    real, config = _without_grad(model_type, cfg)
    written = config.text_config.to_dict() if model_type == "mistral_large4_text" else config.to_dict()
    m = spec_from_hf_config(written).spec
    assert real[0] > 0
    assert architectures.no_grad_parameters(m, 0, m.num_hidden_layers) == real


def test_torch_optim_stacks_hold_no_gradient_or_state_for_them_and_flat_buffers_do():
    """HF Trainer, DDP and FSDP2 (torch.optim: state at a parameter's first gradient) hold no AdamW state for them,
    and no gradient (DDP: its buckets still cover them, unless the gradients are the bucket views); DeepSpeed and
    Megatron lay out flat buffers over every trainable parameter."""
    w = Workload(mode="train")
    rules = {name: common.no_grad_rule(mod, w) for name, mod in MODULES.items()}
    assert {n for n, r in rules.items() if not r.states} == {"hf-trainer", "ddp", "fsdp2"}
    assert {n for n, r in rules.items() if not r.grads} == {"hf-trainer", "ddp", "fsdp2"}
    assert common.no_grad_rule(MODULES["ddp"], w.model_copy(update={"ddp_bucket_view": True})).grads
    assert all(r.rule for r in rules.values())


def test_glm5_on_one_gpu_leaves_out_the_indexers_gradients_and_adam_states():
    """GLM-5 (78 layers, every one indexed; wq_b 2048 → 32·128, wk 6144 → 128, k_norm, weights_proj 6144 → 32) fully
    fine-tuned on one (imaginary) GPU in pure bf16: gradients 2 B and AdamW states 2 × 2 B (+ a 4 B step per tensor)
    fewer for each indexer parameter than if every parameter were stepped (DeepSpeed's flat buffers: all of them)."""
    m = load_model("glm-5").spec
    n, tensors = architectures.no_grad_parameters(m, 0, m.num_hidden_layers)
    ix = m.indexer
    per_layer = m.q_lora_rank * ix.n_heads * ix.head_dim + m.hidden_size * ix.head_dim + 2 * ix.head_dim \
        + m.hidden_size * ix.n_heads
    assert (n, tensors) == (m.num_hidden_layers * per_layer, 5 * m.num_hidden_layers)
    w = Workload(mode="train", precision=RECIPES["pure-bf16"][1], gpu="b200")
    total = count_parameters(m)
    states = estimate(m, w, with_fits=False).stages[0].components["optimizer_states"]
    assert states == 2 * 2 * (total.total - n) + 4 * (total.tensors - tensors)
    shard = stage_shards(m, w.parallel)[0]
    for stack, left_out in (("hf-trainer", 2 * n), ("deepspeed", 0)):
        terms, _, _, dropped = states_for_stack(m, MODULES[stack], w, shard)
        assert sum(t.bytes for t in terms if t.component == "gradients") == 2 * total.total - left_out
        assert dropped == left_out


LORA_CASES = [("deepseek_v32", "all-linear"), ("glm_moe_dsa", "all-linear"), ("minimax_m3_vl_text", "attention"),
              ("minimax_m3_vl_text", "qv")]


@pytest.mark.parametrize("model_type,targets", LORA_CASES, ids=str)
def test_adapters_on_an_indexers_linears_get_no_gradient(model_type, targets):
    """PEFT wraps the indexer's linears too (all-linear: DSA's wq_b, wk, weights_proj; MiniMax-M3's indexer names
    them q_proj / k_proj, so even qv adapts its q_proj): after a real backward exactly those adapters keep .grad
    None, as lora.no_grad_adapter_params counts (the adapter computes inside what backward never reaches)."""
    from calculator.memory import lora
    from validation.trace import lora_hybrid
    if model_type == "deepseek_v32":
        cfg = lora_hybrid.CONFIGS[model_type][1]
    else:
        cfg = next(c for t, c in test_dsa.CASES if t == model_type and c)
    model, config = lora_hybrid.build(model_type, cfg, targets)
    model.float()
    model.train()
    ids = torch.randint(3, 100, (1, 19), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    none = [p for p in model.parameters() if p.requires_grad and p.grad is None]
    m = spec_from_hf_config(config.to_dict()).spec
    real = (sum(p.numel() for p in none), len(none))
    assert real[0] > 0
    assert lora.no_grad_adapter_params(m, lora_hybrid.RANK, targets, range(m.num_hidden_layers)) == real


def test_glm5_lora_leaves_the_indexers_adapters_out_of_the_optimizer_on_one_gpu():
    """GLM-5 LoRA all-linear (fp32 adapters: PEFT's autocast_adapter_dtype) on one GPU: AdamW states for every
    adapter but the indexers' (2 × 4 B each, + a 4 B step per tensor), their gradients left out too; under DeepSpeed
    ZeRO-1 (flat fp32 groups) all of them."""
    from calculator.memory import lora
    m = load_model("glm-5").spec
    w = Workload(mode="train", finetune="lora", lora_targets="all-linear", gpu="b200")
    layers = range(m.num_hidden_layers)
    n, tensors = lora.layers_adapter_params(m, w.lora_rank, "all-linear", layers)
    ng, ng_tensors = lora.no_grad_adapter_params(m, w.lora_rank, "all-linear", layers)
    ix = m.indexer
    per_layer = w.lora_rank * (m.q_lora_rank + ix.n_heads * ix.head_dim + 2 * m.hidden_size + ix.head_dim + ix.n_heads)
    assert (ng, ng_tensors) == (m.num_hidden_layers * per_layer, 6 * m.num_hidden_layers)
    one = estimate(m, w, with_fits=False).stages[0].components
    assert one["optimizer_states"] == 2 * 4 * (n - ng) + 4 * (tensors - ng_tensors)
    shard = stage_shards(m, w.parallel)[0]
    from calculator.stages.terms import TermList
    from calculator.stages.held import lora_model_states
    for stack, dropped in (("hf-trainer", 4 * ng), ("deepspeed", 0)):
        t = TermList()
        _, _, left_out = lora_model_states(t, m, w, shard, MODULES[stack])
        assert left_out == dropped
        assert t.by_component["gradients"] == 4 * n - dropped


def test_ddp_with_checkpointing_warns_for_the_indexers_adapters_too():
    """HF Trainer's find_unused_parameters=False under gradient checkpointing fails on unused adapters as on unused
    weights: GLM-5 LoRA all-linear under DDP with full recompute warns, naming how many adapter parameters; without
    recompute, or with targets that leave the indexer alone (attention), it does not."""
    from calculator.memory import lora
    m = load_model("glm-5").spec
    base = dict(mode="train", finetune="lora", gpu="b200", stack="ddp", parallel={"dp": 2})
    ng = lora.no_grad_adapter_params(m, 16, "all-linear", range(m.num_hidden_layers))[0]
    said = [x for x in estimate(m, Workload(**base, lora_targets="all-linear", recompute="full"),
                                with_fits=False).warnings if "find_unused_parameters" in x]
    assert len(said) == 1 and f"adapters' {ng:,} parameters" in said[0]
    for update in ({"lora_targets": "all-linear"}, {"lora_targets": "attention", "recompute": "full"}):
        assert not any("find_unused_parameters" in x
                       for x in estimate(m, Workload(**base, **update), with_fits=False).warnings)


def test_sharded_lora_leaves_out_this_gpu_s_share_of_the_indexers_adapters():
    """Under FSDP2 (its NoGradRule holds neither gradient nor state for them) with the adapters sharded over 4,096
    ranks, a GPU steps ⌈N / 4096⌉ adapters less its share of the indexers', ⌈N_no_grad / 4096⌉, not all of them:
    the whole count went negative (the hypothesis property test: GLM-5, LoRA, pp 2, dp 4096, ZeRO-2)."""
    from calculator.memory import lora
    from calculator.stages.held import lora_model_states
    from calculator.stages.terms import TermList
    m = load_model("glm-5").spec
    w = Workload(mode="train", finetune="lora", seq_len=128, parallel={"pp": 2, "dp": 4096, "zero": 2})
    shard = stage_shards(m, w.parallel)[0]
    layers = range(shard.first_layer, shard.last_layer)
    n, tensors = lora.layers_adapter_params(m, w.lora_rank, w.lora_targets, layers)
    ng, ng_tensors = lora.no_grad_adapter_params(m, w.lora_rank, w.lora_targets, layers)
    assert ng > -(-n // 4096)  # more than a GPU's share: subtracted whole, the count went below zero
    t = TermList()
    n_o, _, _ = lora_model_states(t, m, w, shard, MODULES["fsdp2"])
    assert n_o == -(-n // 4096) - -(-ng // 4096) >= 0
    assert t.by_component["optimizer_states"] == 2 * 4 * n_o + 4 * (tensors - ng_tensors)
    assert all(v >= 0 for v in estimate(m, w, with_fits=False).stages[0].components.values())
