"""torchtitan's selective op AC with float8 linears (calculator.timing.train_ops.op_mode): the save list holds
aten.mm, not aten._scaled_mm, so every GEMM of the block is replayed, not every other one; hand-computed on
Llama-3.1-8B's forward GEMMs."""
import pytest

from calculator.core.workload import Workload
from calculator.memory.activations import dims
from calculator.model.presets import load_model
from calculator.timing import train_ops as T
from calculator.timing.inputs import TimingInputs


def _replayed_gemm_flops(inputs: TimingInputs) -> float:
    m = load_model("llama-3.1-8b").spec
    w = Workload(micro_batch=1, seq_len=1024, gpu="h200", impl="compile", recompute="op")
    d = dims(m, w)
    key = T.layer_key(m, 0)
    base = T.layer_ops(m, w.model_copy(update={"recompute": "none"}), d, key, inputs)
    ops = T.layer_ops(m, w, d, key, inputs)
    return sum(o.flops for o in ops[len(base):] if o.kind == "matmul")


def test_op_mode_picks_the_float8_replay_only_for_fp8_gemms_under_op_ac():
    w = Workload(micro_batch=1, seq_len=1024, gpu="h200", recompute="op")
    assert T.op_mode(w, TimingInputs(matmul_dtype="fp8")) == "op_fp8"
    assert T.op_mode(w, TimingInputs()) == "op"  # bf16 activations: aten.mm, every other one saved
    assert T.op_mode(w.model_copy(update={"recompute": "full"}), TimingInputs(matmul_dtype="fp8")) == "full"


def test_float8_op_ac_replays_every_forward_gemm_but_the_early_stopped_down_projection():
    # Llama-3.1-8B, T = 1024 tokens: q 4096² + k, v 4096·1024 each + o 4096² = 41,943,040 weights;
    # gate and up 2 × 4096·14336 = 117,440,512; down 58,720,256 (not replayed: recomputed() early stop)
    T_, attn, gate_up = 1024, 41_943_040, 117_440_512
    replayed = 2 * T_ * (attn + gate_up)  # 2·T·in·out per weight
    assert _replayed_gemm_flops(TimingInputs(matmul_dtype="fp8")) == pytest.approx(replayed)
    assert _replayed_gemm_flops(TimingInputs()) == pytest.approx(replayed / 2)
