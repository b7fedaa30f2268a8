"""The calculator page as a screenshot reads it (dashboard/views/result.py, dashboard/views/tables.py): the workload in one
line, compact fit cards whose colour is the verdict's, a total row, a legend for every formula symbol, inputs that
do not apply disabled, a warning for a sequence beyond the model's context."""
from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from calculator import estimate
from calculator.model.presets import load_model
from calculator.core.workload import Parallelism, Workload
from dashboard.views.html_blocks import VERDICT_STYLE, fit_card
from dashboard.views.tables import SYMBOLS, _TOKEN, breakdown_rows, symbol_legend
from tests.html_read import read

APP = Path(__file__).resolve().parents[2] / "app.py"
LLAMA = load_model("llama-3.1-8b").spec


def run(query: dict) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


def summary(at: AppTest) -> str:
    from dashboard.safe_text import plain
    return plain(next(c.value for c in at.caption if "·" in c.value and "GPU" in c.value))


def test_summary_line_states_the_workload():
    at = run({"model": "llama-3.1-70b", "tp": "8", "pp": "2", "dp": "4", "zero": "1", "seq": "8192", "mbs": "2",
              "rc": "selective", "recipe": "megatron"})
    line = summary(at)
    for part in ("Llama-3.1-70B", "training", "micro-batch 2 × 8,192 tokens", "megatron", "adamw",
                 "recompute selective", "TP8 · PP2 · DP4 · ZeRO-1 = 64 GPUs", "stack deepspeed"):
        assert part in line, part
    infer = summary(run({"mode": "infer", "seq": "2048", "gen": "512", "mbs": "4"}))
    assert "inference" in infer and "batch 4 × (2,048 prompt + 512 generated) tokens" in infer
    assert "weights bf16, KV cache bf16" in infer
    # vLLM loads a quantized checkpoint as it is stored (calculator.memory.inference.serving_weight_dtypes)
    served = summary(run({"model": "gpt-oss-120b", "mode": "infer", "eng": "vllm", "gpu": "h100-sxm"}))
    assert "weights bf16 (routed experts fp4), KV cache bf16" in served and "vLLM" in served


def test_fit_card_colour_is_the_verdict_and_says_gpus_needed():
    est = estimate(LLAMA, Workload(gpu="h100-sxm"))
    cards = {f.verdict: fit_card(f, "GB") for f in est.fits}
    green, red = VERDICT_STYLE["fits"][0], VERDICT_STYLE["does not fit"][0]
    assert cards["fits"].count(green) == 2 and red not in cards["fits"]  # the badge and the share used
    assert cards["does not fit"].count(red) == 2 and green not in cards["does not fit"]
    f = next(f for f in est.fits if f.gpu == "h100-sxm")
    text = read(fit_card(f, "GB")).cards["h100-sxm"]["text"]
    assert text.startswith(f.name) and f"{f.utilization:.0%} used" in text and f"needs {f.gpus_needed} GPU" in text


def test_table_has_every_term_and_a_total_row():
    est = estimate(LLAMA, Workload(parallel=Parallelism(pp=4), gpu="h100-sxm"))
    rows = breakdown_rows(est, "GB")
    assert [r["Bytes"] for r in rows[:-1]] == [t.bytes for t in est.terms]
    assert rows[-1]["Component"] == "Total" and rows[-1]["Bytes"] == est.total_bytes == sum(t.bytes for t in est.terms)
    assert all(v is not None and v != "None" for r in rows for v in r.values())


def test_every_symbol_of_the_shown_formulas_is_in_the_legend():
    for w in (Workload(), Workload(mode="infer"), Workload(parallel=Parallelism(pp=4, dp=2, zero=3)),
              Workload(finetune="lora"), Workload(recompute="full"), Workload(finetune="qlora"),
              Workload(stack="fsdp2", parallel=Parallelism(dp=4, zero=3)),
              Workload(parallel=Parallelism(dp=2, zero=3, offload_optimizer=True))):
        est = estimate(LLAMA, w)
        legend = symbol_legend(est)
        for t in est.terms:
            for tok in _TOKEN.findall(t.formula):
                if "_" in tok or tok in ("e", "T", "t", "U", "V", "h", "s"):
                    assert tok in SYMBOLS, (tok, t.formula)
                    assert f"`{tok}" in legend, (tok, t.formula)


def test_recipe_is_disabled_in_inference_and_says_what_is_used():
    at = run({"mode": "infer"})
    recipe = at.selectbox(key="recipe")
    assert recipe.disabled
    assert any("Inference: weights in bf16" in c.value for c in at.sidebar.caption)
    assert not run({}).selectbox(key="recipe").disabled


def test_a_sequence_beyond_the_model_context_is_warned():
    limit = LLAMA.max_position_embeddings
    at = run({"seq": str(limit + 1)})
    texts = [w.value for w in at.warning]
    assert any("beyond this model's context" in t and f"{limit:,}" in t for t in texts)
    assert not [w for w in run({"seq": str(limit)}).warning if "beyond this model's context" in w.value]
