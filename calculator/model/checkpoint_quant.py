"""What a checkpoint's quantization_config says it stores (issue 21): the dtypes of its decoder linears, routed experts
and dense MLPs (ModelSpec.checkpoint_weight_dtype / checkpoint_expert_weight_dtype / checkpoint_mlp_weight_dtype), and
the KV cache dtype its ModelOpt scheme names (ModelSpec.checkpoint_kv_dtype), which the serving engines load and use
as stored (calculator.memory.inference). ModelOpt 0.29 and earlier wrote the scheme to hf_quant_config.json beside
config.json, `{"producer": ..., "quantization": {...}}`; hub / file readers put it where config.json keeps it
(modelopt_quantization_config), as vLLM's transformers_utils/config.py get_config does.

May import: nothing of the calculator (pure functions of the config dict).
"""
from __future__ import annotations


def checkpoint_weight_fields(cfg: dict, fields: dict | None = None) -> dict:
    """ModelSpec.checkpoint_weight_dtype / checkpoint_expert_weight_dtype: what a checkpoint's quantization_config
    stores. "fp8" (DeepSeek-V3 / R1 / V3.2 / V4, Kimi-K2, MiniMax-M2, MiMo-V2: e4m3 in 128 × 128 blocks; transformers
    integrations/finegrained_fp8.py, vLLM model_executor/layers/quantization/fp8.py) keeps every decoder linear in
    fp8; "mxfp4" (gpt-oss: its modules_to_not_convert are attention, router, embeddings and head; transformers
    integrations/mxfp4.py) the routed experts in MXFP4; DeepSeek-V4's expert_dtype "fp4" its routed experts in
    FP4; ModelOpt's and llm-compressor's NVFP4 / FP8 (modelopt_weight_fields, compressed_tensors_weight_fields).
    Other methods (AWQ, GPTQ, bitsandbytes, integer compressed-tensors) stay with the workload's own quantization
    inputs: {} for them. With the mapper's `fields`, those fields and these merged (their warnings kept together)."""
    q = modelopt_quantization_config(cfg.get("quantization_config"))
    method = q.get("quant_method") if isinstance(q, dict) else None
    out = {}
    if method in ("fp8", "fbgemm_fp8"):
        out = {"checkpoint_weight_dtype": "fp8", "checkpoint_expert_weight_dtype": "fp8"}
    elif method == "mxfp4":
        out = {"checkpoint_expert_weight_dtype": "fp4"}
    elif method == "modelopt":
        out = modelopt_weight_fields(q)
        if modelopt_kv_dtype(q):
            out["checkpoint_kv_dtype"] = modelopt_kv_dtype(q)
    elif method == "compressed-tensors":
        out = compressed_tensors_weight_fields(q)
    if cfg.get("expert_dtype") == "fp4":
        out["checkpoint_expert_weight_dtype"] = "fp4"
    if fields is None:
        return out
    warned = list(fields.get("_warnings", ())) + out.pop("_warnings", [])  # the mapper's fields, these beside them
    return {**fields, **out, **({"_warnings": warned} if warned else {})}


def modelopt_quantization_config(q):
    """A quantization_config as config.json keeps it: ModelOpt's nested hf_quant_config.json form, `{"producer":
    {"name": "modelopt", ...}, "quantization": {"quant_algo": ..., "kv_cache_quant_algo": ..., "exclude_modules":
    [...]}}`, flattened with quant_method "modelopt" (what vLLM's ModelOptQuantConfigBase.from_config and SGLang's
    ModelOptFp4Config.from_config read from it); anything else as given."""
    if isinstance(q, dict) and "quant_method" not in q and isinstance(q.get("quantization"), dict) \
            and "quant_algo" in q["quantization"]:
        return {"quant_method": "modelopt", **q["quantization"]}
    return q


def modelopt_kv_dtype(q: dict) -> str | None:
    """The KV cache dtype a ModelOpt quantization config names: "fp8" for kv_cache_scheme {"type": "float",
    "num_bits": 8} (config.json, ModelOpt 0.31 on) or kv_cache_quant_algo "FP8" (hf_quant_config.json), as vLLM's
    get_kv_cache_quant_algo_string (utils/torch_utils.py) and SGLang's ModelOptFp4Config / ModelOptFp8Config
    from_config read them; None otherwise (an NVFP4 KV scheme, which only vLLM would take, is not read)."""
    scheme = q.get("kv_cache_scheme")
    if isinstance(scheme, dict):
        return "fp8" if (scheme.get("type"), scheme.get("num_bits")) == ("float", 8) else None
    algo = q.get("kv_cache_quant_algo")
    return "fp8" if isinstance(algo, str) and algo.upper() == "FP8" else None


MODELOPT_DTYPES = {"NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4", "W4A8_NVFP4_FP8": "nvfp4", "FP8": "fp8", "MXFP8": "fp8"}


