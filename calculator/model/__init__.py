"""The model description: the ModelSpec the engine computes with, its exact parameter counts, reading a
(possibly hostile) config.json and mapping each Hugging Face `model_type` to a ModelSpec (with what a quantized
checkpoint stores: `checkpoint_quant`), the shipped presets
(models and the GPU catalogue), resolving what a user typed as a model, and the Hugging Face Hub client (`hub/`,
the only code of the engine that touches the network).

May import: calculator.core.
"""
