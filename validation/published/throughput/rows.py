"""Published multi-GPU training throughput (validation/published/throughput/rows.csv, copied unchanged from the
collected table: every row keeps its `source` and the `quote` of the figure as printed) turned into the engine's
inputs: the model, the Workload with the printed layout, the TimingInputs of the stack the row ran, and the
published step time. A row the engine cannot express comes back as a Skip with the reason.

The published step time: tokens per step / (tokens/s/GPU × GPUs), tokens per step = global batch × sequence. Rows
that print only model TFLOP/s per GPU (NeMo's long-context tables) are converted with the publisher's own FLOP
count (NeMo `flops_formulas.llama2` / `llama3`: gbs·s·L·h²·(12 + 12·g/a + 18·f/h + 12·s/h + 6·V/(L·h)), the
attention term not halved for the causal mask), `nemo_llama_flops` below.

Stack settings each source runs with, and where they are written:
- Megatron-Bridge / NeMo performance recipes: Megatron-Core with Transformer Engine (impl megatron-te), the
  distributed optimizer, DP gradient reduce-scatter and parameter all-gather overlapped (NeMo docs,
  features/optimizations/communication_overlap.rst: "DP communication overlap ... enabled"), TP communication
  overlapped with the GEMMs where TP > 1 (the same page, "Tensor-parallel communication overlap"), context
  parallelism over the ring (cp_comm_type p2p, Megatron-Core's default), the interleaved schedule where a VP is
  printed (with the recipe's pipeline split where PP × VP does not divide the layers:
  validation/published/throughput/splits.py), MoE tokens dispatched by DeepEP / HybridEP (the flex dispatcher the
  skills cards name: "BF16 (DeepEP)", "FP8-MX (HybridEP)"; Moonlight's recipe the alltoall one without TP overlap,
  recipes.skills_recipe). Recompute is not printed (README doubt 1): none, but where a row prints its selective
  --recompute-modules (the Moonlight sweep, recipes.selective_modules). The EP
  all-to-all overlap and the
  full-iteration CUDA graph of the recipe at that release: validation/published/throughput/recipes.py (or as the
  row prints them: "ep_overlap", "EP overlap ON / OFF").
- torchtitan / torchao: FSDP2 (ZeRO-3 semantics, prefetch overlapped), TP without async-TP unless the row says
  AsyncTP, ring CP, selective op AC ("op") or full AC as printed, torch.compile rows with the compiled kernels.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

CSV_PATH = Path(__file__).resolve().parent / "rows.csv"

# Source groups: the fit uses the newest Megatron-Bridge tables only; every other source is held out (runs the
# constants never saw: other releases, other stacks, other people).
FIT_GROUPS = ("megatron-bridge-perf-summary",)
# Rows added after calculator/timing/efficiency.py's constants were fitted, held out whatever their source (a check
# the constants never saw): the GPUs (GB200, added to the catalogue 2026-11-29) and the models (Nemotron-3's hybrid
# Mamba-2 / attention MoE, mapped to their presets the same day) of those rows
HELD_OUT_GPUS = frozenset({"gb200"})
HELD_OUT_MODELS = (r"nemotron_3",)


def added_after_fit(gpu: str, model: str) -> bool:
    return gpu in HELD_OUT_GPUS or any(re.search(p, model.lower()) for p in HELD_OUT_MODELS)

GPUS = {"h100": "h100-sxm", "h200": "h200", "b200": "b200", "b300": "b300", "gb200": "gb200", "gb300": "gb300"}

# Public config.json values of the models the presets lack (tokenizer and Hub fields left out).
KIMI_K2 = {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
           "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 64,
           "num_key_value_heads": 64, "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8,
           "first_k_dense_replace": 1, "moe_layer_freq": 1, "kv_lora_rank": 512, "q_lora_rank": 1536,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 163840,
           "max_position_embeddings": 131072, "tie_word_embeddings": False, "hidden_act": "silu"}
MOONLIGHT_16B = dict(KIMI_K2, hidden_size=2048, intermediate_size=11264, moe_intermediate_size=1408,
                     num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16, n_routed_experts=64,
                     n_shared_experts=2, num_experts_per_tok=6, q_lora_rank=None, max_position_embeddings=8192)
GPT3_175B = {"model_type": "gpt2", "n_embd": 12288, "n_layer": 96, "n_head": 96, "n_positions": 2048,
             "vocab_size": 50257, "activation_function": "gelu_new", "tie_word_embeddings": True}
NEMOTRON4_340B = {"model_type": "nemotron", "hidden_size": 18432, "intermediate_size": 73728,
                  "num_hidden_layers": 96, "num_attention_heads": 96, "num_key_value_heads": 8,
                  "vocab_size": 256000, "hidden_act": "relu2", "partial_rotary_factor": 0.5,
                  "max_position_embeddings": 4096, "tie_word_embeddings": False}
NEMOTRON4_15B = dict(NEMOTRON4_340B, hidden_size=6144, intermediate_size=24576, num_hidden_layers=32,
                     num_attention_heads=48)

# (pattern on the lower-cased model name, preset id or config) in order; None: not expressible (reason after it)
MODELS: tuple[tuple[str, object], ...] = (
    (r"nemotron_3_nano", "nemotron-3-nano-30b-a3b"), (r"nemotron_3_ultra", "nemotron-3-ultra-550b-a55b"),
    (r"nemotron_3", "hybrid Mamba-2 / attention MoE (Nemotron-H): no config of it in the repository"),
    (r"deepseekv4|deepseek v4", "DeepSeek-V4: its attention is not described by the engine"),
    (r"qwen3-next|qwen3\.5", "hybrid Gated DeltaNet layers: the step-time model prices their core uncalibrated"),
    (r"tokendrop", "token dropping (capacity factor): the engine routes every token"),
    (r"llama4-scout", "llama-4-scout"),  # NeMo's LLAMA4-Scout-LLM (Megatron-Core)
    (r"llama4 scout", "Llama-4 Scout under torchtitan: its routed experts are sharded over another FSDP group (64) "
                      "than the rest (256) and its MXFP8 row quantizes only some linears; not checked here"),
    (r"nemotron-8b|nemotron-22b", "Nemotron-4 8B / 22B (NeMo): no public config of them in the repository"),
    (r"405b", "llama-3.1-405b"), (r"70b", "llama-3.1-70b"), (r"llama2-13b", "Llama-2-13B"),
    (r"llama2-7b", "Llama-2-7B"), (r"llama2-70b", "Llama-2-70B"), (r"8b", "llama-3.1-8b"),
    (r"deepseek", "deepseek-v3"), (r"dsv3", "deepseek-v3"), (r"235b", "qwen3-235b-a22b"),
    (r"30b", "qwen3-30b-a3b"), (r"gpt oss 120b", "gpt-oss-120b"), (r"8x22b", "mixtral-8x22b"),
    (r"8x7b", "mixtral-8x7b"), (r"kimi", KIMI_K2), (r"moonlight", MOONLIGHT_16B), (r"gpt3-175b", GPT3_175B),
    (r"nemotron-340b", NEMOTRON4_340B), (r"nemotron-15b", NEMOTRON4_15B),
)


# Footnotes with which a source marks its own figure as a regression it will fix, not the stack's throughput
# (Megatron-Bridge docs/performance-summary.md: "[^gpt-oss-note]: Performance regression in GPT-OSS 120B
# pre-training is a known issue (NVIDIA/cudnn-frontend#256). It will be resolved with the next container release.").
# The same layout's figures before and after that release are compared (GB300: 26.06 33,166 and 26.08 33,024
# tokens/s/GPU against 20,288 at the flagged 26.06.01).
KNOWN_REGRESSION_NOTES = {"[^gpt-oss-note]": "NVIDIA/cudnn-frontend#256"}


@dataclass(frozen=True)
class Case:
    """One published run as the engine's inputs."""

    id: str
    group: str
    label: str
    model: object  # ModelSpec
    workload: object  # Workload
    timing: object  # TimingInputs
    published_step_s: float
    fit: bool  # in the fit set (FIT_GROUPS, less what was added after the fit)
    after_fit: bool = False  # added after the fit: its GPU or model the constants never saw (added_after_fit)
    notes: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Skip:
    id: str
    group: str
    label: str
    reason: str


