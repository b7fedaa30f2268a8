"""Planning what to run: the planner's search over parallel layouts (and its vectorised byte model), the fit cards
with the fewest GPUs a real layout needs, the largest micro-batch and longest sequence that fit, the levers and
remedies when a job does not fit, sweeps over one input, and the step timeline.

May import: calculator.stages, calculator.timing and everything below them; never calculator.cli.
"""
