"""A workload as the calculator page's URL: the inverse of dashboard.inputs.state.build_workload, so a workload computed
anywhere (a remedy, a plan, the CLI) opens the page with exactly that input. Keys and encoding are the public
format of calculator/exports/page_keys.py (docs/url-format.md); no streamlit here.

    build_workload(workload_values(w)) == w      for every workload the page can express
"""
from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import urlencode

from calculator.exports.page_keys import (AUTO, CONFIG, CUSTOM_RECIPE, GENERIC, MB, PARAMS, URL_FORMAT_VERSION,
                                          VERSION_KEY)


def recipe_dtypes(recipe: str) -> dict[str, str]:
    """The per-tensor dtype keys a named precision recipe sets."""
    from calculator.core.workload import RECIPES
    prec = RECIPES[recipe][1]
    return {"pdt": prec.params, "gdt": prec.grads, "mdt": prec.master_weights or "none",
            "odt": prec.optimizer_states, "adt": prec.activations}


def to_query(values: Mapping[str, Any]) -> dict[str, str]:
    """The query parameters that reproduce `values` (defaults left out, as the bound widgets do), plus v."""
    out: dict[str, str] = {}
    for p in PARAMS:
        if p.key not in values:
            continue
        v = values[p.key]
        if v == p.default:
            continue
        if isinstance(v, bool):
            out[p.key] = "true" if v else "false"
        elif v is None:
            out[p.key] = ""
        elif isinstance(v, float) and v.is_integer():
            out[p.key] = str(int(v)) if p.kind == "int" else f"{v:g}"
        else:
            out[p.key] = str(v)
    out[VERSION_KEY] = URL_FORMAT_VERSION
    return out


def _zero_if_none(v) -> int:
    return 0 if v is None else int(v)


def _precision_values(prec) -> dict[str, Any]:
    from calculator.core.workload import RECIPES
    for name, (_, recipe) in RECIPES.items():
        if recipe == prec:
            return {"recipe": name, **recipe_dtypes(name)}
    return {"recipe": CUSTOM_RECIPE, "pdt": prec.params, "gdt": prec.grads,
            "mdt": prec.master_weights or "none", "odt": prec.optimizer_states, "adt": prec.activations}


def workload_values(w) -> dict[str, Any]:
    """Every workload key of the URL format for the engine's Workload `w`."""
    p, o, sv, rl = w.parallel, w.overheads, w.serving, w.rl
    out: dict[str, Any] = {
        "mode": w.mode, "ft": w.finetune, "lr": w.lora_rank, "lt": w.lora_targets, "lad": w.lora_adapter_dtype,
        "mbs": w.micro_batch, "seq": w.seq_len, "gen": w.gen_tokens,
        "opt": w.optimizer, "oimpl": w.optimizer_impl, "rc": w.recompute, "attn": w.attention, "impl": w.impl,
        "mk": w.mixer_kernels,
        "act": w.activation_model, "kvdt": w.kv_dtype, "wdt": w.weight_dtype or AUTO,
        "qgs": w.quant_group_size, "qm": w.quant_method,
        "stack": w.stack or AUTO, "zg": "none" if w.zero_grad_set_to_none else "zeros",
        "bview": w.ddp_bucket_view, "drp": w.ddp_rebuild_peak, "dsa": w.ds_auto_buckets, "exps": w.expandable_segments,
        "zero": str(p.zero), "zsh": _zero_if_none(p.zero_shard_size), "dopt": p.distributed_optimizer,
        "offo": p.offload_optimizer, "offp": p.offload_params, "tp": p.tp, "sp": p.sequence_parallel, "pp": p.pp,
        "sched": p.schedule, "vpp": p.virtual_stages, "mb": _zero_if_none(p.num_microbatches), "dp": p.dp,
        "cp": p.cp, "ep": p.ep, "etp": _zero_if_none(p.etp), "ppf": _zero_if_none(p.pp_first_stage_layers),
        "ppl": _zero_if_none(p.pp_last_stage_layers), "ppe": p.pp_embedding_in_split, "pplo": p.pp_loss_in_split,
        "ppo": p.pp_layout or "", "ppov": p.pp_overlap_p2p,
        "frag": o.fragmentation_pct, "fst": o.fragmentation_states_pct, "fwk": o.fragmentation_working_pct,
        "ctx": None if o.cuda_context_bytes is None else o.cuda_context_bytes // MB,
        "nccl": o.nccl_bytes_per_group // MB, "comm": o.include_comm_buffers,
        "tbo": o.textbook_overhead_pct,
        "cublas": None if o.cublas_workspace_bytes is None else o.cublas_workspace_bytes / MB,
        "eng": w.engine, "mfr": sv.memory_fraction, "mml": _zero_if_none(sv.max_model_len),
        "mbt": _zero_if_none(sv.max_num_batched_tokens), "mns": _zero_if_none(sv.max_num_seqs),
        "bsz": _zero_if_none(sv.block_size), "pfx": sv.prefix_caching, "cg": sv.cuda_graphs, "adp": sv.attention_dp,
        "lmo": sv.language_model_only,
        "ever": sv.version or AUTO,
        "rlb": rl.rollout_batch_size, "rln": rl.samples_per_prompt, "rlp": rl.prompt_len, "rlr": rl.response_len,
        "rle": rl.rollout_engine, "rltp": rl.rollout_tp, "rlc": rl.colocate, "rlg": _zero_if_none(rl.rollout_gpus),
        "rlf": rl.memory_fraction, "rlo": rl.offload_train, "rls": rl.engine_sleep, "rlref": rl.reference_model,
        "rlcr": rl.critic, "rlrm": rl.reward_model, "rlx": rl.offload_aux,
        "ewdt": w.expert_weight_dtype or AUTO,
    }
    out.update(_precision_values(w.precision))
    if w.gpu:
        out["gpu"] = w.gpu
    return out


def model_values(resolved=None, model=None) -> dict[str, Any]:
    """The model keys for a model the CLI resolved (calculator.model.resolve.ResolvedModel) or a GenericModel."""
    from calculator.model.spec import GenericModel
    if isinstance(model, GenericModel):
        return {"model": GENERIC, "gparams": model.total_params, "gact": model.activation_elements_per_sample}
    if resolved is None:
        return {}
    if resolved.origin == "preset":
        return {"model": resolved.label}
    if resolved.origin == "hub":
        return {"hf": resolved.label}
    raw = getattr(resolved.mapped, "raw", None)  # a config.json file: pasted into the page's config field
    if raw is not None:
        import json
        return {"model": CONFIG, "cfg": json.dumps(raw, default=_number_text)}
    return {}


def _number_text(value) -> str:
    """A number the config reader kept as text (config_read.Unreadable: NaN, infinite, too many digits), written as
    that text: no field the estimate read holds one (reading it is refused), so the page reads the same model."""
    from calculator.model.config_read import Unreadable
    if isinstance(value, Unreadable):
        return value.text
    raise TypeError(f"{type(value).__name__} in a config.json")


def url_query(base: Mapping[str, Any], w) -> str:
    """The query string (no leading '?') that opens the calculator on `w`, the other keys taken from `base` (the
    page's values, or model_values for the CLI)."""
    return urlencode(to_query({**base, **workload_values(w)}))
