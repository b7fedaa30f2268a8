"""Megatron-LM's own CI golden values (validation/published/megatron_ci/rows.csv: one row per test case and GPU, each
with its source file, commit and exact launch arguments) against the engine's peak allocated for the same run
with `--stack megatron --impl megatron-te`.

The measured figure is `mem-max-allocated-bytes` (torch.cuda.memory_stats()['allocated_bytes.all.peak'], cumulative
since the process started) of the last rank, which holds the last pipeline stage: it is compared with the engine's
last stage, and the engine's most loaded stage is reported beside it. Rows come from the tests whose GPU count is
public (tests/test_utils/recipes/{h100,gb200}/*.yaml: 8 GPUs, or 4 for the `*_1node` recipes) and which run
Transformer Engine layers without Muon, CUDA graphs, hybrid Mamba stacks or distillation
(calculator/validation scripts do not model those). GB200 rows run on the catalogue's GB200 (B200's
Blackwell compute capability, cuBLAS and TE workspaces).

Groups and what stays approximate (each group's bound in tests/validation/test_megatron_ci.py is what it reaches):
- dense: GPT with LayerNorm / RMSNorm, GELU / SwiGLU / squared ReLU, learned or rotary positions, TP / PP / VPP /
  uneven stages, flash / cuDNN attention. The small test model (12 layers, h = 512) is dominated by the loss head
  and the fixed workspaces, which are exact. TE copies q, k, v that are not interleaved views of the fused qkv
  output (GQA, RoPE, q/k norms) and, on Blackwell, deterministic training with attention dropout runs
  FlashAttention instead of cuDNN (TE 2.11–2.18, any cuDNN), one more e·T·qd per layer at micro-batch > 1; at
  micro-batch 1 its transposes are views and it keeps nothing more (calculator/impls/te_attention.py: the GB200 7B
  PP-4 run, micro-batch 1, reads as its H100 twin, as it has since the 25.11 container). At TP 4 the kept
  qkv output (3 MiB) lands in a freed 4 MiB residual-stream block whose 1 MiB rest the caching allocator does not
  split off (calculator/impls/unsplit_block.py). What stays: a few MiB of small tensors (loss-scale, grad-norm
  buffers; the runs read 4–9 MiB low throughout, 0.4–1.5% of the TP-4 runs), a few static MiB that vary between
  containers of the same test (pipeline runs, 3–35 MiB).
- Every row reads its run's environment (environment.csv): PyTorch's cuBLAS workspace (calculator/memory/cublas.py)
  follows the test's CUBLAS_WORKSPACE_CONFIG, else the container's default — 8.125 MiB on Blackwell in 26.02 and
  earlier (before pytorch/pytorch#175344), 32 MiB on Hopper and later containers.
- unfused: the same runs with TE's unfused attention (`--attention-backend unfused`): the softmax output, dropout
  mask and dropped probabilities per score.
- cp: context parallelism (p2p ring); its ring buffers live inside one layer and never reach the loss peak.
- moe: routed experts (alltoall / allgather, grouped GEMM or sequential experts, EP / ETP), with the probability-
  weighted activation's kept output, the deterministic unpermute's kept rows (`--deterministic-mode`) and the
  allgather dispatcher's global buffer. What stays: routing imbalance — the engine assumes balanced experts; the
  aux-loss runs with one expert per rank (ep8, top-2) peak anywhere from −3% to +6% of that across GPUs and steps
  (the H100 and GB200 runs of one test differ by 6%: at 768 MiB per unit of load the last rank's expert held about
  0.76× the mean on GB200 and 1.08× on H100, stable since the 25.11 container; the golden files log no per-expert
  counts, so the load is not derivable), sinkhorn runs stay within ~2%.
- fp8: current (tensorwise) scaling with --fp8-param-gather, tp4 cp2 and tp2 pp2 with --tp-comm-overlap (TE
  userbuffers: cudaMalloc'd outside PyTorch's allocator, their GEMMs on their own 3 × 32 MiB cuBLAS workspace,
  megatron_core.te_workspace_bytes; both GPUs within 0.9%). TE's linears save their inputs
  quantized, and the output projection keeps only its quantized copy of the attention output, so under the ring
  only `out_part` stays in bf16 (calculator/impls/megatron_te_core.projection_input); Hopper keeps the weights'
  FP8 transposes (post_all_gather_processing), Blackwell none. The tp4 cp2 H100 run reads +0.03%, its GB200 twin 4% low:
  its allocated after each step is 9.44 MB below H100's (the transposes, as priced), yet its logged peak was
  reached in step 1 with the Adam states already allocated (H100 reaches its own only in step 2) and grew another
  9.65 MB at iteration 1001, after the first evaluation — events outside a training step's fwd/bwd that the golden
  file (lm loss, num-zeros, memory, iteration time) does not break down. They came with the 26.02 container (TE
  2.13): the 25.11 / TE 2.12 golden of the same test (Megatron-LM 1666b458c8) reached its GB200 peak in step 2 like
  H100, 419.26 MB (engine -0.83%), with allocated 9.44 MB below H100 and a peak-over-allocated 12 x 262,144 B (one
  e·T·h_sp per layer) above H100's — a Blackwell-only tensor per layer not yet identified in the sources.
- mtp: the MoE + MLA + MTP memory-speed run, and its FP8 twin (M0307: the same arguments with --fp8-format hybrid
  --fp8-recipe tensorwise; commented out of the h100 moe.yaml recipes for a hang, its 2025-10 golden stays; 8 GPUs).
  Under FP8 the MTP block's linears are cached in FP8 too and MLA's projections keep their own quantized inputs
  (mla_fp8_change), MLA a copy of the value alone (M0307 +1.08%, M0273 -0.94%: mla_value_copy_change). What stays:
  the peak of these runs drifts with routing over the steps (the bf16 test's own goldens read 57.2-60.1 GB for one
  configuration, step 1 stable at 55.05 GB); at step 1 FP8 saves 1.88 GB against the bf16 run of the same month, the
  engine 1.37 GB. M0318 runs --recompute-modules layernorm mla_up_proj mlp moe_act (a layout, 13 MoE layers): -2.84%
  (+12.4% without the mla_up_proj rule, -1.9% without layernorm's).
- offload: M0318's model (15 layers, micro-batch 1) offloading all seven modules (impls/megatron_offload.py), with
  MTP and EP overlap (-6.9/-7.3%) and without (-4.5/-5.2%; -15/-21% before): after warmup the reloads run a layer
  ahead (pre_reload_last_layer), so a 1F1B forward's unfused attention (1 GiB) runs beside the next backward's
  reloaded layer, its softmax output (saved twice) back twice — 2.4 GiB above the states, the loss backward 1.3.
  What stays: 0.3 GB (0.09 GB static, after each step); the backward moments read stay below the priced one.
- mfsdp: Megatron-FSDP (--use-megatron-fsdp, optim_grads_params; calculator/stacks/megatron_fsdp.py): the dense
  GPT (TP 2, fp32 main weights / grads / communication), the MoE one (8 experts, EP 2, top-2 aux loss) and the
  DeepSeek-style proxy (MLA, 3 dense + 5 MoE layers, EP 2, FP8 tensorwise with --fp8-param-gather, unfused
  attention; its 8- and 4-GPU runs pass no --bf16: fp32 weights and activations, for which the unfused loss keeps
  only the in-place softmax, megatron_core.loss_terms; the _ep_overlap twin in bf16). The runs' Megatron-LM read
  an unset main-grads dtype as fp32 for bf16 before adfe9e11d9 (2026-07-02; FSDP_AUTO_GRADS_SINCE, from the
  run's commit date in environment.csv) and released the modules outside the units at the end of each step
  before 378d81fbd3 (2026-05-30): at rest those runs hold 26 MB less than d98e8a64 would, their peak (loss
  backward, the modules still gathered) the same. The dense runs read -0.85 to -0.95% (12.7 MB low at DP 4,
  15.5 MB at DP 2), as the DDP TP-2 runs of the same model do (M0169-M0184: -0.58 to -1.00%). What stays: the
  MoE runs read 4.5% (H100) and 6.3% (GB200) low — the same top-2 aux-loss routing imbalance as the moe group's
  (the engine assumes balanced experts; the GB200 run sits 78 MB above the H100 one, the engine's Blackwell
  FlashAttention fallback explains 25 MB of it); the proxy runs read +3.4% (mb 32, fp32), -3.9% (mb 4, fp32)
  and +1.3% (bf16, EP overlap with delayed wgrad): fp32 Megatron-TE activations under FP8 are priced here
  for the first time and their layers' saved tensors are not broken down by the golden files.

Run: .venv/bin/python -m validation.published.megatron_ci (its __main__.py)
"""
from __future__ import annotations

