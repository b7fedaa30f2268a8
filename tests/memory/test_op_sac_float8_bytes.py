"""torchtitan's selective op AC with float8 linears, memory side (calculator.memory.activations.op_selective_layer,
fp8.float8_gemms): the save list (llama3/parallelize_llama.py `_save_list` at e7c0cae) holds aten.mm, the SDPA
kernels, aten.max and reduce_scatter, not aten._scaled_mm, so with float8 linears no GEMM output is kept — the same
rule as the step time's replay (calculator.timing.train_ops.op_mode). Bytes by hand on Llama-3.1-8B's layer."""
from calculator.core.workload import Parallelism, Workload
from calculator.memory import fp8
from calculator.memory.activations import dims, op_selective_layer
from calculator.model.presets import load_model
from calculator.stages.estimate import estimate

T = 2 * 8192  # micro-batch 2 × 8192 tokens


def test_float8_linears_keep_no_matmul_output_only_the_block_input_and_the_sdpa_outputs():
    m = load_model("llama-3.1-8b").spec
    d = dims(m, Workload(micro_batch=2, seq_len=8192, recompute="op"))
    block_input, sdpa_out, lse = 2 * T * 4096, 2 * T * 4096, 4 * 32 * T  # bf16 h, bf16 q-width output, fp32 per head
    assert op_selective_layer(m, d, float8=True) == block_input + sdpa_out + lse == 270_532_608
    # bf16 linears keep q, v, gate, down (the 1st, 3rd, 5th, 7th aten.mm): 2·T·(4096 + 1024 + 14336 + 4096) more
    assert op_selective_layer(m, d) - op_selective_layer(m, d, float8=True) == 2 * T * 23_552 == 771_751_936


def test_the_float8_predicate_is_the_step_times():
    from calculator.timing import train_ops
    assert train_ops.FP8_RECIPES == fp8.GEMM_RECIPES
    for recipe in ("none", "delayed", "current", "blockwise", "mxfp8", "nvfp4"):
        w = Workload(seq_len=1024, fp8=recipe)
        assert fp8.float8_gemms(w) == (recipe in ("delayed", "current", "blockwise", "mxfp8"))


def test_estimate_drops_the_kept_matmul_outputs_of_every_layer():
    """Workload.fp8 is the estimate's float8 switch (Megatron-Core + TE; torchtitan's Float8Linear reaches the step
    time only, through TimingInputs.matmul_dtype): with it the step time replays every GEMM (op_mode 'op_fp8') and
    the layers keep 32 × 2·T·23,552 B less."""
    from calculator.timing import train_ops
    from calculator.timing.inputs import TimingInputs
    m = load_model("llama-3.1-8b").spec
    base = dict(micro_batch=2, seq_len=8192, gpu="h100-sxm", impl="megatron-te", recompute="op", stack="megatron",
                parallel=Parallelism(dp=8))

    def layers(**kw) -> int:
        est = estimate(m, Workload(**base, **kw))
        return sum(t.bytes for s in est.stages for t in s.terms if t.key == "activations.layers")

    assert train_ops.op_mode(Workload(**base, fp8="current"), TimingInputs()) == "op_fp8"
    assert layers() - layers(fp8="current") == 32 * 771_751_936  # 32 layers, one micro-batch in flight
