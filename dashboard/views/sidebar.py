"""The calculator page's sidebar: every input, grouped as a person thinks (model, mode, precision, optimizer,
recompute and attention, parallelism, batch and sequence, serving, RL, overheads, GPU), each with the engine's
complaint under it; the callbacks its buttons run; and the small helpers it draws with."""
from __future__ import annotations

import json

import streamlit as st

from dashboard.inputs import hub as hub_input
from dashboard.inputs import lazy
from dashboard.views import serving
from dashboard.inputs import state
from dashboard.views import timing as timing_view
from dashboard.inputs.widgets import field

# Half-width inputs, in px: two and the gap fill the default sidebar (300 px: 240 of content, 206 in an expander);
# a sidebar dragged wider fits more per row, a narrower one one per row.
PAIR_WIDTH, PAIR_WIDTH_IN_EXPANDER = 110, 93


# ---- callbacks (run before the script, so they may set bound widgets) --------------------------------------------
def apply_values(values: dict) -> None:
    for key, value in values.items():
        st.session_state[key] = value


def finetune_picked() -> None:
    """LoRA or QLoRA picked: gradient checkpointing on (recompute full) when none was set, as the PEFT and TRL
    examples run them (gradient_checkpointing=True); the library's Workload keeps its own default."""
    if st.session_state.get("ft") in ("lora", "qlora") and st.session_state.get("rc") == "none":
        st.session_state["rc"] = "full"


def load_scenario(values: dict) -> None:
    apply_values(state.reset_values(values))


def edit_preset_as_custom() -> None:
    mapped = state.load_preset(st.session_state["model"])
    apply_values({**state.spec_to_arch(mapped.spec), "model": state.CUSTOM})


def edit_preset_config() -> None:
    raw = state.load_preset(st.session_state["model"]).raw
    apply_values({"cfg": json.dumps(raw, indent=1), "model": state.CONFIG})


def pasted_config() -> None:
    if st.session_state.get("cfg", "").strip():
        apply_values({"model": state.CONFIG, "hf": ""})


def model_picked() -> None:
    """Choosing a model source clears the Hugging Face id (which otherwise is the model)."""
    st.session_state["hf"] = ""


