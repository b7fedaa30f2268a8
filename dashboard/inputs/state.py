"""How widget values become the engine's inputs (model, workload, timing) and the page's result, with every
refusal mapped back to the input that causes it.

The inputs themselves (URL keys, defaults, options) are in calculator.exports.page_keys and the query-string checks in
dashboard.inputs.query; their names are re-exported here, so `state.X` reads the same for every caller.
Nothing here imports streamlit, so it is unit-tested directly (tests/dashboard/test_dashboard_state.py). The engine is
imported lazily, inside functions, so this module loads even while parts of the engine are missing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from calculator.exports.page_keys import (ACT_DTYPES, ARCH_KEYS, AUTO, BY_KEY, CONFIG, CUSTOM, CUSTOM_RECIPE, DEFAULTS,  # noqa: F401
                              DTYPE_KEYS, DTYPES, FAMILIES, GENERIC, KV_DTYPES, MB, PARAMS, SPECIAL_MODELS,
                              URL_FORMAT_VERSION, VERSION_KEY, Param, gpus, model_ids, options)
from dashboard.inputs.query import (LinkCheck, Unsafe, bound, check_query_params, format_default, parse_value,  # noqa: F401
                             read_value, to_query)
from calculator.exports.page_link import recipe_dtypes  # noqa: F401


def load_preset(model_id: str):
    """calculator.model.presets.load_model(id) -> MappedConfig (the presets module caches what it loads)."""
    from calculator.model.presets import load_model
    return load_model(model_id)


def arch_expresses(spec) -> bool:
    """Whether the custom-architecture fields describe `spec` exactly (false for MLA, per-layer attention
    patterns, QK-norm, …): only then can "edit as custom" keep the numbers."""
    try:
        custom, _ = build_model({"model": CUSTOM, **spec_to_arch(spec)})
    except InputProblems:
        return False
    skip = {"name", "model_type", "architecture", "max_position_embeddings"}  # no context length, no class
    return custom.model_dump(exclude=skip) == spec.model_dump(exclude=skip)


def spec_to_arch(spec) -> dict[str, Any]:
    """A ModelSpec as the custom-architecture keys (what "Edit as custom" copies into the fields)."""
    return {
        "h": spec.hidden_size, "layers": spec.num_hidden_layers, "heads": spec.num_attention_heads,
        "kvh": spec.num_key_value_heads or spec.num_attention_heads, "hd": spec.head_dim or 0,
        "ffn": spec.intermediate_size, "vocab": spec.vocab_size, "tie": spec.tie_word_embeddings,
        "glu": spec.gated_mlp, "fam": spec.family, "norm": spec.norm_type, "qkvb": spec.qkv_bias,
        "swa": spec.sliding_window or 0, "experts": spec.num_experts, "topk": spec.num_experts_per_tok,
        "effn": spec.moe_intermediate_size or 0, "shared": spec.num_shared_experts,
        "sffn": spec.shared_expert_intermediate_size or 0,
    }


# ---- widget values -> engine inputs ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """An input the engine refused, with the URL key of the widget that causes it ("" if none is known)."""

    key: str
    message: str


class InputProblems(Exception):
    def __init__(self, problems: list[Problem]):
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems


# Engine field path (as pydantic locations and InputError.field name them) -> URL key.
FIELD_TO_KEY: dict[str, str] = {}
for _param in PARAMS:
    for _f in _param.fields:
        FIELD_TO_KEY.setdefault(_f, _param.key)
        FIELD_TO_KEY.setdefault(_f.rsplit(".", 1)[-1], _param.key)
FIELD_TO_KEY.update({"serving.attention_dp": "adp", "serving.version": "ever", "engine": "eng",
                     "precision": "recipe", "parallel.world_size": "dp", "model": "model", "spec": "model",
                     "parallel.expert_tp": "etp", "parallel.microbatches": "mb",
                     "parallel.shard_group": "zsh"})


def key_for_field(field_path: str | None, message: str = "", group_keys: Iterable[str] = ()) -> str:
    """The widget to blame for an engine error on `field_path` (or one named in the message)."""
    if field_path:
        path = str(field_path)
        for cand in (path, path.removeprefix("workload."), path.removeprefix("model."), path.rsplit(".", 1)[-1]):
            if cand in FIELD_TO_KEY:
                return FIELD_TO_KEY[cand]
    # Cross-field checks (pydantic model validators) carry no location: find the first field they name.
    best: tuple[int, int, str] | None = None  # earliest mention; the longest name there (num_experts_per_tok)
    for name, key in FIELD_TO_KEY.items():
        if len(name) < 4 and "." not in name:
            continue
        pos = message.find(name)
        if pos >= 0 and (best is None or (pos, -len(name)) < best[:2]):
            best = (pos, -len(name), key)
    if best:
        return best[2]
    group_keys = tuple(group_keys)
    return group_keys[0] if group_keys else ""


def _validation_problems(exc, prefix: str, fallback: str) -> list[Problem]:
    out = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err.get("loc", ()) if not isinstance(x, int))
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        path = f"{prefix}{loc}" if loc else ""
        key = key_for_field(path, msg, (fallback,)) if (path or msg) else fallback
        label = BY_KEY[key].label if key in BY_KEY else ""
        out.append(Problem(key, f"{label}: {msg}" if loc and label else msg))
    return out


def recompute_modules(text: str):
    """The URL's comma-separated --recompute-modules: empty = Megatron's default (None), "none" = no module."""
    text = (text or "").strip()
    if not text:
        return None
    return () if text == "none" else tuple(x.strip() for x in text.split(",") if x.strip())


def offload_modules(text: str) -> tuple[str, ...]:
    """The URL's comma-separated --offload-modules: empty = no fine-grained activation offloading."""
    return tuple(x.strip() for x in (text or "").split(",") if x.strip())


