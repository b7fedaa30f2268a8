"""The stacks' handling of parameters a bf16 model keeps in fp32 (calculator/stacks/common.py KeptDtype, each stack's
FP32_KEPT), held to tests/golden_stacks/deepseek-v4-tiny.json: validation/architectures/dsv4_stacks.py ran the
tiny DeepSeek-V4 of tests/golden/deepseek-v4-tiny__* (5,189,501 parameters, 206,717 of them fp32-kept) as
from_pretrained loads it in bf16, on two gloo processes on the CPU with PyTorch 2.13 and transformers 5.23, one
32-token micro-batch a rank, and recorded rank 0's gradient buckets (a DDP comm hook's GradBucket.buffer() and the
Reducer's bucket_sizes), FSDP2's refusal of the mixed-dtype model and its local shards under accelerate's fp32
upcast, DeepSpeed's (ZeRO-2 / 3, bf16) parameter dtypes and fp32 partitions, and the saved-for-backward bytes of
each against one process of the model with the fp32-kept parameters kept or cast to bf16."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calculator import InputError, Workload, estimate
from calculator.core.workload import RECIPES
from calculator.model import architectures
from calculator.model.architectures import compressed
from calculator.model.hf_config import spec_from_hf_config
from calculator.model.parameters import count_parameters, model_tensor_shapes
from calculator.memory.parallel import stage_shards
from calculator.stacks import MODULES, common
from calculator.stages.held import states_for_stack

TESTS = Path(__file__).resolve().parents[1]
TRACE = json.loads((TESTS / "golden_stacks" / "deepseek-v4-tiny.json").read_text())
SPEC = spec_from_hf_config(json.loads(
    (TESTS / "golden" / "deepseek-v4-tiny__train__mixed__b1_s128__none__eager.json").read_text())["model"]).spec


def _workload(**update) -> Workload:
    return Workload(mode="train", micro_batch=1, seq_len=TRACE["tokens_per_rank"], attention="eager",
                    precision=RECIPES["mixed-bf16"][1], **update)


def _terms(w: Workload) -> dict[str, int]:
    return {t.key: t.bytes for t in estimate(SPEC, w, with_fits=False).stages[0].terms}


def test_the_traced_model_is_the_engines():
    """The same parameters and the same fp32-kept ones (compressed.fp32_parameters, via common.fp32_kept)."""
    assert count_parameters(SPEC).total == TRACE["parameters"] == 5_189_501
    assert common.fp32_kept(SPEC, 0, SPEC.num_hidden_layers, True) == TRACE["fp32_parameters"] == 206_717


def test_ddp_buckets_each_dtype_apart_and_hold_every_parameter_at_its_own_bytes():
    """reducer.cpp compute_bucket_assignment_by_size keys buckets by (dtype, device): the comm hook saw two bf16
    buckets (8,060,928 + 1,904,640 B) and one fp32 bucket of 826,868 B = 4 × 206,717, in both iterations (HF
    Trainer's find_unused_parameters=True keeps the first assignment: no rebuild), the Reducer's bucket_sizes the
    same. The engine's DDP buckets are the gradients term, 10,792,436 B, split the same way."""
    ddp = TRACE["ddp"]
    first, second = ddp["buckets"]
    assert first == second
    by_dtype = {}
    for _, dtype, nbytes in first:
        by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes
    assert by_dtype == {"torch.bfloat16": 9_965_568, "torch.float32": 826_868} == TRACE["params"]
    assert sum(ddp["reducer_bucket_sizes"]) == sum(by_dtype.values())
    t = _terms(_workload(stack="ddp", parallel={"dp": 2}))
    assert t["gradients.ddp_buckets"] == sum(by_dtype.values()) == 10_792_436
    assert 4 * common.fp32_kept(SPEC, 0, SPEC.num_hidden_layers, True) == by_dtype["torch.float32"]


def test_ddp_replicates_the_one_gpu_states_and_activations():
    """DDP wraps the modules as they are: every GPU holds the one-GPU weights (bf16 + the fp32-kept ones: the traced
    parameter bytes), master weights and AdamW states, and saves the same tensors as one GPU (held to
    tests/golden/deepseek-v4-tiny__*); its buckets are its only addition, its NCCL communicator beside them."""
    one, dp = _terms(_workload()), _terms(_workload(stack="ddp", parallel={"dp": 2}))
    assert dp["weights"] + dp["weights.fp32"] == sum(TRACE["params"].values())
    for key in ("weights", "weights.fp32", "master_weights", "optimizer_states", "optimizer_states.fp32"):
        assert dp.get(key, 0) == one.get(key, 0), key
    assert {k: v for k, v in dp.items() if k.startswith(("activations", "logits"))} == {
        k: v for k, v in one.items() if k.startswith(("activations", "logits"))}


def _held(stack: str, **update) -> tuple[dict, int]:
    """({component: bytes} of the model states the stack holds for the step, gradient bytes it leaves out)."""
    mod = MODULES[stack]
    ws = mod.states_workload(_workload(stack=stack, **update))
    m = common.model_as_run(SPEC, mod)
    terms, _, _, left_out = states_for_stack(m, mod, ws, stage_shards(m, ws.parallel)[0])
    by: dict[str, int] = {}
    for t in terms:
        by[t.component] = by.get(t.component, 0) + t.bytes
    return by, left_out


def test_ddp_leaves_the_indexers_parameters_without_gradients():
    """The CSA indexers' 12 parameters (6 per CSA layer) get no gradient: with find_unused_parameters=True their
    .grad stays None (grads: 184,320 B bf16 and 2,304 B fp32 fewer than the buckets); with gradient checkpointing
    HF Trainer passes False and DDP raises at the second iteration. The engine's DDP (NO_GRAD: no .grad, no AdamW
    state for them, the buckets all of them) holds the traced .grad bytes exactly, 10,605,812 B."""
    ddp = TRACE["ddp"]
    assert ddp["params_without_grad"] == 12
    assert sum(TRACE["params"].values()) - sum(ddp["grads"].values()) == 186_624
    assert TRACE["ddp_checkpointing"]["False"]["error"].startswith("Expected to have finished reduction")
    assert TRACE["ddp_checkpointing"]["True"]["buckets"] == ddp["buckets"]
    held, left_out = _held("ddp", parallel={"dp": 2})
    assert held["gradients"] == sum(ddp["grads"].values()) == 10_605_812
    assert left_out == 186_624
    assert _terms(_workload(stack="ddp", parallel={"dp": 2}))["gradients.ddp_buckets"] == 10_792_436


def _rank0_chunks(shapes) -> int:
    """Elements of rank 0's FSDP2 shards of these tensors: torch.chunk of dim 0 in 2, the first ⌈rows / 2⌉ rows."""
    total = 0
    for shape in shapes:
        rest = 1
        for x in shape[1:]:
            rest *= x
        total += -(-shape[0] // 2) * rest
    return total


def test_fsdp2_keeps_fp32_shards_and_computes_the_fp32_kept_parameters_in_bf16():
    """fully_shard refuses the model as loaded (uniform original dtype); under accelerate's fp32 upcast and
    MixedPrecisionPolicy(param_dtype=bf16) attn_hc.fn runs in bf16 and rank 0's forward saves 7,720,216 B, exactly
    what one process of the model with every parameter bf16 saves (the cast model the estimate runs on:
    stacks.model_as_run; tests/model/mappers/test_deepseek_v4_cast.py holds compressed_saved to it). Rank 0 holds
    10,379,020 B of fp32 shards: each parameter's first ⌈dim0 / 2⌉ rows; the engine's ⌈N / 2⌉ × 4 B = 10,379,004 B
    (16 B of per-tensor rounding). Its fp32 gradient shards are 10,193,548 B: the 12 indexer tensors of the two CSA
    layers get none (185,472 B of shards); the engine's FSDP2 leaves the same out (NO_GRAD), 16 B of rounding short."""
    assert "uniform original parameter dtype" in TRACE["fsdp2_bf16_model"]
    fsdp = TRACE["fsdp2_accelerate"]
    assert fsdp["attn_hc_fn_dtype_in_forward"] == "torch.bfloat16"
    assert fsdp["saved_total"] == TRACE["saved_tensors"]["computed_in_bf16_total"] == 7_720_216
    shapes = model_tensor_shapes(SPEC)
    assert fsdp["shards"] == {"torch.float32": 4 * _rank0_chunks(shapes)} == {"torch.float32": 10_379_020}
    indexer = compressed.compressor_shapes(SPEC, "compressed_sparse")[-6:]  # kv_proj, gate_proj, position_bias, ...
    assert fsdp["shards"]["torch.float32"] - fsdp["grad_shards"]["torch.float32"] == 4 * 2 * _rank0_chunks(indexer)
    held, left_out = _held("fsdp2", parallel={"dp": 2})  # ⌈N / 2⌉ − ⌈N_indexers / 2⌉ fp32 gradients: 16 B short
    assert (held["gradients"], left_out) == (10_193_532, 4 * 2 * _rank0_chunks(indexer)) == (
        fsdp["grad_shards"]["torch.float32"] - 16, 185_472)
    t = _terms(_workload(stack="fsdp2", parallel={"dp": 2}))
    assert t["weights"] == 4 * -(-TRACE["parameters"] // 2) == 10_379_004
    assert "weights.fp32" not in t and "gradients.fp32" not in t
    # the root unit gathered in bf16: embedding, LM head, final norm and hc_head (n·n·h + n + 1)
    assert t["sharding.fsdp2_root"] == 2 * (2 * 1024 * 256 + 256 + 4 * 4 * 256 + 4 + 1)


@pytest.mark.parametrize("stage,partition", [(2, 2_594_752), (3, 2_594_755)])
def test_deepspeed_casts_the_fp32_kept_parameters_to_bf16(stage, partition):
    """deepspeed.initialize (DeepSpeed 0.19, CPU accelerator, bf16): every one of the 5,189,501 parameters is bf16
    afterwards (the 206,717 fp32-kept ones cast by _cast_module_mixed_precision), the forward saves what the cast
    model saves (7,720,216 B), and rank 0's fp32 master partition is half the parameters: 2,594,752 elements under
    ZeRO-2 (the flat group padded to an even count), 2,594,755 under ZeRO-3 (each parameter padded); the engine's
    ⌈N / 2⌉ = 2,594,751 (4 and 16 B of padding)."""
    ds = TRACE["deepspeed"][f"zero{stage}"]
    assert ds["param_elements"] == {"torch.bfloat16": TRACE["parameters"], "torch.float32": 0}
    assert ds["saved_total"] == TRACE["saved_tensors"]["computed_in_bf16_total"]
    assert ds["fp32_partition_elements"] == partition
    t = _terms(_workload(stack="deepspeed", parallel={"dp": 2, "zero": stage}))
    assert t["master_weights"] == 4 * -(-TRACE["parameters"] // 2) == 4 * (partition - (1 if stage == 2 else 4))
    assert "weights.fp32" not in t and "gradients.fp32" not in t
    assert t["weights"] == 2 * (TRACE["parameters"] if stage == 2 else -(-TRACE["parameters"] // 2))


def test_the_saved_tensors_differ_when_the_fp32_kept_parameters_run_in_bf16():
    """With them in bf16 a 32-token forward saves 7,630,040 B in the modules instead of 6,978,772: each
    hyper-connection +98,304 B (F.linear's fp32 copy of its bf16 fn, 4·(2 + n)·n·n·h), each attention less (a bf16
    softmax over [scores | sinks], no cast): why DDP's and FSDP2's activations are priced apart."""
    saved = TRACE["saved_tensors"]
    assert (saved["kept_fp32"], saved["computed_in_bf16"]) == (6_978_772, 7_630_040)
    n, h = SPEC.hc_mult, SPEC.hidden_size
    kept, cast = saved["differ"]["model.layers.0.attn_hc"]
    assert cast - kept == 4 * (2 + n) * n * n * h == 98_304
    assert all(k > c for k, c in (v for name, v in saved["differ"].items() if name.endswith("self_attn")))
    ddp = _terms(_workload(stack="ddp", parallel={"dp": 2}))
    fsdp = _terms(_workload(stack="fsdp2", parallel={"dp": 2}))
    assert fsdp["activations.norms"] - ddp["activations.norms"] == 4 * 2 * 98_304  # 4 layers × 2 hyper-connections


@pytest.mark.parametrize("update,field,words", [
    ({"stack": "megatron", "parallel": {"dp": 2}}, "stack", "Megatron-LM trains its own model code"),
    ({"parallel": {"dp": 2, "distributed_optimizer": True}}, "stack", "Megatron-LM trains its own model code"),
    ({"parallel": {"dp": 2, "pp": 2}}, "pp", "data parallelism only"),
    ({"parallel": {"dp": 2, "ep": 2}}, "ep", "data parallelism only"),
    ({"parallel": {"dp": 2, "cp": 2}}, "cp", "data parallelism only"),
    ({"parallel": {"dp": 2, "tp": 2}}, "tp", "tensor parallelism"),
    ({"stack": "ddp", "parallel": {"dp": 2}, "finetune": "lora"}, "finetune", "PEFT"),
    ({"stack": "ddp", "parallel": {"dp": 2}, "recompute": "selective"}, "recompute", "recompute = selective"),
    ({"stack": "ddp", "parallel": {"dp": 2, "zero": 1}}, "stack", "ZeRO stages need stack deepspeed or fsdp2")])
def test_what_is_not_modelled_is_refused_naming_the_field(update, field, words):
    with pytest.raises(InputError) as err:
        estimate(SPEC, _workload(**update), with_fits=False)
    assert err.value.field == field and words in str(err.value), str(err.value)


def test_every_stack_says_what_it_does_with_fp32_kept_parameters():
    """One rule per stack (KeptDtype): hf-trainer and DDP keep the dtypes, FSDP2 and DeepSpeed cast them to bf16,
    Megatron is not modelled."""
    assert {name for name, m in MODULES.items() if m.FP32_KEPT.modelled} == {"hf-trainer", "ddp", "fsdp2", "deepspeed"}
    assert {name for name, m in MODULES.items() if m.FP32_KEPT.casts} == {"fsdp2", "deepspeed"}
    assert all(m.FP32_KEPT.rule for m in MODULES.values())


def test_ddp_with_gradient_checkpointing_warns_that_it_raises_without_find_unused_parameters():
    """The trace's second iteration under find_unused_parameters=False (what HF Trainer passes with gradient
    checkpointing) raised; the estimate says so, naming the setting, only when recompute is on."""
    assert TRACE["ddp_checkpointing"]["False"]["error"].startswith("Expected to have finished reduction")
    on = estimate(SPEC, _workload(stack="ddp", parallel={"dp": 2}, recompute="full"), with_fits=False)
    off = estimate(SPEC, _workload(stack="ddp", parallel={"dp": 2}), with_fits=False)
    one = estimate(SPEC, _workload(recompute="full"), with_fits=False)
    said = [x for x in on.warnings if "find_unused_parameters" in x]
    n, tensors = architectures.no_grad_parameters(SPEC, 0, SPEC.num_hidden_layers)
    assert tensors == TRACE["ddp"]["params_without_grad"] == 12
    assert len(said) == 1 and "ddp_find_unused_parameters=True" in said[0] and f"{n:,} parameters" in said[0]
    assert not any("find_unused_parameters" in x for x in off.warnings + one.warnings)