def read_rows(path: Path = CSV_PATH) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _int(text: str) -> int | None:
    m = re.match(r"\s*(\d+)\s*([kK])?", text or "")
    if not m:
        return None
    return int(m.group(1)) * (1024 if m.group(2) else 1)


def _float(text: str) -> float | None:
    m = re.search(r"[\d.]+", (text or "").replace(",", ""))
    return float(m.group(0)) if m and text.strip()[:1] not in ("~", "") else None


def model_of(name: str):
    """(ModelSpec or None, why not) for a published model name."""
    low = name.lower()
    for pattern, what in MODELS:
        if re.search(pattern, low):
            if isinstance(what, str) and " " in what:
                return None, what
            return _spec(what if isinstance(what, str) else tuple(sorted(what.items()))), ""
    return None, f"model {name!r}: not mapped"


@lru_cache(maxsize=None)
def _spec(key):
    from calculator.model.hf_config import spec_from_hf_config
    from calculator.model.presets import load_model
    if isinstance(key, tuple):
        return spec_from_hf_config(dict(key)).spec
    if key[:1].islower():
        return load_model(key).spec
    from validation.published.models import hf_spec
    return hf_spec(key)


def gpu_of(text: str) -> str | None:
    low = text.lower()
    if "power limit" in low or "96gb" in low:
        return None
    for key in ("gb200", "gb300", "b300", "b200", "h200", "h100"):
        if low.startswith(key):
            return GPUS[key]
    return None


