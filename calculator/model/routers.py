"""MoE routers whose bookkeeping a model type's modeling file and config decide (transformers 5.23), for mappers
that build no router variant of their own; variants.moe_saved prices the options.

Top-k softmax routers (`softmax(router_logits, dtype=float32)` over all E, then topk: fp32 scores 4·T·E and int64
indices 8·T·k saved) divide the top-k values by their sum only when they renormalise (the division keeps the fp32
values 4·T·k and the row sum 4·T), then cast them to the logits' dtype: the experts (integrations/moe.py
grouped_mm_experts_forward, `proj_out * sample_weights_g`) keep model-dtype routing weights e·S, not fp32 ones."""
from __future__ import annotations

from collections.abc import Callable

from calculator.model.config_read import get_bool
from calculator.model.variants import VariantSpec


def _norm_topk_prob(default: bool) -> Callable[[dict], dict]:
    """A top-k softmax router that divides by the top-k sum only when config.norm_topk_prob (default: its
    configuration class's), the weights cast to the model dtype."""
    return lambda cfg: dict(router_renorm=get_bool(cfg, "norm_topk_prob", default), fp32_routing_weights=False)


def _renorm(renorm: bool) -> Callable[[dict], dict]:
    """A top-k softmax router that always (Qwen3-VL-MoE, Qwen3.5-MoE) or never (Jamba) renormalises, whatever the
    config says, the weights cast to the model dtype."""
    return lambda cfg: dict(router_renorm=renorm, fp32_routing_weights=False)


def _olmoe(cfg: dict) -> dict:
    """models/olmoe/modeling_olmoe.py OlmoeTopKRouter.forward (a top-k softmax router, norm_topk_prob default False);
    OlmoeAttention's q_norm / k_norm are OlmoeRMSNorms over the whole projection (one fp32 rsqrt per token, not per
    head), which the variant's qk_norm_layout says once the model has a variant."""
    return dict(_norm_topk_prob(False)(cfg), qk_norm_layout="full_width")


def _granitemoe(cfg: dict) -> dict:
    """models/granitemoe/modeling_granitemoe.py GraniteMoeTopKRouter.forward (and granitemoeshared's copy):
    `F.linear(x, w).float()`, topk of the fp32 logits (int64 indices 8·T·k), `torch.softmax` over those k in fp32
    (its output 4·T·k), `.type_as(hidden_states)`: model-dtype routing weights; no renormalisation."""
    return dict(router="topk_softmax", fp32_routing_weights=False)


def _aria(cfg: dict) -> dict:
    """models/aria/modeling_aria.py AriaTextTopKRouter.forward: topk of the model-dtype logits (indices 8·T·k), then
    `softmax(top_k_logits)` in the model dtype (its output e·T·k, the routing weights the experts keep, e·S); the
    softmax over the k is its own normalisation (no row sum kept)."""
    return dict(router="topk_model_softmax", router_renorm=False, fp32_routing_weights=False)


def _nemotron_h(cfg: dict) -> dict:
    """models/nemotron_h/modeling_nemotron_h.py: NemotronHTopkRouter.forward is DeepSeek-V3's grouped sigmoid
    router on `hidden_states.type(torch.float32)` and `self.weight.type(torch.float32)` (fp32 copies of the input
    4·T·h and of the weight 4·E·h kept by the linear), renormalised per norm_topk_prob (NemotronHConfig default
    True); NemotronHExperts is `use_experts_implementation(has_gate=False)`: up → relu² → down, no gate."""
    return dict(router_renorm=get_bool(cfg, "norm_topk_prob", True), router_fp32_input=True,
                router_fp32_weight_copy=True, gated_experts=False)


ROUTERS: dict[str, Callable[[dict], dict]] = {
    "qwen2_moe": _norm_topk_prob(False),  # models/qwen2_moe/modeling_qwen2_moe.py Qwen2MoeTopKRouter.forward
    "qwen3_moe": _norm_topk_prob(False),  # models/qwen3_moe/modeling_qwen3_moe.py Qwen3MoeTopKRouter.forward
    "olmoe": _olmoe,
    "qwen3_next": _norm_topk_prob(True),  # models/qwen3_next/modeling_qwen3_next.py Qwen3NextTopKRouter.forward
    # models/qwen3_vl_moe/modeling_qwen3_vl_moe.py Qwen3VLMoeTextTopKRouter.forward (norm_topk_prob not read)
    "qwen3_vl_moe": _renorm(True), "qwen3_vl_moe_text": _renorm(True),
    # models/qwen3_5_moe/modeling_qwen3_5_moe.py Qwen3_5MoeTopKRouter.forward (norm_topk_prob not read)
    "qwen3_5_moe": _renorm(True), "qwen3_5_moe_text": _renorm(True),
    "jamba": _renorm(False),  # models/jamba/modeling_jamba.py JambaTopKRouter.forward: top-k left unnormalised
    "granitemoe": _granitemoe, "granitemoeshared": _granitemoe, "aria_text": _aria, "nemotron_h": _nemotron_h,
}


def router_options(model_type: str, cfg: dict) -> dict | None:
    """The VariantSpec router options of a model type in ROUTERS (None for any other)."""
    options = ROUTERS.get(model_type)
    return None if options is None else options(cfg)


def with_router(model_type: str, cfg: dict, fields: dict) -> dict:
    """A mapper's fields with its MoE router's options merged into its variant, if it has routed experts."""
    options = router_options(model_type, cfg)
    if options is None or not fields.get("num_experts"):
        return fields
    variant = fields.get("variant")
    fields["variant"] = VariantSpec(**options) if variant is None else variant.model_copy(update=options)
    return fields
