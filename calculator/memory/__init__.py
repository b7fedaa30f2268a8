"""Memory terms, one formula each: the activations a decoder layer saves for backward (and the attention and
autocast details that change them), model states (weights, master weights, gradients, optimizer state), LoRA and
QLoRA, inference weights and KV cache, and how parallelism shards a model over GPUs.

May import: calculator.model, calculator.core.
"""
