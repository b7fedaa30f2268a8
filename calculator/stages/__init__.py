"""The estimate: one pipeline stage of a training step or of generate() priced term by term (the term list and the
overheads every stage shares, what a training stage holds for the whole step, the activations and transients of
its peak), the pipeline's distinct stages computed once, RL post-training's phases, and estimate() that assembles
them into an Estimate.

May import: calculator.allocator, calculator.stacks, calculator.impls, calculator.engines, calculator.memory,
calculator.model, calculator.core. The planner is not imported: fit cards that need its search are assembled by
calculator.planning.
"""
