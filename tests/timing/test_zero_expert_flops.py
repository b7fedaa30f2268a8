"""LongCat-Flash's zero-computation experts in the op model (calculator.timing.ops.routed_pairs): of the top-k picks
only k·n / (n + z) per token reach a real expert under balanced routing (calculator.model.zero_experts), and only
those run the experts' GEMMs (transformers models/longcat_flash/modeling_longcat_flash.py LongcatFlashExperts: a
pair sent to an identity expert is only scaled by its weight). Hand-computed on LongCat-Flash's published shape
(LongcatFlashConfig defaults: h 6144, 512 routed + 256 zero experts, top-12, expert width 2048); the planner's
vectorised time stays equal to estimate_time on it."""
import random

import pytest

pytest.importorskip("transformers")
import transformers  # noqa: E402

from calculator.core.workload import Workload  # noqa: E402
from calculator.memory.activations import dims  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.planning import fast_infer_time, fast_time  # noqa: E402
from calculator.planning.grid import layouts_of, workload_of  # noqa: E402
from calculator.timing.inputs import TimingInputs  # noqa: E402
from calculator.timing.ops import layer_forward, routed_pairs  # noqa: E402
from calculator.timing.step_time import estimate_time  # noqa: E402


def _longcat():
    return spec_from_hf_config(transformers.AutoConfig.for_model("longcat_flash").to_dict()).spec


def test_only_the_real_experts_picks_run_the_expert_gemms():
    m = _longcat()
    assert (m.hidden_size, m.num_experts, m.variant.zero_experts, m.num_experts_per_tok) == (6144, 512, 256, 12)
    assert m.expert_intermediate_size == 2048
    d = dims(m, Workload(seq_len=1024))
    T = 1024
    assert routed_pairs(m, T) == (12 * T, 8 * T)  # 12 · 512 / 768 = 8 real experts per token
    ops = {o.name: o for o in layer_forward(m, d, moe=True, window=None, eager=False, e_w=2, ffn="moe")}
    gemm = ops["Routed experts (grouped GEMM)"]
    assert gemm.flops == pytest.approx(2 * 8 * T * (6144 * 2 * 2048 + 2048 * 6144))  # 2·T·k'·(h·2f + f·h)
    # every pick is gathered, weighted and summed (8h), only the real ones gated (5f); bf16
    assert ops["Expert dispatch, gate and combine"].bytes == pytest.approx(2 * (12 * T * 8 * 6144 + 8 * T * 5 * 2048))
    assert ops["Router"].flops == pytest.approx(2 * T * 6144 * (512 + 256))  # scores the n + z experts


def test_models_without_zero_experts_keep_every_pick():
    from calculator.model.presets import load_model
    m = load_model("qwen3-30b-a3b").spec
    assert routed_pairs(m, 100) == (800, 800)


TIMING = TimingInputs(price_per_gpu_hour=2.5)


def test_planner_time_equals_estimate_time_on_longcat():
    m = _longcat()
    train = Workload(seq_len=4096, gpu="h200", impl="megatron-te")
    layouts = list(layouts_of(m, train, 256, global_batch=1024))
    got = fast_time.times(m, train, layouts, TIMING, 1024)
    assert got is not None
    for i in random.Random(7).sample(range(len(layouts)), min(8, len(layouts))):
        t = estimate_time(m, workload_of(train, layouts[i], 1024), TIMING)
        assert got["step_time_s"][i] == pytest.approx(t.step_time_s, rel=1e-9), layouts[i]
    serve = Workload(mode="infer", seq_len=4096, gen_tokens=128, micro_batch=8, gpu="h200")
    layouts = list(layouts_of(m, serve, 32))
    got = fast_infer_time.times(m, serve, layouts, TIMING)
    for i in random.Random(32).sample(range(len(layouts)), min(8, len(layouts))):
        t = estimate_time(m, workload_of(serve, layouts[i]), TIMING)
        assert got["step_time_s"][i] == pytest.approx(t.step_time_s, rel=1e-9), layouts[i]