def _none_if_zero(v):
    return None if not v else int(v)


def hub_model(model_id: str, fetched):
    """A model fetched from the Hub (calculator.model.hub.client.HubModel) -> calculator.model.resolve.ResolvedModel, with the
    checkpoint's own parameter count; InputProblems on `hf` if the engine cannot map its config.json."""
    from calculator.model.hf_config import ConfigError, spec_from_hf_config
    from calculator.model.resolve import ResolvedModel
    try:
        mapped = spec_from_hf_config(fetched.config, name=model_id)
    except ConfigError as exc:
        raise InputProblems([Problem("hf", f"{model_id}: {exc}")]) from None
    ck = fetched.checkpoint
    return ResolvedModel(mapped, "hub", model_id, ck.total_parameters if ck else None,
                         tuple(sorted(ck.parameters_by_dtype.items())) if ck else (), tuple(fetched.warnings))


def build_model(values: Mapping[str, Any], hub=None):
    """(ModelSpec | GenericModel, notes) for the selected model source; InputProblems if it cannot be built.
    `hub` (a ResolvedModel from hub_model) is the model when given: a Hugging Face id overrides `model`."""
    from pydantic import ValidationError

    from calculator.model.spec import GenericModel, ModelSpec
    if hub is not None:
        return hub.spec, tuple(hub.mapped.warnings)
    v = {**DEFAULTS, **values}
    source = v["model"]
    if source == CUSTOM:
        try:
            spec = ModelSpec(
                name="custom", family=v["fam"], hidden_size=int(v["h"]), num_hidden_layers=int(v["layers"]),
                num_attention_heads=int(v["heads"]), num_key_value_heads=int(v["kvh"]),
                head_dim=_none_if_zero(v["hd"]), intermediate_size=int(v["ffn"]), vocab_size=int(v["vocab"]),
                tie_word_embeddings=bool(v["tie"]), gated_mlp=bool(v["glu"]), norm_type=v["norm"],
                qkv_bias=bool(v["qkvb"]), sliding_window=_none_if_zero(v["swa"]),
                num_experts=int(v["experts"]), num_experts_per_tok=int(v["topk"]),
                moe_intermediate_size=_none_if_zero(v["effn"]), num_shared_experts=int(v["shared"]),
                shared_expert_intermediate_size=_none_if_zero(v["sffn"]))
        except ValidationError as exc:
            raise InputProblems(_validation_problems(exc, "", "h")) from None
        return spec, ()
    if source == GENERIC:
        try:
            return GenericModel(total_params=int(v["gparams"]),
                                activation_elements_per_sample=int(v["gact"])), ()
        except ValidationError as exc:
            raise InputProblems(_validation_problems(exc, "", "gparams")) from None
    if source == CONFIG:
        from calculator.model.hf_config import ConfigError, parse_config_json, spec_from_hf_config
        text = (v["cfg"] or "").lstrip("\ufeff").strip()  # a pasted UTF-8 BOM, as the Hub client reads one
        if not text:
            raise InputProblems([Problem("cfg", "Paste a config.json to estimate it (Model = config).")])
        try:  # bounded in size, nesting and number magnitude before the JSON parser runs
            mapped = spec_from_hf_config(parse_config_json(text))
        except ConfigError as exc:
            raise InputProblems([Problem("cfg", str(exc))]) from None
        return mapped.spec, tuple(mapped.warnings)
    if source not in model_ids():
        raise InputProblems([Problem("model", f"unknown model preset {source!r}")])
    mapped = load_preset(source)
    return mapped.spec, tuple(getattr(mapped, "warnings", ()))


