"""The Megatron-LM export is parsed with the flag definitions of Megatron-LM's own parser (megatron/training/
arguments.py add_megatron_arguments, commit recorded in tests/data/exports/megatron_flags.json): every flag must
exist, take a value of its type and one of its choices. The megatron-core wheel does not ship megatron/training."""
import pytest

from calculator.exports import export
from tests.export_cases import TRAINING, command_args, flag_record, model, parsed, recorded_parser


def parse(text: str):
    return recorded_parser("megatron").parse_args(command_args(text, "pretrain_gpt.py"))


def test_the_record_names_its_source():
    rec = flag_record("megatron")
    assert rec["source"] == "github.com/NVIDIA/Megatron-LM" and len(rec["commit"]) == 40
    assert rec["file"] == "megatron/training/arguments.py" and len(rec["flags"]) > 800


@pytest.mark.parametrize("case", list(TRAINING))
def test_every_training_case_parses(case):
    preset, w = TRAINING[case]
    ns = parse(export(model(preset), w, "megatron").text)
    p = w.parallel
    assert parsed(ns, "tensor_model_parallel_size") == p.tp
    assert parsed(ns, "pipeline_model_parallel_size") == p.pp
    assert parsed(ns, "context_parallel_size") == p.cp
    assert parsed(ns, "micro_batch_size") == w.micro_batch
    # Megatron runs global / (micro × dp) micro-batches per step
    assert parsed(ns, "global_batch_size") // (w.micro_batch * p.dp) == p.microbatches
    assert parsed(ns, "seq_length") == w.seq_len


def test_layout_and_recompute():
    preset, w = TRAINING["tp8-pp2-dp4"]
    ns = parse(export(model(preset), w, "megatron").text)
    assert parsed(ns, "sequence_parallel") and parsed(ns, "use_distributed_optimizer") and parsed(ns, "bf16")
    assert parsed(ns, "recompute_granularity") == "selective"
    assert parsed(ns, "num_query_groups") == 8 and parsed(ns, "num_layers") == 80
    preset, w = TRAINING["moe-ep"]
    ns = parse(export(model(preset), w, "megatron").text)
    assert parsed(ns, "expert_model_parallel_size") == 8 and parsed(ns, "num_experts") == 8
    assert parsed(ns, "moe_router_topk") == 2 and parsed(ns, "num_virtual_stages_per_pipeline_rank") == 2
    assert parsed(ns, "recompute_granularity") == "full" and parsed(ns, "recompute_method") == "uniform"


def test_mla_offload_and_bf16_optimizer_state():
    preset, w = TRAINING["mla-cp"]
    ns = parse(export(model(preset), w, "megatron").text)
    m = model(preset)
    assert parsed(ns, "multi_latent_attention") and parsed(ns, "kv_lora_rank") == m.kv_lora_rank
    assert parsed(ns, "qk_pos_emb_head_dim") == m.qk_rope_head_dim
    moe_layers = parsed(ns, "moe_layer_freq")
    assert moe_layers.startswith("[0,") and moe_layers.count("1") == m.moe_layer_count  # first layer dense
    preset, w = TRAINING["offload"]
    out = export(model(preset), w, "megatron")
    ns = parse(out.text)
    assert parsed(ns, "optimizer_cpu_offload") and parsed(ns, "use_distributed_optimizer")
    assert any("ZeRO-3" in line for line in out.warnings) and any("parameter offload" in x for x in out.warnings)
    preset, w = TRAINING["pure-bf16-zero2"]
    out = export(model(preset), w, "megatron")
    ns = parse(out.text)
    assert parsed(ns, "use_precision_aware_optimizer") and parsed(ns, "exp_avg_dtype") == "bf16"
    assert any("always keeps fp32 main parameters" in line for line in out.warnings)


def test_a_misspelt_flag_is_refused_by_the_recorded_parser():
    with pytest.raises(SystemExit):
        recorded_parser("megatron").parse_args(["--tensor-parallel-size", "2"])  # Megatron's is -model-parallel-


def test_uneven_first_and_last_stages():
    preset, w = TRAINING["uneven-pp16"]
    ns = parse(export(model(preset), w, "megatron").text)
    assert parsed(ns, "decoder_first_pipeline_num_layers") == 2 and parsed(ns, "decoder_last_pipeline_num_layers") == 3
    assert parsed(ns, "expert_model_parallel_size") == 8 and parsed(ns, "expert_tensor_parallel_size") == 1


@pytest.mark.parametrize("attention, backend", [("flash", "flash"), ("eager", "unfused"), ("sdpa", "fused")])
def test_attention_kernel(attention, backend):
    preset, w = TRAINING["zero3-dp8"]
    ns = parse(export(model(preset), w.model_copy(update={"attention": attention}), "megatron").text)
    assert parsed(ns, "attention_backend") == backend


def test_precision_aware_optimizer_and_bf16_gradient_reduction_are_written_as_megatrons_flags():
    from calculator import Workload
    w = Workload(stack="megatron", impl="megatron-te", gpu="h100-sxm", seq_len=2048, precision_aware_optimizer=True,
                 grad_reduce_in_bf16=True, parallel={"tp": 2, "dp": 4, "sequence_parallel": True,
                                                     "distributed_optimizer": True})
    ns = parse(export(model("llama-3.2-1b"), w, "megatron").text)
    assert parsed(ns, "use_precision_aware_optimizer") and parsed(ns, "grad_reduce_in_bf16")
    assert parsed(ns, "use_distributed_optimizer") and parsed(ns, "exp_avg_dtype") != "bf16"  # moments stay fp32


def test_megatron_fsdp_is_written_with_its_strategy_and_buffer_dtypes():
    from calculator import Workload
    w = Workload(stack="megatron", impl="megatron-te", gpu="h100-sxm", seq_len=2048, megatron_fsdp="optim_grads",
                 precision={"params": "bf16", "grads": "bf16", "master_weights": "fp32", "optimizer_states": "fp32"},
                 parallel={"tp": 2, "dp": 4, "sequence_parallel": True})
    ns = parse(export(model("llama-3.2-1b"), w, "megatron").text)
    assert parsed(ns, "use_megatron_fsdp") and parsed(ns, "data_parallel_sharding_strategy") == "optim_grads"
    assert parsed(ns, "megatron_fsdp_main_params_dtype") == "fp32"
    assert parsed(ns, "megatron_fsdp_main_grads_dtype") == "bf16" and parsed(ns, "use_distributed_optimizer")


def test_fine_grained_activation_offloading_and_recompute_modules():
    """Workload.offload_modules is Megatron's --fine-grained-activation-offloading --offload-modules, beside the
    selective recompute list (the CI runs' pair: megatron_ci rows M0319-M0322)."""
    preset, w = TRAINING["moe-ep"]
    w = w.model_copy(update={"recompute": "selective", "recompute_modules": ("layernorm", "mla_up_proj", "moe_act"),
                             "offload_modules": ("core_attn", "attn_proj", "expert_fc1")})
    ns = parse(export(model(preset), w, "megatron").text)
    assert parsed(ns, "fine_grained_activation_offloading")
    assert parsed(ns, "offload_modules") == ["core_attn", "attn_proj", "expert_fc1"]
    assert parsed(ns, "recompute_modules") == ["layernorm", "mla_up_proj", "moe_act"]
    none = parse(export(model(preset), TRAINING["moe-ep"][1], "megatron").text)
    assert not parsed(none, "fine_grained_activation_offloading")
