"""What tensor parallelism leaves whole on every rank (LayerParams.tp_replicated, parameters.tp_replicated_shapes):
MLA's down projections and latent norms, DSA's indexer, DeepSeek-V4's shared-key and latent projections and its
compressors. The rest of a mixer is split by heads: LayerParams.tp_local(tp) = ⌈(split part) / tp⌉ + replicated."""
from __future__ import annotations

import json

import pytest

from calculator import Workload, estimate
from calculator.memory.parallel import stage_shards
from calculator.core.workload import Parallelism
from calculator.model.parameters import count_parameters, kind_params
from calculator.model.presets import load_model


def _layer(model_id: str, i: int = -1):
    m = load_model(model_id).spec
    return m, kind_params(m, m.layer_kind(m.num_hidden_layers - 1 if i < 0 else i))


def test_mla_keeps_its_down_projections_and_latent_norms_whole():
    """DeepSeek-V3 (h 7168, q_lora_rank 1536, kv_lora_rank 512, rope 64): q_a_proj 7168·1536 + q_a_layernorm 1536
    + kv_a_proj_with_mqa 7168·(512 + 64) + kv_a_layernorm 512 on every TP rank."""
    _, lay = _layer("deepseek-v3")
    assert lay.tp_replicated == 7168 * 1536 + 1536 + 7168 * 576 + 512 == 15_140_864
    split = lay.attention - lay.tp_replicated
    assert lay.tp_local(8) == -(-(split + lay.mlp + lay.shared_experts) // 8) + 15_140_864


def test_a_stage_shard_holds_the_replicated_part_once_per_rank():
    """TP8 against TP1 of the same stage (routed experts whole: expert TP 1): every layer's split part shrinks
    eightfold, its replicated part does not."""
    m = load_model("deepseek-v3").spec
    one, eight = stage_shards(m, Parallelism(tp=1))[0], stage_shards(m, Parallelism(tp=8, etp=1))[0]
    counts = count_parameters(m)
    replicated = sum(x.tp_replicated for x in counts.layers)
    split = sum(x.attention - x.tp_replicated + x.mlp + x.shared_experts for x in counts.layers)
    assert one.layer_linear - eight.layer_linear == pytest.approx(split - split / 8, abs=m.num_hidden_layers)
    assert eight.layer_linear >= replicated + split // 8


def test_softmax_attention_and_gated_deltanet_replicate_nothing():
    for model_id in ("llama-3.1-8b", "qwen3-next-80b-a3b"):
        m = load_model(model_id).spec
        assert all(x.tp_replicated == 0 for x in count_parameters(m).layers), model_id


def test_dsa_adds_its_whole_indexer():
    """GLM-5 (DSA on MLA): the indexer (wq_b, wk, k_norm weight and bias, weights_proj) beside MLA's replicated part."""
    m, lay = _layer("glm-5")
    ix, h = m.indexer, m.hidden_size
    indexer = m.q_lora_rank * ix.n_heads * ix.head_dim + h * ix.head_dim + 2 * ix.head_dim + h * ix.n_heads
    mla = h * m.q_lora_rank + m.q_lora_rank + h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
    assert lay.tp_replicated == mla + indexer


@pytest.mark.parametrize("model_type", ["deepseek_v2", "deepseek_v32", "glm_moe_dsa"])
def test_replicated_part_is_what_transformers_tp_plan_leaves_whole(tmp_path, model_type):
    """transformers' own tensor-parallel plan as the oracle: of layer 0's attention parameters, those no "colwise" /
    "rowwise" entry of base_model_tp_plan shards (q_a_proj and the latent norms are not named; kv_a_proj_with_mqa is
    "mla_kv_a_proj", whole on every rank; DSA's indexer is not named), counted on the real model built on the meta
    device, equal the engine's tp_replicated."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM, CONFIG_MAPPING
    extra = {"num_experts_per_tok": 2} if model_type == "deepseek_v2" else {}  # its class leaves it None
    config = type(CONFIG_MAPPING[model_type]())(num_hidden_layers=1, vocab_size=256, **extra)  # one layer
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_dict()))
    m = load_model(path).spec
    ours = kind_params(m, m.layer_kind(0)).tp_replicated
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    plan = {k.split(".self_attn.", 1)[1]: v for k, v in (config.base_model_tp_plan or {}).items() if ".self_attn." in k}
    split = {name for name, style in plan.items() if style in ("colwise", "rowwise")}
    whole = sum(p.numel() for name, p in model.model.layers[0].self_attn.named_parameters()
                if name.rsplit(".", 1)[0] not in split)
    assert ours == whole and ours > 0


def test_vllm_serves_deepseek_v4_with_tensor_parallelism_at_the_published_ratio():
    """vllm-project/vllm issue 51454 (vLLM 0.25.0, 8 × B200, DeepSeek-V4-Flash-0731, --kv-cache-dtype fp8 --block-size
    256 --max-num-batched-tokens 8192 --max-num-seqs 256 --gpu-memory-utilization 0.95) logs 20.43× concurrency at
    1,048,576 tokens under TP8 and 156.9× over DP8 + EP, 19.61 a rank: TP8 holds the one shared KV head whole on every
    rank (a DP rank's cache) but splits the attention's weights by heads, so it keeps 4.2% more cache. The engine
    (vLLM 0.33: two batches in flight, so fewer sequences than 0.25 logs either way) gives the same ratio."""
    m = load_model("deepseek-v4-flash").spec
    common = dict(mode="infer", engine="vllm", gpu="b200", seq_len=1_048_576, kv_dtype="fp8",
                  serving={"memory_fraction": 0.95, "max_num_batched_tokens": 8192, "max_num_seqs": 256,
                           "block_size": 256})
    tp8 = estimate(m, Workload(**common, parallel={"tp": 8}), with_fits=False).serving
    dp8 = estimate(m, Workload(**common, parallel={"dp": 8, "ep": 8}), with_fits=False).serving
    assert tp8.weights_bytes < dp8.weights_bytes  # the attention split by heads
    ratio = tp8.max_concurrent_seqs / dp8.max_concurrent_seqs
    assert ratio == pytest.approx(20.43 / (156.9 / 8), rel=0.01)


def test_deepseek_v4_tensor_parallelism_stays_refused_where_transformers_runs_it():
    from calculator.core.errors import InputError
    m = load_model("deepseek-v4-flash").spec
    for w in (Workload(mode="infer", parallel={"tp": 2}), Workload(attention="eager", parallel={"tp": 2})):
        with pytest.raises(InputError) as e:
            estimate(m, w, with_fits=False)
        assert e.value.field == "tp" and "vLLM or SGLang" in str(e.value)