def build_workload(values: Mapping[str, Any]):
    """The engine's Workload for the widget values; InputProblems (naming the widgets) if pydantic refuses."""
    from pydantic import ValidationError

    from calculator.core.workload import RECIPES, Overheads, Parallelism, Precision, RLConfig, ServingConfig, Workload
    v = {**DEFAULTS, **values}
    problems: list[Problem] = []

    def attempt(build, prefix, fallback):
        try:
            return build()
        except ValidationError as exc:
            problems.extend(_validation_problems(exc, prefix, fallback))
            return None

    if v["recipe"] == CUSTOM_RECIPE:
        precision = attempt(lambda: Precision(
            params=v["pdt"], grads=v["gdt"], master_weights=None if v["mdt"] == "none" else v["mdt"],
            optimizer_states=v["odt"], activations=v["adt"]), "precision.", "recipe")
    elif v["recipe"] in RECIPES:
        precision = RECIPES[v["recipe"]][1]
    else:
        precision = None
        problems.append(Problem("recipe", f"unknown precision recipe {v['recipe']!r}"))
    parallel = attempt(lambda: Parallelism(
        tp=int(v["tp"]), pp=int(v["pp"]), dp=int(v["dp"]), cp=int(v["cp"]), ep=int(v["ep"]),
        etp=_none_if_zero(v["etp"]), sequence_parallel=bool(v["sp"]), zero=int(v["zero"]),
        zero_shard_size=_none_if_zero(v["zsh"]), distributed_optimizer=bool(v["dopt"]),
        offload_optimizer=bool(v["offo"]), offload_params=bool(v["offp"]),
        schedule=v["sched"], virtual_stages=int(v["vpp"]), num_microbatches=_none_if_zero(v["mb"]),
        pp_first_stage_layers=_none_if_zero(v["ppf"]), pp_last_stage_layers=_none_if_zero(v["ppl"]),
        pp_embedding_in_split=bool(v["ppe"]), pp_loss_in_split=bool(v["pplo"]), pp_layout=v["ppo"] or None,
        pp_overlap_p2p=bool(v["ppov"])),
        "parallel.", "tp")
    overheads = attempt(lambda: Overheads(
        cuda_context_bytes=None if v["ctx"] is None else int(v["ctx"]) * MB,
        fragmentation_pct=None if v["frag"] is None else float(v["frag"]),
        fragmentation_states_pct=float(v["fst"]), fragmentation_working_pct=float(v["fwk"]),
        nccl_bytes_per_group=int(v["nccl"]) * MB,
        include_comm_buffers=bool(v["comm"]), textbook_overhead_pct=float(v["tbo"]),
        cublas_workspace_bytes=None if v["cublas"] is None else int(float(v["cublas"]) * MB)), "overheads.", "frag")
    serving = attempt(lambda: ServingConfig(
        memory_fraction=None if v["mfr"] is None else float(v["mfr"]), max_model_len=_none_if_zero(v["mml"]),
        max_num_batched_tokens=_none_if_zero(v["mbt"]), max_num_seqs=_none_if_zero(v["mns"]),
        block_size=_none_if_zero(v["bsz"]), prefix_caching=bool(v["pfx"]), cuda_graphs=bool(v["cg"]),
        attention_dp=int(v["adp"]), version=None if v["ever"] == AUTO else v["ever"],
        language_model_only=bool(v["lmo"])), "serving.", "eng")
    rl = attempt(lambda: RLConfig(
        rollout_batch_size=int(v["rlb"]), samples_per_prompt=int(v["rln"]), prompt_len=int(v["rlp"]),
        response_len=int(v["rlr"]), rollout_engine=v["rle"], rollout_tp=int(v["rltp"]), colocate=bool(v["rlc"]),
        rollout_gpus=_none_if_zero(v["rlg"]), memory_fraction=None if v["rlf"] is None else float(v["rlf"]),
        offload_train=bool(v["rlo"]), engine_sleep=bool(v["rls"]), reference_model=bool(v["rlref"]),
        critic=bool(v["rlcr"]), reward_model=bool(v["rlrm"]), offload_aux=bool(v["rlx"])), "rl.", "rlb")
    if problems:
        raise InputProblems(problems)
    workload = attempt(lambda: Workload(
        mode=v["mode"], finetune=v["ft"], lora_rank=int(v["lr"]), lora_targets=v["lt"],
        lora_adapter_dtype=v["lad"], kbit_prep=bool(v["kbit"]), qlora_keeps_inputs=bool(v["qkin"]),
        padded_batch=bool(v["pad"]),
        micro_batch=int(v["mbs"]), seq_len=int(v["seq"]), gen_tokens=int(v["gen"]),
        precision=precision, optimizer=v["opt"], optimizer_impl=v["oimpl"], recompute=v["rc"],
        attention=v["attn"], impl=v["impl"], mixer_kernels=v["mk"], activation_model=v["act"], kv_dtype=v["kvdt"],
        weight_dtype=None if v["wdt"] == AUTO else v["wdt"], quant_group_size=int(v["qgs"]), quant_method=v["qm"],
        parallel=parallel, overheads=overheads, gpu=v["gpu"] or None,
        stack=None if v["stack"] == AUTO else v["stack"], zero_grad_set_to_none=v["zg"] == "none",
        ddp_bucket_view=bool(v["bview"]), ddp_rebuild_peak=bool(v["drp"]), ds_auto_buckets=bool(v["dsa"]),
        expandable_segments=bool(v["exps"]),
        engine=v["eng"], serving=serving, rl=rl,
        expert_weight_dtype=None if v["ewdt"] == AUTO else v["ewdt"],
        fp8=v["fp8"], fp8_param_gather=bool(v["f8pg"]), cross_entropy_fusion=v["cef"],
        gradient_accumulation_fusion=bool(v["gaf"]), make_vocab_size_divisible_by=int(v["vdiv"]),
        mtp_layers=int(v["mtp"]), cp_comm_type=v["cpc"], moe_dispatcher=v["moed"],
        moe_capacity_factor=float(v["moecf"]) or None, moe_pad_to_capacity=bool(v["moepad"]),
        moe_router_fp32=bool(v["moer32"]), moe_grouped_gemm=bool(v["moegg"]),
        moe_imbalance=float(v["moeimb"]), deterministic=bool(v["det"]),
        tp_comm_overlap=bool(v["tpo"]), precision_aware_optimizer=bool(v["pao"]),
        grad_reduce_in_bf16=bool(v["gbf16"]), recompute_modules=recompute_modules(v["rcm"]),
        offload_modules=offload_modules(v["ofm"]),
        optimizer_offload_fraction=float(v["oofr"]), megatron_fsdp=v["mfsdp"], images_per_sample=int(v["img"]),
        image_size=_none_if_zero(v["imgpx"]),
        vision_tower=v["vt"]), "", "mode")
    if problems:
        raise InputProblems(problems)
    return workload