import csv
import re
import statistics
from dataclasses import dataclass
from pathlib import Path


CSV_PATH = Path(__file__).with_name("rows.csv")


# ---- Megatron-LM launch arguments to ModelSpec / Workload fields -------------------------------------------------
# Megatron-LM launch arguments (pretrain_gpt.py) to the engine's ModelSpec and Workload, by Megatron's own
# defaults (megatron/training/arguments.py at NVIDIA/Megatron-LM d98e8a64, the commit the golden values were read at):
#
# - `--ffn-hidden-size` defaults to 4·h, or int(4·h·2/3 / 64)·64 with `--swiglu`; `--kv-channels` to h / heads;
#   `--num-query-groups` applies only with `--group-query-attention`;
# - `--normalization` LayerNorm, `--position-embedding-type learned_absolute` (a learned table of
#   `--max-position-embeddings` rows), biases on every linear unless `--disable-bias-linear`, tied input and output
#   embeddings unless `--untie-embeddings-and-output-weights`, GELU unless `--swiglu` / `--squared-relu`;
# - `--hidden-dropout` and `--attention-dropout` 0.1;
# - the GPT-2 BPE vocabulary (`--vocab-file ... vocab.json`) has 50,257 tokens; NullTokenizer takes `--vocab-size`;
# - `--moe-ffn-hidden-size` defaults to the dense width, `--moe-layer-freq` to 1 (every layer), and a list such as
#   `([0]*1+[1]*3)` names each layer.
#
# Only what changes memory is read; everything else (learning rates, logging, data) is ignored.