def dtype_of(text: str) -> str | None:
    """The GEMM dtype: fp8 for every FP8 / MXFP8 / float8 recipe, bf16, None for FP4 (no FP4 peak catalogued)."""
    low = text.lower()
    if "fp4" in low:
        return None
    return "fp8" if ("fp8" in low or "float8" in low) else "bf16"


def nemo_llama_flops(m, gbs: int, seq: int) -> float:
    """The model FLOPs NeMo divided by the step time for the TFLOP/s of its long-context tables (NVIDIA/NeMo
    nemo/utils/flops_formulas.py llama2 / llama3 as of the 25.04 tables, 2025-05: "(12 * config.enc_seq_len /
    config.hs)", the attention of the whole s × s square — the causal ½ (`causal_self_attn`) came later):
    gbs·s·L·h²·(12 + 12·g/a + 18·f/h + 12·s/h + 6·V/(L·h))."""
    L, h, a, g = m.num_hidden_layers, m.hidden_size, m.num_attention_heads, m.kv_heads
    return gbs * seq * L * h * h * (12 + 12 * g / a + 18 * m.intermediate_size / h + 12 * seq / h
                                    + 6 * m.vocab_size / (L * h))


def _degree(text: str) -> int:
    return _int(text) or 1


def published_step_s(row: dict, m, gbs: int, seq: int, gpus: int) -> float | None:
    """Tokens per step / (tokens/s/GPU × GPUs); or NeMo's model FLOPs / (TFLOP/s/GPU × GPUs) for Llama rows that
    print only TFLOP/s; or the step time printed. None: no exact figure ("~" approximate cells are not)."""
    tps = _float(row["tokens_per_s_per_gpu"])
    if tps:
        return gbs * seq / (tps * gpus)
    step = _float(row["step_time_s"])
    if step:
        return step
    tflops = _float(row["model_tflops_per_gpu"])
    if tflops and m.model_type == "llama" and not m.is_moe:
        return nemo_llama_flops(m, gbs, seq) / (tflops * 1e12 * gpus)
    return None


# stacks that overlap the interleaved schedule's sends with compute (splits.py docstring: Megatron-Bridge
# comm_overlap.py CommOverlapConfig, NeMo 2 megatron_comm_overlap.py, Megatron-LM --no-overlap-p2p-communication
# off by default); NeMo 1.x (24.07) is left out: its default is not established here
P2P_OVERLAP_GROUPS = frozenset({"megatron-bridge-perf-summary", "megatron-bridge-skills", "nemo-25.02-perf-summary",
                                "nemo-25.04-perf-summary", "megatron-lm-examples-llama"})


