"""PyTorch's CUDA caching allocator, replayed: the allocator's rules (a reference version, a fast one on plain ints
and the same rules in C under `native/`), and the plan of a training step's tensors in the order the step allocates
and frees them, over which the replay runs to give reserved memory (what nvidia-smi sees).

May import: calculator.stacks, calculator.impls, calculator.memory, calculator.model, calculator.core.
"""