GPT2_BPE_VOCAB = 50257


def parse_args(text: str) -> dict[str, str | bool]:
    """`--flag=value` / `--flag value [value ...]` / `--flag` to {flag: value (several joined by a space) or True}
    (the last occurrence wins)."""
    out: dict[str, str | bool] = {}
    tokens = text.split()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            i += 1
            continue
        if "=" in tok:
            key, val = tok[2:].split("=", 1)
            out[key] = val
        else:
            j = i + 1
            while j < len(tokens) and not tokens[j].startswith("--"):
                j += 1
            out[tok[2:]] = " ".join(tokens[i + 1:j]) or True
            i = j - 1
        i += 1
    return out


def _int(a: dict, key: str, default: int | None = None) -> int | None:
    v = a.get(key)
    return default if v is None or v is True else int(v)


def moe_layer_pattern(value: str | bool | None, layers: int) -> tuple[int, ...]:
    """`--moe-layer-freq`: an int k (every k-th layer, from layer 0) or a Python list expression of 0/1."""
    if value is None or value is True:
        return (1,) * layers
    if re.fullmatch(r"\d+", str(value)):
        k = int(value)
        return tuple(1 if i % k == 0 else 0 for i in range(layers))
    out: list[int] = []
    for count_list in re.findall(r"\[([01])\]\s*\*\s*(\d+)", str(value)):
        out += [int(count_list[0])] * int(count_list[1])
    if len(out) != layers:
        raise ValueError(f"--moe-layer-freq {value!r} names {len(out)} layers, not {layers}")
    return tuple(out)


