"""Published GPU measurements against the engine's estimate of the same number: one module per source of rows
(HF transformers docs, DeepSpeed, litgpt, Qwen, torchao, whole training stacks, serving-engine start-ups, seed 002),
the shared row record, and the driver that writes validation/published_comparison.json
(`python -m validation.published.compare`). Findings and calibrated constants: validation/CALIBRATION.md.

May import: calculator, and validation.trace for the rows reproduced by a trace.
"""
