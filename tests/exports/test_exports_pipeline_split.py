"""The Megatron-LM and torchtitan exports of Megatron's uneven pipeline splits (calculator/memory/pipeline_split.py):
the embedding / loss counted in the split and a layout string reach Megatron-LM's own parser (the flag record of
tests/data/exports/megatron_flags.json); torchtitan's first / last stage less layers say the same split."""
from calculator import Workload
from calculator.exports import export
from tests.export_cases import command_args, model, parsed, recorded_parser


def _megatron(w: Workload):
    text = export(model("qwen3-235b-a22b"), w, "megatron").text
    return recorded_parser("megatron").parse_args(command_args(text, "pretrain_gpt.py"))


def test_embedding_and_loss_in_the_split_reach_megatron():
    w = Workload(mode="train", seq_len=4096, parallel={"pp": 4, "dp": 2, "virtual_stages": 12,
                                                       "schedule": "interleaved", "num_microbatches": 8,
                                                       "pp_embedding_in_split": True, "pp_loss_in_split": True})
    ns = _megatron(w)
    assert parsed(ns, "account_for_embedding_in_pipeline_split") is True
    assert parsed(ns, "account_for_loss_in_pipeline_split") is True
    assert parsed(ns, "pipeline_model_parallel_layout") is None


def test_a_layout_reaches_megatron():
    layout = "Et*11|(t*12|)*6t*11L"  # 94 layers over PP8
    w = Workload(mode="train", seq_len=4096, parallel={"pp": 8, "num_microbatches": 8, "pp_layout": layout})
    assert parsed(_megatron(w), "pipeline_model_parallel_layout") == layout


def test_torchtitan_counts_the_embedding_and_loss_as_one_layer_fewer():
    w = Workload(mode="train", seq_len=4096, parallel={"pp": 4, "virtual_stages": 12, "schedule": "interleaved",
                                                       "num_microbatches": 8, "pp_embedding_in_split": True,
                                                       "pp_loss_in_split": True})
    text = export(model("qwen3-235b-a22b"), w, "torchtitan").text
    assert "pipeline_parallel_layers_per_stage 2" in text.replace("=", " ")
    assert "first_stage_less_layers 1" in text.replace("=", " ") and "last_stage_less_layers 1" in \
        text.replace("=", " ")