def model_fields(a: dict) -> dict:
    """ModelSpec fields of a Megatron GPT from its launch arguments."""
    h, heads, layers = int(a["hidden-size"]), int(a["num-attention-heads"]), int(a["num-layers"])
    swiglu = bool(a.get("swiglu"))
    ffn = _int(a, "ffn-hidden-size") or (int((4 * h * 2 / 3) / 64) * 64 if swiglu else 4 * h)
    bias = not a.get("disable-bias-linear")
    vocab = _int(a, "vocab-size") or GPT2_BPE_VOCAB
    f = dict(name="megatron-gpt", model_type="llama", family="llama", hidden_size=h, num_hidden_layers=layers,
             num_attention_heads=heads, intermediate_size=ffn, vocab_size=vocab,
             num_key_value_heads=_int(a, "num-query-groups") if a.get("group-query-attention") else heads,
             head_dim=_int(a, "kv-channels") or h // heads,
             tie_word_embeddings=not a.get("untie-embeddings-and-output-weights"),
             gated_mlp=swiglu, hidden_act="silu" if swiglu else ("relu2" if a.get("squared-relu") else "gelu"),
             norm_type="rmsnorm" if a.get("normalization") == "RMSNorm" else "layernorm",
             qkv_bias=bias or bool(a.get("add-qkv-bias")), o_bias=bias, mlp_bias=bias,
             qk_norm=bool(a.get("qk-layernorm")),
             learned_position_embeddings=(int(a["max-position-embeddings"])
                                          if a.get("position-embedding-type", "learned_absolute") == "learned_absolute"
                                          else 0),
             dropout=float(a.get("hidden-dropout", 0.1)), max_position_embeddings=_int(a, "max-position-embeddings"))
    if a.get("multi-latent-attention"):
        f.update(q_lora_rank=_int(a, "q-lora-rank"), kv_lora_rank=_int(a, "kv-lora-rank"),
                 qk_nope_head_dim=_int(a, "qk-head-dim", 128), qk_rope_head_dim=_int(a, "qk-pos-emb-head-dim", 64),
                 v_head_dim=_int(a, "v-head-dim", 128), head_dim=None, num_key_value_heads=heads, family="deepseek",
                 model_type="deepseek_v3")
    experts = _int(a, "num-experts", 0)
    if experts:
        pattern = moe_layer_pattern(a.get("moe-layer-freq"), layers)
        shared = _int(a, "moe-shared-expert-intermediate-size")
        f.update(num_experts=experts, num_experts_per_tok=_int(a, "moe-router-topk", 2),
                 moe_intermediate_size=_int(a, "moe-ffn-hidden-size") or ffn,
                 shared_expert_intermediate_size=shared, num_shared_experts=1 if shared else 0,
                 ffn_types=tuple("moe" if x else "dense" for x in pattern), router_bias=False)
    mtp = _int(a, "mtp-num-layers", 0)
    if mtp:
        f["mtp_layers"] = mtp
    return f


def virtual_stages(a: dict, layers: int, pp: int) -> int:
    """Model chunks per pipeline rank: `--num-layers-per-virtual-pipeline-stage` n gives layers / (pp·n)."""
    if a.get("num-virtual-stages-per-pipeline-rank"):
        return int(a["num-virtual-stages-per-pipeline-rank"])
    if a.get("pipeline-model-parallel-layout"):  # p·v stages split by '|'
        from calculator.memory.pipeline_split import parse_layout
        return len(parse_layout(a["pipeline-model-parallel-layout"], pp)) // pp
    n = _int(a, "num-layers-per-virtual-pipeline-stage")
    return layers // (pp * n) if n else 1

FP8_RECIPES = {"tensorwise": "current", "delayed": "delayed", "blockwise": "blockwise", "mxfp8": "mxfp8"}


@dataclass(frozen=True)
class CIRow:
    id: str
    test: str
    group: str
    gpu: str
    measured: int
    estimated: int  # the engine's last stage
    worst_stage: int  # the engine's most loaded stage
    stages: int

    @property
    def error_pct(self) -> float:
        return 100 * (self.estimated - self.measured) / self.measured


def group_of(a: dict) -> str:
    if a.get("fine-grained-activation-offloading"):
        return "offload"
    if a.get("use-megatron-fsdp"):
        return "mfsdp"
    if a.get("mtp-num-layers"):
        return "mtp"
    if a.get("fp8-recipe") or a.get("fp8-format"):
        return "fp8"
    if a.get("num-experts"):
        return "moe"
    if int(a.get("context-parallel-size", 1)) > 1:
        return "cp"
    if a.get("attention-backend") == "unfused":
        return "unfused"
    return "dense"


ENV_PATH = CSV_PATH.with_name("environment.csv")
# NGC PyTorch containers built before pytorch/pytorch#175344 (2026-02-19) give Blackwell the 8.125 MiB default cuBLAS
# workspace: 26.02 and earlier (the GB200 rows of 26.02 without CUBLAS_WORKSPACE_CONFIG hold 47.75 MiB less than
# their 26.04 and H100 twins, two workspaces of 32 − 8.125 MiB).
BLACKWELL_LEGACY_CUBLAS_CONTAINERS = ("25.09", "25.11", "26.02")


def read_environment(path: Path = ENV_PATH) -> dict[str, dict[str, str]]:
    """{row_id: the run's container, TE pin and CUBLAS_WORKSPACE_CONFIG} (environment.csv, written by
    environment_from_git.py from the commit that last changed the row's memory values)."""
    with path.open(newline="", encoding="utf-8") as fh:
        return {r["row_id"]: r for r in csv.DictReader(fh)}