def case_of(row: dict):
    """The Case of one published row, or a Skip naming what the engine cannot express."""
    from calculator.core.workload import Parallelism, Workload
    from calculator.timing.inputs import TimingInputs
    rid, group = row["row_id"], row["source_group"]
    label = f"{row['model']} on {row['num_gpus']} × {row['gpu_type'].split(' (')[0]}"

    def skip(reason: str) -> Skip:
        return Skip(rid, group, label, reason)
    flagged = [issue for note, issue in KNOWN_REGRESSION_NOTES.items() if note in row["quote"]]
    if flagged:
        return skip(f"the source flags this figure as a known performance regression ({flagged[0]}), not the "
                    "layout's throughput")
    gpu = gpu_of(row["gpu_type"])
    if gpu is None:
        low = row["gpu_type"].lower()
        return skip(f"{row['gpu_type']}: a power-limited GPU, not the catalogue's datasheet part" if "power" in low
                    else f"GPU {row['gpu_type']!r} not in the catalogue")
    m, why = model_of(row["model"])
    if m is None:
        return skip(why)
    dtype = dtype_of(row["precision"])
    if dtype is None:
        return skip("NVFP4 GEMMs: the catalogue has no FP4 peak")
    if row["task"] == "LoRA":
        return skip("Megatron-Bridge LoRA on Megatron's fused layers: the engine's LoRA is PEFT's")
    gpus, seq = _int(row["num_gpus"]), _int(row["seq_len"])
    if not gpus or not seq or "not stated" in row["seq_len"]:
        return skip("sequence length or GPU count not printed")
    tp, pp, cp = _degree(row["tp"]), _degree(row["pp"]), _degree(row["cp"])
    ep, vp = _degree(row["ep"]), _degree(row["vp"])
    mbs = _int(re.sub(r"[^\d]", " ", row["mbs"]).strip()) or 1
    from validation.published.throughput.recipes import recipe_layout
    ran, _ = recipe_layout(row, next(k for k, v in GPUS.items() if v == gpu), {"pp": pp, "vp": vp, "ep": ep,
                                                                               "mbs": mbs, "gbs": _int(row["gbs"])})
    # a misprinted cell: the release's recipe (recipes.py)
    pp, vp, ep, mbs = ran.get("pp", pp), ran.get("vp", vp), ran.get("ep", ep), ran.get("mbs", mbs)
    dp, rem = divmod(gpus, tp * pp * cp)
    if rem or dp < 1:
        return skip(f"{gpus} GPUs do not split into TP{tp} × PP{pp} × CP{cp}")
    torch_side = group.startswith(("torchtitan", "torchao"))
    settings = (row["other_settings"] + " " + row["dp_or_fsdp_as_printed"]).lower()
    fsdp = torch_side or bool(re.search(r"fsdp=([1-9])", settings))
    gbs = _int(row["gbs"]) or mbs * dp
    mb = 1
    if torch_side and pp > 1:  # torchtitan pipelines micro-batches of 1 (pipeline_parallel_microbatch_size)
        mb, mbs = mbs, 1
    elif gbs % (mbs * dp):
        return skip(f"global batch {gbs} does not split into micro-batch {mbs} × DP{dp} (README doubt 6)")
    else:
        mb = gbs // (mbs * dp)
    step = published_step_s(row, m, gbs, seq, gpus)
    if step is None:
        return skip("no exact throughput figure (approximate '~' TFLOP/s, or none printed)")
    rc = row["recompute"].lower()
    recompute = "full" if "full" in rc else ("op" if torch_side and ("op" in rc or "selective" in rc) else "none")
    from validation.published.throughput.recipes import selective_modules, skills_recipe
    modules = None if torch_side else selective_modules(rc)  # Megatron's --recompute-modules as printed
    if modules is not None:
        recompute = "selective"
    recipe, _ = skills_recipe(row)  # a skills card's recipe: its dispatcher and TP overlap
    impl = ("compile" if "compile" in settings else "hf") if torch_side else "megatron-te"
    from validation.published.throughput.splits import pipeline_settings
    split, _ = pipeline_settings(row, pp, vp)  # the recipe's uneven pipeline split (splits.py)
    from validation.published.throughput.recipes import mtp_layers
    mtp = mtp_layers(row) if not torch_side else 0
    if not mtp and "pp_layout" in split:
        split["pp_layout"] = split["pp_layout"].replace("m", "")
    par = Parallelism(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=1 if (m.is_moe and ep > 1) else None,
                      sequence_parallel=tp > 1, zero=3 if fsdp and dp * cp > 1 else 0,
                      distributed_optimizer=not fsdp, num_microbatches=mb,
                      schedule="interleaved" if vp > 1 else "1f1b", virtual_stages=vp,
                      pp_overlap_p2p=vp > 1 and group in P2P_OVERLAP_GROUPS, **split)
    w = Workload(micro_batch=mbs, seq_len=seq, gpu=gpu, impl=impl, recompute=recompute, parallel=par,
                 stack="fsdp2" if fsdp else "megatron", mtp_layers=mtp,
                 recompute_modules=modules,
                 **({} if torch_side else {"moe_dispatcher": recipe.get("moe_dispatcher", "flex")}))
    from validation.published.throughput.recipes import recipe_switches
    gpu_key = next(k for k, v in GPUS.items() if v == gpu)
    ep_overlap, full_graph, _ = recipe_switches(row, gpu_key, {"pp": pp, "vp": vp, "ep": ep, "mbs": mbs})
    # a row that prints its EP overlap ("ep_overlap", "EP overlap ON" / "OFF": the skills cards' A/B runs)
    printed = re.search(r"ep[_ ]overlap(?: (on|off))?", settings)
    if printed:
        ep_overlap = printed.group(1) != "off"
    from validation.published.throughput.recipes import moe_layer_graph
    moe_graph = m.is_moe and not torch_side and moe_layer_graph(row, gpu_key,
                                                                {"pp": pp, "vp": vp, "ep": ep, "mbs": mbs})[0]
    timing = TimingInputs(matmul_dtype=dtype, overlap_grad_reduce=True, overlap_param_gather=True,
                          tp_comm_overlap=("async" in settings) if torch_side else recipe.get("tp_comm_overlap",
                                                                                               tp > 1),
                          ep_comm_overlap=ep_overlap, full_iteration_cuda_graph=full_graph,
                          moe_router_cuda_graph=moe_graph)
    after = added_after_fit(gpu, row["model"])
    return Case(rid, group, label, m, w, timing, step, group in FIT_GROUPS and not after, after)
