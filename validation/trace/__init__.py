"""Byte-exact traces of real `transformers` (and PEFT) code on the meta device or the CPU: the tracker of every
storage a step allocates and every tensor saved for backward, the CUDA kernels emulated from their source, the
model configs of the matrix, and the scripts that write the golden files of tests/golden/ and compare the engine
with them. Protocol: validation/README.md.

May import: torch, transformers, peft (validation/requirements.txt) and calculator.
"""