_ENVIRONMENT: dict[str, dict[str, str]] = {}


def cublas_workspace(row: dict, gpu: str) -> int | None:
    """PyTorch's cuBLAS workspace in the row's run (calculator.memory.cublas.workspace_bytes): the test's
    CUBLAS_WORKSPACE_CONFIG, else the container's PyTorch default for the GPU; None without environment data."""
    from calculator.memory.cublas import workspace_bytes
    from calculator.memory.fp8 import compute_capability
    if not _ENVIRONMENT:
        _ENVIRONMENT.update(read_environment())
    env = _ENVIRONMENT.get(row.get("row_id", ""))
    if env is None:
        return None
    release = env["container"].rsplit(":", 1)[-1].split("-")[0]
    return workspace_bytes(compute_capability(gpu), env["cublas_workspace_config"] or None,
                           blackwell_32mib=release not in BLACKWELL_LEGACY_CUBLAS_CONTAINERS)


def inputs(row: dict):
    """(ModelSpec, Workload) of one CSV row, from its launch arguments and its run's environment."""
    from calculator import Workload
    from calculator.model.spec import ModelSpec
    a = parse_args(row["launch_args"])
    fields = model_fields(a)
    mtp = fields.pop("mtp_layers", 0)
    m = ModelSpec(**fields)
    tp = int(a.get("tensor-model-parallel-size", 1))
    pp = int(a.get("pipeline-model-parallel-size", 1))
    cp = int(a.get("context-parallel-size", 1))
    dp = int(row["num_gpus"]) // (tp * pp * cp)
    mbs, gbs = int(a["micro-batch-size"]), int(a.get("global-batch-size") or 0)
    v = virtual_stages(a, m.num_hidden_layers, pp)
    par = dict(tp=tp, pp=pp, cp=cp, dp=dp, ep=int(a.get("expert-model-parallel-size", 1)),
               etp=int(a["expert-tensor-parallel-size"]) if a.get("expert-tensor-parallel-size") else None,
               sequence_parallel=bool(a.get("sequence-parallel")) and tp > 1,
               distributed_optimizer=bool(a.get("use-distributed-optimizer")),
               schedule="interleaved" if v > 1 else "1f1b", virtual_stages=v,
               num_microbatches=max(1, gbs // (mbs * dp)) if gbs else None,
               pp_first_stage_layers=int(a["decoder-first-pipeline-num-layers"])
               if a.get("decoder-first-pipeline-num-layers") else None,
               pp_last_stage_layers=int(a["decoder-last-pipeline-num-layers"])
               if a.get("decoder-last-pipeline-num-layers") else None,
               pp_layout=a.get("pipeline-model-parallel-layout"))
    granularity = a.get("recompute-granularity")
    gpu = "h100-sxm" if "H100" in row["gpu_type"] else "gb200"
    cublas = cublas_workspace(row, gpu)
    fusion = "none"
    if a.get("cross-entropy-loss-fusion"):
        fusion = a.get("cross-entropy-fusion-impl", "native")
    w = Workload(
        micro_batch=mbs, seq_len=int(a["seq-length"]), stack="megatron", impl="megatron-te",
        precision=precision(a, row),
        attention="eager" if a.get("attention-backend") == "unfused" else "flash",
        recompute={"full": "full", "selective": "selective"}.get(granularity, "none"),
        parallel=par, gpu=gpu, overheads={} if cublas is None else {"cublas_workspace_bytes": cublas},
        fp8=FP8_RECIPES.get(a.get("fp8-recipe", "delayed"), "none") if a.get("fp8-format") else "none",
        fp8_param_gather=bool(a.get("fp8-param-gather")), cross_entropy_fusion=fusion,
        gradient_accumulation_fusion=not a.get("no-gradient-accumulation-fusion"),
        make_vocab_size_divisible_by=int(a.get("make-vocab-size-divisible-by", 128)),
        cp_comm_type=a.get("cp-comm-type", "p2p"), mtp_layers=mtp,
        moe_dispatcher=a.get("moe-token-dispatcher-type", "allgather") if m.is_moe else "alltoall",
        moe_router_fp32=a.get("moe-router-dtype") == "fp32", moe_grouped_gemm=bool(a.get("moe-grouped-gemm")),
        deterministic=bool(a.get("deterministic-mode")), tp_comm_overlap=bool(a.get("tp-comm-overlap")),
        megatron_fsdp=a.get("data-parallel-sharding-strategy", "optim_grads_params") if a.get("use-megatron-fsdp")
        else "none",
        recompute_modules=_listed(a, "recompute-modules"),
        offload_modules=_listed(a, "offload-modules") if a.get("fine-grained-activation-offloading") else ())
    return m, w


def _listed(a: dict, key: str) -> tuple[str, ...] | None:  # `--recompute-modules core_attn moe_act`; None: absent
    return tuple(a[key].split()) if isinstance(a.get(key), str) else None


FSDP_DTYPES = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}
# Megatron-LM adfe9e11d9 (2026-07-02, #5462) dropped Megatron-FSDP's grandfathered grad_reduce_in_fp32: before it
# a bf16 run (accumulate_allreduce_grads_in_fp32) kept fp32 main grads whatever --megatron-fsdp-main-grads-dtype
# said (mcore_fsdp_adapter.py MixedPrecisionPolicy(main_grads_dtype=fp32 if grad_reduce_in_fp32 ...))
FSDP_AUTO_GRADS_SINCE = "2026-07-02"


