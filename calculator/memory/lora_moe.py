"""LoRA on the routed experts of an MoE layer, as PEFT 0.21.2 does it on transformers 5.23.

In transformers 5 the routed experts are fused 3-D parameters (gate_up_proj: E × 2f × h, down_proj: E × h × f) and
the router a module holding a weight Parameter, none of them nn.Linear. PEFT's `"all-linear"` still reaches them for
the model types transformers converts from the v4 MoE layouts of Qwen2-MoE or Mixtral
(peft/utils/transformers_weight_conversion.py `_convert_peft_config_moe`: the type's `_MODEL_TO_CONVERSION_PATTERN`
base has an entry in `_MOE_TARGET_MODULE_MAPPING`): the v4 names gate / gate_proj / up_proj / down_proj become
`target_parameters` (gate.weight, gate_up_proj at rank 2r and alpha 2·alpha, down_proj) and leave `target_modules`,
so on those types the dense MLPs' and the shared experts' gate_proj / up_proj / down_proj get NO adapter. Each
targeted parameter gets a `ParamWrapper` (peft/tuners/lora/layer.py) that re-parametrises it
(nn.utils.parametrize): the experts as W' = baddbmm(W, lhs, rhs) in W's dtype (`_LoraFactorsProxy`), the router as
W' = W + B·A·scaling (`_LoraParameterProxy`). Measured on the CPU: validation/trace/lora_hybrid.py.
"""
from __future__ import annotations

from calculator.model.spec import ModelSpec

# The lower-case model types of transformers 5.23 whose _MODEL_TO_CONVERSION_PATTERN base is "qwen2_moe" or "mixtral"
# (transformers/conversion_mapping.py), plus "mixtral" itself, which PEFT adds
# (peft/utils/transformers_weight_conversion.py, peft 0.21.2). qwen2_moe itself, qwen3_5_moe_text, gpt_oss, llama4,
# granitemoe*, nemotron_h, lfm2_moe, kimi_linear, bailing_hybrid and jamba are not in it: their experts stay frozen.
PEFT_MOE_TYPES = frozenset({
    "afmoe", "beam", "cohere2_moe", "deepseek_v2", "deepseek_v3", "deepseek_v32", "dots1", "ernie4_5_moe",
    "exaone_moe", "flex_olmo", "glm4_moe", "glm4_moe_lite", "glm4v_moe", "glm_moe_dsa", "hunyuan_v1_moe",
    "longcat_flash", "mellum", "minimax", "minimax_m2", "mixtral", "olmoe", "qwen3_moe", "qwen3_next",
    "qwen3_omni_moe", "qwen3_omni_moe_text", "qwen3_omni_moe_thinker", "solar_open"})


def experts_adapted(m: ModelSpec, targets: str) -> bool:
    """Whether PEFT puts adapters on the routed experts and the router of m's MoE layers: all-linear on a type of
    PEFT_MOE_TYPES (a named list of q/k/v/o reaches neither)."""
    return targets == "all-linear" and m.num_experts > 0 and m.model_type in PEFT_MOE_TYPES


def dense_mlp_adapted(m: ModelSpec, targets: str) -> bool:
    """Whether all-linear adapts the dense MLPs and the shared experts (nn.Linear gate_proj / up_proj / down_proj):
    not on PEFT_MOE_TYPES, where those names were moved to target_parameters (_convert_peft_config_moe)."""
    return targets == "all-linear" and m.model_type not in PEFT_MOE_TYPES


def expert_adapter_tensors(m: ModelSpec, rank: int) -> list[int]:
    """Elements of one MoE layer's expert adapter tensors (ParamWrapper.update_layer, measured): gate_up_proj at rank
    2r, lora_A (2r·E, h) and lora_B (2f, 2r·E); down_proj at rank r, lora_A (r·E, f) and lora_B (h, r·E)."""
    E, h, f = m.num_experts, m.hidden_size, m.expert_intermediate_size
    return [2 * rank * E * h, 2 * f * 2 * rank * E, rank * E * f, h * rank * E]


def expert_adapter_params(m: ModelSpec, rank: int) -> int:
    """Trainable parameters of one MoE layer's expert adapters: 2r·E·(h + 2f) + r·E·(f + h) (the router's r·(h + E)
    is counted with the linears: calculator.memory.lora.ffn_linears)."""
    return sum(expert_adapter_tensors(m, rank))


def fp32_router(m: ModelSpec) -> bool:
    """Whether the router computes in fp32 on a copy of its input (the DeepSeek family: F.linear(x.float(),
    weight.float()); a variant's router_fp32_input)."""
    return m.family == "deepseek" or (m.variant is not None and m.variant.router_fp32_input)


def frozen_experts_saved(m: ModelSpec, T: int, e: int, etp: int) -> int:
    """Bytes frozen routed experts no longer save (their weights need no gradient): each grouped matmul's input, the
    gathered tokens e·k·T·h and the down projection's input e·k·T·f (transformers 5.23 grouped_mm experts; measured
    on qwen3_moe, qwen2_moe, minimax, jamba, kimi_linear, deepseek_v32)."""
    return e * m.num_experts_per_tok * T * (m.hidden_size + m.expert_intermediate_size // etp)


def adapted_experts_saved(m: ModelSpec, e: int, etp: int, ep: int, rank: int, fp32_adapters: bool) -> int:
    """Bytes adapted routed experts save beyond full fine-tuning: the folded weights W' the grouped matmuls keep
    (the whole layer's expert weights in the model dtype, E·3·f·h·e: _LoraFactorsProxy folds
    W + scaling·lhs·rhs with one baddbmm in W's dtype), and with fp32 adapters (PEFT's default) the model-dtype
    copies of lhs and rhs that baddbmm keeps, E·(2r·(2f + h) + r·(h + f))·e (ParamWrapper.get_delta_factors casts
    them to W's dtype). The experts keep their full-fine-tuning saves: W' requires grad, so their inputs stay.
    Backward materialises dW' of the same size as W' (a transient, not counted here)."""
    E, h, f = m.num_experts // ep, m.hidden_size, m.expert_intermediate_size // etp
    folded = e * E * 3 * f * h
    if fp32_adapters:
        folded += e * E * (2 * rank * (2 * f + h) + rank * (h + f))
    return folded


def router_delta(m: ModelSpec, T: int, h: int, e: int, adapted: bool) -> int:
    """What the router saves beyond full fine-tuning. Adapted (ParamWrapper on gate.weight): F.linear keeps W' = W +
    B·A·scaling, e·E·h, unless the router computes in fp32 (it then keeps weight.float() either way). Frozen: an fp32
    router no longer keeps the fp32 copy of its input, −4·T·h (measured on kimi_linear); a model-dtype router's input
    is the norm output (calculator.memory.lora_layer, the reads-norm rule)."""
    if adapted:
        return 0 if fp32_router(m) else e * m.num_experts * h
    return -4 * T * h if fp32_router(m) else 0