def modelopt_weight_fields(q: dict) -> dict:
    """What an NVIDIA ModelOpt checkpoint stores (quant_method "modelopt": the nvidia/*-NVFP4 repositories; vLLM
    model_executor/layers/quantization/modelopt.py): NVFP4 keeps each quantized linear as packed E2M1 pairs with an
    E4M3 scale per 16 weights ("nvfp4"), FP8 one byte per weight (MXFP8's E8M0 scale per 32 not counted); the modules
    matching a pattern of `ignore` (`exclude_modules` in older files) stay in the model dtype. The released files
    exclude the attention, the shared experts, the routers and the first dense layers: the routed experts take the
    algorithm, and the other decoder linears too only when no pattern names the attention ("attn"). MIXED_PRECISION
    gives each layer's algorithm in quantized_layers: the routed experts' from their entries, the other decoder
    linears' from the attention's. ModelSpec has one dtype for the routed experts and one for every other decoder
    linear: where the file splits those otherwise, a warning says so."""
    ignore = _ignore_patterns(q.get("ignore", q.get("exclude_modules")))
    algo = q.get("quant_algo")
    if algo == "MIXED_PRECISION":
        layers = q.get("quantized_layers")
        algos = [(n, v.get("quant_algo")) for n, v in layers.items() if isinstance(v, dict)] \
            if isinstance(layers, dict) else []
        experts = {a for n, a in algos if "experts" in n and "shared" not in n}
        attention = {a for n, a in algos if "attn" in n}
        rest = {a for n, a in algos if "attn" not in n and ("experts" not in n or "shared" in n)
                and "lm_head" not in n}
        out = {}
        for key, found in (("checkpoint_expert_weight_dtype", experts), ("checkpoint_weight_dtype", attention),
                           ("checkpoint_mlp_weight_dtype", rest)):
            if len(found) == 1 and next(iter(found)) in MODELOPT_DTYPES:
                out[key] = MODELOPT_DTYPES[next(iter(found))]
        if len(rest) > 1:
            out["_warnings"] = [f"ModelOpt mixed precision: the dense MLPs and shared experts are stored in "
                                f"{'/'.join(sorted(rest))}; priced in the model dtype"]
        return out
    dtype = MODELOPT_DTYPES.get(algo) if isinstance(algo, str) else None
    if dtype is None:
        return {"_warnings": [f"ModelOpt quant_algo {str(algo)[:40]!r} is not read: the weights are priced in the "
                              "model dtype unless the weight dtype inputs say otherwise"]}
    return _outside_ignore(dtype, ignore, f"ModelOpt {algo}")


def compressed_tensors_weight_fields(q: dict) -> dict:
    """What an llm-compressor checkpoint stores (quant_method "compressed-tensors": RedHatAI's *-FP8-dynamic and
    *-NVFP4 repositories; vLLM model_executor/layers/quantization/compressed_tensors/compressed_tensors.py): the
    config group that targets "Linear" names the weights' format — 8-bit float is fp8 (its per-channel or
    per-tensor scales not counted), 4-bit float in groups of 16 is nvfp4; integer formats (W4A16, W8A8) stay with
    the workload's quantization inputs. The modules `ignore` names stay in the model dtype, as ModelOpt's."""
    groups = q.get("config_groups")
    formats = set()
    for g in (groups.values() if isinstance(groups, dict) else ()):
        w = g.get("weights") if isinstance(g, dict) else None
        targets = g.get("targets") if isinstance(g, dict) else None
        if isinstance(w, dict) and isinstance(targets, list) and "Linear" in targets and w.get("type") == "float":
            formats.add("fp8" if w.get("num_bits") == 8 else "nvfp4" if (w.get("num_bits"), w.get("group_size")) ==
                        (4, 16) else None)
    if len(formats) != 1 or None in formats:
        return {}
    return _outside_ignore(formats.pop(), _ignore_patterns(q.get("ignore")), "compressed-tensors")


def _ignore_patterns(ignore) -> list[str]:
    """A quantization_config's list of module patterns kept unquantized (its strings; [] for anything else)."""
    return [p for p in ignore if isinstance(p, str)] if isinstance(ignore, list) else []


def _outside_ignore(dtype: str, ignore: list[str], what: str) -> dict:
    """The stored dtypes of a checkpoint whose linears are `dtype` outside its ignore patterns: all of them; where a
    pattern keeps the attention, the rest (the dense MLPs and shared experts too, unless a pattern names an MLP or
    a shared expert: then they are priced with the attention, which a warning says)."""
    if not any("attn" in p for p in ignore):
        return {"checkpoint_weight_dtype": dtype, "checkpoint_expert_weight_dtype": dtype}
    if not any(k in p for p in ignore for k in ("mlp", "shared_expert", "ffn")):
        return {"checkpoint_expert_weight_dtype": dtype, "checkpoint_mlp_weight_dtype": dtype}
    return {"checkpoint_expert_weight_dtype": dtype,
            "_warnings": [f"{what}: its ignore list keeps the attention and some MLPs or shared experts in the model "
                          f"dtype, so every non-expert decoder linear is priced so and the routed experts in {dtype}; "
                          "an MLP or shared expert the file quantizes is over-counted"]}
