"""Latent MoE (calculator/model/latent_moe.py; Nemotron-3 Super / Ultra): experts at moe_latent_size between two
projections. Saved activations are held to a CPU trace of the real NemotronHMoE at widths on either side of h."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calculator import Workload, estimate  # noqa: E402
from calculator.core.errors import InputError  # noqa: E402
from calculator.memory import activations as act  # noqa: E402
from calculator.model.hf_config import spec_from_hf_config  # noqa: E402
from calculator.model.parameters import count_parameters, layer_params  # noqa: E402
from calculator.model.presets import load_model  # noqa: E402
from calculator.model.spec import LayerKind  # noqa: E402
from calculator.timing import ops as O  # noqa: E402

from tests.model.mappers.test_ssm import SIZES  # noqa: E402

MOE = LayerKind("none", "moe")


def _tiny(latent: int | None):
    logging.getLogger("transformers").setLevel(logging.ERROR)
    kw = dict(SIZES["nemotron_h"], **({"moe_latent_size": latent} if latent else {}))
    config = transformers.AutoConfig.for_model("nemotron_h", **kw)
    return config, spec_from_hf_config(config.to_dict()).spec


@pytest.mark.parametrize("latent", [24, 96])  # h = 64: narrower and wider experts
def test_the_moe_layer_saves_what_the_real_one_does(latent):
    from validation.architectures import measure as M
    from validation.architectures.sources import Source
    config, spec = _tiny(latent)
    traced = M.activations(Source("nemotron_h", config.to_dict(), config, "test"), spec, "eager")["none+moe"]
    assert traced["engine"] == traced["reference"]
    # against the same block at h: the pairs' input and output at L, and fc2_latent_proj's input e·T·L
    _, plain = _tiny(None)
    w = Workload(seq_len=16, micro_batch=2, attention="eager", mixer_kernels="torch")
    d = act.dims(spec, w)
    S = d.T * spec.num_experts_per_tok
    change = act.exact_layer(spec, w, d, MOE).total - act.exact_layer(plain, w, d, MOE).total
    assert change == 2 * 2 * S * (latent - 64) + 2 * d.T * latent


def test_the_experts_are_latent_wide_and_the_projections_replicated():
    _, spec = _tiny(24)
    _, plain = _tiny(None)
    lat, base = layer_params(spec, 3), layer_params(plain, 3)  # layer 3 is the MoE block
    assert base.routed_experts == 4 * 2 * 32 * 64 and lat.routed_experts == 4 * 2 * 32 * 24
    assert lat.router - base.router == 2 * 64 * 24  # fc1 (24, 64) and fc2 (64, 24), no bias
    assert lat.tp_local(4) - base.tp_local(4) == 0  # the projections are whole on every TP rank, with the router


def test_nemotron_3_ultra_counts_its_card():
    spec = load_model("nemotron-3-ultra-550b-a55b").spec
    c = count_parameters(spec)
    assert (spec.moe_latent_size, spec.num_experts, spec.num_experts_per_tok) == (2048, 512, 22)
    assert c.total == 549_308_968_960 and round(c.active_per_token / 1e9) == 56  # the card: 550B, A55B


def test_the_time_model_runs_the_expert_gemms_at_the_latent_width():
    _, spec = _tiny(24)
    w = Workload(seq_len=16, micro_batch=2)
    d = act.dims(spec, w)
    ops = {o.name: o for o in O.layer_forward(spec, d, moe=True, window=None, eager=False, e_w=2, mixer="none",
                                              ffn="moe")}
    assert ops["MoE latent projection in"].flops == 2 * d.T * 64 * 24
    assert ops["MoE latent projection out"].flops == 2 * d.T * 24 * 64
    _, real = O.routed_pairs(spec, d.T)
    assert ops["Routed experts (grouped GEMM)"].flops == 2 * real * 24 * 32 * 2


def test_training_it_beyond_what_is_traced_is_refused_naming_the_field():
    spec = load_model("nemotron-3-ultra-550b-a55b").spec
    for kw, field in ((dict(finetune="lora"), "finetune"), (dict(impl="megatron-te", stack="megatron"), "impl")):
        with pytest.raises(InputError) as e:
            estimate(spec, Workload(gpu="b200", seq_len=1024, **kw), with_fits=False)
        assert e.value.field == field and "moe_latent_size" in str(e.value)
    # full fine-tuning and serving are estimated
    assert estimate(spec, Workload(gpu="b200", seq_len=1024), with_fits=False).peak_allocated_bytes > 0
    served = estimate(spec, Workload(mode="infer", engine="vllm", gpu="b200", seq_len=4096,
                                     parallel={"tp": 8}), with_fits=False)
    assert served.serving is not None