# ---- the inputs ------------------------------------------------------------------------------------------------
def draw(values: dict, problems, result, hub, hub_notes, model_box) -> None:
    """Every input of the calculator page (the model group's first inputs go in `model_box`, drawn above the
    Hugging Face inputs; `hub_notes` holds what the Hub fetch has to say)."""
    from calculator.core.units import format_bytes
    model_is = values["model"]
    train = values["mode"] in ("train", "rl")  # RL post-training trains the policy too
    if hub_notes is not None:
        with hub_notes:
            hub_input.sidebar_notes(hub, problems)
    with model_box:
        field("model", problems, on_change=model_picked, caption=(
            "Not used while a Hugging Face id is set below (picking a model here clears it)."
            if hub is not None and hub.resolved is not None else model_caption(result, model_is)))
        if hub is not None and hub.resolved is not None:
            st.button("Edit this model's config.json", on_click=hub_input.edit_hub_config, args=(hub.fetched.config,),
                      icon=":material/edit:", type="tertiary", help="Copy the fetched config.json into the "
                      "config field (Model = config), where it can be edited")
        elif model_is not in state.SPECIAL_MODELS and result is not None:
            if state.arch_expresses(result.model):
                st.button("Edit this preset as a custom architecture", on_click=edit_preset_as_custom,
                          icon=":material/edit:", type="tertiary")
            else:  # latent attention, per-layer attention patterns, QK-norm…: only its config.json says it all
                st.button("Edit this preset's config.json", on_click=edit_preset_config, icon=":material/edit:",
                          type="tertiary", help="The custom fields cannot describe this model exactly")
    with st.sidebar:
        # Sections drawn only while open or while they apply (dashboard.inputs.lazy): their values stay in the URL.
        box = lazy.section("Custom architecture (Model = custom)", "arch", values, problems,
                           force=model_is == state.CUSTOM)
        if box is not None:
            with box:
                pairs(state.ARCH_KEYS, problems, disabled=model_is != state.CUSTOM, width=PAIR_WIDTH_IN_EXPANDER)
        with st.expander("Paste config.json (Model = config)", expanded=model_is == state.CONFIG or "cfg" in problems):
            field("cfg", problems, on_change=pasted_config)
        box = lazy.section("Generic network (Model = generic)", "generic", values, problems,
                           force=model_is == state.GENERIC)
        if box is not None:
            with box:
                st.caption("Any network given as totals: parameters and activation elements saved per sample.")
                pairs(("gparams", "gact"), problems, disabled=model_is != state.GENERIC,
                       width=PAIR_WIDTH_IN_EXPANDER)

        st.header("Mode")
        field("mode", problems, label="Training or inference")
        field("ft", problems, disabled=not train, on_change=finetune_picked)
        pairs(("lr", "lt"), problems, disabled=not train or values["ft"] == "full")
        field("lad", problems, disabled=not train or values["ft"] == "full")
        field("kbit", problems, disabled=not train or values["ft"] != "qlora")
        field("qkin", problems, disabled=not train or values["ft"] != "qlora")

        st.header("Precision")
        from calculator.core.workload import OPTIMIZERS, RECIPES
        recipe = values["recipe"]
        infer = values["mode"] == "infer"  # a recipe is a training recipe: inference reads the weights' dtype
        kv_auto = " (bf16, or the checkpoint's FP8 KV scheme under vLLM / SGLang)" if values["kvdt"] == "auto" else ""
        field("recipe", problems, disabled=infer, caption=(
            f"Inference: weights in {values['pdt'] if values['wdt'] == state.AUTO else values['wdt']}, KV cache "
            f"in {values['kvdt']}{kv_auto} (their fields under Batch and sequence)." if infer else
            RECIPES[recipe][0] if recipe in RECIPES else "Each tensor family's dtype is set below."))
        box = lazy.section("Per-tensor dtypes", "dtypes", values, problems, force=recipe == state.CUSTOM_RECIPE)
        if box is not None:
            with box:
                pairs(state.DTYPE_KEYS, problems, disabled=recipe != state.CUSTOM_RECIPE,
                       width=PAIR_WIDTH_IN_EXPANDER)

        st.header("Optimizer")
        field("opt", problems, disabled=not train, caption=OPTIMIZERS.get(values["opt"]))
        field("oimpl", problems, disabled=not train)

        st.header("Recompute and attention")
        field("rc", problems, disabled=not train)
        field("attn", problems)
        field("pad", problems, disabled=not train)
        from calculator.impls import IMPLS
        field("impl", problems, disabled=not train, caption=IMPLS.get(values["impl"]))
        field("mk", problems, disabled=not train)
        field("act", problems)

        st.header("Parallelism")
        from calculator import stacks
        from calculator.core.workload import Parallelism
        try:
            layout = Parallelism(tp=int(values["tp"]), pp=int(values["pp"]), dp=int(values["dp"]), cp=int(values["cp"]),
                                 ep=int(values["ep"]), zero=int(values["zero"]),
                                 zero_shard_size=int(values["zsh"]) or None, distributed_optimizer=bool(values["dopt"]),
                                 offload_optimizer=bool(values["offo"]))
            auto, why = stacks.default_stack(layout), stacks.default_reason(layout)
        except (ValueError, TypeError):
            auto, why = "hf-trainer", "one GPU"
        stack_now = auto if values["stack"] == state.AUTO else values["stack"]
        field("stack", problems, disabled=not train,
              caption=(f"auto = {auto} ({why}). " if values["stack"] == state.AUTO else "")
              + stacks.LABELS[stack_now])
        field("zg", problems, disabled=not train or stack_now not in ("hf-trainer", "ddp", "fsdp2"))
        field("bview", problems, disabled=not train or stack_now != "ddp")
        field("drp", problems, disabled=not train or stack_now != "ddp")
        field("dsa", problems, disabled=not train or stack_now != "deepspeed")
        field("zero", problems, disabled=not train)
        field("dopt", problems, disabled=not train)
        field("offo", problems, disabled=not train)
        field("offp", problems, disabled=not train or values["zero"] != "3")
        pairs(("tp", "pp", "dp", "cp", "ep", "etp"), problems)
        field("sp", problems, disabled=values["tp"] == 1)
        field("sched", problems, disabled=values["pp"] == 1)
        pairs(("vpp", "mb"), problems, disabled={"vpp": values["sched"] != "interleaved", "mb": not train})
        pairs(("ppf", "ppl"), problems, disabled=values["pp"] == 1)
        pairs(("ppe", "pplo"), problems, disabled=values["pp"] == 1)
        field("ppo", problems, disabled=values["pp"] == 1)
        field("ppov", problems, disabled=values["sched"] != "interleaved")
        field("zsh", problems, disabled=not train or values["zero"] == "0")

        st.header("Batch and sequence")
        field("mbs", problems, label="Micro-batch size" if train else "Batch (concurrent sequences)")
        pairs(("seq", "gen"), problems, disabled={"gen": train})
        context_note = beyond_context(result, values, train)
        if context_note:
            st.warning(context_note, icon=":material/warning:")
        pairs(("kvdt", "wdt"), problems, disabled=train)
        pairs(("qgs", "qm"), problems, disabled=train)
        field("ewdt", problems, disabled=values["mode"] == "train")

        box = lazy.section("Serving engine (inference)", "serving", values, problems,
                           force=values["mode"] == "infer" or lazy.non_default(values, lazy.SECTIONS["serving"]))
        if box is not None:
            with box:
                serving.sidebar_serving(values, problems)
        box = lazy.section("RL rollout (mode rl)", "rl", values, problems,
                           force=values["mode"] == "rl" or lazy.non_default(values, lazy.SECTIONS["rl"]))
        if box is not None:
            with box:
                serving.sidebar_rl(values, problems)
        has_tower = result is not None and getattr(result.model, "vision", None) is not None
        box = lazy.section("Images (vision-language models)", "vision", values, problems,
                           force=has_tower or lazy.non_default(values, lazy.SECTIONS["vision"]))
        if box is not None:
            with box:
                for key in lazy.SECTIONS["vision"]:
                    field(key, problems, disabled=not has_tower)
        box = lazy.section("Megatron-Core: FP8, MTP, MoE dispatch", "megatron", values, problems,
                           force=stack_now == "megatron" and train or lazy.non_default(values, lazy.SECTIONS["megatron"]))
        if box is not None:
            with box:
                st.caption("Read by the Megatron stack (calculator/memory/megatron_core.py, fp8.py, moe_dispatch.py).")
                for key in lazy.SECTIONS["megatron"]:
                    field(key, problems, disabled=not train)
        box = lazy.section("Overheads (fragmentation, CUDA context, NCCL)", "overheads", values, problems,
                           force=lazy.non_default(values, lazy.SECTIONS["overheads"]))
        if box is not None:
            with box:
                field("frag", problems)
                pairs(("fst", "fwk"), problems, disabled=values["frag"] is not None, width=PAIR_WIDTH_IN_EXPANDER)
                field("ctx", problems)
                field("exps", problems)
                field("cublas", problems)
                field("nccl", problems, disabled=not values["comm"])
                field("comm", problems)
                field("tbo", problems, disabled=values["act"] != "textbook")

        st.header("GPU")
        gpu = gpu_of(values["gpu"])
        field("gpu", problems, caption=gpu_caption(gpu, values["unit"]) if gpu else None)
        timing_view.sidebar(values, problems)