@dataclass(frozen=True)
class Result:
    model: Any
    workload: Any
    estimate: Any
    notes: tuple[str, ...] = ()


def timing_inputs(values: Mapping[str, Any]):
    """The time estimate's editable constants from the page's inputs (InputProblems naming the key if refused)."""
    from pydantic import ValidationError

    from calculator.timing.inputs import TimingInputs
    try:
        return TimingInputs(price_per_gpu_hour=None if values["price"] is None else float(values["price"]),
                            matmul_efficiency=float(values["mme"]),
                            nvlink_gbps=None if values["nvl"] is None else float(values["nvl"]),
                            ib_gbps=float(values["ib"]))
    except ValidationError as exc:
        raise InputProblems(_validation_problems(exc, "", "price")) from None


def compute(values: Mapping[str, Any], hub=None) -> Result:
    """Build the inputs and run the engine; InputProblems for anything the engine refuses (never a number).
    `hub`: the model fetched for the `hf` key (hub_model), which then replaces the `model` key's source."""
    from calculator import estimate
    from calculator.core.errors import InputError
    problems: list[Problem] = []
    model = workload = None
    notes: tuple[str, ...] = ()
    try:
        model, notes = build_model(values, hub)
    except InputProblems as exc:
        problems.extend(exc.problems)
    try:
        workload = build_workload(values)
    except InputProblems as exc:
        problems.extend(exc.problems)
    if problems:
        raise InputProblems(problems)
    try:
        est = estimate(model, workload)
    except InputError as exc:
        key = key_for_field(exc.field, exc.message)
        raise InputProblems([Problem("hf" if hub is not None and key == "model" else key, exc.message)]) from None
    return Result(model, workload, est, notes)


def current_values(session: Mapping[str, Any], link_values: Mapping[str, Any]) -> dict[str, Any]:
    """Every input's value before the widgets are drawn: the widget state when it exists, else what the link
    asked for, else the default (what each bound widget will itself resolve to on this run)."""
    return {p.key: session[p.key] if p.key in session else link_values.get(p.key, p.default) for p in PARAMS}


def reset_values(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults for every input (the display unit excepted) with `overrides` applied: what a scenario sets."""
    out = {p.key: p.default for p in PARAMS if p.group != "display"}
    out.update(overrides)
    return out