def precision(a: dict, row: dict | None = None) -> dict:
    """--bf16 / --fp16 (else fp32 parameters and activations) with fp32 main grads, master weights and Adam state;
    under --use-megatron-fsdp the main weights follow --megatron-fsdp-main-params-dtype (default fp32, a main-weight
    buffer even for fp32 parameters) and the main grads --megatron-fsdp-main-grads-dtype (default auto: the
    parameters' dtype; fp32 for bf16 runs recorded before FSDP_AUTO_GRADS_SINCE; megatron/training/arguments.py)."""
    params = "fp16" if a.get("fp16") else ("bf16" if a.get("bf16") else "fp32")
    act = {"activations": "fp32"} if params == "fp32" else {}
    if not a.get("use-megatron-fsdp"):
        return dict(params=params, grads="fp32", master_weights="fp32", optimizer_states="fp32", **act)
    master = FSDP_DTYPES.get(a.get("megatron-fsdp-main-params-dtype", "fp32"))
    grads = FSDP_DTYPES.get(a.get("megatron-fsdp-main-grads-dtype", "auto"), params)
    if grads == params == "bf16" and "megatron-fsdp-main-grads-dtype" not in a:
        grads = "fp32" if _recorded(row) < FSDP_AUTO_GRADS_SINCE else grads
    return dict(params=params, grads=grads, master_weights=master, optimizer_states="fp32", **act)


def _recorded(row: dict | None) -> str:
    """The date of the Megatron-LM commit whose run recorded the row's memory values (environment.csv)."""
    if not _ENVIRONMENT:
        _ENVIRONMENT.update(read_environment())
    env = _ENVIRONMENT.get((row or {}).get("row_id", ""))
    return env["memory_date"] if env else "9999"


def read_rows(path: Path = CSV_PATH) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def compare(rows: list[dict[str, str]] | None = None) -> list[CIRow]:
    from calculator.stages.estimate import estimate
    out = []
    for row in rows if rows is not None else read_rows():
        m, w = inputs(row)
        est = estimate(m, w, with_fits=False)
        last = est.stages[-1]
        out.append(CIRow(row["row_id"], row["model"], group_of(parse_args(row["launch_args"])), w.gpu,
                         int(float(row["memory_value"])), last.peak_allocated_bytes, est.worst_stage,
                         len(est.stages)))
    return out


def summary(rows: list[CIRow]) -> dict[str, tuple[int, float, float]]:
    """{group: (rows, median |error| %, worst |error| %)} and "all"."""
    out = {}
    groups = sorted({r.group for r in rows}) + ["all"]
    for g in groups:
        errs = [abs(r.error_pct) for r in rows if g in ("all", r.group)]
        out[g] = (len(errs), statistics.median(errs), max(errs))
    return out


def main() -> int:
    rows = compare()
    for r in rows:
        print(f"{r.id} {r.group:8} {r.gpu:8} {r.test[:62]:62} {r.measured / 2**30:7.3f} GiB  engine "
              f"{r.estimated / 2**30:7.3f} GiB  {r.error_pct:+6.2f}%  most loaded stage {r.worst_stage}/{r.stages}")
    for g, (n, med, worst) in summary(rows).items():
        print(f"{g:8} {n:4} rows  median |error| {med:5.2f}%  worst {worst:6.2f}%")
    return 0


