"""Model-state formulas of calculator/memory/model_states.py."""
from calculator import Workload, estimate
from calculator.memory import model_states as tr
from calculator.model.parameters import model_tensor_shapes
from calculator.model.presets import load_model


def test_bitsandbytes_adamw8bit_state_is_blockwise_with_small_tensors_in_fp32():
    # two uint8 states + an fp32 absmax per 256 elements each; a 2048-wide norm (< 4096 elements) keeps fp32 states
    assert tr.bnb_adamw8bit_state_bytes([(4096, 4096)]) == 2 * 4096 * 4096 + 8 * 4096 * 4096 // 256 + 2048
    assert tr.bnb_adamw8bit_state_bytes([(2048,)]) == 8 * 2048 + 2048
    assert tr.bnb_adamw8bit_state_bytes([(4097,)]) == 2 * 4097 + 8 * 17 + 2048
    # Llama-3.2-1B: 113 large tensors and 33 norms; the H200 held 2,510,833,664 B after step 1 (512 B rounding)
    m = load_model("llama-3.2-1b").spec
    state = tr.bnb_adamw8bit_state_bytes(model_tensor_shapes(m))
    large = 1_235_814_400 - 33 * 2048
    assert state == 2 * large + 8 * large // 256 + 8 * 33 * 2048 + 2048 == 2_510_653_440
    assert 0 <= 2_510_833_664 - state < 200_000
    w = Workload(micro_batch=2, seq_len=4096, optimizer="adamw-8bit", gpu="h200")
    assert estimate(m, w, with_fits=False).components["optimizer_states"] == state