def gpu_caption(gpu, unit: str) -> str:
    """The device total, once, and the capacity every verdict on the page uses (what PyTorch can allocate)."""
    from calculator.core.units import format_bytes
    if gpu.pytorch_capacity_bytes:
        return (f"{gpu.nominal_label} device, {format_bytes(gpu.memory_bytes, unit)} reported total: "
                f"**{format_bytes(gpu.usable_bytes, unit)} allocatable by PyTorch**, the capacity every verdict uses")
    return (f"{gpu.nominal_label} device: **{format_bytes(gpu.memory_bytes, unit)} reported total**, the capacity "
            "every verdict uses (no measured figure of what PyTorch can allocate on it)")


def pairs(keys, problems, disabled: bool | dict = False, width: int = PAIR_WIDTH) -> None:
    """Inputs two per row, each with its own complaint under it. Without complaints the whole group is one
    wrapping horizontal block of half-width inputs (one block; a container per row costs one each, st.columns(2)
    three); with one, a row of two columns each, so every complaint sits under its widget."""
    def off(key):
        return disabled.get(key, False) if isinstance(disabled, dict) else disabled
    if not any(k in problems for k in keys):
        box = st.container(horizontal=True, wrap=True, gap="small")
        for key in keys:
            field(key, problems, disabled=off(key), container=box, width=width)
        return
    for i in range(0, len(keys), 2):
        for col, key in zip(st.columns(2), keys[i:i + 2]):
            field(key, problems, disabled=off(key), container=col)


def beyond_context(result, values: dict, train: bool) -> str | None:
    """A warning when the tokens of one sequence exceed the model's max_position_embeddings."""
    limit = getattr(result.model, "max_position_embeddings", None) if result is not None else None
    tokens = values["seq"] + (0 if train else values["gen"])
    if not limit or tokens <= limit:
        return None
    return (f"{tokens:,} tokens per sequence is beyond this model's context of {limit:,} (max_position_embeddings): "
            "the memory is computed as asked, but the model was not trained for that length.")


def gpu_of(gpu_id: str):
    return next((g for g in state.gpus() if g.id == gpu_id), None)


def model_caption(result, model_is: str) -> str | None:
    if result is None:
        return None
    from calculator.core.units import format_count
    est = result.estimate
    if model_is == state.GENERIC:
        return f"Generic network: {format_count(est.parameters)} parameters"
    spec = result.model
    moe = (f", MoE {spec.num_experts} experts (top-{spec.num_experts_per_tok}), "
           f"{format_count(est.active_parameters)} active") if getattr(spec, "num_experts", 0) else ""
    shape = (f" · {spec.num_hidden_layers} layers, h={spec.hidden_size}, {spec.num_attention_heads} heads / "
             f"{spec.kv_heads} KV") if hasattr(spec, "hidden_size") else ""
    return f"{format_count(est.parameters)} parameters{shape}{moe}"
